package election

import (
	"time"

	"github.com/elector/elector/internal/sim"
)

// tick injects one fault or user action into the Group world, then schedules the next while
// the chaos lasts.
func (d *groupDriver) tick() {
	if !d.chaos {
		return
	}
	if d.rng.IntN(4) == 0 {
		d.snaps = append(d.snaps, d.w.Snapshot())
		if len(d.snaps) > 6 {
			d.snaps = d.snaps[1:]
		}
	}
	faults := []func(){
		d.gCut, d.gCutAll, d.gBreakSubs, d.gRestartRedis, d.gRestore, d.gCrash, d.gCancelRun,
		d.gChurn, d.gChurn, d.gChurn, d.gNetwork, d.gNetwork, d.gStall, d.gStall,
	}
	faults[d.rng.IntN(len(faults))]()
	d.after(d.dur(time.Millisecond, d.timing.lease), "tick", d.tick)
}

func (d *groupDriver) pick() *groupReplica { return d.replicas[d.rng.IntN(len(d.replicas))] }

func (d *groupDriver) gCut() {
	r := d.pick()
	refuse := d.rng.IntN(2) == 0
	dt := d.dur(time.Millisecond, 2*d.timing.lease)
	d.w.Tracef("fault: cut %s from Redis for %v (refused %v)", r.node.Name(), dt, refuse)
	n := r.node
	d.w.Cut(n, refuse)
	d.after(dt, "heal", func() { d.w.Tracef("heal %s", n.Name()); d.w.Heal(n) })
}

func (d *groupDriver) gCutAll() {
	dt := d.dur(time.Millisecond, 2*d.timing.lease)
	refuse := d.rng.IntN(2) == 0
	d.w.Tracef("fault: Redis unreachable from all for %v (refused %v)", dt, refuse)
	var nodes []*sim.Node
	for _, r := range d.replicas {
		d.w.Cut(r.node, refuse)
		nodes = append(nodes, r.node)
	}
	d.after(dt, "heal all", func() {
		d.w.Tracef("heal all")
		for _, n := range nodes {
			d.w.Heal(n)
		}
	})
}

func (d *groupDriver) gBreakSubs() {
	if d.rng.IntN(3) == 0 {
		d.w.Tracef("fault: every subscription breaks")
		d.w.BreakSubscriptions(nil)
		return
	}
	r := d.pick()
	d.w.Tracef("fault: subscriptions of %s break", r.node.Name())
	d.w.BreakSubscriptions(r.node)
}

func (d *groupDriver) dataLost() {
	for _, rec := range d.recs {
		rec.dataLost()
	}
}

func (d *groupDriver) gRestartRedis() {
	dt := d.dur(0, d.timing.lease)
	d.w.Tracef("fault: Redis restarts without data, down for %v", dt)
	d.dataLost()
	d.w.RestartRedis(nil, true)
	d.after(dt, "redis up", func() { d.w.Tracef("Redis up"); d.w.Up() })
}

func (d *groupDriver) gRestore() {
	if len(d.snaps) == 0 {
		return
	}
	i := d.rng.IntN(len(d.snaps))
	d.w.Tracef("fault: Redis restored from snapshot %d of %d", i, len(d.snaps))
	d.dataLost()
	d.w.RestartRedis(d.snaps[i], false)
}

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
	if !r.running {
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
	if r.crashed {
		return
	}
	name := d.names[d.rng.IntN(len(d.names))]
	g := r.g
	if d.rng.IntN(3) == 0 {
		d.w.Tracef("user: %s.Add(%s)", r.node.Name(), name)
		_ = g.Add(name)
		return
	}
	d.w.Tracef("user: %s.Remove(%s)", r.node.Name(), name)
	g.Remove(name)
	if d.rng.IntN(4) != 0 {
		dt := d.dur(0, d.timing.lease)
		d.after(dt, "add", func() {
			if r.g == g {
				d.w.Tracef("user: %s.Add(%s)", r.node.Name(), name)
				_ = g.Add(name)
			}
		})
	}
}

func (d *groupDriver) gNetwork() {
	f := sim.Faults{}
	if d.rng.IntN(2) == 0 {
		f.Loss = d.loss * d.rng.Float64()
		f.PubLoss = d.loss * d.rng.Float64()
	}
	if d.rng.IntN(2) == 0 {
		f.Slow = d.slow * d.rng.Float64()
		f.SlowMax = d.dur(time.Millisecond, 2*d.timing.lease)
	}
	d.w.Tracef("fault: network loss %.3f pub/sub loss %.3f slow %.3f up to %v", f.Loss, f.PubLoss, f.Slow, f.SlowMax)
	d.w.Faults = f
}

func (d *groupDriver) gStall() {
	r := d.pick()
	window := d.dur(d.timing.retry, d.timing.lease)
	call := max(d.timing.retry, d.timing.renew/2)
	lo := d.dur(0, call)
	hi := lo + d.dur(time.Millisecond, max(2*call, 2*d.timing.lease))
	d.w.Tracef("fault: %s stalls for %v: its messages take %v to %v", r.node.Name(), window, lo, hi)
	d.w.Stall(r.node, window, lo, hi)
}
