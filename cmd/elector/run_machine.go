package main

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/elector/elector/cmd/elector/internal/child"
	"github.com/elector/elector/pkg/election"
)

// The state machine of elector run's supervisor: which term runs CMD, when it is stopped,
// when the run ends and whether the lease may be released. runMachine is pure: step takes
// one event and returns the actions to perform (start CMD, send the stop signal, SIGKILL,
// withhold or release the lease, end the run), which the supervisor performs
// (run_supervisor.go). The callers serialise steps; the elector runs one term at a time
// (OnStartedLeading returns before the next one begins). TestRunMachineEveryStateAndEvent
// applies every event to every state.

// runState is the phase of elector run's supervisor.
type runState int

const (
	runCampaigning runState = iota // no term has begun here: --timeout and --try-once apply
	runGaveUp                      // gave up before leading: no term starts CMD; the run ends
	runStarting                    // a term began: CMD is being started
	runRunning                     // CMD runs in the current term
	runStopping                    // the term ended: CMD got its stop signal; its tree is not yet gone
	runHolding                     // a term leads without CMD: after a success (--on-success=hold, --once-per) or while the done mark holds
	runChecking                    // --once-per: a term reads the done mark before it may run CMD
	runFollowing                   // the last term led here is over and CMD's tree is gone
	runEnded                       // CMD exited by itself, could not start, or --exit-if-done: the run ends
	runWithheld                    // processes of CMD may have survived it: no release, no term; the run ends
	runScheduled                   // --schedule: a term leads without CMD between slots; the Scheduler starts CMD for each slot
	numRunStates
)

var runStateNames = [...]string{"campaigning", "gave up", "starting", "running", "stopping", "holding", "checking", "following", "ended", "withheld", "scheduled"}

// String names the state.
func (s runState) String() string {
	if s >= 0 && int(s) < len(runStateNames) {
		return runStateNames[s]
	}
	return "invalid"
}

// runEvent is what happens to the supervisor: a term, CMD, a signal, a give-up, the run's end.
type runEvent int

const (
	evTermBegan    runEvent = iota // OnStartedLeading of a term (token)
	evStarted                      // CMD started (proc)
	evStartFailed                  // CMD could not be started (err; child.ErrSurvivors: an earlier tree may survive)
	evExited                       // CMD exited by itself (status)
	evTermEnded                    // the term's ctx ended (cause: lost, resigned or the run's end)
	evStopped                      // the stopped CMD's tree is gone, or may survive (status.Err)
	evSignal                       // the first SIGTERM or SIGINT (sig), before the run is cancelled
	evSignalAgain                  // a later SIGTERM or SIGINT (sig)
	evSignalOther                  // SIGHUP, SIGUSR1 or SIGUSR2 (sig)
	evGiveUp                       // --timeout elapsed, or --try-once saw another holder (reason)
	evMarkHolds                    // --once-per: the done mark holds for wait
	evDue                          // --once-per: no done mark holds (or --force): CMD is due
	evRecheck                      // --once-per: the wait for the mark or the period is over
	evRunEnded                     // the elector's Run returned (lost: --exit-on-lost's loss)
	evSlot                         // --schedule: the Scheduler's job asks CMD to run for a slot (slot, attempt)
	evJobCancelled                 // --schedule: the job's ctx ended while the term goes on (--overlap cancel)
	numRunEvents
)

var runEventNames = [...]string{"term began", "started", "start failed", "exited", "term ended", "stopped", "signal", "signal again", "other signal", "give up", "mark holds", "due", "recheck", "run ended", "slot", "job cancelled"}

// String names the event.
func (e runEvent) String() string {
	if e >= 0 && int(e) < len(runEventNames) {
		return runEventNames[e]
	}
	return "invalid"
}

// runInput is one event with what it carries.
type runInput struct {
	ev      runEvent
	token   int64            // evTermBegan
	proc    *child.Process   // evStarted
	err     error            // evStartFailed
	status  child.ExitStatus // evExited, evStopped
	cause   error            // evTermEnded: context.Cause of the term's ctx
	sig     syscall.Signal   // evSignal, evSignalAgain, evSignalOther
	reason  string           // evGiveUp
	wait    time.Duration    // evMarkHolds
	lost    bool             // evRunEnded
	slot    time.Time        // evSlot
	attempt int              // evSlot
}

