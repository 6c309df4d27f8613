package election

import (
	"time"

	"github.com/elector/elector/internal/testing/sim"
)

// tick injects one fault or user action into the Group world, then schedules the next while
// the chaos lasts.
func (d *groupDriver) tick() {
	if !d.chaos {
		return
	}
	d.maybeSnapshot()
	nodes := make([]*sim.Node, 0, len(d.replicas))
	for _, r := range d.replicas {
		nodes = append(nodes, r.node)
	}
	pick := func() *sim.Node { return d.pick().node }
	faults := []func(){
		func() { d.cut(pick()) }, func() { d.cutNodes(nodes) }, func() { d.breakSubs(pick) },
		d.restartRedis, d.restoreSnapshot, d.gCrash, d.gCancelRun,
		d.gChurn, d.gChurn, d.gChurn, d.network, d.network, func() { d.stallNode(pick()) }, func() { d.stallNode(pick()) },
		d.gPause, d.gStallLog,
	}
	faults[d.rng.IntN(len(faults))]()
	d.after(d.dur(time.Millisecond, d.timing.lease), "tick", d.tick)
}

func (d *groupDriver) pick() *groupReplica { return d.replicas[d.rng.IntN(len(d.replicas))] }

func (d *groupDriver) gCrash() {
	r := d.pick()
	if r.crashed {
		return
	}
	dt := d.dur(time.Millisecond, 2*d.timing.lease)
	d.w.Tracef("fault: %s crashes; restart in %v", r.node.Name(), dt)
	d.w.Crash(r.node)
	for _, rec := range d.recs {
		rec.crash(r.idx, r.gen)
	}
	r.crashed = true
	if r.running {
		r.cancel()
		d.zombies = append(d.zombies, r.done)
		r.running = false
	}
	d.after(dt, "restart", func() {
		if r.crashed {
			d.restart(r)
		}
	})
}

func (d *groupDriver) gCancelRun() {
	r := d.pick()
	if !r.running || r.node.Paused() {
		return
	}
	dt := d.dur(0, 2*d.timing.lease)
	d.w.Tracef("user: cancel Run of %s; run again in %v", r.node.Name(), dt)
	r.cancel()
	g := r.g
	d.after(dt, "run again", func() {
		if !r.crashed && r.g == g {
			d.whenStopped(r, 0)
		}
	})
}

// whenStopped runs r again once its last Run returned (a Group runs once at a time).
func (d *groupDriver) whenStopped(r *groupReplica, tries int) {
	if r.running && tries < 100 {
		d.after(d.timing.retry, "run again", func() { d.whenStopped(r, tries+1) })
		return
	}
	if !r.running && !r.crashed {
		r.startRun()
	}
}

// gChurn removes a lease from a replica and, often soon after, adds it back: a release may
// still be in flight when it comes back. Add and Remove are called from the driver's
// goroutine: they only take the Group's mutex and wake its loop.
func (d *groupDriver) gChurn() {
	r := d.pick()
	if r.crashed || r.node.Paused() {
		return
	}
	name := d.names[d.rng.IntN(len(d.names))]
	g := r.g
	if d.rng.IntN(3) == 0 {
		d.w.Tracef("user: %s.Add(%s)", r.node.Name(), name)
		_ = g.Add(name)
		return
	}
	if _, held := g.Held()[name]; held && d.rng.IntN(3) == 0 {
		d.churnStalled(r, name)
		return
	}
	d.w.Tracef("user: %s.Remove(%s)", r.node.Name(), name)
	g.Remove(name)
	if d.rng.IntN(4) != 0 {
		dt := d.dur(0, d.timing.lease)
		d.after(dt, "add", func() {
			if r.g == g && !r.node.Paused() {
				d.w.Tracef("user: %s.Add(%s)", r.node.Name(), name)
				_ = g.Add(name)
			}
		})
	}
}

// churnStalled removes a lease r leads while r's connection is slow (every message takes one to
// two lease durations), so that the release times out but is still on its way; once r no
// longer holds the lease (its OnStoppedLeading returned), its connection is quick again and r
// adds the lease back before that release arrives: its acquire finds its own record and resumes
// it (acquire.lua), which the kept termGuard refuses (mutant 3: a fresh guard trusts it, and the
// late release deletes the key under the resumed term). The Group scenario "Add after Remove
// while the release is in flight" does the same on a quiet world.
func (d *groupDriver) churnStalled(r *groupReplica, name string) {
	g := r.g
	lo := d.timing.lease + d.dur(0, d.timing.lease)
	hi := lo + d.dur(time.Millisecond, d.callTimeout())
	d.w.Tracef("user: %s.Remove(%s) while its messages take %v to %v", r.node.Name(), name, lo, hi)
	d.counts.add("group remove with a stalled release")
	d.w.Stall(r.node, 4*d.timing.lease, lo, hi)
	g.Remove(name)
	var addBack func(tries int)
	addBack = func(tries int) {
		if r.g != g || r.node.Paused() {
			return
		}
		if _, held := g.Held()[name]; held && tries < 40 {
			d.after(d.timing.retry, "add", func() { addBack(tries + 1) })
			return
		}
		d.after(d.callTimeout()+d.timing.retry, "add", func() {
			if r.g == g && !r.node.Paused() {
				d.w.Stall(r.node, 0, 0, 0)
				d.w.Tracef("user: %s.Add(%s), its connection quick again", r.node.Name(), name)
				d.counts.add("group add back before the stalled release")
				_ = g.Add(name)
			}
		})
	}
	d.after(d.timing.retry, "add", func() { addBack(0) })
}

// gPause stops a replica, every goroutine of it (SIGSTOP, a frozen VM), for less than the
// margin LeaseDuration − RenewDeadline, up to the lease, or up to three leases. The recorder
// excuses an overlap only when a pause of the live term's replica reached the margin
// (docs/DESIGN.md, "Process pauses"): a shorter one must never let two lead.
func (d *groupDriver) gPause() {
	r := d.pick()
	if r.crashed || r.node.Paused() {
		return
	}
	margin := d.timing.lease - d.timing.renew
	var dt time.Duration
	switch d.rng.IntN(3) {
	case 0:
		dt = d.dur(time.Millisecond, margin-time.Millisecond)
	case 1:
		dt = d.dur(margin, d.timing.lease)
	default:
		dt = d.dur(d.timing.lease, 3*d.timing.lease)
	}
	d.w.Tracef("fault: %s paused for %v (margin %v)", r.node.Name(), dt, margin)
	now := time.Now()
	r.pausedUntil = now.Add(dt)
	d.w.Pause(r.node, dt)
	d.w.Pause(r.listen, dt)
	for _, rec := range d.recs {
		rec.paused(r.idx, r.gen, now, r.pausedUntil)
	}
}

// gStallLog blocks every log line of a running replica's Run for up to two lease durations:
// its stderr is a pipe that nobody reads. Its loop must go on checking deadlines (asyncLog).
func (d *groupDriver) gStallLog() {
	r := d.replicas[d.rng.IntN(len(d.replicas))]
	dt := d.dur(d.timing.retry, 2*d.timing.lease)
	if !r.running || r.log == nil {
		return
	}
	d.w.Tracef("fault: the log of g%d.%d stalls for %v", r.idx, r.gen, dt)
	r.log.stall(time.Now().Add(dt))
}
