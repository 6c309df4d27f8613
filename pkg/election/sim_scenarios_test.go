package election

import (
	"context"
	"fmt"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/sim"
)

// Directed workloads ("scenarios", as FoundationDB's workloads): per seed, a scripted sequence
// of user actions and faults that leads the production Elector, in the simulator's world, to
// the state one known bug needs, with the timings, delays, the replica and some noise drawn
// from the seed. The random seeds of TestSim rarely reach these states; a scenario reaches
// them in most seeds. Besides the recorder's invariants (two live terms, fencing order, with
// their documented data-loss exceptions) every scenario checks tokensGrowPerInstance, which
// has no exception: a rollback excuses an overlap, not a replica going back on its own order.

// simScenario is one scripted workload: a is the replica the script is about; run reports
// whether the seed reached the script's last fault (its timings may miss a precondition).
type simScenario struct {
	name string
	run  func(d *simDriver, a *simReplica) (reached bool)
}

var simScenarios = []simScenario{
	{"failed release of an older token", scenarioFailedReleases},
	{"rollback to a released record", scenarioRollback},
}

// scenarioWorld draws a world for a scenario: 2 or 3 replicas that recampaign, a that releases
// on cancel and works promptly; clients honour their context deadlines.
func scenarioWorld(d *simDriver) *simReplica {
	d.chaos = true // the script restarts replicas, the driver does not
	d.timing = simTimings[d.rng.IntN(len(simTimings))]
	d.holdOff, d.blockMax = d.timing.lease, d.timing.lease
	n := 2 + d.rng.IntN(2)
	ai := d.rng.IntN(n)
	d.w.Tracef("scenario world: %d replicas, lease %v renew %v retry %v, a = r%d", n, d.timing.lease, d.timing.renew, d.timing.retry, ai)
	for i := 0; i < n; i++ {
		r := &simReplica{d: d, idx: i, identity: fmt.Sprintf("r%d", i), recampaign: true,
			releaseOnCancel: i == ai || d.rng.IntN(2) == 0, work: workPrompt}
		if i != ai {
			r.work = d.rng.IntN(workEarly + 1)
		}
		if err := r.newElector(d.client); err != nil {
			panic(err)
		}
		d.replicas = append(d.replicas, r)
	}
	return d.replicas[ai]
}

// waitFor advances the world until cond holds or limit passed, and reports cond.
func (d *simDriver) waitFor(limit time.Duration, cond func() bool) bool {
	d.loop(time.Now().Add(limit), cond)
	return cond()
}

// settle advances the world by dt.
func (d *simDriver) settle(dt time.Duration) { d.loop(time.Now().Add(dt), nil) }

// leadAlone runs a alone until it leads, cancels that Run (a releases) and runs it again until
// it leads on a new record: a has led an older token before the returned one.
func leadAlone(d *simDriver, a *simReplica) (older, current int64, ok bool) {
	limit := 4 * d.timing.lease
	a.startRun()
	if !d.waitFor(limit, a.e.IsLeader) {
		return 0, 0, false
	}
	older = a.e.Token()
	d.settle(d.dur(0, d.timing.retry))
	d.w.Tracef("scenario: cancel Run of %s (release token %d), run again", a.node.Name(), older)
	a.cancel()
	if !d.waitFor(limit, func() bool { return !a.running }) {
		return 0, 0, false
	}
	a.startRun()
	if !d.waitFor(limit, func() bool { return a.e.IsLeader() && a.e.Token() > older }) {
		return 0, 0, false
	}
	return older, a.e.Token(), true
}

// startOthers runs every replica but a.
func startOthers(d *simDriver, a *simReplica) {
	for _, r := range d.replicas {
		if r != a && !r.running {
			r.startRun()
		}
	}
}

// noise: a little latency on every message and a broken subscription of another replica.
func scenarioNoise(d *simDriver, a *simReplica) {
	d.w.Faults = sim.Faults{Slow: 0.1 * d.rng.Float64(), SlowMax: d.dur(time.Millisecond, 5*time.Millisecond)}
	r := d.pick()
	if r != a && d.rng.IntN(2) == 0 {
		d.after(d.dur(0, d.timing.lease), "noise", func() {
			d.w.Tracef("noise: subscriptions of %s break", r.node.Name())
			d.w.BreakSubscriptions(r.node)
		})
	}
}

