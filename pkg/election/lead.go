package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/pkg/lease"
)

// renewal is the outcome of one renew attempt.
type renewal struct {
	sent time.Time
	took time.Duration
	ok   bool
	err  error
}

// leadership is the state of one term while this replica leads.
type leadership struct {
	e      *Elector
	logger klog.Logger
	term   lease.Record
	// base carries the renewals and the release: they outlive Run's ctx, so that while
	// OnStartedLeading winds down after a cancel nobody else starts the work.
	base       context.Context
	cancelWork context.CancelCauseFunc // the cause tells the work why (context.Cause)
	workDone   chan struct{}           // closed when OnStartedLeading returned

	lastOK     time.Time   // send time of the last successful acquire or renew
	guard      *trustGuard // ends the term at lastOK + RenewDeadline
	tick       clock.Timer // fires when the next renew is due
	results    chan renewal
	inflight   bool
	cancelCall context.CancelFunc
	retry      backoff

	ctl       *termControl // Resign's way in
	resigning bool         // asked to resign: the work is stopping; release once it returned
	// fatal is a renew's error that retrying cannot cure (Elector.fatal): the work is stopping,
	// the term ends once it returned (released with ReleaseOnCancel), and Run gives up.
	fatal error
}

// lead runs one term: it starts OnStartedLeading, renews every RetryPeriod, and steps down
// when the term is lost, the renew deadline passes or ctx is cancelled. It returns after
// OnStartedLeading returned, with the reason for stepping down. started is false when the
// term's deadline had passed before its work could start (the campaign was held up after the
// reply, in a log write say): nothing started, the record was released, and Run campaigns on.
// fatal is the renew error that retrying cannot cure, if one ended the term: Run gives up.
func (e *Elector) lead(ctx context.Context, term lease.Record, sent time.Time) (reason string, started bool, fatal error) {
	l := e.startTerm(ctx, term, sent)
	if l == nil {
		logger := klog.FromContext(ctx)
		e.errs.failed(logger, e.cfg.Metrics, e.cfg.LeaseName, "acquire", fmt.Errorf("token %d: %w", term.Token, errLateStart), e.clock.Now())
		e.release(context.WithoutCancel(ctx), logger, term)
		return "", false, nil
	}
	defer l.guard.stop()
	defer l.tick.Stop()
	reason, release := l.loop(ctx)
	return l.stepDown(reason, release), true, l.fatal
}

// errLateStart marks a won term whose renew deadline passed before its work could start.
var errLateStart = fmt.Errorf("the renew deadline passed before the term's work could start: %w", context.DeadlineExceeded)

// startTerm records the term and starts OnStartedLeading, or returns nil when the term's
// deadline has passed already (nothing between that check and the start can block). The guard
// runs before the work starts: the deadline counts from the acquire's send time.
func (e *Elector) startTerm(ctx context.Context, term lease.Record, sent time.Time) *leadership {
	if e.timing().overdue(sent, e.clock.Now()) {
		return nil
	}
	l := &leadership{
		e: e, logger: klog.FromContext(ctx), term: term,
		base:       context.WithoutCancel(ctx),
		workDone:   make(chan struct{}),
		lastOK:     sent,
		results:    make(chan renewal, 1),
		cancelCall: func() {},
		retry:      backoff{min: 50 * time.Millisecond, max: e.cfg.RetryPeriod},
		ctl:        newTermControl(),
	}
	e.setLeading(term, sent, l.ctl)
	workCtx, cancel := context.WithCancelCause(context.WithValue(ctx, tokenKey{}, term.Token))
	l.cancelWork = cancel
	l.guard = startTrustGuard(e.clock, e.timing(), sent, func() {
		cancel(fmt.Errorf("%w: %s", ErrLeadershipLost, reasonDeadline))
		e.setFollowing()
	})
	l.tick = e.clock.NewTimer(sent.Add(e.cfg.RetryPeriod).Sub(e.clock.Now()))
	go func() {
		defer close(l.workDone)
		e.cfg.Callbacks.OnStartedLeading(workCtx)
	}()
	// Logged after the work started: a log line is a synchronous write, not worth delaying it.
	// A write that blocks (a stalled stderr) holds up this loop, not the guard.
	l.logger.Info("Became leader", "token", term.Token)
	return l
}

