package election

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/testing/racebuild"
	"github.com/elector/elector/internal/testing/sim"
	"github.com/elector/elector/pkg/lease"
)

// The deterministic simulator (issue 24, docs/MODEL.md): N replicas run the production
// Elector against a simulated Redis that executes the project's own scripts, inside a
// testing/synctest bubble (virtual time, real goroutines). The driver delivers at most one
// message per step, after synctest.Wait, and draws every delay, loss, fault and user action
// from one seed, so a seed replays byte-identically.

const simLease = "sim"

type simTiming struct{ lease, renew, retry time.Duration }

// simTimings are valid Configs; in the later ones a call may take longer (callTimeout) than the
// lease outlasts the renew deadline, which some bugs need.
var simTimings = []simTiming{
	{300 * time.Millisecond, 200 * time.Millisecond, 50 * time.Millisecond},
	{1000 * time.Millisecond, 900 * time.Millisecond, 200 * time.Millisecond},
	{500 * time.Millisecond, 450 * time.Millisecond, 100 * time.Millisecond},
	{2000 * time.Millisecond, 1500 * time.Millisecond, 400 * time.Millisecond},
	// At the edge of timing.Validate: RenewDeadline is 1ms short of LeaseDuration minus the
	// drift margin (12ms), so a leader's clock slow by the whole bound (0.5%) stops 8ms before
	// its lease can expire, and drift beyond the bound reaches the overlap at once.
	{1000 * time.Millisecond, 987 * time.Millisecond, 200 * time.Millisecond},
}

// simResult is what one seed did.
type simResult struct {
	trace      string
	violations []string
	exceptions map[string]int
	simulated  time.Duration
	terms      int
	counts     map[string]int // the features of the world exercised (simCounts)
}

type simAction struct {
	at   time.Time
	seq  int
	name string
	fn   func()
}

// simBase is what the Elector's and the Group's drivers share: the world and the seed's
// source, the timing, the driver's own scheduled actions, Redis's snapshots and the faults of
// the network and of Redis (sim_faults_test.go).
type simBase struct {
	w         *sim.World
	rng       *rand.Rand
	timing    simTiming
	actions   []simAction
	aseq      int
	snaps     []*sim.Snapshot
	chaos     bool        // faults and user actions are injected (the driver's goroutine)
	chaosNow  atomic.Bool // chaos, for the callbacks' goroutines (setChaos)
	lossLevel float64
	slowLevel float64
	dataLost  func()    // tells the recorders that Redis lost data
	origin    time.Time // the world's start: every clock reads the same then
	slowest   int64     // the slowest replica clock's rate, ppm (sim.Drift), at most 0
	counts    simCounts // the features of the world this seed exercised
}

// simDriver runs one seed.
type simDriver struct {
	simBase
	rec        *recorder
	scripts    sim.Scripts
	keys       leasewire.Keys
	client     redis.UniversalClient
	holdOff    time.Duration
	ignoreCtx  bool
	preferring bool // the replicas' priorities differ: a leader may hand over by preference
	replicas   []*simReplica
	zombies    []chan error // Runs of crashed incarnations
	ops        []simOp
	blockMax   time.Duration
	cliN       int        // `elector resign` clients so far
	electors   []*Elector // every incarnation's, in order of creation (their handovers by preference)
	over       bool       // shut down: nothing runs again
}

// simOp is a user call in flight (Resign, Release, `elector resign`).
type simOp struct {
	name  string
	r     *simReplica // nil: not a call of a replica
	done  chan error
	after func(err error) // optional: what the driver does with its outcome
}

// after schedules fn, an action of the driver, dt from now (after the actions already due then).
func (d *simBase) after(dt time.Duration, name string, fn func()) {
	d.aseq++
	a := simAction{at: time.Now().Add(dt), seq: d.aseq, name: name, fn: fn}
	i := len(d.actions)
	for i > 0 && d.actions[i-1].at.After(a.at) {
		i--
	}
	d.actions = append(d.actions, simAction{})
	copy(d.actions[i+1:], d.actions[i:])
	d.actions[i] = a
}

