package leasekit_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
)

// TestCandidateRegistry runs candidate.lua on a real redis-server: a heartbeat registers and
// returns the registry, a second replica appears, an entry expires by Redis's TIME after its
// ttl without a heartbeat (a crash), a leave removes it at once, and an observer reads the
// same with GET and PTTL, without a script or TIME, and learns the server's time from them.
func TestCandidateRegistry(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	a, b := newLease(t, c, "job", "r1"), newLease(t, c, "job", "r2")
	obs := newLease(t, c, "job", "")

	got, err := a.Advertise(ctx, time.Minute, 5, "v1.2.3", false)
	if err != nil || len(got.List) != 1 || got.List[0].Identity != "r1" || got.List[0].Instance != a.Instance() ||
		got.List[0].Version != "v1.2.3" || got.List[0].Priority != 5 {
		t.Fatalf("first heartbeat = %+v, %v", got, err)
	}
	if _, err := b.Advertise(ctx, 300*time.Millisecond, 0, "", false); err != nil {
		t.Fatal(err)
	}
	read, err := obs.ReadCandidates(ctx)
	if err != nil || strings.Join(read.Identities(), ",") != "r1,r2" {
		t.Fatalf("ReadCandidates = %+v, %v; want r1 and r2", read, err)
	}
	if tm, err := c.Time(ctx).Result(); err != nil || tm.Sub(read.Now) < 0 || tm.Sub(read.Now) > 100*time.Millisecond {
		t.Errorf("the time read from GET and PTTL is %v; TIME said %v after it (%v)", read.Now, tm, err)
	}
	if seen := read.List[0].LastSeen; read.Now.Sub(seen) < 0 || read.Now.Sub(seen) > time.Second {
		t.Errorf("last seen %v, server now %v", seen, read.Now)
	}
	time.Sleep(400 * time.Millisecond) // r2 "crashed": no heartbeat within its ttl
	read, _ = obs.ReadCandidates(ctx)
	if read.Has("r2") {
		t.Errorf("r2 still live after its ttl: %+v", read)
	}
	got, _ = a.Advertise(ctx, time.Minute, 5, "v1.2.4", false) // the heartbeat prunes r2's entry
	if len(got.List) != 1 || got.List[0].Version != "v1.2.4" {
		t.Errorf("heartbeat after r2's expiry = %+v", got)
	}
	if v, _ := c.Get(ctx, a.Keys().Candidates).Result(); strings.Count(v, "\n") != 1 || strings.Contains(v, b.Instance()) {
		t.Errorf("the key holds %q; want r2's entry dropped", v)
	}
	if ttl, _ := c.PTTL(ctx, a.Keys().Candidates).Result(); ttl <= time.Minute || ttl > 2*time.Minute {
		t.Errorf("registry key PTTL %v; want a ttl after its last entry, 2 min", ttl)
	}
	left, err := a.Advertise(ctx, time.Minute, 5, "", true)
	if err != nil || len(left.List) != 0 {
		t.Fatalf("leave = %+v, %v", left, err)
	}
	if n, _ := c.Exists(ctx, a.Keys().Candidates).Result(); n != 0 {
		t.Errorf("the registry key outlives its last entry")
	}
}

// TestCheckSuccessor: the refusals of a resign against the registry, with a did-you-mean.
func TestCheckSuccessor(t *testing.T) {
	now := time.Now().UnixMilli()
	entry := func(field string, exp int64) string { return field + "\t" + itoa(exp) + "\t" + itoa(now) + "\t0\tv1" }
	reg := leasekit.ParseCandidates(now, []string{
		entry("i1:r1", now+1000), entry("i2:r2", now+1000), entry("i3:r3", now-1), // r3 expired
	})
	for _, tc := range []struct {
		holder, target, want string
		err                  error
	}{
		{"r1", "r2", "", nil},
		{"r1", "", "", nil},
		{"r1", "r9", `not a live candidate: "r9" (did you mean "r2"?); the live candidates but the holder "r1": r2`, leasekit.ErrNotCandidate},
		{"r1", "r3", `not a live candidate: "r3" (did you mean "r2"?)`, leasekit.ErrNotCandidate},
		{"r1", "watcher", `not a live candidate: "watcher"; the live`, leasekit.ErrNotCandidate},
		{"r1", "r1", "", nil}, // the script refuses the holder as target
	} {
		err := leasekit.CheckSuccessor(reg, tc.holder, tc.target)
		if (err == nil) != (tc.err == nil) || (err != nil && (!errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.want))) {
			t.Errorf("CheckSuccessor(%q, %q) = %v; want %v containing %q", tc.holder, tc.target, err, tc.err, tc.want)
		}
	}
	alone := leasekit.ParseCandidates(now, []string{entry("i1:r1", now+1000)})
	if err := leasekit.CheckSuccessor(alone, "r1", ""); !errors.Is(err, leasekit.ErrNoSuccessor) {
		t.Errorf("a single replica's resign: %v; want ErrNoSuccessor", err)
	}
	if err := leasekit.CheckSuccessor(alone, "r1", "r2"); !errors.Is(err, leasekit.ErrNotCandidate) || !strings.Contains(err.Error(), "none") {
		t.Errorf("a single replica's resign to r2: %v", err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
