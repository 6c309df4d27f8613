package election

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/elector/elector/internal/testing/sim"
)

// The Group driver of the deterministic simulator (issue 24, docs/MODEL.md): N replicas run
// the production Group, each over a few leases of one world, through its groupRedis seam
// (simGroupRedis) and its injected clock, with Add/Remove churn, Run cancelled and run again,
// crashes and slow callbacks on top of the network's and Redis's faults. Each lease has its
// own recorder (sim_check_test.go): at most one replica whose OnStartedLeading ctx is live,
// tokens strictly increasing across started terms, per replica callbacks in order.

// groupDriver runs one seed of Groups.
type groupDriver struct {
	simBase
	scripts  sim.Scripts
	client   redis.UniversalClient
	names    []string
	recs     []*recorder // one per name, in the order of names
	replicas []*groupReplica
	gate     *callbackGate
	zombies  []chan error
	over     bool // shut down: nothing runs again
	ignore   bool // nodes wait for their replies whatever their ctx says

	liveness   *groupLiveness // the check of the calm in progress, if any
	violations []string       // the driver's own (liveness, Run's outcome)
}

// groupLiveness is the Group's liveness check over one calm: from `from` on, fewer leases
// than need led for longer than gap fails the seed.
type groupLiveness struct {
	from       time.Time
	need       int
	gap        time.Duration
	unledSince time.Time // zero: enough leases are led
	failed     bool
	worst      time.Duration // the longest shortfall seen after from
}

// groupReplica is one replica: a Group (the production code), a new incarnation (gen) after a
// crash.
type groupReplica struct {
	d           *groupDriver
	idx, gen    int
	g           *Group
	node        *sim.Node
	listen      *sim.Node // its subscription goroutine's timers (groupClock)
	pausedUntil time.Time
	stop        int   // OnStoppedLeading's mode (stopPrompt...)
	ppm         int64 // its clock's rate against Redis's (sim.Drift)
	work        int
	max         int
	cancel      context.CancelFunc
	cancelled   bool // the running Run was cancelled (a Group's Run returns only then)
	done        chan error
	running     bool
	crashed     bool
	log         *reasonSink // its Run's logger, which the stalled-log fault blocks
}

// callbackGate lets the callbacks and the batches of every Group return one at a time, one
// per step of the driver, in the order of their keys. Several callbacks can end within one simulated instant
// (a Run's stop cancels every term; timers of the bubble fire together), and each return is a
// message to its Group's loop, whose select would take them in the order their goroutines
// happened to run, drawing the leases' jitters in that order: a seed would not replay.
type callbackGate struct {
	w       *sim.World
	mu      sync.Mutex
	waiting map[string]gateEntry
}

type gateEntry struct {
	node *sim.Node // a paused node's callbacks and batches wait for the pause's end
	ch   chan struct{}
}

// pass blocks until the driver lets the callback of key return; keys are unique.
func (g *callbackGate) pass(node *sim.Node, key string) {
	ch := make(chan struct{})
	g.mu.Lock()
	g.waiting[key] = gateEntry{node, ch}
	g.mu.Unlock()
	g.w.Poke()
	<-ch
}

// next lets the callback with the least key whose node is not paused return; false: none.
func (g *callbackGate) next() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range slices.Sorted(maps.Keys(g.waiting)) {
		if e := g.waiting[k]; !e.node.Paused() {
			close(e.ch)
			delete(g.waiting, k)
			return true
		}
	}
	return false
}

// leaseRand is a replica's seeded source per lease: the callbacks of one lease never overlap,
// so each lease's draws come in the same order in every run, whatever the other leases do.
type leaseRand struct {
	mu   sync.Mutex
	salt uint64
	m    map[string]*rand.Rand
}

func (l *leaseRand) n(name string, d time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.m[name]
	if r == nil {
		h := fnv.New64a()
		_, _ = h.Write([]byte(name))
		r = rand.New(rand.NewPCG(l.salt, h.Sum64()))
		l.m[name] = r
	}
	return time.Duration(r.Int64N(int64(d)))
}

