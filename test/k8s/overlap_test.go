package k8s

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// deletionsPerMode is E2E_DELETIONS (default 7): the leader-pod deletions of each mode of
// TestPodDeletionOverlap, 21 in all by default.
func deletionsPerMode(t *testing.T) int {
	v := os.Getenv("E2E_DELETIONS")
	if v == "" {
		return 7
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("E2E_DELETIONS=%q: want a positive number", v)
	}
	return n
}

// TestPodDeletionOverlap (issue 48): delete the leader's pod again and again, in the three
// ways the chart stops a leader's pod, and read from the app's own records (worker active:
// the time it started and stopped the singleton work) that the old pod's app had stopped
// before the new leader's app started: 0 overlaps, asserted; the gap between them measured.
// The app goes on working for 1 s after SIGTERM, as an app finishing its work does:
//   - native sidecar: the elector stops after the app, and releases then;
//   - plain sidecar with sidecar.lifecycle.preStop sleep 2s: the elector keeps the lease
//     2 s after SIGTERM reached the app;
//   - run mode: elector run stops the command (1 s, within run.killGrace 3.5s), then releases.
func TestPodDeletionOverlap(t *testing.T) {
	sideBySide(t)
	ctx := context.Background()
	n := deletionsPerMode(t)
	const stopDelay = time.Second
	modes := []struct {
		name   string
		values []string
		lease  time.Duration
	}{
		{"native", []string{"--set", "sidecar.native=true"}, leaseDuration},
		{"plain", []string{"--set", "sidecar.native=false",
			"--set-json", `sidecar.lifecycle={"preStop":{"sleep":{"seconds":2}}}`}, leaseDuration},
		// The kill grace must stay within lease.duration - renewDeadline - the drift margin
		// (3.918 s with 8s/4s), as in TestRunMode; 3.5 s leaves the app's 1 s stop and its
		// last write room on a loaded machine.
		{"run", []string{"--set", "mode=run", "--set", "lease.duration=8s", "--set", "lease.renewDeadline=4s",
			"--set", "run.killGrace=3500ms"}, 8 * time.Second},
	}
	total := 0
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			total += deletionOverlap(t, ctx, "del-"+m.name, m.values, m.lease, stopDelay, n)
		})
	}
	e.figure("deletion_overlap_deletions", total)
}

// deletionOverlap installs a release of 2 replicas running worker active and deletes the
// leader's pod n times, each time once the replacement is Ready again.
func deletionOverlap(t *testing.T, ctx context.Context, name string, values []string, lease, stopDelay time.Duration, n int) int {
	key := "e2e:{" + name + "}:activity"
	e.redis.Del(ctx, key)
	r := e.install(t, ctx, name, append(append([]string{"--set", "replicaCount=2"}, values...), e.workerActiveValues(key, stopDelay)...)...)
	// Generous bounds from the configured timings: a pod's grace period (the chart's 30 s
	// default), a lease that expires, and a pod start on a loaded machine.
	settleLimit := 3 * time.Minute
	handoverLimit := 30*time.Second + 2*lease + time.Minute

	type deletion struct {
		old      interval
		t0       time.Time
		newStart interval
	}
	var ds []deletion
	start := time.Now()
	for i := range n {
		holder, token, work := e.settledWork(t, ctx, r, 2, key, settleLimit)
		// The elector's log of the pod to delete, printed should the test fail.
		if slices.Contains(values, "mode=run") {
			e.followLog(t, ctx, holder, r.appContainer(), "Started the command")
		} else {
			e.followLog(t, ctx, holder, "elector", "")
		}
		t0 := time.Now()
		e.kubectlDelete(t, ctx, holder, false)
		var next interval
		if err := waitUntil(ctx, handoverLimit, func() error {
			acts, err := e.activities(ctx, key)
			if err != nil {
				return err
			}
			for _, iv := range spans(acts, "start", "stop") {
				if iv.instance != work.instance && iv.token > token {
					next = iv
					return nil
				}
			}
			return fmt.Errorf("no app started working in a term after %d", token)
		}); err != nil {
			t.Fatalf("deletion %d of %s: %v", i+1, holder, err)
		}
		ds = append(ds, deletion{old: work, t0: t0, newStart: next})
		t.Logf("deletion %d: %s (token %d, app %s) deleted; %s's app started %v later", i+1, holder, token, work.instance, next.pod, next.start.Sub(t0).Round(time.Millisecond))
	}
	elapsed := time.Since(start)
	// Every deleted pod's app recorded its stop (it has 30 s of grace).
	var acts []activity
	if err := waitUntil(ctx, time.Minute, func() error {
		var err error
		if acts, err = e.activities(ctx, key); err != nil {
			return err
		}
		ivs := spans(acts, "start", "stop")
		for _, d := range ds {
			for _, iv := range ivs {
				if iv.instance == d.old.instance && iv.token == d.old.token && iv.stop.IsZero() {
					return fmt.Errorf("the app of %s has not recorded its stop", d.old.pod)
				}
			}
		}
		return nil
	}); err != nil {
		for _, a := range acts {
			t.Logf("record: %s %s %d %s %s", a.pod, a.instance, a.token, a.at.Format("15:04:05.000"), a.event)
		}
		t.Fatal(err)
	}
	work := spans(acts, "start", "stop")
	for _, o := range overlaps(work) {
		t.Errorf("%s: two apps working at once: %s", name, o)
	}
	var gaps, handovers []time.Duration
	for i, d := range ds {
		var stop time.Time
		for _, iv := range work {
			if iv.instance == d.old.instance && iv.token == d.old.token {
				stop = iv.stop
			}
		}
		gap := d.newStart.start.Sub(stop)
		gaps = append(gaps, gap)
		handovers = append(handovers, d.newStart.start.Sub(d.t0))
		t.Logf("deletion %d: %s's app stopped %v after the delete; %s's app started %v after that (%v after the delete)",
			i+1, d.old.pod, stop.Sub(d.t0).Round(time.Millisecond), d.newStart.pod, gap.Round(time.Millisecond), d.newStart.start.Sub(d.t0).Round(time.Millisecond))
	}
	gm, gx := medianMax(gaps)
	hm, hx := medianMax(handovers)
	minGap := gaps[0]
	for _, g := range gaps {
		minGap = min(minGap, g)
	}
	t.Logf("%s: %d deletions in %v, %d work spans, %d overlaps; gap stop→start median %.3fs max %.3fs min %.3fs; delete→new start median %.3fs max %.3fs",
		name, n, elapsed.Round(time.Second), len(work), len(overlaps(work)), gm, gx, secs(minGap), hm, hx)
	label := strings.ReplaceAll(name, "-", "_")
	e.figure(label+"_deletions", n)
	e.figure(label+"_overlaps", len(overlaps(work)))
	e.figure(label+"_gap_median_s", gm)
	e.figure(label+"_gap_max_s", gx)
	e.figure(label+"_gap_min_s", secs(minGap))
	e.figure(label+"_delete_to_start_median_s", hm)
	e.figure(label+"_delete_to_start_max_s", hx)
	return n
}
