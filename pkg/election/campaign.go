package election

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

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
	known       knownExpiry      // the expiry of the holder last heard of
	polling     bool             // the timer is a poll, sooner than known: set while not listening
}

// attempt is the outcome of one acquire.
type attempt struct {
	term lease.Record
	sent time.Time
	won  bool
	wait time.Duration // until the next attempt, when not won
	poll bool          // wait is a poll, sooner than the expiry just learnt, as the follower does not listen
}

// campaign tries to acquire the lease until it succeeds (ok) or ctx is cancelled. sent is
// the local time at which the winning acquire was sent: the lease is ours for LeaseDuration
// from a moment after it, and the reply came before sent + RenewDeadline.
func (e *Elector) campaign(ctx context.Context, w *watch) (term lease.Record, sent time.Time, ok bool) {
	f := &follower{
		e: e, w: w, logger: klog.FromContext(ctx),
		retry: backoff{min: 50 * time.Millisecond, max: e.cfg.RetryPeriod},
		timer: e.clock.NewTimer(time.Hour),
	}
	f.timer.Stop()
	defer f.timer.Stop()
	for {
		a, ok := f.attempt(ctx)
		if !ok {
			return lease.Record{}, time.Time{}, false
		}
		if a.won {
			return a.term, a.sent, true
		}
		f.polling = a.poll
		resetTimer(f.timer, a.wait+e.jitter())
		if !f.sleep(ctx) {
			return lease.Record{}, time.Time{}, false
		}
	}
}

// attempt sends one acquire and decides what its reply means. It is false when ctx was
// cancelled. The call is not cut short by the cancel: a term won meanwhile is released, so
// that followers need not wait for it to expire.
func (f *follower) attempt(ctx context.Context) (attempt, bool) {
	e := f.e
	f.w.ensure(ctx)
	a := attempt{sent: e.clock.Now()}
	base := context.WithoutCancel(ctx)
	actx, cancel := context.WithTimeout(base, e.callTimeout())
	won, st, err := e.store.acquire(actx, e.cfg.LeaseDuration, e.cfg.ReplicaAck)
	cancel()
	late := !e.clock.Now().Before(a.sent.Add(e.cfg.RenewDeadline))
	late = late && !mutant(4) // mutant 4 (elector_mutants builds only): a late reply starts a term
	trusted := err == nil && e.trustsReply(won, st.Record)
	switch {
	case err == nil && won && !trusted:
		// Our record, but one no term may start on (termGuard): a record we sent a release
		// for (that release may still run and delete the key during the term), or one older
		// than a token already seen (brought back by a rollback). Not ours: neither a term
		// nor a release; try again once it (renewed by this very acquire) expired. Not
		// observed either: it would name this replica leader.
		f.logger.Info("Acquire resumed a record this replica released or saw replaced; not trusted, waiting for it to expire", "token", st.Record.Token)
		a.wait = e.untrustedWait(st.TTL)
	case mutant(5) && err == nil && won && ctx.Err() != nil: // mutant 5 (elector_mutants builds only): left held
	case err == nil && won && (ctx.Err() != nil || late):
		// A term that never started: release it whatever ReleaseOnCancel says (no work
		// can overlap), rather than make followers wait for its expiry.
		if ctx.Err() == nil {
			e.errs.failed(f.logger, e.cfg.Metrics, e.cfg.Name, "acquire", fmt.Errorf("token %d: %w", st.Record.Token, errLateReply))
			a.wait = f.retryWait()
		}
		e.release(base, f.logger, st.Record)
	case ctx.Err() != nil:
	case err != nil:
		e.errs.failed(f.logger, e.cfg.Metrics, e.cfg.Name, "acquire", err)
		a.wait = f.retryWait()
	case won:
		e.errs.succeeded(f.logger)
		a.term, a.won = st.Record, true
	case st.Reservation != nil:
		// Free, but reserved after a resignation for another replica (or for anyone but
		// this one): wait until the hold-off ends or, sooner, the "acquired" of the successor.
		e.errs.succeeded(f.logger)
		f.retry.reset()
		f.logger.V(4).Info("Lease is reserved after a resignation", "resigned", st.Reservation.Resigned.Identity, "target", st.Reservation.Target, "ttl", st.Reservation.TTL)
		f.known.released(st.Reservation.Resigned.Token) // its holder released it, after its work stopped
		a.wait = e.followerWait(st.Reservation.TTL, f.w.subscribed())
	default:
		e.errs.succeeded(f.logger)
		f.retry.reset()
		e.observe(st.Record, false)
		f.logger.V(4).Info("Lease is held", "holder", st.Record.Identity, "token", st.Record.Token, "ttl", st.TTL)
		now := e.clock.Now()
		e.twin.saw(f.logger, e.cfg.Identity, e.lease.Instance(), st.Record, st.TTL, false, now)
		f.known.heard(st.Record.Token, now, st.TTL, e.cfg.LeaseDuration)
		a.wait = e.followerWait(st.TTL, f.w.subscribed())
		a.poll = a.wait != e.followerWait(st.TTL, true) // not listening: sooner than the expiry
	}
	return a, ctx.Err() == nil
}

