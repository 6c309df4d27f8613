package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/elector/elector/pkg/election"
)

// sidecarCmd is `elector sidecar`: campaign, serve the endpoints, release on SIGTERM.
func (c *cli) sidecarCmd(ctx context.Context, args []string) int {
	cmd, _ := findCommand("sidecar")
	const who = "elector sidecar"
	fs := newFlagSet(cmd)
	var so serveOptions
	so.addFlags(fs.group("Sidecar flags"), ":8080")
	var co commonOptions
	co.addFlags(fs)
	co.addElectionFlags(fs)
	fs.addKlogFlags()
	if code, done := c.parseArgs(fs, args); done {
		return code
	}
	var err error
	if fs.all.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q: elector sidecar takes only flags", fs.all.Arg(0))
	}
	if err == nil {
		err = co.complete(c)
	}
	if err == nil {
		err = so.validate()
	}
	if err != nil {
		return c.usageError(who, err)
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	l, err := startLeadership(&co, &so, election.Callbacks{
		OnStartedLeading: func(ctx context.Context) { <-ctx.Done() },
		OnStoppedLeading: func() {},
		OnNewLeader:      logNewLeader,
	}, false)
	if err != nil {
		return c.runtimeError(who, err)
	}
	klog.InfoS("Campaigning", "lease", co.lease.name, "identity", co.lease.identity, "redis", redisDescription(co.redis))

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- l.elector.Run(runCtx) }()
	httpErr := make(chan error, 1)
	l.serveHTTP(httpErr)

	var runErr, runtimeErr error
	for running := true; running; {
		select {
		case s := <-sigs:
			klog.InfoS("Received signal: releasing the lease and exiting", "signal", s)
			cancel()
		case err := <-httpErr:
			runtimeErr = err
			cancel()
		case runErr = <-errc:
			running = false
		}
	}
	l.close()
	switch {
	case runErr != nil:
		return c.runtimeError(who, runErr)
	case runtimeErr != nil:
		return c.runtimeError(who, runtimeErr)
	}
	return exitOK
}
