package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/redisfail"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/election"
)

// session is the loop run and sidecar share: it runs the elector of a replica until Run
// returns, serves the endpoints meanwhile, ends the run on the first SIGTERM or SIGINT, on a
// failure of the HTTP server or on an ending its owner reports, and closes the replica.
// Its outcome decides the exit code (exitCode). It is built whole, with its owner's hooks,
// once the replica exists (newSession).
type session struct {
	l        *replica
	sigs     <-chan os.Signal
	hooks    sessionHooks
	received syscall.Signal // the first SIGTERM or SIGINT, 0 before
}

// sessionHooks is what the owner of a session does with its signals and at its end: run's
// supervisor acts on its command; the sidecar sets stopMsg only.
type sessionHooks struct {
	stopMsg     string                   // logged at the first SIGTERM or SIGINT while leading
	onStop      func(sig syscall.Signal) // the first SIGTERM or SIGINT, before the run is cancelled; may be nil
	onAgain     func(sig syscall.Signal) // a later SIGTERM or SIGINT; nil: like the first
	onOther     func(sig syscall.Signal) // any other caught signal; may be nil
	beforeClose func(o *outcome)         // after Run returned, before the replica closes; may be nil
	ends        <-chan ending            // reasons the owner gives to end the run; nil: none
}

// ending is a reason to end the run: the command exited by itself, could not be started, or
// run gives up without leading.
type ending struct {
	exited   bool // the command exited by itself with code
	code     int
	err      error  // a runtime error
	gaveUp   string // why run gives up without leading
	doneSeen bool   // --exit-if-done found the done mark: no command ran, the run ends with 0
}

// outcome is what ended a run.
type outcome struct {
	runErr     error  // Run's error
	lost       bool   // runErr is election.ErrLeadershipLost (--exit-on-lost)
	runtimeErr error  // the HTTP server failed, or the command could not be started
	gaveUp     string // run gave up without leading (--timeout, --try-once)
	childCode  int    // the exit code of a command that exited by itself, -1 if none
	stopped    int    // the exit code of a command stopped for the elector's exit, -1 if none
	doneSeen   bool   // --exit-if-done found the done mark: no command ran
}

// catchSignals starts catching caught (SIGTERM and SIGINT end the run) and returns their
// channel for newSession; stop ends the catching. Catching starts before the campaign, so
// that a SIGTERM while the replica starts ends the run cleanly once it runs.
func catchSignals(caught ...os.Signal) (sigs <-chan os.Signal, stop func()) {
	c := make(chan os.Signal, 8)
	signal.Notify(c, caught...)
	return c, func() { signal.Stop(c) }
}

// newSession returns the session of l, reading sigs (catchSignals), with its owner's hooks.
func newSession(l *replica, sigs <-chan os.Signal, hooks sessionHooks) *session {
	return &session{l: l, sigs: sigs, hooks: hooks}
}

// run runs the elector until Run returns and returns what ended the run, after the
// replica (endpoints, status file, client) was closed.
func (s *session) run(ctx context.Context) outcome {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- s.runElector(redisfail.WithNames(runCtx, redisNames)) }()
	httpErr := make(chan error, 1)
	s.l.serveHTTP(httpErr)

	o := outcome{childCode: -1, stopped: -1}
	for running := true; running; {
		select {
		case sig := <-s.sigs:
			s.signal(sig, cancel)
		case e := <-s.hooks.ends:
			o.apply(e)
			cancel()
		case err := <-httpErr:
			o.runtimeErr = err
			cancel()
		case o.runErr = <-errc:
			running = false
		}
	}
	s.lateExit(&o)
	o.lost = errors.Is(o.runErr, election.ErrLeadershipLost) || errors.Is(o.runErr, election.ErrResigned)
	if s.hooks.beforeClose != nil {
		s.hooks.beforeClose(&o)
	}
	s.l.close()
	return o
}

// gaveUpPause is how long the command waits before it runs the elector again after Run gave
// up (election.ErrGaveUp): the library's default retry period.
const gaveUpPause = timing.DefaultRetryPeriod

