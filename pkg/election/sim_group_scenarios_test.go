package election

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/sim"
)

// Directed Group workloads: as sim_scenarios_test.go's for the Elector, a scripted sequence of
// user actions and faults per seed that leads production Groups, through the Group driver, to
// the state one known Group bug needs, with the timing and some draws from the seed. Random
// Group seeds reach these states rarely (mutant 3) or never (mutant 10).

// groupScenario is one scripted Group workload; run reports whether the seed reached the
// script's last fault.
type groupScenario struct {
	name string
	run  func(d *groupDriver) (reached bool)
}

var groupScenarios = []groupScenario{
	{"acquire error after the holder's term was heard", gScenarioErrorKeepsExpiry},
	{"Add after Remove while the release is in flight", gScenarioAddDuringRelease},
	{"a replica dies while the others hold their shares", gScenarioTakeoverAtShare},
}

// heldSeam is a replica's Group seam whose next acquire batch, once armed, waits before it is
// sent until the driver lets it go: the script acts while that acquire is in flight.
type heldSeam struct {
	groupRedis
	w     *sim.World
	mu    sync.Mutex
	armed bool
	held  chan struct{} // non-nil while an acquire waits
	busy  int           // acquire batches in the seam
}

func (s *heldSeam) acquire(ctx context.Context, b *acquireBatch) {
	s.mu.Lock()
	s.busy++
	var ch chan struct{}
	if s.armed {
		s.armed, ch = false, make(chan struct{})
		s.held = ch
	}
	s.mu.Unlock()
	if ch != nil {
		s.w.Poke()
		<-ch
	}
	s.groupRedis.acquire(ctx, b)
	s.mu.Lock()
	s.busy--
	s.mu.Unlock()
}

// idle reports whether no acquire batch is in the seam.
func (s *heldSeam) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy == 0
}

func (s *heldSeam) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
}

func (s *heldSeam) waiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held != nil
}

// let sends the waiting acquire.
func (s *heldSeam) let() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
}

// gScenarioWorld draws a scenario's Group world: one lease (L0, or as many as names), n
// replicas that work promptly, return from OnStoppedLeading at once, campaign for every lease,
// and honour context deadlines.
func gScenarioWorld(d *groupDriver, n int, names ...string) {
	d.chaos = true // the script acts, the driver does not
	d.timing = simTimings[d.rng.IntN(len(simTimings))]
	d.names = []string{"L0"}
	if len(names) > 0 {
		d.names = names
	}
	d.recs = nil
	for range d.names {
		rec := newRecorder(d.w)
		rec.margin = d.timing.lease - d.timing.renew
		d.recs = append(d.recs, rec)
	}
	d.w.Tracef("group scenario world: %d groups, lease %v renew %v retry %v", n, d.timing.lease, d.timing.renew, d.timing.retry)
	for i := 0; i < n; i++ {
		r := &groupReplica{d: d, idx: i, work: workPrompt}
		r.newGroup()
		if err := r.g.Add(d.names...); err != nil {
			panic(err)
		}
		r.g.seam = &heldSeam{groupRedis: r.g.seam, w: d.w}
		d.replicas = append(d.replicas, r)
	}
}

func (d *groupDriver) waitFor(limit time.Duration, cond func() bool) bool {
	d.loop(time.Now().Add(limit), cond)
	return cond()
}

func (d *groupDriver) settle(dt time.Duration) { d.loop(time.Now().Add(dt), nil) }

func (r *groupReplica) leads() bool { _, ok := r.g.Held()["L0"]; return ok }

func (r *groupReplica) seam() *heldSeam { return r.g.seam.(*heldSeam) }

// gLeadFirst runs h alone until it leads, then the others: they follow, knowing its expiry.
func gLeadFirst(d *groupDriver, h *groupReplica) bool {
	h.startRun()
	if !d.waitFor(4*d.timing.lease, h.leads) {
		return false
	}
	for _, r := range d.replicas {
		if r != h {
			r.startRun()
		}
	}
	d.settle(d.dur(d.timing.retry, d.timing.lease))
	return h.leads()
}

