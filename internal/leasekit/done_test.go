package leasekit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// TestDoneMarkFenced writes done marks against a real Redis: the holder's term writes one
// with PX set and GetDone parses it back; a term that ended (its lease released and taken by
// another replica) cannot write one, and the newer term's mark is left untouched.
func TestDoneMarkFenced(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	a, b := newResignLease(t, c, "pod-a"), newResignLease(t, c, "pod:b")
	if d, err := a.GetDone(ctx); err != nil || d != nil {
		t.Fatalf("GetDone before any mark = %+v, %v; want nil, nil", d, err)
	}
	old := mustAcquire(t, a, 10*time.Second)
	finished := time.UnixMilli(time.Now().UnixMilli()).UTC()
	ok, err := a.MarkDone(ctx, leasekit.Done{Term: old, ExitCode: 0, Finished: finished, TTL: time.Hour})
	if err != nil || !ok {
		t.Fatalf("MarkDone by the holder = %v, %v; want true", ok, err)
	}
	pttl := c.PTTL(ctx, a.Keys().Done).Val()
	if pttl <= 59*time.Minute || pttl > time.Hour {
		t.Errorf("PTTL of the mark = %v, want about 1h (PX)", pttl)
	}
	d, err := b.GetDone(ctx)
	if err != nil || d == nil {
		t.Fatalf("GetDone = %+v, %v", d, err)
	}
	if d.Term != old || d.ExitCode != 0 || !d.Finished.Equal(finished) || d.TTL <= 59*time.Minute {
		t.Errorf("GetDone = %+v, want term %v, code 0, finished %v, TTL about 1h", d, old, finished)
	}

	// The old term ends; a newer one begins and marks its own job done.
	if released, err := a.Release(ctx, old); err != nil || !released {
		t.Fatalf("Release = %v, %v", released, err)
	}
	cur := mustAcquire(t, b, 10*time.Second)
	if ok, err := b.MarkDone(ctx, leasekit.Done{Term: cur, ExitCode: 0, Finished: finished, TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("MarkDone by the new holder = %v, %v", ok, err)
	}
	// The stale holder (after a pause) tries to write its mark: refused by the fence.
	ok, err = a.MarkDone(ctx, leasekit.Done{Term: old, ExitCode: 0, Finished: time.Now(), TTL: time.Hour})
	if err != nil || ok {
		t.Fatalf("MarkDone by a term that ended = %v, %v; want false, nil (fenced)", ok, err)
	}
	if d, err := a.GetDone(ctx); err != nil || d == nil || d.Term != cur || d.TTL > time.Minute {
		t.Errorf("after the stale write: GetDone = %+v, %v; want the new term %v's mark untouched", d, err, cur)
	}
	// Nobody holds the lease: refused as well.
	if _, err := b.Release(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.MarkDone(ctx, leasekit.Done{Term: cur, Finished: time.Now(), TTL: time.Hour}); err != nil || ok {
		t.Errorf("MarkDone with the lease free = %v, %v; want false, nil", ok, err)
	}
}

// TestDoneMarkRefusals checks the arguments and values MarkDone and GetDone refuse.
func TestDoneMarkRefusals(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	a := newResignLease(t, c, "pod-a")
	term := mustAcquire(t, a, 10*time.Second)
	for _, ttl := range []time.Duration{0, time.Microsecond, 1500 * time.Microsecond} {
		if _, err := a.MarkDone(ctx, leasekit.Done{Term: term, TTL: ttl}); err == nil {
			t.Errorf("MarkDone with TTL %v: no error", ttl)
		}
	}
	for _, v := range []string{"junk", "v1\nx\n0\n" + term.String(), "v1\n1\nx\n" + term.String(), "v1\n1\n0\nnot a record", "v2\n1\n0\n" + term.String()} {
		if err := c.Set(ctx, a.Keys().Done, v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if d, err := a.GetDone(ctx); err == nil || !strings.Contains(err.Error(), a.Keys().Done) {
			t.Errorf("GetDone of %q = %+v, %v; want an error naming the key", v, d, err)
		}
	}
	if err := c.Set(ctx, a.Keys().Done, "v1\n1700000000000\n0\n"+term.String(), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if d, err := a.GetDone(ctx); err != nil || d == nil || d.TTL != lease.NoExpiry || d.Finished.UnixMilli() != 1700000000000 {
		t.Errorf("GetDone of a mark set by hand without expiry = %+v, %v; want TTL NoExpiry", d, err)
	}
}
