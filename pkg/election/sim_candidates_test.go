package election

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/testing/sim"
)

// The candidate registry in the simulator's world (issue 46). Every replica advertises itself
// (candidates.go, through simStore.advertise and the shipped candidate.lua); besides, the
// actors here are candidates that are no replica: they join, heartbeat late or lose their
// heartbeats (flap), lie (another replica's identity, absurd versions and priorities, a
// garbage key) and vanish without leaving (a crash). The registry is advisory: whatever it
// says, the recorder's invariants (no unlabelled overlap, fencing order) and
// tokensGrowPerInstance must hold, and a resign that it lets through to a target that then
// vanishes only costs the hold-off.

// ghostVersions are the versions a ghost candidate claims: plausible, empty, long, odd.
var ghostVersions = []string{"v1.2.3", "", "v999.0.0-lie", strings.Repeat("x", leasekit.MaxVersionLen), "1.0 (build 7)"}

// ghostCandidate starts a candidate that is no replica: a node of its own that runs
// candidate.lua every period (one time in three a period longer than its ttl: it flaps) for a
// while, then leaves or, one time in two, vanishes (its node crashes: no leave). One time in
// three it takes the identity of a replica (a lie: that replica looks live while it is down),
// one time in six it writes garbage to the key instead (a stray SET by hand).
func (d *simDriver) ghostCandidate() {
	d.cliN++
	node := d.w.NewNode(fmt.Sprintf("ghost%d", d.cliN))
	identity := fmt.Sprintf("ghost%d", d.cliN)
	kind := "ghost"
	if d.rng.IntN(3) == 0 {
		identity, kind = d.pick().identity, "liar"
	}
	owner := fmt.Sprintf("g%d:%s", d.cliN, identity)
	ttl := max(d.dur(d.timing.lease/2, 2*d.timing.lease).Truncate(time.Millisecond), time.Millisecond)
	period := max(ttl/3, time.Millisecond)
	if d.rng.IntN(3) == 0 {
		period, kind = ttl+d.dur(time.Millisecond, ttl), kind+" flapping"
	}
	version := ghostVersions[d.rng.IntN(len(ghostVersions))]
	priority := d.rng.Int64N(21) - 10
	beats := 1 + d.rng.IntN(8)
	vanish := d.rng.IntN(2) == 0
	garbage := d.rng.IntN(6) == 0
	name := fmt.Sprintf("%s: candidate %q (%s) version %q priority %d, %d heartbeats every %v ttl %v, then %s",
		node.Name(), identity, kind, version, priority, beats, period, ttl, map[bool]string{true: "vanishes", false: "leaves"}[vanish])
	d.w.Tracef("actor: %s", name)
	d.counts.add("candidate " + kind)
	keys, scripts, w := d.keys, d.scripts, d.w
	done := make(chan error, 1)
	go func() {
		defer w.Poke()
		var err error
		for i := 0; i < beats; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*d.timing.lease)
			if garbage && i == beats/2 {
				_, err = node.Call(ctx, "SET", "", nil, []string{"SET", keys.Candidates, "v1\tnot\ta header\nx\ty", "PX", "100000"})
			} else {
				_, err = simCandidate(ctx, node, scripts, keys, owner, ttl, priority, version, false)
			}
			cancel()
			time.Sleep(period)
		}
		if !vanish {
			ctx, cancel := context.WithTimeout(context.Background(), 2*d.timing.lease)
			_, err = simCandidate(ctx, node, scripts, keys, owner, ttl, priority, version, true)
			cancel()
		}
		done <- err
	}()
	d.ops = append(d.ops, simOp{name: name, done: done})
}

// simCandidate is leasekit.Lease.Advertise over the simulator's network: candidate.lua with
// the arguments pkg/lease sends, decoded as leasekit decodes them.
func simCandidate(ctx context.Context, node *sim.Node, scripts sim.Scripts, k leasewire.Keys, owner string, ttl time.Duration, priority int64, version string, leave bool) (leasekit.Candidates, error) {
	args := leasekit.CandidateArgs(owner, ttl, priority, version, leave)
	sargs := make([]string, len(args))
	for i, a := range args {
		sargs[i] = fmt.Sprint(a)
	}
	v, err := node.Call(ctx, "candidate", scripts.Candidate, []string{k.Candidates}, sargs)
	if err != nil {
		return leasekit.Candidates{}, fmt.Errorf("candidate: %w", err)
	}
	reply, _ := v.([]any)
	return leasekit.ParseCandidateReply(reply)
}

