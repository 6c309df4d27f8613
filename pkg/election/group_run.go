package election

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/redisfail"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/lease"
)

// Run campaigns until ctx is cancelled. Then it asks every term to stop, keeps renewing
// until each OnStartedLeading returned, releases the leases, waits for every
// OnStoppedLeading, leaves the membership and returns nil. A Group runs once at a time.
func (g *Group) Run(ctx context.Context) error {
	g.mu.Lock()
	if g.running {
		g.mu.Unlock()
		return fmt.Errorf("run group %q: already running", g.cfg.Group)
	}
	g.running = true
	names := make([]string, 0, len(g.names))
	for n := range g.names {
		names = append(names, n)
	}
	slices.Sort(names) // in a set order: the same Run tries them in the same order
	g.pending = nil
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running = false
		g.mu.Unlock()
	}()
	// The loop checks every lease's deadline: it must never wait for a log write.
	alog, logger := startAsyncLog(klog.FromContext(ctx).WithValues("group", g.cfg.Group, "identity", g.cfg.Identity),
		func() { g.cfg.Metrics.logDropped(g.cfg.Group) })
	defer alog.stop()
	r := &groupRun{
		g:        g,
		rd:       redisGroup{g},
		logger:   logger,
		base:     context.WithoutCancel(klog.NewContext(ctx, logger)),
		acquired: make(chan *acquireBatch, 1),
		renewed:  make(chan *renewBatch, 1),
		released: make(chan *releaseBatch, 1),
		returned: make(chan termDone, 64),
		notified: make(chan termDone, 64),
		events:   make(chan groupEvent, 4096),
	}
	if g.seam != nil {
		r.rd = g.seam
	}
	g.view.reset() // a new Run starts holding nothing
	r.m = newGroupMachine(&g.cfg, g.clock, r, g.view, logger, g.instance, g.leases)
	if g.rand != nil { // the simulator's seeded source (Elector.rand's counterpart)
		r.m.jitter = func() time.Duration { return g.rand(maxJitter) }
	}
	for _, n := range names {
		r.m.add(n)
	}
	return r.loop(ctx)
}

// groupRun is one Run: the loop goroutine that owns the machine, and the goroutines that do
// the waiting for it (batches, callbacks, the subscription). It implements groupEffects.
type groupRun struct {
	g      *Group
	m      *groupMachine
	rd     groupRedis
	logger logr.Logger
	base   context.Context // outlives Run's ctx: renewals go on while terms wind down

	// Results, one typed channel each, handled by one machine method each.
	acquired chan *acquireBatch
	renewed  chan *renewBatch
	released chan *releaseBatch
	returned chan termDone   // OnStartedLeading returned
	notified chan termDone   // OnStoppedLeading returned
	events   chan groupEvent // from the subscription goroutine

	heldMetric int // last value of the held-leases gauge
}

// maxPerRound bounds the messages the loop takes between two rounds of bookkeeping (deadline
// checks), so that a flood of events cannot postpone a deadline check by more than that.
const maxPerRound = 1024

type termDone struct {
	gl   *groupLease
	term lease.Record
}

type groupEvent struct {
	name string
	ev   leasekit.Event
}

