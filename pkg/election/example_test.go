package election_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
)

// redisAddr is the address of the redis-server that runWithRedis starts for the examples.
var redisAddr string

// runWithRedis runs m with one redis-server for the examples (they get no testing.TB to
// start their own); without redis-server the examples are skipped, or fail under CI.
func runWithRedis(m *testing.M) int { return redistest.Main(m, &redisAddr) }

// An Elector runs OnStartedLeading while this replica leads, with a ctx that carries the
// term's fencing token and ends when the term can no longer be trusted. Cancelling Run's ctx
// ends the term and, with ReleaseOnCancel, releases the lease at once.
func ExampleElector() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()

	var mu sync.Mutex
	var leaders []string
	leading := make(chan int64, 1)
	e, err := election.New(election.Config{
		Client:    client,
		LeaseName: "example-report",
		Identity:  "pod-a",
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				// Present the token with every write a stale leader must not make (package fence).
				leading <- election.TokenFrom(ctx)
				<-ctx.Done() // do the singleton work until the term ends
			},
			OnStoppedLeading: func() { fmt.Println("stopped leading") },
			OnNewLeader: func(identity string) {
				mu.Lock()
				leaders = append(leaders, identity)
				mu.Unlock()
			},
		},
		ReleaseOnCancel: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()

	select {
	case token := <-leading:
		fmt.Println("leading, with a fencing token:", token > 0)
	case <-time.After(10 * time.Second):
		fmt.Println("not leading")
	}
	cancel()
	fmt.Println("Run returned:", <-done)
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("leaders observed:", leaders) // Run delivers every OnNewLeader before it returns
	// Output:
	// leading, with a fencing token: true
	// stopped leading
	// Run returned: <nil>
	// leaders observed: [pod-a]
}

// A Group campaigns for many leases over one client; the replicas of a group share the
// leases evenly. Alone, this replica leads them all, one OnStartedLeading per lease and term.
func ExampleGroup() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()

	started := make(chan string, 2)
	g, err := election.NewGroup(election.GroupConfig{
		Client:   client,
		Group:    "example-shards",
		Identity: "pod-a",
		Leases:   []string{"shard-0", "shard-1"},
		Callbacks: election.GroupCallbacks{
			OnStartedLeading: func(ctx context.Context, name string) {
				started <- name
				<-ctx.Done() // work on shard name, fenced with election.TokenFrom(ctx), until the term ends
			},
			OnStoppedLeading: func(name string) {},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()

	var names []string
	for len(names) < 2 {
		select {
		case name := <-started:
			names = append(names, name)
		case <-time.After(10 * time.Second):
			fmt.Println("leading only", names)
			return
		}
	}
	slices.Sort(names)
	fmt.Println("leading:", names)
	cancel() // every term stops, and Run releases the leases
	fmt.Println("Run returned:", <-done)
	// Output:
	// leading: [shard-0 shard-1]
	// Run returned: <nil>
}

// With very many leases, OnStartedLeading may hand each term to workers of the user's own
// and return at once, so that no goroutine waits per term (a blocked goroutine costs a few
// kilobytes; bench/scale measures both forms). The work must stop when ctx is cancelled, as
// the lease is released right after, and write with the fencing token. Here the workers read
// the set of streams led, which context.AfterFunc keeps without a goroutine per term.
func ExampleGroupCallbacks_returnAtOnce() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()

	var mu sync.Mutex
	led := map[string]int64{} // stream -> fencing token: what the workers may work on
	stopped := make(chan string, 2)
	g, err := election.NewGroup(election.GroupConfig{
		Client:   client,
		Group:    "example-many-streams",
		Identity: "pod-a",
		Leases:   []string{"stream-0", "stream-1"},
		Callbacks: election.GroupCallbacks{
			OnStartedLeading: func(ctx context.Context, name string) {
				mu.Lock()
				led[name] = election.TokenFrom(ctx)
				mu.Unlock()
				context.AfterFunc(ctx, func() {
					mu.Lock()
					delete(led, name)
					mu.Unlock()
				})
			},
			OnStoppedLeading: func(name string) { stopped <- name },
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(led)
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			fmt.Println("leading", n, "streams")
			return
		}
	}
	fmt.Println("leading 2 streams; held:", len(g.Held()))
	cancel() // every ctx is cancelled, the leases are released, then OnStoppedLeading runs
	fmt.Println("Run returned:", <-done)
	names := []string{<-stopped, <-stopped}
	slices.Sort(names)
	fmt.Println("stopped:", names)
	// Output:
	// leading 2 streams; held: 2
	// Run returned: <nil>
	// stopped: [stream-0 stream-1]
}