// groupClock is a Group's clock in the simulator: the bubble's virtual time, with timers of
// the world (sim.Timer) that fire up to 10µs late, as simClock's. Two goroutines of a Run arm
// timers: the loop (NewTimer, then Reset at each of its rounds, whose number depends on how
// many messages one round takes) and the subscription's (After, between two subscriptions).
// So the lateness is not drawn in arming order but hashed from the due time (and the seed),
// and each goroutine has its own node (timers due at one instant fire by node, then arming
// order): neither depends on which goroutine ran first within an instant.
//
// Its Now and Since read the replica's own clock, which drifts (driftClock), and its timers
// last their durations on that clock.
type groupClock struct {
	clock.RealClock
	driftClock
	loop, listen *sim.Node
	salt         uint64
}

func (c *groupClock) Now() time.Time { return c.driftClock.Now() }

func (c *groupClock) Since(t time.Time) time.Duration { return c.driftClock.Since(t) }

func (c *groupClock) late(d time.Duration) time.Duration {
	h := fnv.New64a()
	_ = binary.Write(h, binary.LittleEndian, [2]uint64{c.salt, uint64(time.Now().Add(d).UnixNano())})
	return d + 1 + time.Duration(h.Sum64()%10_000)
}

func (c *groupClock) NewTimer(d time.Duration) clock.Timer {
	return &groupTimer{Timer: c.loop.NewTimer(c.late(c.drift.Real(d))), c: c}
}

func (c *groupClock) After(d time.Duration) <-chan time.Time {
	return c.listen.NewTimer(c.late(c.drift.Real(d))).C()
}

func (c *groupClock) Sleep(time.Duration) { panic("groupClock: Sleep is not simulated") }

func (c *groupClock) Tick(time.Duration) <-chan time.Time {
	panic("groupClock: Tick is not simulated")
}

type groupTimer struct {
	*sim.Timer
	c *groupClock
}

func (t *groupTimer) Reset(d time.Duration) bool { return t.Timer.Reset(t.c.late(t.c.drift.Real(d))) }

func (d *groupDriver) rec(name string) *recorder {
	for i, n := range d.names {
		if n == name {
			return d.recs[i]
		}
	}
	panic("no lease " + name)
}

// newGroup builds the replica's Group of incarnation r.gen.
func (r *groupReplica) newGroup() {
	d := r.d
	r.node = d.w.NewNode(fmt.Sprintf("g%d.%d", r.idx, r.gen))
	r.node.IgnoreCtx, r.node.ReadTimeout = d.ignore, 2*d.timing.lease
	cbRand := &leaseRand{salt: d.rng.Uint64(), m: map[string]*rand.Rand{}}
	r.listen = d.w.NewNode(r.node.Name() + "/listen")
	idx, gen, work, stop, lease0, node := r.idx, r.gen, r.work, r.stop, d.timing.lease, r.node
	var g *Group
	cfg := GroupConfig{
		Client: d.client, Group: "simg", Identity: fmt.Sprintf("g%d", r.idx), MaxLeases: r.max,
		LeaseDuration: d.timing.lease, RenewDeadline: d.timing.renew, RetryPeriod: d.timing.retry,
		Callbacks: GroupCallbacks{
			OnStartedLeading: func(ctx context.Context, name string) {
				token := TokenFrom(ctx)
				defer d.gate.pass(node, fmt.Sprintf("%s g%d.%d started %d", name, idx, gen, token))
				rec := d.rec(name)
				rec.add(simEvent{kind: evStarted, replica: idx, gen: gen, token: token, instance: g.instance})
				context.AfterFunc(ctx, func() { rec.add(simEvent{kind: evCancel, replica: idx, gen: gen, token: token}) })
				defer rec.add(simEvent{kind: evReturned, replica: idx, gen: gen, token: token})
				// A panic is the Group's to recover (GroupCallbacks): taken as a return.
				doWork(ctx, work, rand.New(rand.NewPCG(uint64(cbRand.n(name, time.Hour)), 5)), lease0, d.chaotic,
					func() { d.counts.add("group OnStartedLeading panic") })
			},
			OnStoppedLeading: func(name string) {
				defer d.gate.pass(node, fmt.Sprintf("%s g%d.%d stopped %d", name, idx, gen, d.w.Elapsed()))
				d.rec(name).add(simEvent{kind: evStopped, replica: idx, gen: gen})
				switch stop {
				case stopSlow:
					time.Sleep(cbRand.n(name, 2*lease0))
				case stopPanic:
					if cbRand.n(name, 2) == 0 {
						time.Sleep(cbRand.n(name, 2*lease0))
					}
					d.counts.add("group OnStoppedLeading panic")
					panic(simPanic("OnStoppedLeading panics"))
				}
			},
		},
	}
	clk := &groupClock{loop: r.node, listen: r.listen, salt: d.rng.Uint64(), driftClock: driftClock{sim.Drift{Origin: d.origin, PPM: r.ppm}}}
	var err error
	if g, err = NewGroup(cfg); err != nil {
		panic(err)
	}
	g.clock = clk // the Group's clock seam, as the Elector's (sim_replica_test.go)
	for _, n := range d.names {
		if d.rng.IntN(4) != 0 {
			if err := g.Add(n); err != nil {
				panic(err)
			}
		}
	}
	g.instance = fmt.Sprintf("i%d-%d", r.idx, r.gen) // not the random one: traces replay
	g.member = g.instance + ":" + cfg.Identity
	g.seam = &simGroupRedis{g: g, node: r.node, scripts: d.scripts, names: d.names, gate: d.gate}
	jitterRand := rand.New(rand.NewPCG(d.rng.Uint64(), 3)) // the loop goroutine's only
	g.rand = func(n time.Duration) time.Duration { return time.Duration(jitterRand.Int64N(int64(n))) }
	r.g = g
}

