package main

import (
	"context"
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
	var ko kubeOptions
	ko.addFlags(fs.group("Kubernetes flags"))
	fs.addKlogFlags()
	if code, done := c.parseArgs(fs, args); done {
		return code
	}
	var err error
	if fs.all.NArg() > 0 {
		err = errOnlyFlags(fs, "sidecar")
	}
	if err == nil {
		err = co.complete(c)
	}
	if err == nil {
		err = so.validate()
	}
	if err == nil {
		err = ko.complete(c)
	}
	if err != nil {
		return c.usageError(who, err)
	}

	sigs, stopSignals := catchSignals(syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	kh, err := startKube(&ko, &co.lease)
	if err != nil {
		return c.runtimeError(who, err)
	}
	defer kh.close()
	l, err := startReplica(&co, &so, kh.wrap(election.Callbacks{
		OnStartedLeading: func(ctx context.Context) { <-ctx.Done() },
		OnStoppedLeading: func() {},
		OnNewLeader:      logNewLeader,
	}), false, kh)
	if err != nil {
		return c.runtimeError(who, err)
	}
	klog.InfoS("Campaigning", "lease", co.lease.name, "identity", co.lease.identity, "redis", redisDescription(co.redis))
	sess := newSession(l, sigs, sessionHooks{stopMsg: "Received signal: releasing the lease and exiting"})
	return c.exitCode(who, sess.run(ctx))
}
