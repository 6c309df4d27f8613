package k8s

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestControllerRuntimeHandover: examples/controller-runtime, a controller-runtime manager
// with one reconciler, as 3 replicas electing on elector's Redis lock (adapters/clientgo)
// and, in the same run, as 3 replicas of the same image on a Kubernetes Lease
// (LeaderElectionResourceLock "leases"), both with LeaderElectionReleaseOnCancel and the
// shared durations. Samples alternate between the two: the leader pod is deleted (graceful)
// and the handover is the time from its SIGTERM (its journal's cancel entry) to the new
// leader's first reconcile (the time it stamped on the ConfigMap). Figures only: asserted are
// a new leader every time and no two leaders in either journal.
func TestControllerRuntimeHandover(t *testing.T) {
	ctx := context.Background()
	n := 8
	if v, err := strconv.Atoi(os.Getenv("E2E_CR_SAMPLES")); err == nil && v > 0 {
		n = v
	}
	fleets := []struct {
		label string
		f     *crFleet
		took  []time.Duration
	}{
		{label: "redis", f: e.crDeploy(t, ctx, "cr-redis", "redis")},
		{label: "lease", f: e.crDeploy(t, ctx, "cr-lease", "lease")},
	}
	for i := range n {
		for k := range fleets {
			fl := &fleets[k]
			e.crWaitRollout(t, ctx, fl.f, 3*time.Minute)
			old, _ := e.crWaitLeader(t, ctx, fl.f, "")
			deleted := time.Now()
			if err := e.cs.CoreV1().Pods(fl.f.ns).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			next, at := e.crWaitLeader(t, ctx, fl.f, old)
			from := lastCancel(e.crJournal(t, ctx, fl.f), old)
			if from.IsZero() || from.Before(deleted) {
				t.Logf("%s: no cancel entry of %s after its delete: measured from the delete", fl.label, old)
				from = deleted
			}
			fl.took = append(fl.took, at.Sub(from))
			t.Logf("%s sample %d: %s -> %s: reconciler running %v after the leader's SIGTERM", fl.label, i+1, old, next, at.Sub(from).Round(time.Millisecond))
		}
	}
	for _, fl := range fleets {
		l := analyze(e.crJournal(t, ctx, fl.f))
		for _, o := range l.overlaps {
			t.Errorf("%s: %s", fl.label, o)
		}
		med, mx := medianMax(fl.took)
		t.Logf("%s: handover (SIGTERM -> new leader's reconcile) %s; median %.3fs, max %.3fs; %d terms, %d overlaps",
			fl.label, fmtDurations(fl.took), med, mx, l.starts, len(l.overlaps))
		e.figure("cr_"+fl.label+"_handover_median_s", med)
		e.figure("cr_"+fl.label+"_handover_max_s", mx)
		e.figure("cr_"+fl.label+"_handover_samples", len(fl.took))
		e.figure("cr_"+fl.label+"_overlaps", len(l.overlaps))
	}
}
