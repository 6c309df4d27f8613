package election

import (
	"context"
	"fmt"
	"iter"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/redisfail"
	"github.com/elector/elector/pkg/lease"
)

// Change is one change of a lease's holder, as Elector.Observe reports it.
type Change struct {
	// Kind is what changed: "held" or "free" (the first Change only: the lease when the
	// observation began), "acquired", "renewed", "released" or "expired" (the term ended
	// without a release that was heard: it ran out, as after a crash, or a newer term was
	// found before its end was).
	Kind string
	// Record is the term the change is about (its holder, instance and token): the new term
	// for held, acquired and renewed, the term that ended for released and expired, zero for
	// free.
	Record lease.Record
	// TTL is the term's remaining lease time for held, acquired and renewed (lease.NoExpiry
	// when the key has no expiry), 0 for the others.
	TTL time.Duration
	// Cause says how the change was learnt: "event" (announced on the lease's channel),
	// "read" (found by a read of the lease), "resigned" (a release that followed a resign
	// request for the term), "timeout" (an expired term whose key a read found gone) or
	// "replaced" (an expired term that a newer one replaced).
	Cause string
}

// Observe reports the changes of the lease's holder, in the spirit of etcd's
// Election.Observe: first the lease as read ("held" or "free"), then one Change per change as
// it happens. It needs no Run: an Elector made only to observe (a status watch, a tool) may
// use it, and so may a running one.
//
// Every change that is announced is reported from the lease's channel; what is never announced
// is found by reading the lease. A term that ends without a release is reported "expired"
// before its successor's "acquired": the lease is read at the expiry of the term last seen at
// the latest. Events published while the subscription was down are lost, so after every
// resubscription the lease is read; a failed read or subscription is retried with a backoff up
// to RetryPeriod rather than taken for news. Each call is bounded as the Elector's own are.
//
// An error ends the sequence: from the first subscription or read, or one that retrying cannot
// help (those that make Run give up, ErrGaveUp; an unknown Sentinel master; a closed client). When ctx ends, the sequence
// ends without an error.
func (e *Elector) Observe(ctx context.Context) iter.Seq2[Change, error] {
	return func(yield func(Change, error) bool) {
		o := &observer{
			name: e.cfg.LeaseName, st: redisStore{e.lease}, clk: e.clock,
			retry: backoff{min: observeRetryMin, max: max(e.cfg.RetryPeriod, observeRetryMin)},
			call:  e.callTimeout(), fatal: e.fatal,
		}
		o.run(ctx, yield)
	}
}

// observeStore is what an observer needs of the lease: reads and its events.
type observeStore interface {
	get(ctx context.Context) (lease.Status, error)
	subscribe(ctx context.Context) (subscription, error)
}

func (s redisStore) get(ctx context.Context) (lease.Status, error) { return s.l.Get(ctx) }

// observeRetryMin is the first pause between failed attempts of an observer; it doubles up to
// RetryPeriod.
const observeRetryMin = 50 * time.Millisecond

// observer follows one lease for Observe.
type observer struct {
	name   string
	st     observeStore
	clk    clock.Clock
	retry  backoff
	call   time.Duration    // bound of one call
	fatal  func(error) bool // errors that retrying cannot cure (Elector.fatal)
	sub    subscription
	expiry clock.Timer  // the read at the expiry of the term last seen
	last   lease.Record // the term last reported, when held
	held   bool         // whether the lease was held at the last report
	resign int64        // the token of the last term asked to resign
}

// run reports the changes until ctx ends, yield returns false or an error ends it.
func (o *observer) run(ctx context.Context, yield func(Change, error) bool) {
	o.expiry = o.clk.NewTimer(time.Hour)
	o.expiry.Stop()
	defer o.close()
	if err := o.subscribe(ctx); err != nil {
		yieldErr(ctx, yield, err)
		return
	}
	st, err := o.get(ctx) // after subscribing: no change between is missed
	if err != nil {
		yieldErr(ctx, yield, err)
		return
	}
	first := Change{Kind: "free", Cause: "read"}
	if st.Held {
		first = Change{Kind: "held", Record: st.Record, TTL: st.TTL, Cause: "read"}
	}
	o.remember(first)
	if !yield(first, nil) {
		return
	}
	for {
		changes, err := o.next(ctx)
		if err != nil {
			yieldErr(ctx, yield, err)
			return
		}
		for _, c := range changes {
			if !yield(c, nil) {
				return
			}
		}
	}
}

// yieldErr reports err unless ctx ended (the sequence then ends without one).
func yieldErr(ctx context.Context, yield func(Change, error) bool, err error) {
	if ctx.Err() == nil {
		yield(Change{}, err)
	}
}

// close ends the subscription and the timer.
func (o *observer) close() {
	o.expiry.Stop()
	if o.sub != nil {
		_ = o.sub.Close()
	}
}