// setChaos starts (true) or ends the chaos.
func (d *simBase) setChaos(on bool) {
	d.chaos = on
	d.chaosNow.Store(on)
}

// chaotic reports whether the chaos lasts, from any goroutine. A callback reads it only as it
// starts (the driver waits meanwhile), never as a runtime timer of the bubble wakes it: the
// driver may be acting in that same instant.
func (d *simBase) chaotic() bool { return d.chaosNow.Load() }

// dur draws a duration in [lo, hi].
func (d *simBase) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(d.rng.Int64N(int64(hi-lo)+1))
}

// callTimeout is the replicas' bound of one call (Elector's, and a Group batch's).
func (d *simBase) callTimeout() time.Duration { return max(d.timing.retry, d.timing.renew/2) }

// quietLen is the liveness bound: once Redis and every replica are healthy for this long,
// someone leads. A callback may block for blockMax, then a lease nobody renews expires
// (LeaseDuration) and a resignation's hold-off runs out; a follower learns of it within a
// RetryPeriod, and a call from before the calm may hang for its read timeout.
func (d *simDriver) quietLen() time.Duration {
	t := d.timing
	q := d.blockMax + 2*t.lease + d.holdOff + t.renew + 4*t.retry
	q += 2 * t.lease // a Release from before the calm keeps Run from starting until its deadline
	if d.ignoreCtx {
		q += 2 * t.lease
	}
	if d.preferring {
		// The leader hands over to a replica of a higher priority once both its term and the
		// replica's entry have lasted the settle period, at its next heartbeat; the target
		// acquires within a RetryPeriod (the release's news, or its next attempt).
		q += preferPeriods*t.lease + t.lease/3 + t.retry + d.callTimeout()
	}
	return d.onSlowest(q)
}

// loop runs until `until`, or until stop says so: each turn waits for every goroutine of the
// bubble to block, then does one thing.
func (d *simDriver) loop(until time.Time, stop func() bool) {
	d.steps(until, stop, func() bool {
		d.rec.flush()
		return d.poll()
	})
}

// steps is both drivers' loop: each turn waits for every goroutine of the bubble to block,
// schedules the requests sent meanwhile, then does one thing: what own does (the driver's own
// bookkeeping; true: it did something), else the next message or timer due, else the next
// action due; until `until`, or until stop says so.
func (d *simBase) steps(until time.Time, stop func() bool, own func() bool) {
	for {
		synctest.Wait()
		d.w.Absorb()
		if own() || d.w.DeliverDue() {
			continue
		}
		if len(d.actions) > 0 && !d.actions[0].at.After(time.Now()) {
			a := d.actions[0]
			d.actions = d.actions[1:]
			a.fn()
			continue
		}
		if (stop != nil && stop()) || !time.Now().Before(until) {
			return
		}
		next := until
		if stop != nil { // nothing wakes the driver when a Run returns: look again soon
			next = minTime(next, time.Now().Add(d.timing.retry))
		}
		if t, ok := d.w.NextAt(); ok && t.Before(next) {
			next = t
		}
		if len(d.actions) > 0 && d.actions[0].at.Before(next) {
			next = d.actions[0].at
		}
		d.w.SleepUntil(next)
	}
}

// poll notices the Runs and user calls that returned and, in a calm, runs again the replicas
// that stopped; it reports whether it started a Run (the driver waits for it before going on).
func (d *simDriver) poll() bool {
	for _, r := range d.replicas {
		// A crash wakes the zombie's goroutines (a Resign in flight among them): the driver
		// looks at nothing else until they have all blocked again (the next synctest.Wait).
		if r.poll() {
			return true
		}
		if why := r.dying(); why != "" {
			d.counts.add("OnStartedLeading panic")
			d.crashReplica(r, why+": the process ends")
			return true
		}
	}
	kept := d.ops[:0]
	for _, op := range d.ops {
		select {
		case err := <-op.done:
			d.w.Tracef("%s returned %v", op.name, err)
			if op.after != nil {
				op.after(err)
			}
		default:
			kept = append(kept, op)
		}
	}
	d.ops = kept
	if d.chaos {
		return false
	}
	started := false
	for _, r := range d.replicas { // calm: every replica runs once its Release returned
		if !r.running && !r.crashed && !d.busy(r) {
			d.restart(r)
			started = true
		}
	}
	return started
}

