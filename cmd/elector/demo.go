package main

import (
	"context"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/elector/elector/cmd/elector/internal/demo"
	"github.com/elector/elector/cmd/elector/internal/demoredis"
	"github.com/elector/elector/internal/redisclient"
)

// Flag names of elector demo.
const (
	flagReplicas = "replicas"
	flagDuration = "duration"
)

// demoLong is the paragraph of elector demo's help; docs/CLI.md#elector-demo shows a run.
const demoLong = `Start an embedded Redis-compatible server on loopback (or use --redis-addr) and --replicas
electors, each leading with a toy job that makes fenced writes, while the leader crashes or
stops gracefully every few seconds. Prints a timeline and a summary; exits 1 if a safety
check failed (two leaders at once, a token that did not increase, a takeover before expiry).`

// demoRedisGroup is the heading of the demo's Redis flags.
const demoRedisGroup = "Redis flags (optional: without --redis-addr the demo starts an embedded server)"

// newDemoCmd returns `elector demo`: the simulation of package cmd/elector/internal/demo on an
// embedded server, or on the Redis of --redis-addr.
func (c *cli) newDemoCmd() *cobra.Command {
	var cfg demo.Config
	cmd := c.newCommand("demo [flags]", "watch replicas elect a leader through crashes and graceful stops; needs no Redis", demoLong,
		func(ctx context.Context, cmd *cobra.Command, args []string) int {
			return c.demo(ctx, cmd, args, &cfg)
		})
	addGroup(cmd, "Demo flags", func(fs *pflag.FlagSet) {
		fs.IntVar(&cfg.Replicas, flagReplicas, 3, fmt.Sprintf("number of electors, 2 to %d", demo.MaxReplicas))
		fs.DurationVar(&cfg.Duration, flagDuration, 30*time.Second, "how long the demo runs")
	})
	addGroup(cmd, demoRedisGroup, func(fs *pflag.FlagSet) {
		cfg.Redis.AddFlags(fs)
		// The demo's default is its embedded server, not the default address of the other commands.
		fs.Lookup(redisclient.FlagAddr).DefValue = ""
	})
	addKlogFlags(cmd)
	return cmd
}

// demo is `elector demo` once cobra parsed its flags.
func (c *cli) demo(ctx context.Context, cmd *cobra.Command, args []string, cfg *demo.Config) int {
	const who = "elector demo"
	realRedis, err := c.configureDemo(cmd, args, cfg)
	if err != nil {
		return c.usageError(who, err)
	}
	// Ctrl-C ends the demo early, with its summary.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if realRedis {
		cfg.Where = redisDescription(cfg.Redis)
	} else {
		srv, err := demoredis.Start(ctx, "127.0.0.1:0")
		if err != nil {
			return c.runtimeError(who, err)
		}
		defer srv.Close()
		t := demo.CallTimeout()
		cfg.Redis = redisclient.Config{
			Addrs: []string{srv.Addr()}, Mode: redisclient.ModeStandalone,
			DialTimeout: t, ReadTimeout: t, WriteTimeout: t,
		}
		cfg.Where = "an embedded Redis-compatible server (miniredis) at " + srv.Addr()
	}
	failures, err := demo.Run(ctx, c.stdout, *cfg)
	if err != nil {
		return c.runtimeError(who, err)
	}
	if len(failures) > 0 {
		return exitError
	}
	return exitOK
}

// configureDemo checks the flags cmd parsed and completes cfg; realRedis tells whether
// --redis-addr was given.
func (c *cli) configureDemo(cmd *cobra.Command, args []string, cfg *demo.Config) (realRedis bool, err error) {
	realRedis = cmd.Flags().Changed(redisclient.FlagAddr)
	if err := c.checkDemo(cmd, args, cfg, realRedis); err != nil {
		return false, err
	}
	t := demo.CallTimeout()
	cfg.Redis.DialTimeout, cfg.Redis.ReadTimeout, cfg.Redis.WriteTimeout = t, t, t
	cfg.Logger = logr.Discard()
	if klog.V(1).Enabled() {
		cfg.Logger = klog.Background()
	}
	return realRedis, nil
}

// checkDemo checks the parsed flags of elector demo.
func (c *cli) checkDemo(cmd *cobra.Command, args []string, cfg *demo.Config, realRedis bool) error {
	switch {
	case len(args) > 0:
		return errOnlyFlags(cmd, args)
	case cfg.Replicas < 2 || cfg.Replicas > demo.MaxReplicas:
		return fmt.Errorf("--%s: must be from 2 to %d, got %d", flagReplicas, demo.MaxReplicas, cfg.Replicas)
	case cfg.Duration <= 0:
		return fmt.Errorf("--%s: must be a positive duration such as 30s, got %v", flagDuration, cfg.Duration)
	}
	if !realRedis {
		var other string
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Changed && other == "" && isRedisFlag(f.Name) {
				other = f.Name
			}
		})
		if other != "" {
			return fmt.Errorf("--%s: only with --%s; without it the demo uses its embedded server", other, redisclient.FlagAddr)
		}
		return nil
	}
	if err := cfg.Redis.LoadPassword(c.getenv); err != nil {
		return err
	}
	return cfg.Redis.Validate()
}

// isRedisFlag reports whether name is one of the --redis-* or --sentinel-master flags.
func isRedisFlag(name string) bool {
	return strings.HasPrefix(name, "redis-") || name == redisclient.FlagSentinelMaster
}
