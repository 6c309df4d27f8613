package election

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/sim"
	"github.com/elector/elector/pkg/lease"
)

// What a replica's OnStartedLeading does with its term.
const (
	workPrompt   = iota // returns as soon as its ctx is cancelled
	workSlowStop        // winds down for a while after the cancel
	workEarly           // ends by itself (the replica keeps leading) or at the cancel
	workBlocking        // ignores its ctx for a while, then returns at the cancel
	workPanic           // panics at the cancel, or after a while during the chaos
	workModes
)

var workNames = [...]string{"prompt", "slow stop", "ends early", "blocking", "panics"}

// simReplica is one replica of the simulation: an Elector (the production code) whose store
// is a node of the world, restarted as a new incarnation (gen) after a crash.
type simReplica struct {
	d        *simDriver
	idx, gen int
	identity string
	instance string
	e        *Elector
	node     *sim.Node

	recampaign, releaseOnCancel bool
	priority                    int64 // Config.Priority (sim_prefer_test.go)
	work                        int
	stop                        int   // OnStoppedLeading's mode (stopPrompt...)
	ppm                         int64 // its clock's rate against Redis's (sim.Drift)

	cancel  context.CancelFunc
	done    chan error
	running bool
	crashed bool // this incarnation crashed; a restart makes a new one

	reasons *reasonSink   // the incarnation's Run's logger: why its last term ended
	dead    chan struct{} // closed when the incarnation crashed
	mu      sync.Mutex    // guards died
	died    string        // OnStartedLeading panicked: the process ends (the driver crashes it)
	diedGen int           // the incarnation whose callback panicked
}

// newElector builds the replica's Elector of incarnation r.gen, with every source of
// nondeterminism drawn from the driver's seed.
func (r *simReplica) newElector(client redis.UniversalClient) error {
	d := r.d
	r.instance = fmt.Sprintf("i%d-%d", r.idx, r.gen)
	r.node = d.w.NewNode(fmt.Sprintf("r%d.%d", r.idx, r.gen))
	r.node.IgnoreCtx, r.node.ReadTimeout = d.ignoreCtx, 2*d.timing.lease
	workRand := rand.New(rand.NewPCG(d.rng.Uint64(), 1))
	stopRand := rand.New(rand.NewPCG(d.rng.Uint64(), 2))
	jitterRand := rand.New(rand.NewPCG(d.rng.Uint64(), 3))
	idx, gen, instance, rec := r.idx, r.gen, r.instance, d.rec
	work, stop, lease0 := r.work, r.stop, d.timing.lease
	r.reasons, r.dead = newReasonSink(), make(chan struct{})
	dead, chaos := r.dead, d.chaotic
	cfg := Config{
		Client: client, LeaseName: simLease, Identity: r.identity,
		LeaseDuration: d.timing.lease, RenewDeadline: d.timing.renew, RetryPeriod: d.timing.retry,
		ReleaseOnCancel: r.releaseOnCancel, Recampaign: r.recampaign, ResignHoldOff: d.holdOff,
		Priority: r.priority,
		Callbacks: Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				tok := TokenFrom(ctx)
				rec.add(simEvent{kind: evStarted, replica: idx, gen: gen, token: tok, instance: instance})
				context.AfterFunc(ctx, func() { rec.add(simEvent{kind: evCancel, replica: idx, gen: gen, token: tok}) })
				defer rec.add(simEvent{kind: evReturned, replica: idx, gen: gen, token: tok})
				defer func() {
					// The Elector runs OnStartedLeading on a goroutine of its own and recovers
					// nothing: a panic there ends the process. The driver crashes this
					// incarnation at its next step; until then the callback neither returns nor
					// lets the Elector see a return.
					if p := recover(); p != nil {
						r.mu.Lock()
						r.died, r.diedGen = fmt.Sprintf("OnStartedLeading of token %d panicked: %v", tok, p), gen
						r.mu.Unlock()
						r.d.w.Poke()
						<-dead
					}
				}()
				doWork(ctx, work, workRand, lease0, chaos, nil)
			},
			OnStoppedLeading: func() {
				rec.add(simEvent{kind: evStopped, replica: idx, gen: gen})
				switch stop {
				case stopSlow:
					time.Sleep(time.Duration(stopRand.Int64N(int64(lease0 / 2))))
				case stopPanic:
					// On Run's goroutine: the release still goes out (Config.OnStoppedLeading),
					// then the panic leaves Run (startRun's recover).
					if stopRand.IntN(2) == 0 {
						time.Sleep(time.Duration(stopRand.Int64N(int64(lease0 / 2))))
					}
					panic(simPanic("OnStoppedLeading panics"))
				}
			},
		},
	}
	e, err := New(cfg)
	if err != nil {
		return err
	}
	l, err := leasekit.NewWith(client, simLease, lease.Options{Identity: r.identity}, leasekit.Ext{Instance: r.instance, AnnounceRenewals: true, ResignRequests: true})
	if err != nil {
		return err
	}
	e.lease = l
	e.store = &simStore{node: r.node, scripts: d.scripts, keys: d.keys, owner: r.instance + ":" + r.identity}
	e.clock = &simClock{node: r.node, rng: rand.New(rand.NewPCG(d.rng.Uint64(), 4)), driftClock: driftClock{sim.Drift{Origin: d.origin, PPM: r.ppm}}}
	e.rand = func(n time.Duration) time.Duration { return time.Duration(jitterRand.Int64N(int64(n))) }
	r.e = e
	d.electors = append(d.electors, e)
	return nil
}

