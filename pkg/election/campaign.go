package election

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/redisfail"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/lease"
)

// errLateReply marks a winning acquire whose reply came at or after send time + RenewDeadline:
// the term may have expired in Redis already, so it is not started. It counts as a timeout.
var errLateReply = fmt.Errorf("acquire reply came at or after RenewDeadline from its send time: %w", context.DeadlineExceeded)

// follower is the state of one campaign: the wait between attempts and what can end it
// early (the timer, a release heard on the lease channel, a subscription to renew).
type follower struct {
	e           *Elector
	w           *watch
	logger      klog.Logger
	retry       backoff
	timer       clock.Timer
	resubscribe <-chan time.Time // set while the subscription is down between attempts
	polling     bool             // the timer is a poll, sooner than known: set while not listening
	start       clock.Timer      // fires at Elector.startBy (Config.StartTimeout); nil without a bound
	lastErr     error            // the error of the last failed attempt, for StartTimeout's error
}

// attempt is the outcome of one acquire.
type attempt struct {
	term lease.Record
	sent time.Time
	won  bool
	wait time.Duration // until the next attempt, when not won
	poll bool          // wait is a poll, sooner than the expiry just learnt, as the follower does not listen
	// fatal is the error of an attempt that retrying cannot cure (Elector.fatal): Run gives up.
	fatal error
}

// campaign tries to acquire the lease until it succeeds (ok) or ctx is cancelled (not ok, no
// error). sent is the local time at which the winning acquire was sent: the lease is ours for
// LeaseDuration from a moment after it, and the reply came before sent + RenewDeadline. err,
// wrapping ErrGaveUp, is Run's error: an attempt failed in a way retrying cannot cure, or
// Config.StartTimeout passed before any reply from Redis.
func (e *Elector) campaign(ctx context.Context, w *watch) (term lease.Record, sent time.Time, ok bool, err error) {
	f := &follower{
		e: e, w: w, logger: klog.FromContext(ctx),
		retry: backoff{min: 50 * time.Millisecond, max: e.cfg.RetryPeriod},
		timer: e.clock.NewTimer(time.Hour),
	}
	f.timer.Stop()
	defer f.timer.Stop()
	if !e.startBy.IsZero() {
		f.start = e.clock.NewTimer(e.startBy.Sub(e.clock.Now()))
		defer f.stopStart()
	}
	for {
		a, ok := f.attempt(ctx)
		switch {
		case !ok:
			return lease.Record{}, time.Time{}, false, nil
		case a.fatal != nil:
			return lease.Record{}, time.Time{}, false, e.gaveUp("acquire", a.fatal, false)
		case a.won:
			return a.term, a.sent, true, nil
		case f.start != nil && !e.clock.Now().Before(e.startBy):
			return lease.Record{}, time.Time{}, false, e.startTimedOut(f.lastErr)
		}
		f.polling = a.poll
		resetTimer(f.timer, a.wait+e.jitter())
		if !f.sleep(ctx) {
			if ctx.Err() == nil { // the start bound
				return lease.Record{}, time.Time{}, false, e.startTimedOut(f.lastErr)
			}
			return lease.Record{}, time.Time{}, false, nil
		}
	}
}

// replied notes a reply from Redis: Config.StartTimeout no longer applies in this Run.
func (f *follower) replied() {
	f.e.startBy = time.Time{}
	f.stopStart()
}

func (f *follower) stopStart() {
	if f.start != nil {
		f.start.Stop()
		f.start = nil
	}
}

// startC is the channel of the start bound's timer, nil (never ready) without one.
func (f *follower) startC() <-chan time.Time {
	if f.start == nil {
		return nil
	}
	return f.start.C()
}

