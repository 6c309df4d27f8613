package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/elector/elector/internal/redistest"
)

func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	c := redistest.Start(b).Client(b)
	l := newLease(b, c, "bench", "pod-a")
	b.ReportAllocs()
	for b.Loop() {
		ok, st, err := l.Acquire(ctx, 10*time.Second)
		if err != nil || !ok {
			b.Fatalf("Acquire = %v, %v", ok, err)
		}
		if ok, err := l.Release(ctx, st.Record); err != nil || !ok {
			b.Fatalf("Release = %v, %v", ok, err)
		}
	}
}

func BenchmarkRenew(b *testing.B) {
	ctx := context.Background()
	c := redistest.Start(b).Client(b)
	l := newLease(b, c, "bench", "pod-a")
	term := mustAcquire(b, l, 10*time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := l.Renew(ctx, term, 10*time.Second); err != nil || !ok {
			b.Fatalf("Renew = %v, %v", ok, err)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	c := redistest.Start(b).Client(b)
	l := newLease(b, c, "bench", "pod-a")
	term := mustAcquire(b, l, time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		st, err := l.Get(ctx)
		if err != nil || st.Record != term {
			b.Fatalf("Get = %+v, %v", st, err)
		}
	}
}