// runActionKind is what the supervisor is asked to do.
type runActionKind int

const (
	actStart       runActionKind = iota // start CMD for the term (token): evStarted or evStartFailed follows
	actRun                              // log CMD's start, then wait for its exit (evExited) or the term's end (evTermEnded)
	actStop                             // send sig to CMD's tree before anything that can block, then wait until it is gone: evStopped
	actKill                             // SIGKILL CMD's tree now (a second signal)
	actForward                          // pass sig on to CMD's process group
	actIgnore                           // a signal while no command runs: logged only
	actWithhold                         // close the Redis client and the standby, end the run without releasing (err)
	actEnd                              // end the run (end); the elector releases
	actHold                             // lead without CMD until the term ends (evTermEnded)
	actCheck                            // --once-per: read the done mark: evDue, evMarkHolds or evTermEnded
	actMarkDone                         // --once-per: write the done mark of the term's success
	actWaitMark                         // --once-per: wait while the mark holds (wait): evRecheck or evTermEnded
	actWaitPeriod                       // --once-per: wait until the period of the success ends: evRecheck or evTermEnded
	actPrepare                          // prepare the shim of the next term
	actRelease                          // release the last term (token) if Redis still holds it
	actStoppedCode                      // the run's exit code is that of CMD stopped for the elector's exit (status)
	actSchedule                         // --schedule: run the Scheduler for the term until it ends: evTermEnded
	actFinish                           // --schedule: the slot's run is over: hand CMD's end (status, or err) to the Scheduler
)

var runActionNames = [...]string{"start", "run", "stop", "kill", "forward", "ignore", "withhold", "end", "hold", "check", "markDone", "waitMark", "waitPeriod", "prepare", "release", "stoppedCode", "schedule", "finish"}

// runAction is one thing the supervisor does, in the order step lists them.
type runAction struct {
	kind    runActionKind
	token   int64
	proc    *child.Process
	sig     syscall.Signal
	reason  string           // actStop: why the term ended
	status  child.ExitStatus // actEnd (CMD's exit), actStoppedCode
	err     error            // actWithhold
	wait    time.Duration    // actWaitMark
	end     endKind          // actEnd, actHold: which ending, for the log
	again   bool             // actIgnore: a second SIGTERM or SIGINT
	slot    time.Time        // actStart under --schedule: the slot CMD runs for (zero: none)
	attempt int              // actStart under --schedule
}

// endKind tells why the run ends (actEnd) or holds (actHold), which the log says.
type endKind int

const (
	endExited       endKind = iota // CMD exited by itself; its code is the run's
	endStartFailed                 // CMD could not be started (err)
	endGaveUp                      // not leading: --timeout, --try-once (reason)
	endDoneSeen                    // --exit-if-done: the mark holds
	endDoneRan                     // --exit-if-done: CMD succeeded and its mark was written
	holdSucceeded                  // actHold: CMD succeeded now (--on-success=hold)
	holdDoneEarlier                // actHold: CMD succeeded in an earlier term (--on-success=hold)
)

var endNames = [...]string{"exited", "start failed", "gave up", "done seen", "done ran", "succeeded", "done earlier"}

// String describes the action for tests, e.g. "stop(quit, leadership lost)".
func (a runAction) String() string {
	n := runActionNames[a.kind]
	switch a.kind {
	case actStart, actRelease:
		return fmt.Sprintf("%s(%d)", n, a.token)
	case actStop:
		return fmt.Sprintf("%s(%v, %s)", n, a.sig, a.reason)
	case actForward, actIgnore:
		return fmt.Sprintf("%s(%v)", n, a.sig)
	case actEnd:
		if a.end == endExited {
			return fmt.Sprintf("%s(%s %d)", n, endNames[a.end], a.status.ExitCode())
		}
		return fmt.Sprintf("%s(%s)", n, endNames[a.end])
	case actHold:
		return fmt.Sprintf("%s(%s)", n, endNames[a.end])
	case actStoppedCode:
		return fmt.Sprintf("%s(%d)", n, a.status.ExitCode())
	case actSchedule:
		return fmt.Sprintf("%s(%d)", n, a.token)
	case actFinish:
		if a.err != nil {
			return n + "(start failed)"
		}
		return fmt.Sprintf("%s(%d)", n, a.status.ExitCode())
	}
	return n
}

