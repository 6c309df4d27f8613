// Package gocron runs github.com/go-co-op/gocron/v2 schedulers on several replicas with each
// job run happening on one of them, through elector's Redis leases. It offers both of
// gocron's distributed modes:
//
//   - Elector (gocron.WithDistributedElector): the replicas elect one leader with
//     package election, and only the leader's scheduler runs jobs. A crashed leader is
//     replaced when its lease expires; a leader that closes, with ReleaseOnCancel, hands
//     over in about one round trip.
//   - Locker (gocron.WithDistributedLocker or gocron.WithDistributedJobLocker): every job run
//     takes a lease named after the job (package lease) and runs only where the lease was
//     obtained, so the runs of different jobs spread over the replicas.
//
// Both hand out fencing tokens (Elector.Token, Locker.Token) for resources that must refuse a
// replica that was paused past its lease (package github.com/elector/elector/pkg/fence):
// gocron checks leadership or takes the lock only when a run starts, and does not stop a run
// that outlives it.
//
// The package has the name of the scheduler's package; import it under another name, for
// example electorgocron.
package gocron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	gocronv2 "github.com/go-co-op/gocron/v2"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/election"
)

// ErrNotLeader is wrapped by the error that Elector.IsLeader returns when this replica does not
// lead, so that gocron skips the run.
var ErrNotLeader = errors.New("not the leader")

// Elector is a gocron Elector backed by an election.Elector that campaigns in the background
// from NewElector until Close. Its methods are safe for concurrent use.
type Elector struct {
	e      *election.Elector
	lease  string // Config.LeaseName, for errors
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's result, valid once done is closed
}

var _ gocronv2.Elector = (*Elector)(nil)

// NewElector validates cfg, starts campaigning until ctx is cancelled or Close is called, and
// returns once the first acquire has told who leads — this replica or another — so that the
// first runs of the scheduler built on it (gocron.WithStartImmediately) are decided by a known
// leader instead of being skipped by every replica. It waits for that at most
// cfg.RenewDeadline (a later reply is never trusted anyway) and not past ctx: when Redis is
// unreachable or the lease is reserved after a resignation, it returns with no leader known,
// the campaign goes on in the background, and IsLeader refuses until this replica leads.
//
// cfg is that of election.New, with two differences: Recampaign is always on (a replica that
// lost its leadership campaigns again, and its scheduler resumes when it leads again), and the
// callbacks may be left nil (OnStartedLeading then waits for its ctx; OnStoppedLeading does
// nothing). Set ReleaseOnCancel so that a replica that closes hands over at once.
func NewElector(ctx context.Context, cfg election.Config) (*Elector, error) {
	cfg.Recampaign = true
	if cfg.Callbacks.OnStartedLeading == nil {
		cfg.Callbacks.OnStartedLeading = func(ctx context.Context) { <-ctx.Done() }
	}
	if cfg.Callbacks.OnStoppedLeading == nil {
		cfg.Callbacks.OnStoppedLeading = func() {}
	}
	known := make(chan struct{}) // closed at the first leader observed, this replica included
	var once sync.Once
	onNewLeader := cfg.Callbacks.OnNewLeader
	cfg.Callbacks.OnNewLeader = func(identity string) {
		once.Do(func() { close(known) })
		if onNewLeader != nil {
			onNewLeader(identity)
		}
	}
	e, err := election.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("new gocron elector: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	el := &Elector{e: e, lease: cfg.LeaseName, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(el.done)
		el.err = e.Run(ctx)
	}()
	wait := cfg.RenewDeadline
	if wait <= 0 {
		wait = timing.DefaultRenewDeadline
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-known:
	case <-el.done:
	case <-ctx.Done():
	case <-timer.C:
		klog.FromContext(ctx).Info("No leader known yet; the scheduler skips runs until this replica leads", "lease", cfg.LeaseName, "waited", wait)
	}
	return el, nil
}

// IsLeader returns nil when this replica leads, and otherwise an error wrapping ErrNotLeader
// that names the current leader: gocron then skips the run. It asks nothing of Redis and does
// not wait: NewElector returned once a leader was known, so "no leader is known" means a real
// gap (the leader released and nobody acquired yet, a reservation after a resignation, Redis
// unreachable), in which skipping is the answer; a wait here would hold gocron's run (its ctx
// lives as long as the job) and start it whenever the gap ends.
func (el *Elector) IsLeader(context.Context) error {
	st := el.e.Status() // one snapshot: the leader named is the one that made this replica follow
	if st.IsLeader {
		return nil
	}
	leader := st.Name
	if leader == "" {
		return fmt.Errorf("lease %q: %w: no leader is known", el.lease, ErrNotLeader)
	}
	return fmt.Errorf("lease %q: %w: %q leads", el.lease, ErrNotLeader, leader)
}

// Token returns the fencing token of the current term, or 0 when this replica does not lead.
func (el *Elector) Token() int64 { return el.e.Status().Token }

// Election returns the underlying elector, for its status, health check and metrics.
func (el *Elector) Election() *election.Elector { return el.e }

// Close stops campaigning and waits until the elector has stopped: with
// Config.ReleaseOnCancel, the lease is released and another replica leads at once. It returns
// the error of election.Elector.Run, if any. Calling Close again returns the same result.
func (el *Elector) Close() error {
	el.cancel()
	<-el.done
	return el.err
}
