// Command goclient is the reference client of the conformance suite's process contract
// (test/conformance/CONTRACT.md), built on package election: the Go library as the suite
// drives every other client. Configured by the ELECTOR_* environment variables; reads
// commands on stdin, reports on stdout, logs on stderr.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/election"
)

var outMu sync.Mutex

func say(words ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintln(os.Stdout, words...)
}

func ms(name string) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goclient: %s=%q: %v\n", name, v, err)
		os.Exit(2)
	}
	return time.Duration(n) * time.Millisecond
}

func main() {
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("ELECTOR_REDIS_ADDR"), ContextTimeoutEnabled: true})
	var token int64 // the current term's, for OnStoppedLeading
	var tokMu sync.Mutex
	e, err := election.New(election.Config{
		Client:        client,
		LeaseName:     os.Getenv("ELECTOR_LEASE_NAME"),
		KeyPrefix:     os.Getenv("ELECTOR_KEY_PREFIX"),
		Identity:      os.Getenv("ELECTOR_IDENTITY"),
		LeaseDuration: ms("ELECTOR_LEASE_DURATION_MS"),
		RenewDeadline: ms("ELECTOR_RENEW_DEADLINE_MS"),
		RetryPeriod:   ms("ELECTOR_RETRY_PERIOD_MS"),
		ResignHoldOff: ms("ELECTOR_RESIGN_HOLD_OFF_MS"),
		Recampaign:    true, ReleaseOnCancel: true,
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				t := election.TokenFrom(ctx)
				tokMu.Lock()
				token = t
				tokMu.Unlock()
				say("started", t, time.Now().UnixNano())
				<-ctx.Done()
			},
			OnStoppedLeading: func() {
				tokMu.Lock()
				t := token
				tokMu.Unlock()
				say("stopped", t, time.Now().UnixNano())
			},
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "goclient:", err)
		os.Exit(2)
	}
	say("ready", "go")
	var (
		cancel context.CancelFunc
		done   chan struct{}
	)
	stop := func() {
		if cancel != nil {
			cancel()
			<-done
			cancel = nil
		}
		say("idle", time.Now().UnixNano())
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(in.Text()), " ")
		switch cmd {
		case "campaign":
			if cancel == nil {
				var ctx context.Context
				ctx, cancel = context.WithCancel(context.Background())
				done = make(chan struct{})
				go func() {
					defer close(done)
					if err := e.Run(ctx); err != nil {
						fmt.Fprintln(os.Stderr, "goclient: Run:", err)
					}
				}()
			}
		case "stop":
			stop()
		case "resign":
			go func() {
				// Forced: the client under test need not advertise itself (rule R15 is
				// optional), and the rules checked here are the election's, not the registry's.
				if err := e.ResignTo(leasekit.WithForce(context.Background()), arg); err != nil {
					say("resign", "error", err)
					return
				}
				say("resign", "ok")
			}()
		case "exit":
			stop()
			return
		}
	}
	stop()
}