// ending is what actEnd reports to the session.
func (a runAction) ending() ending {
	switch a.end {
	case endExited:
		return ending{exited: true, code: a.status.ExitCode()}
	case endStartFailed:
		return ending{err: fmt.Errorf("start the command: %w", a.err)}
	case endGaveUp:
		return ending{gaveUp: a.reason}
	case endDoneSeen:
		return ending{doneSeen: true} // no command ran: no exit code of its to report
	}
	return ending{exited: true, code: 0}
}

// runMachine is the supervisor's state: the phase and what it remembers across terms.
type runMachine struct {
	// Configuration.
	stopSignal syscall.Signal // --stop-signal
	hold       bool           // --on-success=hold
	once       bool           // --once-per
	exitIfDone bool           // --exit-if-done
	sched      bool           // --schedule: CMD runs per slot; its exit returns to scheduled

	state    runState
	proc     *child.Process    // runRunning, runStopping: CMD
	lastTerm int64             // the token of the last term that began here, 0 before
	signal   syscall.Signal    // the first SIGTERM or SIGINT, 0 before
	done     bool              // CMD succeeded with --on-success=hold: no term runs it again
	stopped  *child.ExitStatus // how CMD ended when stopped after the elector's signal
}

// step applies in and returns the actions to perform; ok is false for an event that cannot
// happen in the state (ignored: it never starts CMD nor releases).
func (m *runMachine) step(in runInput) (acts []runAction, ok bool) {
	switch in.ev { // the same in every state
	case evSignal:
		if m.signal == 0 {
			m.signal = in.sig
		}
		return nil, true
	case evSignalAgain, evSignalOther:
		return m.signalled(in), true
	case evGiveUp:
		if m.state != runCampaigning {
			return nil, true // a term began: too late to give up; or the run ends already
		}
		m.state = runGaveUp
		return []runAction{{kind: actEnd, end: endGaveUp, reason: in.reason}}, true
	}
	return runSteps[m.state](m, in)
}

// runSteps holds, per state, its transitions for the events that depend on the state.
var runSteps = [numRunStates]func(m *runMachine, in runInput) ([]runAction, bool){
	runCampaigning: (*runMachine).stepIdle,
	runGaveUp:      (*runMachine).stepGaveUp,
	runStarting:    (*runMachine).stepStarting,
	runRunning:     (*runMachine).stepRunning,
	runStopping:    (*runMachine).stepStopping,
	runHolding:     (*runMachine).stepHolding,
	runChecking:    (*runMachine).stepChecking,
	runFollowing:   (*runMachine).stepIdle,
	runEnded:       (*runMachine).stepEnded,
	runWithheld:    (*runMachine).stepWithheld,
	runScheduled:   (*runMachine).stepScheduled,
}

// stepIdle is campaigning and following: no term runs here.
func (m *runMachine) stepIdle(in runInput) ([]runAction, bool) {
	switch in.ev {
	case evTermBegan:
		return m.begin(in.token), true
	case evRunEnded:
		return m.runEnded(in.lost), true
	}
	return nil, false
}

// stepGaveUp is gave up: the run ends with 4 and no term runs CMD.
func (m *runMachine) stepGaveUp(in runInput) ([]runAction, bool) {
	switch in.ev {
	case evTermBegan:
		return nil, true // a term that begins after giving up does not run CMD
	case evRunEnded:
		return nil, true // no term began: nothing to release
	case evSlot:
		return nil, true
	}
	return nil, false
}

// stepStarting is starting: the term's goroutine starts CMD.
func (m *runMachine) stepStarting(in runInput) ([]runAction, bool) {
	switch in.ev {
	case evStarted:
		m.state, m.proc = runRunning, in.proc
		return []runAction{{kind: actRun, proc: in.proc}}, true
	case evStartFailed:
		if errors.Is(in.err, child.ErrSurvivors) {
			return m.withhold(fmt.Errorf("start the command: %w", in.err)), true
		}
		if m.sched {
			m.state = runScheduled // the slot's run failed; the next slot may start CMD again
			return []runAction{{kind: actPrepare}, {kind: actFinish, err: in.err}}, true
		}
		m.state = runEnded
		return []runAction{{kind: actEnd, end: endStartFailed, err: in.err}}, true
	}
	return nil, false
}

