package gocron

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLockerExcludesRenewsAndHolds(t *testing.T) {
	ctx := context.Background()
	rc := startRedis(t)
	opts := LockerOptions{Identity: "s1", TTL: time.Second, MinHold: 600 * time.Millisecond}
	a, err := NewLocker(rc, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Identity = "s2"
	b, err := NewLocker(newClient(t, rc), opts)
	if err != nil {
		t.Fatal(err)
	}

	la, err := a.Lock(ctx, "report")
	if err != nil {
		t.Fatalf("a.Lock: %v", err)
	}
	first := la.(*Lock).Token()
	if tok, ok := a.Token("report"); !ok || tok != first || first <= 0 {
		t.Fatalf("a.Token = %d, %v; the lock's token is %d", tok, ok, first)
	}
	if _, ok := b.Token("report"); ok {
		t.Fatal("b.Token reports a lock that b does not hold")
	}
	if _, err := b.Lock(ctx, "report"); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), `"s1"`) {
		t.Fatalf("b.Lock of a held job: err = %v, want ErrLocked naming s1", err)
	}
	// Another run in the same process is excluded too.
	if _, err := a.Lock(ctx, "report"); !errors.Is(err, ErrLocked) {
		t.Fatalf("a second a.Lock of a held job: err = %v, want ErrLocked", err)
	}
	// Other jobs have their own locks.
	lo, err := b.Lock(ctx, "other")
	if err != nil {
		t.Fatalf("b.Lock of another job: %v", err)
	}

	// A run longer than the TTL keeps its lock: it is renewed.
	time.Sleep(5 * opts.TTL / 2)
	if _, err := b.Lock(ctx, "report"); !errors.Is(err, ErrLocked) {
		t.Fatalf("after 2.5 TTLs of a run: b.Lock err = %v, want ErrLocked", err)
	}

	// The run took longer than MinHold: Unlock releases at once.
	if err := la.Unlock(ctx); err != nil {
		t.Fatalf("a unlocks: %v", err)
	}
	if _, ok := a.Token("report"); ok {
		t.Fatal("a.Token still reports the unlocked job")
	}
	lb, err := b.Lock(ctx, "report")
	if err != nil {
		t.Fatalf("b.Lock after a's release: %v", err)
	}
	if tok := lb.(*Lock).Token(); tok <= first {
		t.Fatalf("token of the next run %d is not larger than %d", tok, first)
	}

	// A short run: Unlock keeps the lock until MinHold after it was taken, so a scheduler
	// whose timer fired a little late for the same run finds it taken.
	unlocked := time.Now()
	if err := lb.Unlock(ctx); err != nil {
		t.Fatalf("b unlocks: %v", err)
	}
	pttl := rc.PTTL(ctx, "elector:{report}:lease").Val()
	if pttl <= 0 || pttl > opts.MinHold {
		t.Fatalf("PTTL after a short run's Unlock = %v, want in (0, %v]", pttl, opts.MinHold)
	}
	if _, err := a.Lock(ctx, "report"); !errors.Is(err, ErrLocked) {
		t.Fatalf("a.Lock within MinHold of b's run: err = %v, want ErrLocked", err)
	}
	time.Sleep(time.Until(unlocked.Add(pttl + 50*time.Millisecond)))
	la2, err := a.Lock(ctx, "report")
	if err != nil {
		t.Fatalf("a.Lock after the hold: %v", err)
	}
	if err := la2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := la2.Unlock(ctx); err != nil {
		t.Fatalf("a second Unlock: %v, want the first's nil", err)
	}
	if err := lo.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lock that Redis lost during the run is reported by Unlock.
func TestLockerReportsLostLock(t *testing.T) {
	ctx := context.Background()
	rc := startRedis(t)
	a, err := NewLocker(rc, LockerOptions{Identity: "s1", TTL: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lk, err := a.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // a renewal finds the lease gone
	if err := lk.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock after the lease was lost: err = %v, want ErrLockLost", err)
	}
}

// A replica that dies holding a lock (here: its Redis connection is gone, so it can neither
// renew nor release) blocks the job for one TTL.
func TestLockerLockOfDeadReplicaExpires(t *testing.T) {
	ctx := context.Background()
	rc := startRedis(t)
	ttl := 500 * time.Millisecond
	deadClient := newClient(t, rc)
	dead, err := NewLocker(deadClient, LockerOptions{Identity: "dead", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	alive, err := NewLocker(rc, LockerOptions{Identity: "alive", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	lk, err := dead.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	_ = deadClient.Close()
	var got error
	for time.Since(taken) < 20*ttl {
		if _, got = alive.Lock(ctx, "report"); got == nil {
			break
		}
		if !errors.Is(got, ErrLocked) {
			t.Fatalf("alive.Lock: %v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(taken)
	if got != nil {
		t.Fatalf("the dead replica's lock did not expire within %v", 20*ttl)
	}
	if took < ttl/2 {
		t.Fatalf("the lock was taken over %v after it was taken, before its TTL %v", took, ttl)
	}
	if err := lk.Unlock(ctx); err == nil {
		t.Fatal("Unlock through a closed client succeeded")
	}
}

func TestLeaseName(t *testing.T) {
	for key, want := range map[string]string{
		"billing":                "billing",
		"main.sendReports":       "main.sendReports",
		"daily report":           "sha256-",
		"pkg.(*T).run-fm{x}":     "sha256-",
		strings.Repeat("j", 300): "sha256-",
	} {
		got := LeaseName(key)
		if !strings.HasPrefix(got, want) || (want == "sha256-" && len(got) != len(want)+32) {
			t.Errorf("LeaseName(%q) = %q, want %q…", key, got, want)
		}
		if LeaseName(key) != got {
			t.Errorf("LeaseName(%q) is not deterministic", key)
		}
	}
	if LeaseName("a b") == LeaseName("a  b") {
		t.Error("two job names share a lease")
	}
}

func TestNewLockerValidates(t *testing.T) {
	rc := startRedis(t)
	for _, tc := range []struct {
		opts LockerOptions
		want string
	}{
		{LockerOptions{}, "Identity"},
		{LockerOptions{Identity: "a", Prefix: "a b"}, "Prefix"},
		{LockerOptions{Identity: "a", TTL: 1500 * time.Microsecond}, "TTL"},
		{LockerOptions{Identity: "a", TTL: -time.Second}, "TTL"},
	} {
		if _, err := NewLocker(rc, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewLocker(%+v): err = %v, want one about %s", tc.opts, err, tc.want)
		}
	}
	if _, err := NewLocker(nil, LockerOptions{Identity: "a"}); err == nil {
		t.Error("NewLocker with a nil client succeeded")
	}
}
