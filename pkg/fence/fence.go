// Package fence protects a resource stored in Redis from stale leaders with fencing tokens.
//
// A leader that was paused (a long GC, a frozen VM) can wake up after its lease expired and
// another replica began a new term, still believing it leads. No lease can prevent that; a
// fencing token can: each term's token is larger than every earlier one, the leader presents
// it with each write, and the resource refuses a token smaller than the largest it has seen.
//
// A Fence does this for writes to Redis: it keeps the largest accepted token in a key of its
// own and runs each write in the same Lua script as the check, so check and write are atomic.
//
// The package owns the fence key's value (the largest accepted token) and the check-and-write
// script. It must not acquire or renew leases: it trusts the token it is given, which package
// election hands to the leader (TokenFrom).
package fence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/internal/rediserr"
)

//go:embed fence.lua
var fenceSource string

// fenceScript is fence.lua, run as a function of elector's Redis function library (FCALL)
// where it is loaded, else with EVALSHA/EVAL; the client's mode decides (internal/leasewire/lualib).
// Not allow-oom: above maxmemory Redis refuses the whole fenced write rather than let a user's
// write through.
var fenceScript = lualib.Register("fence", fenceSource, false)

// ErrStale is matched (errors.Is) by the error of a write that presents a token smaller than
// one the fence has already accepted: a newer term exists, so the writer must stop acting as
// leader. The error's message names the token and the largest one the fence has seen.
var ErrStale = errors.New("stale fencing token")

// staleTokenError is the error of a write refused for a stale token (ErrStale).
type staleTokenError struct {
	Token, Seen int64
}

func (e *staleTokenError) Error() string {
	return fmt.Sprintf("fencing token %d is stale: the fence has seen %d", e.Token, e.Seen)
}

// Is makes errors.Is(err, ErrStale) true for a *staleTokenError.
func (e *staleTokenError) Is(target error) bool { return target == ErrStale }

// Fence guards writes with fencing tokens. In Redis Cluster the fence key and every key a
// write touches must share a hash tag, e.g. "{orders}:fence" and "{orders}:state".
type Fence struct {
	client  redis.UniversalClient
	key     string
	scripts *lualib.State // what the client's calls learned of its Redis
}

// New returns a fence that keeps the largest accepted token at key.
func New(client redis.UniversalClient, key string) (*Fence, error) {
	if client == nil {
		return nil, errors.New("new fence: redis client is nil")
	}
	if key == "" {
		return nil, errors.New("new fence: key must not be empty")
	}
	return &Fence{client: client, key: key, scripts: lualib.For(client)}, nil
}

// Do runs one Redis command, args (e.g. "SET", "k", "v"), touching keys, if token is not
// smaller than any token accepted before; then token becomes the one to beat. It returns the
// command's reply, or an error matching ErrStale without running it.
func (f *Fence) Do(ctx context.Context, token int64, keys []string, args ...any) (any, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("fenced write with token %d: no command given", token)
	}
	if token <= 0 {
		// Tokens of the protocol are positive; 0 is what Elector.Token says when not leading.
		return nil, fmt.Errorf("fenced write with token %d (fence %s): tokens are positive; 0 or less means the writer does not lead", token, f.key)
	}
	allKeys := make([]any, 0, 1+len(keys))
	allKeys = append(allKeys, f.key)
	for _, k := range keys {
		allKeys = append(allKeys, k)
	}
	argv := make([]any, 0, 1+len(args))
	argv = append(append(argv, token), args...)
	reply, err := fenceScript.Run(ctx, f.scripts, f.client, "", allKeys, argv...).Slice()
	if err != nil {
		return nil, fmt.Errorf("fenced write with token %d (fence %s): %w", token, f.key, fenceScript.Explain(err))
	}
	if len(reply) != 2 {
		return nil, fmt.Errorf("fenced write with token %d (fence %s): unexpected reply %v", token, f.key, reply)
	}
	if ok, _ := reply[0].(int64); ok != 1 {
		seen, _ := reply[1].(string)
		n, _ := strconv.ParseInt(seen, 10, 64)
		return nil, &staleTokenError{Token: token, Seen: n}
	}
	return reply[1], nil
}

// Set is Do(ctx, token, []string{key}, "SET", key, value).
func (f *Fence) Set(ctx context.Context, token int64, key string, value any) error {
	_, err := f.Do(ctx, token, []string{key}, "SET", key, value)
	return err
}

// Seen returns the largest token the fence has accepted, 0 if none.
func (f *Fence) Seen(ctx context.Context) (int64, error) {
	s, err := f.client.Get(ctx, f.key).Result()
	if rediserr.IsNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read fence %s: %w", f.key, err)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read fence %s: holds %q, not an integer", f.key, s)
	}
	return n, nil
}
