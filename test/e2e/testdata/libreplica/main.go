// Command libreplica is a replica written with the library, for the end-to-end tests: an
// election.Elector whose OnStartedLeading runs the test worker (testdata/worker) with the
// term's fencing token, and stops it with SIGTERM when the term's ctx is cancelled. It logs
// through klog's defaults, straight to stderr, as a library user's program does; the callback
// itself logs nothing. SIGTERM cancels Run (with ReleaseOnCancel).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/election"
)

func main() {
	addr := flag.String("redis-addr", "", "Redis address")
	name := flag.String("lease-name", "", "lease name")
	identity := flag.String("identity", "", "replica identity")
	leaseDuration := flag.Duration("lease-duration", 0, "LeaseDuration")
	renewDeadline := flag.Duration("renew-deadline", 0, "RenewDeadline")
	retryPeriod := flag.Duration("retry-period", 0, "RetryPeriod")
	flag.Parse()
	worker := flag.Args() // the worker's command line

	client := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	e, err := election.New(election.Config{
		Client: client, LeaseName: *name, Identity: *identity,
		LeaseDuration: *leaseDuration, RenewDeadline: *renewDeadline, RetryPeriod: *retryPeriod,
		ReleaseOnCancel: true, Recampaign: true,
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context) { work(ctx, worker, *identity, *name) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "libreplica:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := e.Run(ctx); err != nil {
		os.Exit(1)
	}
}

// work runs the worker until ctx is cancelled, then stops it and waits for its exit.
func work(ctx context.Context, argv []string, identity, lease string) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "ELECTOR_FENCING_TOKEN="+strconv.FormatInt(election.TokenFrom(ctx), 10),
		"ELECTOR_IDENTITY="+identity, "ELECTOR_LEASE_NAME="+lease)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(100 * time.Millisecond):
			_ = cmd.Process.Kill()
			<-done
		}
	case <-done:
	}
}