// scenarioFailedReleases (mutant 7, and 6): a leads R; a's messages stall, so the release of R
// at the cancel of Run times out but still runs later; a's Release of an older token with a
// short deadline fails too; a's Run starts again and its acquire resumes R (acquire.lua renews
// a record its owner holds) before the late release deletes it and another replica takes
// over. a must not start a term on R: it would overlap the next leader's.
func scenarioFailedReleases(d *simDriver, a *simReplica) bool {
	older, cur, ok := leadAlone(d, a)
	if !ok {
		return false
	}
	startOthers(d, a)
	scenarioNoise(d, a)
	d.settle(d.dur(d.timing.retry, d.timing.lease))
	if !a.e.IsLeader() || a.e.Token() != cur {
		return false
	}
	c := d.callTimeout()
	short := d.dur(c/8, c/4)
	// The late release lands after Run returned (the release's call timeout), the Release
	// failed (short) and Run started again, which is within a lease of the cancel; a's
	// renewals of a resumed term keep R alive until then.
	lo := d.timing.lease + d.dur(0, d.timing.lease)
	hi := lo + d.dur(time.Millisecond, c)
	d.w.Tracef("scenario: %s stalls (messages take %v to %v); cancel its Run (release token %d)", a.node.Name(), lo, hi, cur)
	d.w.Stall(a.node, time.Hour, lo, hi)
	a.cancel()
	if !d.waitFor(2*d.timing.lease, func() bool { return !a.running }) {
		return false
	}
	name := fmt.Sprintf("%s.Release(%d) within %v", a.node.Name(), older, short)
	d.w.Tracef("user: %s", name)
	done := make(chan error, 1)
	e := a.e
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), short)
		defer cancel()
		_, err := e.Release(ctx, older)
		done <- err
	}()
	d.ops = append(d.ops, simOp{name: name, r: a, done: done})
	d.settle(0) // the release is sent inside the stall
	d.w.Stall(a.node, 0, 0, 0)
	d.waitFor(2*d.timing.lease, func() bool { return !d.busy(a) })
	d.w.Tracef("scenario: run %s again while the release of token %d is still on its way", a.node.Name(), cur)
	a.startRun()
	d.settle(d.dur(2*d.timing.lease, 4*d.timing.lease))
	return true
}

// scenarioRollback (mutant 9): a leads R1, Redis is snapshotted, a's Run is cancelled (R1
// released) and run again (R2), then Redis is restored from the snapshot, which still holds
// R1 live: a's renew of R2 finds R1 and its next acquire resumes R1, a token below R2's.
func scenarioRollback(d *simDriver, a *simReplica) bool {
	limit := 4 * d.timing.lease
	a.startRun()
	if !d.waitFor(limit, a.e.IsLeader) {
		return false
	}
	r1 := a.e.Token()
	d.settle(d.dur(0, d.timing.retry))
	snap := d.w.Snapshot()
	d.w.Tracef("scenario: snapshot with token %d; cancel Run of %s, run again", r1, a.node.Name())
	a.cancel()
	if !d.waitFor(limit, func() bool { return !a.running }) {
		return false
	}
	a.startRun()
	if !d.waitFor(d.timing.lease/2, func() bool { return a.e.IsLeader() && a.e.Token() > r1 }) {
		return false
	}
	if d.rng.IntN(2) == 0 {
		startOthers(d, a)
	}
	scenarioNoise(d, a)
	d.settle(d.dur(0, d.timing.lease/4))
	d.w.Tracef("scenario: Redis restored from the snapshot with token %d", r1)
	d.rec.dataLost()
	d.w.RestartRedis(snap, false)
	d.settle(d.dur(0, d.timing.retry))
	startOthers(d, a)
	d.settle(d.dur(2*d.timing.lease, 4*d.timing.lease))
	return true
}

