package leasekit_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/lease"
)

// newLease returns the lease name with identity, failing the test if New refuses.
func newLease(t testing.TB, c redis.UniversalClient, name, identity string) *leasekit.Lease {
	t.Helper()
	l, err := leasekit.New(c, name, lease.Options{Identity: identity})
	if err != nil {
		t.Fatalf("leasekit.New: %v", err)
	}
	return l
}

// mustAcquire acquires l for ttl and returns the term, failing the test otherwise.
func mustAcquire(t testing.TB, l *leasekit.Lease, ttl time.Duration) lease.Record {
	t.Helper()
	ok, st, err := l.Acquire(context.Background(), ttl)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if !ok {
		t.Fatalf("Acquire: lease held by %+v, want it acquired", st.Record)
	}
	return st.Record
}

// expectEvent waits up to 5s for the next event of sub and checks its kind and record.
func expectEvent(t testing.TB, sub *leasekit.Subscription, kind leasekit.EventKind, rec lease.Record) leasekit.Event {
	t.Helper()
	select {
	case ev := <-sub.Events():
		if ev.Kind != kind || ev.Record != rec {
			t.Fatalf("event = %v %+v, want %v %+v", ev.Kind, ev.Record, kind, rec)
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatalf("no %v event within 5s", kind)
	}
	return leasekit.Event{}
}
