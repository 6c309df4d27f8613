package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/redisfail"
	"github.com/elector/elector/pkg/lease"
)

// leaseFollower follows the state of one lease for elector resign and status --watch. While
// subscribed, the events tell every change that is announced; two kinds of change are not:
// what was published while the subscription was down (lost), and an expiry (announced by
// nobody). So the follower never relies on an event that may have been lost: after every
// resubscription it reads the lease, retrying a failed read with backoff until one succeeds,
// and it reads the lease at the expiry of the term last seen at the latest.
type leaseFollower struct {
	co     *commonOptions
	l      *lease.Lease
	sub    *lease.Subscription
	expiry *time.Timer
}

// followUpdate is one thing a leaseFollower saw: an event of the channel, or a read of the
// lease (after a resubscription or at the expiry of the term last seen).
type followUpdate struct {
	// event is the event; its Kind is 0 when the update is a read.
	event lease.Event
	// read is the lease as read, when the update is a read.
	read leaseStatus
}

// isRead reports whether the update is a read rather than an event.
func (u followUpdate) isRead() bool { return u.event.Kind == 0 }

// followRetryMin is the first pause between failed attempts of a follower; it doubles up to
// the retry period.
const followRetryMin = 50 * time.Millisecond

// newLeaseFollower subscribes to the lease's events; read the lease after it returns, so that
// no change between is missed. The expiry timer is stopped until armExpiry.
func newLeaseFollower(ctx context.Context, co *commonOptions, l *lease.Lease) (*leaseFollower, error) {
	sub, err := l.Subscribe(ctx)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &leaseFollower{co: co, l: l, sub: sub, expiry: t}, nil
}

// close ends the subscription.
func (f *leaseFollower) close() {
	f.expiry.Stop()
	if f.sub != nil {
		_ = f.sub.Close()
	}
}

// armExpiry sets the read at the expiry of s, plus a little so that the read finds the key
// gone; a lease without holder or expiry stops it (an acquire is announced).
func (f *leaseFollower) armExpiry(s leaseStatus) {
	f.expiry.Stop()
	if s.Holder != "" && s.TTLMs > 0 {
		f.expiry.Reset(time.Duration(s.TTLMs)*time.Millisecond + 5*time.Millisecond)
	}
}

// next returns the next update. Renewals re-arm the expiry and are returned too. It returns
// an error when ctx ends (ctx.Err()) or when subscribing or reading fails for a reason that
// retrying cannot help (authentication, permission, unknown Sentinel master).
func (f *leaseFollower) next(ctx context.Context) (followUpdate, error) {
	select {
	case <-ctx.Done():
		return followUpdate{}, ctx.Err()
	case ev, open := <-f.sub.Events():
		if open {
			switch ev.Kind {
			case lease.Acquired, lease.Renewed:
				f.armExpiry(newLeaseStatus(f.co.lease.name, f.l.Keys().Lease, lease.Status{Held: true, Record: ev.Record, TTL: ev.TTL}))
			case lease.Released:
				f.expiry.Stop()
			}
			return followUpdate{event: ev}, nil
		}
		// The connection failed: subscribe again, then read, since events published
		// meanwhile are lost.
		_ = f.sub.Close()
		f.sub = nil
		if err := f.retry(ctx, "subscribe", func(ctx context.Context) (err error) {
			if f.sub, err = f.l.Subscribe(ctx); err != nil {
				return readError(fmt.Sprintf("cannot subscribe to the events of lease %q", f.co.lease.name), f.co, err)
			}
			return nil
		}); err != nil {
			return followUpdate{}, err
		}
	case <-f.expiry.C:
	}
	return f.read(ctx)
}

// read reads the lease until a read succeeds and arms the expiry of what it found.
func (f *leaseFollower) read(ctx context.Context) (followUpdate, error) {
	var st leaseStatus
	err := f.retry(ctx, "read", func(ctx context.Context) (err error) {
		st, err = readStatus(ctx, f.co, f.l)
		return err
	})
	if err != nil {
		return followUpdate{}, err
	}
	f.armExpiry(st)
	return followUpdate{read: st}, nil
}

// retry calls attempt until it succeeds, pausing after each failure from followRetryMin,
// doubled each time, up to the retry period. It gives up when ctx ends (ctx.Err()) or when
// retrying cannot help (then it returns attempt's error, which says what failed).
func (f *leaseFollower) retry(ctx context.Context, what string, attempt func(context.Context) error) error {
	pause := followRetryMin
	for {
		err := attempt(ctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		switch redisfail.Reason(err) {
		case "auth", "noperm", "unknown_master": // retrying cannot help
			return err
		}
		klog.InfoS("Cannot follow the lease; retrying", "lease", f.co.lease.name, "op", what, "in", pause, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, max(f.co.lease.retryPeriod, followRetryMin))
	}
}
