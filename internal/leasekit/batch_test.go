package leasekit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

func testBatch(t *testing.T, c redis.UniversalClient) {
	ctx := context.Background()
	const n = 200
	mine := make([]*leasekit.Lease, n)
	theirs := make([]*leasekit.Lease, n)
	for i := range mine {
		mine[i] = newLease(t, c, fmt.Sprintf("shard-%d", i), "pod-a")
		theirs[i] = newLease(t, c, fmt.Sprintf("shard-%d", i), "pod-b")
	}
	// Half of the leases are taken by someone else first.
	for i := 0; i < n; i += 2 {
		mustAcquire(t, theirs[i], 10*time.Second)
	}
	b := leasekit.NewBatch(c)
	acq := make([]*leasekit.AcquireResult, n)
	for i, l := range mine {
		acq[i] = b.Acquire(l, 10*time.Second)
	}
	if err := b.Exec(ctx); err != nil {
		t.Fatalf("Exec acquire: %v", err)
	}
	if b.Len() != 0 {
		t.Fatalf("batch not emptied by Exec")
	}
	for i, r := range acq {
		if r.Err != nil || r.Acquired != (i%2 == 1) {
			t.Fatalf("lease %d: acquired %v err %v, want acquired only for odd leases", i, r.Acquired, r.Err)
		}
		if want := map[bool]string{true: "pod-a", false: "pod-b"}[i%2 == 1]; r.Status.Record.Identity != want {
			t.Fatalf("lease %d: holder %q, want %q", i, r.Status.Record.Identity, want)
		}
	}
	// Renew everything we hold, and (falsely) one we do not.
	renew := map[int]*leasekit.Result{}
	for i := 1; i < n; i += 2 {
		renew[i] = b.Renew(leasekit.Term(mine[i], acq[i].Status.Record), 20*time.Second)
	}
	bogus := b.Renew(leasekit.Term(mine[0], acq[1].Status.Record), 20*time.Second)
	if err := b.Exec(ctx); err != nil {
		t.Fatalf("Exec renew: %v", err)
	}
	for i, r := range renew {
		if !r.OK || r.Err != nil {
			t.Fatalf("renew %d: %+v", i, r)
		}
	}
	if bogus.OK || bogus.Err != nil {
		t.Fatalf("renew of a lease held by another: %+v, want false", bogus)
	}
	if pttl := c.PTTL(ctx, mine[1].Keys().Lease).Val(); pttl <= 19*time.Second {
		t.Fatalf("batch renew did not extend: %v", pttl)
	}
	// Scripts flushed: the batch reloads them and runs the operations again.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rel := map[int]*leasekit.Result{}
	for i := 1; i < n; i += 2 {
		rel[i] = b.Release(leasekit.Term(mine[i], acq[i].Status.Record))
	}
	if err := b.Exec(ctx); err != nil {
		t.Fatalf("Exec release after SCRIPT FLUSH: %v", err)
	}
	for i, r := range rel {
		if !r.OK || r.Err != nil {
			t.Fatalf("release %d: %+v", i, r)
		}
		if st, _ := mine[i].Get(ctx); st.Held {
			t.Fatalf("lease %d still held after batch release", i)
		}
	}
	// Bad input is reported per operation and not sent.
	bad := b.Acquire(mine[1], time.Microsecond)
	if bad.Err == nil || !strings.Contains(bad.Err.Error(), "ttl") || b.Len() != 0 {
		t.Fatalf("bad ttl: %+v, queued %d", bad, b.Len())
	}
}

func TestBatch(t *testing.T) { testBatch(t, redistest.Start(t).Client(t)) }

func TestBatchCluster(t *testing.T) { testBatch(t, redistest.StartCluster(t, 3).Client(t)) }

func TestBatchRejectsForeignClient(t *testing.T) {
	srv := redistest.Start(t)
	a, b := srv.Client(t), srv.Client(t)
	l := newLease(t, a, "x", "pod-a")
	batch := leasekit.NewBatch(b)
	batch.Acquire(l, time.Second)
	if err := batch.Exec(context.Background()); err == nil {
		t.Fatal("a batch ran a lease of another client")
	}
}

func BenchmarkBatchRenew1000(b *testing.B) {
	ctx := context.Background()
	c := redistest.Start(b).Client(b)
	leases := make([]*leasekit.Lease, 1000)
	terms := make([]lease.Record, len(leases))
	for i := range leases {
		leases[i] = newLease(b, c, fmt.Sprintf("shard-%d", i), "pod-a")
		terms[i] = mustAcquire(b, leases[i], time.Minute)
	}
	batch := leasekit.NewBatch(c)
	b.ReportAllocs()
	for b.Loop() {
		for i, l := range leases {
			batch.Renew(leasekit.Term(l, terms[i]), time.Minute)
		}
		if err := batch.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
