package schedule

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire/lualib"
)

// caller runs one of the package's scripts: through lualib (FCALL, or EVALSHA/EVAL where the
// function library is not loaded) in production; the simulator's node in its tests.
type caller interface {
	call(ctx context.Context, s *lualib.Script, keys []string, args ...any) (any, error)
}

type redisCaller struct {
	client redis.UniversalClient
	st     *lualib.State // what the client's calls learned of its Redis
}

func (c redisCaller) call(ctx context.Context, s *lualib.Script, keys []string, args ...any) (any, error) {
	k := make([]any, len(keys))
	for i, key := range keys {
		k[i] = key
	}
	v, err := s.Run(ctx, c.st, c.client, "", k, args...).Result()
	if err != nil {
		return nil, s.Explain(err)
	}
	return v, nil
}

// reply decodes a script's array reply of at least n integers (read.lua's is decoded apart).
func intsReply(name string, v any, n int) ([]int64, error) {
	a, ok := v.([]any)
	if !ok || len(a) < n {
		return nil, fmt.Errorf("%s: unexpected reply %v", name, v)
	}
	out := make([]int64, len(a))
	for i, x := range a {
		switch x := x.(type) {
		case int64:
			out[i] = x
		default:
			return nil, fmt.Errorf("%s: unexpected reply %v", name, v)
		}
	}
	return out, nil
}

// view is what read.lua returns: the server's time and the state.
type view struct {
	now time.Time
	has bool // the schedule key exists
	st  state
}

func decodeRead(v any) (view, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 2 {
		return view{}, fmt.Errorf("read schedule: unexpected reply %v", v)
	}
	ms, ok := a[0].(int64)
	if !ok {
		return view{}, fmt.Errorf("read schedule: unexpected reply %v", v)
	}
	out := view{now: time.UnixMilli(ms).UTC()}
	if s, ok := a[1].(string); ok {
		st, err := parseState(s)
		if err != nil {
			return view{}, fmt.Errorf("read schedule: %w", err)
		}
		out.has, out.st = true, st
	}
	return out, nil
}

func ms(t time.Time) string { return strconv.FormatInt(msOf(t), 10) }
