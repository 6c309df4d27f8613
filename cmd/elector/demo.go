package main

import (
	"context"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
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

// demoCmd is `elector demo`: the simulation of package cmd/elector/internal/demo on an embedded server,
// or on the Redis of --redis-addr.
func (c *cli) demoCmd(ctx context.Context, args []string) int {
	const who = "elector demo"
	cfg, realRedis, code, ok := c.parseDemo(args)
	if !ok {
		return code
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
	failures, err := demo.Run(ctx, c.stdout, cfg)
	if err != nil {
		return c.runtimeError(who, err)
	}
	if len(failures) > 0 {
		return exitError
	}
	return exitOK
}

// parseDemo parses and checks the flags of elector demo. realRedis tells whether
// --redis-addr was given; ok is false when the command must exit with code.
func (c *cli) parseDemo(args []string) (cfg demo.Config, realRedis bool, code int, ok bool) {
	cmd, _ := findCommand("demo")
	fs := newFlagSet(cmd)
	dg := fs.group("Demo flags")
	dg.IntVar(&cfg.Replicas, flagReplicas, 3, fmt.Sprintf("number of electors, 2 to %d", demo.MaxReplicas))
	dg.DurationVar(&cfg.Duration, flagDuration, 30*time.Second, "how long the demo runs")
	rg := fs.group("Redis flags (optional: without --redis-addr the demo starts an embedded server)")
	cfg.Redis.AddFlags(rg)
	// The demo's default is its embedded server, not the default address of the other commands.
	rg.Lookup(redisclient.FlagAddr).DefValue = ""
	fs.addKlogFlags()
	if code, done := c.parseArgs(fs, args); done {
		return cfg, false, code, false
	}
	realRedis = fs.changed(redisclient.FlagAddr)
	if err := c.checkDemo(fs, &cfg, realRedis); err != nil {
		return cfg, false, c.usageError("elector demo", err), false
	}
	t := demo.CallTimeout()
	cfg.Redis.DialTimeout, cfg.Redis.ReadTimeout, cfg.Redis.WriteTimeout = t, t, t
	cfg.Logger = logr.Discard()
	if klog.V(1).Enabled() {
		cfg.Logger = klog.Background()
	}
	return cfg, realRedis, 0, true
}

// checkDemo checks the parsed flags of elector demo.
func (c *cli) checkDemo(fs *flagSet, cfg *demo.Config, realRedis bool) error {
	switch {
	case fs.all.NArg() > 0:
		return errOnlyFlags(fs, "demo")
	case cfg.Replicas < 2 || cfg.Replicas > demo.MaxReplicas:
		return fmt.Errorf("--%s: must be from 2 to %d, got %d", flagReplicas, demo.MaxReplicas, cfg.Replicas)
	case cfg.Duration <= 0:
		return fmt.Errorf("--%s: must be a positive duration such as 30s, got %v", flagDuration, cfg.Duration)
	}
	if !realRedis {
		var other string
		fs.all.VisitAll(func(f *pflag.Flag) {
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
