package main

import (
	"errors"
	goflag "flag"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/elector/elector/cmd/elector/internal/envflag"
	"github.com/elector/elector/internal/lease"
	"github.com/elector/elector/internal/redisclient"
)

// flagSet holds the flags of one command in titled groups, so that help lists them by topic;
// parse merges them into one pflag.FlagSet.
type flagSet struct {
	cmd       command
	all       *pflag.FlagSet
	groups    []flagGroup
	help      bool
	logging   bool   // addKlogFlags was called
	logFormat string // --log-format
}

type flagGroup struct {
	title string
	fs    *pflag.FlagSet
}

// newFlagSet returns the empty flag set of cmd.
func newFlagSet(cmd command) *flagSet {
	all := pflag.NewFlagSet("elector "+cmd.name, pflag.ContinueOnError)
	all.SetOutput(io.Discard) // errors are reported by parse, in one line
	all.Usage = func() {}
	all.SortFlags = false
	return &flagSet{cmd: cmd, all: all}
}

// group returns the group of flags titled title, new and empty the first time: flags added
// under one title from several places are listed under one heading.
func (f *flagSet) group(title string) *pflag.FlagSet {
	for _, g := range f.groups {
		if g.title == title {
			return g.fs
		}
	}
	fs := pflag.NewFlagSet(title, pflag.ContinueOnError)
	fs.SortFlags = false
	f.groups = append(f.groups, flagGroup{title: title, fs: fs})
	return fs
}

// addKlogFlags adds --log-format and klog's flags (-v, --vmodule, ...) as the last group.
func (f *flagSet) addKlogFlags() {
	gofs := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(gofs)
	g := f.group("Logging flags (klog; its other flags such as --log_file and --logtostderr work too)")
	g.StringVar(&f.logFormat, flagLogFormat, logFormatText, "log `format`: text (klog's) or json (one JSON object per line, through log/slog)")
	g.AddGoFlagSet(gofs)
	g.VisitAll(func(fl *pflag.Flag) {
		if fl.Name != "v" && fl.Name != "vmodule" && fl.Name != flagLogFormat {
			fl.Hidden = true
		}
	})
	f.logging = true
}

// errHelp is returned by parse when --help was given; the help has been printed.
var errHelp = errors.New("help requested")

// parse parses args, then fills every flag not given on the command line from its ELECTOR_*
// environment variable. It prints the help and returns errHelp for -h/--help. Any other error
// is a usage error that names the flag or variable.
func (f *flagSet) parse(c *cli, args []string) error {
	for _, g := range f.groups {
		f.all.AddFlagSet(g.fs)
	}
	f.all.BoolVarP(&f.help, "help", "h", false, "show this help")
	if err := envflag.MarkNoEnv(f.all, "help"); err != nil {
		return err
	}
	if c.flagSink != nil { // completion: only the flags are wanted
		c.flagSink(f)
		return errHelp
	}
	if err := rejectPasswordFlag(args); err != nil {
		return err
	}
	if err := f.all.Parse(args); err != nil {
		return suggestFlag(f.all, err)
	}
	if f.help {
		fmt.Fprint(c.stdout, f.usage())
		return errHelp
	}
	if err := envflag.Apply(f.all, envPrefix, c.lookupEnv); err != nil {
		return err
	}
	if f.logging {
		return setupLogging(c.stderr, c.logs, f.logFormat, f.all)
	}
	return nil
}

// rejectPasswordFlag explains why there is no --redis-password instead of calling it unknown.
func rejectPasswordFlag(args []string) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		if a == "--redis-password" || strings.HasPrefix(a, "--redis-password=") {
			return fmt.Errorf("--redis-password is not a flag, because a password on the command line shows in ps: set the %s environment variable or --%s",
				redisclient.PasswordEnv, redisclient.FlagPasswordFile)
		}
	}
	return nil
}

// changed reports whether the flag was set on the command line or from the environment.
func (f *flagSet) changed(name string) bool {
	fl := f.all.Lookup(name)
	return fl != nil && fl.Changed
}

// usage returns the help of the command: synopsis, description and flags by group.
func (f *flagSet) usage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: elector %s\n\n%s\n", f.cmd.synopsis, strings.TrimSpace(commandHelp(f.cmd.name)))
	for _, g := range f.groups {
		fmt.Fprintf(&b, "\n%s:\n%s", g.title, g.fs.FlagUsagesWrapped(100))
	}
	fmt.Fprintf(&b, "\n  -h, --help   show this help\n")
	if len(f.groups) > 0 {
		fmt.Fprintf(&b, "\n%s", envHelp)
	}
	return b.String()
}

// envHelp ends the help of every command that has flags.
const envHelp = `Every flag can also be set from the environment as ELECTOR_<FLAG>: the flag name in upper
case with '-' replaced by '_' (--redis-addr is ELECTOR_REDIS_ADDR, -v is ELECTOR_V). A flag on
the command line wins over the environment; an empty variable counts as unset.
`

// parseArgs parses args with fs and turns the outcome into an exit code: done is true when
// the command must stop (help printed, or a usage error reported).
func (c *cli) parseArgs(fs *flagSet, args []string) (code int, done bool) {
	err := fs.parse(c, args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, errHelp):
		return exitOK, true
	default:
		return c.usageError("elector "+fs.cmd.name, err), true
	}
}

// errOnlyFlags is the usage error for the first argument of a command that takes only flags.
// A command with --lease-name suggests it for a word that is a valid lease name: `elector
// status nightly` is most likely `elector status --lease-name=nightly`.
func errOnlyFlags(fs *flagSet, cmd string) error {
	arg := fs.all.Arg(0)
	err := fmt.Errorf("unexpected argument %q: elector %s takes only flags", arg, cmd)
	if fs.all.Lookup(flagLeaseName) != nil && lease.ValidateName(arg) == nil {
		return fmt.Errorf("%w; did you mean --%s=%s?", err, flagLeaseName, arg)
	}
	return err
}
