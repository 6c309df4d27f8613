package leasekit

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/rediserr"
	"github.com/elector/elector/pkg/lease"
)

// Listed is a lease found by List.
type Listed struct {
	// Name is the lease name.
	Name string
	// Status is its holder and remaining time, as Get reports it.
	Status lease.Status
}

// List returns every lease held under prefix (DefaultPrefix when empty), sorted by name. It
// finds the lease keys with SCAN — on every master of a Cluster — and reads them in one
// pipeline per node; the listing is not a snapshot of one instant. Values that are not
// records of this protocol are skipped.
func List(ctx context.Context, client redis.UniversalClient, prefix string) ([]Listed, error) {
	if prefix == "" {
		prefix = lease.DefaultPrefix
	}
	if err := leasewire.ValidateName(prefix); err != nil {
		return nil, fmt.Errorf("list leases: key prefix %q %w", prefix, err)
	}
	pattern := leasewire.LeaseKeyPattern(prefix)
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			keys = append(keys, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		return nil, fmt.Errorf("list leases under %q: unsupported client type %T", prefix, client)
	}
	if err != nil {
		return nil, fmt.Errorf("list leases under %q: scan: %w", prefix, err)
	}

	pipe := client.Pipeline()
	gets := make([]*redis.StringCmd, len(keys))
	pttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		gets[i], pttls[i] = pipe.Get(ctx, k), pipe.PTTL(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !rediserr.IsNil(err) {
		return nil, fmt.Errorf("list leases under %q: read: %w", prefix, err)
	}
	out := make([]Listed, 0, len(keys))
	for i, k := range keys {
		rec, err := seam.ParseRecord(gets[i].Val())
		if gets[i].Err() != nil || err != nil {
			continue // expired since the scan, or not ours
		}
		out = append(out, Listed{Name: leasewire.NameOfLeaseKey(prefix, k), Status: lease.Status{Held: true, Record: rec, TTL: seam.DurationTTL(pttls[i].Val())}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
