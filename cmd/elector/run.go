package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/elector/elector/cmd/elector/internal/child"
	"github.com/elector/elector/internal/timing"
)

// Flag names of elector run.
const (
	flagStopSignal = "stop-signal"
	flagKillGrace  = "kill-grace"
	flagExitOnLost = "exit-on-lost"
	flagOnSuccess  = "on-success"
	flagTimeout    = "timeout"
	flagTryOnce    = "try-once"

	flagKeepRedisCredentials = "keep-redis-credentials"
)

// Values of --on-success.
const (
	onSuccessRelease = "release"
	onSuccessHold    = "hold"
)

// defaultKillGrace is the default --kill-grace at the default timing: within killGraceBound
// (15s - 10s - 152ms = 4.848s), so that a CMD stopped for a lost leadership is dead before
// another replica can acquire the lease. With a shorter lease the default is shorter too
// (defaultKillGraceFor).
const defaultKillGrace = 4 * time.Second

// exitNotLeader: run gave up without leading, because of --timeout or --try-once.
const exitNotLeader = 4

// The environment variables elector run adds to the child's environment.
const (
	envFencingToken = "ELECTOR_FENCING_TOKEN"
	envIdentity     = "ELECTOR_IDENTITY"
	envLeaseName    = "ELECTOR_LEASE_NAME"
	envSlot         = "ELECTOR_SLOT"    // --schedule: the slot's time, RFC 3339 UTC
	envAttempt      = "ELECTOR_ATTEMPT" // --schedule: 1, or more when the slot's earlier run failed or its term ended
)

// runOptions are the flags of elector run about the child.
type runOptions struct {
	stopSignal string
	killGrace  time.Duration
	exitOnLost bool
	onSuccess  string
	timeout    time.Duration
	tryOnce    bool
	oncePer    time.Duration // --once-per: once.go
	exitIfDone bool
	force      bool
	// keepCredentials passes the Redis passwords on to CMD (--keep-redis-credentials).
	keepCredentials bool
	sched           scheduleOptions // --schedule: run_schedule.go

	signal syscall.Signal // stopSignal parsed by validate
}

// addFlags registers the flags of run about the command on fs.
func (o *runOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.stopSignal, flagStopSignal, "SIGTERM", "`signal` sent to the command's process group when leadership is lost: a name (SIGTERM, TERM) or a number")
	fs.DurationVar(&o.killGrace, flagKillGrace, defaultKillGrace, "time between the stop signal and SIGKILL; 0 kills at once. At most --lease-duration - --renew-deadline - the drift margin (1% of --lease-duration + 2ms); default 4s, or 5/6 of that bound when shorter")
	fs.BoolVar(&o.exitOnLost, flagExitOnLost, false, "exit with code 3 when leadership is lost, instead of campaigning again")
	fs.StringVar(&o.onSuccess, flagOnSuccess, onSuccessRelease, "`what` to do when CMD exits 0: release (release the lease and exit 0) or hold (keep the lease, renewed, without rerunning CMD until SIGTERM/SIGINT; once this elector stops, another replica may run CMD again)")
	fs.DurationVar(&o.timeout, flagTimeout, 0, "give up and exit 4 if not leading within this `duration` of the start; 0: campaign for ever")
	fs.BoolVar(&o.tryOnce, flagTryOnce, false, "exit 4 instead of waiting when another replica holds the lease (Redis errors are still retried; bound them with --timeout)")
	fs.DurationVar(&o.oncePer, flagOncePer, 0, "run CMD at most once per `period` across replicas and restarts: a success writes a done mark PREFIX:{NAME}:done expiring one period after CMD started; a leader that finds it keeps the lease without running CMD until it expires; 0: off")
	fs.BoolVar(&o.exitIfDone, flagExitIfDone, false, "with --once-per: exit 0 instead of waiting when the done mark holds, and after CMD succeeded (for a CronJob)")
	fs.BoolVar(&o.force, flagForce, false, "with --once-per: run CMD even though the done mark holds (until CMD succeeded once here)")
	fs.BoolVar(&o.keepCredentials, flagKeepRedisCredentials, false, "pass REDIS_PASSWORD and REDIS_SENTINEL_PASSWORD on to CMD; by default CMD's environment has neither")
}

// validate parses --stop-signal and checks --kill-grace.
func (o *runOptions) validate() error {
	sig, err := parseSignal(o.stopSignal)
	if err != nil {
		return fmt.Errorf("--%s: %v", flagStopSignal, err)
	}
	o.signal = sig
	if o.killGrace < 0 {
		return fmt.Errorf("--%s: must be 0 or a positive duration such as 4s, got %v", flagKillGrace, o.killGrace)
	}
	if o.onSuccess != onSuccessRelease && o.onSuccess != onSuccessHold {
		return fmt.Errorf("--%s: want %s or %s, got %q", flagOnSuccess, onSuccessRelease, onSuccessHold, o.onSuccess)
	}
	if o.timeout < 0 {
		return fmt.Errorf("--%s: must be 0 (no timeout) or a positive duration such as 30s, got %v", flagTimeout, o.timeout)
	}
	return o.validateOnce()
}