// tokensGrowPerInstance: an incarnation never starts a term whose token is not above every
// token it started a term with before, except to resume its newest term (the same token
// again). Data loss is no exception (docs/RELIABILITY.md, "Tokens across rollbacks").
func (d *simDriver) tokensGrowPerInstance() {
	d.rec.flush()
	top := map[[2]int]int64{}
	for _, t := range d.rec.terms {
		k := [2]int{t.replica, t.gen}
		if prev, ok := top[k]; ok && t.token < prev {
			d.rec.fail("r%d.%d started a term with token %d after one with token %d", t.replica, t.gen, t.token, prev)
		}
		top[k] = max(top[k], t.token)
	}
}

// scenarioResult is what one seed of a scenario did.
type scenarioResult struct {
	simResult
	reached bool
}

// runScenario runs scenario sc with seed in its own synctest bubble.
func runScenario(t *testing.T, sc simScenario, seed uint64) scenarioResult {
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
		d := newSimDriver(w, scripts, client)
		start := time.Now()
		a := scenarioWorld(d)
		w.Tracef("scenario %q, seed %d", sc.name, seed)
		res.reached = sc.run(d, a)
		d.shutdown()
		d.loop(time.Now().Add(time.Hour), d.done)
		d.tokensGrowPerInstance()
		res.simResult = simResult{trace: w.Trace(), violations: d.rec.violations, exceptions: d.rec.exceptions,
			simulated: time.Since(start), terms: len(d.rec.terms)}
	})
	return res
}

// TestSimScenarios runs every scenario for SIM_SCENARIO_SEEDS seeds: the production Elector
// breaks no invariant, and seed 1 replays byte-identically. SIM_TRACE=1 prints the traces.
func TestSimScenarios(t *testing.T) {
	count := simEnv("SIM_SCENARIO_SEEDS", 40)
	for _, sc := range simScenarios {
		began := time.Now()
		terms, reached := 0, uint64(0)
		for seed := uint64(1); seed <= count; seed++ {
			res := runScenario(t, sc, seed)
			if seed == 1 { // a scenario's world honours context deadlines: it replays identically
				if again := runScenario(t, sc, seed); again.trace != res.trace {
					t.Errorf("scenario %q seed %d: traces differ\n%s", sc.name, seed, firstDiff(res.trace, again.trace))
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
				t.Errorf("scenario %q seed %d: %d violations, first: %s", sc.name, seed, len(res.violations), res.violations[0])
			}
		}
		if reached*4 < count*3 {
			t.Errorf("scenario %q reached its last fault in only %d of %d seeds", sc.name, reached, count)
		}
		t.Logf("scenario %q: %d seeds, reached in %d, %d terms, in %v", sc.name, count, reached, terms, time.Since(began).Round(time.Millisecond))
	}
}

// TestSimScenarioMutants (go test -tags elector_mutants) switches on each mutant a scenario
// targets and runs seeds until the scenario catches it: every mutant is caught; the seeds to
// detection are the figures of docs/MODEL.md.
func TestSimScenarioMutants(t *testing.T) {
	if !setMutant(0) {
		t.Skip("build with -tags elector_mutants to run the mutants")
	}
	defer setMutant(0)
	limit := simEnv("SIM_SCENARIO_SEEDS", 40)
	for _, m := range []struct {
		n  int
		sc simScenario
	}{{6, simScenarios[0]}, {7, simScenarios[0]}, {9, simScenarios[1]}} {
		setMutant(m.n)
		caught, first := 0, uint64(0)
		var msg string
		for seed := uint64(1); seed <= limit; seed++ {
			res := runScenario(t, m.sc, seed)
			if len(res.violations) == 0 {
				continue
			}
			caught++
			if first == 0 {
				first, msg = seed, res.violations[0]
			}
		}
		setMutant(0)
		if caught == 0 {
			t.Errorf("mutant %d: scenario %q caught it in none of %d seeds", m.n, m.sc.name, limit)
			continue
		}
		t.Logf("mutant %d: scenario %q caught it in %d/%d seeds, first at seed %d: %s", m.n, m.sc.name, caught, limit, first, msg)
	}
}
