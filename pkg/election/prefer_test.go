package election_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

func withPriority(p int64) option {
	return func(c *election.Config) { c.Priority = p }
}

// preferPeriod is the settle period and the minimum hold of preferred leadership at testLease.
const preferPeriod = 2 * testLease

// waitCandidates waits until r's heartbeats list n candidates.
func waitCandidates(t *testing.T, c *cluster, r *replica, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * testLease)
	for len(r.e.Status().Candidates) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s lists candidates %v; want %d; timeline:\n%s", r.name, r.e.Status().Candidates, n, c.tl)
		}
		time.Sleep(testLease / 20)
	}
}

// TestPreferPriorityHandsOverOnce: a leader of priority 0 hands over to a candidate of
// priority 5 that joined, once it settled and the term lasted the minimum hold; nothing moves
// after that (a candidate of equal priority joining is not better), and no two terms overlap.
func TestPreferPriorityHandsOverOnce(t *testing.T) {
	c := newCluster(t, 1)
	low, _, from := currentLeader(t, c)
	joined := time.Now()
	c.add("pod-hi", withPriority(5))
	next, i := c.tl.waitFor(t, from, 30*testLease, "pod-hi's term", func(ev event) bool { return ev.kind == "start" })
	if next.who != "pod-hi" {
		t.Fatalf("next term is %s's, want pod-hi's; timeline:\n%s", next.who, c.tl)
	}
	// The handover came through the resign path, after the settle period.
	if waited := time.Since(joined); waited < preferPeriod {
		t.Errorf("handed over %v after pod-hi joined, before the settle period %v", waited, preferPeriod)
	}
	c.add("pod-hi2", withPriority(5))
	waitCandidates(t, c, c.byName("pod-hi"), 3)
	time.Sleep(2*preferPeriod + 2*testLease)
	for _, ev := range c.tl.snapshot()[i+1:] {
		if ev.kind == "start" {
			t.Errorf("leadership moved again, to %s (token %d): a candidate of equal priority is not better; timeline:\n%s", ev.who, ev.token, c.tl)
		}
	}
	if !c.byName("pod-hi").e.IsLeader() || low.e.IsLeader() {
		t.Errorf("pod-hi leads %v, %s leads %v", c.byName("pod-hi").e.IsLeader(), low.name, low.e.IsLeader())
	}
	c.tl.checkNoOverlap(t)
}

// TestPreferStopReleaseTargetsHighest: a leader that stops (Run's ctx cancelled) before the
// settle period reserves its release for the live candidate of the highest priority: of five
// replicas of priority 0 and one of 1, the one of 1 leads next (an untargeted release lets
// any of the five win the race).
func TestPreferStopReleaseTargetsHighest(t *testing.T) {
	c := newCluster(t, 1)
	first, _, from := currentLeader(t, c)
	for i := 1; i <= 4; i++ {
		c.add(fmt.Sprintf("pod-%d", i))
	}
	waitCandidates(t, c, first, 5)
	joined := time.Now()
	c.add("pod-new", withPriority(1))
	waitCandidates(t, c, first, 6)
	if !first.e.IsLeader() || time.Since(joined) >= preferPeriod {
		t.Skipf("inconclusive: %s no longer leads or the settle period passed before the stop (the machine stalled for %v)", first.name, time.Since(joined))
	}
	first.stop()
	next, _ := c.tl.waitFor(t, from, 20*testLease, "the next term", func(ev event) bool { return ev.kind == "start" })
	if next.who != "pod-new" {
		t.Fatalf("after %s stopped, %s leads; want pod-new, of the highest priority; timeline:\n%s", first.name, next.who, c.tl)
	}
	c.tl.checkNoOverlap(t)
}

// TestPreferStopReadsRegistryAfresh: a leader stopped just after a candidate of a higher
// priority joined, before any of its own heartbeats saw it (a rolling update's new pod that
// became Ready, after which the leader's pod is deleted at once), still reserves its release
// for it: the stop reads the registry afresh. The newcomer's connection is slowed so that it
// would lose an untargeted release's race to the four others.
func TestPreferStopReadsRegistryAfresh(t *testing.T) {
	c := newCluster(t, 1, withPriority(1))
	first, _, from := currentLeader(t, c)
	for i := 1; i <= 4; i++ {
		c.add(fmt.Sprintf("pod-%d", i), withPriority(1))
	}
	waitCandidates(t, c, first, 5)
	registry, err := leasekit.New(c.srv.Client(t), "test-lease", lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The newcomer must join between two of the leader's heartbeats; when one of them saw it
	// first, the newcomer leaves and another one joins.
	var newcomer string
	for attempt := 1; newcomer == ""; attempt++ {
		if attempt > 5 {
			t.Skipf("inconclusive: %d times a heartbeat of %s saw the newcomer before the stop (a loaded machine)", attempt-1, first.name)
		}
		name := fmt.Sprintf("pod-new-%d", attempt)
		joined := time.Now()
		r := c.add(name, withPriority(2))
		r.proxy.SetLatency(testRetry / 5)
		for {
			reg, err := registry.ReadCandidates(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if reg.Has(name) {
				break
			}
			if time.Since(joined) > 20*testLease {
				t.Fatalf("%s is not in the registry after %v: %v", name, time.Since(joined), reg.Identities())
			}
			time.Sleep(time.Millisecond)
		}
		if !first.e.IsLeader() {
			t.Skipf("inconclusive: %s no longer leads (a renew deadline missed on a loaded machine); timeline:\n%s", first.name, c.tl)
		}
		if !slices.Contains(first.e.Status().Candidates, name) {
			newcomer = name
			break
		}
		r.stop()
		waitCandidates(t, c, first, 5)
	}
	first.stop()
	next, _ := c.tl.waitFor(t, from, 20*testLease, "the next term", func(ev event) bool { return ev.kind == "start" })
	if next.who != newcomer {
		t.Fatalf("after %s stopped, %s leads; want %s, of the highest priority, which joined after %s's last heartbeat; timeline:\n%s", first.name, next.who, newcomer, first.name, c.tl)
	}
	c.tl.checkNoOverlap(t)
}

// TestPreferEqualStopReleaseUntargeted: among replicas of one priority nothing is reserved at a
// stop: the remaining replica takes over at once.
func TestPreferEqualStopReleaseUntargeted(t *testing.T) {
	c := newCluster(t, 1, withPriority(3))
	first, _, from := currentLeader(t, c)
	c.add("pod-1", withPriority(3))
	waitCandidates(t, c, first, 2)
	first.stop()
	next, _ := c.tl.waitFor(t, from, 20*testLease, "the next term", func(ev event) bool { return ev.kind == "start" })
	if next.who != "pod-1" {
		t.Fatalf("next term is %s's", next.who)
	}
}
