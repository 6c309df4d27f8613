package systems

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// Timing is client-go's trio of durations.
type Timing struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultTiming is client-go's default (and elector's).
var DefaultTiming = Timing{timing.DefaultLeaseDuration, timing.DefaultRenewDeadline, timing.DefaultRetryPeriod}

// Scale divides every duration of t by div.
func (t Timing) Scale(div int64) Timing {
	return Timing{t.LeaseDuration / time.Duration(div), t.RenewDeadline / time.Duration(div), t.RetryPeriod / time.Duration(div)}
}

// Hooks receive what a replica does, at the moment it does it. All are optional and may be
// called from any goroutine.
type Hooks struct {
	// Started is called first thing in OnStartedLeading.
	Started func(identity string)
	// Released is called just before the release command is sent.
	Released func(at time.Time)
	// Renewed is called with the send time of every successful renewal.
	Renewed func(sent time.Time)
}

// ReplicaConfig configures one replica of an election.
type ReplicaConfig struct {
	// Client is the replica's own Redis client.
	Client *redis.Client
	// Lease names the election; Identity the replica.
	Lease, Identity string
	// Timing are the durations of the election.
	Timing Timing
	// ReleaseOnCancel releases the lease when Run's ctx is cancelled; without it a cancel
	// is a crash as Redis sees it (the lease stays until it expires).
	ReleaseOnCancel bool
	// Hooks observe the replica.
	Hooks Hooks
}

// Runner is one replica: Run campaigns, leads while it holds the lease, and returns when ctx
// is cancelled (after OnStartedLeading returned and, with ReleaseOnCancel, the release).
type Runner interface {
	Run(ctx context.Context) error
}

// Kind is one implementation of a leader election.
type Kind struct {
	// Name labels the implementation in tables and plots.
	Name string
	// New makes a replica.
	New func(cfg ReplicaConfig) (Runner, error)
}

// Kinds lists the elections compared: elector first.
func Kinds() []Kind { return []Kind{ElectorKind, PollingKind, RedislockKind} }

// ElectorKind is pkg/election, as an embedder uses it.
var ElectorKind = Kind{Name: "elector", New: newElectorReplica}

type electorReplica struct{ e *election.Elector }

func (r electorReplica) Run(ctx context.Context) error { return r.e.Run(ctx) }

func newElectorReplica(cfg ReplicaConfig) (Runner, error) {
	var e *election.Elector
	var err error
	e, err = election.New(election.Config{
		Client:          cfg.Client,
		LeaseName:       cfg.Lease,
		Identity:        cfg.Identity,
		LeaseDuration:   cfg.Timing.LeaseDuration,
		RenewDeadline:   cfg.Timing.RenewDeadline,
		RetryPeriod:     cfg.Timing.RetryPeriod,
		ReleaseOnCancel: cfg.ReleaseOnCancel,
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				if cfg.Hooks.Started != nil {
					cfg.Hooks.Started(cfg.Identity)
				}
				<-ctx.Done()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return nil, err
	}
	cfg.Client.AddHook(scriptSpy{key: leasewire.KeysFor(lease.DefaultPrefix, cfg.Lease).Lease, hooks: cfg.Hooks})
	return electorReplica{e}, nil
}

// scriptSpy tells the release and the successful renewals of an elector replica from the
// script calls on its client: the scripts' KEYS and ARGV are fixed by docs/PROTOCOL.md, so
// "EVALSHA sha N lease-key [resign-key] record channel" (two ARGV) is a release and
// "EVALSHA sha N lease-key [resign-key] record ttl channel" (three) an announced renewal.
type scriptSpy struct {
	key   string
	hooks Hooks
}

func (s scriptSpy) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s scriptSpy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (s scriptSpy) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		name := cmd.Name()
		if (name != "evalsha" && name != "eval") || len(args) < 4 || args[3] != s.key {
			return next(ctx, cmd)
		}
		nkeys, _ := args[2].(int)
		argv := len(args) - 3 - nkeys
		now := time.Now()
		// Script.Run retries an EVALSHA that got NOSCRIPT as EVAL: the EVALSHA is the release.
		if argv == 2 && name == "evalsha" && s.hooks.Released != nil {
			s.hooks.Released(now)
		}
		err := next(ctx, cmd)
		if argv == 3 && err == nil && s.hooks.Renewed != nil {
			// 2: renewed, and asked to resign (docs/PROTOCOL.md); still a renewal.
			if c, ok := cmd.(*redis.Cmd); ok && (c.Val() == int64(1) || c.Val() == int64(2)) {
				s.hooks.Renewed(now)
			}
		}
		return err
	}
}

// PollingKind is a client-go-style elector on the same lease: a follower tries to acquire
// every RetryPeriod with jitter factor 1.2 (wait.JitterUntil, sliding), a leader renews every
// RetryPeriod and steps down after RenewDeadline without success. It does not subscribe.
var PollingKind = Kind{Name: "client-go-style polling", New: newPollingReplica}