// busy reports whether a user call of r is in flight (Release keeps Run from starting).
func (d *simDriver) busy(r *simReplica) bool {
	for _, op := range d.ops {
		if op.r == r {
			return true
		}
	}
	return false
}

func (d *simDriver) done() bool {
	if len(d.ops) > 0 {
		return false
	}
	for _, r := range d.replicas {
		if r.running {
			return false
		}
	}
	for len(d.zombies) > 0 { // a zombie's channel tells once
		select {
		case <-d.zombies[0]:
			d.zombies = d.zombies[1:]
		default:
			return false
		}
	}
	return true
}

// newSimDriver returns the Elector driver of world w.
func newSimDriver(w *sim.World, scripts sim.Scripts, client redis.UniversalClient) *simDriver {
	d := &simDriver{simBase: simBase{w: w, rng: w.Rand}, rec: newRecorder(w), scripts: scripts, keys: leasewire.KeysFor(lease.DefaultPrefix, simLease), client: client}
	d.dataLost = d.rec.dataLost
	return d
}

// runSim runs seed for duration of simulated time (0: 40 lease durations) inside the
// synctest bubble of the caller.
func runSim(seed uint64, duration time.Duration, client redis.UniversalClient, scripts sim.Scripts) simResult {
	w := sim.NewWorld(seed)
	d := newSimDriver(w, scripts, client)
	d.origin = time.Now()
	d.configure()
	if duration == 0 {
		duration = 40 * d.timing.lease
	}
	start := time.Now()
	end := start.Add(duration)
	for _, r := range d.replicas {
		r.startRun()
	}
	for time.Now().Before(end) {
		d.setChaos(true)
		d.after(0, "tick", d.tick)
		d.loop(time.Now().Add(d.dur(3*d.timing.lease, 8*d.timing.lease)), nil)
		d.calm()
		d.loop(time.Now().Add(d.quietLen()), nil)
		d.checkLiveness()
	}
	d.shutdown()
	d.loop(time.Now().Add(time.Hour), d.done)
	d.rec.flush()
	if !d.done() { // a Run, a zombie's or a user call (a Resign) never returned
		d.rec.fail("shutdown: a Run or a user call did not return within an hour")
	}
	// A panic that left a Run (a zombie's too) skipped its waits (stepDown's for the renew in
	// flight): the process ended. Its calls in flight end with their read timeouts; let them,
	// or the bubble would end with goroutines blocked (seed 808; seed 2295 with mutant 8, a
	// crashed incarnation's).
	d.loop(time.Now().Add(3*d.timing.lease), nil)
	for _, e := range d.electors {
		for range e.prefHandovers.Load() {
			d.counts.add("handover by preference")
		}
	}
	return simResult{trace: w.Trace(), violations: d.rec.violations, exceptions: d.rec.exceptions,
		simulated: time.Since(start), terms: len(d.rec.terms), counts: d.counts.snapshot()}
}

// checkLiveness: after a calm of quietLen, someone leads, and keeps leading (no term ends)
// for two more lease durations of calm.
//
// Not with a preference and a replica whose work panics when stopped (a documented exception,
// docs/DESIGN.md "Preferred leadership"): each handover by preference then crashes the leader
// before its release, so that no reservation is made; the lease expires, and the winner of
// that race, when of a lower priority, hands over again after the minimum hold.
func (d *simDriver) checkLiveness() {
	fail := d.rec.fail
	if d.preferring && slices.ContainsFunc(d.replicas, func(r *simReplica) bool { return r.work == workPanic }) {
		fail = func(format string, args ...any) {
			d.rec.except("preference with work that panics when stopped", format, args...)
		}
	}
	d.rec.flush()
	if !d.rec.leading() {
		fail("liveness: nobody leads after %v of calm", d.quietLen())
		return
	}
	ends := d.rec.ends
	d.loop(time.Now().Add(2*d.timing.lease), nil)
	d.rec.flush()
	if !d.rec.leading() || d.rec.ends != ends {
		fail("liveness: leadership changed %d times in a calm after the bound", d.rec.ends-ends)
		return
	}
	d.w.Tracef("liveness: someone leads after %v of calm, for %v more", d.quietLen(), 2*d.timing.lease)
}

