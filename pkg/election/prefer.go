package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/lease"
)

// Preferred leadership (docs/DESIGN.md, "Preferred leadership"): the leader reads the
// candidate registry on each of its heartbeats and hands over, through ResignTo and nothing
// else, to a candidate of strictly higher Config.Priority once that candidate has been live
// without a gap for the settle period and the term has lasted the minimum hold (both
// preferPeriods × LeaseDuration). A follower never acts on the registry. At a graceful stop
// (Run's ctx cancelled, with ReleaseOnCancel) the release is reserved for the live candidate of
// the highest priority above this replica's, so that a rolling update whose new replicas have
// a higher priority moves leadership once. The registry is advisory: whatever it says, the
// handover is a resign, which the lease's scripts make safe. All replicas at one priority (the
// default): nothing here acts.

// preferPeriods is the settle period and the minimum hold of preferred leadership, in lease
// durations: longer than a candidate that flaps (restarts within a lease duration) stays
// live, and long enough that handovers by preference cannot follow each other faster than
// a takeover after a crash would.
const preferPeriods = 2

// bestOf returns the candidate of the highest priority in list other than identity self, among
// those for which ok holds; the first in the registry's order wins a tie. found is false when
// there is none.
func bestOf(list []leasekit.Candidate, self string, ok func(leasekit.Candidate) bool) (best leasekit.Candidate, found bool) {
	for _, c := range list {
		if c.Identity == self || !ok(c) {
			continue
		}
		if !found || c.Priority > best.Priority {
			best, found = c, true
		}
	}
	return best, found
}

// maxTried bounds the candidates an Elector remembers having handed over to.
const maxTried = 1024

// preference is an Elector's state of preferred leadership, guarded by Elector.mu.
type preference struct {
	seen  map[string]time.Time // owner (instance:identity) → when first seen live, without a gap since
	tried map[string]bool      // owners handed over to by preference: never again (a target that never took over)
	busy  bool                 // a handover by preference is in flight
}

// candidateOwner is the registry's key of c.
func candidateOwner(c leasekit.Candidate) string { return c.Instance + ":" + c.Identity }

// noteCandidates records a heartbeat's view of the registry, read at now: the candidates seen
// live without a gap since when. e.mu must be held.
func (p *preference) noteCandidates(c leasekit.Candidates, now time.Time) {
	seen := make(map[string]time.Time, len(c.List))
	for _, x := range c.List {
		o := candidateOwner(x)
		if t, ok := p.seen[o]; ok {
			seen[o] = t
		} else {
			seen[o] = now
		}
	}
	p.seen = seen
}

// considerPreference runs after each heartbeat (startAdvertising): it notes the candidates and,
// when this replica leads a term that has lasted the minimum hold and a candidate of a higher
// priority than its own has been live for the settle period, hands the term over to it with
// ResignTo, on a goroutine that wait tracks. Only a leader acts; one handover at a time; a
// candidate instance handed over to once is never targeted again by this Elector (one that
// advertises but never takes over costs a hold-off per replica, not one per minimum hold).
func (e *Elector) considerPreference(ctx context.Context, c leasekit.Candidates, wait func(func())) {
	period := preferPeriods * e.cfg.LeaseDuration
	now := e.clock.Now()
	e.mu.Lock()
	e.pref.noteCandidates(c, now)
	if !e.leading || e.pref.busy || now.Sub(e.termStart) < period {
		e.mu.Unlock()
		return
	}
	token := e.term.Token
	target, found := bestOf(c.List, e.cfg.Identity, func(x leasekit.Candidate) bool {
		since, ok := e.pref.seen[candidateOwner(x)]
		return ok && now.Sub(since) >= period && !e.pref.tried[candidateOwner(x)] && x.Priority > e.cfg.Priority
	})
	if !found {
		e.mu.Unlock()
		return
	}
	if len(e.pref.tried) >= maxTried {
		e.pref.tried = nil
	}
	if e.pref.tried == nil {
		e.pref.tried = map[string]bool{}
	}
	e.pref.tried[candidateOwner(target)] = true
	e.pref.busy = true
	e.mu.Unlock()
	logger := klog.FromContext(ctx)
	logger.Info("Handing the lease over to a candidate of a higher priority", "token", token,
		"target", target.Identity, "targetPriority", target.Priority, "targetVersion", target.Version,
		"priority", e.cfg.Priority)
	wait(func() {
		defer func() {
			e.mu.Lock()
			e.pref.busy = false
			e.mu.Unlock()
		}()
		err := e.resignTo(ctx, target.Identity, token)
		switch {
		case err == nil:
			e.prefHandovers.Add(1)
			return
		case ctx.Err() == nil:
			logger.Info("Handover to a preferred candidate did not happen; the term goes on", "token", token, "target", target.Identity, "err", err)
		}
		// Nothing was written, or the request met another term: the candidate may be tried
		// again (an attempt costs a heartbeat, never a leaderless moment).
		if !errors.Is(err, context.Canceled) {
			e.mu.Lock()
			delete(e.pref.tried, candidateOwner(target))
			e.mu.Unlock()
		}
	})
}