type pollingReplica struct {
	cfg ReplicaConfig
	l   *leasekit.Lease
}

func newPollingReplica(cfg ReplicaConfig) (Runner, error) {
	l, err := leasekit.New(cfg.Client, cfg.Lease, lease.Options{Identity: cfg.Identity})
	if err != nil {
		return nil, err
	}
	return &pollingReplica{cfg: cfg, l: l}, nil
}

// jitter is wait.Jitter(d, 1.2): d plus up to 1.2 d.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Float64()*timing.JitterFactor*float64(d))
}

func (p *pollingReplica) Run(ctx context.Context) error {
	t := p.cfg.Timing
	for {
		var term lease.Record
		for {
			actx, cancel := context.WithTimeout(ctx, t.RetryPeriod)
			ok, st, err := p.l.Acquire(actx, t.LeaseDuration)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if err == nil && ok {
				term = st.Record
				break
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(jitter(t.RetryPeriod)):
			}
		}
		renew := func(rctx context.Context) (bool, error) { return p.l.Renew(rctx, term, t.LeaseDuration) }
		release := func() {
			if p.cfg.Hooks.Released != nil {
				p.cfg.Hooks.Released(time.Now())
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.RetryPeriod)
			_, _ = p.l.Release(rctx, term)
			cancel()
		}
		leadAndRenew(ctx, p.cfg, renew, release)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// leadAndRenew runs OnStartedLeading and renews every RetryPeriod (client-go's renew loop)
// until ctx ends, a renew finds the lease lost, or renewals failed for RenewDeadline; it
// returns after the work returned (and, when ctx ended, the lease was released).
func leadAndRenew(ctx context.Context, cfg ReplicaConfig, renew func(context.Context) (bool, error), release func()) {
	t := cfg.Timing
	leaderCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if cfg.Hooks.Started != nil {
			cfg.Hooks.Started(cfg.Identity)
		}
		<-leaderCtx.Done()
	}()
	defer wg.Wait()
	defer cancel()
	lastOK := time.Now()
	tick := time.NewTicker(t.RetryPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			cancel()
			wg.Wait()
			if cfg.ReleaseOnCancel {
				release()
			}
			return
		case <-tick.C:
			sent := time.Now()
			rctx, rcancel := context.WithDeadline(ctx, lastOK.Add(t.RenewDeadline))
			held, err := renew(rctx)
			rcancel()
			switch {
			case err == nil && held:
				lastOK = sent
				if cfg.Hooks.Renewed != nil {
					cfg.Hooks.Renewed(sent)
				}
			case err == nil, time.Since(lastOK) > t.RenewDeadline:
				return // the lease is lost, or the renew deadline passed: step down
			}
		}
	}
}

// RedislockKind uses github.com/bsm/redislock as an elector: a follower calls Obtain with a
// linear retry every RetryPeriod, a leader calls Refresh every RetryPeriod and Release when
// it stops. It does not subscribe.
var RedislockKind = Kind{Name: "redislock, linear retry", New: newRedislockReplica}

type redislockReplica struct {
	cfg ReplicaConfig
	rl  *redislock.Client
	key string
}

func newRedislockReplica(cfg ReplicaConfig) (Runner, error) {
	if err := leasewire.ValidateName(cfg.Lease); err != nil {
		return nil, fmt.Errorf("redislock replica: lease %q %w", cfg.Lease, err)
	}
	return &redislockReplica{cfg: cfg, rl: redislock.New(cfg.Client), key: "redislock:{" + cfg.Lease + "}"}, nil
}

func (r *redislockReplica) Run(ctx context.Context) error {
	t := r.cfg.Timing
	opts := &redislock.Options{RetryStrategy: redislock.LinearBackoff(t.RetryPeriod), Metadata: r.cfg.Identity}
	for {
		// Obtain gives up after the lease time when ctx has no deadline; give it one far away
		// so that it keeps retrying linearly, as a follower should.
		octx, cancel := context.WithTimeout(ctx, time.Hour)
		lock, err := r.rl.Obtain(octx, r.key, t.LeaseDuration, opts)
		cancel()
		if ctx.Err() != nil {
			if lock != nil {
				_ = lock.Release(context.WithoutCancel(ctx))
			}
			return nil
		}
		if err != nil {
			if !errors.Is(err, redislock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
				time.Sleep(t.RetryPeriod) // Redis failed: back off
			}
			continue
		}
		renew := func(rctx context.Context) (bool, error) {
			err := lock.Refresh(rctx, t.LeaseDuration, nil)
			if errors.Is(err, redislock.ErrNotObtained) {
				return false, nil
			}
			return err == nil, err
		}
		release := func() {
			if r.cfg.Hooks.Released != nil {
				r.cfg.Hooks.Released(time.Now())
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.RetryPeriod)
			_ = lock.Release(rctx)
			cancel()
		}
		leadAndRenew(ctx, r.cfg, renew, release)
		if ctx.Err() != nil {
			return nil
		}
	}
}