// gScenarioErrorKeepsExpiry (mutant 10, the rule Elector and Group share): H leads, F and K follow. F's next acquire is held
// before it is sent; H removes the lease and K takes it at once (F is still acquiring, so K
// alone competes): F hears K's term announced with its TTL. F's acquire goes on and, in
// flight, Redis restarts without its data and stays down; K's messages stall. F's acquire
// fails: F must not try again before the expiry it heard (docs/MODEL.md, S4), while K works on
// until its renew deadline or its next renew says 0. F's next acquire is held again, and
// Redis comes up just as it is sent.
func gScenarioErrorKeepsExpiry(d *groupDriver) bool {
	gScenarioWorld(d, 3)
	h, f, k := d.replicas[0], d.replicas[1], d.replicas[2]
	if !gLeadFirst(d, h) {
		return false
	}
	f.seam().arm()
	if !d.waitFor(2*d.timing.lease, f.seam().waiting) {
		return false
	}
	// K's attempt at the same expiry would hear the release while its reply says "held".
	d.settle(2 * time.Millisecond)
	if !d.waitFor(d.timing.retry, k.seam().idle) || !h.leads() {
		return false
	}
	d.w.Tracef("scenario: %s's acquire waits; %s.Remove(L0)", f.node.Name(), h.node.Name())
	h.g.Remove("L0")
	if !d.waitFor(d.timing.renew/2, k.leads) {
		d.w.Tracef("scenario: %s did not take over", k.node.Name())
		f.seam().let()
		return false
	}
	d.settle(d.dur(2*time.Millisecond, 4*time.Millisecond)) // K's announcement reaches F
	d.w.Tracef("scenario: %s's acquire goes on; in flight, Redis restarts without its data", f.node.Name())
	d.w.Stall(f.node, time.Millisecond, 3*time.Millisecond, 5*time.Millisecond)
	f.seam().let()
	d.settle(time.Millisecond)
	d.w.Stall(k.node, 4*d.timing.lease, 30*time.Millisecond, 35*time.Millisecond)
	rec := d.recs[0]
	rec.dataLost()
	var lost []*simTerm
	for _, t := range rec.terms {
		if t.live {
			lost = append(lost, t)
		}
	}
	d.w.RestartRedis(nil, true)
	f.seam().arm()
	if !d.waitFor(3*d.timing.lease, f.seam().waiting) {
		d.w.Up()
		return false
	}
	d.w.Tracef("scenario: %s acquires again; Redis up", f.node.Name())
	d.w.Up()
	f.seam().let()
	d.settle(d.dur(2*d.timing.lease, 3*d.timing.lease))
	checkS4(d, f, lost)
	return true
}

// checkS4 fails the seed if r began a term while one of the terms lost with Redis's data,
// whose expiry r knew, was live (the recorder alone labels that overlap "data loss").
func checkS4(d *groupDriver, r *groupReplica, lost []*simTerm) {
	rec := d.recs[0]
	rec.flush()
	for _, t := range rec.terms {
		if t.replica != r.idx || t.gen != r.gen {
			continue
		}
		for _, o := range lost {
			if o.live || t.start.Before(o.end) {
				rec.fail("S4: g%d, whose acquire failed after it heard g%d's term %d announced, began token %d while that term, lost with Redis's data, was live",
					r.idx, o.replica, o.token, t.token)
			}
		}
	}
}

// gScenarioAddDuringRelease (mutant 3): A leads, B follows. A's messages stall (each takes a
// lease or more); A removes the lease: its release times out but is still on its way, and A
// forgets the lease. The stall ends and A adds the lease back: its acquire resumes the record
// (acquire.lua renews a record its owner holds) before the late release deletes it and B
// takes over. A must not start a term on that record: its guard kept the retired token.
func gScenarioAddDuringRelease(d *groupDriver) bool {
	gScenarioWorld(d, 2)
	a := d.replicas[0]
	if !gLeadFirst(d, a) {
		return false
	}
	token := a.g.Held()["L0"]
	lo := d.timing.lease + d.dur(0, d.timing.lease)
	hi := lo + d.dur(time.Millisecond, d.callTimeout())
	d.w.Tracef("scenario: %s stalls (messages take %v to %v); %s.Remove(L0) (release token %d)", a.node.Name(), lo, hi, a.node.Name(), token)
	d.w.Stall(a.node, time.Hour, lo, hi)
	a.g.Remove("L0")
	rec := d.recs[0]
	stopped := func() bool {
		rec.flush()
		for _, t := range rec.terms {
			if t.replica == a.idx && t.token == token && !t.live {
				return true
			}
		}
		return false
	}
	if !d.waitFor(2*d.timing.lease, stopped) || !d.waitFor(2*d.timing.lease, func() bool { return len(a.g.Held()) == 0 }) {
		return false
	}
	d.settle(d.callTimeout() + d.timing.retry) // the release timed out; OnStoppedLeading returned
	d.w.Stall(a.node, 0, 0, 0)
	d.w.Tracef("scenario: %s.Add(L0) while the release of token %d is still on its way", a.node.Name(), token)
	if err := a.g.Add("L0"); err != nil {
		panic(err)
	}
	d.settle(d.dur(2*d.timing.lease, 4*d.timing.lease))
	return true
}

