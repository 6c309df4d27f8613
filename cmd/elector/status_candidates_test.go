package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// TestStatusCandidates: two Electors run for a lease (one with the version the command
// advertises); readCandidates lists both, as the observer reads them, with the leader marked,
// and printCandidates writes the section.
func TestStatusCandidates(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	const name = "status-candidates"
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var electors []*election.Elector
	for _, id := range []string{"pod-b", "pod-a"} {
		var priority int64
		if id == "pod-a" {
			priority = 7
		}
		e, err := election.New(election.Config{Client: client, LeaseName: name, Identity: id,
			LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 300 * time.Millisecond,
			Priority:  priority,
			Callbacks: election.Callbacks{OnStartedLeading: func(ctx context.Context) { <-ctx.Done() }}})
		if err != nil {
			t.Fatal(err)
		}
		if id == "pod-a" {
			leasekit.SetCandidateVersion(e, "v1.4.2")
		}
		electors = append(electors, e)
		go func() { _ = e.Run(ctx) }()
	}
	l, err := leasekit.New(client, name, lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	co := &commonOptions{}
	co.lease.name = name
	var rows []candidateStatus
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := l.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rows, err = readCandidates(ctx, co, l, st.Record.Identity, st.Record.Instance); err != nil {
			t.Fatal(err)
		}
		if len(rows) == 2 && st.Held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("candidates %+v, lease %+v; want pod-a and pod-b, one leading", rows, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	leaders := 0
	for _, r := range rows {
		if r.Leader {
			leaders++
		}
		if r.LastSeenMs < 0 || r.LastSeenMs > 2000 || r.LastSeen.IsZero() {
			t.Errorf("%s last seen %v, %d ms ago", r.Identity, r.LastSeen, r.LastSeenMs)
		}
	}
	if rows[0].Identity != "pod-a" || rows[0].Version != "v1.4.2" || rows[0].Priority != 7 || rows[1].Identity != "pod-b" || rows[1].Priority != 0 || leaders != 1 {
		t.Fatalf("candidates %+v; want pod-a (v1.4.2, priority 7) and pod-b, one the leader", rows)
	}
	var b strings.Builder
	if err := printCandidates(&b, rows); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^candidates: +2\n  pod-a +version v1\.4\.2, priority 7, seen \d+(\.\d+)?m?s ago, instance [0-9a-f]+( \(leader\))?\n  pod-b +version (-|v\S+), priority 0, seen`)
	if !re.MatchString(b.String()) {
		t.Errorf("printCandidates:\n%s", b.String())
	}
	t.Logf("printCandidates:\n%s", b.String())
	cancel()
	// After Run returned, each replica left the registry (no wait for its expiry).
	deadline = time.Now().Add(10 * time.Second)
	for len(rows) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		rows, _ = readCandidates(t.Context(), co, l, "", "")
	}
	if len(rows) != 0 {
		t.Errorf("after Run returned the registry lists %+v", rows)
	}
}
