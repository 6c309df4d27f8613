package election_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// Observe reports the lease as found, then each change of its holder. Here the observing
// Elector starts itself once the lease is free, and stops (releasing the lease) once it
// leads.
func ExampleElector_Observe() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	e, err := election.New(election.Config{
		Client: client, LeaseName: "example-observe", Identity: "pod-a", ReleaseOnCancel: true,
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context) { <-ctx.Done() },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	for c, err := range e.Observe(ctx) {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(strings.TrimSpace(c.Kind + " " + c.Record.Identity))
		switch c.Kind {
		case "free":
			go func() { done <- e.Run(runCtx) }()
		case "acquired":
			stop() // Run releases the lease (ReleaseOnCancel)
		case "released":
			fmt.Println("Run returned", <-done)
			return
		}
	}
	// Output:
	// free
	// acquired pod-a
	// released pod-a
	// Run returned <nil>
}

// observeOnly returns an Elector that only observes the lease name through client.
func observeOnly(t *testing.T, client redis.UniversalClient, name string) *election.Elector {
	t.Helper()
	e, err := election.New(election.Config{
		Client: client, LeaseName: name, Identity: "watcher",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
		Callbacks: election.Callbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// observeChanges runs e.Observe until the test ends and delivers its changes; an error fails the
// test.
func observeChanges(t *testing.T, e *election.Elector) <-chan election.Change {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan election.Change, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c, err := range e.Observe(ctx) {
			if err != nil {
				t.Errorf("Observe: %v", err)
				return
			}
			out <- c
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return out
}

// wantChange waits for the next change and checks its kind and holder ("" for any).
func wantChange(t *testing.T, ch <-chan election.Change, within time.Duration, kind, holder string) election.Change {
	t.Helper()
	select {
	case c := <-ch:
		if c.Kind != kind || (holder != "" && c.Record.Identity != holder) {
			t.Fatalf("change %+v, want %s of %q", c, kind, holder)
		}
		return c
	case <-time.After(within):
		t.Fatalf("no %s of %q within %v", kind, holder, within)
	}
	return election.Change{}
}

// Every change of the holder, announced or not: acquired, renewed, released (a resign
// request's release says so), and expired — of a lease nobody renews, and of a crashed term
// whose successor acquires before the observer's read at the expiry (issue 28 item 3).
func TestObserveReportsEveryChange(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := t.Context()
	const name = "observed"
	ch := observeChanges(t, observeOnly(t, client, name))
	wantChange(t, ch, 10*time.Second, "free", "")
	a, err := leasekit.NewWith(client, name, lease.Options{Identity: "a"}, leasekit.Ext{AnnounceRenewals: true, ResignRequests: true})
	if err != nil {
		t.Fatal(err)
	}
	_, st, err := a.Acquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if c := wantChange(t, ch, 10*time.Second, "acquired", "a"); c.Record != st.Record || c.Cause != "event" || c.TTL != time.Minute {
		t.Fatalf("acquired %+v, want %+v for 1m from the event", c, st.Record)
	}
	if ok, err := a.Renew(ctx, st.Record, time.Minute); err != nil || !ok {
		t.Fatalf("renew: %v %v", ok, err)
	}
	wantChange(t, ch, 10*time.Second, "renewed", "a")
	if _, err := a.RequestResign(ctx, leasekit.ResignRequest{HoldOff: time.Millisecond, Timeout: time.Second, Term: st.Record}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(ctx, st.Record); err != nil {
		t.Fatal(err)
	}
	if c := wantChange(t, ch, 10*time.Second, "released", "a"); c.Record.Token != st.Record.Token || c.Cause != "resigned" {
		t.Fatalf("released %+v, want token %d, resigned", c, st.Record.Token)
	}
	// Nobody renews b's term: the observer reads the lease at its expiry.
	b, err := leasekit.New(client, name, lease.Options{Identity: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Acquire(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	bTerm := wantChange(t, ch, 10*time.Second, "acquired", "b")
	if c := wantChange(t, ch, 10*time.Second, "expired", "b"); c.Record != bTerm.Record || c.Cause != "timeout" {
		t.Fatalf("expired %+v, want b's term %+v, timeout", c, bTerm.Record)
	}
	// a "crashes" holding the lease; b acquires the moment it is gone.
	_, st, err = a.Acquire(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantChange(t, ch, 10*time.Second, "acquired", "a")
	waitUntil(t, 10*time.Second, "b acquires after a's lease expired", func() bool {
		won, _, err := b.Acquire(ctx, time.Minute)
		return err == nil && won
	})
	if c := wantChange(t, ch, 10*time.Second, "expired", "a"); c.Record != st.Record {
		t.Fatalf("expired %+v, want a's term %+v", c, st.Record)
	}
	wantChange(t, ch, 10*time.Second, "acquired", "b")
}

// After the observer's subscription broke, its first read of the lease fails (the key holds a
// hash: WRONGTYPE, counted by the server, so the test waits for that failure), and then a new
// term begins without an event (a raw SET). The observer retries the read rather than taking
// the failure for news, or waiting for an event that never comes, and reports the new term.
func TestObserveRetriesAFailedReadAfterTheSubscriptionBroke(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr())
	admin := srv.Client(t)
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() }) // after the observer ended
	const name = "observed-failed-read"
	key := leasewire.KeysFor(lease.DefaultPrefix, name).Lease
	ctx := t.Context()
	if err := admin.Set(ctx, key, "v1:100:aaaa:old-holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	ch := observeChanges(t, observeOnly(t, client, name))
	wantChange(t, ch, 10*time.Second, "held", "old-holder")
	before := errorReplies(t, admin, "WRONGTYPE")
	if err := admin.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.HSet(ctx, key, "not", "a record").Err(); err != nil {
		t.Fatal(err)
	}
	proxy.Cut() // the subscription breaks; the read after the new one fails
	waitUntil(t, 10*time.Second, "a read of the lease refused with WRONGTYPE", func() bool {
		return errorReplies(t, admin, "WRONGTYPE") > before
	})
	if err := admin.Set(ctx, key, "v1:200:bbbb:new-holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	// The retries pause at most RetryPeriod (200ms): 10s is fifty of them.
	wantChange(t, ch, 10*time.Second, "expired", "old-holder")
	if c := wantChange(t, ch, 10*time.Second, "acquired", "new-holder"); c.Cause != "read" || c.Record.Token != 200 {
		t.Fatalf("acquired %+v, want token 200 found by a read", c)
	}
}

// errorReplies is how many error replies with the prefix the server sent (INFO errorstats).
func errorReplies(t *testing.T, client *redis.Client, prefix string) int64 {
	t.Helper()
	info, err := client.Info(t.Context(), "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "errorstat_"+prefix+":count="); ok {
			var n int64
			_, _ = fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}