// runElector runs the elector until Run returns for good. Run gives up on a Redis error that
// retrying cannot cure (a refused password, a missing ACL rule: election.ErrGaveUp); the
// command keeps trying instead, as it always has: such an error is loud (the log line with
// its fix, /leader's redisError, elector_redis_up 0) while liveness stays 200, and an
// administrator's fix takes effect without a restart. A term that such an error ended counts
// as a lost term: with --exit-on-lost (Recampaign off) Run's error wraps ErrLeadershipLost, and
// the run ends as after any lost term. ctx carries the flags' names for the fixes.
func (s *session) runElector(ctx context.Context) error {
	var last string
	for {
		err := s.l.elector.Run(ctx)
		switch {
		case !errors.Is(err, election.ErrGaveUp) || errors.Is(err, election.ErrLeadershipLost):
			return err
		case ctx.Err() != nil:
			return nil // stopped, as Run returns after a cancel
		}
		if msg := err.Error(); msg != last {
			last = msg
			klog.InfoS("The elector gave up on a Redis error that retrying cannot cure; trying again until it is fixed", "every", gaveUpPause, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(gaveUpPause):
		}
	}
}

// signal handles one caught signal: the first SIGTERM or SIGINT cancels the run.
func (s *session) signal(got os.Signal, cancel context.CancelFunc) {
	sig, _ := got.(syscall.Signal)
	switch {
	case sig != syscall.SIGTERM && sig != syscall.SIGINT:
		if s.hooks.onOther != nil {
			s.hooks.onOther(sig)
		}
	case s.received != 0 && s.hooks.onAgain != nil:
		s.hooks.onAgain(sig)
	default:
		if s.received == 0 {
			s.received = sig
			if s.hooks.onStop != nil {
				s.hooks.onStop(sig)
			}
		}
		msg := s.stopMessage() // read before the cancel: it says whether this replica led
		cancel()               // before the log line: nothing that can block comes first
		klog.InfoS(msg, "signal", sig)
	}
}

// followerStopMsg is logged at the first SIGTERM or SIGINT while not leading: there is no
// command to stop and no lease to release.
const followerStopMsg = "Received signal: not leading; stopping the campaign and exiting"

// stopMessage is what the first SIGTERM or SIGINT logs: stopMsg while leading,
// followerStopMsg otherwise.
func (s *session) stopMessage() string {
	if s.l != nil && s.l.elector != nil && !s.l.elector.IsLeader() {
		return followerStopMsg
	}
	return s.hooks.stopMsg
}

// lateExit takes the exit of a command that exited by itself just as the elector stopped.
func (s *session) lateExit(o *outcome) {
	for {
		select {
		case e := <-s.hooks.ends:
			if e.exited {
				o.childCode = e.code
			}
		default:
			return
		}
	}
}

// apply records e in o.
func (o *outcome) apply(e ending) {
	switch {
	case e.exited:
		o.childCode = e.code
	case e.err != nil:
		o.runtimeErr = e.err
	case e.gaveUp != "":
		o.gaveUp = e.gaveUp
	case e.doneSeen:
		o.doneSeen = true
	}
}

// exitCode returns the exit code of o, in this order: leadership lost with --exit-on-lost
// (3), given up without leading (4), Run's error, another runtime error (1), 0 when
// --exit-if-done found the done mark (no command ran), the exit code of the command that
// exited by itself or was stopped for the elector's exit, and 0.
func (c *cli) exitCode(who string, o outcome) int {
	switch {
	case o.lost && errors.Is(o.runErr, election.ErrResigned):
		klog.InfoS("Resigned: exiting because of --exit-on-lost", "code", exitNoLeader)
		return exitNoLeader
	case o.lost:
		klog.InfoS("Leadership lost: exiting because of --exit-on-lost", "code", exitNoLeader, "cause", o.runErr)
		return exitNoLeader
	case o.gaveUp != "" && o.runErr == nil:
		klog.InfoS("Giving up without leading", "reason", o.gaveUp, "code", exitNotLeader)
		return exitNotLeader
	case o.runErr != nil:
		return c.runtimeError(who, o.runErr)
	case o.runtimeErr != nil:
		return c.runtimeError(who, o.runtimeErr)
	case o.doneSeen && o.childCode < 0:
		klog.InfoS("Exiting without running the command: the done mark holds (--exit-if-done)", "code", exitOK)
		return exitOK
	case o.childCode >= 0:
		klog.InfoS("Exiting with the exit code of the command", "code", o.childCode)
		return o.childCode
	case o.stopped >= 0:
		klog.InfoS("Exiting with the exit code of the command", "code", o.stopped)
		return o.stopped
	}
	return exitOK
}
