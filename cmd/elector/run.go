package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/child"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/election"
)

// Flag names of elector run.
const (
	flagStopSignal = "stop-signal"
	flagKillGrace  = "kill-grace"
	flagExitOnLost = "exit-on-lost"
	flagOnSuccess  = "on-success"
	flagTimeout    = "timeout"
	flagTryOnce    = "try-once"
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

// signalByName returns the signal called name (without "SIG", upper case).
func signalByName(name string) (syscall.Signal, bool) {
	switch name {
	case "HUP":
		return syscall.SIGHUP, true
	case "INT":
		return syscall.SIGINT, true
	case "QUIT":
		return syscall.SIGQUIT, true
	case "ABRT":
		return syscall.SIGABRT, true
	case "KILL":
		return syscall.SIGKILL, true
	case "USR1":
		return syscall.SIGUSR1, true
	case "USR2":
		return syscall.SIGUSR2, true
	case "PIPE":
		return syscall.SIGPIPE, true
	case "ALRM":
		return syscall.SIGALRM, true
	case "TERM":
		return syscall.SIGTERM, true
	case "CONT":
		return syscall.SIGCONT, true
	case "STOP":
		return syscall.SIGSTOP, true
	case "TSTP":
		return syscall.SIGTSTP, true
	case "WINCH":
		return syscall.SIGWINCH, true
	}
	return 0, false
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
	if sig, ok := signalByName(name); ok {
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

// childEnv returns base with the elector's variables for one term set (replacing any that
// were inherited).
func childEnv(base []string, token int64, identity, leaseName string) []string {
	env := make([]string, 0, len(base)+3)
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if name == envFencingToken || name == envIdentity || name == envLeaseName {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		envFencingToken+"="+strconv.FormatInt(token, 10),
		envIdentity+"="+identity,
		envLeaseName+"="+leaseName,
	)
}

// runConfig is what elector run needs once its flags have been checked.
type runConfig struct {
	common commonOptions
	serve  serveOptions
	run    runOptions
	kube   kubeOptions
	argv   []string // CMD [ARGS...]
}

// runCmd is `elector run`.
func (c *cli) runCmd(ctx context.Context, args []string) int {
	rc, code, ok := c.parseRun(args)
	if !ok {
		return code
	}
	return c.supervise(ctx, rc)
}

// parseRun parses and checks every flag and looks CMD up, before anything contacts Redis. ok
// is false when the command must exit with code (help printed, or a usage error).
func (c *cli) parseRun(args []string) (rc *runConfig, code int, ok bool) {
	cmd, _ := findCommand("run")
	fs := newFlagSet(cmd)
	rc = &runConfig{}
	rc.run.addFlags(fs.group("Run flags"))
	rc.serve.addFlags(fs.group("Endpoint flags"), "")
	rc.common.addFlags(fs)
	rc.common.addElectionFlags(fs)
	rc.kube.addFlags(fs.group("Kubernetes flags"))
	fs.addKlogFlags()
	if code, done := c.parseArgs(fs, args); done {
		return nil, code, false
	}
	argv, err := commandAfterDash(fs.all)
	if err == nil {
		err = rc.common.complete(c)
	}
	if err == nil {
		err = rc.run.validate()
	}
	if err == nil {
		err = rc.run.completeKillGrace(fs.changed(flagKillGrace), &rc.common.lease)
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
	if err != nil {
		return nil, c.usageError("elector run", err), false
	}
	rc.argv = argv
	return rc, 0, true
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
	defer sup.closeStandby()
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
	sess := newSession(l, sigs, sup.hooks())
	klog.InfoS("Campaigning", "lease", rc.common.lease.name, "identity", rc.common.lease.identity,
		"redis", redisDescription(rc.common.redis), "command", rc.argv[0])
	if d := rc.run.timeout; d > 0 {
		t := time.AfterFunc(d, func() { sup.tryGiveUp(fmt.Sprintf("not the leader within --%s %v", flagTimeout, d)) })
		defer t.Stop()
	}
	return c.exitCode(who, sess.run(ctx))
}

// newSupervisor returns the supervisor of rc's command.
func (c *cli) newSupervisor(rc *runConfig) *supervisor {
	return &supervisor{
		spec: child.Spec{
			Path:       rc.argv[0],
			Args:       rc.argv[1:],
			Stdin:      c.stdin,
			Stdout:     c.stdout,
			Stderr:     c.stderr,
			StopSignal: rc.run.signal,
			KillGrace:  rc.run.killGrace,
			Shim:       true,
		},
		baseEnv:   c.environ(),
		identity:  rc.common.lease.identity,
		leaseName: rc.common.lease.name,
		hold:      rc.run.onSuccess == onSuccessHold,
		ends:      make(chan ending, 4),
	}
}

// callbacks are the elector's callbacks: lead runs the command; with --try-once, a holder
// other than this replica's term means giving up.
func (s *supervisor) callbacks(tryOnce bool) election.Callbacks {
	return election.Callbacks{
		OnStartedLeading: s.lead,
		OnStoppedLeading: func() {},
		OnNewLeader: func(identity string) {
			logNewLeader(identity)
			if tryOnce {
				s.observed(identity)
			}
		},
	}
}

// hooks are the session's hooks for the command: the first SIGTERM or SIGINT becomes its
// stop signal, a second one kills it, others are forwarded; the last term is released after a
// lost leadership; the command's exit, a failed start and giving up end the run.
func (s *supervisor) hooks() sessionHooks {
	return sessionHooks{
		stopMsg: "Received signal: stopping the command and releasing the lease",
		onStop:  func(sig syscall.Signal) { s.stopping.Store(int32(sig)) },
		onAgain: s.killNow,
		onOther: s.forward,
		beforeClose: func(o *outcome) {
			if o.lost && !s.withheld.Load() {
				s.releaseLast()
			}
			if st := s.stoppedStatus(); st != nil {
				o.stopped = st.ExitCode()
			}
		},
		ends: s.ends,
	}
}

// sendEnding reports e to the session without blocking: an ending already queued ends the
// run as well.
func (s *supervisor) sendEnding(e ending) {
	select {
	case s.ends <- e:
	default:
	}
}

// logNewLeader logs each leader the elector observes.
func logNewLeader(identity string) {
	klog.InfoS("New leader observed", "leader", identity)
}

// supervisor runs the command of elector run during each term.
type supervisor struct {
	spec      child.Spec // template; Env is set per term
	baseEnv   []string
	identity  string
	leaseName string
	hold      bool        // --on-success=hold
	once      *oncePeriod // --once-per, nil without
	elector   *election.Elector
	redis     io.Closer   // the elector's Redis client: closed to withhold the release
	ends      chan ending // the command's exit, a failed start and giving up, for the session

	stopping atomic.Int32 // the signal the elector received (SIGTERM, SIGINT), 0 before
	withheld atomic.Bool  // processes of a command may have survived it: no release, no term

	mu       sync.Mutex
	standby  *child.Standby // the next term's shim, started while a follower; nil: none
	closed   bool           // run ends: no standby is prepared any more
	current  *child.Process
	stopped  *child.ExitStatus // how the command ended when it was stopped for the elector's exit
	lastTerm int64             // the token of the last term this replica led
	led      bool              // a term began here: --timeout and --try-once no longer apply
	gaveUp   bool              // run gives up: no term may start the command any more
	done     bool              // the command exited 0 with --on-success=hold
}

// tryGiveUp makes run give up for reason unless a term has begun; a term that begins later
// does not start the command.
func (s *supervisor) tryGiveUp(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.led || s.gaveUp {
		return
	}
	s.gaveUp = true
	s.sendEnding(ending{gaveUp: reason})
}

// observed is OnNewLeader with --try-once: a holder other than this replica's current term
// (another replica, or an earlier process with this identity) means giving up.
func (s *supervisor) observed(identity string) {
	if identity == s.identity && s.elector.IsLeader() {
		return
	}
	s.tryGiveUp(fmt.Sprintf("the lease is held by %q (--%s)", identity, flagTryOnce))
}

// killNow is the second SIGTERM or SIGINT: SIGKILL to the command's tree at once.
func (s *supervisor) killNow(sig syscall.Signal) {
	p := s.running()
	if p == nil {
		klog.V(2).InfoS("Second signal received while no command runs", "signal", sig)
		return
	}
	p.Kill() // before the log, which may block on a stalled stderr
	klog.InfoS("Second signal received: killing the command now", "signal", sig, "pid", p.CommandPid())
}

// lead is OnStartedLeading: it runs the command until the command exits or ctx ends, and
// then stops it with the stop signal (or the signal the elector received), the grace period
// and SIGKILL.
func (s *supervisor) lead(ctx context.Context) {
	// The term's token comes with its ctx: Status may already describe a later term.
	token := election.TokenFrom(ctx)
	if token == 0 || ctx.Err() != nil {
		return
	}
	start, done := s.beginTerm(token)
	switch {
	case !start:
		return
	case done:
		klog.InfoS("Holding the lease without running the command, which succeeded in an earlier term (--on-success=hold)", "token", token)
		<-ctx.Done()
		return
	case s.once != nil:
		s.leadOnce(ctx, token)
		return
	}
	if p := s.runTerm(ctx, token); p != nil {
		s.exited(ctx, p, token)
	}
}

// runTerm runs the command in the term with token until it exits by itself, and returns it
// then; nil when it could not start or was stopped because ctx ended.
func (s *supervisor) runTerm(ctx context.Context, token int64) *child.Process {
	p, spec := s.start(token)
	if p == nil {
		return nil
	}
	defer s.setCurrent(nil)
	select {
	case <-p.Done():
	case <-ctx.Done():
		if s.stop(p, spec, token, context.Cause(ctx)) {
			if s.survived(p.Wait()) {
				return nil
			}
			if s.stopping.Load() == 0 {
				go s.prepare() // for the next term, off this release's path
			}
			return nil
		}
	}
	if s.survived(p.Wait()) {
		return nil
	}
	return p
}

// survived withholds the release (see withhold) when es says that processes of the
// command may have outlived it (child.ErrSurvivors: its shim was killed from outside, and
// what it left could not all be killed); false otherwise.
func (s *supervisor) survived(es child.ExitStatus) bool {
	if !errors.Is(es.Err, child.ErrSurvivors) {
		return false
	}
	s.withhold(es.Err)
	return true
}

// withhold ends the run without releasing the lease, because processes of the command may
// still run (cause): the lease then expires by itself, LeaseDuration after the last renewal,
// as if this replica had crashed, which is as long as the other replicas can be kept out.
// It closes the Redis client before the term's OnStartedLeading returns, after which the
// elector would release (on the end of the run, or at a resignation): neither that release
// nor any renewal can then reach Redis, and no later term can begin here. The run ends with
// an error.
func (s *supervisor) withhold(cause error) {
	if s.withheld.Swap(true) {
		return
	}
	if s.redis != nil {
		_ = s.redis.Close()
	}
	s.closeStandby()
	klog.ErrorS(cause, "Not releasing the lease: processes of the command may still run; it expires by itself")
	s.sendEnding(ending{err: fmt.Errorf("not releasing the lease, which expires by itself: %w", cause)})
}

// beginTerm records that the term with token begins here, unless run gave up (start false);
// done tells that the command succeeded in an earlier term with --on-success=hold.
func (s *supervisor) beginTerm(token int64) (start, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gaveUp {
		return false, false
	}
	s.led = true
	s.lastTerm = token
	return true, s.done
}

// start starts the command for the term with token; nil when it could not be started, which
// ends the run.
func (s *supervisor) start(token int64) (*child.Process, child.Spec) {
	spec := s.spec
	spec.Env = childEnv(s.baseEnv, token, s.identity, s.leaseName)
	// Stopping is done by stop with the right signal, so Start gets a context that never ends.
	// The go-ahead to the prepared shim carries this term's environment, token included.
	var p *child.Process
	var err error
	if sb := s.takeStandby(); sb != nil {
		p, err = sb.Start(context.Background(), spec.Env)
	} else {
		p, err = child.Start(context.Background(), spec)
	}
	if errors.Is(err, child.ErrSurvivors) {
		s.withhold(fmt.Errorf("start the command: %w", err))
		return nil, spec
	}
	if err != nil {
		klog.ErrorS(err, "Cannot start the command", "command", spec.Path)
		s.sendEnding(ending{err: fmt.Errorf("start the command: %w", err)})
		return nil, spec
	}
	s.setCurrent(p)
	tree := "process group" // who kills what the command leaves: see docs/CLI.md
	if p.Shimmed() {
		tree = "shim (/proc walk)"
	}
	klog.InfoS("Started the command", "pid", p.CommandPid(), "processGroup", p.CommandPid(), "descendantsKilledBy", tree, "token", token, "command", spec.Path)
	return p, spec
}

// prepare starts the shim of the next term ahead of it (see child.Prepare), unless one is
// waiting already or run ends. Should that shim die before its term, another one is
// prepared a moment later.
func (s *supervisor) prepare() {
	s.mu.Lock()
	busy := s.standby != nil || s.closed
	s.mu.Unlock()
	if busy {
		return
	}
	spec := s.spec
	spec.Env = s.baseEnv // the shim's own; the command's comes with the go-ahead
	sb := child.Prepare(spec)
	s.mu.Lock()
	if s.standby != nil || s.closed {
		s.mu.Unlock()
		sb.Close()
		return
	}
	s.standby = sb
	s.mu.Unlock()
	if exited := sb.Exited(); exited != nil {
		go s.replaceIfLost(sb, exited)
	}
}

// standbyRetry is how long after a prepared shim died unused another one is prepared.
const standbyRetry = time.Second

// replaceIfLost prepares another shim if sb's exits while it still waits for its term.
func (s *supervisor) replaceIfLost(sb *child.Standby, exited <-chan struct{}) {
	<-exited
	s.mu.Lock()
	lost := s.standby == sb
	if lost {
		s.standby = nil
	}
	s.mu.Unlock()
	if lost {
		sb.Close()
		klog.InfoS("The shim prepared for the next term exited; preparing another", "retryIn", standbyRetry)
		time.AfterFunc(standbyRetry, s.prepare)
	}
}

// takeStandby returns the prepared shim for a term that begins, nil when none is prepared.
func (s *supervisor) takeStandby() *child.Standby {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.standby
	s.standby = nil
	return sb
}

// closeStandby makes the prepared shim exit unused once run ends.
func (s *supervisor) closeStandby() {
	s.mu.Lock()
	sb := s.standby
	s.standby, s.closed = nil, true
	s.mu.Unlock()
	if sb != nil {
		sb.Close()
	}
}

// stop stops p at the end of its term with the stop signal, or the signal the elector
// received; false when p had exited by itself before it could be stopped. cause is why the
// term ended (context.Cause of the term's ctx), for the log.
func (s *supervisor) stop(p *child.Process, spec child.Spec, token int64, cause error) bool {
	select {
	case <-p.Done():
		return false
	default:
	}
	sig, reason := spec.StopSignal, "leadership lost"
	if errors.Is(cause, election.ErrResigned) {
		reason = "resigned"
	}
	if n := s.stopping.Load(); n != 0 {
		sig, reason = syscall.Signal(n), "elector stopping"
	}
	// The signal goes out before the log, which may block on a stalled stderr (issue 42).
	p.BeginStop(sig)
	klog.InfoS("Stopping the command", "pid", p.CommandPid(), "signal", sig, "reason", reason, "killGrace", spec.KillGrace)
	es := p.StopWith(context.Background(), sig)
	klog.InfoS("The command stopped", "pid", p.CommandPid(), "status", es.String(), "token", token)
	if s.stopping.Load() != 0 {
		s.mu.Lock()
		s.stopped = &es
		s.mu.Unlock()
	}
	return true
}

// exited handles the command's exit by itself: with --on-success=hold a success keeps the
// lease until ctx ends; otherwise the run ends with the command's exit code.
func (s *supervisor) exited(ctx context.Context, p *child.Process, token int64) {
	es := p.Wait()
	if s.hold && es.Signal == 0 && es.Code == 0 {
		s.mu.Lock()
		s.done, s.current = true, nil
		s.mu.Unlock()
		klog.InfoS("The command succeeded; holding the lease until SIGTERM or SIGINT (--on-success=hold)", "pid", p.CommandPid(), "token", token)
		<-ctx.Done()
		return
	}
	klog.InfoS("The command exited; releasing the lease", "pid", p.CommandPid(), "status", es.String(), "token", token)
	s.sendEnding(ending{exited: true, code: es.ExitCode()})
}

// running returns the running command, nil when none runs.
func (s *supervisor) running() *child.Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

// setCurrent records the running command, nil when none runs.
func (s *supervisor) setCurrent(p *child.Process) {
	s.mu.Lock()
	s.current = p
	s.mu.Unlock()
}

// forward passes a signal the elector received on to the running command's process group.
func (s *supervisor) forward(sig syscall.Signal) {
	p := s.running()
	if p == nil {
		klog.V(2).InfoS("Signal received while no command runs", "signal", sig)
		return
	}
	if err := p.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		klog.ErrorS(err, "Cannot forward the signal", "signal", sig, "pid", p.CommandPid())
		return
	}
	klog.V(2).InfoS("Forwarded signal to the command", "signal", sig, "pid", p.CommandPid())
}

// stoppedStatus returns how the command ended when it was stopped for the elector's exit.
func (s *supervisor) stoppedStatus() *child.ExitStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// releaseLast releases the last term if Redis still holds it: after the renew deadline passed
// (Redis unreachable) the elector steps down without releasing, and an exiting process must
// not leave its lease behind. The release is owner-checked, so it never touches a newer term.
func (s *supervisor) releaseLast() {
	s.mu.Lock()
	token := s.lastTerm
	s.mu.Unlock()
	if token == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	released, err := s.elector.Release(ctx, token)
	switch {
	case err != nil:
		klog.ErrorS(err, "Cannot release the lease; it expires by itself", "token", token)
	case released:
		klog.InfoS("Released the lease", "token", token)
	}
}
