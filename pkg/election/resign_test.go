package election_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/election"
)

// holdOff is the hold-off of these tests: several lease durations, so that a replica that
// took the lease back at once (no reservation) would be seen.
const holdOff = 4 * testLease

func withHoldOff(d time.Duration) option {
	return func(c *election.Config) { c.ResignHoldOff = d }
}

// currentLeader waits for the single leader and its start on the timeline (IsLeader turns
// true just before OnStartedLeading records it), and returns the index after the start.
func currentLeader(t *testing.T, c *cluster) (*replica, event, int) {
	t.Helper()
	r := c.leader(10 * testLease)
	tok := r.e.Status().Token
	start, i := c.tl.waitFor(t, 0, 10*testLease, "the leader's start", func(ev event) bool {
		return ev.who == r.name && ev.kind == "start" && ev.token == tok
	})
	return r, start, i + 1
}

// resignLeader makes the current leader resign (to target, "" for anyone) and returns it, its
// term's start, the timeline index after it, and the time just before the call that worked.
// A leader that lost its term between being found and resigning (a renew deadline missed on
// a loaded machine: ErrNotLeader) is no failure of Resign: the new leader is found and asked.
func resignLeader(t *testing.T, c *cluster, target string) (old *replica, oldStart event, from int, before time.Time) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		old, oldStart, from = currentLeader(t, c)
		before = time.Now()
		err := old.e.ResignTo(context.Background(), target)
		if err == nil {
			return old, oldStart, from, before
		}
		// Refused by the candidate registry (nothing written): a follower's heartbeat lapsed on
		// a loaded machine, or has not come yet after a start. It comes within a third of the
		// lease duration.
		refused := errors.Is(err, leasekit.ErrNotCandidate) || errors.Is(err, leasekit.ErrNoSuccessor)
		if !(errors.Is(err, election.ErrNotLeader) || refused) || attempt == 5 {
			t.Fatalf("%s: ResignTo(%q) = %v (attempt %d)", old.name, target, err, attempt)
		}
		if refused {
			t.Logf("%s: ResignTo(%q) refused (%v); trying again after a heartbeat period", old.name, target, err)
			time.Sleep(testLease / 3)
			continue
		}
		t.Logf("%s lost its term before ResignTo (%v); asking the next leader", old.name, err)
	}
}

// resignAndWait makes the leader resign (to target, "" for anyone) and returns the next
// term's start.
func resignAndWait(t *testing.T, c *cluster, target string) (old *replica, next event) {
	t.Helper()
	old, oldStart, from, _ := resignLeader(t, c, target)
	if old.e.IsLeader() {
		t.Fatalf("%s still leads after Resign returned", old.name)
	}
	next, _ = c.tl.waitFor(t, from, 20*testLease, "the next term's start", func(ev event) bool { return ev.kind == "start" })
	if next.token <= oldStart.token {
		t.Fatalf("next term token %d, not above the resigned %d", next.token, oldStart.token)
	}
	if next.who == old.name {
		t.Fatalf("%s resigned and led again at once (token %d); timeline:\n%s", old.name, next.token, c.tl)
	}
	if target != "" && next.who != target {
		t.Fatalf("%s led after ResignTo(%q)", next.who, target)
	}
	return old, next
}

// Resign hands the lease to another replica, again and again, with no overlap and growing
// tokens; the resigning one never takes it back, although it campaigns again at once.
func TestResignHandsOver(t *testing.T) {
	c := newCluster(t, 3, withHoldOff(holdOff))
	for range 6 {
		resignAndWait(t, c, "")
	}
	c.tl.checkNoOverlap(t)
}

// ResignTo names the successor: each follower in turn.
func TestResignToEachFollower(t *testing.T) {
	c := newCluster(t, 3, withHoldOff(holdOff))
	for range 2 {
		for _, r := range c.replicas {
			if l := c.leader(10 * testLease); l != r {
				resignAndWait(t, c, r.name)
			}
		}
	}
	c.tl.checkNoOverlap(t)
}

// ResignTo a target that is no live candidate (a typo, a watcher's name) and Resign with no
// other live candidate are refused before anything is written (issue 46): the error names
// the live candidates (and the near miss), the leader keeps its term, and no hold-off begins.
func TestResignToAbsent(t *testing.T) {
	c := newCluster(t, 3, withHoldOff(holdOff))
	old, oldStart, from := currentLeader(t, c)
	// Every replica advertised itself at its Run's start; wait until the leader's view has all.
	deadline := time.Now().Add(10 * testLease)
	for len(old.e.Status().Candidates) < 3 && time.Now().Before(deadline) {
		time.Sleep(testLease / 10)
	}
	err := old.e.ResignTo(context.Background(), "pod-9")
	if err == nil || !strings.Contains(err.Error(), "not a live candidate") || !strings.Contains(err.Error(), "did you mean") {
		t.Fatalf("ResignTo(pod-9) = %v; want a refusal with a did-you-mean", err)
	}
	t.Logf("ResignTo(pod-9): %v", err)
	time.Sleep(3 * testLease)
	if st := old.e.Status(); !st.IsLeader || st.Token != oldStart.token {
		t.Fatalf("after a refused ResignTo the leader's status is %+v; want its term %d unmoved", st, oldStart.token)
	}
	for _, ev := range c.tl.snapshot()[from:] {
		if ev.kind == "start" || ev.kind == "end" {
			t.Fatalf("a refused ResignTo moved leadership: %+v; timeline:\n%s", ev, c.tl)
		}
	}
}