// defaultKillGraceFor is the --kill-grace of a user who sets none: defaultKillGrace, or five
// sixths of killGraceBound when that is shorter (a shortened lease: 5s and 4s give 790ms), the
// sixth left for the SIGKILL of the command's tree after the grace; 0 when there is no bound
// to speak of.
func defaultKillGraceFor(lo *leaseOptions) time.Duration {
	return max(0, min(defaultKillGrace, killGraceBound(lo)/6*5))
}

// completeKillGrace derives --kill-grace from the lease timing lo when it was not set, and
// refuses one longer than killGraceBound: the command stopped for a lost leadership could
// still run when another replica's starts.
func (o *runOptions) completeKillGrace(set bool, lo *leaseOptions) error {
	if !set {
		o.killGrace = defaultKillGraceFor(lo)
		return nil
	}
	if bound := killGraceBound(lo); o.killGrace > bound {
		return fmt.Errorf("--%s: %v is longer than its bound, --lease-duration minus --renew-deadline minus the drift margin (1%% of --lease-duration + 2ms): %v - %v - %v = %v; after a lost leadership the command could still run when another replica's command starts: set it to %v or less, or lengthen --lease-duration",
			flagKillGrace, o.killGrace, lo.leaseDuration, lo.renewDeadline, timing.DriftMargin(lo.leaseDuration), bound, bound)
	}
	return nil
}

// killGraceBound is the longest --kill-grace with which a CMD stopped because leadership was
// lost is surely dead before another replica can acquire the lease: the library's handover gap
// (timing.HandoverGap) of the flags' timing.
func killGraceBound(lo *leaseOptions) time.Duration {
	return timing.HandoverGap(lo.leaseDuration, lo.renewDeadline)
}

// signalNames lists the names --stop-signal accepts, in the order of their numbers on Linux.
const signalNames = "SIGHUP, SIGINT, SIGQUIT, SIGABRT, SIGKILL, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM, SIGTERM, SIGCONT, SIGSTOP, SIGTSTP, SIGWINCH"

// signalsByName maps the names of signalNames (without "SIG") to their signals.
var signalsByName = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "ABRT": syscall.SIGABRT,
	"KILL": syscall.SIGKILL, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "PIPE": syscall.SIGPIPE,
	"ALRM": syscall.SIGALRM, "TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP,
	"TSTP": syscall.SIGTSTP, "WINCH": syscall.SIGWINCH,
}

