package election

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/elector/elector/internal/leasekit"
)

// Candidate is a replica in the lease's candidate registry: one that runs an Elector (or
// elector run, sidecar) for the lease, campaigning or leading. Entries are advisory: a
// replica that crashed stays listed until its entry expires, LeaseDuration after its last
// heartbeat.
type Candidate struct {
	Identity string `json:"identity"`
	// Instance is the random id of the replica's process: two entries with one identity are
	// two processes configured alike.
	Instance string `json:"instance"`
	// Version and Priority are the replica's Config.Version and Config.Priority.
	Version  string `json:"version,omitempty"`
	Priority int    `json:"priority"`
	// LastSeen is the time of its last heartbeat, by Redis's clock.
	LastSeen time.Time `json:"lastSeen"`
}

func publicCandidates(c leasekit.Candidates) []Candidate {
	out := make([]Candidate, 0, len(c.List))
	for _, x := range c.List {
		out = append(out, Candidate{Identity: x.Identity, Instance: x.Instance, Version: x.Version, Priority: int(x.Priority), LastSeen: x.LastSeen})
	}
	return out
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
	go func() {
		defer close(done)
		var t clock.Timer
		for {
			_, err := e.heartbeat(ctx, ttl, false)
			switch {
			case errors.Is(err, errNoRegistry):
				return
			case err != nil && ctx.Err() == nil:
				logger.V(2).Info("Cannot advertise this replica in the candidate registry; retrying", "err", err, "in", period)
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
// keeps what it found of the registry.
func (e *Elector) heartbeat(ctx context.Context, ttl time.Duration, leave bool) (leasekit.Candidates, error) {
	cctx, cancel := context.WithTimeout(ctx, e.callTimeout())
	defer cancel()
	c, err := e.store.advertise(cctx, ttl, int64(e.cfg.Priority), e.cfg.Version, leave)
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
// fresh (a heartbeat). When Redis cannot tell, the resignation goes ahead: the reservation's
// hold-off bounds what a wrong guess costs.
func (e *Elector) checkSuccessor(ctx context.Context, target string) error {
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