// attempt sends one acquire and acts on what the core decides its reply means. It is false
// when ctx was cancelled. The call is not cut short by the cancel: a term won meanwhile is
// released, so that followers need not wait for it to expire.
func (f *follower) attempt(ctx context.Context) (attempt, bool) {
	e := f.e
	f.w.ensure(ctx)
	a := attempt{sent: e.clock.Now()}
	base := context.WithoutCancel(ctx)
	actx, cancel := context.WithTimeout(base, e.callTimeout())
	won, st, res, err := e.store.acquire(actx, e.cfg.LeaseDuration)
	cancel()
	r := acquireReply{sent: a.sent, won: won, rec: st.Record, ttl: st.TTL, reservation: res, err: err}
	e.mu.Lock()
	d := e.core.reply(e.timing(), e.clock.Now(), r, ctx.Err() != nil, f.retry.next, f.w.subscribed())
	e.mu.Unlock()
	a.wait, a.poll = d.wait, d.poll
	switch {
	case d.verdict == verdictUntrusted:
		// Not ours to start or release; not observed either: it would name this replica leader.
		f.replied()
		logUntrusted(f.logger, st.Record)
	case d.verdict == verdictDecline:
		if d.late {
			f.lastErr = fmt.Errorf("token %d: %w", st.Record.Token, errLateReply)
			e.errs.failed(f.logger, e.cfg.Metrics, e.cfg.LeaseName, "acquire", f.lastErr, e.clock.Now())
		}
		e.release(base, f.logger, st.Record)
	case ctx.Err() != nil:
	case d.verdict == verdictFailed:
		f.lastErr = err
		e.errs.failed(f.logger, e.cfg.Metrics, e.cfg.LeaseName, "acquire", err, e.clock.Now())
		if e.fatal(err) {
			a.fatal = err
		}
	case d.verdict == verdictStart:
		f.replied()
		e.errs.succeeded(f.logger)
		a.term, a.won = st.Record, true
	case d.verdict == verdictReserved:
		f.replied()
		e.errs.succeeded(f.logger)
		f.retry.reset()
		f.logger.V(4).Info("Lease is reserved after a resignation", "resigned", res.Resigned.Identity, "target", res.Target, "ttl", res.TTL)
	case d.verdict == verdictHeld:
		f.replied()
		e.errs.succeeded(f.logger)
		f.retry.reset()
		e.observe(st.Record, false)
		f.logger.V(4).Info("Lease is held", "holder", st.Record.Identity, "token", st.Record.Token, "ttl", st.TTL)
		e.twin.saw(f.logger, e.errs.names.Identity, e.cfg.Identity, e.lease.Instance(), st.Record, st.TTL, false, a.sent, e.clock.Now())
	}
	return a, ctx.Err() == nil
}

// twinWatch notices another process campaigning under this replica's identity (two `elector
// run` on one host without --identity both take the host name): its record carries the same
// identity and another instance. A crashed predecessor of this process (a container restarted
// in the same pod) leaves such a record too, but nobody renews it: the twin is warned about
// when an event shows it acquire or renew (live), or when an acquire reply finds the same
// record still held after the expiry it had when first seen, with a later expiry.
type twinWatch struct {
	mu     sync.Mutex
	rec    lease.Record // the other instance's record last seen
	seen   time.Time    // when rec was first seen, by the local clock
	expiry time.Time    // rec's expiry as first seen, by the local clock: the latest it can be
	warned lease.Record // the record warned about (once each)
}

// saw takes a record rec held for ttl, as an acquire reply found it or, live, as an acquired
// or renewed event announced it; the request was sent at sent, its reply taken at now. setting
// is how the warning names the identity's setting (Config.Identity, or the CLI's flag).
func (w *twinWatch) saw(logger klog.Logger, setting, identity, instance string, rec lease.Record, ttl time.Duration, live bool, sent, now time.Time) {
	if rec.Identity != identity || rec.Instance == instance || ttl == lease.NoExpiry {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if rec != w.rec {
		w.rec, w.seen, w.expiry = rec, now, now.Add(ttl)
		if !live {
			return
		}
	}
	// Found by a reply after the expiry first seen, the record is a twin's only if that expiry
	// moved (it was renewed): a dead record may still be found a moment after it, as Redis
	// counts its TTL in whole milliseconds and on its own clock, and the follower comes back at
	// that expiry. So the new expiry at its earliest (Redis took ttl after sent) must pass the
	// first one at its latest by more than the two clocks can drift apart since it was seen
	// (on a host whose wall clock ran 0.5 % slow, a record set for 800 ms was still there
	// 4 ms after its expiry by the local clock).
	renewed := now.After(w.expiry) && sent.Add(ttl).After(w.expiry.Add(timing.DriftMargin(sent.Add(ttl).Sub(w.seen))))
	if (live || renewed) && w.warned != rec {
		w.warned = rec
		// At error level, without an error (klog has no warning level): it must stand out. Once
		// per record of the other process, not per attempt.
		logger.Error(nil, "Warning: another process campaigns under this replica's identity: it holds the lease and renews it; give every replica its own identity ("+setting+"; two replicas on one host both default to the host name), or a resign of either shuts both out",
			"identity", identity, "otherInstance", rec.Instance, "token", rec.Token)
	}
}

// sleep waits until the timer fires or a release is heard (true), or ctx is cancelled or the
// start bound passed (false).
func (f *follower) sleep(ctx context.Context) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-f.startC():
			return false
		case <-f.timer.C():
			return true
		case <-f.resubscribe:
			f.resubscribe = nil
			if f.w.ensure(ctx); !f.w.subscribed() {
				f.resubscribe = f.e.clock.After(f.e.cfg.RetryPeriod)
				continue
			}
			f.listening()
		case ev, open := <-f.w.events():
			if !open {
				// The subscription ended: its connection failed. Keep sleeping until the
				// expiry already known: after a restart that lost the lease, trying now
				// would begin a term while the old leader, which finds out at its next
				// renew, still works. Only subscribe again, to hear the next release.
				f.w.lost(f.logger)
				f.resubscribe = f.e.clock.After(resubscribeDelay)
				continue
			}
			f.logger.V(4).Info("Lease event", "event", ev.Kind, "holder", ev.Record.Identity, "token", ev.Record.Token)
			if ev.Kind == leasekit.Acquired || ev.Kind == leasekit.Renewed { // only a live process sends these
				now := f.e.clock.Now()
				f.e.twin.saw(f.logger, f.e.errs.names.Identity, f.e.cfg.Identity, f.e.lease.Instance(), ev.Record, ev.TTL, true, now, now)
			}
			wake, rearm := f.e.onEvent(ev)
			if wake {
				return true
			}
			if rearm >= 0 {
				f.polling = false
				resetTimer(f.timer, rearm+f.e.jitter())
			}
		}
	}
}

