package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/child"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
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

// defaultKillGrace is the default --kill-grace: within killGraceBound of the default timing
// (15s - 10s - 152ms = 4.848s), so that a CMD stopped for a lost leadership is dead before
// another replica can acquire the lease.
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

	signal syscall.Signal // stopSignal parsed by validate
}

// addFlags registers the flags of run about the command on fs.
func (o *runOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.stopSignal, flagStopSignal, "SIGTERM", "`signal` sent to the command's process group when leadership is lost: a name (SIGTERM, TERM) or a number")
	fs.DurationVar(&o.killGrace, flagKillGrace, defaultKillGrace, "time between the stop signal and SIGKILL; 0 kills at once. Keep it below --lease-duration - --renew-deadline - the drift margin")
	fs.BoolVar(&o.exitOnLost, flagExitOnLost, false, "exit with code 3 when leadership is lost, instead of campaigning again")
	fs.StringVar(&o.onSuccess, flagOnSuccess, onSuccessRelease, "`what` to do when CMD exits 0: release (release the lease and exit 0) or hold (keep the lease without rerunning CMD until SIGTERM/SIGINT, so that no other replica reruns it)")
	fs.DurationVar(&o.timeout, flagTimeout, 0, "give up and exit 4 if not leading within this `duration` of the start; 0: campaign for ever")
	fs.BoolVar(&o.tryOnce, flagTryOnce, false, "exit 4 instead of waiting when another replica holds the lease (Redis errors are still retried; bound them with --timeout)")
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
	return nil
}

// killGraceBound is the longest --kill-grace with which a CMD stopped because leadership was
// lost is surely dead before another replica can acquire the lease: after the last successful
// renew the leader steps down at --renew-deadline at the latest, and the lease expires no
// earlier than --lease-duration minus the drift margin by this replica's clock.
func killGraceBound(lo *leaseOptions) time.Duration {
	return lo.leaseDuration - lo.renewDeadline - election.DriftMargin(lo.leaseDuration)
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
		err = rc.serve.validate()
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
	lo := &rc.common.lease
	if bound := killGraceBound(lo); rc.run.killGrace > bound {
		klog.Warningf("--kill-grace (%v) is longer than --lease-duration minus --renew-deadline minus the drift margin (%v - %v - %v = %v): after a lost leadership the command may still run when another replica's command starts",
			rc.run.killGrace, lo.leaseDuration, lo.renewDeadline, election.DriftMargin(lo.leaseDuration), bound)
	}

	// Signals are caught from here on: a SIGTERM while campaigning ends the campaign cleanly.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)

	sup := &supervisor{
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
		identity:  lo.identity,
		leaseName: lo.name,
		hold:      rc.run.onSuccess == onSuccessHold,
		exited:    make(chan child.ExitStatus, 1),
		failed:    make(chan error, 1),
		giveUp:    make(chan string, 1),
	}
	reaperCtx, stopReaper := context.WithCancel(ctx)
	defer stopReaper()
	if child.NeedsReaper() {
		sup.spec.Reaper = child.NewReaper()
		go sup.spec.Reaper.Run(reaperCtx)
	}

	l, err := startLeadership(&rc.common, &rc.serve, election.Callbacks{
		OnStartedLeading: sup.lead,
		OnStoppedLeading: func() {},
		OnNewLeader: func(identity string) {
			logNewLeader(identity)
			if rc.run.tryOnce {
				sup.observed(identity)
			}
		},
	}, rc.run.exitOnLost)
	if err != nil {
		return c.runtimeError(who, err)
	}
	sup.elector = l.elector
	klog.InfoS("Campaigning", "lease", lo.name, "identity", lo.identity,
		"redis", redisDescription(rc.common.redis), "command", rc.argv[0])

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- l.elector.Run(runCtx) }()
	httpErr := make(chan error, 1)
	l.serveHTTP(httpErr)

	var timeout <-chan time.Time
	if d := rc.run.timeout; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}

	var (
		received   syscall.Signal
		childCode  = -1
		runErr     error
		runtimeErr error
		gaveUp     string
	)
	for running := true; running; {
		select {
		case s := <-sigs:
			sig, _ := s.(syscall.Signal)
			if sig == syscall.SIGTERM || sig == syscall.SIGINT {
				if received == 0 {
					received = sig
					sup.stopping.Store(int32(sig))
					klog.InfoS("Received signal: stopping the command and releasing the lease", "signal", sig)
					cancel()
				} else {
					sup.killNow(sig)
				}
				continue
			}
			sup.forward(sig)
		case <-timeout:
			sup.tryGiveUp(fmt.Sprintf("not the leader within --%s %v", flagTimeout, rc.run.timeout))
		case gaveUp = <-sup.giveUp:
			cancel()
		case es := <-sup.exited:
			childCode = es.ExitCode()
			cancel()
		case err := <-sup.failed:
			runtimeErr = err
			cancel()
		case err := <-httpErr:
			runtimeErr = err
			cancel()
		case runErr = <-errc:
			running = false
		}
	}
	select {
	case es := <-sup.exited: // the command exited by itself just as the elector stopped
		childCode = es.ExitCode()
	default:
	}
	lost := errors.Is(runErr, election.ErrLeadershipLost)
	if lost {
		sup.releaseLast()
	}
	l.close()

	switch {
	case lost:
		klog.InfoS("Leadership lost: exiting because of --exit-on-lost", "code", exitNoLeader)
		return exitNoLeader
	case gaveUp != "" && runErr == nil:
		klog.InfoS("Giving up without leading", "reason", gaveUp, "code", exitNotLeader)
		return exitNotLeader
	case runErr != nil:
		return c.runtimeError(who, runErr)
	case runtimeErr != nil:
		return c.runtimeError(who, runtimeErr)
	case childCode >= 0:
		klog.InfoS("Exiting with the exit code of the command", "code", childCode)
		return childCode
	}
	if st := sup.stoppedStatus(); st != nil {
		klog.InfoS("Exiting with the exit code of the command", "code", st.ExitCode())
		return st.ExitCode()
	}
	return exitOK
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
	hold      bool // --on-success=hold
	elector   *election.Elector

	stopping atomic.Int32          // the signal the elector received (SIGTERM, SIGINT), 0 before
	exited   chan child.ExitStatus // the command exited by itself
	failed   chan error            // the command could not be started
	giveUp   chan string           // why run gives up without leading (--timeout, --try-once)

	mu       sync.Mutex
	current  *child.Process
	stopped  *child.ExitStatus // how the command ended when it was stopped for the elector's exit
	lastTerm lease.Record      // the last term this replica led
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
	s.giveUp <- reason // buffered, sent once
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
	klog.InfoS("Second signal received: killing the command now", "signal", sig, "pid", p.CommandPid())
	p.Kill()
}