// stepRunning is running: CMD exits by itself, or the term ends and CMD is stopped, with the
// elector's own signal when it is stopping.
func (m *runMachine) stepRunning(in runInput) ([]runAction, bool) {
	switch in.ev {
	case evExited:
		return m.exited(in.status), true
	case evTermEnded:
		m.state = runStopping
		sig, reason := m.stopSignal, "leadership lost"
		if errors.Is(in.cause, election.ErrResigned) {
			reason = "resigned"
		}
		if m.signal != 0 {
			sig, reason = m.signal, "elector stopping"
		}
		return []runAction{{kind: actStop, proc: m.proc, sig: sig, reason: reason}}, true
	case evJobCancelled:
		if !m.sched {
			return nil, false
		}
		m.state = runStopping
		return []runAction{{kind: actStop, proc: m.proc, sig: m.stopSignal, reason: "the next slot came (--overlap cancel)"}}, true
	}
	return nil, false
}

// stepStopping is stopping: the stop ends when CMD's tree is gone, or may have survived.
func (m *runMachine) stepStopping(in runInput) ([]runAction, bool) {
	if in.ev == evStopped {
		return m.stoppedTree(in.status), true
	}
	return nil, false
}

// stepHolding is holding: the term leads without CMD until it ends, or, with --once-per,
// until the mark is read again.
func (m *runMachine) stepHolding(in runInput) ([]runAction, bool) {
	switch {
	case in.ev == evTermEnded:
		m.state = runFollowing
		return nil, true
	case in.ev == evRecheck && m.once:
		m.state = runChecking
		return []runAction{{kind: actCheck}}, true
	}
	return nil, false
}

// stepChecking is checking: the done mark decides whether CMD runs, the term waits, or
// (--exit-if-done) the run ends.
func (m *runMachine) stepChecking(in runInput) ([]runAction, bool) {
	switch in.ev {
	case evTermEnded:
		m.state = runFollowing
		return nil, true
	case evDue:
		m.state = runStarting
		return []runAction{{kind: actStart, token: m.lastTerm}}, true
	case evMarkHolds:
		if m.exitIfDone {
			m.state = runEnded
			return []runAction{{kind: actEnd, end: endDoneSeen}}, true
		}
		m.state = runHolding
		return []runAction{{kind: actWaitMark, wait: in.wait}}, true
	}
	return nil, false
}

// stepScheduled is scheduled: the term leads without CMD between slots; the Scheduler's job
// asks for CMD per slot, and the term's end (once the Scheduler returned, after its job did)
// makes it follow. After the elector's SIGTERM or SIGINT no slot starts CMD: the term is
// ending, and the slot's run is recorded lost for the next leader.
func (m *runMachine) stepScheduled(in runInput) ([]runAction, bool) {
	switch in.ev {
	case evTermEnded:
		m.state = runFollowing
		return nil, true
	case evSlot:
		if m.signal != 0 {
			return nil, true
		}
		m.state = runStarting
		return []runAction{{kind: actStart, token: m.lastTerm, slot: in.slot, attempt: in.attempt}}, true
	}
	return nil, false
}

// stepEnded is ended: the session ends the run, after which the elector releases.
func (m *runMachine) stepEnded(in runInput) ([]runAction, bool) {
	switch in.ev {
	case evTermBegan:
		return nil, true // the run ends: a term that begins meanwhile does not run CMD
	case evRunEnded:
		return m.runEnded(in.lost), true // CMD's tree is gone
	case evSlot:
		return nil, true // the run ends: no slot runs CMD
	}
	return nil, false
}

// stepWithheld is withheld: absorbing; neither a term nor a release.
func (m *runMachine) stepWithheld(in runInput) ([]runAction, bool) {
	switch in.ev {
	case evTermBegan:
		return nil, true // no term: the Redis client is closed
	case evRunEnded:
		return m.runEnded(false), true // no release: the lease expires by itself
	case evSlot:
		return nil, true // processes of CMD may survive: no other CMD
	}
	return nil, false
}

