package election_test

import (
	"testing"
	"time"

	"github.com/elector/elector/pkg/election"
)

func withCandidacy(cy election.Candidacy) option {
	return func(c *election.Config) { c.Candidacy = cy }
}

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

// TestPreferPriorityHandsOverOnce: with Prefer priority, a leader of priority 0 hands over to a
// candidate of priority 5 that joined, once it settled and the term lasted MinHold; nothing
// moves after that (a candidate of equal priority joining is not better), and no two terms
// overlap.
func TestPreferPriorityHandsOverOnce(t *testing.T) {
	cy := election.Candidacy{Prefer: election.PreferPriority, Settle: 2 * testLease, MinHold: 2 * testLease}
	c := newCluster(t, 1, withCandidacy(cy))
	low, _, from := currentLeader(t, c)
	hiCy := cy
	hiCy.Priority = 5
	joined := time.Now()
	c.add("pod-hi", withCandidacy(hiCy))
	next, i := c.tl.waitFor(t, from, 30*testLease, "pod-hi's term", func(ev event) bool { return ev.kind == "start" })
	if next.who != "pod-hi" {
		t.Fatalf("next term is %s's, want pod-hi's; timeline:\n%s", next.who, c.tl)
	}
	// The handover came through the resign path, after the settle period.
	if waited := time.Since(joined); waited < cy.Settle {
		t.Errorf("handed over %v after pod-hi joined, before the settle period %v", waited, cy.Settle)
	}
	c.add("pod-hi2", withCandidacy(hiCy))
	waitCandidates(t, c, c.byName("pod-hi"), 3)
	time.Sleep(cy.Settle + cy.MinHold + 2*testLease)
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

// TestPreferNewestTargetsStopRelease: with Prefer newest and a settle period too long to act
// on, a leader that stops (Run's ctx cancelled) reserves its release for the newest live
// candidate: of three v1 replicas and one v2, the v2 one leads next.
func TestPreferNewestTargetsStopRelease(t *testing.T) {
	old := election.Candidacy{Version: "app v1.0.0", Prefer: election.PreferNewest, Settle: time.Hour}
	c := newCluster(t, 1, withCandidacy(old))
	first, _, from := currentLeader(t, c)
	c.add("pod-1", withCandidacy(old))
	newer := old
	newer.Version = "app v1.1.0"
	c.add("pod-new", withCandidacy(newer))
	c.add("pod-3", withCandidacy(old))
	waitCandidates(t, c, first, 4)
	first.stop()
	next, _ := c.tl.waitFor(t, from, 20*testLease, "the next term", func(ev event) bool { return ev.kind == "start" })
	if next.who != "pod-new" {
		t.Fatalf("after %s stopped, %s leads; want pod-new, the newest; timeline:\n%s", first.name, next.who, c.tl)
	}
	c.tl.checkNoOverlap(t)
}

// TestPreferNoneStopReleaseUntargeted: without a preference nothing is reserved at a stop:
// the remaining replica takes over at once, whatever the versions.
func TestPreferNoneStopReleaseUntargeted(t *testing.T) {
	c := newCluster(t, 1, withCandidacy(election.Candidacy{Version: "v1"}))
	first, _, from := currentLeader(t, c)
	c.add("pod-1", withCandidacy(election.Candidacy{Version: "v0"}))
	waitCandidates(t, c, first, 2)
	first.stop()
	next, _ := c.tl.waitFor(t, from, 20*testLease, "the next term", func(ev event) bool { return ev.kind == "start" })
	if next.who != "pod-1" {
		t.Fatalf("next term is %s's", next.who)
	}
}
