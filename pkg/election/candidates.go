package election

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/elector/elector/internal/leasekit"
)

// The candidate registry (internal/leasekit/candidates.go): while Run runs, an Elector keeps
// an entry for itself under the lease, which Status.Candidates, /leader, elector_candidates,
// `elector status` and the resign checks read. It is advisory: no trust rule reads it, and its
// heartbeat runs on a goroutine of its own, never on the campaign's or the lead loop's path.

func init() {
	leasekit.SetCandidateVersion = func(x any, version string) {
		e := x.(*Elector)
		e.mu.Lock()
		defer e.mu.Unlock()
		e.candVersion = version
	}
}

// buildVersion is the version an Elector advertises unless the command set one
// (leasekit.SetCandidateVersion): the main module's, from the build information; none for a
// development build.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "(devel)" && leasekit.ValidateVersion(bi.Main.Version) == nil {
		return bi.Main.Version
	}
	return ""
}

// startAdvertising keeps this replica in the candidate registry while Run runs: a heartbeat
// at once and every leasekit.CandidatePeriod(LeaseDuration), each keeping the entry for
// leasekit.CandidateTTL(LeaseDuration). Its own goroutine, so that a slow or failing Redis
// call never delays the campaign or the lead loop; no trust rule depends on it. The returned
// stop ends the goroutine and removes the entry (one call, bounded like the others).
func (e *Elector) startAdvertising(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	ttl, period := leasekit.CandidateTTL(e.cfg.LeaseDuration), leasekit.CandidatePeriod(e.cfg.LeaseDuration)
	logger := klog.FromContext(ctx)
	var handovers sync.WaitGroup // handovers by preference (prefer.go)
	go func() {
		defer close(done)
		defer handovers.Wait()
		var t clock.Timer
		for {
			c, err := e.heartbeat(ctx, ttl, false)
			switch {
			case errors.Is(err, errNoRegistry):
				return
			case err != nil && ctx.Err() == nil:
				logger.V(2).Info("Cannot advertise this replica in the candidate registry; retrying", "err", err, "in", period)
			case err == nil:
				e.considerPreference(ctx, c, handovers.Go)
			}
			if t == nil {
				t = e.clock.NewTimer(period)
				defer t.Stop()
			} else {
				t.Reset(period)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
		}
	}()
	return func() {
		cancel()
		<-done
		lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), e.callTimeout())
		defer lcancel()
		if _, err := e.heartbeat(lctx, ttl, true); err != nil && !errors.Is(err, errNoRegistry) {
			logger.V(2).Info("Cannot remove this replica from the candidate registry; it expires by itself", "err", err, "after", ttl)
		}
		e.mu.Lock()
		e.cands = leasekit.Candidates{}
		e.mu.Unlock()
		e.cfg.Metrics.setCandidates(e.cfg.LeaseName, 0)
	}
}

// heartbeat runs one heartbeat (or with leave the removal), bounded like every call, and
// keeps what it found of the registry. e.mu is held only to read the advertised values and to
// store the result, never across the call.
func (e *Elector) heartbeat(ctx context.Context, ttl time.Duration, leave bool) (leasekit.Candidates, error) {
	cctx, cancel := context.WithTimeout(ctx, e.callTimeout())
	defer cancel()
	e.mu.Lock()
	version, priority := e.candVersion, e.cfg.Priority
	e.mu.Unlock()
	c, err := e.store.advertise(cctx, ttl, priority, version, leave)
	if err != nil {
		return leasekit.Candidates{}, err
	}
	if !leave {
		e.mu.Lock()
		e.cands = c
		e.mu.Unlock()
		e.cfg.Metrics.setCandidates(e.cfg.LeaseName, len(c.List))
	}
	return c, nil
}

// checkSuccessor refuses a resignation nobody could follow, before anything is written: a
// target that is no live candidate, or no live candidate but this one. The registry is read
// fresh (a heartbeat, which also refreshes this replica's entry). When Redis cannot tell, or
// ctx carries leasekit.WithForce, the resignation goes ahead: the reservation's hold-off bounds
// what a wrong guess costs.
func (e *Elector) checkSuccessor(ctx context.Context, target string) error {
	if leasekit.Forced(ctx) {
		return nil
	}
	c, err := e.heartbeat(ctx, leasekit.CandidateTTL(e.cfg.LeaseDuration), false)
	if err != nil {
		return nil
	}
	return leasekit.CheckSuccessor(c, e.cfg.Identity, target)
}

func (s redisStore) advertise(ctx context.Context, ttl time.Duration, priority int64, version string, leave bool) (leasekit.Candidates, error) {
	return s.l.Advertise(ctx, ttl, priority, version, leave)
}

// errNoRegistry is the error of a store without a candidate registry (the fakes of the seam
// tests): the Elector does not advertise.
var errNoRegistry = errors.New("no candidate registry")
