package lease_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// redisAddr is the address of the redis-server that TestMain starts for the examples and tests.
var redisAddr string

// TestMain starts one redis-server for the examples (they get no testing.TB to start their
// own); without redis-server they are skipped, or fail under CI.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &redisAddr)) }

// A term of a lease: the holder acquires it, renews it within its TTL and releases it; a
// follower learns who holds it and for how long; a released term cannot be renewed, and
// the next term has a larger fencing token.
func ExampleLease_Acquire() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()

	holder, err := lease.New(client, "example-job", lease.Options{Identity: "pod-a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	acquired, st, err := holder.Acquire(ctx, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	term := st.Record // the term's token is term.Token
	fmt.Println("pod-a acquired:", acquired)

	follower, err := lease.New(client, "example-job", lease.Options{Identity: "pod-b"})
	if err != nil {
		fmt.Println(err)
		return
	}
	acquired, st, err = follower.Acquire(ctx, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("pod-b acquired:", acquired, "- held by", st.Record.Identity, "for at most", st.TTL.Round(time.Second))

	renewed, err := holder.Renew(ctx, term, 10*time.Second)
	fmt.Println("pod-a renewed:", renewed, err)
	released, err := holder.Release(ctx, term)
	fmt.Println("pod-a released:", released, err)
	renewed, err = holder.Renew(ctx, term, 10*time.Second)
	fmt.Println("pod-a renewed the released term:", renewed, err)

	acquired, st, err = follower.Acquire(ctx, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("pod-b acquired:", acquired, "- with a larger token:", st.Record.Token > term.Token)
	_, _ = follower.Release(ctx, st.Record)
	// Output:
	// pod-a acquired: true
	// pod-b acquired: false - held by pod-a for at most 10s
	// pod-a renewed: true <nil>
	// pod-a released: true <nil>
	// pod-a renewed the released term: false <nil>
	// pod-b acquired: true - with a larger token: true
}