// next waits for the next event, or for the expiry of the term last seen, and returns the
// changes it tells (often none). A subscription whose connection failed is renewed, then the
// lease read: events published meanwhile are lost.
func (o *observer) next(ctx context.Context) ([]Change, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case ev, open := <-o.sub.Events():
		if open {
			return o.onEvent(ev), nil
		}
		_ = o.sub.Close()
		o.sub = nil
		if err := o.again(ctx, "subscribe", o.subscribe); err != nil {
			return nil, err
		}
	case <-o.expiry.C():
	}
	var st lease.Status
	if err := o.again(ctx, "read", func(ctx context.Context) (err error) {
		st, err = o.get(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	return o.onRead(st), nil
}

// subscribe subscribes to the lease's events, within one call's bound.
func (o *observer) subscribe(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, o.call)
	defer cancel()
	sub, err := o.st.subscribe(cctx)
	if err != nil {
		return fmt.Errorf("observe lease %q: %w", o.name, err)
	}
	o.sub = sub
	return nil
}

// get reads the lease, within one call's bound.
func (o *observer) get(ctx context.Context) (lease.Status, error) {
	cctx, cancel := context.WithTimeout(ctx, o.call)
	defer cancel()
	st, err := o.st.get(cctx)
	if err != nil {
		return lease.Status{}, fmt.Errorf("observe lease %q: read: %w", o.name, err)
	}
	return st, nil
}

// again calls attempt until it succeeds, pausing after each failure with the backoff. It gives
// up when ctx ends (ctx.Err()) or when retrying cannot help (attempt's error).
func (o *observer) again(ctx context.Context, op string, attempt func(context.Context) error) error {
	defer o.retry.reset()
	for {
		err := attempt(ctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		if r := redisfail.Reason(err); o.fatal(err) || r == "unknown_master" || r == "closed" { // retrying cannot help
			return err
		}
		pause := o.retry.next()
		klog.FromContext(ctx).Info("Cannot follow the lease; retrying", "lease", o.name, "op", op, "in", pause, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-o.clk.After(pause):
		}
	}
}

// onEvent returns the changes an event tells: a renewal or a request changes no holder.
func (o *observer) onEvent(ev leasekit.Event) []Change {
	switch ev.Kind {
	case leasekit.Acquired:
		return o.found(ev.Record, ev.TTL, "event")
	case leasekit.Renewed:
		if !o.held || !sameTerm(ev.Record, o.last) {
			return o.found(ev.Record, ev.TTL, "event") // its acquire was not heard
		}
		o.arm(ev.TTL)
		return []Change{{Kind: "renewed", Record: ev.Record, TTL: ev.TTL, Cause: "event"}}
	case leasekit.Released:
		if !o.held || ev.Record.Token < o.last.Token {
			return nil // nothing held, or the release of an older term already accounted for
		}
		cause := "event"
		if ev.Record.Token == o.resign {
			cause = "resigned"
		}
		o.remember(Change{Kind: "free"})
		return []Change{{Kind: "released", Record: ev.Record, Cause: cause}}
	case leasekit.ResignRequested:
		o.resign = ev.Record.Token
	}
	return nil
}

// onRead returns the changes a read tells, against the term last reported.
func (o *observer) onRead(st lease.Status) []Change {
	if st.Held {
		return o.found(st.Record, st.TTL, "read")
	}
	if !o.held {
		return nil
	}
	ended := o.last
	o.remember(Change{Kind: "free"})
	return []Change{{Kind: "expired", Record: ended, Cause: "timeout"}}
}

// found returns the changes when rec holds the lease for ttl: none when it is the term last
// reported; else "acquired", after "expired" for the term last reported when its end was not
// heard (a crashed holder's lease runs out unannounced, and its successor may acquire before
// the read at the expiry).
func (o *observer) found(rec lease.Record, ttl time.Duration, cause string) []Change {
	if o.held && sameTerm(rec, o.last) {
		o.arm(ttl)
		return nil
	}
	var out []Change
	if o.held {
		out = append(out, Change{Kind: "expired", Record: o.last, Cause: "replaced"})
	}
	c := Change{Kind: "acquired", Record: rec, TTL: ttl, Cause: cause}
	o.remember(c)
	return append(out, c)
}

// remember records c as the state of the lease and sets the read at its expiry.
func (o *observer) remember(c Change) {
	o.held = c.Kind != "free"
	o.last = c.Record
	o.arm(c.TTL)
}

// arm sets the read at the expiry of the term last reported, ttl from now, plus a little so
// that the read finds the key gone; a free lease or one without expiry stops it (an acquire
// is announced).
func (o *observer) arm(ttl time.Duration) {
	resetTimer(o.expiry, time.Hour) // stopped, and a firing not yet received dropped
	o.expiry.Stop()
	if o.held && ttl > 0 && ttl != lease.NoExpiry {
		o.expiry.Reset(ttl + 5*time.Millisecond)
	}
}

// sameTerm reports whether a and b are one term.
func sameTerm(a, b lease.Record) bool { return a.Token == b.Token && a.Identity == b.Identity }
