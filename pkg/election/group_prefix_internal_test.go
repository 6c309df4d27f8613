package election

import (
	"context"
	"testing"
	"time"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// TestGroupEventsStayInTheirPrefix (issue 23, item 6): a Group whose key prefix holds a glob
// character ("tenant?") must not receive the events of another prefix's lease of the same name
// ("tenantB"), which its PSUBSCRIBE pattern would match unescaped and which its machine would
// take for news of its own lease (news that, per the review, even clears a poisoned record).
// Group B runs a real term of "billing" (acquired, renewed, released on tenantB:{billing}:events);
// then a marker acquires "billing" under A's prefix. Redis delivers a subscription's messages in
// publish order, so the first event A's subscription yields must be the marker's.
func TestGroupEventsStayInTheirPrefix(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	newGroup := func(name, prefix string) *Group {
		g, err := NewGroup(GroupConfig{
			Client: client, Group: name, KeyPrefix: prefix, Identity: name, Leases: []string{"billing"},
			LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
			Callbacks: GroupCallbacks{
				OnStartedLeading: func(ctx context.Context, _ string) { <-ctx.Done() },
				OnStoppedLeading: func(string) {},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a, b := newGroup("group-a", "tenant?"), newGroup("group-b", "tenantB")

	sub, err := redisGroup{g: a}.subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.close()

	// B: one whole term of "billing" under its own prefix.
	bctx, bcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	for b.Held()["billing"] == 0 {
		if ctx.Err() != nil {
			t.Fatal("group B did not acquire billing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	bcancel()
	if err := <-done; err != nil {
		t.Fatalf("group B: %v", err)
	}

	// The marker: a term of "billing" under A's prefix.
	marker, err := leasekit.New(client, "billing", lease.Options{Prefix: "tenant?", Identity: "marker"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := marker.Acquire(ctx, time.Second); err != nil || !ok {
		t.Fatalf("marker acquire: %v %v", ok, err)
	}

	for n := 0; ; n++ {
		name, ev, err := sub.next(ctx)
		if err != nil {
			t.Fatalf("group A's subscription: %v", err)
		}
		if ev.Record.Identity == "marker" && name == "billing" {
			if n > 0 {
				t.Fatalf("group A (prefix %q) received %d events of group B's lease (prefix %q) before its own", "tenant?", n, "tenantB")
			}
			return
		}
		t.Logf("group A received an event of another prefix's lease: %s %q by %s (token %d)", ev.Kind, name, ev.Record.Identity, ev.Record.Token)
	}
}
