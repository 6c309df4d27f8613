package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/internal/redisclient"
	_ "github.com/elector/elector/pkg/fence" // registers fence.lua in the library
)

// functionsLong is the paragraph of elector install-functions's help.
const functionsLong = `Load elector's Lua scripts as a Redis function library (FUNCTION LOAD; Redis 7.0 or later,
Valkey) on the server, on every primary of a Cluster, or on the master through Sentinel, so
that elector's Redis user needs +fcall instead of +eval. Run it once per elector version, as a
user that may run FUNCTION LOAD and FUNCTION LIST (+function|load +function|list); loading a
version already there succeeds. --print prints the library instead, for
redis-cli -x FUNCTION LOAD < FILE. Exit 0 when the library is loaded, 1 when Redis refused it.`

// functionsTimeout bounds each Redis call of install-functions.
const functionsTimeout = 10 * time.Second

// functionsFlags are the flags of elector install-functions.
type functionsFlags struct {
	print bool
	redis redisclient.Config
}

// newFunctionsCmd returns `elector install-functions`.
func (c *cli) newFunctionsCmd() *cobra.Command {
	var ff functionsFlags
	cmd := c.newCommand("install-functions [flags] [--print]", "load elector's Lua scripts into Redis as a function library (FCALL without +eval)", functionsLong,
		func(ctx context.Context, cmd *cobra.Command, args []string) int {
			return c.installFunctions(ctx, cmd, args, &ff)
		})
	addGroup(cmd, "Install-functions flags", func(fs *pflag.FlagSet) {
		fs.BoolVar(&ff.print, "print", false, "print the library's text (for redis-cli -x FUNCTION LOAD) instead of loading it")
	})
	addGroup(cmd, redisGroup, ff.redis.AddFlags)
	addKlogFlags(cmd)
	return cmd
}

// installFunctions is `elector install-functions` once cobra parsed its flags.
func (c *cli) installFunctions(ctx context.Context, cmd *cobra.Command, args []string, ff *functionsFlags) int {
	const who = "elector install-functions"
	if len(args) > 0 {
		return c.usageError(who, errOnlyFlags(cmd, args))
	}
	name, text, err := lualib.Library()
	if err != nil {
		return c.runtimeError(who, err)
	}
	if ff.print {
		fmt.Fprint(c.stdout, text)
		return exitOK
	}
	if err := c.completeFunctions(ff); err != nil {
		return c.usageError(who, err)
	}
	client, err := redisclient.New(ff.redis)
	if err != nil {
		return c.runtimeError(who, fmt.Errorf("build the Redis client: %w", err))
	}
	defer func() { _ = client.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 3*functionsTimeout)
	defer cancel()
	loaded, err := lualib.Install(ctx, client)
	for _, l := range loaded {
		addr := l.Addr
		if addr == "" {
			addr = redisDescription(ff.redis)
		}
		verb := "loaded"
		if l.Already {
			verb = "already loaded"
		}
		fmt.Fprintf(c.stdout, "%s: library %s %s\n", addr, name, verb)
		if len(l.Others) > 0 {
			fmt.Fprintf(c.stdout, "%s: other elector libraries: %s (FUNCTION DELETE each once no elector of its version runs)\n",
				addr, strings.Join(l.Others, " "))
		}
	}
	if err != nil {
		return c.runtimeError(who, fmt.Errorf("%s: %w", redisDescription(ff.redis), err))
	}
	return exitOK
}

// completeFunctions reads the password and checks the Redis flags, without contacting Redis.
func (c *cli) completeFunctions(ff *functionsFlags) error {
	if err := ff.redis.LoadPassword(c.getenv); err != nil {
		return err
	}
	if err := requirePasswords(ff.redis); err != nil {
		return err
	}
	ff.redis.DialTimeout, ff.redis.ReadTimeout, ff.redis.WriteTimeout = functionsTimeout, functionsTimeout, functionsTimeout
	return ff.redis.Validate()
}