// doWork is OnStartedLeading's body in each work mode. chaos tells whether the driver injects
// faults now (a panic after a while only then: in a calm, the liveness check wants a healthy
// leader); panicking, if set, is called before a panic.
func doWork(ctx context.Context, mode int, rng *rand.Rand, leaseDuration time.Duration, chaos func() bool, panicking func()) {
	d := time.Duration(rng.Int64N(int64(leaseDuration)))
	switch mode {
	case workPanic:
		if !chaos() { // read as the term starts: see simBase.chaotic
			d = time.Duration(1<<63 - 1)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		if panicking != nil {
			panicking()
		}
		panic(simPanic("OnStartedLeading panics"))
	case workSlowStop:
		<-ctx.Done()
		time.Sleep(d / 2)
	case workEarly:
		t := time.NewTimer(2 * d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	case workBlocking:
		time.Sleep(d)
		<-ctx.Done()
	default:
		<-ctx.Done()
	}
}

// startRun starts Run with a context whose logger keeps only why terms end (reasonSink). A
// panic that leaves Run (OnStoppedLeading's) is its outcome: the process ends (poll).
func (r *simReplica) startRun() {
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), logr.New(r.reasons)))
	done := make(chan error, 1)
	r.cancel, r.done, r.running = cancel, done, true
	e := r.e
	w := r.d.w
	go func() {
		defer w.Poke() // the driver notices the return at once, and runs the replica again
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("%w: %v", errSimPanic, p)
			}
		}()
		done <- e.Run(ctx)
	}()
	r.d.w.Tracef("r%d.%d: Run started", r.idx, r.gen)
}

// poll notices that Run returned, and reports whether the replica crashed (its Run panicked);
// the driver's goroutine only.
func (r *simReplica) poll() (crashed bool) {
	if !r.running {
		return false
	}
	select {
	case err := <-r.done:
		r.running = false
		r.d.w.Tracef("r%d.%d: Run returned: %v", r.idx, r.gen, err)
		r.node.DropTimers()
		r.checkLeftHeld()
		if errors.Is(err, errSimPanic) {
			r.checkPanicReleased()
			r.d.crashReplica(r, "its Run panicked (OnStoppedLeading): the process ends")
			return true
		}
	default:
	}
	return false
}

