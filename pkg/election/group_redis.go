package election

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/lease"
)

// groupRedis is the seam between a Group's run and Redis: the batch calls it needs. Each call
// blocks; groupRun makes them on batch goroutines, never on the loop.
type groupRedis interface {
	acquire(ctx context.Context, b *acquireBatch)
	renew(ctx context.Context, b *renewBatch)
	release(ctx context.Context, b *releaseBatch)
	// subscribe subscribes to the events of every lease under the prefix and returns once
	// Redis confirmed it.
	subscribe(ctx context.Context) (groupSubscription, error)
	// leave removes this replica from the membership.
	leave(ctx context.Context) error
}

// groupSubscription delivers the events of a pattern subscription.
type groupSubscription interface {
	// next blocks until the next event; an error ends the subscription.
	next(ctx context.Context) (name string, ev leasekit.Event, err error)
	close()
}

// redisGroup is groupRedis over a go-redis client.
type redisGroup struct {
	g *Group
}

// batchChunk is the most operations sent in one pipeline. A batch of thousands is sent as
// several pipelines, one after the other: a client's read timeout applies to a whole
// pipeline's replies, which a loaded machine (or Redis) may not deliver in time for thousands.
const batchChunk = 256

// renewManyChunk is the most leases renewed by one renew_many call. Redis runs a script
// atomically and serves no other client meanwhile: a renewal costs it about 1.3µs inside the
// script (Redis 7.0, 2-vCPU machine), the same from 64 leases a call up, so a larger chunk
// saves it nothing but holds every other client longer (256: ~0.35ms; 1,024: ~1.3ms).
const renewManyChunk = 256

// renewPipeline is the most leases renewed by one pipeline of renew_many calls: 8 full calls,
// a few milliseconds of Redis's time, within a client's read timeout on a loaded machine.
const renewPipeline = 8 * renewManyChunk

// chunked runs exec over [0, n) in chunks of size (a done ctx fails the rest at once).
func chunked(n, size int, exec func(lo, hi int)) {
	for lo := 0; lo < n; lo += size {
		exec(lo, min(lo+size, n))
	}
}

// acquire runs an acquire batch a chunk at a time: it reads the chunk's lease keys first
// (leasekit.PeekMany: GET and PTTL, no script) and sends the acquire script only for the leases
// that read found free or held by this replica (afterPeek), each with a Lease built for that
// call and dropped after it (a won term is renewed and released by its record: termOf). An
// attempt mostly finds the lease renewed by its holder, and the read costs Redis a fraction of
// a script call, and this replica no Lease.
func (r redisGroup) acquire(ctx context.Context, b *acquireBatch) {
	g := r.g
	b.replies = make([]acquireReply, len(b.items))
	chunked(len(b.items), batchChunk, func(lo, hi int) {
		keys := make([]string, hi-lo)
		for i, gl := range b.items[lo:hi] {
			keys[i] = leasewire.LeaseKey(g.cfg.KeyPrefix, gl.name)
		}
		sent := g.clock.Now()
		peeks := leasekit.PeekMany(ctx, g.cfg.Client, keys)
		batch := leasekit.NewBatch(g.cfg.Client)
		res := make([]*leasekit.AcquireResult, hi-lo)
		for i, gl := range b.items[lo:hi] {
			if reply, done := afterPeek(peeks[i], g.instance, sent); done {
				b.replies[lo+i] = reply
				continue
			}
			l, err := g.newLease(gl.name)
			if err != nil { // cannot happen: NewGroup and Add validated every part of it
				b.replies[lo+i] = acquireReply{sent: sent, err: err}
				continue
			}
			res[i] = batch.Acquire(l, g.cfg.LeaseDuration)
		}
		if batch.Len() == 0 {
			return
		}
		sent = g.clock.Now() // a term won here counts from this pipeline's send time
		_ = batch.Exec(ctx)  // errors are per operation
		for i, x := range res {
			if x != nil {
				b.replies[lo+i] = acquireReply{sent: sent, won: x.Acquired, rec: x.Status.Record, ttl: x.Status.TTL, err: x.Err}
			}
		}
	})
}

// newLease builds the Lease of one of the Group's leases, for an acquire call and the term it
// may win.
func (g *Group) newLease(name string) (*leasekit.Lease, error) {
	return leasekit.NewWith(g.cfg.Client, name, lease.Options{Prefix: g.cfg.KeyPrefix, Identity: g.cfg.Identity}, leasekit.Ext{Instance: g.instance})
}

