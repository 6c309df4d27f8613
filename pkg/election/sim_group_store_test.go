package election

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/testing/sim"
)

// simGroupRedis is the groupRedis seam of one Group over the simulator's network: the batches
// run the project's own scripts on the simulated Redis with the keys and arguments that
// leasekit.Batch (acquire, release, renew_many) sends for a Group's leases on
// a standalone client (no resign keys, no renewal announcements), one command after the other
// on one connection (a pipeline, sent from the batch's send time).
type simGroupRedis struct {
	g       *Group
	node    *sim.Node
	scripts sim.Scripts
	names   []string // every lease name of the world: the pattern subscription's channels
	gate    *callbackGate
	pushes  int // pub/sub messages delivered to its subscriptions (the driver's goroutine)
}

// done lets a batch report to the loop once the driver says so (callbackGate): two batches
// of one Run can end at one instant (their timeouts, runtime timers of the bubble, fire
// together) and their reports would reach the loop's select in either order.
func (s *simGroupRedis) done(kind string, sent time.Time) {
	s.gate.pass(s.node, fmt.Sprintf("%s %s %d", s.node.Name(), kind, sent.UnixNano()))
}

func (s *simGroupRedis) ttl() string { return millis(s.g.cfg.LeaseDuration) }

// keysOf and owner are what the Group's leases send (they are built per attempt and dropped on
// reaching idle, so the simulator reads them from the Group, not from a groupLease).
func (s *simGroupRedis) keysOf(name string) leasewire.Keys {
	return leasewire.KeysFor(s.g.cfg.KeyPrefix, name)
}

func (s *simGroupRedis) owner() string { return s.g.instance + ":" + s.g.cfg.Identity }

func (s *simGroupRedis) acquire(ctx context.Context, b *acquireBatch) {
	b.replies = make([]acquireReply, len(b.items))
	sent := s.g.clock.Now()
	defer s.done("acquire", sent)
	for i, gl := range b.items {
		k := s.keysOf(gl.name)
		// The read before the attempt, as redisGroup.acquire's (leasekit.PeekMany): GET, then
		// PTTL, two commands that other clients' may come between.
		v, getErr := s.node.Call(ctx, "get "+gl.name, "", nil, []string{"GET", k.Lease})
		if getErr == nil && v == nil {
			getErr = redis.Nil
		}
		var ttl time.Duration
		ms, ttlErr := s.node.Call(ctx, "pttl "+gl.name, "", nil, []string{"PTTL", k.Lease})
		if n, ok := ms.(int64); ok {
			ttl = time.Duration(n)
			if n >= 0 {
				ttl *= time.Millisecond
			}
		}
		peek := leasekit.ReadPeek(k.Lease, asString(v), getErr, ttl, ttlErr)
		if reply, done := afterPeek(peek, s.g.instance, sent); done {
			b.replies[i] = reply
			continue
		}
		v, err := s.node.Call(ctx, "acquire "+gl.name, s.scripts.Acquire, []string{k.Lease, k.Token, k.Terms}, []string{s.owner(), s.ttl(), k.Events})
		b.replies[i] = parseGroupAcquire(sent, v, err)
	}
}

// sortItems puts a renew or release batch in the order of its lease names, before its
// replies are filled in: the machine fills these batches from a map (its held set) and reads
// the replies in the batch's order (drawing a jitter for some), so that in the simulator a
// seed replays only if that order is set. The order of a pipeline's commands on distinct keys
// changes nothing else.
func sortItems(items []termItem) {
	slices.SortFunc(items, func(a, b termItem) int { return strings.Compare(a.gl.name, b.gl.name) })
}

func parseGroupAcquire(sent time.Time, v any, err error) acquireReply {
	if err != nil {
		return acquireReply{sent: sent, err: fmt.Errorf("acquire: %w", err)}
	}
	reply, _ := v.([]any)
	if len(reply) != 3 {
		return acquireReply{sent: sent, err: fmt.Errorf("acquire: unexpected reply %v", v)}
	}
	rec, err := leasekit.ParseRecord(asString(reply[1]))
	if err != nil {
		return acquireReply{sent: sent, err: fmt.Errorf("acquire: %w", err)}
	}
	pttl, _ := reply[2].(int64)
	return acquireReply{sent: sent, won: reply[0] == int64(1), rec: rec, ttl: pttlOf(pttl)}
}