// signalled handles a second SIGTERM or SIGINT (SIGKILL to CMD's tree) and any other caught
// signal (forwarded to CMD), in every state: they act on CMD while it runs or is stopping.
func (m *runMachine) signalled(in runInput) []runAction {
	again := in.ev == evSignalAgain
	if m.state != runRunning && m.state != runStopping {
		return []runAction{{kind: actIgnore, sig: in.sig, again: again}}
	}
	if again {
		return []runAction{{kind: actKill, proc: m.proc, sig: in.sig}}
	}
	return []runAction{{kind: actForward, proc: m.proc, sig: in.sig}}
}

// begin starts the term with token: CMD starts, unless it succeeded already with
// --on-success=hold, or --once-per reads the done mark first.
func (m *runMachine) begin(token int64) []runAction {
	m.lastTerm = token
	switch {
	case m.done:
		m.state = runHolding
		return []runAction{{kind: actHold, end: holdDoneEarlier, token: token}}
	case m.once:
		m.state = runChecking
		return []runAction{{kind: actCheck}}
	case m.sched:
		m.state = runScheduled
		return []runAction{{kind: actSchedule, token: token}}
	}
	m.state = runStarting
	return []runAction{{kind: actStart, token: token}}
}

// exited handles CMD's exit by itself: survivors withhold the release; a success holds the
// lease with --on-success=hold or --once-per (which marks it done first, or with
// --exit-if-done ends the run); otherwise the run ends with CMD's code.
func (m *runMachine) exited(es child.ExitStatus) []runAction {
	m.proc = nil
	if errors.Is(es.Err, child.ErrSurvivors) {
		return m.withhold(es.Err)
	}
	if m.sched { // the slot's run is over, not the run: the term waits for the next slot
		m.state = runScheduled
		return []runAction{{kind: actPrepare}, {kind: actFinish, status: es}}
	}
	ok := es.Signal == 0 && es.Code == 0
	switch {
	case ok && m.hold:
		m.state, m.done = runHolding, true
		return []runAction{{kind: actHold, end: holdSucceeded, token: m.lastTerm}}
	case ok && m.once && m.exitIfDone:
		m.state = runEnded
		return []runAction{{kind: actMarkDone}, {kind: actEnd, end: endDoneRan, status: es}}
	case ok && m.once:
		m.state = runHolding
		return []runAction{{kind: actMarkDone}, {kind: actWaitPeriod}}
	}
	m.state = runEnded
	return []runAction{{kind: actEnd, end: endExited, status: es}}
}

// stoppedTree handles the end of a stopped CMD: survivors withhold the release; otherwise the
// term is over, and the next term's shim is prepared unless the elector is stopping.
func (m *runMachine) stoppedTree(es child.ExitStatus) []runAction {
	m.proc = nil
	if m.signal != 0 {
		m.stopped = &es
	}
	if errors.Is(es.Err, child.ErrSurvivors) {
		return m.withhold(es.Err)
	}
	if m.sched {
		// The term's pass goes on until the Scheduler returns (evTermEnded): this was its
		// job's CMD, stopped for the term's end or the job's cancel.
		m.state = runScheduled
		if m.signal != 0 {
			return []runAction{{kind: actFinish, status: es}}
		}
		return []runAction{{kind: actPrepare}, {kind: actFinish, status: es}}
	}
	m.state = runFollowing
	if m.signal != 0 {
		return nil
	}
	return []runAction{{kind: actPrepare}}
}

// withhold ends the run without a release: processes of CMD may survive (cause).
func (m *runMachine) withhold(cause error) []runAction {
	m.state, m.proc = runWithheld, nil
	return []runAction{{kind: actWithhold, err: cause}}
}

// runEnded releases the last term after --exit-on-lost's loss (lost: the elector steps down
// without a release once the renew deadline passed), and reports how a CMD stopped for the
// elector's exit ended. Only states in which no CMD runs call it.
func (m *runMachine) runEnded(lost bool) []runAction {
	var acts []runAction
	if lost && m.lastTerm != 0 {
		acts = append(acts, runAction{kind: actRelease, token: m.lastTerm})
	}
	if m.stopped != nil {
		acts = append(acts, runAction{kind: actStoppedCode, status: *m.stopped})
	}
	return acts
}