// retryWait is the wait after a failed attempt: the backoff, but never before the expiry of
// the holder last heard of (knownExpiry) — the failure may be a Redis restart that lost the
// lease, whose holder works on until its next renew tells it so.
func (f *follower) retryWait() time.Duration {
	d := f.retry.next()
	if mutant(10) { // mutant 10 (elector_mutants builds only): the known expiry is ignored
		return d
	}
	return f.known.retryAfter(f.e.clock.Now(), d)
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
	expiry time.Time    // rec's expiry as first seen, by the local clock
	warned lease.Record // the record warned about (once each)
}

// saw takes a record rec held for ttl, as an acquire reply found it or, live, as an acquired
// or renewed event announced it.
func (w *twinWatch) saw(logger klog.Logger, identity, instance string, rec lease.Record, ttl time.Duration, live bool, now time.Time) {
	if rec.Identity != identity || rec.Instance == instance || ttl == lease.NoExpiry {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if rec != w.rec {
		w.rec, w.expiry = rec, now.Add(ttl)
		if !live {
			return
		}
	}
	// Found by a reply after the expiry first seen, the record is a twin's only if that expiry
	// moved (it was renewed): a dead record may still be found a moment after it, as Redis
	// counts its TTL in whole milliseconds and the follower comes back at that expiry.
	renewed := now.After(w.expiry) && now.Add(ttl).After(w.expiry.Add(timing.DriftMargin(ttl)))
	if (live || renewed) && w.warned != rec {
		w.warned = rec
		logger.Info("Warning: another process campaigns under this replica's identity: it holds the lease and renews it; give every replica its own identity (--identity, $POD_NAME; two electors on one host both default to the host name), or a resign of either shuts both out",
			"identity", identity, "otherInstance", rec.Instance, "token", rec.Token)
	}
}

// sleep waits until the timer fires or a release is heard (true), or ctx is cancelled (false).
func (f *follower) sleep(ctx context.Context) bool {
	for {
		select {
		case <-ctx.Done():
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
			if ev.Kind == lease.Acquired || ev.Kind == lease.Renewed { // only a live process sends these
				f.e.twin.saw(f.logger, f.e.cfg.Identity, f.e.lease.Instance(), ev.Record, ev.TTL, true, f.e.clock.Now())
			}
			wake, rearm := f.e.onEvent(ev)
			if wake {
				f.known.released(ev.Record.Token)
				return true
			}
			if rearm >= 0 {
				f.known.heard(ev.Record.Token, f.e.clock.Now(), rearm, f.e.cfg.LeaseDuration)
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
	if !f.polling || mutant(10) { // mutant 10: it polls on
		return
	}
	f.polling = false
	if d, ok := f.known.until(f.e.clock.Now()); ok {
		resetTimer(f.timer, d+f.e.jitter())
	}
}

// knownExpiry is when the term of the holder a follower last heard of expires, by the
// follower's clock: the latest of now + min(TTL, LeaseDuration) over the acquire replies that
// found the lease held and the acquired/renewed events that were news (the cap: a forged TTL
// must not silence a follower for long). The time of the reply or event, not the send time:
// Redis read the TTL before the reply came, so this is no earlier than the real expiry (by a
// clock no faster than Redis's). Unless it heard that term, or a later one, released, a
// follower does not attempt before it after a failed attempt, nor after it subscribed again
// while polling: docs/DESIGN.md, "Follower waits". Elector and Group share this rule.
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

// onEvent records what an event says and decides what a sleeping follower does: wake at
// once (the current term was released), sleep again for rearm (the current term was taken
// or renewed; rearm >= 0), or nothing (stale news, of an older term than one already heard
// of: it must neither wake the follower nor move its wake-up).
func (e *Elector) onEvent(ev lease.Event) (wake bool, rearm time.Duration) {
	switch ev.Kind {
	case lease.Released:
		return e.observe(ev.Record, true), -1
	case lease.Acquired, lease.Renewed:
		if e.observe(ev.Record, false) {
			// Capped: a forged message must not put followers to sleep for long.
			return false, min(ev.TTL, e.cfg.LeaseDuration)
		}
	}
	return false, -1
}

// untrustedWait is how long to wait for an untrusted record of ours, just renewed to ttl by
// our acquire, to expire: its ttl plus the drift margin, so that a clock faster than Redis's
// does not resume (and renew) it again and again. Only liveness depends on it.
func (e *Elector) untrustedWait(ttl time.Duration) time.Duration {
	if ttl == lease.NoExpiry || ttl < 0 {
		return e.cfg.RetryPeriod
	}
	d := min(ttl, e.cfg.LeaseDuration)
	return d + timing.DriftMargin(d)
}

// followerWait is how long a follower sleeps after finding the lease held for ttl: until it
// expires when renewals are announced to it, else at most RetryPeriod (a release would go
// unnoticed until the next attempt).
func (e *Elector) followerWait(ttl time.Duration, subscribed bool) time.Duration {
	if ttl == lease.NoExpiry || (!subscribed && ttl > e.cfg.RetryPeriod) {
		return e.cfg.RetryPeriod
	}
	return min(ttl, e.cfg.LeaseDuration) // a holder with a longer lease is checked on again
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