// afterPeek is the reply of an attempt whose read (peek, at sent) already answers it, and
// done: a record of another replica, held, as the acquire script would have found it (the TTL
// read after the record is no earlier than its expiry), or the read's error. Not done when the
// acquire script must follow: the lease is free, or the record is this replica's own (the
// script resumes it, and the core judges the resume: termGuard).
func afterPeek(p leasekit.Peek, instance string, sent time.Time) (reply acquireReply, done bool) {
	switch {
	case p.Err != nil:
		return acquireReply{sent: sent, err: p.Err}, true
	case !p.Status.Held || p.Status.Record.Instance == instance:
		return acquireReply{}, false
	}
	return acquireReply{sent: sent, rec: p.Status.Record, ttl: p.Status.TTL}, true
}

// renew renews every term of b and refreshes the membership. The terms go in renew_many calls
// (leasekit.Batch.RenewMany: an owner-checked renewal of each lease, all in one atomic script
// call) of at most renewManyChunk leases, sent in pipelines of at most renewPipeline leases;
// each term's renewal counts from the send time of the pipeline that carried it, and an error
// of a call is every lease's in it. One call must touch one server: on a standalone or
// Sentinel client any leases share a call; on a Redis Cluster client only the leases of one
// hash slot (groupLease.slot) do, so the terms are sorted by slot first and a call ends where
// the slot changes. A replica that holds many leases of a Cluster shares a call among the
// several it holds per slot (1,000,000 leases over 10 replicas: about 6), rather than sending
// one call per lease (docs/PERFORMANCE.md, "Many leases: election.Group").
func (r redisGroup) renew(ctx context.Context, b *renewBatch) {
	b.replies = make([]renewReply, len(b.items))
	oneServer := leasekit.OneServer(r.g.cfg.Client)
	if !oneServer {
		slices.SortFunc(b.items, func(x, y termItem) int { return cmp.Compare(x.gl.slot, y.gl.slot) })
	}
	batch := leasekit.NewBatch(r.g.cfg.Client)
	type call struct {
		from int               // the index in b.items of its first term
		res  []leasekit.Result // filled in by Exec
	}
	var calls []call // queued in batch
	queued := 0      // leases queued in batch
	flush := func() {
		if batch.Len() == 0 {
			return
		}
		sent := r.g.clock.Now()
		_ = batch.Exec(ctx) // errors are per operation
		for _, c := range calls {
			for i, x := range c.res {
				b.replies[c.from+i] = renewReply{sent: sent, ok: x.OK, err: x.Err}
			}
		}
		calls, queued = calls[:0], 0
	}
	for lo := 0; lo < len(b.items); {
		hi := lo + 1
		for hi < len(b.items) && hi-lo < renewManyChunk && (oneServer || b.items[hi].gl.slot == b.items[lo].gl.slot) {
			hi++
		}
		terms := make([]leasewire.HeldTerm, hi-lo)
		for i, it := range b.items[lo:hi] {
			terms[i] = r.termOf(it)
		}
		calls = append(calls, call{lo, batch.RenewMany(terms, r.g.cfg.LeaseDuration)})
		if queued += hi - lo; queued >= renewPipeline || batch.Len() >= batchChunk {
			flush()
		}
		lo = hi
	}
	flush()
	b.members, b.liveErr = r.heartbeat(ctx, "stay")
}

// termOf is the term of it as its renewal and release send it: the Group's prefix, the lease's
// name and the record (the same keys and arguments as a Lease of the Group's would send).
func (r redisGroup) termOf(it termItem) leasewire.HeldTerm {
	return leasewire.HeldTerm{Prefix: r.g.cfg.KeyPrefix, Name: it.gl.name, Record: it.term.String()}
}

func (r redisGroup) release(ctx context.Context, b *releaseBatch) {
	b.errs = make([]error, len(b.items))
	chunked(len(b.items), batchChunk, func(lo, hi int) {
		batch := leasekit.NewBatch(r.g.cfg.Client)
		res := make([]*leasekit.Result, hi-lo)
		for i, it := range b.items[lo:hi] {
			res[i] = batch.Release(r.termOf(it))
		}
		_ = batch.Exec(ctx)
		for i, x := range res {
			b.errs[lo+i] = x.Err
		}
	})
}

