package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/elector/elector/cmd/elector/internal/child"
	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/schedule"
)

// supervisor runs the command of elector run during each term: it feeds the events of the
// elector, the command and the signals to its runMachine and performs the actions it returns.
type supervisor struct {
	spec      child.Spec // template; Env is set per term
	baseEnv   []string
	identity  string
	leaseName string
	once      *oncePeriod         // --once-per, nil without
	sched     *schedule.Scheduler // --schedule, nil without
	elector   *election.Elector
	redis     io.Closer   // the elector's Redis client: closed to withhold the release
	ends      chan ending // the command's exit, a failed start and giving up, for the session
	standby   standbySlot

	mu sync.Mutex // held by step only, which neither blocks nor logs
	m  runMachine
	// cur is the term whose Scheduler runs (--schedule), for its job; under mu.
	cur *term
}

// newSupervisor returns the supervisor of rc's command.
func (c *cli) newSupervisor(rc *runConfig) *supervisor {
	s := &supervisor{
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
		baseEnv:   commandEnv(c.environ(), rc.run.keepCredentials),
		identity:  rc.common.lease.identity,
		leaseName: rc.common.lease.name,
		ends:      make(chan ending, 4),
		m: runMachine{stopSignal: rc.run.signal, hold: rc.run.onSuccess == onSuccessHold,
			once: rc.run.oncePer > 0, exitIfDone: rc.run.exitIfDone, sched: rc.run.sched.spec != ""},
	}
	return s
}

// commandEnv returns the environment the shim and the command start from: the elector's,
// without the Redis passwords (REDIS_PASSWORD, REDIS_SENTINEL_PASSWORD) unless
// keepCredentials: the command does its work with its own credentials, not the elector's.
func commandEnv(environ []string, keepCredentials bool) []string {
	if keepCredentials {
		return environ
	}
	return slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == redisclient.PasswordEnv || name == redisclient.SentinelPasswordEnv
	})
}

