package reliability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/testing/redistest"
	timingrules "github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// libfaketimeEnv names libfaketime's preload library when it is not in Debian's place.
// requireFaketimeEnv, when set (hack/compat.sh sets it), makes the clock test fail instead of
// skipping when libfaketime is missing or cannot run the server.
const (
	libfaketimeEnv     = "ELECTOR_LIBFAKETIME"
	requireFaketimeEnv = "ELECTOR_REQUIRE_FAKETIME"
)

// libfaketime returns the preload library of libfaketime and checks that the server runs under
// it, or skips the test saying why (fails when ELECTOR_REQUIRE_FAKETIME is set).
func libfaketime(t *testing.T) string {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv(requireFaketimeEnv) != "" {
			t.Fatalf("%s (failing instead of skipping because %s is set)", msg, requireFaketimeEnv)
		}
		t.Skip(msg)
	}
	candidates := []string{
		os.Getenv(libfaketimeEnv),
		"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
		"/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
		"/usr/lib/faketime/libfaketime.so.1",
	}
	lib := ""
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if _, err := os.Stat(c); err == nil {
			lib = c
			break
		}
	}
	if lib == "" {
		skip("libfaketime not found (apt-get install libfaketime, or name it with %s)", libfaketimeEnv)
	}
	// Debian's redis-server links jemalloc as a shared library that replaces malloc; libfaketime's
	// initialisation then recurses (jemalloc reads the clock while libfaketime looks up the
	// real clock_gettime) and the server hangs. Servers built from source link their jemalloc
	// statically (je_ prefix) and run under it.
	bin := redistest.ServerPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // it takes milliseconds, or hangs
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "FAKETIME=+1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), " v=") {
		name, version := redistest.ServerVersion(t)
		skip("%s (%s %s) does not run under libfaketime (%v): %s; hack/compat.sh runs this test against the servers it builds",
			filepath.Base(bin), name, version, err, strings.TrimSpace(string(out)))
	}
	return lib
}

// clockCase is one failover to a replica whose clock is ahead of the master's.
type clockCase struct {
	offset time.Duration
	ack    bool // ReplicaAck on the leader
}

// The Redis-clock assumption of docs/DESIGN.md, measured: Redis replicates a lease's expiry as
// an absolute wall-clock time (PEXPIREAT), so after a failover to a replica whose clock is
// ahead by offset the lease ends offset early. A leader A (cut off from the new master, as a
// partitioned one is) holds the lease; the master is killed just after a renew; Sentinel promotes
// the replica, whose clock libfaketime puts ahead by offset; an elector C that starts then (a
// restarted pod) takes the lease as soon as the new master lets it go. The test asserts that the
// lease ended offset early (within the measurement's bounds, from the renew's send time and the
// polls of the replica) and that a second leader started while A still trusted its term exactly
// when offset exceeds LeaseDuration − RenewDeadline − drift; ReplicaAck changes nothing (the
// record was replicated; its expiry is what moved).
func TestFailoverToReplicaWithClockAhead(t *testing.T) {
	lib := libfaketime(t)
	tm := timing{lease: 10 * time.Second, renew: 6 * time.Second, retry: 500 * time.Millisecond}
	margin := tm.lease - tm.renew - timingrules.DriftMargin(tm.lease) // 3.898s
	for _, tc := range []clockCase{
		{offset: 2 * time.Second}, {offset: 2 * time.Second, ack: true},
		{offset: 5 * time.Second}, {offset: 5 * time.Second, ack: true},
	} {
		name := fmt.Sprintf("offset=%v,ReplicaAck=%v", tc.offset, tc.ack)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			failoverToClockAhead(t, lib, tm, margin, tc)
		})
	}
}

