package election

import (
	"context"
	"fmt"
	"time"

	"github.com/elector/elector/internal/testing/sim"
)

// tick injects one fault or user action, then schedules the next while the chaos lasts.
func (d *simDriver) tick() {
	if !d.chaos {
		return
	}
	d.maybeSnapshot()
	faults := []func(){
		d.cutOne, d.cutAll, func() { d.breakSubs(func() *sim.Node { return d.pick().node }) }, d.restartRedis, d.restoreSnapshot,
		d.crash, d.cancelRun, d.resign, d.resign, d.release, d.network, d.network, d.stall, d.stall,
		d.resignRequest, d.stallLog, d.ghostCandidate,
	}
	faults[d.rng.IntN(len(faults))]()
	d.after(d.dur(time.Millisecond, d.timing.lease), "tick", d.tick)
}

func (d *simDriver) pick() *simReplica { return d.replicas[d.rng.IntN(len(d.replicas))] }

func (d *simDriver) cutOne() { d.cut(d.pick().node) }

func (d *simDriver) cutAll() {
	nodes := make([]*sim.Node, 0, len(d.replicas))
	for _, r := range d.replicas {
		nodes = append(nodes, r.node)
	}
	d.cutNodes(nodes)
}

// The faults both drivers inject, on simBase.

// maybeSnapshot keeps, one tick in four, a copy of Redis's data to restore later (the last 6).
func (d *simBase) maybeSnapshot() {
	if d.rng.IntN(4) == 0 {
		d.snaps = append(d.snaps, d.w.Snapshot())
		if len(d.snaps) > 6 {
			d.snaps = d.snaps[1:]
		}
	}
}

// cut partitions n from Redis (refused or black-holed) for up to two lease durations.
func (d *simBase) cut(n *sim.Node) {
	refuse := d.rng.IntN(2) == 0
	dt := d.dur(time.Millisecond, 2*d.timing.lease)
	d.w.Tracef("fault: cut %s from Redis for %v (refused %v)", n.Name(), dt, refuse)
	d.w.Cut(n, refuse)
	d.after(dt, "heal", func() { d.w.Tracef("heal %s", n.Name()); d.w.Heal(n) })
}

// cutNodes makes Redis unreachable from every node for up to two lease durations.
func (d *simBase) cutNodes(nodes []*sim.Node) {
	dt := d.dur(time.Millisecond, 2*d.timing.lease)
	refuse := d.rng.IntN(2) == 0
	d.w.Tracef("fault: Redis unreachable from all for %v (refused %v)", dt, refuse)
	for _, n := range nodes {
		d.w.Cut(n, refuse)
	}
	d.after(dt, "heal all", func() {
		d.w.Tracef("heal all")
		for _, n := range nodes {
			d.w.Heal(n)
		}
	})
}

// breakSubs breaks every subscription (one time in three) or those of the node pick draws.
func (d *simBase) breakSubs(pick func() *sim.Node) {
	if d.rng.IntN(3) == 0 {
		d.w.Tracef("fault: every subscription breaks")
		d.w.BreakSubscriptions(nil)
		return
	}
	n := pick()
	d.w.Tracef("fault: subscriptions of %s break", n.Name())
	d.w.BreakSubscriptions(n)
}

// restartRedis restarts Redis without data, down for up to a lease duration.
func (d *simBase) restartRedis() {
	dt := d.dur(0, d.timing.lease)
	d.w.Tracef("fault: Redis restarts without data, down for %v", dt)
	d.dataLost()
	d.w.RestartRedis(nil, true)
	d.after(dt, "redis up", func() { d.w.Tracef("Redis up"); d.w.Up() })
}

// restoreSnapshot restarts Redis with the data of one of the kept snapshots.
func (d *simBase) restoreSnapshot() {
	if len(d.snaps) == 0 {
		return
	}
	i := d.rng.IntN(len(d.snaps))
	d.w.Tracef("fault: Redis restored from snapshot %d of %d", i, len(d.snaps))
	d.dataLost()
	d.w.RestartRedis(d.snaps[i], false)
}

func (d *simDriver) crash() {
	r := d.pick()
	if r.crashed {
		return
	}
	d.crashReplica(r, "fault")
}

// crashReplica ends r's process (a fault, or a panic no code recovers): its node dies, its
// work counts as stopped, and a new incarnation restarts later.
func (d *simDriver) crashReplica(r *simReplica, why string) {
	d.crashReplicaFor(r, why, d.dur(time.Millisecond, 2*d.timing.lease))
}

// crashReplicaFor crashes r, as crashReplica does, and restarts it dt later.
func (d *simDriver) crashReplicaFor(r *simReplica, why string, dt time.Duration) {
	d.w.Tracef("%s: %s crashes; restart in %v", why, r.node.Name(), dt)
	d.w.Crash(r.node)
	d.rec.crash(r.idx, r.gen)
	r.crashed = true
	if r.running {
		r.cancel() // the zombie's goroutines wind down; the world no longer hears them
		d.zombies = append(d.zombies, r.done)
		r.running = false
	}
	// Last: a callback that panicked may return now, and the zombie's Run goes on from its
	// step-down. Run's ctx must be cancelled before, or whether the zombie sends one more
	// acquire depends on which goroutine runs first (CI: seed 19 replayed differently).
	close(r.dead)
	d.after(dt, "restart", func() {
		if r.crashed {
			d.restart(r)
		}
	})
}

