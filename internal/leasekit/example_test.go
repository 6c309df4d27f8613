package leasekit_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// redisAddr is the address of the redis-server that TestMain starts for the examples.
var redisAddr string

// TestMain starts one redis-server for the examples (they get no testing.TB to start their
// own); without redis-server the examples are skipped, or fail under CI.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &redisAddr)) }

// An observer subscribes to a lease's events: it learns of every acquisition and release
// without polling. Subscribe returns once Redis confirmed the subscription, so no later
// event is missed.
func ExampleLease_Subscribe() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()

	observer, err := leasekit.New(client, "example-watched", lease.Options{}) // no identity: it never acquires
	if err != nil {
		fmt.Println(err)
		return
	}
	sub, err := observer.Subscribe(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()

	holder, err := leasekit.New(client, "example-watched", lease.Options{Identity: "pod-a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, st, err := holder.Acquire(ctx, 10*time.Second); err == nil {
		_, _ = holder.Release(ctx, st.Record)
	}
	for range 2 {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				fmt.Println("the subscription ended")
				return
			}
			fmt.Println(ev.Kind, "by", ev.Record.Identity)
		case <-time.After(10 * time.Second):
			fmt.Println("no event")
			return
		}
	}
	// Output:
	// acquired by pod-a
	// released by pod-a
}