// parseSignal accepts SIGTERM, TERM, sigterm or 15.
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 {
			return 0, fmt.Errorf("signal number %d is out of range 1-64", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	if sig, ok := signalsByName[name]; ok {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q; want a number from 1 to 64 or one of %s", s, signalNames)
}

// commandAfterDash returns CMD [ARGS...] from `elector run [flags] -- CMD [ARGS...]`.
func commandAfterDash(fs *pflag.FlagSet) ([]string, error) {
	dash, rest := fs.ArgsLenAtDash(), fs.Args()
	switch {
	case dash < 0 && len(rest) > 0:
		return nil, fmt.Errorf("--: missing before the command %q; want elector run [flags] -- CMD [ARGS...]", rest[0])
	case dash < 0:
		return nil, errors.New("--: missing, and no command to run; want elector run [flags] -- CMD [ARGS...]")
	case dash > 0:
		return nil, fmt.Errorf("--: unexpected argument %q before it; want elector run [flags] -- CMD [ARGS...]", rest[0])
	case len(rest) == 0:
		return nil, errors.New("--: no command after it; want elector run [flags] -- CMD [ARGS...]")
	}
	return rest, nil
}

// runConfig is what elector run needs once its flags have been checked.
type runConfig struct {
	common commonOptions
	serve  serveOptions
	run    runOptions
	kube   kubeOptions
	argv   []string // CMD [ARGS...]
}

// runLong is the paragraph of elector run's help; docs/CLI.md#elector-run has the rest: what
// happens on each signal, loss, resignation and exit.
const runLong = `Run CMD (no shell, ELECTOR_FENCING_TOKEN set) while leading; lost: --stop-signal, SIGKILL after --kill-grace.`

// newRunCmd returns `elector run` and the configuration its flags fill.
func (c *cli) newRunCmd() (*cobra.Command, *runConfig) {
	rc := &runConfig{}
	cmd := c.newCommand("run [flags] -- CMD [ARGS...]", "run CMD only while this replica leads the lease (singleton job runner)", runLong,
		func(ctx context.Context, cmd *cobra.Command, _ []string) int {
			if err := c.completeRun(cmd, rc); err != nil {
				return c.usageError("elector run", err)
			}
			return c.supervise(ctx, rc)
		})
	addGroup(cmd, "Run flags", rc.run.addFlags)
	addGroup(cmd, scheduleGroup, rc.run.sched.addFlags)
	addGroup(cmd, endpointGroup, func(fs *pflag.FlagSet) { rc.serve.addFlags(fs, "") })
	rc.common.addFlags(cmd)
	rc.common.addElectionFlags(cmd)
	addGroup(cmd, kubeGroup, rc.kube.addFlags)
	addKlogFlags(cmd)
	cmd.ValidArgsFunction = completeCommandAfterDash
	return cmd, rc
}

// completeRun checks every flag cmd parsed and looks CMD up, before anything contacts Redis.
func (c *cli) completeRun(cmd *cobra.Command, rc *runConfig) error {
	argv, err := commandAfterDash(cmd.Flags())
	if err == nil {
		err = rc.common.complete(c)
	}
	if err == nil {
		err = rc.run.validate()
	}
	if err == nil {
		err = rc.run.sched.validate(&rc.run, cmd.Flags().Changed)
	}
	if err == nil {
		err = rc.run.completeKillGrace(cmd.Flags().Changed(flagKillGrace), &rc.common.lease)
	}
	if err == nil {
		err = rc.serve.validate()
	}
	if err == nil {
		err = rc.kube.complete(c)
	}
	if err == nil {
		// Checked before campaigning: a replica that could never run the command must not lead.
		_, err = child.LookPath(argv[0])
	}
	rc.argv = argv
	return err
}

// supervise campaigns and runs the command during each term until the elector is signalled,
// the command exits by itself, or (with --exit-on-lost) leadership is lost; it returns the
// exit code. Every way out after acquiring the lease releases it.
func (c *cli) supervise(ctx context.Context, rc *runConfig) int {
	const who = "elector run"
	sigs, stopSignals := catchSignals(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer stopSignals()
	sup := c.newSupervisor(rc)
	// The orphans of a shim killed from outside come back here, to be killed before a release.
	if err := child.BecomeSubreaper(); err != nil {
		klog.ErrorS(err, "Cannot adopt the processes of a killed shim: should the shim be killed, run exits without releasing the lease")
	}
	reaperCtx, stopReaper := context.WithCancel(ctx)
	defer stopReaper()
	if child.NeedsReaper() {
		sup.spec.Reaper = child.NewReaper()
		go sup.spec.Reaper.Run(reaperCtx)
	}
	kh, err := startKube(&rc.kube, &rc.common.lease)
	if err != nil {
		return c.runtimeError(who, err)
	}
	defer kh.close()
	sup.prepare() // the first term's shim starts while the replica campaigns
	defer sup.standby.close()
	rc.serve.collectors = c.logs.collectors()
	var schedMetrics *scheduleMetrics
	if rc.run.sched.spec != "" {
		schedMetrics = &scheduleMetrics{}
		rc.serve.collectors = append(rc.serve.collectors, schedMetrics)
	}
	l, err := startReplica(&rc.common, &rc.serve, kh.wrap(sup.callbacks(rc.run.tryOnce)), rc.run.exitOnLost, kh)
	if err != nil {
		return c.runtimeError(who, err)
	}
	// The callbacks exist before the Elector (New takes them), and --try-once's OnNewLeader
	// asks it whether this replica leads: the one reference set after construction.
	sup.elector = l.elector
	sup.redis = l.client
	if sup.once, err = newOncePeriod(rc, l.client); err != nil {
		l.close()
		return c.runtimeError(who, err)
	}
	if schedMetrics != nil {
		if sup.sched, err = rc.run.sched.newScheduler(l.client, rc.common.lease.name, rc.common.lease.prefix, sup.job); err != nil {
			l.close()
			return c.runtimeError(who, err)
		}
		schedMetrics.s.Store(sup.sched)
	}
	sess := newSession(l, sigs, sup.hooks())
	klog.InfoS("Campaigning", "lease", rc.common.lease.name, "identity", rc.common.lease.identity,
		"redis", redisDescription(rc.common.redis), "command", rc.argv[0])
	if d := rc.run.timeout; d > 0 {
		t := time.AfterFunc(d, func() { sup.tryGiveUp(fmt.Sprintf("not the leader within --%s %v", flagTimeout, d)) })
		defer t.Stop()
	}
	return c.exitCode(who, sess.run(ctx))
}
