package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/bench/internal/systems"
	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// The guards of issue 27 item 4: elector's cost per acquire+release is checked as a ratio
// against a floor measured in the same run, on the same server and client, so that a change
// that multiplies it cannot land unnoticed. `make bench-quick` runs them (-run Quick).

// allocSlack is what the allocation guard allows above the raw go-redis floor. Allocations are
// deterministic (the same code path allocates the same objects); the slack covers only the odd
// allocation of a background goroutine (the client's pool) that AllocsPerRun counts.
const allocSlack = 1

// TestQuickGuardAllocs: allocations per acquire+release of pkg/lease ≤ the raw go-redis floor
// (SET NX PX, compare-and-DEL script) + allocSlack, both on one connection of one client.
func TestQuickGuardAllocs(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	per := map[string]float64{}
	for _, p := range []systems.Primitive{systems.Raw, systems.Elector} {
		op, err := p.Cycle(c, "guard-allocs-"+p.Name)
		if err != nil {
			t.Fatal(err)
		}
		for range 50 { // connection, script cache, boxed arguments
			if err := op(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var opErr error
		per[p.Name] = testing.AllocsPerRun(500, func() {
			if err := op(ctx); err != nil && opErr == nil {
				opErr = err
			}
		})
		if opErr != nil {
			t.Fatal(opErr)
		}
	}
	raw, el := per[systems.Raw.Name], per[systems.Elector.Name]
	t.Logf("allocations per acquire+release: elector %.1f, raw go-redis %.1f", el, raw)
	if el > raw+allocSlack {
		t.Errorf("elector allocates %.1f per acquire+release, above the raw go-redis floor %.1f + %d", el, raw, allocSlack)
	}
}

// maxAcquireOverSetNX bounds Redis's own time for the acquire script (INFO commandstats, usec
// per EVALSHA) as a multiple of SET NX PX's, measured interleaved on the same server. Both run
// pipelined (leasekit.Batch runs the same acquire script as Lease.Acquire), so that Redis is busy
// for both and a sub-microsecond SET is not measured on a cold, just-woken server (one round
// trip at a time, SET NX PX's figure moved from 0.5 to 1.8 µs between runs). Why the bound is
// safe: the script makes 8 calls (GET, GET, TIME, SET, SET, GET, SET, PUBLISH) plus its own
// start and reply; on Redis 7.0 on a 2-vCPU VM, loaded by other test suites or not, the median
// over the rounds measured 21–25 × SET NX PX (11–16 µs against 0.45–0.6 µs; single rounds 17–31
// ×). 40 × leaves 1.6 × the highest median seen, so a slow machine does not fail it, while a
// change that makes the script cost Redis 1.7 × more (the tripling issue 27 is about, or 24 more
// calls: about 3 µs per 8 GETs) does.
const maxAcquireOverSetNX = 40

// TestQuickGuardAcquireServerTime: the acquire script's server time ≤ maxAcquireOverSetNX ×
// SET NX PX's, by the median of guardRounds rounds, each alternating the two.
func TestQuickGuardAcquireServerTime(t *testing.T) {
	const guardRounds, blocks, perBlock = 15, 4, 100
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	leases := make([]*leasekit.Lease, perBlock)
	keys := make([]string, perBlock)
	for i := range leases {
		l, err := leasekit.New(c, fmt.Sprintf("guard-time-%d", i), lease.Options{Identity: systems.Identity})
		if err != nil {
			t.Fatal(err)
		}
		leases[i], keys[i] = l, l.Keys().Lease
	}
	acquire := func() error {
		b := leasekit.NewBatch(c)
		for _, l := range leases {
			b.Acquire(l, systems.PrimitiveTTL)
		}
		if err := b.Exec(ctx); err != nil {
			return err
		}
		return c.Del(ctx, keys...).Err() // DEL, not the release script: evalsha counts acquires only
	}
	setNX := func() error {
		p := c.Pipeline()
		for _, k := range keys {
			p.SetNX(ctx, k, "v", systems.PrimitiveTTL)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		return c.Del(ctx, keys...).Err()
	}
	var ratios, acq, set []float64
	for round := range guardRounds {
		var a, s [2]float64 // usec, calls
		for range blocks {
			if err := addStat(ctx, c, "evalsha", &a, acquire); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if err := addStat(ctx, c, "set", &s, setNX); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		acq, set = append(acq, a[0]/a[1]), append(set, s[0]/s[1])
		ratios = append(ratios, acq[round]/set[round])
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	t.Logf("Redis µs per call: acquire script %.2f, SET NX PX %.2f; ratio median %.1f × (rounds %.1f)", med(acq), med(set), med(ratios), ratios)
	if r := med(ratios); r > maxAcquireOverSetNX {
		t.Errorf("the acquire script costs Redis %.1f × SET NX PX (median of %d rounds), above %d ×", r, guardRounds, maxAcquireOverSetNX)
	}
}

// addStat runs op and adds to sum the usec and calls that INFO commandstats counted for cmd
// meanwhile.
func addStat(ctx context.Context, c *redis.Client, cmd string, sum *[2]float64, op func() error) error {
	u0, c0, err := commandStat(ctx, c, cmd)
	if err != nil {
		return err
	}
	if err := op(); err != nil {
		return err
	}
	u1, c1, err := commandStat(ctx, c, cmd)
	if err != nil {
		return err
	}
	if c1 <= c0 {
		return fmt.Errorf("commandstats counted no %s", cmd)
	}
	sum[0], sum[1] = sum[0]+u1-u0, sum[1]+c1-c0
	return nil
}

// commandStat returns the total usec and calls of one command in INFO commandstats.
func commandStat(ctx context.Context, c *redis.Client, cmd string) (usec, calls float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("INFO commandstats: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "usec":
				usec = f
			case "calls":
				calls = f
			}
		}
	}
	return usec, calls, nil
}