// dying reports why the incarnation's process ends (a panic of OnStartedLeading), "" if not.
func (r *simReplica) dying() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	why := r.died
	r.died = ""
	if r.crashed || r.diedGen != r.gen { // an earlier incarnation's: that process is gone
		return ""
	}
	return why
}

// checkPanicReleased: OnStoppedLeading panicked, and Config.OnStoppedLeading promises that "a
// panic still releases": a term that ended so as to be released (a resignation, or Run
// cancelled with ReleaseOnCancel; term.go's loop) had its release sent before the panic left
// Run. The reason comes from the "Stopped leading" log line; without it nothing is checked.
func (r *simReplica) checkPanicReleased() {
	d := r.d
	reason := r.reasons.take()
	var last *simTerm
	for _, t := range d.rec.terms {
		if t.replica == r.idx && t.gen == r.gen {
			last = t
		}
	}
	if reason == "" || last == nil {
		d.counts.add("OnStoppedLeading panic, release not checked")
		return
	}
	d.counts.add("OnStoppedLeading panic, release checked")
	if reason != reasonResigned && (reason != reasonStopped || !r.releaseOnCancel) {
		return // lost, or past its deadline: nothing to release
	}
	st := simStoreOf(r.e.store)
	st.mu.Lock()
	defer st.mu.Unlock()
	for rec := range st.released {
		if rec.Token == last.token {
			d.counts.add("OnStoppedLeading panic, released")
			return
		}
	}
	d.rec.fail("r%d.%d: OnStoppedLeading panicked after a step-down (%s) that releases, and token %d was not released", r.idx, r.gen, reason, last.token)
}

// simClock is the bubble's virtual time, with timers of the world (sim.Timer: fired by the
// driver, one per step, and handed over only to a goroutine waiting for them), each firing up
// to 10µs late (as real timers do), drawn from the seed. Without the lateness, timers that the
// Elector derives from the same instant by sums of its durations (lastOK + RetryPeriod +
// callTimeout + backoff = lastOK + RenewDeadline) would always fire in the order they were
// armed.
//
// Its Now and Since read the replica's own clock, which drifts (driftClock), and its timers
// last their durations on that clock.
type simClock struct {
	clock.RealClock
	driftClock
	node *sim.Node
	mu   sync.Mutex
	rng  *rand.Rand
}

func (c *simClock) Now() time.Time { return c.driftClock.Now() }

func (c *simClock) Since(t time.Time) time.Duration { return c.driftClock.Since(t) }

func (c *simClock) late() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return 1 + time.Duration(c.rng.Int64N(10_000))
}

func (c *simClock) NewTimer(d time.Duration) clock.Timer {
	return &simTimer{Timer: c.node.NewTimer(c.drift.Real(d) + c.late()), c: c}
}

func (c *simClock) After(d time.Duration) <-chan time.Time {
	return c.node.NewTimer(c.drift.Real(d) + c.late()).C()
}

func (c *simClock) Sleep(time.Duration) { panic("simClock: Sleep is not simulated") }

func (c *simClock) Tick(time.Duration) <-chan time.Time { panic("simClock: Tick is not simulated") }

type simTimer struct {
	*sim.Timer
	c *simClock
}

func (t *simTimer) Reset(d time.Duration) bool { return t.Timer.Reset(t.c.drift.Real(d) + t.c.late()) }

// checkLeftHeld: when Run returned, every term this incarnation won either started or was
// released (Run's doc: a term won by an acquire in flight at the cancel is released).
func (r *simReplica) checkLeftHeld() {
	st := simStoreOf(r.e.store)
	started := func(rec lease.Record) bool {
		for _, t := range r.d.rec.terms {
			if t.replica == r.idx && t.gen == r.gen && t.token == rec.Token {
				return true
			}
		}
		return false
	}
	for _, rec := range st.leftHeld(started) {
		r.d.rec.fail("r%d.%d: Run returned leaving token %d held: neither started nor released", r.idx, r.gen, rec.Token)
	}
	st.mu.Lock()
	st.won = nil
	st.mu.Unlock()
}
