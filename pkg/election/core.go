package election

import (
	"time"

	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/lease"
)

// The per-lease decision core: what one replica knows of one lease (leaseCore: its tokens,
// termGuard, and the expiry of the holder last heard of, knownExpiry) and the rules that
// decide from an acquire reply (leaseCore.reply) or an event (leaseCore.event) whether a term
// may start, which news is stale and how long to wait. It is pure: no clock, no network, no
// user code; Elector (campaign.go) and Group (group_machine.go) are its two drivers, which
// call Redis, run the callbacks and keep the timers. Every rule here exists once: a new
// safety rule is written, reviewed and model-checked (model/, the simulator) once for both.

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
		d := t.followerWait(r.ttl, listening)
		return decision{verdict: verdictHeld, wait: d, poll: d != t.followerWait(r.ttl, true)}
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
	seen     int64        // news order: newest token heard of (replies and events)
	released int64        // news order: newest token heard released
	floor    int64        // newest token an acquire reply showed (ours or another's)
	retired  int64        // newest token of our records we sent a release for (any outcome)
	last     lease.Record // our newest record that a won reply let start: the one resume allowed
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
		(rec.Token > g.floor || (rec == g.last && rec.Token == g.floor))
	g.floor = max(g.floor, rec.Token)
	g.seen = max(g.seen, rec.Token)
	if trusted {
		g.last = rec
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
