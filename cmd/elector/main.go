// Command elector runs a leader election on a Redis lease.
//
//	elector run [flags] -- CMD [ARGS...]   run CMD only while this replica leads
//	elector sidecar [flags]                serve this replica's leadership over HTTP
//	elector status [flags]                 print who holds a lease
//	elector resign [flags]                 make the leader step down and wait for the next one
//	elector demo                           watch an election with failovers, no Redis needed
//	elector version                        print the version
//	elector install PATH                   copy this executable to PATH
//	elector completion SHELL               print a completion script: bash, zsh, fish, powershell
//
// Every flag can also be set from the environment as ELECTOR_<FLAG>; see docs/CLI.md for the
// flags, endpoints, signals and exit codes.
//
// The commands, their flags, help and completion are github.com/spf13/cobra's, on pflag.
// The command owns flags, help, exit codes, signals, the status file and the child process's
// lifecycle around an Elector. It must not implement election logic or build Redis keys: it
// configures package election and asks package lease (KeysFor, List, Get) for the rest.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/elector/elector/cmd/elector/internal/child"
)

// Exit codes of every command. `elector run` also exits with the code of its child.
const (
	exitOK    = 0 // success
	exitError = 1 // runtime error
	exitUsage = 2 // bad flag, value or argument
	// exitNoLeader: status found no holder; run lost its leadership with --exit-on-lost.
	exitNoLeader = 3
)

// envPrefix starts the environment variable of every flag: --redis-addr is ELECTOR_REDIS_ADDR.
const envPrefix = "ELECTOR"

// cli is what a command may use of its process: streams, environment, host name. main fills
// it from package os; tests of single commands may fill it otherwise.
type cli struct {
	stdin          *os.File
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
	environ        func() []string
	hostname       func() (string, error)
	executable     func() (string, error)
	// logs is the process's stderr for the logs, which never blocks a log call; nil in tests
	// of single commands, whose logs go where klog's defaults send them.
	logs *stderrLog
}

// getenv returns the value of an environment variable, "" when unset.
func (c *cli) getenv(name string) string {
	v, _ := c.lookupEnv(name)
	return v
}

func main() {
	c := &cli{
		stdin:      os.Stdin,
		stdout:     os.Stdout,
		stderr:     os.Stderr,
		lookupEnv:  os.LookupEnv,
		environ:    os.Environ,
		hostname:   os.Hostname,
		executable: os.Executable,
		logs:       newStderrLog(os.Stderr),
	}
	// go-redis reports some events (Sentinel failovers, dropped connections) through its
	// own logger, which would print unstructured lines to stderr; send them through klog.
	redis.SetLogger(redisLogger{})
	code := c.main(context.Background(), os.Args[1:])
	klog.Flush()
	c.logs.flush(2 * time.Second) // a stderr that nobody reads does not hold up the exit
	os.Exit(code)
}

// main runs the command named by args[0] and returns the exit code.
func (c *cli) main(ctx context.Context, args []string) int {
	if len(args) > 0 && args[0] == child.ShimArg {
		// Hidden: elector run re-executes itself as the shim between it and CMD.
		return child.RunShim(args[1:])
	}
	root := c.newRoot(c.commands()...)
	switch {
	case len(args) == 0:
		root.SetOut(c.stderr)
		_ = root.Help() // a failed write to stderr cannot be reported
		return exitUsage
	case args[0] == "--version":
		args = append([]string{"version"}, args[1:]...)
	case args[0] != "-h" && args[0] != "--help" && strings.HasPrefix(args[0], "-"):
		moved, ok := c.commandFirst(args)
		if !ok {
			return c.usageError("elector", fmt.Errorf("unknown flag %s: the command comes first, as in 'elector run --lease-name=NAME -- CMD'", args[0]))
		}
		args = moved
	}
	return c.execute(ctx, root, args)
}

// execute runs root with args and turns the outcome into an exit code: cobra's own errors
// (flags, arguments, prepare) are usage errors of the command they came from.
func (c *cli) execute(ctx context.Context, root *cobra.Command, args []string) int {
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	var status exitStatus
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &status):
		return int(status)
	}
	return c.usageError(cmd.CommandPath(), err)
}

// usageError prints err as the one line of a usage error and returns exitUsage.
func (c *cli) usageError(who string, err error) int {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	hint := "elector help"
	if who != "elector" {
		hint = who + " --help"
	}
	fmt.Fprintf(c.stderr, "%s: %s (see '%s')\n", who, msg, hint)
	return exitUsage
}

// runtimeError prints err and returns exitError.
func (c *cli) runtimeError(who string, err error) int {
	fmt.Fprintf(c.stderr, "%s: %v\n", who, err)
	return exitError
}

// redisLogger passes go-redis's own log messages to klog at verbosity 2.
type redisLogger struct{}

// Printf logs one go-redis message.
func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	klog.FromContext(ctx).V(2).Info("go-redis: " + strings.TrimSpace(fmt.Sprintf(format, v...)))
}