// configure draws the seed's world: timing, replicas, their modes, the network's faults.
func (d *simDriver) configure() {
	d.timing = simTimings[d.rng.IntN(len(simTimings))]
	d.holdOff = d.timing.lease
	if d.rng.IntN(2) == 0 {
		d.holdOff = d.dur(time.Millisecond, d.timing.lease).Truncate(time.Millisecond)
	}
	d.ignoreCtx = d.rng.IntN(3) == 0
	d.blockMax = d.timing.lease
	d.lossLevel = []float64{0.01, 0.05, 0.2}[d.rng.IntN(3)]
	d.slowLevel = []float64{0.05, 0.2, 0.5}[d.rng.IntN(3)]
	n := 2 + d.rng.IntN(4)
	d.w.Tracef("seed world: %d replicas, lease %v renew %v retry %v hold-off %v, context timeouts ignored %v, loss %v slow %v",
		n, d.timing.lease, d.timing.renew, d.timing.retry, d.holdOff, d.ignoreCtx, d.lossLevel, d.slowLevel)
	beyond, beyondPPM := d.drawBeyond(n)
	for i := 0; i < n; i++ {
		r := &simReplica{d: d, idx: i, identity: fmt.Sprintf("r%d", i),
			recampaign: d.rng.IntN(5) != 0, releaseOnCancel: d.rng.IntN(3) != 0,
			work: d.rng.IntN(workModes), stop: d.drawStop(), ppm: d.drawDrift(),
			// At or above every ghost candidate's (at most 10): the random world's
			// handovers by preference are between real replicas (sim_prefer_test.go has
			// ghosts that outrank them).
			priority: 10 + d.rng.Int64N(2)}
		if i > 0 && r.priority != d.replicas[0].priority {
			d.preferring = true
		}
		if i == beyond {
			r.ppm = beyondPPM
			d.rec.beyond[i] = true
			d.counts.add("clock drift beyond the bound")
		}
		d.noteDrift(r.ppm)
		d.w.Tracef("r%d: recampaign %v, release on cancel %v, work %s, stop %s, clock %+d ppm, priority %d", i, r.recampaign, r.releaseOnCancel, workNames[r.work], stopNames[r.stop], r.ppm, r.priority)
		if err := r.newElector(d.client); err != nil {
			panic(err)
		}
		d.replicas = append(d.replicas, r)
	}
}

// calm ends the chaos: the network heals, Redis is up, every replica runs.
func (d *simDriver) calm() {
	d.setChaos(false)
	d.w.Faults = sim.Faults{}
	d.w.Up()
	for _, r := range d.replicas {
		d.w.Heal(r.node)
		if !d.busy(r) {
			d.restart(r)
		}
	}
	d.w.Tracef("calm for %v", d.quietLen())
}

// restart runs a replica again: a new incarnation after a crash, else Run again.
func (d *simDriver) restart(r *simReplica) {
	switch {
	case d.over:
	case r.crashed:
		r.gen++
		r.crashed = false
		if err := r.newElector(d.client); err != nil {
			panic(err)
		}
		r.startRun()
	case !r.running:
		r.startRun()
	}
}

func (d *simDriver) shutdown() {
	d.w.Tracef("shutdown")
	d.setChaos(true) // no more restarts
	d.over = true
	for _, r := range d.replicas {
		if r.running {
			r.cancel()
		}
	}
}

