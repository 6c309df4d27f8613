package election

import (
	"container/heap"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/luaerr"
	"github.com/elector/elector/pkg/lease"
)

// Run campaigns until ctx is cancelled. Then it asks every term to stop, keeps renewing
// until each OnStartedLeading returned, releases the leases, leaves the membership and
// returns nil. A Group runs once at a time.
func (g *Group) Run(ctx context.Context) error {
	g.mu.Lock()
	if g.running {
		g.mu.Unlock()
		return fmt.Errorf("run group %q: already running", g.cfg.Group)
	}
	g.running = true
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running = false
		g.mu.Unlock()
	}()
	logger := klog.FromContext(ctx).WithValues("group", g.cfg.Group, "identity", g.cfg.Identity)
	r := &groupRun{
		g:      g,
		logger: logger,
		base:   context.WithoutCancel(klog.NewContext(ctx, logger)),
		done:   make(chan any, 3),
		retry:  backoff{min: 50 * time.Millisecond, max: g.cfg.RetryPeriod},
	}
	return r.loop(ctx)
}

// groupRun is the state of one Run; it is owned by Run's goroutine.
type groupRun struct {
	g      *Group
	logger logr.Logger
	base   context.Context // outlives Run's ctx: renewals go on while terms wind down

	queue    tryQueue  // idle leases by next attempt
	releases []relItem // terms to release, after their OnStartedLeading returned
	done     chan any  // results of the batches under way

	renewing, acquiring, releasing bool
	nextRenew                      time.Time
	retry                          backoff
	lives                          [2]int // live members seen by the last two heartbeats
	errs                           errorLog

	sub    *redis.PubSub
	events <-chan *redis.Message
}

type relItem struct {
	gl   *groupLease
	term lease.Record
}

type renewBatch struct {
	sent  time.Time
	took  time.Duration
	items []relItem
	res   []*lease.Result
	live  int
	err   error // of the heartbeat
}

type acquireBatch struct {
	sent  time.Time
	took  time.Duration
	items []*groupLease
	res   []*lease.AcquireResult
}

type releaseBatch struct {
	items []relItem
	res   []*lease.Result
}

// coalesce groups attempts due within this window into one batch.
const coalesce = 5 * time.Millisecond

func (r *groupRun) loop(ctx context.Context) error {
	g := r.g
	defer r.closeEvents()
	r.subscribe()
	// Count the members before the first attempt, so that a replica joining a running group
	// does not begin by taking more than its share.
	r.heartbeat(r.base)

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	ctxDone := ctx.Done()
	stopping := false
	for {
		r.applyChanges(stopping)
		r.collectReturned(stopping)
		now := time.Now()
		r.checkDeadlines(now)
		if stopping && r.finished() {
			r.leave()
			return nil
		}
		if !r.renewing && !now.Before(r.nextRenew) {
			r.startRenew(now)
		}
		if !stopping && !r.acquiring {
			r.startAcquire(now)
		}
		if !r.releasing && len(r.releases) > 0 {
			r.startRelease()
		}
		timer.Reset(r.nextWake(now, stopping))
		select {
		case <-ctxDone:
			ctxDone, stopping = nil, true
			g.mu.Lock()
			for gl := range g.held {
				if gl.state == stateLeading {
					r.stop(gl)
				}
			}
			g.mu.Unlock()
		case <-g.wake:
		case <-timer.C:
		case res := <-r.done:
			r.apply(res, stopping)
		case m, ok := <-r.events:
			// Handle what is already queued (a shedding replica releases many leases at
			// once) before the next round of bookkeeping.
			for n := 0; ok && m != nil && n < 10000; n++ {
				r.onEvent(m, stopping)
				select {
				case m, ok = <-r.events:
				default:
					m = nil
				}
			}
			if !ok {
				r.closeEvents()
			}
		}
	}
}

// finished reports whether a stopping Run has nothing left to wait for.
func (r *groupRun) finished() bool {
	if r.renewing || r.acquiring || r.releasing || len(r.releases) > 0 {
		return false
	}
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	return len(r.g.held) == 0 && r.g.draining == 0
}