// sawHigher reports whether the last heartbeat listed a candidate other than this replica of
// a higher priority.
func (e *Elector) sawHigher() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, found := bestOf(e.cands.List, e.cfg.Identity, func(x leasekit.Candidate) bool { return x.Priority > e.cfg.Priority })
	return found
}

// shutdownTarget returns the live candidate of the highest priority above this replica's, as a
// fresh heartbeat finds the registry, for a graceful stop's release; "" when there is none or
// the registry cannot be read.
func (e *Elector) shutdownTarget(ctx context.Context) string {
	c, err := e.heartbeat(ctx, leasekit.CandidateTTL(e.cfg.LeaseDuration), false)
	if err != nil {
		return ""
	}
	best, found := bestOf(c.List, e.cfg.Identity, func(x leasekit.Candidate) bool { return x.Priority > e.cfg.Priority })
	if !found {
		return ""
	}
	return best.Identity
}

// startHandover begins, at a graceful stop (Run's ctx cancelled, with ReleaseOnCancel), the
// request that turns the coming release into a reservation for the best live candidate of a
// higher priority: ResignTo's request (writeResign) for a target picked from a fresh read of
// the registry (which is ResignTo's check), on a goroutine, so that the loop keeps renewing.
// The read is fresh because the last heartbeat may predate a candidate that has just joined:
// in a rolling update the pod that replaces the leader's is often started just before the
// leader is stopped. A replica of priority 0 (the default) that has seen no higher candidate
// skips the read: its stop costs nothing more. l.handover is closed when it is done; it stays
// nil when there is nothing to do.
func (l *leadership) startHandover() {
	e := l.e
	if !e.cfg.ReleaseOnCancel || (e.cfg.Priority == 0 && !e.sawHigher()) {
		return
	}
	done := make(chan struct{})
	l.handover = done
	go func() {
		defer close(done)
		target := e.shutdownTarget(l.base)
		if target == "" {
			l.logger.V(2).Info("Stopping: no live candidate to reserve the release for", "token", l.term.Token)
			return
		}
		err := e.writeResign(l.base, l.term, target)
		switch {
		case err == nil:
			l.logger.Info("Stopping: the release is reserved for the candidate of the highest priority", "token", l.term.Token, "target", target)
		case errors.Is(err, ErrNotLeader):
		default:
			l.logger.Info("Stopping: the release is not targeted", "token", l.term.Token, "target", target, "err", err)
		}
	}()
}

// requestResign is the first half of ResignTo: the registry check, then the resign request for
// term (writeResign). Nothing has changed when it fails.
func (e *Elector) requestResign(ctx context.Context, term lease.Record, identity string) error {
	if err := e.checkSuccessor(ctx, identity); err != nil {
		return fmt.Errorf("resign lease %q: refused, nothing changed: %w", e.cfg.LeaseName, err)
	}
	return e.writeResign(ctx, term, identity)
}

// writeResign writes the resign request for term to identity in Redis
// (leasekit.Lease.RequestResign), bounded like every call; an error wrapping ErrNotLeader when
// term is no longer the lease's.
func (e *Elector) writeResign(ctx context.Context, term lease.Record, identity string) error {
	rctx, cancel := context.WithTimeout(ctx, e.callTimeout())
	err := e.store.resign(rctx, term, identity, e.cfg.ResignHoldOff, e.cfg.LeaseDuration)
	cancel()
	switch {
	case errors.Is(err, leasekit.ErrOtherTerm):
		return fmt.Errorf("resign lease %q: %w: %w", e.cfg.LeaseName, ErrNotLeader, err)
	case err != nil:
		return fmt.Errorf("resign lease %q: %w", e.cfg.LeaseName, err)
	}
	return nil
}
