package main

import (
	"context"
	goflag "flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/elector/elector/cmd/elector/internal/envflag"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/redisclient"
)

// Annotations of elector's commands and flags.
const (
	groupAnnotation = "elector/group" // a flag's heading in the help
	envAnnotation   = "elector/env"   // a command whose flags ELECTOR_* variables set
)

// logGroup is the heading of klog's flags and --log-format.
const logGroup = "Logging flags (klog; its other flags such as --log_file and --logtostderr work too)"

func init() {
	cobra.EnableCommandSorting = false // the help lists the commands in the order of commands()
}

// exitStatus carries a command's exit code, other than exitOK, out of cobra's Execute.
type exitStatus int

// Error says which code the command exits with.
func (e exitStatus) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// newCommand returns a command of elector whose flags ELECTOR_* variables may set: use is its
// synopsis after "elector ", short its line in the command list, long its help's paragraph;
// body returns the exit code.
func (c *cli) newCommand(use, short, long string, body func(ctx context.Context, cmd *cobra.Command, args []string) int) *cobra.Command {
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long,
		Annotations: map[string]string{envAnnotation: "true"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := body(cmd.Context(), cmd, args); code != exitOK {
				return exitStatus(code)
			}
			return nil
		},
	}
	cmd.Flags().SortFlags = false
	return cmd
}

// commands returns elector's commands, in the order of the help. The hidden shim entry point
// (child.ShimArg) is not one of them: main dispatches it before any parsing.
func (c *cli) commands() []*cobra.Command {
	run, _ := c.newRunCmd()
	return []*cobra.Command{run, c.newSidecarCmd(), c.newStatusCmd(), c.newResignCmd(), c.newDemoCmd(),
		c.newVersionCmd(), c.newInstallCmd(), c.newFunctionsCmd()}
}

// newRoot returns the command `elector` with the subcommands cmds, then cobra's `elector
// completion` and `elector help`.
func (c *cli) newRoot(cmds ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:   "elector",
		Short: "leader election on a Redis lease, for singleton jobs and Kubernetes sidecars",
		Args: func(root *cobra.Command, args []string) error {
			if len(args) > 0 {
				return errUnknownCommand(root, args[0])
			}
			return nil
		},
		RunE:              func(*cobra.Command, []string) error { return exitStatus(exitUsage) },
		PersistentPreRunE: c.prepare,
		SilenceErrors:     true,
		SilenceUsage:      true,
		// cobra's suggestions (SuggestionsFor): a prefix, or two edits at most.
		SuggestionsMinimumDistance: 2,
	}
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetFlagErrorFunc(flagError)
	root.SetHelpTemplate(helpTemplate)
	root.AddCommand(cmds...)
	for _, cmd := range cmds {
		addValueCompletions(cmd)
	}
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	for _, cmd := range root.Commands() {
		switch cmd.Name() {
		case "completion":
			c.adaptCompletionCmd(cmd)
		case "help":
			cmd.Use, cmd.Short, cmd.Long = "help [COMMAND]", "show help for elector or one command", "Show the help of elector, or of COMMAND."
			cmd.Args = helpArgs
		}
	}
	return root
}

// helpArgs refuses what `elector help` has no help for, as a usage error.
func helpArgs(cmd *cobra.Command, args []string) error {
	root := cmd.Root()
	if len(args) > 1 {
		return fmt.Errorf("unexpected argument %q: want elector help [COMMAND]", args[1])
	}
	if len(args) == 1 && args[0] != "help" {
		if sub, _, err := root.Find(args); err != nil || sub == root || !sub.IsAvailableCommand() {
			return errUnknownCommand(root, args[0])
		}
	}
	return nil
}

// addGroup registers the flags that add registers on cmd, under the help heading title;
// flags added under one title from several places are listed together.
func addGroup(cmd *cobra.Command, title string, add func(*pflag.FlagSet)) {
	fs := pflag.NewFlagSet(title, pflag.ContinueOnError)
	fs.SortFlags = false
	add(fs)
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[groupAnnotation] = []string{title}
	})
	cmd.Flags().AddFlagSet(fs)
}

// addKlogFlags adds --log-format and klog's flags (-v, --vmodule, hidden: the others) as the
// last group; prepare sets the logging up from them.
func addKlogFlags(cmd *cobra.Command) {
	addGroup(cmd, logGroup, func(fs *pflag.FlagSet) {
		fs.String(flagLogFormat, logFormatText, "log `format`: text (klog's) or json (one JSON object per line, through log/slog)")
		gofs := goflag.NewFlagSet("klog", goflag.ContinueOnError)
		klog.InitFlags(gofs)
		fs.AddGoFlagSet(gofs)
		fs.VisitAll(func(f *pflag.Flag) {
			f.Hidden = f.Name != "v" && f.Name != "vmodule" && f.Name != flagLogFormat
		})
	})
}

// prepare runs after cobra parsed the flags of cmd and before its body: it refuses unknown
// ELECTOR_* variables, fills every flag not given on the command line from its variable, and
// sets the logging up. Every error is a usage error.
func (c *cli) prepare(cmd *cobra.Command, _ []string) error {
	if cmd.Annotations[envAnnotation] == "" {
		return nil
	}
	if err := envflag.CheckUnknown(c.environ(), envPrefix, knownEnv(cmd.Root()), notASetting); err != nil {
		return err
	}
	fs := cmd.Flags()
	if fs.Lookup("help") != nil {
		if err := envflag.MarkNoEnv(fs, "help"); err != nil {
			return err
		}
	}
	if err := envflag.Apply(fs, envPrefix, c.lookupEnv); err != nil {
		return err
	}
	if f := fs.Lookup(flagLogFormat); f != nil {
		return setupLogging(c.stderr, c.logs, f.Value.String(), fs)
	}
	return nil
}