// nextWake returns how long to sleep: until the next renewal, the next attempt or the
// earliest renew deadline.
func (r *groupRun) nextWake(now time.Time, stopping bool) time.Duration {
	next := now.Add(time.Hour)
	if !r.renewing {
		next = minTime(next, r.nextRenew)
	}
	if !stopping && !r.acquiring && len(r.queue) > 0 && !r.atCap() {
		next = minTime(next, r.queue[0].next)
	}
	r.g.mu.Lock()
	for gl := range r.g.held {
		next = minTime(next, gl.lastOK.Add(r.g.cfg.RenewDeadline))
	}
	r.g.mu.Unlock()
	return max(next.Sub(now), 0)
}

// applyChanges applies Add and Remove calls.
func (r *groupRun) applyChanges(stopping bool) {
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	changes := g.pending
	g.pending = nil
	for _, c := range changes {
		gl := g.leases[c.name]
		switch {
		case c.add && gl == nil:
			l, err := lease.New(g.cfg.Client, c.name, lease.Options{Prefix: g.cfg.KeyPrefix, Identity: g.cfg.Identity})
			if err != nil { // names were validated by Add
				r.logger.Error(err, "Cannot campaign for lease", "lease", c.name)
				continue
			}
			gl = &groupLease{name: c.name, l: l, heapIdx: -1}
			g.leases[c.name] = gl
			g.active++
			if !stopping {
				r.schedule(gl, time.Now(), false)
			}
		case c.add:
			if gl.removed {
				g.active++
			}
			gl.removed = false
			if gl.state == stateIdle && gl.heapIdx < 0 && !gl.inflight && !stopping {
				r.schedule(gl, time.Now(), false)
			}
		case gl != nil && !gl.removed:
			gl.removed = true
			g.active--
			if gl.heapIdx >= 0 {
				heap.Remove(&r.queue, gl.heapIdx)
			}
			if gl.state == stateLeading {
				r.stop(gl)
			}
			r.forget(gl)
		}
	}
	r.setHeldMetric()
}

// forget drops a removed lease that is idle and not in a batch. Called with g.mu held.
func (r *groupRun) forget(gl *groupLease) {
	if gl.removed && gl.state == stateIdle && !gl.inflight && gl.heapIdx < 0 {
		delete(r.g.leases, gl.name)
	}
}

// schedule queues an idle lease for an attempt at t.
func (r *groupRun) schedule(gl *groupLease, t time.Time, eager bool) {
	gl.next, gl.eager = t, eager
	if gl.heapIdx >= 0 {
		heap.Fix(&r.queue, gl.heapIdx)
	} else {
		heap.Push(&r.queue, gl)
	}
}

// stop asks a leading term to end gracefully: its lease is released once OnStartedLeading
// returned. Called with g.mu held.
func (r *groupRun) stop(gl *groupLease) {
	r.g.setState(gl, stateStopping)
	gl.release = true
	gl.cancel()
}

// lose ends a term at once: the lease is gone or can no longer be trusted.
func (r *groupRun) lose(gl *groupLease, reason string) {
	r.g.mu.Lock()
	r.g.setState(gl, stateDraining)
	r.g.mu.Unlock()
	gl.cancel()
	r.logger.V(2).Info("Stopped leading", "lease", gl.name, "token", gl.term.Token, "reason", reason)
	r.g.cfg.Callbacks.OnStoppedLeading(gl.name)
}

// collectReturned handles OnStartedLeading calls that returned.
func (r *groupRun) collectReturned(stopping bool) {
	g := r.g
	g.mu.Lock()
	returned := g.returned
	g.returned = nil
	var lost []*groupLease
	for _, gl := range returned {
		switch gl.state {
		case stateLeading:
			// The work ended by itself: keep the lease, as Elector does, until asked to stop.
			continue
		case stateStopping:
			// Not ours from here on: Held must not report it once a follower may take it.
			g.setState(gl, stateIdle)
			r.releases = append(r.releases, relItem{gl, gl.term})
		case stateDraining:
			g.setState(gl, stateIdle)
			lost = append(lost, gl)
		}
	}
	g.mu.Unlock()
	for _, gl := range lost {
		if !gl.removed && !stopping {
			r.schedule(gl, time.Now(), false)
		}
		g.mu.Lock()
		r.forget(gl)
		g.mu.Unlock()
	}
	if len(returned) > 0 {
		r.setHeldMetric()
	}
}

