package election

import (
	"time"
)

// Preferred leadership in the simulator's world (prefer.go). The scenarios give one replica, a,
// the highest priority and make it flap, or let it join among ghost candidates that lie about
// their priorities, flap and vanish. Besides the recorder's invariants (no unlabelled overlap,
// fencing order) and tokensGrowPerInstance, they check that handovers by preference are
// bounded: none to a candidate never live for the settle period, at least the minimum hold
// apart, and no more than the candidate instances that could have been targets.

func init() {
	simScenarios = append(simScenarios,
		simScenario{"preference: a better candidate that flaps never gets the lease", scenarioPreferFlapping},
		simScenario{"preference: a better candidate joins among lying, flapping, vanishing ghosts", scenarioPreferJoins},
	)
}

// prefHandovers sums the handovers by preference of every incarnation so far.
func (d *simDriver) prefHandovers() int64 {
	var n int64
	for _, e := range d.electors {
		n += e.prefHandovers.Load()
	}
	return n
}

// preferWorld makes a the best real candidate: priority 20, above every ghost's (at most 10);
// the others have priority 0. Each replica gets a new Elector (a new incarnation that never ran
// before).
func preferWorld(d *simDriver, a *simReplica) {
	for _, r := range d.replicas {
		r.priority = 0
		if r == a {
			r.priority = 20
		}
		r.gen++
		if err := r.newElector(d.client); err != nil {
			panic(err)
		}
	}
	d.w.Tracef("scenario: %s is the best replica (priority 20)", a.node.Name())
}

// othersLead waits until a replica other than a leads.
func othersLead(d *simDriver, a *simReplica, limit time.Duration) bool {
	return d.waitFor(limit, func() bool {
		for _, r := range d.replicas {
			if r != a && r.running && r.e.IsLeader() {
				return true
			}
		}
		return false
	})
}

// scenarioPreferFlapping: a, better than every other replica, runs for at most two thirds of a
// lease duration at a time, then crashes (its entry is left to expire, a lease duration after
// its last heartbeat) and stays down for two to three: no leader ever sees one incarnation live
// for the settle period (two lease durations), so no handover by preference may happen,
// however often it comes back (the mutant without the settle and hold checks hands over at its
// first appearance).
func scenarioPreferFlapping(d *simDriver, a *simReplica) bool {
	ld := d.timing.lease
	preferWorld(d, a)
	startOthers(d, a)
	if !othersLead(d, a, 6*ld) {
		return false
	}
	flaps := 2 + d.rng.IntN(3)
	a.startRun()
	for i := 0; i < flaps; i++ {
		if !a.running {
			return false
		}
		d.settle(d.dur(ld/3, 2*ld/3))
		down := d.dur(2*ld, 3*ld)
		d.crashReplicaFor(a, "scenario: flap", down)
		d.settle(down + ld/10) // restarted (a new incarnation) at down
	}
	d.settle(ld) // the last incarnation too, for less than the settle period
	if n := d.prefHandovers(); n != 0 {
		d.rec.fail("%d handovers by preference to a candidate that was never live for the settle period", n)
	}
	return true
}

// scenarioPreferJoins: the other replicas lead; one to three ghost candidates (no replica, or
// a liar under a replica's identity; absurd versions such as v999.0.0-lie and priorities up to
// 10; flapping; vanishing without a leave) come and go while a, the best real replica, joins.
// Handovers by preference are bounded — at least the minimum hold apart, and at most one per replica
// incarnation per candidate instance — and once the ghosts are gone a leads within the
// settle period, the hold and a hold-off, and keeps leading.
func scenarioPreferJoins(d *simDriver, a *simReplica) bool {
	ld := d.timing.lease
	settle, hold := preferPeriods*ld, preferPeriods*ld
	preferWorld(d, a)
	startOthers(d, a)
	if !othersLead(d, a, 6*ld) {
		return false
	}
	ghosts := 1 + d.rng.IntN(3)
	for i := 0; i < ghosts; i++ {
		d.ghostCandidate()
	}
	d.after(d.dur(0, 2*ld), "a joins", func() {
		d.w.Tracef("scenario: %s joins", a.node.Name())
		a.startRun()
	})
	var last time.Time
	var count int64
	watch := func() {
		if n := d.prefHandovers(); n != count {
			now := time.Now()
			if !last.IsZero() && now.Sub(last) < hold-hold/50 {
				d.rec.fail("handovers by preference %v apart, below the min hold %v: a storm", now.Sub(last), hold)
			}
			count, last = n, now
		}
	}
	ghostsGone := func() bool {
		watch()
		for _, op := range d.ops {
			if op.r == nil && len(op.name) > 5 && op.name[:5] == "ghost" {
				return false
			}
		}
		return true
	}
	if !d.waitFor(60*ld, ghostsGone) {
		return false
	}
	leads := func() bool { watch(); return a.running && a.e.IsLeader() }
	// A ghost's entry outlives it by its ttl (up to two lease durations); a handover to a
	// ghost costs a hold-off; then a settles and the leader's term reaches the hold.
	if !d.waitFor(2*ld+settle+hold+d.holdOff+6*ld, leads) {
		d.rec.fail("%s, the best live candidate, did not lead after the ghosts were gone", a.node.Name())
		return true
	}
	token := a.e.Status().Token
	d.waitFor(settle+hold+2*ld, func() bool { watch(); return false })
	if !a.e.IsLeader() || a.e.Status().Token != token {
		d.rec.fail("leadership moved away from %s, the best candidate (token %d, now %d)", a.node.Name(), token, a.e.Status().Token)
	}
	if bound := int64(len(d.electors) * (ghosts + len(d.replicas))); count > bound {
		d.rec.fail("%d handovers by preference, more than %d (incarnations × candidate instances)", count, bound)
	}
	d.w.Tracef("scenario: %d handovers by preference", count)
	return true
}