// loop renews the term until it ends, and returns why and whether to release it.
func (l *leadership) loop(ctx context.Context) (reason string, release bool) {
	ctxDone, workDone, resign := ctx.Done(), l.workDone, l.ctl.wake
	for {
		if l.resigning && workDone == nil {
			return reasonResigned, true
		}
		if l.fatal != nil && workDone == nil {
			return reasonGaveUp, l.e.cfg.ReleaseOnCancel // as after a cancel of Run's ctx
		}
		// The deadline first: a term whose deadline passed ends, whatever else became ready
		// while the loop was held up (in a log write, say).
		select {
		case <-l.guard.expired:
			return reasonDeadline, false
		default:
		}
		select {
		case <-ctxDone:
			ctxDone = nil
			if workDone == nil { // the work had ended already
				return reasonStopped, l.e.cfg.ReleaseOnCancel
			}
			// Stop the work; keep renewing until OnStartedLeading has returned.
			l.cancelWork(context.Cause(ctx))
			l.logger.V(2).Info("Stopping: waiting for the work to stop (OnStartedLeading to return; for elector run: CMD)", "token", l.term.Token)
		case <-workDone:
			workDone = nil
			if l.resigning || l.fatal != nil {
				continue // the top of the loop ends the term (with the release)
			}
			if ctx.Err() == nil {
				// The work ended by itself: keep the lease, as client-go does, until ctx ends.
				l.logger.V(2).Info("OnStartedLeading returned; still leading", "token", l.term.Token)
				continue
			}
			return reasonStopped, l.e.cfg.ReleaseOnCancel
		case <-l.guard.expired:
			return reasonDeadline, false
		case <-resign:
			resign = nil
			l.resign("asked in this process (Resign; for elector: POST /resign)")
		case <-l.tick.C():
			l.startRenew()
		case r := <-l.results:
			if reason, over := l.renewed(r); over {
				return reason, false
			}
		}
	}
}

// startRenew sends a renew unless one is in flight. The call is bounded by callTimeout and
// never outlives the renew deadline.
func (l *leadership) startRenew() {
	if l.inflight {
		return
	}
	e := l.e
	l.inflight = true
	now := e.clock.Now()
	timeout := min(e.callTimeout(), l.lastOK.Add(e.cfg.RenewDeadline).Sub(now))
	cctx, cancel := context.WithTimeout(l.base, timeout)
	l.cancelCall = cancel
	go func() {
		ok, err := e.store.renew(cctx, l.term, e.cfg.LeaseDuration)
		l.results <- renewal{sent: now, took: e.clock.Since(now), ok: ok, err: err}
	}()
}

// renewed handles the outcome of a renew; over means the term has ended. The deadline is
// checked first: a reply that arrives as the deadline passes ends the term whichever of the
// two the loop saw first.
func (l *leadership) renewed(r renewal) (reason string, over bool) {
	e := l.e
	l.inflight = false
	l.cancelCall()
	if l.guard.overdue() {
		return reasonDeadline, true
	}
	asked := r.ok && errors.Is(r.err, leasekit.ErrResignRequested)
	if asked {
		r.err = nil // renewed; the request is handled below
	}
	switch {
	case r.err != nil:
		e.errs.failed(l.logger, e.cfg.Metrics, e.cfg.LeaseName, "renew", r.err, e.clock.Now())
		if e.fatal(r.err) {
			l.giveUp(r.err)
		}
		// Renewals go on while the work winds down, the deadline enforced, as after a cancel.
		resetTimer(l.tick, l.retry.next())
	case !r.ok:
		return reasonLost, true
	default:
		e.errs.succeeded(l.logger)
		l.retry.reset()
		l.lastOK = r.sent
		if !l.guard.extend(l.lastOK) {
			return reasonDeadline, true // the deadline passed since the check above
		}
		e.renewed(r.sent)
		e.cfg.Metrics.renewed(e.cfg.LeaseName, r.took)
		l.logger.V(4).Info("Renewed the lease", "token", l.term.Token, "took", r.took)
		resetTimer(l.tick, r.sent.Add(e.cfg.RetryPeriod).Sub(e.clock.Now()))
		if asked {
			l.resign("a resign request names this term (elector resign)")
		}
	}
	return "", false
}

// giveUp begins the step-down after a renew failed with err, which retrying cannot cure: the
// work is told to stop at once (Run will return); the loop keeps renewing, the deadline still
// enforced, and ends the term once the work returned, as after a cancel of Run's ctx.
func (l *leadership) giveUp(err error) {
	if l.fatal != nil {
		return
	}
	l.fatal = err
	l.cancelWork(fmt.Errorf("%w: %s: %w: %w", ErrLeadershipLost, reasonGaveUp, ErrGaveUp, err)) // a no-op after a stop or a resign
	l.logger.Info("Stepping down: Redis refused the renew and retrying cannot help; the work is told to stop (OnStartedLeading's ctx; for elector run: CMD), then Run returns",
		"token", l.term.Token)
}