// childEnv returns base with the elector's variables for one term set (replacing any that
// were inherited; --schedule's slot variables are dropped too: slotEnv adds them).
func childEnv(base []string, token int64, identity, leaseName string) []string {
	env := make([]string, 0, len(base)+5)
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if name == envFencingToken || name == envIdentity || name == envLeaseName || name == envSlot || name == envAttempt {
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

// slotEnv adds --schedule's variables of the slot (at attempt) to env; env unchanged for a
// zero slot.
func slotEnv(env []string, slot time.Time, attempt int) []string {
	if slot.IsZero() {
		return env
	}
	return append(env, envSlot+"="+slot.UTC().Format(time.RFC3339), envAttempt+"="+strconv.Itoa(attempt))
}

// step applies in to the machine and returns the actions to perform.
func (s *supervisor) step(in runInput) []runAction {
	s.mu.Lock()
	defer s.mu.Unlock()
	acts, _ := s.m.step(in)
	return acts
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
	event := func(ev runEvent) func(syscall.Signal) {
		return func(sig syscall.Signal) { s.perform(s.step(runInput{ev: ev, sig: sig})) }
	}
	return sessionHooks{
		stopMsg: "Received signal: stopping the command and releasing the lease",
		onStop:  event(evSignal),
		onAgain: event(evSignalAgain),
		onOther: event(evSignalOther),
		beforeClose: func(o *outcome) {
			for _, a := range s.step(runInput{ev: evRunEnded, lost: o.lost}) {
				switch a.kind {
				case actRelease:
					s.release(a.token)
				case actStoppedCode:
					o.stopped = a.status.ExitCode()
				}
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

// tryGiveUp makes run give up for reason unless a term has begun; a term that begins later
// does not start the command.
func (s *supervisor) tryGiveUp(reason string) {
	s.perform(s.step(runInput{ev: evGiveUp, reason: reason}))
}

// observed is OnNewLeader with --try-once: a holder other than this replica's current term
// (another replica, or an earlier process with this identity) means giving up.
func (s *supervisor) observed(identity string) {
	if identity == s.identity && s.elector.IsLeader() {
		return
	}
	s.tryGiveUp(fmt.Sprintf("the lease is held by %q (--%s)", identity, flagTryOnce))
}

// perform performs the actions that need no term: those of signals, giving up and ending.
func (s *supervisor) perform(acts []runAction) {
	for _, a := range acts {
		switch a.kind {
		case actKill:
			a.proc.Kill() // before the log, which may block on a stalled stderr
			klog.InfoS("Second signal received: killing the command now", "signal", a.sig, "pid", a.proc.CommandPid())
		case actForward:
			if err := a.proc.Signal(a.sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
				klog.ErrorS(err, "Cannot forward the signal", "signal", a.sig, "pid", a.proc.CommandPid())
				continue
			}
			klog.V(2).InfoS("Forwarded signal to the command", "signal", a.sig, "pid", a.proc.CommandPid())
		case actIgnore:
			msg := "Signal received while no command runs"
			if a.again {
				msg = "Second signal received while no command runs"
			}
			klog.V(2).InfoS(msg, "signal", a.sig)
		case actEnd:
			s.sendEnding(a.ending())
		}
	}
}

// term is one term's OnStartedLeading: it performs the machine's actions for the term,
// whose blocking ones (start, wait, stop, the done mark) bring the next event.
type term struct {
	s       *supervisor
	ctx     context.Context
	token   int64
	proc    *child.Process
	onceRun schedule.Slot // --once-per: the run claimed (zero: none to record)
	started time.Time     // --once-per: when the command last started
	// --schedule: the job's ctx (derived from ctx; nil outside a job) and its slot.
	job     context.Context
	slot    time.Time
	attempt int
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
	t := &term{s: s, ctx: ctx, token: token}
	acts := s.step(runInput{ev: evTermBegan, token: token})
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		if in, ok := t.do(a); ok {
			acts = append(acts, s.step(in)...)
		}
	}
}

// do performs a; ok tells that it brought the event in.
func (t *term) do(a runAction) (in runInput, ok bool) {
	s := t.s
	switch a.kind {
	case actStart:
		return t.start(), true
	case actRun:
		t.proc = a.proc
		return t.run(), true
	case actStop:
		return t.stop(a), true
	case actWithhold:
		s.withhold(a.err)
	case actPrepare:
		go s.prepare() // for the next term, off this release's path
	case actHold:
		if a.end == holdSucceeded {
			klog.InfoS("The command succeeded; holding the lease until SIGTERM or SIGINT (--on-success=hold)", "pid", t.proc.CommandPid(), "token", t.token)
		} else {
			klog.InfoS("Holding the lease without running the command, which succeeded in an earlier term (--on-success=hold)", "token", t.token)
		}
		<-t.ctx.Done()
		return runInput{ev: evTermEnded, cause: context.Cause(t.ctx)}, true
	case actSchedule:
		return t.schedule(), true
	case actCheck:
		return t.check(), true
	case actMarkDone:
		s.once.markDone(t.onceRun)
		t.onceRun = schedule.Slot{}
	case actWaitMark:
		return t.waitUntil(time.Now().Add(min(a.wait, s.once.recheck))), true
	case actWaitPeriod:
		until := t.started.Add(s.once.period)
		klog.InfoS("The command succeeded; holding the lease until the period ends (--once-per)", "token", t.token, "until", until.UTC().Format(time.RFC3339))
		return t.waitUntil(until), true
	case actEnd:
		t.logEnd(a)
		if s.once != nil && (a.end == endExited || a.end == endStartFailed) {
			s.once.ended(t.onceRun, "failed", max(a.status.ExitCode(), 1))
		}
		s.perform([]runAction{a})
	default:
		s.perform([]runAction{a})
	}
	return runInput{}, false
}

// logEnd logs why the term ends the run.
func (t *term) logEnd(a runAction) {
	switch a.end {
	case endExited:
		klog.InfoS("The command exited; releasing the lease", "pid", t.proc.CommandPid(), "status", a.status.String(), "token", t.token)
	case endStartFailed:
		klog.ErrorS(a.err, "Cannot start the command", "command", t.s.spec.Path)
	case endDoneSeen:
		klog.InfoS("Exiting without running the command: it succeeded in this period already (--exit-if-done)", "token", t.token)
	case endDoneRan:
		klog.InfoS("The command succeeded; releasing the lease and exiting (--exit-if-done)", "pid", t.proc.CommandPid(), "token", t.token)
	}
}

// start starts the command for the term: evStarted, or evStartFailed.
func (t *term) start() runInput {
	s := t.s
	env := slotEnv(childEnv(s.baseEnv, t.token, s.identity, s.leaseName), t.slot, t.attempt)
	t.started = time.Now()
	// Stopping is done by stop with the right signal, so Start gets a context that never ends.
	// The go-ahead to the prepared shim carries this term's environment, token included.
	var p *child.Process
	var err error
	if sb := s.standby.take(); sb != nil {
		p, err = sb.Start(context.Background(), env)
	} else {
		spec := s.spec
		spec.Env = env
		p, err = child.Start(context.Background(), spec)
	}
	if err != nil {
		return runInput{ev: evStartFailed, err: err}
	}
	return runInput{ev: evStarted, proc: p}
}

// run logs the command's start, once signals can reach it, and waits for its exit or the
// end of the term: evExited or evTermEnded. A command that exited as the term ended exited
// by itself.
func (t *term) run() runInput {
	p := t.proc
	tree := "process group" // who kills what the command leaves: see docs/CLI.md
	if p.Shimmed() {
		tree = "shim (/proc walk)"
	}
	klog.InfoS("Started the command", "pid", p.CommandPid(), "processGroup", p.CommandPid(), "descendantsKilledBy", tree, "token", t.token, "command", t.s.spec.Path)
	ctx := t.ctx
	if t.job != nil {
		ctx = t.job // derived from the term's: it ends with it, or alone (--overlap cancel)
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		select {
		case <-p.Done():
		default:
			if t.ctx.Err() == nil {
				return runInput{ev: evJobCancelled, cause: context.Cause(ctx)}
			}
			return runInput{ev: evTermEnded, cause: context.Cause(t.ctx)}
		}
	}
	return runInput{ev: evExited, status: p.Wait()}
}

// stop stops the command with a.sig, the grace period and SIGKILL, and waits until its tree
// is gone: evStopped.
func (t *term) stop(a runAction) runInput {
	p := a.proc
	// The signal goes out before the log, which may block on a stalled stderr.
	p.BeginStop(a.sig)
	klog.InfoS("Stopping the command", "pid", p.CommandPid(), "signal", a.sig, "reason", a.reason, "killGrace", t.s.spec.KillGrace)
	es := p.StopWith(context.Background(), a.sig)
	klog.InfoS("The command stopped", "pid", p.CommandPid(), "status", es.String(), "token", t.token)
	if t.s.once != nil && !errors.Is(es.Err, child.ErrSurvivors) {
		t.s.once.ended(t.onceRun, "lost", es.ExitCode())
	}
	return runInput{ev: evStopped, status: es}
}

// withhold ends the run without releasing the lease, because processes of the command may
// still run (cause): the lease then expires by itself, LeaseDuration after the last renewal,
// as if this replica had crashed, which is as long as the other replicas can be kept out.
// It closes the Redis client before the term's OnStartedLeading returns, after which the
// elector would release (on the end of the run, or at a resignation): neither that release
// nor any renewal can then reach Redis, and no later term can begin here. The run ends with
// an error.
func (s *supervisor) withhold(cause error) {
	if s.redis != nil {
		_ = s.redis.Close()
	}
	s.standby.close()
	klog.ErrorS(cause, "Not releasing the lease: processes of the command may still run; it expires by itself")
	s.sendEnding(ending{err: fmt.Errorf("not releasing the lease, which expires by itself: %w", cause)})
}

// release releases the term with token if Redis still holds it: after the renew deadline
// passed (Redis unreachable) the elector steps down without releasing, and an exiting process
// must not leave its lease behind. The release is owner-checked, so it never touches a newer
// term.
func (s *supervisor) release(token int64) {
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

// prepare starts the shim of the next term ahead of it (see standbySlot.prepare).
func (s *supervisor) prepare() {
	spec := s.spec
	spec.Env = s.baseEnv // the shim's own; the command's comes with the go-ahead
	s.standby.prepare(spec)
}

// standbySlot holds the shim of the next term, started ahead of it (see child.Prepare).
type standbySlot struct {
	mu     sync.Mutex
	sb     *child.Standby // nil: none prepared
	closed bool           // run ends: no standby is prepared any more
}

// prepare starts a shim of spec for the next term, unless one is waiting already or run
// ends. Should that shim die before its term, another one is prepared a moment later.
func (w *standbySlot) prepare(spec child.Spec) {
	w.mu.Lock()
	busy := w.sb != nil || w.closed
	w.mu.Unlock()
	if busy {
		return
	}
	sb := child.Prepare(spec)
	w.mu.Lock()
	if w.sb != nil || w.closed {
		w.mu.Unlock()
		sb.Close()
		return
	}
	w.sb = sb
	w.mu.Unlock()
	if exited := sb.Exited(); exited != nil {
		go w.replaceIfLost(sb, exited, spec)
	}
}

// standbyRetry is how long after a prepared shim died unused another one is prepared.
const standbyRetry = time.Second

// replaceIfLost prepares another shim of spec if sb exits while it still waits for its term.
func (w *standbySlot) replaceIfLost(sb *child.Standby, exited <-chan struct{}, spec child.Spec) {
	<-exited
	w.mu.Lock()
	lost := w.sb == sb
	if lost {
		w.sb = nil
	}
	w.mu.Unlock()
	if lost {
		sb.Close()
		klog.InfoS("The shim prepared for the next term exited; preparing another", "retryIn", standbyRetry)
		time.AfterFunc(standbyRetry, func() { w.prepare(spec) })
	}
}

// take returns the prepared shim for a term that begins, nil when none is prepared.
func (w *standbySlot) take() *child.Standby {
	w.mu.Lock()
	defer w.mu.Unlock()
	sb := w.sb
	w.sb = nil
	return sb
}

// close makes the prepared shim exit unused once run ends.
func (w *standbySlot) close() {
	w.mu.Lock()
	sb := w.sb
	w.sb, w.closed = nil, true
	w.mu.Unlock()
	if sb != nil {
		sb.Close()
	}
}