// replaySeeds is how many seeds, from 1, the replay checks (TestSimReplaysIdentically,
// TestSimGroupReplaysIdentically) run twice: 30, or 5 under the race detector, where 30 seeds
// twice would be a third of make test's time in this package. The replays are timing-free,
// the race detector has TestSim's and TestSimGroup's seeds besides, and make sim (CI's checks
// lane) runs the 30 without it.
func replaySeeds() uint64 {
	if racebuild.Enabled {
		return 5
	}
	return 30
}

// simEnv reads an integer knob of `make sim`.
func simEnv(name string, def uint64) uint64 {
	if v, err := strconv.ParseUint(os.Getenv(name), 10, 64); err == nil {
		return v
	}
	return def
}

// runSeed runs one seed in its own synctest bubble.
func runSeed(t *testing.T, seed uint64, duration time.Duration) simResult {
	t.Helper()
	scripts, err := sim.LoadScripts()
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // never dialled
	defer func() { _ = client.Close() }()
	var res simResult
	synctest.Test(t, func(*testing.T) { res = runSim(seed, duration, client, scripts) })
	return res
}

// TestSim runs SIM_SEEDS seeds from SIM_SEED (or, with SIM_DURATION, seeds until that much wall
// time passed) and fails with the seeds that broke an invariant. SIM_TRACE=1 prints the trace of
// each seed: `make sim SEED=n` replays one.
func TestSim(t *testing.T) {
	first, count := simEnv("SIM_SEED", 1), simEnv("SIM_SEEDS", 10)
	soak, _ := time.ParseDuration(os.Getenv("SIM_DURATION"))
	began := time.Now()
	var simulated time.Duration
	var failed []uint64
	seeds := uint64(0)
	exceptions := map[string]int{}
	var features featureTally
	for seed := first; ; seed++ {
		if (soak == 0 && seed >= first+count) || (soak > 0 && time.Since(began) >= soak) {
			break
		}
		res := runSeed(t, seed, 0)
		seeds++
		simulated += res.simulated
		features.add(res.counts)
		for k, v := range res.exceptions {
			exceptions[k] += v
		}
		if os.Getenv("SIM_TRACE") != "" {
			fmt.Print(res.trace)
		}
		if len(res.violations) > 0 {
			failed = append(failed, seed)
			t.Errorf("seed %d: %d violations, first: %s\nreplay: make sim SEED=%d", seed, len(res.violations), res.violations[0], seed)
		}
	}
	wall := time.Since(began)
	t.Logf("%d seeds in %v: %.2f seeds/s, %.1f simulated s per wall s, %v simulated; documented exceptions %v; failed seeds %v",
		seeds, wall.Round(time.Millisecond), float64(seeds)/wall.Seconds(), simulated.Seconds()/wall.Seconds(), simulated.Round(time.Second), exceptions, failed)
	t.Logf("features exercised (total/seeds): %v", &features)
}

// TestSimReplaysIdentically runs seeds twice and requires byte-identical traces: seeds 1 to
// replaySeeds(), worlds whose clients honour context deadlines and worlds whose clients do
// not. Seeds 7, 10, 11, 15, 18, 22 and 29 replayed differently while the Elector's timers were
// runtime timers: one that fired while its goroutine was in a call stayed ready, and a user
// cancel made a second case of its select ready (docs/MODEL.md, "Deterministic simulator").
func TestSimReplaysIdentically(t *testing.T) {
	for seed := uint64(1); seed <= replaySeeds(); seed++ {
		a, b := runSeed(t, seed, 0), runSeed(t, seed, 0)
		ha, hb := sha256.Sum256([]byte(a.trace)), sha256.Sum256([]byte(b.trace))
		if ha != hb {
			t.Errorf("seed %d: traces differ (%d and %d bytes)\n%s", seed, len(a.trace), len(b.trace), firstDiff(a.trace, b.trace))
		}
		if a.terms == 0 {
			t.Errorf("seed %d: nobody ever led", seed)
		}
	}
}

func firstDiff(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	lo := max(0, i-1500)
	return fmt.Sprintf("first difference at byte %d:\n--- a\n%s\n--- b\n%s", i, a[lo:min(len(a), i+300)], b[lo:min(len(b), i+300)])
}