// stepDown ends the term. The order is the promise of docs/DESIGN.md ("Step-down order:
// indicators before release"): the work is told to stop, this replica stops calling itself
// leader (IsLeader, Status, the metrics) and OnStoppedLeading returns, all before the release
// lets a follower in. It returns after OnStartedLeading and any renew in flight returned.
func (l *leadership) stepDown(reason string, release bool) string {
	l.cancelWork(fmt.Errorf("%w: %s", ErrLeadershipLost, reason)) // a no-op after a stop or a resign
	l.e.setFollowing()
	l.cancelCall() // a renew in flight is of no use any more
	l.logger.Info("Stopped leading", "token", l.term.Token, "reason", reason)
	l.notifyThenRelease(release)
	if l.inflight {
		<-l.results
	}
	<-l.workDone
	return reason
}

// notifyThenRelease runs OnStoppedLeading, then releases the term if asked and marks it over
// (Resign waits for that). The callback runs on Run's goroutine after the lead loop returned:
// this replica already says it does not lead, no renew is sent and no deadline is watched any
// more, so however long the callback takes, the lease only ages towards its expiry: it can
// delay the handover, never make a term trusted longer. The release is deferred, so that a
// panicking callback still releases (and Resign returns) before the panic goes on.
func (l *leadership) notifyThenRelease(release bool) {
	defer func() {
		if release {
			l.e.release(l.base, l.logger, l.term)
		}
		close(l.ctl.over)
	}()
	if stopped := l.e.cfg.Callbacks.OnStoppedLeading; stopped != nil {
		stopped()
	}
}

// ErrNotLeader is returned by Resign and ResignTo when this replica does not lead.
var ErrNotLeader = errors.New("not the leader")

// ErrResigned is wrapped by the error Run returns after this replica resigned (Resign, or a
// request of `elector resign`) while Config.Recampaign is off: the term ended as asked, and
// Run does not campaign again. With Recampaign, Run campaigns again at once; Redis keeps the
// lease from it for the hold-off.
var ErrResigned = errors.New("resigned")

// termControl is how Resign reaches the lead loop of the current term.
type termControl struct {
	wake chan struct{} // a send asks the loop to resign
	over chan struct{} // closed once the term ended and its release (if any) was sent
}

func newTermControl() *termControl {
	return &termControl{wake: make(chan struct{}, 1), over: make(chan struct{})}
}

// Resign ends this replica's term so that another replica leads: it writes a resign request
// for the term in Redis, cancels OnStartedLeading's ctx at once and, once OnStartedLeading
// returned (the lease is renewed meanwhile, as after a cancel of Run's ctx), stops calling
// itself leader and releases the lease (whatever Config.ReleaseOnCancel says). The release
// makes the request a reservation: for Config.ResignHoldOff no replica with this one's
// identity may acquire the lease, so another replica takes over in about one round trip,
// with the next fencing token. This replica then campaigns again (see ErrResigned for
// Recampaign off).
//
// Resign returns nil once the term ended and the release was sent, or ctx.Err() if ctx ended
// first; the step-down completes anyway. It returns an error wrapping ErrNotLeader when this
// replica does not lead, and the Redis error when the request could not be written (then
// nothing changed: the term goes on).
func (e *Elector) Resign(ctx context.Context) error { return e.ResignTo(ctx, "") }

