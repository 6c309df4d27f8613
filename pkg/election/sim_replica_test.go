package election

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/elector/elector/internal/sim"
	"github.com/elector/elector/pkg/lease"
)

// What a replica's OnStartedLeading does with its term.
const (
	workPrompt   = iota // returns as soon as its ctx is cancelled
	workSlowStop        // winds down for a while after the cancel
	workEarly           // ends by itself (the replica keeps leading) or at the cancel
	workBlocking        // ignores its ctx for a while, then returns at the cancel
	workModes
)

var workNames = [...]string{"prompt", "slow stop", "ends early", "blocking"}

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
	work                        int
	slowStop                    bool

	cancel  context.CancelFunc
	done    chan error
	running bool
	crashed bool // this incarnation crashed; a restart makes a new one
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
	work, slowStop, lease0 := r.work, r.slowStop, d.timing.lease
	cfg := Config{
		Client: client, LeaseName: simLease, Identity: r.identity,
		LeaseDuration: d.timing.lease, RenewDeadline: d.timing.renew, RetryPeriod: d.timing.retry,
		ReleaseOnCancel: r.releaseOnCancel, Recampaign: r.recampaign, ResignHoldOff: d.holdOff,
		Callbacks: Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				tok := TokenFrom(ctx)
				rec.add(simEvent{kind: evStarted, replica: idx, gen: gen, token: tok, instance: instance})
				context.AfterFunc(ctx, func() { rec.add(simEvent{kind: evCancel, replica: idx, gen: gen, token: tok}) })
				defer rec.add(simEvent{kind: evReturned, replica: idx, gen: gen, token: tok})
				doWork(ctx, work, workRand, lease0)
			},
			OnStoppedLeading: func() {
				rec.add(simEvent{kind: evStopped, replica: idx, gen: gen})
				if slowStop {
					time.Sleep(time.Duration(stopRand.Int64N(int64(lease0 / 2))))
				}
			},
		},
	}
	e, err := New(cfg)
	if err != nil {
		return err
	}
	l, err := lease.New(client, simLease, lease.Options{Identity: r.identity, Instance: r.instance, AnnounceRenewals: true, ResignRequests: true})
	if err != nil {
		return err
	}
	e.lease = l
	e.store = &simStore{node: r.node, scripts: d.scripts, keys: d.keys, owner: r.instance + ":" + r.identity}
	e.clock = &simClock{node: r.node, rng: rand.New(rand.NewPCG(d.rng.Uint64(), 4))}
	e.rand = func(n time.Duration) time.Duration { return time.Duration(jitterRand.Int64N(int64(n))) }
	r.e = e
	return nil
}

// doWork is OnStartedLeading's body in each work mode.
func doWork(ctx context.Context, mode int, rng *rand.Rand, leaseDuration time.Duration) {
	d := time.Duration(rng.Int64N(int64(leaseDuration)))
	switch mode {
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

// startRun starts Run with a context whose logger discards.
func (r *simReplica) startRun() {
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), logr.Discard()))
	done := make(chan error, 1)
	r.cancel, r.done, r.running = cancel, done, true
	e := r.e
	go func() { done <- e.Run(ctx) }()
	r.d.w.Tracef("r%d.%d: Run started", r.idx, r.gen)
}

// poll notices that Run returned; the driver's goroutine only.
func (r *simReplica) poll() {
	if !r.running {
		return
	}
	select {
	case err := <-r.done:
		r.running = false
		r.d.w.Tracef("r%d.%d: Run returned: %v", r.idx, r.gen, err)
		r.node.DropTimers()
		r.checkLeftHeld()
	default:
	}
}

// simClock is the bubble's virtual time, with timers of the world (sim.Timer: fired by the
// driver, one per step, and handed over only to a goroutine waiting for them), each firing up
// to 10µs late (as real timers do), drawn from the seed. Without the lateness, timers that the
// Elector derives from the same instant by sums of its durations (lastOK + RetryPeriod +
// callTimeout + backoff = lastOK + RenewDeadline) would always fire in the order they were
// armed.
type simClock struct {
	clock.RealClock
	node *sim.Node
	mu   sync.Mutex
	rng  *rand.Rand
}

func (c *simClock) late() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return 1 + time.Duration(c.rng.Int64N(10_000))
}

func (c *simClock) NewTimer(d time.Duration) clock.Timer {
	return &simTimer{Timer: c.node.NewTimer(d + c.late()), c: c}
}

func (c *simClock) After(d time.Duration) <-chan time.Time { return c.node.NewTimer(d + c.late()).C() }

func (c *simClock) Sleep(time.Duration) { panic("simClock: Sleep is not simulated") }

func (c *simClock) Tick(time.Duration) <-chan time.Time { panic("simClock: Tick is not simulated") }

type simTimer struct {
	*sim.Timer
	c *simClock
}

func (t *simTimer) Reset(d time.Duration) bool { return t.Timer.Reset(d + t.c.late()) }

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
