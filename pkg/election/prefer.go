package election

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/lease"
)

// Preferred leadership (docs/DESIGN.md, "Preferred leadership"): with Candidacy.Prefer set, the
// leader reads the candidate registry on each of its heartbeats and hands over, through
// ResignTo and nothing else, to a candidate that is strictly better by the policy once that
// candidate has been live without a gap for Candidacy.Settle and the term has lasted
// Candidacy.MinHold. A follower never acts on the registry. At a graceful stop (Run's ctx
// cancelled, with ReleaseOnCancel) the release is targeted at the best live candidate, so that
// a rolling update moves leadership once. The registry is advisory: whatever it says, the
// handover is a resign, which the lease's scripts make safe.

// Preference is how a leader ranks the live candidates of its lease (Candidacy.Prefer).
type Preference string

// The preferences. With PreferNewest and PreferOldest, versions compare as semantic versions
// (the last word of the advertised version, an optional "v", dot-separated numbers, an
// optional -prerelease; "elector v1.4.2" is 1.4.2), ties are broken by priority, and a version
// that does not parse never wins.
const (
	// PreferNone (the default) never hands over by preference.
	PreferNone Preference = ""
	// PreferPriority prefers the highest Candidacy.Priority.
	PreferPriority Preference = "priority"
	// PreferNewest prefers the newest version: a rolling update moves leadership once, to a
	// replica of the new version.
	PreferNewest Preference = "newest"
	// PreferOldest prefers the oldest version (KEP-4355's OldestEmulationVersion): the leader
	// moves to the new version only when the last old replica is gone.
	PreferOldest Preference = "oldest"
)

// Candidacy is what a replica advertises in its lease's candidate registry and whether, as
// leader, it hands over to a better candidate. The zero value advertises the build version and
// priority 0, and never hands over by preference.
type Candidacy struct {
	// Version is the version this replica advertises (the app's or the binary's; at most 128
	// bytes, no control characters). Empty: the main module's version from the build
	// information, none for a development build.
	Version string
	// Priority is this replica's priority; higher is preferred by PreferPriority, and breaks
	// ties of versions.
	Priority int64
	// Prefer is the leader's policy; PreferNone by default. Give every replica the same one.
	Prefer Preference
	// Settle is how long a better candidate must have been live, without a gap, in this
	// replica's heartbeats before the leader hands over to it. 2 × LeaseDuration when zero.
	Settle time.Duration
	// MinHold is how long a term lasts at least before its leader hands over by preference: the
	// cool-down between two such handovers. 2 × LeaseDuration when zero.
	MinHold time.Duration
}

// validate fills in the defaults of c for a lease of leaseDuration and checks it; the errors
// name the fields.
func (c *Candidacy) validate(leaseDuration time.Duration) error {
	if err := leasekit.ValidateVersion(c.Version); err != nil {
		return fmt.Errorf("Config.Candidacy.Version %w", err)
	}
	switch c.Prefer {
	case PreferNone, PreferPriority, PreferNewest, PreferOldest:
	default:
		return fmt.Errorf("Config.Candidacy.Prefer %q must be %q (off), %q, %q or %q", c.Prefer, PreferNone, PreferPriority, PreferNewest, PreferOldest)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
	}{{"Settle", &c.Settle}, {"MinHold", &c.MinHold}} {
		switch {
		case *d.v < 0:
			return fmt.Errorf("Config.Candidacy.%s (%v) must not be negative (0 takes the default, 2 × Config.LeaseDuration)", d.name, *d.v)
		case *d.v == 0:
			*d.v = 2 * leaseDuration
		}
	}
	return nil
}

// version is a version as PreferNewest and PreferOldest compare it; ok is false for one that
// does not parse.
type version struct {
	nums []uint64
	pre  []string
	ok   bool
}

// parseVersion reads the last word of v: an optional "v", dot-separated numbers, an optional
// -prerelease, an ignored +build.
func parseVersion(v string) version {
	f := strings.Fields(v)
	if len(f) == 0 {
		return version{}
	}
	s := strings.TrimPrefix(strings.TrimPrefix(f[len(f)-1], "v"), "V")
	s, _, _ = strings.Cut(s, "+")
	core, pre, hasPre := strings.Cut(s, "-")
	var out version
	for _, p := range strings.Split(core, ".") {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil || p == "" || p[0] == '+' {
			return version{}
		}
		out.nums = append(out.nums, n)
	}
	if hasPre {
		if pre == "" {
			return version{}
		}
		out.pre = strings.Split(pre, ".")
	}
	out.ok = true
	return out
}

