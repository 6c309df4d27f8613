package k8s

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestControllerMigration: a running fleet of examples/controller-runtime (3 replicas, a
// Deployment rolled one surge pod at a time) moved from a Kubernetes Lease to elector by
// rolling updates: --lock=lease, then --lock=lease+redis (clientgo.DualLock: both locks),
// then --lock=redis, and back: lease+redis, then lease (E2E_MIGRATION_ROUNDS=n: n times). Each rollout
// completes before the next starts (as docs/CONTROLLERS.md says). Every replica journals its
// starts and stops of leading in Redis: asserted are 0 overlaps and a leader after every
// stage; the gaps with no leader are figures.
func TestControllerMigration(t *testing.T) {
	ctx := context.Background()
	// There and back: about 5 s a rollout here. E2E_MIGRATION_ROUNDS=n does it n times.
	rounds := 1
	if v, err := strconv.Atoi(os.Getenv("E2E_MIGRATION_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	var stages []string
	for range rounds {
		stages = append(stages, "lease+redis", "redis", "lease+redis", "lease")
	}
	f := e.crDeploy(t, ctx, "cr-migrate", "lease")
	start := time.Now()
	for _, lock := range stages {
		t0 := time.Now()
		e.crSetLock(t, ctx, f, lock)
		e.crWaitRollout(t, ctx, f, 5*time.Minute)
		by, _ := e.crWaitLeader(t, ctx, f, "")
		l := analyze(e.crJournal(t, ctx, f))
		t.Logf("rolled to --lock=%s in %v; %s leads; so far %d terms, %d overlaps, gaps %s",
			lock, time.Since(t0).Round(time.Millisecond), by, l.starts, len(l.overlaps), fmtDurations(l.gaps))
	}
	l := analyze(e.crJournal(t, ctx, f))
	for _, o := range l.overlaps {
		t.Error(o)
	}
	if len(l.gaps) == 0 {
		t.Error("no handover in the whole migration: the rolling updates replaced no leader?")
	}
	med, mx := medianMax(l.gaps)
	var total time.Duration
	for _, g := range l.gaps {
		total += g
	}
	t.Logf("migration lease -> %v in %v: %d terms, %d overlaps, gaps with no leader %s (median %.3fs, max %.3fs, total %v)",
		stages, time.Since(start).Round(time.Second), l.starts, len(l.overlaps), fmtDurations(l.gaps), med, mx, total.Round(time.Millisecond))
	e.figure("cr_migration_stages", len(stages)+1)
	e.figure("cr_migration_terms", l.starts)
	e.figure("cr_migration_overlaps", len(l.overlaps))
	e.figure("cr_migration_gap_median_s", med)
	e.figure("cr_migration_gap_max_s", mx)
	e.figure("cr_migration_no_leader_total_s", secs(total))
}
