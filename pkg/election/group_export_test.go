package election

import (
	"maps"
	"slices"
	"time"

	"github.com/elector/elector/internal/leasekit"
)

// ConfigOf returns e's configuration with its defaults filled in.
func ConfigOf(e *Elector) Config { return e.cfg }

// LeaseOf returns the lease e campaigns for.
func LeaseOf(e *Elector) *leasekit.Lease { return e.lease }

// Subscriptions returns how many subscriptions to the lease's events Redis confirmed to e.
func Subscriptions(e *Elector) int64 { return e.subscriptions.Load() }

// GroupMaxLag returns the latest g's loop woke up after the time it had planned (a deadline,
// a renewal, an attempt) since the last ResetGroupMaxLag: what a blocked loop would show.
func GroupMaxLag(g *Group) time.Duration { return time.Duration(g.maxLag.Load()) }

// ResetGroupMaxLag starts a new measurement of GroupMaxLag.
func ResetGroupMaxLag(g *Group) { g.maxLag.Store(0) }

// GroupNames returns the leases g campaigns for, sorted.
func GroupNames(g *Group) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.names))
}

// RenewManyChunk is the most leases a Group renews in one renew_many call.
const RenewManyChunk = renewManyChunk