// compareVersions orders two parsed versions as semantic versions do (missing numbers are 0;
// a prerelease is before its release).
func compareVersions(a, b version) int {
	for i := 0; i < max(len(a.nums), len(b.nums)); i++ {
		var x, y uint64
		if i < len(a.nums) {
			x = a.nums[i]
		}
		if i < len(b.nums) {
			y = b.nums[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	switch {
	case len(a.pre) == 0 && len(b.pre) == 0:
		return 0
	case len(a.pre) == 0:
		return 1
	case len(b.pre) == 0:
		return -1
	}
	for i := 0; i < min(len(a.pre), len(b.pre)); i++ {
		x, errX := strconv.ParseUint(a.pre[i], 10, 64)
		y, errY := strconv.ParseUint(b.pre[i], 10, 64)
		switch {
		case errX == nil && errY == nil && x != y:
			if x < y {
				return -1
			}
			return 1
		case errX == nil && errY != nil:
			return -1
		case errX != nil && errY == nil:
			return 1
		case errX != nil && errY != nil && a.pre[i] != b.pre[i]:
			return strings.Compare(a.pre[i], b.pre[i])
		}
	}
	return len(a.pre) - len(b.pre)
}

// better reports whether a candidate advertising (va, pa) is strictly better than one
// advertising (vb, pb) by preference p.
func better(p Preference, va string, pa int64, vb string, pb int64) bool {
	switch p {
	case PreferPriority:
		return pa > pb
	case PreferNewest, PreferOldest:
		x, y := parseVersion(va), parseVersion(vb)
		switch {
		case !x.ok:
			return false // an unparsable version never wins
		case !y.ok:
			return true
		}
		c := compareVersions(x, y)
		if p == PreferOldest {
			c = -c
		}
		if c != 0 {
			return c > 0
		}
		return pa > pb
	}
	return false
}

// bestOf returns the best candidate of list by p other than identity self, among those for
// which ok holds; the first in the registry's order wins a tie. found is false when there is
// none.
func bestOf(p Preference, list []leasekit.Candidate, self string, ok func(leasekit.Candidate) bool) (best leasekit.Candidate, found bool) {
	for _, c := range list {
		if c.Identity == self || !ok(c) {
			continue
		}
		if !found || better(p, c.Version, c.Priority, best.Version, best.Priority) {
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
// when this replica leads a term that has lasted Candidacy.MinHold and a candidate strictly
// better than itself has been live for Candidacy.Settle, hands the term over to it with
// ResignTo, on a goroutine that wait tracks. Only a leader acts; one handover at a time; a
// candidate instance handed over to once is never targeted again by this Elector (one that
// advertises but never takes over costs a hold-off per replica, not one per MinHold).
func (e *Elector) considerPreference(ctx context.Context, c leasekit.Candidates, wait func(func())) {
	cy := e.cfg.Candidacy
	now := e.clock.Now()
	e.mu.Lock()
	e.pref.noteCandidates(c, now)
	if cy.Prefer == PreferNone || !e.leading || e.pref.busy || now.Sub(e.termStart) < cy.MinHold {
		e.mu.Unlock()
		return
	}
	token := e.term.Token
	target, found := bestOf(cy.Prefer, c.List, e.cfg.Identity, func(x leasekit.Candidate) bool {
		since, ok := e.pref.seen[candidateOwner(x)]
		return ok && now.Sub(since) >= cy.Settle && !e.pref.tried[candidateOwner(x)] &&
			better(cy.Prefer, x.Version, x.Priority, e.candVersion, e.candPriority)
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
	logger.Info("Handing the lease over to a preferred candidate", "token", token, "prefer", cy.Prefer,
		"target", target.Identity, "targetVersion", target.Version, "targetPriority", target.Priority,
		"version", e.candVersion, "priority", e.candPriority)
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

// shutdownTarget returns the best live candidate other than this replica by the preference,
// as a fresh heartbeat finds the registry, for a graceful stop's release; "" when there is
// none or the registry cannot be read.
func (e *Elector) shutdownTarget(ctx context.Context) string {
	c, err := e.heartbeat(ctx, leasekit.CandidateTTL(e.cfg.LeaseDuration), false)
	if err != nil {
		return ""
	}
	best, found := bestOf(e.cfg.Candidacy.Prefer, c.List, e.cfg.Identity, func(leasekit.Candidate) bool { return true })
	if !found {
		return ""
	}
	return best.Identity
}

// startHandover begins, at a graceful stop (Run's ctx cancelled, with ReleaseOnCancel and a
// preference), the request that turns the coming release into a reservation for the best live
// candidate: ResignTo's request (writeResign) for a target picked from a fresh read of the
// registry (which is ResignTo's check), on a goroutine, so that the loop keeps renewing.
// l.handover is closed when it is done; it stays nil when there is nothing to do.
func (l *leadership) startHandover() {
	e := l.e
	if !e.cfg.ReleaseOnCancel || e.cfg.Candidacy.Prefer == PreferNone {
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
			l.logger.Info("Stopping: the release is reserved for the preferred candidate", "token", l.term.Token, "target", target)
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
