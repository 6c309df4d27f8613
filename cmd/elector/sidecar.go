package main

import (
	"context"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/elector/elector/pkg/election"
)

// sidecarLong is the paragraph of elector sidecar's help; docs/CLI.md#elector-sidecar has the
// endpoints' answers and the status file's format.
const sidecarLong = `Campaign for the lease and tell a neighbouring container whether this replica leads:
GET /leader (JSON: leader, token, Redis errors), /healthz (liveness, never tied to leading),
/readyz (200 only while leading), /metrics; POST /resign steps down. --status-file holds
"leader" and its deadline, or "follower". SIGTERM or SIGINT releases the lease and exits 0.`

// newSidecarCmd returns `elector sidecar`: campaign, serve the endpoints, release on SIGTERM.
func (c *cli) newSidecarCmd() *cobra.Command {
	var so serveOptions
	var co commonOptions
	var ko kubeOptions
	cmd := c.newCommand("sidecar [flags]", "serve this replica's leadership over HTTP and a status file, for a neighbouring container", sidecarLong,
		func(ctx context.Context, cmd *cobra.Command, args []string) int {
			return c.sidecar(ctx, cmd, args, &so, &co, &ko)
		})
	addGroup(cmd, "Sidecar flags", func(fs *pflag.FlagSet) { so.addFlags(fs, ":8080") })
	co.addFlags(cmd)
	co.addElectionFlags(cmd)
	addGroup(cmd, kubeGroup, ko.addFlags)
	addKlogFlags(cmd)
	return cmd
}

// sidecar checks the flags cmd parsed, then campaigns until SIGTERM or SIGINT.
func (c *cli) sidecar(ctx context.Context, cmd *cobra.Command, args []string, so *serveOptions, co *commonOptions, ko *kubeOptions) int {
	const who = "elector sidecar"
	if err := c.checkSidecar(cmd, args, so, co, ko); err != nil {
		return c.usageError(who, err)
	}
	sigs, stopSignals := catchSignals(syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	kh, err := startKube(ko, &co.lease)
	if err != nil {
		return c.runtimeError(who, err)
	}
	defer kh.close()
	so.collectors = c.logs.collectors()
	l, err := startReplica(co, so, kh.wrap(election.Callbacks{
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

// checkSidecar checks the arguments and flags of elector sidecar; every error is a usage error.
func (c *cli) checkSidecar(cmd *cobra.Command, args []string, so *serveOptions, co *commonOptions, ko *kubeOptions) error {
	if len(args) > 0 {
		return errOnlyFlags(cmd, args)
	}
	if err := co.complete(c); err != nil {
		return err
	}
	if err := so.validate(); err != nil {
		return err
	}
	return ko.complete(c)
}