// checkDeadlines ends every term whose last successful renew is RenewDeadline old.
func (r *groupRun) checkDeadlines(now time.Time) {
	var late []*groupLease
	r.g.mu.Lock()
	for gl := range r.g.held {
		if !now.Before(gl.lastOK.Add(r.g.cfg.RenewDeadline)) {
			late = append(late, gl)
		}
	}
	r.g.mu.Unlock()
	if len(late) > 0 {
		r.logger.Info("Stopped leading leases: renew deadline exceeded", "leases", len(late))
	}
	for _, gl := range late {
		r.lose(gl, reasonDeadline)
	}
}

// atCap reports whether MaxLeases is reached.
func (r *groupRun) atCap() bool {
	if r.g.cfg.MaxLeases == 0 {
		return false
	}
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	return r.heldLocked() >= r.g.cfg.MaxLeases
}

// heldLocked counts the leases this replica holds or is stopping. Called with g.mu held.
func (r *groupRun) heldLocked() int { return len(r.g.held) }

// startRenew renews every held lease in one batch and refreshes the membership.
func (r *groupRun) startRenew(now time.Time) {
	g := r.g
	b := &renewBatch{sent: now}
	batch := lease.NewBatch(g.cfg.Client)
	g.mu.Lock()
	for gl := range g.held {
		b.items = append(b.items, relItem{gl, gl.term})
		b.res = append(b.res, batch.Renew(gl.l, gl.term, g.cfg.LeaseDuration))
	}
	g.mu.Unlock()
	r.renewing = true
	r.nextRenew = now.Add(g.cfg.RetryPeriod)
	if r.sub == nil {
		r.subscribe()
	}
	go func() {
		ctx, cancel := context.WithTimeout(r.base, g.cfg.RetryPeriod)
		defer cancel()
		_ = batch.Exec(ctx)
		b.took = time.Since(now)
		b.live, b.err = r.heartbeatCall(ctx, false)
		r.done <- b
	}()
}

// startAcquire tries, in one batch, every idle lease whose attempt is due.
func (r *groupRun) startAcquire(now time.Time) {
	g := r.g
	room := -1
	if g.cfg.MaxLeases > 0 {
		g.mu.Lock()
		room = g.cfg.MaxLeases - r.heldLocked()
		g.mu.Unlock()
	}
	b := &acquireBatch{sent: now}
	batch := lease.NewBatch(g.cfg.Client)
	for len(r.queue) > 0 && !r.queue[0].next.After(now.Add(coalesce)) && room != 0 {
		gl := heap.Pop(&r.queue).(*groupLease)
		gl.inflight = true
		b.items = append(b.items, gl)
		b.res = append(b.res, batch.Acquire(gl.l, g.cfg.LeaseDuration))
		room--
	}
	if len(b.items) == 0 {
		return
	}
	r.acquiring = true
	go func() {
		ctx, cancel := context.WithTimeout(r.base, g.cfg.RetryPeriod)
		defer cancel()
		_ = batch.Exec(ctx)
		b.took = time.Since(now)
		r.done <- b
	}()
}

// startRelease releases, in one batch, the terms whose work has returned.
func (r *groupRun) startRelease() {
	b := &releaseBatch{items: r.releases}
	r.releases = nil
	batch := lease.NewBatch(r.g.cfg.Client)
	for _, it := range b.items {
		b.res = append(b.res, batch.Release(it.gl.l, it.term))
	}
	r.releasing = true
	go func() {
		ctx, cancel := context.WithTimeout(r.base, r.g.cfg.RetryPeriod)
		defer cancel()
		_ = batch.Exec(ctx)
		r.done <- b
	}()
}