// knownEnv lists the variable of every flag of every command under root.
func knownEnv(root *cobra.Command) []string {
	var known []string
	for _, cmd := range root.Commands() {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" {
				known = append(known, envflag.EnvName(envPrefix, f.Name))
			}
		})
	}
	return known
}

// serviceLink matches the variables Kubernetes gives every container of a namespace for each
// Service (enableServiceLinks, on by default): a Service called elector or elector-… yields
// ELECTOR_SERVICE_HOST, ELECTOR_PORT=tcp://…, ELECTOR_PORT_8080_TCP_ADDR and the like.
var serviceLink = regexp.MustCompile(`_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)$`)

// envRequireRedis is the project's test switch (internal/testing/redistest): set, tests fail
// instead of skipping without redis-server. CI sets it in its whole environment, which the
// elector processes its tests start inherit.
const envRequireRedis = "ELECTOR_REQUIRE_REDIS"

// notASetting accepts the ELECTOR_* variables that are no flag's but are not typos either:
// those elector run gives its command (which may run elector in turn), the tests' switch and
// Kubernetes' service links.
func notASetting(name, value string) bool {
	switch {
	case name == envFencingToken || name == envIdentity || name == envLeaseName || name == envRequireRedis:
		return true
	case strings.HasSuffix(name, "_PORT"):
		return strings.HasPrefix(value, "tcp://") || strings.HasPrefix(value, "udp://") || strings.HasPrefix(value, "sctp://")
	}
	return serviceLink.MatchString(name)
}

// flagError turns pflag's parse errors into elector's: --redis-password is explained, and an
// unknown flag close to a visible one gets "did you mean".
func flagError(cmd *cobra.Command, err error) error {
	const prefix = "unknown flag: --"
	msg := err.Error()
	if arg, ok := strings.CutPrefix(msg, "unknown shorthand flag: "); ok {
		// "-redis-password=s3cr3t" (one dash) parses as shorthands, and pflag's message quotes
		// the whole argument: never echo a value, and explain the password.
		_, arg, _ = strings.Cut(arg, " in ")
		name, _, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if name == "redis-password" || name == "sentinel-password" {
			return errPasswordFlag(name)
		}
		if hasValue {
			arg = "-" + name + "=…"
		}
		return fmt.Errorf("unknown shorthand flag in %s: a long flag takes two dashes (--%s)", arg, name)
	}
	if !strings.HasPrefix(msg, prefix) {
		return err
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(msg, prefix), "=")
	if name == "redis-password" || name == "sentinel-password" {
		return errPasswordFlag(name)
	}
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	if s := envflag.Closest(name, names); s != "" {
		return fmt.Errorf("%w; did you mean --%s?", err, s)
	}
	return err
}

// errPasswordFlag explains why a password is not a flag, without its value.
func errPasswordFlag(name string) error {
	env, file := redisclient.PasswordEnv, redisclient.FlagPasswordFile
	if name == "sentinel-password" {
		env, file = redisclient.SentinelPasswordEnv, redisclient.FlagSentinelPasswordFile
	}
	return fmt.Errorf("--%s is not a flag, because a password on the command line shows in ps: set the %s environment variable or --%s",
		name, env, file)
}

// errUnknownCommand returns the error for an unknown command name, with cobra's suggestion.
func errUnknownCommand(root *cobra.Command, name string) error {
	var names []string
	for _, cmd := range root.Commands() {
		if cmd.IsAvailableCommand() {
			names = append(names, cmd.Name())
		}
	}
	list := strings.Join(append(names, "help"), ", ")
	if s := root.SuggestionsFor(name); len(s) > 0 {
		return fmt.Errorf("unknown command %q; did you mean %q? commands: %s", name, s[0], list)
	}
	return fmt.Errorf("unknown command %q; commands: %s", name, list)
}

// errOnlyFlags is the usage error for the first argument of a command that takes only flags.
// A command with --lease-name suggests it for a word that is a valid lease name: `elector
// status nightly` is most likely `elector status --lease-name=nightly`.
func errOnlyFlags(cmd *cobra.Command, args []string) error {
	err := fmt.Errorf("unexpected argument %q: elector %s takes only flags", args[0], cmd.Name())
	if cmd.Flags().Lookup(flagLeaseName) != nil && leasewire.ValidateName(args[0]) == nil {
		return fmt.Errorf("%w; did you mean --%s=%s?", err, flagLeaseName, args[0])
	}
	return err
}

// commandFirst accepts flags before the command, as kubectl and etcdctl do: for
// `elector --redis-addr=X status -o json` it returns `status --redis-addr=X -o json`. The
// command is the first argument that names one and before which every argument parses as
// that command's flags (so a flag's value that happens to be a command name is not taken
// for it); false when there is none.
func (c *cli) commandFirst(args []string) ([]string, bool) {
	cmds := c.commands()
	for i, a := range args {
		if a == "--" {
			return nil, false
		}
		for _, cmd := range cmds {
			if cmd.Name() != a || cmd.Annotations[envAnnotation] == "" {
				continue
			}
			fs := cmd.Flags()
			fs.SetOutput(io.Discard)
			if fs.Parse(args[:i]) == nil && fs.NArg() == 0 {
				return append(append([]string{a}, args[:i]...), args[i+1:]...), true
			}
		}
	}
	return nil, false
}
