// Command sharded-jobs runs one job per tenant, spread over all its replicas with
// election.Group: every tenant's job runs on exactly one replica at a time, each replica runs
// about its share, and the jobs of a replica that dies move to the others as their leases
// expire.
//
//	go run ./examples/sharded-jobs --redis-addr 127.0.0.1:6379 --identity pod-a &
//	go run ./examples/sharded-jobs --redis-addr 127.0.0.1:6379 --identity pod-b &
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/election"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sharded-jobs", flag.ContinueOnError)
	addr := fs.String("redis-addr", "127.0.0.1:6379", "Redis address")
	identity := fs.String("identity", os.Getenv("POD_NAME"), "this replica's identity (default $POD_NAME)")
	tenants := fs.Int("tenants", 12, "number of tenants")
	every := fs.Duration("every", time.Second, "interval of each tenant's job")
	lease := fs.Duration("lease", 3*time.Second, "lease duration (renew deadline 2/3 of it, retry period 1/6)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *identity == "" {
		*identity, _ = os.Hostname()
	}
	names := make([]string, *tenants)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%02d", i)
	}
	client := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true})
	defer client.Close()

	var mu sync.Mutex // serialises output lines
	say := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", a...)
	}
	g, err := election.NewGroup(election.GroupConfig{
		Client:        client,
		Group:         "example-tenants",
		Identity:      *identity,
		Leases:        names,
		LeaseDuration: *lease,
		RenewDeadline: *lease * 2 / 3,
		RetryPeriod:   *lease / 6,
		Callbacks: election.GroupCallbacks{
			// One tenant's job: runs while this replica holds the tenant's lease.
			OnStartedLeading: func(ctx context.Context, tenant string) {
				token := election.TokenFrom(ctx)
				t := time.NewTicker(*every)
				defer t.Stop()
				for n := 1; ; n++ {
					say("%s: job #%d of %s (token %d)", *identity, n, tenant, token)
					select {
					case <-ctx.Done():
						return
					case <-t.C:
					}
				}
			},
			OnStoppedLeading: func(tenant string) { say("%s: handed %s over", *identity, tenant) },
		},
	})
	if err != nil {
		return err
	}
	return g.Run(ctx)
}