// simReadCandidates is what `elector resign` and `elector status` read of the registry
// (leasekit.Lease.ReadCandidates): GET and PTTL, without a script or TIME.
func simReadCandidates(ctx context.Context, node *sim.Node, k leasewire.Keys) (leasekit.Candidates, error) {
	v, err := node.Call(ctx, "GET", "", nil, []string{"GET", k.Candidates})
	if err != nil {
		return leasekit.Candidates{}, err
	}
	if v == nil {
		return leasekit.Candidates{}, nil
	}
	p, err := node.Call(ctx, "PTTL", "", nil, []string{"PTTL", k.Candidates})
	if err != nil {
		return leasekit.Candidates{}, err
	}
	pttl, _ := p.(int64)
	return leasekit.ParseCandidateKey(asString(v), pttl), nil
}

// errRefused is the outcome of an `elector resign` that the registry refused (exit 5).
var errRefused = errors.New("refused by the candidate registry")

// cliCheck is `elector resign`'s check before it writes (cmd/elector resign.go,
// checkSuccessor): with the holder in the registry, the target must be a live candidate, and
// without a target another candidate must be live. An unreadable registry, or a holder not in
// it, lets the request go ahead.
func cliCheck(ctx context.Context, node *sim.Node, k leasewire.Keys, holder, target string) error {
	if target != "" && target == holder {
		return nil
	}
	c, err := simReadCandidates(ctx, node, k)
	if err != nil || !c.Has(holder) {
		return nil
	}
	if err := leasekit.CheckSuccessor(c, holder, target); err != nil {
		return fmt.Errorf("%w: %v", errRefused, err)
	}
	return nil
}

// countResign counts what a replica's Resign or ResignTo returned, for the features table.
func (d *simDriver) countResign(err error) {
	switch {
	case err == nil:
		d.counts.add("ResignTo done")
	case errors.Is(err, leasekit.ErrNotCandidate):
		d.counts.add("ResignTo refused: not a candidate")
	case errors.Is(err, leasekit.ErrNoSuccessor):
		d.counts.add("ResignTo refused: no other candidate")
	}
}

func init() {
	simScenarios = append(simScenarios,
		simScenario{"resign to a candidate that vanishes right after the check", scenarioTargetVanishes},
		simScenario{"a refused resign moves nothing", scenarioRefusedResign},
	)
}

