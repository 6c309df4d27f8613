package election

import "github.com/elector/elector/pkg/lease"

// termGuard is what one replica knows of the terms of one lease, and the one rule, shared by
// Elector and Group, that decides whether a won acquire may start a term. Its owner
// serializes the calls (Elector: under its mutex; Group: the loop goroutine) and keeps it for
// the replica's lifetime (across Runs, and across Remove/Add of a Group's lease).
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
	if mutant(9) && won && rec.Token < g.floor { // mutant 9 (elector_mutants builds only): a token below one seen starts a term
		trusted = true
	}
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
	if mutant(6) { // mutant 6 (elector_mutants builds only): a released record stays trusted
		return
	}
	t := min(token, g.floor)
	if mutant(7) { // mutant 7 (elector_mutants builds only): one slot, the last release's only
		g.retired = t
		return
	}
	g.retired = max(g.retired, t)
}