// gScenarioTakeoverAtShare (mutants group-never-unpark, group-parks-after-member-left): the
// replicas settle, each at or near its share, so each parks its attempts on the others'
// leases (follow), and one crashes. Half the seeds have six leases over three replicas: the
// survivors' shares rise above what they hold, so they unpark. The others have seven over
// four, and the one that holds a single lease crashes: the survivors hold two each, as many as
// parkAt asks of them after, so only the drop in the member count makes them follow every
// lease for a LeaseDuration (followAll). Either way, every lease is led again within
// max(LeaseDuration, RenewDeadline + 2 RetryPeriods), plus a retry period and a call timeout
// for the attempts, on the slowest clock: not a parking later.
func gScenarioTakeoverAtShare(d *groupDriver) bool {
	names, n := []string{"L0", "L1", "L2", "L3", "L4", "L5"}, 3
	if d.rng.IntN(2) == 0 {
		names, n = append(names, "L6"), 4
	}
	gScenarioWorld(d, n, names...)
	for _, r := range d.replicas {
		r.startRun()
	}
	share := (len(names) + n - 1) / n
	settled := func() bool {
		total := 0
		for _, r := range d.replicas {
			h := len(r.g.Held())
			if h > share {
				return false
			}
			total += h
		}
		return total == len(names)
	}
	if !d.waitFor(20*d.timing.lease, settled) {
		return false
	}
	d.settle(2 * d.timing.lease) // every follower tried every other lease: parked
	if !settled() {
		return false
	}
	victim := d.replicas[0]
	for _, r := range d.replicas {
		if len(r.g.Held()) < len(victim.g.Held()) {
			victim = r
		}
	}
	d.w.Tracef("scenario: %s crashes holding %v", victim.node.Name(), victim.g.Held())
	d.w.Crash(victim.node)
	for _, rec := range d.recs {
		rec.crash(victim.idx, victim.gen)
	}
	victim.crashed = true
	victim.cancel()
	d.zombies = append(d.zombies, victim.done)
	victim.running = false
	t := d.timing
	bound := d.onSlowest(max(t.lease, t.renew+2*t.retry) + t.retry + d.callTimeout())
	allLed := func() bool {
		for _, rec := range d.recs {
			rec.flush()
			if !rec.leading() {
				return false
			}
		}
		return true
	}
	if !d.waitFor(bound, allLed) {
		d.fail("takeover: the crashed replica's leases were not all led again within %v", bound)
	}
	return true
}

// runGroupScenario runs sc with seed in its own synctest bubble.
func runGroupScenario(t *testing.T, sc groupScenario, seed uint64) scenarioResult {
	t.Helper()
	scripts, err := sim.LoadScripts()
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // never dialled
	defer func() { _ = client.Close() }()
	var res scenarioResult
	synctest.Test(t, func(*testing.T) {
		w := sim.NewWorld(seed)
		d := &groupDriver{simBase: simBase{w: w, rng: w.Rand}, scripts: scripts, client: client, gate: &callbackGate{w: w, waiting: map[string]gateEntry{}}}
		d.dataLost = func() {
			for _, rec := range d.recs {
				rec.dataLost()
			}
		}
		start := time.Now()
		w.Tracef("group scenario %q, seed %d", sc.name, seed)
		res.reached = sc.run(d)
		d.w.Tracef("shutdown")
		d.over = true
		for _, r := range d.replicas {
			r.seam().let()
			if r.running {
				r.cancel()
			}
		}
		d.loop(time.Now().Add(time.Hour), d.done)
		res.simResult = simResult{trace: w.Trace(), simulated: time.Since(start), violations: d.violations, exceptions: map[string]int{}}
		for _, rec := range d.recs {
			rec.flush()
			res.violations = append(res.violations, rec.violations...)
			for k, v := range rec.exceptions {
				res.exceptions[k] += v
			}
			res.terms += len(rec.terms)
		}
		if !d.done() {
			res.violations = append(res.violations, "shutdown: a Run did not return within an hour")
		}
	})
	return res
}

// TestSimGroupScenarios runs every Group scenario for SIM_SCENARIO_SEEDS seeds: the production
// Group breaks no invariant, most seeds reach the last fault, and seed 1 replays identically.
func TestSimGroupScenarios(t *testing.T) {
	count := simEnv("SIM_SCENARIO_SEEDS", 40)
	for _, sc := range groupScenarios {
		began := time.Now()
		terms, reached := 0, uint64(0)
		for seed := uint64(1); seed <= count; seed++ {
			res := runGroupScenario(t, sc, seed)
			if seed == 1 {
				if again := runGroupScenario(t, sc, seed); again.trace != res.trace {
					t.Errorf("group scenario %q seed %d: traces differ\n%s", sc.name, seed, firstDiff(res.trace, again.trace))
				}
			}
			terms += res.terms
			if res.reached {
				reached++
			}
			if os.Getenv("SIM_TRACE") != "" {
				fmt.Print(res.trace)
			}
			if len(res.violations) > 0 {
				t.Errorf("group scenario %q seed %d: %d violations, first: %s", sc.name, seed, len(res.violations), res.violations[0])
			}
		}
		if reached*4 < count*3 {
			t.Errorf("group scenario %q reached its last fault in only %d of %d seeds", sc.name, reached, count)
		}
		t.Logf("group scenario %q: %d seeds, reached in %d, %d terms, in %v", sc.name, count, reached, terms, time.Since(began).Round(time.Millisecond))
	}
}
