package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/redisfail"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/lease"
)

// One term of an Elector, in the order it runs; Run (elector.go) alternates the two roles.
//
//   - The follower (campaign): it sends acquires, sleeps until the expiry it learnt or a
//     release it hears on the lease's channel (watch), and starts nothing the core refuses.
//   - The decisions (leaseCore): what one replica knows of one lease (its tokens, termGuard,
//     and the expiry of the holder last heard of, knownExpiry) and the rules that decide from
//     an acquire reply (leaseCore.reply) or an event (leaseCore.event) whether a term may
//     start, which news is stale and how long to wait. They are pure: no clock, no network, no
//     user code. The Elector and the Group (group_machine.go) are their two drivers, which
//     call Redis, run the callbacks and keep the timers, so that every safety rule is written,
//     reviewed and model-checked (model/, the simulator) once for both.
//   - The leader (lead): it starts OnStartedLeading, renews every RetryPeriod, ends the term at
//     its renew deadline (trustGuard), steps down in the promised order and resigns (Resign).

// The follower.

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
	warnedBelow int64            // the last held record logged for a token below one seen before
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
		retry: newBackoff(e.cfg.RetryPeriod),
		timer: e.newWakeTimer(),
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
		e.errs.succeeded(f.logger) // may write a log line, which may block
		if ctx.Err() != nil {
			// Cancelled while that line was written: Run returns without starting the term,
			// so it releases it, as it does a term won by an acquire in flight at the cancel.
			e.release(base, f.logger, st.Record)
			break
		}
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
		if d.below != 0 && st.Record.Token != f.warnedBelow {
			f.warnedBelow = st.Record.Token // once per record
			warnBelow(f.logger, st.Record, d.below)
		}
		e.twin.saw(f.logger, e.errs.names.Identity, e.cfg.Identity, e.lease.Instance(), st.Record, st.TTL, false, a.sent, e.clock.Now())
	}
	return a, ctx.Err() == nil
}

