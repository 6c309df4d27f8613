package suite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/bench/internal/redisproc"
	"github.com/elector/elector/bench/internal/stats"
	"github.com/elector/elector/bench/internal/systems"
)

// LatencyResult is the distribution of handover (or takeover) latencies of one system.
type LatencyResult struct {
	System string
	// Runs holds the trials in milliseconds, grouped in consecutive blocks of rounds.
	Runs    [][]float64
	Summary stats.Latency
	// RetryPeriod is the retry period the trials ran with.
	RetryPeriod time.Duration
}

// runsOf is the number of blocks the trials of a run are grouped in for the spread of medians.
const runsOf = 5

type event struct {
	kind string // "started", "released"
	who  int
	at   time.Time
}

// pair is a two-replica election of one kind: one leads, the other follows.
type pair struct {
	kind   systems.Kind
	timing systems.Timing
	reps   [2]*replica
	leader int
	events chan event
}

type replica struct {
	client    *redis.Client
	runner    systems.Runner
	cancel    context.CancelFunc
	done      chan error
	lastRenew atomic.Int64 // UnixNano of the send time of the last successful renewal
	renewals  atomic.Int64
}

func newPair(ctx context.Context, srv *redisproc.Server, kind systems.Kind, leaseName string, timing systems.Timing, release bool) (*pair, error) {
	p := &pair{kind: kind, timing: timing, events: make(chan event, 256)}
	for i := range p.reps {
		r := &replica{client: redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})}
		p.reps[i] = r
		runner, err := kind.New(systems.ReplicaConfig{
			Client: r.client, Lease: leaseName, Identity: fmt.Sprintf("replica-%d", i),
			Timing: timing, ReleaseOnCancel: release,
			Hooks: systems.Hooks{
				Started:  func(string) { p.events <- event{"started", i, time.Now()} },
				Released: func(at time.Time) { p.events <- event{"released", i, at} },
				Renewed: func(sent time.Time) {
					r.lastRenew.Store(sent.UnixNano())
					r.renewals.Add(1)
				},
			},
		})
		if err != nil {
			p.close()
			return nil, err
		}
		r.runner = runner
	}
	p.start(0)
	if _, err := p.wait("started", 0, 10*timing.LeaseDuration+5*time.Second); err != nil {
		p.close()
		return nil, fmt.Errorf("%s: first leader: %w", kind.Name, err)
	}
	p.start(1)
	return p, nil
}

func (p *pair) start(i int) {
	r := p.reps[i]
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- r.runner.Run(ctx) }()
}

// stop cancels replica i and waits for its Run to return.
func (p *pair) stop(i int) error {
	r := p.reps[i]
	if r.done == nil {
		return nil
	}
	r.cancel()
	select {
	case err := <-r.done:
		r.done = nil
		return err
	case <-time.After(10*p.timing.LeaseDuration + 5*time.Second):
		return fmt.Errorf("%s: replica %d did not stop", p.kind.Name, i)
	}
}

func (p *pair) close() {
	for i, r := range p.reps {
		if r != nil {
			_ = p.stop(i)
			_ = r.client.Close()
		}
	}
}

func (p *pair) drain() {
	for {
		select {
		case <-p.events:
		default:
			return
		}
	}
}

// wait returns the time of the next event of kind by replica who.
func (p *pair) wait(kind string, who int, within time.Duration) (time.Time, error) {
	timeout := time.After(within)
	for {
		select {
		case ev := <-p.events:
			if ev.kind == kind && ev.who == who {
				return ev.at, nil
			}
			if ev.kind == "started" && ev.who != who {
				return time.Time{}, fmt.Errorf("replica %d started leading, waiting for %s of replica %d", ev.who, kind, who)
			}
		case <-timeout:
			return time.Time{}, fmt.Errorf("no %s of replica %d within %v", kind, who, within)
		}
	}
}

// handover releases the lease of the leader and returns the time from the release command to
// the follower's OnStartedLeading; the old leader then campaigns again.
func (p *pair) handover() (time.Duration, error) {
	l, f := p.leader, 1-p.leader
	p.drain()
	p.reps[l].cancel()
	within := 10*p.timing.LeaseDuration + 5*time.Second
	var released, started time.Time
	for released.IsZero() || started.IsZero() {
		select {
		case ev := <-p.events:
			switch {
			case ev.kind == "released" && ev.who == l:
				released = ev.at
			case ev.kind == "started" && ev.who == f:
				started = ev.at
			}
		case <-time.After(within):
			return 0, fmt.Errorf("%s: handover from replica %d not done within %v (released %v, started %v)", p.kind.Name, l, within, !released.IsZero(), !started.IsZero())
		}
	}
	if err := p.stop(l); err != nil {
		return 0, err
	}
	p.start(l)
	p.leader = f
	return started.Sub(released), nil
}