// scenarioTargetVanishes: every replica runs; a leader L that sees a live candidate T asks
// ResignTo(T), and T crashes (no leave) at the same moment or just after: the registry still
// lists T, so the check passes, and the reservation keeps everyone but T out for the
// hold-off; then a replica must lead (T's entry has expired or not: no rule reads it). One time in two a ghost candidate with T's identity keeps T "live"
// throughout (a liar). The recorder's invariants hold whatever happens.
func scenarioTargetVanishes(d *simDriver, a *simReplica) bool {
	startOthers(d, a)
	a.startRun()
	limit := 6 * d.timing.lease
	var leader, target *simReplica
	if !d.waitFor(limit, func() bool {
		leader, target = nil, nil
		for _, r := range d.replicas {
			if r.running && r.e.IsLeader() {
				leader = r
			}
		}
		if leader == nil {
			return false
		}
		for _, id := range leader.e.Status().Candidates {
			for _, r := range d.replicas {
				if r != leader && r.identity == id && r.running && !r.crashed {
					target = r
				}
			}
		}
		return target != nil
	}) {
		return false
	}
	if d.rng.IntN(2) == 0 {
		d.w.Tracef("scenario: a liar advertises %s's identity", target.identity)
		ghost := d.w.NewNode("liar")
		keys, scripts := d.keys, d.scripts
		owner := "liar:" + target.identity
		ttl := 2 * d.timing.lease
		done := make(chan error, 1)
		go func() {
			for i := 0; i < 6; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), d.timing.lease)
				_, _ = simCandidate(ctx, ghost, scripts, keys, owner, ttl, 0, "v9-lie", false)
				cancel()
				time.Sleep(ttl / 3)
			}
			done <- nil
		}()
		d.ops = append(d.ops, simOp{name: "liar", done: done})
	}
	token := leader.e.Status().Token
	lag := time.Duration(0)
	if d.rng.IntN(2) == 0 {
		lag = d.dur(0, d.callTimeout()/2)
	}
	d.w.Tracef("scenario: %s.ResignTo(%q); %s crashes %v later", leader.node.Name(), target.identity, target.node.Name(), lag)
	var resignErr error
	returned := false
	name := fmt.Sprintf("%s.ResignTo(%q)", leader.node.Name(), target.identity)
	e := leader.e
	ident := target.identity
	done := make(chan error, 1)
	w := d.w
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*d.timing.lease)
		defer cancel()
		done <- e.ResignTo(ctx, ident)
		w.Poke()
	}()
	d.ops = append(d.ops, simOp{name: name, r: leader, done: done, after: func(err error) { resignErr, returned = err, true }})
	crash := func() {
		if !target.crashed {
			d.crashReplica(target, "scenario")
		}
	}
	if lag == 0 {
		crash()
	} else {
		d.after(lag, "crash the target", crash)
	}
	if !d.waitFor(2*d.timing.lease, func() bool { return returned }) || resignErr != nil {
		d.w.Tracef("scenario: ResignTo returned %v", resignErr)
		return false
	}
	// A term after the resigned one must begin: the hold-off, then anyone (T included, once
	// restarted) may acquire.
	if !d.waitFor(d.holdOff+6*d.timing.lease, func() bool { return d.rec.maxToken > token }) {
		d.rec.fail("nobody led within the hold-off %v + 6 lease durations after ResignTo(%q), whose target vanished", d.holdOff, ident)
	}
	return true
}

// scenarioRefusedResign: a leader alone (the others stopped, their entries left with a leave)
// is refused Resign, and ResignTo of a name that is no candidate is refused with every replica
// up: the term goes on, with the same token, and nobody else starts one. Noise on the network
// may make the check's heartbeat fail: then the resign goes ahead, as documented, and the
// scenario is not reached.
func scenarioRefusedResign(d *simDriver, a *simReplica) bool {
	a.startRun()
	limit := 6 * d.timing.lease
	if !d.waitFor(limit, a.e.IsLeader) {
		return false
	}
	token := a.e.Status().Token
	call := func(target string) (error, bool) {
		var got error
		returned := false
		e := a.e
		done := make(chan error, 1)
		w := d.w
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*d.timing.lease)
			defer cancel()
			done <- e.ResignTo(ctx, target)
			w.Poke()
		}()
		d.ops = append(d.ops, simOp{name: fmt.Sprintf("%s.ResignTo(%q)", a.node.Name(), target), r: a, done: done, after: func(err error) { got, returned = err, true }})
		ok := d.waitFor(2*d.timing.lease, func() bool { return returned })
		return got, ok
	}
	err, ok := call("")
	if !ok || !errors.Is(err, leasekit.ErrNoSuccessor) {
		d.w.Tracef("scenario: Resign alone returned %v", err)
		return false
	}
	startOthers(d, a)
	if !d.waitFor(limit, func() bool { return len(a.e.Status().Candidates) == len(d.replicas) }) {
		return false
	}
	err, ok = call("r" + strconv.Itoa(len(d.replicas)+7))
	if !ok || !errors.Is(err, leasekit.ErrNotCandidate) {
		d.w.Tracef("scenario: ResignTo(absent) returned %v", err)
		return false
	}
	d.settle(d.dur(d.timing.retry, d.timing.lease))
	if !a.e.IsLeader() || a.e.Status().Token != token {
		d.rec.fail("a refused resign moved leadership: %s leads %v with token %d, was %d", a.node.Name(), a.e.IsLeader(), a.e.Status().Token, token)
	}
	return true
}