// startRun starts Run on its own goroutine. Its start-up (reading the Group's names) runs
// before or after whatever the driver does next within this step: call Add and Remove
// before it, or in a later step.
func (r *groupReplica) startRun() {
	if r.d.over {
		return
	}
	r.log = newReasonSink()
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), logr.New(r.log)))
	done := make(chan error, 1)
	r.done, r.running, r.cancelled = done, true, false
	r.cancel = func() { r.cancelled = true; cancel() }
	g := r.g
	go func() { done <- g.Run(ctx) }()
	r.d.w.Tracef("g%d.%d: Run started", r.idx, r.gen)
}

func (r *groupReplica) poll() {
	if !r.running {
		return
	}
	select {
	case err := <-r.done:
		r.running = false
		r.d.w.Tracef("g%d.%d: Run returned: %v", r.idx, r.gen, err)
		if err != nil || !r.cancelled { // GroupCallbacks: a panic is taken as a return
			r.d.fail("g%d.%d: Run returned %v without being cancelled", r.idx, r.gen, err)
		}
	default:
	}
}

// loop runs until `until`, or until stop says so, one message or action per step.
func (d *groupDriver) loop(until time.Time, stop func() bool) {
	d.steps(until, stop, func() bool {
		for _, rec := range d.recs {
			rec.flush()
		}
		for _, r := range d.replicas {
			r.poll()
		}
		d.checkLiveness()
		return d.gate.next()
	})
}

// fail records a violation of the driver's own checks.
func (d *groupDriver) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.violations = append(d.violations, fmt.Sprintf("%.6fs %s", d.w.Elapsed().Seconds(), msg))
	d.w.Tracef("VIOLATION: %s", msg)
}

// quietLen is the Group's liveness bound, counted from the end of the last pause: a callback
// may ignore its ctx for a lease duration and OnStoppedLeading take two; a lease whose holder
// stopped renewing expires within one more; the membership count settles (an entry lasts
// RenewDeadline, Group.membershipTTL) before the shares do; a call from before the calm may hang for
// its read timeout without context deadlines. All on the slowest replica's clock.
func (d *groupDriver) quietLen() time.Duration {
	t := d.timing
	q := 3*t.lease + t.lease + 2*t.lease + t.renew + 4*t.retry
	if d.ignore {
		q += 2 * t.lease
	}
	return d.onSlowest(q)
}

// gapLen is the longest a lease may stay without a leader once the bound passed: a term that
// ends by itself (its OnStartedLeading returned or panicked) is released, and when no other
// replica is below its share, its own replica takes it again only after its OnStoppedLeading
// (up to two lease durations) and a lease duration plus jitter (group_machine.go onNotified),
// then one acquire.
func (d *groupDriver) gapLen() time.Duration {
	t := d.timing
	return d.onSlowest(3*t.lease + maxJitter + t.retry + 2*d.callTimeout())
}

