package leasekit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

func testList(t *testing.T, c redis.UniversalClient) {
	ctx := context.Background()
	want := map[string]lease.Record{}
	for i := 0; i < 30; i++ {
		name := fmt.Sprintf("job-%02d", i)
		want[name] = mustAcquire(t, newLease(t, c, name, fmt.Sprintf("pod-%d", i%3)), time.Minute)
	}
	// Other prefixes, foreign values and a name with glob characters are not confused.
	other, _ := leasekit.New(c, "job-00", lease.Options{Prefix: "other", Identity: "x"})
	mustAcquire(t, other, time.Minute)
	c.Set(ctx, "elector:{junk}:lease", "not a record", 0)
	star, _ := leasekit.New(c, "a*b", lease.Options{Prefix: "p[1]", Identity: "y"})
	starTerm := mustAcquire(t, star, time.Minute)

	got, err := leasekit.List(ctx, c, "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("List found %d leases, want %d: %+v", len(got), len(want), got)
	}
	for i, l := range got {
		if i > 0 && got[i-1].Name >= l.Name {
			t.Fatalf("not sorted: %q before %q", got[i-1].Name, l.Name)
		}
		if w := want[l.Name]; l.Status.Record != w || !l.Status.Held || l.Status.TTL <= 50*time.Second {
			t.Fatalf("lease %s: %+v, want %+v with ~1m left", l.Name, l.Status, w)
		}
	}
	got, err = leasekit.List(ctx, c, "p[1]")
	if err != nil || len(got) != 1 || got[0].Name != "a*b" || got[0].Status.Record != starTerm {
		t.Fatalf("List of prefix p[1] = %+v, %v", got, err)
	}
	if _, err := leasekit.List(ctx, c, "bad prefix"); err == nil {
		t.Fatal("List accepted a prefix with a space")
	}
}

func TestList(t *testing.T) { testList(t, redistest.Start(t).Client(t)) }

func TestListCluster(t *testing.T) { testList(t, redistest.StartCluster(t, 3).Client(t)) }
