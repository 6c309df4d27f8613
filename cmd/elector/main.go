// Command elector runs a leader election on a Redis lease.
//
//	elector run [flags] -- CMD [ARGS...]   run CMD only while this replica leads
//	elector sidecar [flags]                serve this replica's leadership over HTTP
//	elector status [flags]                 print who holds a lease
//	elector resign [flags]                 make the leader step down and wait for the next one
//	elector demo                           watch an election with failovers, no Redis needed
//	elector version                        print the version
//	elector install PATH                   copy this executable to PATH
//	elector completion bash|zsh|fish       print a shell completion script
//
// Every flag can also be set from the environment as ELECTOR_<FLAG>; see docs/CLI.md for the
// flags, endpoints, signals and exit codes.
//
// The command owns flags, help, exit codes, signals, the status file and the child process's
// lifecycle around an Elector. It must not implement election logic or build Redis keys: it
// configures package election and asks package lease (KeysFor, List, Get) for the rest.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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
	// flagSink, when set, receives the flag set of a command instead of parsing: completion
	// runs each command with it to learn its flags.
	flagSink func(*flagSet)
	// logs is the process's stderr for the logs, which never blocks a log call; nil in tests
	// of single commands, whose logs go where klog's defaults send them.
	logs *stderrLog
}

// getenv returns the value of an environment variable, "" when unset.
func (c *cli) getenv(name string) string {
	v, _ := c.lookupEnv(name)
	return v
}

// command is one subcommand of elector.
type command struct {
	name     string
	synopsis string // usage line after "elector "
	short    string // one line for the command list
	run      func(c *cli, ctx context.Context, args []string) int
}

// commands returns the subcommands in the order of the help text.
func commands() []command {
	return []command{
		{"run", "run [flags] -- CMD [ARGS...]", "run CMD only while this replica leads the lease (singleton job runner)", (*cli).runCmd},
		{"sidecar", "sidecar [flags]", "serve this replica's leadership over HTTP and a status file, for a neighbouring container", (*cli).sidecarCmd},
		{"status", "status [flags] [-o text|json|yaml] [--watch]", "print the holder, fencing token and remaining time of a lease", (*cli).statusCmd},
		{"resign", "resign [flags] [--to IDENTITY] [-o text|json|yaml]", "ask the holder of a lease to step down, and wait for the next leader (switchover)", (*cli).resignCmd},
		{"demo", "demo [flags]", "watch replicas elect a leader through crashes and graceful stops; needs no Redis", (*cli).demoCmd},
		{"version", "version", "print the version, commit and Go version", (*cli).versionCmd},
		{"install", "install PATH", "copy this executable to PATH with mode 0755 (for init containers)", (*cli).installCmd},
		{"completion", "completion bash|zsh|fish", "print a shell completion script for bash, zsh or fish", (*cli).completionCmd},
		{"help", "help [COMMAND]", "show help for elector or one command", (*cli).helpCmd},
	}
}

// findCommand returns the command called name.
func findCommand(name string) (command, bool) {
	for _, cmd := range commands() {
		if cmd.name == name {
			return cmd, true
		}
	}
	return command{}, false
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
	if len(args) == 0 {
		fmt.Fprint(c.stderr, mainHelp())
		return exitUsage
	}
	switch name := args[0]; {
	case name == "-h" || name == "--help":
		fmt.Fprint(c.stdout, mainHelp())
		return exitOK
	case name == child.ShimArg:
		// Hidden: elector run re-executes itself as the shim between it and CMD.
		return child.RunShim(args[1:])
	case name == "--version":
		return c.versionCmd(ctx, args[1:])
	case strings.HasPrefix(name, "-"):
		if moved, ok := c.commandFirst(args); ok {
			return c.main(ctx, moved)
		}
		return c.usageError("elector", fmt.Errorf("unknown flag %s: the command comes first, as in 'elector run --lease-name=NAME -- CMD'", name))
	default:
		cmd, ok := findCommand(name)
		if !ok {
			return c.usageError("elector", errUnknownCommand(name))
		}
		return cmd.run(c, ctx, args[1:])
	}
}

// commandFirst accepts flags before the command, as kubectl and etcdctl do: for
// `elector --redis-addr=X status -o json` it returns `status --redis-addr=X -o json`. The
// command is the first argument that names one and before which every argument parses as
// that command's flags (so a flag's value that happens to be a command name is not taken
// for it); false when there is none.
func (c *cli) commandFirst(args []string) ([]string, bool) {
	for i, a := range args {
		if a == "--" {
			return nil, false
		}
		cmd, ok := findCommand(a)
		if !ok || cmd.name == "help" || cmd.name == "completion" {
			continue
		}
		parsed := false
		sub := *c
		sub.flagSink = func(fs *flagSet) {
			fs.all.SetOutput(io.Discard)
			parsed = fs.all.Parse(args[:i]) == nil && fs.all.NArg() == 0
		}
		cmd.run(&sub, context.Background(), nil)
		if parsed {
			return append(append([]string{a}, args[:i]...), args[i+1:]...), true
		}
	}
	return nil, false
}

// commandNames lists the commands for error messages.
func commandNames() string {
	var names []string
	for _, cmd := range commands() {
		names = append(names, cmd.name)
	}
	return strings.Join(names, ", ")
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