func (d *simDriver) cancelRun() {
	r := d.pick()
	if !r.running {
		return
	}
	dt := d.dur(0, 2*d.timing.lease)
	d.w.Tracef("user: cancel Run of %s; run again in %v", r.node.Name(), dt)
	r.cancel()
	d.after(dt, "run again", func() {
		if !r.crashed && !r.running {
			d.restart(r)
		}
	})
}

// resign calls Resign or ResignTo (another replica, an absent one, a ghost candidate, itself)
// on the leader, or on anyone; the candidate registry refuses some (candidates.go).
func (d *simDriver) resign() {
	r := d.pick()
	for _, x := range d.replicas {
		if !x.crashed && x.e.IsLeader() {
			r = x
		}
	}
	if r.crashed {
		return
	}
	target := ""
	switch d.rng.IntN(5) {
	case 1:
		target = d.pick().identity
	case 2:
		target = "absent"
	case 3: // a ghost candidate's (sim_candidates_test.go), maybe gone already
		target = fmt.Sprintf("ghost%d", max(d.cliN, 1))
	}
	name := fmt.Sprintf("%s.ResignTo(%q)", r.node.Name(), target)
	d.w.Tracef("user: %s", name)
	d.goOp(r, name, func(ctx context.Context) error { return r.e.ResignTo(ctx, target) })
	d.ops[len(d.ops)-1].after = d.countResign
}

// release calls Release with the replica's current, an old or an unknown token.
func (d *simDriver) release() {
	r := d.pick()
	if r.crashed {
		return
	}
	var tokens []int64
	for _, t := range d.rec.terms {
		if t.replica == r.idx && t.gen == r.gen {
			tokens = append(tokens, t.token)
		}
	}
	token := int64(12345)
	if len(tokens) > 0 && d.rng.IntN(4) != 0 {
		token = tokens[len(tokens)-1]
		if d.rng.IntN(2) == 0 {
			token = tokens[d.rng.IntN(len(tokens))]
		}
	}
	name := fmt.Sprintf("%s.Release(%d)", r.node.Name(), token)
	e := r.e
	call := func() {
		d.w.Tracef("user: %s", name)
		d.goOp(r, name, func(ctx context.Context) error {
			ok, err := e.Release(ctx, token)
			if err == nil && !ok {
				return fmt.Errorf("not released")
			}
			return err
		})
	}
	if !r.running || d.rng.IntN(3) == 0 {
		call()
		return
	}
	d.w.Tracef("user: cancel Run of %s to release token %d", r.node.Name(), token)
	r.cancel() // Release needs Run to have returned; it may not have yet
	d.after(d.dur(0, d.timing.lease), "release", call)
	d.after(d.dur(d.timing.lease, 2*d.timing.lease), "run again", func() {
		if !r.crashed && !r.running && r.e == e {
			d.restart(r)
		}
	})
}

func (d *simDriver) goOp(r *simReplica, name string, fn func(context.Context) error) {
	done := make(chan error, 1)
	timeout := 2 * d.timing.lease
	w := d.w
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		done <- fn(ctx)
		w.Poke() // the driver notices the return at once (a Release keeps Run from starting)
	}()
	d.ops = append(d.ops, simOp{name: name, r: r, done: done})
}

// network changes how lossy and slow the network is.
func (d *simBase) network() {
	f := sim.Faults{}
	if d.rng.IntN(2) == 0 {
		f.Loss = d.lossLevel * d.rng.Float64()
		f.PubLoss = d.lossLevel * d.rng.Float64()
	}
	if d.rng.IntN(2) == 0 {
		f.Slow = d.slowLevel * d.rng.Float64()
		f.SlowMax = d.dur(time.Millisecond, max(2*d.callTimeout(), 2*d.timing.lease))
	}
	d.w.Tracef("fault: network loss %.3f pub/sub loss %.3f slow %.3f up to %v", f.Loss, f.PubLoss, f.Slow, f.SlowMax)
	d.w.Faults = f
}

// stall slows every message of one replica, the leader more often, for a while: long enough
// for calls to time out and run later, or for replies to come after the caller's deadline.
func (d *simDriver) stall() {
	r := d.pick()
	for _, x := range d.replicas {
		if !x.crashed && x.e.IsLeader() && d.rng.IntN(3) != 0 {
			r = x
		}
	}
	d.stallNode(r.node)
}

// stallLog blocks every log line of a replica (the leader, two times in three) for up to two
// lease durations: its stderr is a pipe that nobody reads. The term must still end at its
// renew deadline (term.go, trustGuard), whichever log call the lead loop is blocked in.
func (d *simDriver) stallLog() {
	r := d.pick()
	for _, x := range d.replicas {
		if !x.crashed && x.e.IsLeader() && d.rng.IntN(3) != 0 {
			r = x
		}
	}
	dt := d.dur(d.timing.retry, 2*d.timing.lease)
	d.w.Tracef("fault: the log of %s stalls for %v", r.node.Name(), dt)
	r.reasons.stall(time.Now().Add(dt))
}

// stallNode slows every message to and from n sent within up to a lease duration.
func (d *simBase) stallNode(n *sim.Node) {
	window := d.dur(d.timing.retry, d.timing.lease)
	lo := d.dur(0, d.callTimeout())
	hi := lo + d.dur(time.Millisecond, max(2*d.callTimeout(), 2*d.timing.lease))
	d.w.Tracef("fault: %s stalls for %v: its messages take %v to %v", n.Name(), window, lo, hi)
	d.w.Stall(n, window, lo, hi)
}
