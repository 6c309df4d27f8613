// Package systems adapts elector and its peers to the shapes the benchmark measures: lease
// primitives (acquire, renew, release) and whole electors (a replica that campaigns, leads
// and hands over). Every implementation talks to Redis through the go-redis client it is
// given, so that all of them run with the same client options.
package systems

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/lease"
)

// PrimitiveTTL is the lease time used by the primitive benchmarks.
const PrimitiveTTL = 10 * time.Second

// Identity is the replica name the lease records carry; raw values have the same length as
// elector's record so that no system moves fewer bytes.
const Identity = "bench-replica-0"

// rawValue has the length of an elector record ("v1:<16 digits>:<16 hex>:<identity>").
const rawValue = "v1:1764441600123456:9f86d081884c7d65:" + Identity

// Op is one operation under test: a cycle, a renew.
type Op func(ctx context.Context) error

// Primitive is one implementation of a lease primitive.
type Primitive struct {
	// Name labels the implementation in tables and benchmark names.
	Name string
	// Cycle returns an Op that acquires key and releases it again, failing if either did
	// not succeed.
	Cycle func(c redis.UniversalClient, key string) (Op, error)
	// Renew acquires key and returns an Op that renews it once.
	Renew func(ctx context.Context, c redis.UniversalClient, key string) (Op, error)
}

