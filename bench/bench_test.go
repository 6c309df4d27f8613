// Package bench holds the go test benchmarks of elector's lease and election packages
// against the raw go-redis floor and the peers (github.com/bsm/redislock,
// github.com/go-redsync/redsync/v4), one sub-benchmark per implementation named impl=NAME so
// that `go tool benchstat -col /impl` compares them. cmd/electorbench runs them and puts
// benchstat's table in docs/PERFORMANCE.md.
package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/bench/internal/systems"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
)

// primitives returns the implementations compared, the floor first.
func primitives(tb testing.TB) []struct {
	impl string
	p    systems.Primitive
} {
	tb.Helper()
	return []struct {
		impl string
		p    systems.Primitive
	}{
		{"raw", systems.Raw},
		{"elector", systems.Elector},
		{"redislock", systems.Redislock},
		{"redsync", systems.Redsync},
	}
}

// client returns a client with one connection to a new redis-server.
func client(b *testing.B) *redis.Client {
	b.Helper()
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1, MaxRetries: -1})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func runOp(b *testing.B, op systems.Op) {
	ctx := context.Background()
	for i := 0; i < 100; i++ { // warm up: connection, scripts
		if err := op(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := op(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireRelease: one acquire and one release of a lease, on one connection.
func BenchmarkAcquireRelease(b *testing.B) {
	c := client(b)
	for i, p := range primitives(b) {
		b.Run("impl="+p.impl, func(b *testing.B) {
			op, err := p.p.Cycle(c, fmt.Sprintf("cycle-%d", i))
			if err != nil {
				b.Fatal(err)
			}
			runOp(b, op)
		})
	}
}

// BenchmarkRenew: one renewal of a held lease, on one connection.
func BenchmarkRenew(b *testing.B) {
	c := client(b)
	for i, p := range primitives(b) {
		b.Run("impl="+p.impl, func(b *testing.B) {
			op, err := p.p.Renew(context.Background(), c, fmt.Sprintf("renew-%d-%d", i, time.Now().UnixNano()))
			if err != nil {
				b.Fatal(err)
			}
			runOp(b, op)
		})
	}
}

// BenchmarkElectionHandover: pkg/election, two replicas; each op is one graceful handover
// (cancel with ReleaseOnCancel, the other replica's OnStartedLeading) and the restart of the
// old leader as a follower. handover-µs is the median from the release command to the new
// OnStartedLeading.
func BenchmarkElectionHandover(b *testing.B) {
	srv := redistest.Start(b)
	b.Run("impl=elector", func(b *testing.B) {
		lease := fmt.Sprintf("handover-%d", time.Now().UnixNano()) // each call of this function has its own election
		started := make(chan int, 4)
		released := make(chan time.Time, 4)
		var runners [2]systems.Runner
		for i := range runners {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
			b.Cleanup(func() { _ = c.Close() })
			r, err := systems.ElectorKind.New(systems.ReplicaConfig{
				Client: c, Lease: lease, Identity: fmt.Sprintf("r%d", i),
				Timing: systems.DefaultTiming, ReleaseOnCancel: true,
				Hooks: systems.Hooks{
					Started:  func(string) { started <- i },
					Released: func(at time.Time) { released <- at },
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			runners[i] = r
		}
		var cancels [2]context.CancelFunc
		var dones [2]chan error
		start := func(i int) {
			ctx, cancel := context.WithCancel(context.Background())
			cancels[i], dones[i] = cancel, make(chan error, 1)
			go func() { dones[i] <- runners[i].Run(ctx) }()
		}
		start(0)
		leader := <-started
		start(1)
		b.Cleanup(func() {
			for i := range cancels {
				cancels[i]()
				<-dones[i]
			}
		})
		time.Sleep(20 * time.Millisecond)
		var lat []time.Duration
		b.ReportAllocs()
		for b.Loop() {
			if len(started)+len(released) > 0 {
				b.Fatalf("stray events: %d starts, %d releases", len(started), len(released))
			}
			cancels[leader]()
			at := <-released
			next := <-started
			lat = append(lat, time.Since(at))
			if next == leader {
				b.Fatalf("replica %d led again", next)
			}
			<-dones[leader]
			start(leader)
			leader = next
			time.Sleep(2 * time.Millisecond) // the new follower subscribes
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "handover-µs")
	})
}

// BenchmarkElectionStartToLead: pkg/election on an empty lease, from New to
// OnStartedLeading (subscribe, acquire, start the callback), then a release.
func BenchmarkElectionStartToLead(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	b.Run("impl=elector", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n++
			started := make(chan struct{})
			e, err := election.New(election.Config{
				Client: c, LeaseName: fmt.Sprintf("start-%d", n), Identity: "r", ReleaseOnCancel: true,
				Callbacks: election.Callbacks{
					OnStartedLeading: func(ctx context.Context) { close(started); <-ctx.Done() },
					OnStoppedLeading: func() {},
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			<-started
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	})
}