// listening re-arms a polling follower that has just subscribed again to the expiry it knows:
// it hears a release now, and a poll that met a Redis restart would retry, and win, before
// the old leader's next renew told it its term is over.
func (f *follower) listening() {
	if !f.polling {
		return
	}
	f.polling = false
	f.e.mu.Lock()
	d, ok := f.e.core.known.until(f.e.clock.Now())
	f.e.mu.Unlock()
	if ok {
		resetTimer(f.timer, d+f.e.jitter())
	}
}

// onEvent records what an event says (leaseCore.event) and decides what a sleeping follower
// does: wake at once (the current term was released), sleep again for rearm (the current
// term was taken or renewed; rearm >= 0), or nothing (stale news).
func (e *Elector) onEvent(ev leasekit.Event) (wake bool, rearm time.Duration) {
	e.mu.Lock()
	current, wake, rearm := e.core.event(e.timing(), e.clock.Now(), ev)
	if !current {
		e.mu.Unlock()
		return false, -1
	}
	identity := ev.Record.Identity
	if wake {
		identity = ""
	}
	e.noteLeaderLocked(identity) // unlocks
	return wake, rearm
}

// resubscribeDelay is how long a follower whose subscription ended waits before subscribing
// again: long enough not to spin while Redis restarts, short enough to hear most releases.
const resubscribeDelay = 50 * time.Millisecond

// resetTimer makes t fire after d, dropping a firing not yet received (real timers do that
// by themselves since Go 1.23; fake ones do not).
func resetTimer(t clock.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
	t.Reset(d)
}

// watch keeps a follower's subscription to the lease's events. Subscribing is best effort:
// without it the follower polls every RetryPeriod, so a failure is logged once and retried
// at most every RetryPeriod.
type watch struct {
	clock     clock.Clock
	every     time.Duration                                   // RetryPeriod: how often a failed subscribe is tried again
	subscribe func(ctx context.Context) (subscription, error) // Elector.subscribe
	sub       subscription
	lastTry   time.Time
	failing   bool
	closing   sync.WaitGroup // subscriptions being closed in the background
}

// ensure subscribes if there is no subscription and the last failed try is RetryPeriod old.
func (w *watch) ensure(ctx context.Context) {
	if w.sub != nil || (!w.lastTry.IsZero() && w.clock.Since(w.lastTry) < w.every) {
		return
	}
	w.lastTry = w.clock.Now()
	sub, err := w.subscribe(ctx)
	logger := logr.FromContextOrDiscard(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		if !w.failing {
			w.failing = true
			kv := []any{"reason", redisfail.Reason(err)}
			if fix := redisfail.Hint(err, redisfail.NamesFrom(ctx)); fix != "" {
				kv = append(kv, "fix", fix)
			}
			logger.Error(err, "Cannot subscribe to lease events; polling every retry period instead", kv...)
		}
		return
	}
	if w.failing {
		w.failing = false
		logger.Info("Subscribed to lease events again")
	}
	w.sub = sub
}

// subscribe is a follower's subscription to the lease's events, each try bounded as the
// Elector's calls are, counted when Redis confirmed it and reported when it failed.
func (e *Elector) subscribe(ctx context.Context) (subscription, error) {
	sctx, cancel := context.WithTimeout(ctx, e.callTimeout())
	defer cancel()
	sub, err := e.store.subscribe(sctx)
	if err != nil {
		if ctx.Err() == nil {
			e.cfg.Metrics.redisError(e.cfg.LeaseName, "subscribe", err)
		}
		return nil, err
	}
	e.subscriptions.Add(1)
	return sub, nil
}

// events returns the channel of events, nil (blocking forever) without a subscription.
func (w *watch) events() <-chan leasekit.Event {
	if w.sub == nil {
		return nil
	}
	return w.sub.Events()
}

func (w *watch) subscribed() bool { return w.sub != nil }

// lost drops a subscription whose channel closed.
func (w *watch) lost(logger logr.Logger) {
	logger.V(2).Info("Lease event subscription closed")
	w.close()
	w.lastTry = time.Time{}
}

// close ends the subscription, if any, without waiting: it is called by a follower that has
// just won the lease, between the acquire and OnStartedLeading. wait waits for it.
func (w *watch) close() {
	if sub := w.sub; sub != nil {
		w.closing.Go(func() { _ = sub.Close() })
		w.sub = nil
	}
	w.lastTry = time.Time{}
}

// wait closes the subscription and waits until every closed subscription has ended.
func (w *watch) wait() {
	w.close()
	w.closing.Wait()
}