// apply handles the result of a batch.
func (r *groupRun) apply(res any, stopping bool) {
	g := r.g
	now := time.Now()
	switch b := res.(type) {
	case *renewBatch:
		r.renewing = false
		g.cfg.Metrics.groupBatch(g.cfg.Group, "renew", b.took)
		failed, lost := 0, 0
		for i, it := range b.items {
			gl, res := it.gl, b.res[i]
			if (gl.state != stateLeading && gl.state != stateStopping) || gl.term != it.term {
				continue
			}
			switch {
			case res.Err != nil:
				failed++
				r.errs.failed(r.logger, g.cfg.Metrics, g.cfg.Group, "renew", res.Err)
			case !res.OK:
				lost++
				r.lose(gl, reasonLost)
			default:
				g.mu.Lock()
				gl.lastOK = b.sent
				g.mu.Unlock()
			}
		}
		if lost > 0 {
			r.logger.Info("Stopped leading leases: lease lost", "leases", lost)
		}
		if b.err != nil {
			failed++
			r.errs.failed(r.logger, g.cfg.Metrics, g.cfg.Group, "heartbeat", b.err)
		} else {
			r.observeMembers(b.live, stopping)
		}
		if failed > 0 {
			r.nextRenew = now.Add(r.retry.next())
		} else {
			r.errs.succeeded(r.logger)
			r.retry.reset()
		}
	case *acquireBatch:
		r.acquiring = false
		g.cfg.Metrics.groupBatch(g.cfg.Group, "acquire", b.took)
		for i, gl := range b.items {
			gl.inflight = false
			res := b.res[i]
			switch {
			case res.Err != nil:
				r.errs.failed(r.logger, g.cfg.Metrics, g.cfg.Group, "acquire", res.Err)
				if !gl.removed && !stopping {
					r.schedule(gl, now.Add(g.cfg.RetryPeriod+jitter()), false)
				}
			case res.Acquired && (gl.removed || stopping):
				r.releases = append(r.releases, relItem{gl, res.Status.Record})
			case res.Acquired:
				r.begin(gl, res.Status.Record, b.sent)
			default:
				if !gl.removed && !stopping {
					wait := res.Status.TTL
					if wait == lease.NoExpiry {
						wait = g.cfg.RetryPeriod
					}
					r.schedule(gl, now.Add(wait+jitter()), false)
				}
			}
			g.mu.Lock()
			r.forget(gl)
			g.mu.Unlock()
		}
		r.setHeldMetric()
	case *releaseBatch:
		r.releasing = false
		for i, it := range b.items {
			gl := it.gl
			if err := b.res[i].Err; err != nil {
				r.logger.Error(err, "Failed to release the lease; others take over when it expires", "lease", gl.name, "token", it.term.Token)
				g.cfg.Metrics.redisError(g.cfg.Group, "release", err)
			}
			r.logger.V(2).Info("Stopped leading", "lease", gl.name, "token", it.term.Token, "reason", "released")
			g.cfg.Callbacks.OnStoppedLeading(gl.name)
			if !gl.removed && !stopping && gl.heapIdx < 0 && gl.state == stateIdle && !gl.inflight {
				// Leave it to the others for a lease duration; take it back only if nobody did.
				r.schedule(gl, now.Add(g.cfg.LeaseDuration+jitter()), false)
			}
			g.mu.Lock()
			r.forget(gl)
			g.mu.Unlock()
		}
		r.setHeldMetric()
	}
}

// begin starts a term of gl.
func (r *groupRun) begin(gl *groupLease, term lease.Record, sent time.Time) {
	g := r.g
	ctx, cancel := context.WithCancel(context.WithValue(r.base, tokenKey{}, term.Token))
	g.mu.Lock()
	gl.term, gl.lastOK, gl.cancel, gl.release = term, sent, cancel, false
	g.setState(gl, stateLeading)
	g.mu.Unlock()
	r.logger.V(2).Info("Became leader", "lease", gl.name, "token", term.Token)
	g.cfg.Metrics.groupStarted(g.cfg.Group)
	go func() {
		defer func() {
			g.mu.Lock()
			g.returned = append(g.returned, gl)
			g.mu.Unlock()
			g.poke()
		}()
		g.cfg.Callbacks.OnStartedLeading(ctx, gl.name, term.Token)
	}()
}

// observeMembers records the live member count and sheds what this replica holds beyond
// its share once the count was the same twice in a row (a replica that just died is still
// counted for a moment; shedding on that would move leases twice).
func (r *groupRun) observeMembers(live int, stopping bool) {
	g := r.g
	r.lives = [2]int{r.lives[1], live}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.live = live
	if stopping || r.lives[0] != r.lives[1] {
		return
	}
	k := g.activeLocked()
	var mine []*groupLease
	for gl := range g.held {
		if gl.state == stateLeading {
			mine = append(mine, gl)
		}
	}
	excess := len(mine) - g.share(k, live)
	if excess <= 0 {
		return
	}
	r.logger.Info("Shedding leases beyond the fair share", "held", len(mine), "members", live, "leases", k, "shed", excess)
	for _, gl := range mine[:excess] {
		r.stop(gl)
	}
	g.cfg.Metrics.groupShed(g.cfg.Group, excess)
}