func (r *groupRun) loop(ctx context.Context) error {
	g, m := r.g, r.m
	subCtx, stopSub := context.WithCancel(r.base)
	var subDone sync.WaitGroup
	subDone.Add(1)
	go func() {
		defer subDone.Done()
		r.listen(subCtx)
	}()
	defer func() {
		stopSub()
		subDone.Wait()
	}()

	timer := g.clock.NewTimer(time.Hour)
	defer timer.Stop()
	ctxDone := ctx.Done()
	for {
		r.applyChanges()
		// The held gauge first: tick sends the releases queued since, and a lease must not
		// count as held once its release can let another replica in (docs/DESIGN.md,
		// "Step-down order"). Again after tick, for the terms its deadlines ended.
		r.publish()
		now := g.clock.Now()
		wake := m.tick(now)
		r.publish()
		if m.finished() {
			break
		}
		timer.Reset(max(wake.Sub(now), 0))
		// Wait for one message, then take what else is ready before the next round of
		// bookkeeping: a shed or a stop returns thousands of terms at once, and each round
		// costs O(held).
		_, stop := r.handle(true, ctxDone, timer.C())
		for n := 0; n < maxPerRound && !stop; n++ {
			var ok bool
			if ok, stop = r.handle(false, ctxDone, nil); !ok {
				break
			}
		}
		if stop {
			ctxDone = nil
			m.stop()
		}
	}
	stopSub()
	subDone.Wait()
	lctx, cancel := context.WithTimeout(r.base, r.callTimeout())
	defer cancel()
	// Leave so that the others take their new shares without waiting for this membership to
	// expire. Nothing is held any more: no deadline can be missed here.
	if err := r.rd.leave(lctx); err != nil {
		r.logger.V(2).Info("Cannot leave the group membership; it expires", "err", err)
	}
	return nil
}

// applyChanges hands Add and Remove calls to the machine.
func (r *groupRun) applyChanges() {
	g := r.g
	g.mu.Lock()
	changes := g.pending
	g.pending = nil
	g.mu.Unlock()
	for _, c := range changes {
		if c.add {
			r.m.add(c.name)
		} else {
			r.m.remove(c.name)
		}
	}
}

// publish hands the loop's lag to the tests' probe and the held count to the metrics.
func (r *groupRun) publish() {
	m := r.m
	if lag := int64(m.maxLag); lag > r.g.maxLag.Load() {
		r.g.maxLag.Store(lag)
	}
	m.maxLag = 0
	if n := len(m.held); n != r.heldMetric {
		r.heldMetric = n
		r.g.cfg.Metrics.groupHeld(r.g.cfg.Group, n)
	}
}

// handle passes one message to the machine; it reports false when none was ready.
func (r *groupRun) handle(block bool, ctxDone <-chan struct{}, timer <-chan time.Time) (handled, stop bool) {
	m := r.m
	var def chan struct{}
	if !block {
		c := make(chan struct{})
		close(c)
		def = c
	}
	select {
	case <-ctxDone:
		return true, true
	case <-r.g.wake:
	case <-timer:
	case b := <-r.acquired:
		m.onAcquire(b)
	case b := <-r.renewed:
		m.onRenew(b)
	case b := <-r.released:
		m.onRelease(b)
	case d := <-r.returned:
		m.onWorkReturned(d.gl, d.term)
	case d := <-r.notified:
		m.onNotified(d.gl, d.term)
	case e := <-r.events:
		m.onEvent(e.name, e.ev)
	case <-def:
		return false, false
	}
	return true, false
}

// callTimeout bounds a release batch and the leave as Elector bounds a call: max(RetryPeriod,
// RenewDeadline/2), so that a round trip slower than RetryPeriod still succeeds. (Acquire and
// renew batches have bounds of their own: acquire, renewTimeout.)
func (r *groupRun) callTimeout() time.Duration {
	return timing.CallTimeout(r.g.cfg.RenewDeadline, r.g.cfg.RetryPeriod)
}

// inBackground runs call, bounded by timeout, on a goroutine of its own, then report.
func (r *groupRun) inBackground(timeout time.Duration, call func(ctx context.Context), report func()) {
	go func() {
		ctx, cancel := context.WithTimeout(r.base, timeout)
		call(ctx)
		cancel()
		report()
	}()
}

// acquire runs an acquire batch. Its replies are of use until send time + RenewDeadline (a
// later win is released unused), and a large batch on a loaded machine may need that long: a
// shorter timeout would turn every attempt into an error while Redis records the wins, so
// that the replica holds leases that nobody works on.
func (r *groupRun) acquire(b *acquireBatch) {
	r.inBackground(r.g.cfg.RenewDeadline, func(ctx context.Context) {
		r.rd.acquire(ctx, b)
		b.took = r.g.clock.Since(b.sent)
	}, func() { r.acquired <- b })
}