// The raw floor: plain go-redis, SET NX PX then a compare-and-delete script, and a
// compare-and-pexpire script for renewals. Nothing can do the same work in fewer round trips.
var (
	rawDelete = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	rawExtend = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`)
)

// errNotDone reports an acquire, renew or release that returned without doing its job.
var errNotDone = errors.New("operation did not succeed")

// Raw is the floor: what a hand-written go-redis client does in two round trips.
var Raw = Primitive{
	Name: "raw go-redis",
	Cycle: func(c redis.UniversalClient, key string) (Op, error) {
		keys := []string{key}
		return func(ctx context.Context) error {
			ok, err := c.SetNX(ctx, key, rawValue, PrimitiveTTL).Result()
			if err != nil || !ok {
				return fmt.Errorf("raw SET NX %s: %v, %w", key, ok, orNotDone(err))
			}
			n, err := rawDelete.Run(ctx, c, keys, rawValue).Int64()
			if err != nil || n != 1 {
				return fmt.Errorf("raw delete %s: %d, %w", key, n, orNotDone(err))
			}
			return nil
		}, nil
	},
	Renew: func(ctx context.Context, c redis.UniversalClient, key string) (Op, error) {
		if err := c.Set(ctx, key, rawValue, PrimitiveTTL).Err(); err != nil {
			return nil, fmt.Errorf("raw SET %s: %w", key, err)
		}
		keys := []string{key}
		ms := PrimitiveTTL.Milliseconds()
		return func(ctx context.Context) error {
			n, err := rawExtend.Run(ctx, c, keys, rawValue, ms).Int64()
			if err != nil || n != 1 {
				return fmt.Errorf("raw renew %s: %d, %w", key, n, orNotDone(err))
			}
			return nil
		}, nil
	},
}

// Elector is internal/leasekit, configured as pkg/election uses it (renewals are announced).
var Elector = Primitive{
	Name: "elector",
	Cycle: func(c redis.UniversalClient, key string) (Op, error) {
		l, err := leasekit.NewWith(c, key, lease.Options{Identity: Identity}, leasekit.Ext{AnnounceRenewals: true})
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			ok, st, err := l.Acquire(ctx, PrimitiveTTL)
			if err != nil || !ok {
				return fmt.Errorf("elector acquire %s: %v, %w", key, ok, orNotDone(err))
			}
			ok, err = l.Release(ctx, st.Record)
			if err != nil || !ok {
				return fmt.Errorf("elector release %s: %v, %w", key, ok, orNotDone(err))
			}
			return nil
		}, nil
	},
	Renew: func(ctx context.Context, c redis.UniversalClient, key string) (Op, error) {
		l, err := leasekit.NewWith(c, key, lease.Options{Identity: Identity}, leasekit.Ext{AnnounceRenewals: true})
		if err != nil {
			return nil, err
		}
		ok, st, err := l.Acquire(ctx, PrimitiveTTL)
		if err != nil || !ok {
			return nil, fmt.Errorf("elector acquire %s: %v, %w", key, ok, orNotDone(err))
		}
		return func(ctx context.Context) error {
			ok, err := l.Renew(ctx, st.Record, PrimitiveTTL)
			if err != nil || !ok {
				return fmt.Errorf("elector renew %s: %v, %w", key, ok, orNotDone(err))
			}
			return nil
		}, nil
	},
}

// ElectorBatch runs the acquire+release cycles of many leases in one goroutine through
// leasekit.Batch: one pipelined round trip acquires all of them, one releases all. It returns the
// Op and the number of cycles one call of it does.
func ElectorBatch(c redis.UniversalClient, keys []string) (Op, int, error) {
	leases := make([]*leasekit.Lease, len(keys))
	for i, k := range keys {
		l, err := leasekit.NewWith(c, k, lease.Options{Identity: Identity}, leasekit.Ext{AnnounceRenewals: true})
		if err != nil {
			return nil, 0, err
		}
		leases[i] = l
	}
	acquired := make([]*leasekit.AcquireResult, len(keys))
	return func(ctx context.Context) error {
		b := leasekit.NewBatch(c)
		for i, l := range leases {
			acquired[i] = b.Acquire(l, PrimitiveTTL)
		}
		if err := b.Exec(ctx); err != nil {
			return fmt.Errorf("elector batch acquire: %w", err)
		}
		for i, l := range leases {
			if !acquired[i].Acquired {
				return fmt.Errorf("elector batch acquire %s: %w", l.Name(), errNotDone)
			}
			b.Release(leasekit.Term(l, acquired[i].Status.Record))
		}
		if err := b.Exec(ctx); err != nil {
			return fmt.Errorf("elector batch release: %w", err)
		}
		return nil
	}, len(keys), nil
}

// Redislock is github.com/bsm/redislock: Obtain (one script), Refresh, Release.
var Redislock = Primitive{
	Name: "redislock",
	Cycle: func(c redis.UniversalClient, key string) (Op, error) {
		rl := redislock.New(c)
		return func(ctx context.Context) error {
			lock, err := rl.Obtain(ctx, key, PrimitiveTTL, nil)
			if err != nil {
				return fmt.Errorf("redislock obtain %s: %w", key, err)
			}
			if err := lock.Release(ctx); err != nil {
				return fmt.Errorf("redislock release %s: %w", key, err)
			}
			return nil
		}, nil
	},
	Renew: func(ctx context.Context, c redis.UniversalClient, key string) (Op, error) {
		lock, err := redislock.New(c).Obtain(ctx, key, PrimitiveTTL, nil)
		if err != nil {
			return nil, fmt.Errorf("redislock obtain %s: %w", key, err)
		}
		return func(ctx context.Context) error {
			if err := lock.Refresh(ctx, PrimitiveTTL, nil); err != nil {
				return fmt.Errorf("redislock refresh %s: %w", key, err)
			}
			return nil
		}, nil
	},
}

// Redsync is github.com/go-redsync/redsync/v4 with one pool (quorum 1): Lock (SET NX PX),
// Extend and Unlock (scripts). The mutex is made once and locked again and again.
var Redsync = Primitive{
	Name: "redsync",
	Cycle: func(c redis.UniversalClient, key string) (Op, error) {
		m := redsync.New(goredis.NewPool(c)).NewMutex(key, redsync.WithExpiry(PrimitiveTTL), redsync.WithTries(1))
		return func(ctx context.Context) error {
			if err := m.LockContext(ctx); err != nil {
				return fmt.Errorf("redsync lock %s: %w", key, err)
			}
			if ok, err := m.UnlockContext(ctx); err != nil || !ok {
				return fmt.Errorf("redsync unlock %s: %v, %w", key, ok, orNotDone(err))
			}
			return nil
		}, nil
	},
	Renew: func(ctx context.Context, c redis.UniversalClient, key string) (Op, error) {
		m := redsync.New(goredis.NewPool(c)).NewMutex(key, redsync.WithExpiry(PrimitiveTTL), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			return nil, fmt.Errorf("redsync lock %s: %w", key, err)
		}
		return func(ctx context.Context) error {
			if ok, err := m.ExtendContext(ctx); err != nil || !ok {
				return fmt.Errorf("redsync extend %s: %v, %w", key, ok, orNotDone(err))
			}
			return nil
		}, nil
	},
}

// Primitives lists the implementations compared, the floor first.
func Primitives() []Primitive { return []Primitive{Raw, Elector, Redislock, Redsync} }

func orNotDone(err error) error {
	if err == nil {
		return errNotDone
	}
	return err
}

// ElectorBatchRenew acquires keys and returns an Op that renews all of them in one pipelined
// round trip through leasekit.Batch, and the number of renewals one call does.
func ElectorBatchRenew(ctx context.Context, c redis.UniversalClient, keys []string) (Op, int, error) {
	leases := make([]*leasekit.Lease, len(keys))
	terms := make([]lease.Record, len(keys))
	for i, k := range keys {
		l, err := leasekit.NewWith(c, k, lease.Options{Identity: Identity}, leasekit.Ext{AnnounceRenewals: true})
		if err != nil {
			return nil, 0, err
		}
		ok, st, err := l.Acquire(ctx, PrimitiveTTL)
		if err != nil || !ok {
			return nil, 0, fmt.Errorf("elector acquire %s: %v, %w", k, ok, orNotDone(err))
		}
		leases[i], terms[i] = l, st.Record
	}
	results := make([]*leasekit.Result, len(keys))
	return func(ctx context.Context) error {
		b := leasekit.NewBatch(c)
		for i, l := range leases {
			results[i] = b.Renew(leasekit.Term(l, terms[i]), PrimitiveTTL)
		}
		if err := b.Exec(ctx); err != nil {
			return fmt.Errorf("elector batch renew: %w", err)
		}
		for i, r := range results {
			if !r.OK {
				return fmt.Errorf("elector batch renew %s: %w", leases[i].Name(), errNotDone)
			}
		}
		return nil
	}, len(keys), nil
}
