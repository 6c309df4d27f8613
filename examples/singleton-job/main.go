// Command singleton-job is the in-process variant of job.sh: a periodic job that runs only on
// the replica that leads, written with election.New and Run. Start it on several machines (or
// several shells) against one Redis: one runs the job, the others wait; Ctrl-C on the leader
// hands the job over in about a millisecond.
//
//	go run ./examples/singleton-job --redis-addr 127.0.0.1:6379 --identity pod-a
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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
	fs := flag.NewFlagSet("singleton-job", flag.ContinueOnError)
	addr := fs.String("redis-addr", "127.0.0.1:6379", "Redis address")
	identity := fs.String("identity", os.Getenv("POD_NAME"), "this replica's identity (default $POD_NAME)")
	every := fs.Duration("every", 5*time.Second, "interval of the job")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *identity == "" {
		*identity, _ = os.Hostname()
	}
	client := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true})
	defer client.Close()

	e, err := election.New(election.Config{
		Client:          client,
		LeaseName:       "example-singleton-job",
		Identity:        *identity,
		ReleaseOnCancel: true,
		Recampaign:      true,
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				t := time.NewTicker(*every)
				defer t.Stop()
				for n := 1; ; n++ {
					fmt.Fprintf(out, "%s: run #%d (token %d)\n", *identity, n, election.TokenFrom(ctx))
					select {
					case <-ctx.Done():
						return
					case <-t.C:
					}
				}
			},
			OnStoppedLeading: func() { fmt.Fprintf(out, "%s: stopped\n", *identity) },
		},
	})
	if err != nil {
		return err
	}
	return e.Run(ctx)
}