// onEvent handles a message of a lease channel: a release lets a replica below its share
// try at once; an acquisition tells everyone when to try next.
func (r *groupRun) onEvent(m *redis.Message, stopping bool) {
	if stopping {
		return
	}
	ev, err := lease.ParseEvent(m.Payload)
	if err != nil {
		return
	}
	name := channelLease(m.Channel)
	g := r.g
	g.mu.Lock()
	gl := g.leases[name]
	if gl == nil || gl.removed || gl.state != stateIdle || gl.inflight || ev.Record.Instance == gl.l.Instance() {
		g.mu.Unlock()
		return
	}
	below := r.heldLocked() < g.share(g.activeLocked(), g.live)
	g.mu.Unlock()
	now := time.Now()
	switch ev.Kind {
	case lease.Released:
		if below {
			r.schedule(gl, now, true)
		}
	case lease.Acquired, lease.Renewed:
		r.schedule(gl, now.Add(ev.TTL+jitter()), false)
	}
}

// channelLease returns NAME of a channel "PREFIX:{NAME}:events".
func channelLease(channel string) string {
	i := strings.IndexByte(channel, '{')
	j := strings.LastIndex(channel, "}:events")
	if i < 0 || j <= i {
		return ""
	}
	return channel[i+1 : j]
}

// subscribe listens to the events of every lease under the prefix (best effort: without
// them, replicas below their share find released leases at their next attempt).
func (r *groupRun) subscribe() {
	ctx, cancel := context.WithTimeout(r.base, r.g.cfg.RetryPeriod)
	defer cancel()
	ps := r.g.cfg.Client.PSubscribe(ctx, r.g.pattern)
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		r.g.cfg.Metrics.redisError(r.g.cfg.Group, "subscribe", err)
		r.logger.V(2).Info("Cannot subscribe to lease events; will retry", "err", err)
		return
	}
	r.sub, r.events = ps, ps.Channel()
}

func (r *groupRun) closeEvents() {
	if r.sub != nil {
		_ = r.sub.Close()
		r.sub, r.events = nil, nil
	}
}

// heartbeat refreshes the membership synchronously and records the count.
func (r *groupRun) heartbeat(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.g.cfg.RetryPeriod)
	defer cancel()
	live, err := r.heartbeatCall(ctx, false)
	if err != nil {
		r.errs.failed(r.logger, r.g.cfg.Metrics, r.g.cfg.Group, "heartbeat", err)
		return
	}
	r.observeMembers(live, false)
}

// heartbeatCall runs the membership script; leave removes this replica.
func (r *groupRun) heartbeatCall(ctx context.Context, leave bool) (int, error) {
	mode := "stay"
	if leave {
		mode = "leave"
	}
	n, err := membersScript.Run(ctx, r.g.cfg.Client, []string{r.g.members}, r.g.member, r.g.cfg.LeaseDuration.Milliseconds(), mode).Int()
	if err != nil {
		return 0, fmt.Errorf("group %q membership: %w", r.g.cfg.Group, luaerr.Explain(membersSource, err))
	}
	return n, nil
}

// leave removes this replica from the membership, so the others take their new shares
// without waiting for it to expire.
func (r *groupRun) leave() {
	ctx, cancel := context.WithTimeout(r.base, r.g.cfg.RetryPeriod)
	defer cancel()
	if _, err := r.heartbeatCall(ctx, true); err != nil {
		r.logger.V(2).Info("Cannot leave the group membership; it expires", "err", err)
	}
}

func (r *groupRun) setHeldMetric() {
	if r.g.cfg.Metrics == nil {
		return
	}
	r.g.mu.Lock()
	n := r.heldLocked()
	r.g.mu.Unlock()
	r.g.cfg.Metrics.groupHeld(r.g.cfg.Group, n)
}

// tryQueue is a min-heap of idle leases by their next attempt.
type tryQueue []*groupLease

func (q tryQueue) Len() int           { return len(q) }
func (q tryQueue) Less(i, j int) bool { return q[i].next.Before(q[j].next) }
func (q tryQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].heapIdx, q[j].heapIdx = i, j
}
func (q *tryQueue) Push(x any) {
	gl := x.(*groupLease)
	gl.heapIdx = len(*q)
	*q = append(*q, gl)
}
func (q *tryQueue) Pop() any {
	old := *q
	gl := old[len(old)-1]
	old[len(old)-1] = nil
	gl.heapIdx = -1
	*q = old[:len(old)-1]
	return gl
}