func failoverToClockAhead(t *testing.T, lib string, tm timing, margin time.Duration, tc clockCase) {
	ctx := context.Background()
	// Replica 0 has the clock ahead and is the one Sentinel promotes; replica 1 (never
	// promoted) is the one that acknowledges writes to the new master with ReplicaAck.
	s := redistest.StartSentinel(t, "clock", 2, 3,
		redistest.WithDownAfter(500*time.Millisecond),
		redistest.WithReplicaEnv(0, "LD_PRELOAD="+lib, fmt.Sprintf("FAKETIME=%+.3f", tc.offset.Seconds())),
		redistest.WithReplicaArgs(1, "--replica-priority", "0"))
	ahead := s.Replicas[0]
	rc := ahead.Client(t)
	skew, err := clockSkew(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	// Whether the offset took effect, not how fast TIME answered: half the offset separates
	// the two (the measurement errs by half a round trip at most, however late).
	t.Logf("the replica's TIME is %v ahead of ours (offset %v)", skew, tc.offset)
	if d := skew - tc.offset; d < -tc.offset/2 || d > tc.offset/2 {
		t.Fatalf("the replica's TIME is %v ahead of ours, want %v: libfaketime did not take effect", skew, tc.offset)
	}

	led := &ledger{}
	var opts []func(*election.Config)
	if tc.ack {
		opts = append(opts, func(c *election.Config) {
			c.ReplicaAck = lease.ReplicaAck{Replicas: 1, Timeout: 100 * time.Millisecond}
		})
	}
	// A talks to the first master only: after the failover it cannot reach the new one.
	a := startElector(t, newClient(t, redisclient.Config{Mode: redisclient.ModeStandalone, Addrs: []string{s.Master.Addr()}}, tm),
		"job", "pod-a", tm, led, opts...)
	waitLeader(t, []*replica{a}, time.Time{}, 30*time.Second)

	// Kill the master right after a renew of A that reached both replicas (replication is
	// ordered: a write of ours after it, acknowledged by both, follows it), so that the record's
	// expiry there is that renew's; its send time bounds the expiry. A renew of A while we wait
	// for the acknowledgement starts over with that one.
	mc := s.Master.Client(t)
	key := "elector:{job}:lease"
	var sent, seen time.Time
	var record string
	for attempt := 0; ; attempt++ {
		if attempt == 10 {
			t.Fatalf("A renewed during every acknowledgement wait of %d attempts", attempt)
		}
		before := a.e.Status().LastRenew
		for deadline := time.Now().Add(10 * tm.retry); ; {
			st := a.e.Status()
			if st.LastRenew != nil && before != nil && st.LastRenew.After(*before) {
				sent, seen = redistest.WallClock(*st.LastRenew), redistest.WallClock(time.Now())
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("A did not renew within %v: %+v", 10*tm.retry, st)
			}
			time.Sleep(time.Millisecond)
		}
		if err := mc.Set(ctx, "clock-test-marker", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := mc.Wait(ctx, 2, 5*time.Second).Result(); err != nil || n != 2 {
			t.Fatalf("WAIT 2 after A's renew = %d, %v", n, err)
		}
		var err error
		if record, err = rc.Get(ctx, key).Result(); err != nil { // A's record, replicated
			t.Fatalf("GET %s on the replica: %v", key, err)
		}
		if last := a.e.Status().LastRenew; last != nil && redistest.WallClock(*last).Equal(sent) {
			break
		}
	}
	old := s.Master.Addr()
	s.Master.Stop()
	if last := a.e.Status().LastRenew; last == nil || !redistest.WallClock(*last).Equal(sent) {
		t.Fatalf("A renewed again (%v) in the microseconds before the kill; its expiry on the replica is unknown", last)
	}

	// Watch A's record disappear on the replica (a replica answers reads of a key whose
	// expiry has passed on its own clock as missing, promoted or not). Another record there is
	// C's, written after A's expired: that counts as gone too.
	pctx, stopPolls := context.WithCancel(ctx)
	defer stopPolls()
	gone := make(chan [2]time.Time, 1)
	go func() {
		var lastHit time.Time
		for pctx.Err() == nil {
			at := redistest.WallClock(time.Now())
			v, err := rc.Get(pctx, key).Result()
			if errors.Is(err, redis.Nil) || (err == nil && v != record) {
				gone <- [2]time.Time{lastHit, redistest.WallClock(time.Now())}
				return
			}
			if err == nil {
				lastHit = at
			}
			if time.Since(sent) > 2*tm.lease {
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(gone)
	}()

	newMaster, promoted := waitNewMaster(t, s, old, 30*time.Second)
	if newMaster != ahead.Addr() {
		t.Fatalf("sentinels promoted %s, want the replica %s", newMaster, ahead.Addr())
	}
	// C starts when the failover is done, as a restarted pod would, through Sentinel.
	startElector(t, sentinelClient(t, s, tm), "job", "pod-c", tm, led, opts...)

	bounds, ok := <-gone
	if !ok {
		t.Fatalf("A's record was still on the replica %v after A's last renew", 2*tm.lease)
	}
	// The record's expiry E on the replica's clock is exec+LeaseDuration with exec, the
	// renew's execution on the master, between sent and seen; E in real time lies between the
	// last poll that found the record and the first that did not. All four are wall-clock
	// readings (see redistest.WallClock).
	low := sent.Add(tm.lease).Sub(bounds[1])
	high := seen.Add(tm.lease).Sub(bounds[0])
	shortening := (low + high) / 2
	t.Logf("lease ended %v early (between %v and %v); failover done %v after A's last renew",
		shortening.Round(time.Millisecond), low.Round(time.Millisecond), high.Round(time.Millisecond),
		promoted.Sub(sent).Round(time.Millisecond))
	// Redis keeps expiries in whole milliseconds and compares them with a time taken when it
	// began the command (or the event-loop iteration), which can lag our clock by a little.
	const slack = 10 * time.Millisecond
	if tc.offset < low-slack || tc.offset > high+slack {
		t.Errorf("the lease ended between %v and %v early (±%v), want the clock offset %v", low, high, slack, tc.offset)
	}
	if high-low > tm.retry {
		t.Errorf("the measurement is too coarse: %v wide", high-low)
	}

	// Wait until C has begun a term and A's has ended, then compare the terms.
	var aTerm, cTerm *work
	for deadline := time.Now().Add(2 * tm.lease); ; {
		aTerm, cTerm = nil, nil
		terms := led.snapshot()
		for i := range terms {
			switch terms[i].who {
			case "pod-a":
				aTerm = &terms[i]
			case "pod-c":
				if cTerm == nil {
					cTerm = &terms[i]
				}
			}
		}
		if aTerm != nil && !aTerm.end.IsZero() && cTerm != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("want A's ended term and C's within %v of A's last renew; terms:\n%s", 2*tm.lease, led)
		}
		time.Sleep(10 * time.Millisecond)
	}
	overlap := aTerm.end.Sub(cTerm.start)
	t.Logf("A trusted its term until %v after its last renew; C began %v after it: overlap %v (offset %v, margin %v)",
		aTerm.end.Sub(sent).Round(time.Millisecond), cTerm.start.Sub(sent).Round(time.Millisecond),
		max(overlap, 0).Round(time.Millisecond), tc.offset, margin)
	switch {
	case tc.offset < margin:
		led.check(t, nil) // below the margin the promise holds
	case overlap <= 0 && promoted.Add(tm.retry).Before(aTerm.end):
		t.Errorf("offset %v > margin %v and the failover was done %v before A stopped trusting its term, yet no overlap: C began %v after A's last renew",
			tc.offset, margin, aTerm.end.Sub(promoted), cTerm.start.Sub(sent))
	case overlap <= 0:
		t.Logf("the failover took longer than A's trust (%v): no overlap to show this time", aTerm.end.Sub(sent))
	}
}

// clockSkew returns how far the server's clock (TIME) is ahead of the local one.
func clockSkew(ctx context.Context, c *redis.Client) (time.Duration, error) {
	before := time.Now()
	now, err := c.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("TIME: %w", err)
	}
	mid := before.Add(time.Since(before) / 2)
	return now.Sub(mid), nil
}