// A single replica's Resign is refused (nobody could take over): it keeps its term, with no
// hold-off outage.
func TestResignAlone(t *testing.T) {
	c := newCluster(t, 1, withHoldOff(holdOff))
	old, oldStart, _ := currentLeader(t, c)
	deadline := time.Now().Add(10 * testLease)
	for len(old.e.Status().Candidates) < 1 && time.Now().Before(deadline) {
		time.Sleep(testLease / 10)
	}
	err := old.e.ResignTo(context.Background(), "")
	if err == nil || !strings.Contains(err.Error(), "no other live candidate") {
		t.Fatalf("Resign alone = %v; want a refusal", err)
	}
	time.Sleep(2 * testLease)
	if st := old.e.Status(); !st.IsLeader || st.Token != oldStart.token {
		t.Fatalf("after a refused Resign: %+v; want term %d unmoved", st, oldStart.token)
	}
}

// A callback that takes seconds to return after its ctx was cancelled: the lease is renewed
// meanwhile and released only after it returned, so the successor's work never overlaps.
func TestResignSlowCallback(t *testing.T) {
	const wind = 3 * testLease // longer than the lease: only renewals keep it
	c := &cluster{t: t, tl: &timeline{}}
	tl := c.tl // the callbacks use the timeline only, never c, which newClusterWith fills
	slow := func(cfg *election.Config) {
		name := cfg.Identity
		cfg.Callbacks.OnStartedLeading = func(ctx context.Context) {
			tl.add(event{who: name, kind: "start", token: election.TokenFrom(ctx)})
			<-ctx.Done()
			time.Sleep(wind)
			tl.add(event{who: name, kind: "end"})
		}
	}
	newClusterWith(t, c, 3, slow, withHoldOff(holdOff))
	for range 2 {
		resignAndWait(t, c, "") // the successor starts only after the slow work ended
	}
	c.tl.checkNoOverlap(t)
}

// Resign on a follower is refused with ErrNotLeader and changes nothing.
func TestResignFollower(t *testing.T) {
	c := newCluster(t, 2, withHoldOff(holdOff))
	l := c.leader(10 * testLease)
	for _, r := range c.replicas {
		if r == l {
			continue
		}
		if err := r.e.ResignTo(context.Background(), ""); !errors.Is(err, election.ErrNotLeader) {
			t.Fatalf("Resign on follower %s = %v, want ErrNotLeader", r.name, err)
		}
	}
	if !l.e.IsLeader() {
		t.Fatal("a follower's Resign ended the leader's term")
	}
}

// newClusterWith fills c (whose timeline the options may use) with n replicas.
func newClusterWith(t *testing.T, c *cluster, n int, opts ...option) {
	fresh := newCluster(t, 0)
	c.srv = fresh.srv
	for i := range n {
		c.add(fmt.Sprintf("pod-%d", i), opts...)
	}
}

// BenchmarkResign measures a switchover between three replicas on one Redis: from the call
// of Resign (anyone) or ResignTo a follower (to) to the successor's OnStartedLeading, and
// the leaderless gap from the end of the old term's work to it.
//
//	go test -run XXX -bench Resign -benchtime 200x ./pkg/election/ 2>&1 | grep -v '^[IE][0-9]'
func BenchmarkResign(b *testing.B) {
	b.Run("anyone", func(b *testing.B) { benchResign(b, false) })
	b.Run("to", func(b *testing.B) { benchResign(b, true) })
}

func benchResign(b *testing.B, named bool) {
	c := newCluster(b, 3, withHoldOff(holdOff))
	var toStart, gaps []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		old := c.leader(10 * testLease)
		tok := old.e.Status().Token
		_, si := c.tl.waitFor(b, 0, 10*testLease, "the leader's start", func(ev event) bool {
			return ev.who == old.name && ev.kind == "start" && ev.token == tok
		})
		target := ""
		for _, r := range c.replicas {
			if named && r != old {
				target = r.name
				break
			}
		}
		b.StartTimer()
		begin := time.Now()
		if err := old.e.ResignTo(context.Background(), target); err != nil {
			b.Fatal(err)
		}
		next, _ := c.tl.waitFor(b, si+1, 20*testLease, "the next start", func(ev event) bool { return ev.kind == "start" })
		b.StopTimer()
		end, _ := c.tl.waitFor(b, si+1, 20*testLease, "the old work's end", func(ev event) bool { return ev.kind == "end" && ev.who == old.name })
		if target != "" && next.who != target {
			b.Fatalf("%s led after ResignTo(%s)", next.who, target)
		}
		toStart = append(toStart, next.at.Sub(begin))
		gaps = append(gaps, next.at.Sub(end.at))
	}
	p50, _ := percentiles(toStart)
	g50, _ := percentiles(gaps)
	b.ReportMetric(float64(p50.Microseconds()), "µs-to-start-p50")
	b.ReportMetric(float64(slices.Max(toStart).Microseconds()), "µs-to-start-max")
	b.ReportMetric(float64(g50.Microseconds()), "µs-gap-p50")
	b.ReportMetric(float64(slices.Max(gaps).Microseconds()), "µs-gap-max")
	c.tl.checkNoOverlap(b)
}