// capacity is how many leases the calm's replicas lead together: each aims at ceil(K/R),
// capped by its MaxLeases (group_machine.go share).
func (d *groupDriver) capacity() int {
	k, n := len(d.names), len(d.replicas)
	share := (k + n - 1) / n
	total := 0
	for _, r := range d.replicas {
		if r.max > 0 {
			total += min(share, r.max)
		} else {
			total += share
		}
	}
	return min(k, total)
}

// calmLiveness runs the calm: after quietLen, at least capacity leases are led at every step,
// but for shortfalls shorter than gapLen; the check lasts two gaps.
func (d *groupDriver) calmLiveness() {
	start := time.Now()
	for _, r := range d.replicas {
		if r.pausedUntil.After(start) {
			start = r.pausedUntil
		}
	}
	l := &groupLiveness{from: start.Add(d.quietLen()), need: d.capacity(), gap: d.gapLen()}
	d.liveness = l
	d.loop(l.from.Add(2*l.gap), nil)
	d.checkLiveness()
	d.liveness = nil
	d.counts.add("group liveness checks")
	if !l.failed {
		d.w.Tracef("liveness: %d leases led after %v of calm, none short for more than %v (longest %v)", l.need, l.from.Sub(start), l.gap, l.worst)
	}
}

// checkLiveness applies the calm's liveness check at this step, if one is on.
func (d *groupDriver) checkLiveness() {
	l := d.liveness
	now := time.Now()
	if l == nil || now.Before(l.from) || l.failed {
		return
	}
	led := 0
	for _, rec := range d.recs {
		if rec.leading() {
			led++
		}
	}
	if led >= l.need {
		l.unledSince = time.Time{}
		return
	}
	if l.unledSince.IsZero() {
		l.unledSince = now
	}
	short := now.Sub(maxTime(l.unledSince, l.from))
	l.worst = max(l.worst, short)
	if short > l.gap {
		l.failed = true
		d.fail("liveness: %d of the %d leases its replicas can hold led for %v (more than %v), after a calm of %v", led, l.need, short, l.gap, d.quietLen())
	}
}