// warnBelow logs that the lease is held by rec, whose token is below seen, one an acquire
// reply showed before: no trust rule is broken (rec is another's term), but the protocol was.
func warnBelow(logger klog.Logger, rec lease.Record, seen int64) {
	logger.Info("Warning: the lease is held by a term whose token is below one seen before: Redis lost writes (a restart or failover), or a client outside the protocol resumed an old record (docs/PROTOCOL.md, client rules)",
		"holder", rec.Identity, "instance", rec.Instance, "token", rec.Token, "seen", seen)
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

// The decisions.

// leaseTiming is the timing of one lease (Config's or GroupConfig's, validated).
type leaseTiming struct {
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

// untilExpiry is how long a record found held for ttl has left: at most LeaseDuration (a
// holder with a longer lease is checked on again; a forged TTL must not silence a follower
// for long), and RetryPeriod for one without expiry.
func (t leaseTiming) untilExpiry(ttl time.Duration) time.Duration {
	if ttl == lease.NoExpiry || ttl < 0 {
		return t.retryPeriod
	}
	return min(ttl, t.leaseDuration)
}

// followerWait is how long a follower sleeps after finding the lease held for ttl: until it
// expires when it listens for releases, else at most RetryPeriod (a release would go
// unnoticed until the next attempt).
func (t leaseTiming) followerWait(ttl time.Duration, listening bool) time.Duration {
	if !listening && ttl > t.retryPeriod {
		return t.retryPeriod
	}
	return t.untilExpiry(ttl)
}

// untrustedWait is how long to wait for an untrusted record of ours, just renewed to ttl by
// our own acquire, to expire: its ttl plus the drift margin, so that a clock faster than
// Redis's does not resume (and renew) it again and again. Only liveness depends on it.
func (t leaseTiming) untrustedWait(ttl time.Duration) time.Duration {
	d := t.untilExpiry(ttl)
	return d + timing.DriftMargin(d)
}

// overdue reports whether RenewDeadline has passed since sent, the send time of a call: a
// reply then comes too late to start a term (the term may have expired in Redis already), and
// a term whose last successful acquire or renew was sent then is over. The one deadline rule:
// trust lasts RenewDeadline from the send time, never from a reply.
func (t leaseTiming) overdue(sent, now time.Time) bool {
	return !now.Before(sent.Add(t.renewDeadline))
}

// leaseCore is what one replica knows of one lease. Its owner serializes the calls (Elector:
// under its mutex; Group: the loop goroutine) and keeps it for the replica's lifetime
// (across Runs, and across Remove/Add of a Group's lease).
type leaseCore struct {
	guard termGuard   // tokens seen, released and retired; which won acquire may start a term
	known knownExpiry // the expiry of the holder last heard of, while not leading
}

// acquireReply is the outcome of one acquire, as the core reads it.
type acquireReply struct {
	sent        time.Time // when it was sent; in a Group batch, zero: the batch's send time
	won         bool
	rec         lease.Record          // the holder's record (ours when won)
	ttl         time.Duration         // the holder's remaining time (lease.NoExpiry: no expiry)
	reservation *leasekit.Reservation // free, but reserved after a resignation
	err         error
}

// verdict is what an acquire reply means for the next step.
type verdict int

const (
	verdictFailed    verdict = iota // the call failed: try again after wait
	verdictUntrusted                // our record, but no term may start on it: try again after wait
	verdictDecline                  // won, but the caller gave up or the reply was late: release it, start nothing
	verdictStart                    // won: start the term
	verdictReserved                 // free but reserved for a successor: try again after wait
	verdictHeld                     // another replica holds it: try again after wait
)

// decision is the core's answer to an acquire reply.
type decision struct {
	verdict verdict
	wait    time.Duration // until the next attempt (all but verdictStart; verdictDecline: if late)
	poll    bool          // verdictHeld: wait is a poll, sooner than the expiry, as the follower does not listen
	late    bool          // verdictDecline: the reply was late, rather than given up
	// below is, for verdictHeld, the newest token a reply showed before when the holder's token
	// is lower (else 0): Redis lost writes, or a client outside the protocol resumed an old record.
	below int64
}

// reply records an acquire reply r, read at now, and decides what it means. giveUp is true
// when the caller no longer wants a term (Run's ctx cancelled, the lease removed, the Group
// stopping); retry returns the backoff after a failure; listening tells whether the caller
// hears the lease's releases. The rules, in order:
//
//   - A failed call is tried again after the backoff, but never before the expiry of the holder
//     last heard of (knownExpiry): the failure may be a Redis restart that lost the lease,
//     whose holder works on until its next renew tells it so.
//   - A won record that termGuard does not trust (one we sent a release for, or older than a
//     token seen) starts nothing and is not released; it is tried again once it expired.
//   - A won record that the caller gave up on, or whose reply came at or after send time +
//     RenewDeadline (the term may have expired in Redis already), starts nothing: it is
//     released, whatever ReleaseOnCancel says (no work can overlap).
//   - Otherwise a won record starts the term; a held or reserved lease is waited for.
func (c *leaseCore) reply(t leaseTiming, now time.Time, r acquireReply, giveUp bool, retry func() time.Duration, listening bool) decision {
	if r.err != nil {
		d := retry()
		d = c.known.retryAfter(now, d)
		return decision{verdict: verdictFailed, wait: d}
	}
	floor := c.guard.floor
	trusted := c.guard.reply(r.rec, r.won)
	late := t.overdue(r.sent, now)
	switch {
	case r.won && !trusted:
		return decision{verdict: verdictUntrusted, wait: t.untrustedWait(r.ttl)}
	case r.won && (giveUp || late):
		d := decision{verdict: verdictDecline, late: late && !giveUp}
		if d.late {
			d.wait = c.known.retryAfter(now, retry())
		}
		return d
	case r.won:
		c.known = knownExpiry{}
		return decision{verdict: verdictStart}
	case r.reservation != nil:
		c.known.released(r.reservation.Resigned.Token) // its holder released it, after its work stopped
		return decision{verdict: verdictReserved, wait: t.followerWait(r.reservation.TTL, listening)}
	default:
		c.known.heard(r.rec.Token, now, r.ttl, t.leaseDuration)
		d := decision{verdict: verdictHeld, wait: t.followerWait(r.ttl, listening)}
		d.poll = d.wait != t.followerWait(r.ttl, true)
		if r.rec.Token < floor {
			d.below = floor
		}
		return d
	}
}

// logUntrusted logs a verdictUntrusted reply.
func logUntrusted(logger klog.Logger, rec lease.Record) {
	logger.Info("Acquire resumed a record this replica released or saw replaced; not trusted, waiting for it to expire", "token", rec.Token)
}

// event records an event on the lease's channel, read at now, and decides what it means for
// a replica that does not lead: current is false for stale news (of an older term than one
// already heard of: it must neither wake a follower nor move its wake-up, as news is ordered
// by token), wake is true when the current term was released (try at once), and rearm >= 0
// is the new wait until the expiry when a term was taken or renewed.
func (c *leaseCore) event(t leaseTiming, now time.Time, ev leasekit.Event) (current, wake bool, rearm time.Duration) {
	switch ev.Kind {
	case leasekit.Released:
		if !c.guard.news(ev.Record.Token, true) {
			return false, false, -1
		}
		c.known.released(ev.Record.Token)
		return true, true, -1
	case leasekit.Acquired, leasekit.Renewed:
		if !c.guard.news(ev.Record.Token, false) {
			return false, false, -1
		}
		c.known.heard(ev.Record.Token, now, ev.TTL, t.leaseDuration)
		return true, false, t.untilExpiry(ev.TTL)
	}
	return false, false, -1
}

// knownExpiry is when the term of the holder a follower last heard of expires, by the
// follower's clock: the latest of now + min(TTL, LeaseDuration) over the acquire replies that
// found the lease held and the acquired/renewed events that were news (the cap: a forged TTL
// must not silence a follower for long). The time of the reply or event, not the send time:
// Redis read the TTL before the reply came, so this is no earlier than the real expiry (by a
// clock no faster than Redis's). Unless it heard that term, or a later one, released, a
// follower does not attempt before it after a failed attempt, nor after it subscribed again
// while polling: docs/DESIGN.md, "Follower waits".
type knownExpiry struct {
	at    time.Time // zero: none
	token int64     // the newest token heard held
}

// heard records that the term with token is held for ttl from now (lease.NoExpiry counts as
// longer than the lease).
func (k *knownExpiry) heard(token int64, now time.Time, ttl, leaseDuration time.Duration) {
	if ttl == lease.NoExpiry || ttl > leaseDuration {
		ttl = leaseDuration
	}
	if at := now.Add(ttl); at.After(k.at) {
		k.at = at
	}
	k.token = max(k.token, token)
}

// released forgets the expiry when the term with token, or a later one, was heard released.
func (k *knownExpiry) released(token int64) {
	if token >= k.token {
		*k = knownExpiry{}
	}
}

// until returns the time left until the known expiry, false when none is ahead.
func (k *knownExpiry) until(now time.Time) (time.Duration, bool) {
	return k.at.Sub(now), k.at.After(now)
}

// retryAfter is the wait before the attempt after a failed one: d, or until the known expiry
// if that is later.
func (k *knownExpiry) retryAfter(now time.Time, d time.Duration) time.Duration {
	if left, ok := k.until(now); ok {
		return max(d, left)
	}
	return d
}

// termGuard is what one replica knows of the terms of one lease, and the one rule that
// decides whether a won acquire may start a term (part of leaseCore).
//
// The rule (docs/RELIABILITY.md, "Tokens across rollbacks"): a replica never starts a term
// whose token is not greater than every token it has seen for the lease, except to resume
// its own newest term (same record, same token), and never one with the token of a record of
// its own whose release it sent, whatever that release's outcome:
//
//   - A release whose reply was an error (timeout, cut connection) may still run later — a
//     command sent is not a command undone — and delete the key under a term that resumed the
//     record (acquire.lua renews a record its owner holds). Such a record stays untrusted
//     for good: neither "replaced by another record" nor "past its expiry by our clock" is
//     needed, and the second is not even sound (this replica's own resuming acquires and its
//     renewals still on the wire extend the record's life past any local estimate).
//     Forgetting is never needed either: tokens grow, so a record with a retired token can
//     come back only as a resume — or after a rollback, which the rule refuses as well.
//   - A release that succeeded deleted the record; it comes back only if Redis lost writes
//     (restart from an older snapshot, AOF loss, failover to a lagging replica), and a term
//     on it would carry a token smaller than the successor's that this replica may have
//     fenced with or seen.
//
// Tokens of events count only for ordering news (news): an event is an unauthenticated
// message, and a forged or foreign one must not keep this replica from ever leading again.
type termGuard struct {
	seen     int64 // news order: newest token heard of (replies and events)
	released int64 // news order: newest token heard released
	floor    int64 // newest token an acquire reply showed (ours or another's)
	retired  int64 // newest token of our records we sent a release for (any outcome)
	// last is the token of our newest record that a won reply let start: the one resume
	// allowed. A won reply's record is always ours (acquire.lua wins only for its caller's
	// "<instance>:<identity>"), so its token names it.
	last int64
}

// news records an event's token and reports whether it is current: news is ordered by token,
// so that an event that waited in a buffer cannot undo what a newer reply or event said.
func (g *termGuard) news(token int64, released bool) bool {
	if token < g.seen || token <= g.released {
		return false
	}
	g.seen = token
	if released {
		g.released = token
	}
	return true
}

// reply records an acquire reply that showed rec (won: our record) and reports whether a won
// reply may start a term: its token is above every token retired, and above every token
// seen in a reply or else it resumes our own newest record. The caller may still decline
// (late reply, cancel): it then releases the record, which retires it.
func (g *termGuard) reply(rec lease.Record, won bool) (trusted bool) {
	trusted = won && rec.Token > g.retired &&
		(rec.Token > g.floor || (rec.Token == g.last && rec.Token == g.floor))
	g.floor = max(g.floor, rec.Token)
	g.seen = max(g.seen, rec.Token)
	if trusted {
		g.last = rec.Token
	}
	return trusted
}

// retire records that a release of our record with token was sent, whatever its outcome:
// no term may start on that record again. A token above every token a reply showed is none
// of our records (a caller's mistake); it is capped there rather than block every later term.
func (g *termGuard) retire(token int64) {
	t := min(token, g.floor)
	g.retired = max(g.retired, t)
}

// The leader.

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
	// handover is closed when the resign request of a graceful stop's handover (startHandover)
	// was written or failed; nil when none is in flight.
	handover chan struct{}
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
		retry:      newBackoff(e.cfg.RetryPeriod),
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
			if !l.resigning && l.fatal == nil {
				l.startHandover() // a candidate of a higher priority is live: the release is reserved for it
			}
			if workDone == nil && l.handover == nil { // the work had ended already
				return reasonStopped, l.e.cfg.ReleaseOnCancel
			}
			// Stop the work; keep renewing until OnStartedLeading has returned (and the
			// handover's request was written).
			l.cancelWork(context.Cause(ctx))
			l.logger.V(2).Info("Stopping: waiting for the work to stop (OnStartedLeading to return; for elector run: CMD)", "token", l.term.Token)
		case <-l.handover:
			l.handover = nil
			if workDone == nil && !l.resigning && l.fatal == nil {
				return reasonStopped, l.e.cfg.ReleaseOnCancel
			}
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
			if l.handover != nil {
				continue // the release waits for the handover's request
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
	if l.handover != nil {
		<-l.handover
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

// termControl is how ResignTo reaches the lead loop of the current term.
type termControl struct {
	wake chan struct{} // a send asks the loop to resign
	over chan struct{} // closed once the term ended and its release (if any) was sent
}

func newTermControl() *termControl {
	return &termControl{wake: make(chan struct{}, 1), over: make(chan struct{})}
}

// ResignTo ends this replica's term so that another replica leads: it writes a resign request
// for the term in Redis, cancels OnStartedLeading's ctx at once and, once OnStartedLeading
// returned (the lease is renewed meanwhile, as after a cancel of Run's ctx), stops calling
// itself leader and releases the lease (whatever Config.ReleaseOnCancel says). The release
// makes the request a reservation: for Config.ResignHoldOff only the replica with identity may
// acquire the lease, or, for identity "", any replica but this one's identity; the successor
// takes over in about one round trip, with the next fencing token. If the named one does not
// (it crashed meanwhile, or predates the protocol), nobody leads until the hold-off ends. This
// replica then campaigns again (see ErrResigned for Recampaign off). identity must not be
// this replica's own.
//
// Before anything is written, ResignTo checks the lease's candidate registry (see
// Status.Candidates): it refuses an identity that is no live candidate, and, for "", a lease
// with no live candidate but this replica (nobody could take over, and nobody would lead
// during the hold-off). The error names the live candidates, and for a near miss the one
// meant; the term goes on. When the registry cannot be read it goes ahead; `elector resign
// --force` and POST /resign?force=1 skip the check.
//
// ResignTo returns nil once the term ended and the release was sent, or ctx.Err() if ctx
// ended first; the step-down completes anyway. It returns an error wrapping ErrNotLeader when
// this replica does not lead, and the Redis error when the request could not be written (then
// nothing changed: the term goes on).
func (e *Elector) ResignTo(ctx context.Context, identity string) error {
	return e.resignTo(ctx, identity, 0)
}

// resignTo is ResignTo; a token other than 0 resigns only the term with that token (a
// handover by preference decided during it), else it returns an error wrapping ErrNotLeader.
func (e *Elector) resignTo(ctx context.Context, identity string, token int64) error {
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
	if !leading || (token != 0 && term.Token != token) {
		return fmt.Errorf("resign lease %q: %w", e.cfg.LeaseName, ErrNotLeader)
	}
	if err := e.requestResign(ctx, term, identity); err != nil {
		return err
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