func (r redisGroup) leave(ctx context.Context) error {
	_, err := r.heartbeat(ctx, "leave")
	return err
}

// membershipTTL is how long a heartbeat keeps a replica in the membership: RenewDeadline,
// after which a replica whose renew batches (each ends with the heartbeat) all failed trusts
// none of its terms any more. The survivors of a replica that died count it out by then, and
// try its leases (follow unparks them) before they expire, at send time + LeaseDuration.
func (g *Group) membershipTTL() time.Duration { return g.cfg.RenewDeadline }

// heartbeat runs the membership script; mode "leave" removes this replica. It returns the
// live members.
func (r redisGroup) heartbeat(ctx context.Context, mode string) ([]string, error) {
	g := r.g
	members, err := membersScript.Run(ctx, lualib.For(g.cfg.Client), g.cfg.Client, "", []any{g.members}, g.member, g.membershipTTL().Milliseconds(), mode).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("group %q membership: %w", g.cfg.Group, membersScript.Explain(err))
	}
	return members, nil
}

func (r redisGroup) subscribe(ctx context.Context) (groupSubscription, error) {
	ps := r.g.cfg.Client.PSubscribe(ctx, r.g.pattern)
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, fmt.Errorf("group %q: subscribe to lease events (PSUBSCRIBE %s): %w", r.g.cfg.Group, r.g.pattern, err)
	}
	r.checkEviction(ctx)
	return &redisGroupSub{ps: ps, prefix: r.g.cfg.KeyPrefix}, nil
}

// checkEviction reads Redis's eviction policy at each subscription (Run's first, and again
// after a reconnection: one cheap call), as Elector.checkEviction does once per Run: a warning
// and elector_redis_eviction_risk{name=group} when the lease keys may be evicted. Named ACL
// users are not checked, and a refusal or a failure is passed over quietly.
func (r redisGroup) checkEviction(ctx context.Context) {
	g := r.g
	logger := klog.FromContext(ctx).WithValues("group", g.cfg.Group)
	if aclUser(g.cfg.Client) != "" {
		return
	}
	v, err := readEviction(ctx, g.cfg.Client, g.cfg.RetryPeriod)
	if err != nil && !isRefusal(err) {
		logger.V(2).Info("Cannot read Redis's eviction policy; asked again at the next subscription", "err", err)
		return
	}
	reportEviction(logger, g.cfg.Metrics, g.cfg.Group, v, err)
}

// redisGroupSub reads its connection directly (no PubSub.Channel, which reconnects behind
// its caller's back), like leasekit.Subscription: it ends when the connection breaks or a ping
// sent after timing.HealthInterval of silence stays unanswered as long again.
type redisGroupSub struct {
	ps     *redis.PubSub
	prefix string // the Group's key prefix: events of other prefixes' channels are dropped
	pinged bool
}

func (s *redisGroupSub) next(ctx context.Context) (string, leasekit.Event, error) {
	for {
		msg, err := s.ps.ReceiveTimeout(ctx, timing.HealthInterval)
		var netErr net.Error
		var redisErr redis.Error
		switch {
		case err == nil:
			s.pinged = false
		case errors.As(err, &redisErr):
			s.pinged = false // an error reply (e.g. a refused PING): the connection works
			continue
		case !s.pinged && errors.As(err, &netErr) && netErr.Timeout() && ctx.Err() == nil:
			pctx, cancel := context.WithTimeout(ctx, timing.HealthInterval)
			err = s.ps.Ping(pctx)
			cancel()
			if err != nil {
				return "", leasekit.Event{}, fmt.Errorf("lease events: ping: %w", err)
			}
			s.pinged = true
			continue
		default:
			return "", leasekit.Event{}, fmt.Errorf("lease events: %w", err)
		}
		m, ok := msg.(*redis.Message)
		if !ok {
			continue // a pong or a subscription confirmation
		}
		ev, err := leasekit.ParseEvent(m.Payload)
		if err != nil {
			continue
		}
		if name, ok := leasewire.LeaseOfChannel(s.prefix, m.Channel); ok {
			return name, ev, nil
		}
	}
}

func (s *redisGroupSub) close() { _ = s.ps.Close() }