func (d *groupDriver) done() bool {
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

// configure draws the seed's world: timing, leases, replicas and their modes.
func (d *groupDriver) configure() {
	d.timing = simTimings[d.rng.IntN(len(simTimings))]
	d.ignore = d.rng.IntN(3) == 0
	d.lossLevel = []float64{0.01, 0.05, 0.2}[d.rng.IntN(3)]
	d.slowLevel = []float64{0.05, 0.2, 0.5}[d.rng.IntN(3)]
	k, n := 2+d.rng.IntN(3), 2+d.rng.IntN(3)
	for i := 0; i < k; i++ {
		d.names = append(d.names, fmt.Sprintf("L%d", i))
		rec := newRecorder(d.w)
		rec.margin = d.timing.lease - d.timing.renew
		d.recs = append(d.recs, rec)
	}
	d.w.Tracef("seed world: %d groups, %d leases, lease %v renew %v retry %v, context timeouts ignored %v, loss %v slow %v",
		n, k, d.timing.lease, d.timing.renew, d.timing.retry, d.ignore, d.lossLevel, d.slowLevel)
	beyond, beyondPPM := d.drawBeyond(n)
	for i := 0; i < n; i++ {
		r := &groupReplica{d: d, idx: i, work: d.rng.IntN(workModes), stop: d.drawGroupStop(), max: d.rng.IntN(3), ppm: d.drawDrift()}
		if i == beyond {
			r.ppm = beyondPPM
			for _, rec := range d.recs {
				rec.beyond[i] = true
			}
			d.counts.add("clock drift beyond the bound")
		}
		d.noteDrift(r.ppm)
		d.w.Tracef("g%d: work %s, stop %s, max leases %d, clock %+d ppm", i, workNames[r.work], stopNames[r.stop], r.max, r.ppm)
		r.newGroup()
		d.replicas = append(d.replicas, r)
	}
}

// runGroupSim runs seed for duration of simulated time (0: 40 lease durations) inside the
// synctest bubble of the caller.
func runGroupSim(seed uint64, duration time.Duration, client redis.UniversalClient, scripts sim.Scripts) simResult {
	w := sim.NewWorld(seed)
	d := &groupDriver{simBase: simBase{w: w, rng: w.Rand}, scripts: scripts, client: client, gate: &callbackGate{w: w, waiting: map[string]gateEntry{}}}
	d.dataLost = func() {
		for _, rec := range d.recs {
			rec.dataLost()
		}
	}
	d.origin = time.Now()
	d.configure()
	if duration == 0 {
		duration = 40 * d.timing.lease
	}
	start := time.Now()
	for _, r := range d.replicas {
		r.startRun()
	}
	// duration counts each calm as the four lease durations it lasted before the liveness
	// check made it longer: a seed has as much chaos as it had.
	for spent := time.Duration(0); spent < duration; {
		chaos := d.dur(3*d.timing.lease, 8*d.timing.lease)
		d.setChaos(true)
		d.after(0, "tick", d.tick)
		d.loop(time.Now().Add(chaos), nil)
		d.calm()
		d.calmLiveness()
		spent += chaos + 4*d.timing.lease
	}
	d.w.Tracef("shutdown")
	d.setChaos(true)
	d.over = true
	for _, r := range d.replicas {
		d.awake(r, func() {
			if r.running {
				r.cancel()
			}
		})
	}
	d.loop(time.Now().Add(time.Hour), d.done)
	res := simResult{exceptions: map[string]int{}, simulated: time.Since(start), violations: d.violations}
	for i, rec := range d.recs {
		rec.flush()
		for _, v := range rec.violations {
			res.violations = append(res.violations, d.names[i]+": "+v)
		}
		for k, v := range rec.exceptions {
			res.exceptions[k] += v
		}
		res.terms += len(rec.terms)
	}
	if !d.done() {
		res.violations = append(res.violations, "shutdown: a Run did not return within an hour")
		if os.Getenv("SIM_TRACE") != "" {
			fmt.Print(w.Trace())
		}
	}
	res.trace = w.Trace()
	res.counts = d.counts.snapshot()
	return res
}

// calm ends the chaos: the network heals, Redis is up, every replica runs every lease.
func (d *groupDriver) calm() {
	d.setChaos(false)
	d.w.Faults = sim.Faults{}
	d.w.Up()
	for _, r := range d.replicas {
		d.w.Heal(r.node)
		d.awake(r, func() {
			// Every lease before Run starts, never after: Run reads the Group's names on its
			// own goroutine, which may run before or after an Add of this same step (it
			// did under -race), and the first acquire batch would differ (seeds 8, 15, 30).
			r.reincarnate()
			_ = r.g.Add(d.names...)
			if !r.running {
				r.startRun()
			}
		})
	}
	d.w.Tracef("calm")
}

// awake runs fn, an action of a user or of the replica's environment, now, or when r's pause
// ends: a stopped process acts on nothing.
func (d *groupDriver) awake(r *groupReplica, fn func()) {
	if dt := time.Until(r.pausedUntil); dt > 0 && !r.crashed {
		d.after(dt, "awake", fn)
		return
	}
	fn()
}

func (d *groupDriver) restart(r *groupReplica) {
	r.reincarnate()
	if !r.running {
		r.startRun()
	}
}

// reincarnate builds the next incarnation of a crashed replica, not running yet.
func (r *groupReplica) reincarnate() {
	if r.crashed {
		r.gen++
		r.crashed = false
		r.newGroup()
	}
}

// runGroupSeed runs one seed of Groups in its own synctest bubble.
func runGroupSeed(t *testing.T, seed uint64, duration time.Duration) simResult {
	t.Helper()
	scripts, err := sim.LoadScripts()
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer func() { _ = client.Close() }()
	var res simResult
	synctest.Test(t, func(*testing.T) { res = runGroupSim(seed, duration, client, scripts) })
	return res
}

// simGroupKeptSeeds are seeds kept as regression cases (docs/MODEL.md, "Group driver"). In
// seed 392, g1's batch wins L0 at 25.027 s, its next command's reply is slow, Redis is
// restored from a snapshot at 25.085 s, g3 wins L0 at 25.608 s, and g1's term starts at
// 25.969 s beside it: the data-loss exception, which the driver used to label only after the
// recorder had failed the start (seed 37's overlap while seeds did not replay; seed 81 before
// the pause fault changed the draws).
var simGroupKeptSeeds = []uint64{392}

// TestSimGroup runs SIM_GROUP_SEEDS seeds of Groups from SIM_SEED, and the kept seeds, and
// fails with the seeds that broke an invariant; SIM_TRACE=1 prints each seed's trace.
func TestSimGroup(t *testing.T) {
	first, count := simEnv("SIM_SEED", 1), simEnv("SIM_GROUP_SEEDS", 10)
	seeds := make([]uint64, 0, count+1)
	for seed := first; seed < first+count; seed++ {
		seeds = append(seeds, seed)
	}
	if os.Getenv("SIM_SEED") == "" { // the kept seeds, unless one seed is replayed
		for _, seed := range simGroupKeptSeeds {
			if !slices.Contains(seeds, seed) {
				seeds = append(seeds, seed)
			}
		}
	}
	began := time.Now()
	var simulated time.Duration
	var failed []uint64
	terms := 0
	exceptions := map[string]int{}
	var features featureTally
	for _, seed := range seeds {
		res := runGroupSeed(t, seed, 0)
		simulated += res.simulated
		features.add(res.counts)
		terms += res.terms
		for k, v := range res.exceptions {
			exceptions[k] += v
		}
		if os.Getenv("SIM_TRACE") != "" {
			fmt.Print(res.trace)
		}
		if len(res.violations) > 0 {
			failed = append(failed, seed)
			t.Errorf("seed %d: %d violations, first: %s\nreplay: make sim GROUP_SEED=%d", seed, len(res.violations), res.violations[0], seed)
		}
	}
	wall := time.Since(began)
	t.Logf("%d group seeds in %v: %.2f seeds/s, %.1f simulated s per wall s, %d terms; documented exceptions %v; failed seeds %v",
		len(seeds), wall.Round(time.Millisecond), float64(len(seeds))/wall.Seconds(), simulated.Seconds()/wall.Seconds(), terms, exceptions, failed)
	t.Logf("features exercised (total/seeds): %v", &features)
}

// TestSimGroupReplaysIdentically runs Group seeds 1 to replaySeeds() twice and requires
// byte-identical traces, as TestSimReplaysIdentically does for the Elector.
func TestSimGroupReplaysIdentically(t *testing.T) {
	for seed := uint64(1); seed <= replaySeeds(); seed++ {
		a, b := runGroupSeed(t, seed, 0), runGroupSeed(t, seed, 0)
		if a.trace != b.trace {
			t.Errorf("seed %d: traces differ (%d and %d bytes)\n%s", seed, len(a.trace), len(b.trace), firstDiff(a.trace, b.trace))
		}
		if a.terms == 0 {
			t.Errorf("seed %d: nobody ever led", seed)
		}
	}
}

// TestRecorderTermWonBeforeDataLoss is seed 392's (and seed 37's) case for the recorder alone:
// a term whose acquire Redis executed before it lost data, started only after another
// replica's term on the new data, is the data-loss exception, not two leaders; without the
// loss between them, the same starts are a violation.
func TestRecorderTermWonBeforeDataLoss(t *testing.T) {
	for _, loss := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			rec := newRecorder(sim.NewWorld(1))
			won := time.Now().UnixMicro() // r1's acquire runs; its batch's reply comes late
			time.Sleep(10 * time.Millisecond)
			if loss {
				rec.dataLost()
			}
			time.Sleep(10 * time.Millisecond)
			rec.add(simEvent{kind: evStarted, replica: 0, token: time.Now().UnixMicro(), instance: "i0"})
			rec.flush()
			time.Sleep(10 * time.Millisecond)
			rec.add(simEvent{kind: evStarted, replica: 1, token: won, instance: "i1"})
			rec.flush()
			switch {
			case loss && (len(rec.violations) != 0 || rec.exceptions["data loss"] != 2):
				t.Errorf("after a loss: violations %q, exceptions %v; want none and 2 data loss", rec.violations, rec.exceptions)
			case !loss && len(rec.violations) != 2:
				t.Errorf("without a loss: violations %q; want two leaders and a token regression", rec.violations)
			}
		})
	}
}
