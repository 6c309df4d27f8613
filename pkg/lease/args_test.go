package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// TestOneLeaseFromManyGoroutines uses one Lease from several goroutines at once, as
// pkg/election does (a renewal beside a release), with a TTL that changes from call to call
// so that the boxed TTL is replaced while other calls send it, and a second Lease contending.
// Under -race it proves that the argument slices and boxes of lease.go (argBoxes) are not written while
// another call's command still holds them; and every call must get a well-formed reply: a
// wrong argument in the wrong place would be a script error or a wrong record.
func TestOneLeaseFromManyGoroutines(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	opts, ext := lease.Options{Identity: "pod-a"}, leasekit.Ext{AnnounceRenewals: true, ResignRequests: true}
	l, err := leasekit.NewWith(c, "shared", opts, ext)
	if err != nil {
		t.Fatal(err)
	}
	opts.Identity = "pod-b"
	other, err := leasekit.NewWith(c, "shared", opts, ext)
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, rounds = 6, 150
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- cycle(ctx, l, other, g, rounds)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// cycle acquires, renews and releases, checking each reply against what was sent.
func cycle(ctx context.Context, l, other *leasekit.Lease, g, rounds int) error {
	for i := range rounds {
		ttl := time.Duration(1000+100*((g+i)%7)) * time.Millisecond
		who := l
		if (g+i)%5 == 0 {
			who = other
		}
		ok, st, err := who.Acquire(ctx, ttl)
		if err != nil {
			return fmt.Errorf("goroutine %d round %d: Acquire: %w", g, i, err)
		}
		if !st.Held || st.Record.Token == 0 || (ok && st.Record.Instance != who.Instance()) {
			return fmt.Errorf("goroutine %d round %d: Acquire = %v, %+v", g, i, ok, st)
		}
		if !ok {
			continue
		}
		if st.TTL != ttl {
			return fmt.Errorf("goroutine %d round %d: acquired for %v, asked %v", g, i, st.TTL, ttl)
		}
		if _, err := who.Renew(ctx, st.Record, ttl+time.Millisecond); err != nil {
			return fmt.Errorf("goroutine %d round %d: Renew: %w", g, i, err)
		}
		if _, err := who.Release(ctx, st.Record); err != nil {
			return fmt.Errorf("goroutine %d round %d: Release: %w", g, i, err)
		}
	}
	return nil
}
