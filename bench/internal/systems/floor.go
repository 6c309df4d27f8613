package systems

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
)

// PubSubFloorKind is the least any election woken by pub/sub can do, in raw go-redis: a
// follower tries SET NX PX and, while the lease is held, reads its subscription in the same
// goroutine (no hop) until a message comes or RetryPeriod passes; the leader renews with a
// compare-and-PEXPIRE script and releases with a compare-and-DEL script that publishes. No
// fencing token, no record, no expiry tracking. It is measured in the handover only, as the
// floor that the machine's scheduling allows: its tail is the machine's, not a library's.
var PubSubFloorKind = Kind{Name: "raw pub/sub floor", New: newFloorReplica}

var rawReleasePublish = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then redis.call("del", KEYS[1]); redis.call("publish", KEYS[2], "released"); return 1 else return 0 end`)

type floorReplica struct {
	cfg          ReplicaConfig
	key, channel string
}

func newFloorReplica(cfg ReplicaConfig) (Runner, error) {
	if err := leasewire.ValidateName(cfg.Lease); err != nil {
		return nil, fmt.Errorf("floor replica: lease %q %w", cfg.Lease, err)
	}
	return &floorReplica{cfg: cfg, key: "floor:{" + cfg.Lease + "}", channel: "floor:{" + cfg.Lease + "}:events"}, nil
}

func (r *floorReplica) Run(ctx context.Context) error {
	t := r.cfg.Timing
	c := r.cfg.Client
	for {
		value := r.cfg.Identity + ":" + strconv.FormatUint(rand.Uint64(), 36)
		if err := r.follow(ctx, value); err != nil || ctx.Err() != nil {
			return err
		}
		renew := func(rctx context.Context) (bool, error) {
			n, err := rawExtend.Run(rctx, c, []string{r.key}, value, t.LeaseDuration.Milliseconds()).Int64()
			return n == 1, err
		}
		release := func() {
			if r.cfg.Hooks.Released != nil {
				r.cfg.Hooks.Released(time.Now())
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.RetryPeriod)
			_ = rawReleasePublish.Run(rctx, c, []string{r.key, r.channel}, value).Err()
			cancel()
		}
		leadAndRenew(ctx, r.cfg, renew, release)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// follow returns once the lease is taken with value, or ctx ended.
func (r *floorReplica) follow(ctx context.Context, value string) error {
	t := r.cfg.Timing
	ps := r.cfg.Client.Subscribe(ctx, r.channel)
	defer ps.Close()
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // unblocks ReceiveTimeout
	defer stop()
	if _, err := ps.Receive(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("floor replica: subscribe: %w", err)
	}
	for ctx.Err() == nil {
		ok, err := r.cfg.Client.SetNX(ctx, r.key, value, t.LeaseDuration).Result()
		if err == nil && ok {
			return nil
		}
		_, _ = ps.ReceiveTimeout(ctx, t.RetryPeriod) // a message, or RetryPeriod without one
	}
	return nil
}
