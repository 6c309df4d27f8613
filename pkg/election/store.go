package election

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/pkg/lease"
)

// store is what an Elector needs of its lease: the seam between the election algorithm
// (campaign, lead, watch) and Redis. redisStore is the real one; tests drive the algorithm
// through a fake, with a fake clock, to replay exact interleavings (late and lost replies,
// stale events, a deadline at the exact tick).
type store interface {
	// acquire is lease.Lease.Acquire with a ReplicaAck.
	acquire(ctx context.Context, ttl time.Duration, ack lease.ReplicaAck) (bool, lease.Status, error)
	// renew is lease.Lease.Renew with a ReplicaAck.
	renew(ctx context.Context, term lease.Record, ttl time.Duration, ack lease.ReplicaAck) (bool, error)
	// release is lease.Lease.Release.
	release(ctx context.Context, term lease.Record) (bool, error)
	// subscribe is lease.Lease.Subscribe.
	subscribe(ctx context.Context) (subscription, error)
	// resign is lease.Lease.RequestResign for this replica's own term.
	resign(ctx context.Context, term lease.Record, target string, holdOff, timeout time.Duration) error
}

// subscription is what a follower uses of a *lease.Subscription.
type subscription interface {
	Events() <-chan lease.Event
	Close() error
}

// redisStore is the store of a lease in Redis.
type redisStore struct{ l *lease.Lease }

func (s redisStore) acquire(ctx context.Context, ttl time.Duration, ack lease.ReplicaAck) (bool, lease.Status, error) {
	return s.l.Acquire(ctx, ttl, ack)
}

func (s redisStore) renew(ctx context.Context, term lease.Record, ttl time.Duration, ack lease.ReplicaAck) (bool, error) {
	return s.l.Renew(ctx, term, ttl, ack)
}

func (s redisStore) release(ctx context.Context, term lease.Record) (bool, error) {
	return s.l.Release(ctx, term)
}

func (s redisStore) subscribe(ctx context.Context) (subscription, error) {
	sub, err := s.l.Subscribe(ctx)
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return sub, nil
}

// contextTimeoutOff reports whether client is a go-redis client whose socket reads ignore
// context deadlines (ContextTimeoutEnabled off, go-redis's default): a reply can then arrive
// long after the elector stopped waiting for it. The elector stays safe (a reply that comes
// at or after send time + RenewDeadline never starts a term), but calls hang for the client's
// ReadTimeout instead of the elector's bound.
func contextTimeoutOff(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client: // also redis.NewFailoverClient's
		return !c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient: // also redis.NewFailoverClusterClient's
		return !c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return !c.Options().ContextTimeoutEnabled
	}
	return false
}

// warnContextTimeout logs, once per New, that the client does not bound calls by their context.
func warnContextTimeout(cfg *Config) {
	if contextTimeoutOff(cfg.Client) {
		klog.InfoS("Warning: the Redis client has ContextTimeoutEnabled off, so a call to Redis is bounded by the client's read and write timeouts, not by the elector's deadline; set ContextTimeoutEnabled in its options",
			"lease", cfg.Name)
	}
}