func (r *groupRun) renew(b *renewBatch) {
	r.inBackground(renewTimeout(&r.g.cfg), func(ctx context.Context) {
		r.rd.renew(ctx, b)
		b.took = r.g.clock.Since(b.sent)
	}, func() { r.renewed <- b })
}

func (r *groupRun) release(b *releaseBatch) {
	r.inBackground(r.callTimeout(), func(ctx context.Context) { r.rd.release(ctx, b) }, func() { r.released <- b })
}

// startTerm runs OnStartedLeading for the term on a goroutine of its own, which reports its
// return and ends; notifyStopped runs OnStoppedLeading on another, once the machine lets it.
// The machine calls notifyStopped only after the return was reported, and begins a later term
// of the lease only after OnStoppedLeading's return was: the callbacks of a lease never overlap
// and come in order. No goroutine waits between the two, so a callback that hands its work to
// goroutines of the user's own and returns at once costs no goroutine for its term.
func (r *groupRun) startTerm(gl *groupLease, term lease.Record) func() {
	ctx, cancel := context.WithCancel(context.WithValue(r.base, tokenKey{}, term.Token))
	go func() {
		r.call("OnStartedLeading", gl.name, term.Token, func() { r.g.cfg.Callbacks.OnStartedLeading(ctx, gl.name) })
		r.returned <- termDone{gl, term}
	}()
	return cancel
}

func (r *groupRun) notifyStopped(gl *groupLease) {
	term := r.m.termRecord(gl.token)
	go func() {
		r.call("OnStoppedLeading", gl.name, term.Token, func() { r.g.cfg.Callbacks.OnStoppedLeading(gl.name) })
		r.notified <- termDone{gl, term}
	}()
}

// call runs a user callback; a panic is logged and taken as a return.
func (r *groupRun) call(which, name string, token int64, f func()) {
	defer func() {
		if p := recover(); p != nil {
			r.logger.Error(fmt.Errorf("panic: %v", p), "User callback panicked; taken as returned", "callback", which, "lease", name, "token", token)
		}
	}()
	f()
}

// forward passes the events of sub to the loop until sub fails or ctx ends, and closes it.
// Closing the subscription is what interrupts a read in progress when Run ends.
func (r *groupRun) forward(ctx context.Context, sub groupSubscription) {
	ended := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			sub.close()
		case <-ended:
		}
	}()
	for {
		name, ev, err := sub.next(ctx)
		if err != nil {
			break
		}
		select {
		case r.events <- groupEvent{name, ev}:
		case <-ctx.Done():
		}
	}
	close(ended)
	sub.close()
}

// listen keeps a pattern subscription to the events of every lease under the prefix and
// passes them to the loop. It is best effort: without it, replicas below their share find
// released leases at their next timed attempt. A subscription refused by an ACL is
// reported once, with the permission to add.
func (r *groupRun) listen(ctx context.Context) {
	g := r.g
	refused, reported := false, false
	for ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, g.cfg.RetryPeriod)
		sub, err := r.rd.subscribe(sctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			g.cfg.Metrics.redisError(g.cfg.Group, "subscribe", err)
			wait := g.cfg.RetryPeriod
			if redisfail.Reason(err) == "noperm" {
				wait, refused = g.cfg.LeaseDuration, true
				if !reported {
					reported = true
					r.logger.Error(err, "Redis refused the pattern subscription to lease events; the Group goes on with timed attempts, so a replica below its share takes a released lease only at its next attempt. Grant it to the Redis user: ACL SETUSER <user> +psubscribe &"+g.pattern+" (see README, Redis requirements)",
						"pattern", g.pattern)
				}
			} else {
				r.logger.V(2).Info("Cannot subscribe to lease events; will retry", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-g.clock.After(wait):
			}
			continue
		}
		if refused {
			refused = false
			r.logger.Info("Subscribed to lease events", "pattern", g.pattern)
		}
		r.forward(ctx, sub)
		select {
		case <-ctx.Done():
			return
		case <-g.clock.After(resubscribeDelay):
		}
	}
}
