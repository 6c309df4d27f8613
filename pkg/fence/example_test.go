package fence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/fence"
	"github.com/elector/elector/pkg/lease"
)

// redisAddr is the address of the redis-server that TestMain starts for the examples.
var redisAddr string

// TestMain starts one redis-server for the examples (they get no testing.TB to start their
// own); without redis-server the examples are skipped, or fail under CI.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &redisAddr)) }

// A leader writes with its term's fencing token. A replica paused past its lease wakes up
// after a newer term wrote, still believing it leads: its write is refused, and the error
// tells it to stop.
func ExampleFence() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()

	// Two terms of one lease, as two leaders in turn would hold them: the second's token is larger.
	l, err := lease.New(client, "example-orders", lease.Options{Identity: "pod-a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	var terms []lease.Record
	for range 2 {
		_, st, err := l.Acquire(ctx, 10*time.Second)
		if err != nil {
			fmt.Println(err)
			return
		}
		terms = append(terms, st.Record)
		_, _ = l.Release(ctx, st.Record)
	}
	old, current := terms[0].Token, terms[1].Token

	// The fence key and the keys it guards share a hash tag, for Redis Cluster.
	f, err := fence.New(client, "{example-orders}:fence")
	if err != nil {
		fmt.Println(err)
		return
	}
	const state = "{example-orders}:state"
	fmt.Println("current term writes:", f.Set(ctx, current, state, "written by the current term"))
	err = f.Set(ctx, old, state, "written by a stale leader")
	fmt.Println("stale term refused:", errors.Is(err, fence.ErrStale))
	seen, err := f.Seen(ctx)
	fmt.Println("the fence has seen the current token:", seen == current, err)
	fmt.Println(client.Get(ctx, state).Val())
	// Output:
	// current term writes: <nil>
	// stale term refused: true
	// the fence has seen the current token: true <nil>
	// written by the current term
}