// ResignTo is Resign with a successor: during the hold-off only the replica with identity
// may acquire the lease. If it does not (it is absent, or it is an older elector that does
// not know the protocol), nobody leads until the hold-off ends; then anyone may. identity
// must not be this replica's own.
func (e *Elector) ResignTo(ctx context.Context, identity string) error {
	if identity != "" {
		if err := leasewire.ValidateIdentity(identity); err != nil {
			return fmt.Errorf("resign lease %q: target identity %q %w", e.cfg.LeaseName, identity, err)
		}
		if identity == e.cfg.Identity {
			return fmt.Errorf("resign lease %q: %w: %q is this replica", e.cfg.LeaseName, leasekit.ErrTargetIsHolder, identity)
		}
	}
	e.mu.Lock()
	leading, term, ctl := e.leading, e.term, e.ctl
	e.mu.Unlock()
	if !leading {
		return fmt.Errorf("resign lease %q: %w", e.cfg.LeaseName, ErrNotLeader)
	}
	rctx, cancel := context.WithTimeout(ctx, e.callTimeout())
	err := e.store.resign(rctx, term, identity, e.cfg.ResignHoldOff, e.cfg.LeaseDuration)
	cancel()
	switch {
	case errors.Is(err, leasekit.ErrOtherTerm):
		return fmt.Errorf("resign lease %q: %w: %w", e.cfg.LeaseName, ErrNotLeader, err)
	case err != nil:
		return fmt.Errorf("resign lease %q: %w", e.cfg.LeaseName, err)
	}
	select {
	case ctl.wake <- struct{}{}:
	default: // asked already
	}
	select {
	case <-ctl.over:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// resign begins the step-down of a resignation: the work is told to stop; the loop keeps
// renewing and releases once it returned.
func (l *leadership) resign(why string) {
	if l.resigning {
		return
	}
	l.resigning = true
	l.cancelWork(ErrResigned)
	l.logger.Info("Resigning: the work is told to stop (OnStartedLeading's ctx; for elector run: CMD); the lease is released once it stopped", "token", l.term.Token, "why", why)
}

func (s redisStore) resign(ctx context.Context, term lease.Record, target string, holdOff, timeout time.Duration) error {
	_, err := s.l.RequestResign(ctx, leasekit.ResignRequest{Target: target, HoldOff: holdOff, Timeout: timeout, Term: term})
	return err
}

// trustGuard ends a term at its renew deadline (the send time of the last successful acquire
// or renew + RenewDeadline), on a goroutine of its own that does nothing else: it runs expire
// (cancel the work, stop calling this replica leader) and closes expired, with no log call,
// no user callback, no Redis call and no lock that one of those holds before it. The lead
// loop, which logs and calls out, may be blocked (a log write to a stderr nobody reads):
// the term still ends on time, and the loop only steps down, releasing nothing, once it runs
// again (docs/DESIGN.md, "The trust deadline").
type trustGuard struct {
	clock  clock.Clock
	timing leaseTiming
	expire func() // must not block: a context cancel, a flag under a mutex held for nothing else
	timer  clock.Timer

	mu     sync.Mutex
	lastOK time.Time // send time of the last successful acquire or renew
	ended  bool      // the deadline passed: no renew can extend the term any more

	expired chan struct{} // closed after expire ran
	quit    chan struct{}
	done    chan struct{}
}

// startTrustGuard starts the guard of a term whose acquire was sent at sent.
func startTrustGuard(c clock.Clock, t leaseTiming, sent time.Time, expire func()) *trustGuard {
	g := &trustGuard{
		clock: c, timing: t, expire: expire, lastOK: sent,
		expired: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{}),
	}
	g.timer = c.NewTimer(sent.Add(t.renewDeadline).Sub(c.Now()))
	go g.run()
	return g
}

func (g *trustGuard) run() {
	defer close(g.done)
	defer g.timer.Stop()
	for {
		select {
		case <-g.quit:
			return
		case <-g.timer.C():
		}
		g.mu.Lock()
		now := g.clock.Now()
		if !g.ended && !g.timing.overdue(g.lastOK, now) {
			// Extended as the timer fired: wait for the new deadline.
			g.timer.Reset(g.lastOK.Add(g.timing.renewDeadline).Sub(now))
			g.mu.Unlock()
			continue
		}
		g.ended = true
		g.mu.Unlock()
		g.expire()
		close(g.expired)
		return
	}
}

// extend moves the deadline, and the guard's timer, to count from sent, the send time of a
// successful renew, and reports whether the term goes on: false once the current deadline has passed, even if the
// guard's goroutine has not run yet.
func (g *trustGuard) extend(sent time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended || g.timing.overdue(g.lastOK, g.clock.Now()) {
		g.ended = true
		return false
	}
	g.lastOK = sent
	g.timer.Reset(sent.Add(g.timing.renewDeadline).Sub(g.clock.Now()))
	return true
}

// overdue reports whether the term's deadline has passed.
func (g *trustGuard) overdue() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ended || g.timing.overdue(g.lastOK, g.clock.Now())
}

// stop ends the guard's goroutine and waits for it: after stop, expire is not running and will
// not run.
func (g *trustGuard) stop() {
	close(g.quit)
	<-g.done
}
