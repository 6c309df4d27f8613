package election

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/sim"
	"github.com/elector/elector/pkg/lease"
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
	{"restart without data while a follower that polled listens again", scenarioListenerAtRestart},
	{"cancel while the log line after a won acquire blocks", scenarioCancelInLogStall},
	{"the log line after a won acquire blocks past the lease", scenarioLateStartInLogStall},
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
	older = a.e.Status().Token
	d.settle(d.dur(0, d.timing.retry))
	d.w.Tracef("scenario: cancel Run of %s (release token %d), run again", a.node.Name(), older)
	a.cancel()
	if !d.waitFor(limit, func() bool { return !a.running }) {
		return 0, 0, false
	}
	a.startRun()
	if !d.waitFor(limit, func() bool { return a.e.IsLeader() && a.e.Status().Token > older }) {
		return 0, 0, false
	}
	return older, a.e.Status().Token, true
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
	if !a.e.IsLeader() || a.e.Status().Token != cur {
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

// scenarioCancelInLogStall (mutant election-won-term-dropped-at-cancel): a's acquires fail
// for a while, so its next success writes "Redis calls succeed again"; that write blocks (a
// stalled stderr) right after the acquire won, and Run is cancelled meanwhile. Run must
// release the won term (checkLeftHeld), not drop it: followers would wait out the lease.
func scenarioCancelInLogStall(d *simDriver, a *simReplica) bool {
	if !winInLogStall(d, a, 4*d.timing.lease) {
		return false
	}
	d.settle(d.dur(0, d.timing.retry/4))
	d.w.Tracef("scenario: cancel Run of %s while its log is stalled", a.node.Name())
	a.cancel()
	startOthers(d, a)
	d.waitFor(6*d.timing.lease, func() bool { return !a.running })
	d.settle(d.dur(d.timing.lease, 2*d.timing.lease))
	return !a.running
}

// winInLogStall makes a's log stall for stall right after an acquire of a won: a is cut from
// Redis and run, so that its failed acquires are logged and its next success writes "Redis
// calls succeed again", which blocks. It reports whether a won and, its log stalled, does not
// lead yet.
func winInLogStall(d *simDriver, a *simReplica, stall time.Duration) bool {
	gs := &gatedStore{simStore: a.e.store.(*simStore)}
	a.e.store = gs
	d.w.Tracef("scenario: cut %s from Redis, run it", a.node.Name())
	d.w.Cut(a.node, true)
	a.startRun()
	d.settle(d.dur(d.timing.retry, 2*d.timing.retry)) // failed acquires: the errors are logged
	sent, _ := gs.state()
	won := func() int { gs.simStore.mu.Lock(); defer gs.simStore.mu.Unlock(); return len(gs.simStore.won) }
	d.w.Tracef("scenario: heal %s", a.node.Name())
	d.w.Heal(a.node)
	if !d.waitFor(2*d.timing.lease, func() bool { n, _ := gs.state(); return n > sent }) {
		return false
	}
	// The acquire is on its way: its success's log line will block.
	d.w.Tracef("scenario: the log of %s stalls for %v", a.node.Name(), stall)
	a.reasons.stall(time.Now().Add(stall))
	return d.waitFor(d.timing.lease, func() bool { return won() > 0 }) && !a.e.IsLeader()
}

// scenarioLateStartInLogStall (mutant election-late-start): as scenarioCancelInLogStall, a's
// success after failed acquires writes a log line that blocks right after its acquire won;
// here the write blocks for two to three lease durations, and the others campaign meanwhile:
// one of them leads once a's unused record expired. When the write returns, a must not start
// the term it won, whose renew deadline has long passed (R2): two leaders otherwise.
func scenarioLateStartInLogStall(d *simDriver, a *simReplica) bool {
	stall := d.dur(2*d.timing.lease, 3*d.timing.lease)
	if !winInLogStall(d, a, stall) {
		return false
	}
	startOthers(d, a)
	if !d.waitFor(stall, func() bool { return d.leaderBut(a) != nil }) {
		return false
	}
	d.w.Tracef("scenario: another replica leads while the log of %s is stalled", a.node.Name())
	d.settle(stall + d.dur(d.timing.lease, 2*d.timing.lease))
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
	r1 := a.e.Status().Token
	d.settle(d.dur(0, d.timing.retry))
	snap := d.w.Snapshot()
	d.w.Tracef("scenario: snapshot with token %d; cancel Run of %s, run again", r1, a.node.Name())
	a.cancel()
	if !d.waitFor(limit, func() bool { return !a.running }) {
		return false
	}
	a.startRun()
	if !d.waitFor(d.timing.lease/2, func() bool { return a.e.IsLeader() && a.e.Status().Token > r1 }) {
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

// gatedStore is a replica's simStore whose subscriptions can be refused (an ACL, a Redis at
// maxclients for pub/sub connections: its calls still succeed), and which notes the time of
// its acquires and of the last one that found the lease held while subscribing was refused.
type gatedStore struct {
	*simStore
	refuse atomic.Bool

	mu       sync.Mutex
	acquires int
	heldAt   time.Time // the last acquire sent while refusing that found the lease held
}

// simStoreOf is the simStore under a replica's store.
func simStoreOf(s store) *simStore {
	if g, ok := s.(*gatedStore); ok {
		return g.simStore
	}
	return s.(*simStore)
}

func (g *gatedStore) acquire(ctx context.Context, ttl time.Duration) (bool, lease.Status, *leasekit.Reservation, error) {
	refused := g.refuse.Load()
	g.mu.Lock()
	g.acquires++
	g.mu.Unlock()
	won, st, res, err := g.simStore.acquire(ctx, ttl)
	if refused && err == nil && !won && res == nil {
		g.mu.Lock()
		g.heldAt = time.Now()
		g.mu.Unlock()
	}
	return won, st, res, err
}

func (g *gatedStore) subscribe(ctx context.Context) (subscription, error) {
	if g.refuse.Load() {
		return nil, fmt.Errorf("subscribe: %w", sim.ErrRefused)
	}
	return g.simStore.subscribe(ctx)
}

func (g *gatedStore) state() (acquires int, heldAt time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.acquires, g.heldAt
}

// leaderBut returns the replica other than a that leads, if any.
func (d *simDriver) leaderBut(a *simReplica) *simReplica {
	for _, r := range d.replicas {
		if r != a && r.running && r.e.IsLeader() {
			return r
		}
	}
	return nil
}

// scenarioListenerAtRestart (mutant 10), the flake of TestRedisDataLossEndsTheTerm: another
// replica L leads, a follows. a's subscription breaks and subscribing again is refused, so
// its attempt at the expiry it knew finds the lease held (L renewed) while it does not
// listen: it polls (RetryPeriod). L renews once more, unheard; then subscribing works again
// and a subscribes in its sleep, before its poll. Redis restarts without its data at once
// (and, in half the seeds, stays down until just after the poll's time, so that a poll meets
// an error). a listens and knows the expiry of L's term, so it must not begin before L's
// term ended (docs/MODEL.md, S4): L learns of the loss only at its next renew (slowed here
// by a stalled connection). A seed that does not reach the state (a subscribed by its poll's
// acquire, not in its sleep) tries again, up to 8 times.
func scenarioListenerAtRestart(d *simDriver, a *simReplica) bool {
	gs := &gatedStore{simStore: a.e.store.(*simStore)}
	a.e.store = gs
	limit := 4 * d.timing.lease
	startOthers(d, a)
	var l *simReplica
	if !d.waitFor(limit, func() bool { l = d.leaderBut(a); return l != nil }) {
		return false
	}
	a.startRun()
	if !d.waitFor(limit, func() bool { n, _ := gs.state(); return a.e.subscriptions.Load() > 0 && n > 0 }) {
		return false
	}
	for cycle := 0; cycle < 8; cycle++ {
		d.settle(d.dur(0, d.timing.retry))
		if !l.e.IsLeader() || a.e.IsLeader() {
			d.w.Tracef("scenario: %s no longer leads", l.node.Name())
			return false
		}
		// Break a's subscription in a phase of L's renewals such that a's tries to subscribe
		// again (50ms later, then every RetryPeriod) fall 1-3 ms after L's renewals: after the
		// renew's reply (under 1 ms here), and in some cycles before a's next poll, which
		// follows them by a reply's latency and two jitters.
		lr := l.e.Status().LastRenew
		if lr == nil {
			return false
		}
		phase := (lr.Add(d.dur(time.Millisecond, 3*time.Millisecond) - resubscribeDelay).Sub(time.Now())) % d.timing.retry
		d.settle((phase + d.timing.retry) % d.timing.retry)
		d.w.Tracef("scenario: %s's subscriptions break and are refused", a.node.Name())
		_, before := gs.state()
		gs.refuse.Store(true)
		d.w.BreakSubscriptions(a.node)
		var t0 time.Time
		if !d.waitFor(2*d.timing.lease, func() bool { _, t0 = gs.state(); return t0.After(before) }) {
			d.w.Tracef("scenario: no poll of %s found the lease held", a.node.Name())
			return false
		}
		if !d.waitFor(2*d.timing.retry, func() bool { s := l.e.Status(); return s.LastRenew != nil && s.LastRenew.After(t0) }) {
			d.w.Tracef("scenario: %s did not renew", l.node.Name())
			return false
		}
		acq, _ := gs.state()
		subs := a.e.subscriptions.Load()
		d.w.Tracef("scenario: %s's poll found the lease held; %s renewed since; subscriptions work again", a.node.Name(), l.node.Name())
		gs.refuse.Store(false)
		d.waitFor(2*d.timing.retry, func() bool { return a.e.subscriptions.Load() > subs })
		if n, _ := gs.state(); n != acq || a.e.subscriptions.Load() == subs || !l.e.IsLeader() {
			d.w.Tracef("scenario: %s subscribed by its poll (it sleeps until the expiry): again", a.node.Name())
			continue
		}
		return restartUnderListener(d, a, l, t0)
	}
	return false
}

// restartUnderListener restarts Redis without its data while a listens, having subscribed
// again in its sleep, and checks S4 for a: none of its terms begins while L's lost one lives.
func restartUnderListener(d *simDriver, a, l *simReplica, t0 time.Time) bool {
	d.w.Tracef("scenario: %s subscribed again in its sleep; %s's messages stall; Redis restarts without its data", a.node.Name(), l.node.Name())
	d.w.Stall(l.node, 4*d.timing.lease, 30*time.Millisecond, 35*time.Millisecond)
	d.rec.dataLost()
	var lost []*simTerm
	for _, t := range d.rec.terms {
		if t.live {
			lost = append(lost, t)
		}
	}
	down := d.rng.IntN(2) == 0
	d.w.RestartRedis(nil, down)
	if down { // until just after a's poll (the poll's time + jitter + the timer's lateness)
		d.after(t0.Add(d.timing.retry+3*time.Millisecond).Sub(time.Now()), "redis up", func() {
			d.w.Tracef("scenario: Redis up")
			d.w.Up()
		})
	}
	d.settle(d.dur(2*d.timing.lease, 3*d.timing.lease))
	d.rec.flush()
	for _, t := range d.rec.terms {
		if t.replica != a.idx || t.gen != a.gen {
			continue
		}
		for _, o := range lost {
			if o.live || t.start.Before(o.end) {
				d.rec.fail("S4: r%d, a follower that knew the expiry of r%d's term %d and listened at the restart, began token %d while that term, lost with Redis's data, was live",
					a.idx, o.replica, o.token, t.token)
			}
		}
	}
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