// lead is OnStartedLeading: it runs the command until the command exits or ctx ends, and
// then stops it with the stop signal (or the signal the elector received), the grace period
// and SIGKILL.
func (s *supervisor) lead(ctx context.Context) {
	st := s.elector.Status()
	if !st.IsLeader || ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	if s.gaveUp {
		s.mu.Unlock()
		return
	}
	s.led = true
	s.lastTerm = lease.Record{Token: st.Token, Instance: s.elector.Lease().Instance(), Identity: s.identity}
	done := s.done
	s.mu.Unlock()
	if done {
		klog.InfoS("Holding the lease without running the command, which succeeded in an earlier term (--on-success=hold)", "token", st.Token)
		<-ctx.Done()
		return
	}
	spec := s.spec
	spec.Env = childEnv(s.baseEnv, st.Token, s.identity, s.leaseName)
	// Stopping is done below with the right signal, so Start gets a context that never ends.
	p, err := child.Start(context.Background(), spec)
	if err != nil {
		klog.ErrorS(err, "Cannot start the command", "command", spec.Path)
		select {
		case s.failed <- fmt.Errorf("start the command: %w", err):
		default:
		}
		return
	}
	s.setCurrent(p)
	defer s.setCurrent(nil)
	klog.InfoS("Started the command", "pid", p.CommandPid(), "processGroup", p.Pid(), "token", st.Token, "command", spec.Path)

	select {
	case <-p.Done():
	case <-ctx.Done():
		select {
		case <-p.Done(): // it had exited by itself before we could stop it
		default:
			sig, reason := spec.StopSignal, "leadership lost"
			if n := s.stopping.Load(); n != 0 {
				sig, reason = syscall.Signal(n), "elector stopping"
			}
			klog.InfoS("Stopping the command", "pid", p.CommandPid(), "signal", sig, "reason", reason, "killGrace", spec.KillGrace)
			es := p.StopWith(context.Background(), sig)
			klog.InfoS("The command stopped", "pid", p.CommandPid(), "status", es.String(), "token", st.Token)
			if s.stopping.Load() != 0 {
				s.mu.Lock()
				s.stopped = &es
				s.mu.Unlock()
			}
			return
		}
	}
	es := p.Wait()
	if s.hold && es.Signal == 0 && es.Code == 0 {
		s.mu.Lock()
		s.done, s.current = true, nil
		s.mu.Unlock()
		klog.InfoS("The command succeeded; holding the lease until SIGTERM or SIGINT (--on-success=hold)", "pid", p.CommandPid(), "token", st.Token)
		<-ctx.Done()
		return
	}
	klog.InfoS("The command exited; releasing the lease", "pid", p.CommandPid(), "status", es.String(), "token", st.Token)
	select {
	case s.exited <- es:
	default:
	}
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
		klog.ErrorS(err, "Cannot forward the signal", "signal", sig, "pid", p.Pid())
		return
	}
	klog.V(2).InfoS("Forwarded signal to the command", "signal", sig, "pid", p.Pid())
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
	term := s.lastTerm
	s.mu.Unlock()
	if term.Token == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	released, err := s.elector.Lease().Release(ctx, term)
	switch {
	case err != nil:
		klog.ErrorS(err, "Cannot release the lease; it expires by itself", "token", term.Token)
	case released:
		klog.InfoS("Released the lease", "token", term.Token)
	}
}