// crash stops the leader without a release, at a random moment between two renewals, and
// returns the time from the lease's expiry (send time of its last renewal + LeaseDuration) to
// the follower's OnStartedLeading; the old leader then campaigns again.
func (p *pair) crash() (time.Duration, error) {
	l, f := p.leader, 1-p.leader
	t := p.timing
	r := p.reps[l]
	// Crash between two renewals, never with one in flight.
	n0 := r.renewals.Load()
	for deadline := time.Now().Add(3*t.RetryPeriod + time.Second); r.renewals.Load() == n0; {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s: leader %d did not renew within 3 retry periods", p.kind.Name, l)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(time.Duration((0.1 + 0.6*rand.Float64()) * float64(t.RetryPeriod)))
	p.drain()
	if err := p.stop(l); err != nil {
		return 0, err
	}
	expiry := time.Unix(0, r.lastRenew.Load()).Add(t.LeaseDuration)
	started, err := p.wait("started", f, 2*t.LeaseDuration+5*time.Second)
	if err != nil {
		return 0, fmt.Errorf("%s: takeover after a crash: %w", p.kind.Name, err)
	}
	p.start(l)
	p.leader = f
	return started.Sub(expiry), nil
}

func runHandover(ctx context.Context, cfg Config, srv *redisproc.Server, logf func(string, ...any)) ([]LatencyResult, error) {
	// The raw pub/sub floor shows what this machine allows any pub/sub design.
	kinds := append(systems.Kinds(), systems.PubSubFloorKind)
	woken := func(k systems.Kind) bool {
		return k.Name == systems.ElectorKind.Name || k.Name == systems.PubSubFloorKind.Name
	}
	pairs := make([]*pair, len(kinds))
	defer func() {
		for _, p := range pairs {
			if p != nil {
				p.close()
			}
		}
	}()
	results := make([]LatencyResult, len(kinds))
	for i, k := range kinds {
		p, err := newPair(ctx, srv, k, fmt.Sprintf("handover-%d", i), cfg.Timing, true)
		if err != nil {
			return nil, err
		}
		pairs[i] = p
		results[i] = LatencyResult{System: k.Name, Runs: make([][]float64, min(runsOf, cfg.HandoverRounds)), RetryPeriod: cfg.Timing.RetryPeriod}
	}
	rp := cfg.Timing.RetryPeriod
	time.Sleep(2 * rp)
	for round := 0; round < cfg.HandoverRounds; round++ {
		block := round * len(results[0].Runs) / cfg.HandoverRounds
		for j := range kinds {
			i := (j + round) % len(kinds)
			trials := 1
			if woken(kinds[i]) {
				trials = cfg.ElectorTrials
			}
			for range trials {
				// Let the new follower settle at a random phase: pollers poll at random times
				// relative to the release. Followers woken by an event (elector, the floor)
				// wait for it, so any phase after their first attempt is the same for them.
				settle := time.Duration((1 + 2*rand.Float64()) * float64(rp))
				if woken(kinds[i]) {
					settle = time.Duration((0.1 + 0.4*rand.Float64()) * float64(rp))
				}
				if err := sleepCtx(ctx, settle); err != nil {
					return nil, err
				}
				d, err := pairs[i].handover()
				if err != nil {
					return nil, err
				}
				results[i].Runs[block] = append(results[i].Runs[block], ms(d))
			}
		}
		if (round+1)%10 == 0 || round+1 == cfg.HandoverRounds {
			logf("  handover round %d/%d", round+1, cfg.HandoverRounds)
		}
	}
	for i := range results {
		results[i].Summary = stats.SummarizeLatency(results[i].Runs)
	}
	return results, nil
}

func runCrash(ctx context.Context, cfg Config, srv *redisproc.Server, logf func(string, ...any)) ([]LatencyResult, error) {
	kinds := systems.Kinds()
	pairs := make([]*pair, len(kinds))
	defer func() {
		for _, p := range pairs {
			if p != nil {
				p.close()
			}
		}
	}()
	results := make([]LatencyResult, len(kinds))
	for i, k := range kinds {
		p, err := newPair(ctx, srv, k, fmt.Sprintf("crash-%d", i), cfg.Timing, false)
		if err != nil {
			return nil, err
		}
		pairs[i] = p
		results[i] = LatencyResult{System: k.Name, Runs: make([][]float64, min(runsOf, cfg.CrashRounds)), RetryPeriod: cfg.Timing.RetryPeriod}
	}
	// The systems' trials run side by side, staggered so that their expiries do not coincide:
	// a trial is mostly waiting for a lease to expire.
	stagger := cfg.Timing.LeaseDuration / time.Duration(len(kinds)+1)
	for round := 0; round < cfg.CrashRounds; round++ {
		block := round * len(results[0].Runs) / cfg.CrashRounds
		var wg sync.WaitGroup
		errs := make([]error, len(kinds))
		for j := range kinds {
			i := (j + round) % len(kinds)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := sleepCtx(ctx, time.Duration(j)*stagger); err != nil {
					errs[i] = err
					return
				}
				d, err := pairs[i].crash()
				if err != nil {
					errs[i] = err
					return
				}
				results[i].Runs[block] = append(results[i].Runs[block], ms(d))
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		if (round+1)%10 == 0 || round+1 == cfg.CrashRounds {
			logf("  crash round %d/%d", round+1, cfg.CrashRounds)
		}
	}
	for i := range results {
		results[i].Summary = stats.SummarizeLatency(results[i].Runs)
	}
	return results, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