// renew renews as redisGroup.renew does on a standalone client: one renew_many call per chunk,
// the calls in pipelines of renewPipeline leases, every renewal counted from its pipeline's
// send time.
func (s *simGroupRedis) renew(ctx context.Context, b *renewBatch) {
	b.replies = make([]renewReply, len(b.items))
	defer s.done("renew", s.g.clock.Now())
	sortItems(b.items)
	var sent time.Time
	chunked(len(b.items), renewManyChunk, func(lo, hi int) {
		keys := make([]string, 0, hi-lo)
		args := []string{s.ttl()}
		for _, it := range b.items[lo:hi] {
			keys = append(keys, s.keysOf(it.gl.name).Lease)
			args = append(args, it.term.String())
		}
		if lo%renewPipeline == 0 {
			sent = s.g.clock.Now()
		}
		v, err := s.node.Call(ctx, fmt.Sprintf("renew_many %d", hi-lo), s.scripts.RenewMany, keys, args)
		reply, _ := v.([]any)
		if err == nil && len(reply) != hi-lo {
			err = fmt.Errorf("unexpected reply %v", v)
		}
		for i := range b.items[lo:hi] {
			r := renewReply{sent: sent, err: err}
			if err == nil {
				switch x := reply[i].(type) {
				case int64:
					r.ok = x == 1
				case sim.Error:
					r.err = x
				default:
					r.err = fmt.Errorf("unexpected reply %v", x)
				}
			}
			if r.err != nil {
				r.err = fmt.Errorf("renew: %w", r.err)
			}
			b.replies[lo+i] = r
		}
	})
	b.members, b.liveErr = s.heartbeat(ctx, "stay")
}

func (s *simGroupRedis) release(ctx context.Context, b *releaseBatch) {
	b.errs = make([]error, len(b.items))
	defer s.done("release", s.g.clock.Now())
	sortItems(b.items)
	for i, it := range b.items {
		k := s.keysOf(it.gl.name)
		if _, err := s.node.Call(ctx, "release "+it.gl.name, s.scripts.Release, []string{k.Lease}, []string{it.term.String(), k.Events}); err != nil {
			b.errs[i] = fmt.Errorf("release: %w", err)
		}
	}
}

func (s *simGroupRedis) leave(ctx context.Context) error {
	_, err := s.heartbeat(ctx, "leave")
	return err
}

func (s *simGroupRedis) heartbeat(ctx context.Context, mode string) ([]string, error) {
	v, err := s.node.Call(ctx, "members "+mode, s.scripts.Members, []string{s.g.members}, []string{s.g.member, millis(s.g.membershipTTL()), mode})
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	var members []string
	for _, m := range v.([]any) {
		members = append(members, m.(string))
	}
	return members, nil
}

// subscribe subscribes to the channel of every lease of the world (the simulated Redis has no
// PSUBSCRIBE; the Group's pattern matches exactly these channels) and returns once Redis
// confirmed them all.
func (s *simGroupRedis) subscribe(ctx context.Context) (groupSubscription, error) {
	gs := &simGroupSub{events: make(chan seqEvent, 64), seam: s}
	for _, name := range s.names {
		ch := leasewire.KeysFor(s.g.cfg.KeyPrefix, name).Events
		sub, err := s.node.Subscribe(ctx, ch, gs.deliver(name), gs.broken)
		if err != nil {
			gs.close()
			return nil, fmt.Errorf("subscribe %s: %w", ch, err)
		}
		gs.mu.Lock()
		gs.subs = append(gs.subs, sub)
		gs.mu.Unlock()
	}
	return gs, nil
}

// seqEvent is an event and its number among those its seam received.
type seqEvent struct {
	groupEvent
	seq int
}

// simGroupSub is one pattern subscription: its channels' messages, in the order delivered;
// the first broken channel ends it.
type simGroupSub struct {
	seam   *simGroupRedis
	events chan seqEvent
	mu     sync.Mutex
	subs   []*sim.Sub
	ended  bool // events is closed
}

func (s *simGroupSub) deliver(name string) func(string) {
	return func(payload string) {
		ev, err := leasekit.ParseEvent(payload)
		if err != nil {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.ended {
			return
		}
		s.seam.pushes++
		select {
		case s.events <- seqEvent{groupEvent{name, ev}, s.seam.pushes}:
		default: // a full buffer: lost, as a slow subscriber's messages are
		}
	}
}

func (s *simGroupSub) broken() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.ended = true
		close(s.events)
	}
}

func (s *simGroupSub) next(ctx context.Context) (string, leasekit.Event, error) {
	select {
	case e, ok := <-s.events:
		if !ok {
			return "", leasekit.Event{}, fmt.Errorf("lease events: subscription broken")
		}
		// One event per step: messages that waited in the buffer (while the subscription
		// was being made, or the node paused) would otherwise reach the loop in a burst,
		// taken in as many of its rounds as the goroutines' timing gives.
		s.seam.gate.pass(s.seam.node, fmt.Sprintf("%s event %09d", s.seam.node.Name(), e.seq))
		return e.name, e.ev, nil
	case <-ctx.Done():
		return "", leasekit.Event{}, ctx.Err()
	}
}

func (s *simGroupSub) close() {
	s.mu.Lock()
	subs := s.subs
	s.subs = nil
	s.mu.Unlock()
	for _, sub := range subs {
		sub.Close()
	}
	s.broken()
}
