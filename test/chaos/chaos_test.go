//go:build linux

package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/elector/elector/internal/testing/redistest"
)

// Environment variables of the chaos test (see the package comment).
const (
	envDuration = "ELECTOR_CHAOS_DURATION"
	envSeed     = "ELECTOR_CHAOS_SEED"
	envDir      = "ELECTOR_CHAOS_DIR"
)

const (
	defaultDuration = 2 * time.Minute
	shortDuration   = 20 * time.Second
)

// chaosConfig reads the duration, seed and log directory from the environment.
func chaosConfig(t *testing.T) (d time.Duration, seed int64, dir string) {
	d = defaultDuration
	if testing.Short() {
		d = shortDuration
	}
	if s := os.Getenv(envDuration); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 10m", envDuration, s)
		}
	}
	seed = time.Now().UnixNano()
	if s := os.Getenv(envSeed); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: want an integer", envSeed, s)
		}
	}
	dir = os.Getenv(envDir)
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return d, seed, dir
}

// reproduce returns the command that runs the same schedule of faults again.
func reproduce(d time.Duration, seed int64) string {
	timeout := (d + 5*time.Minute).Round(time.Minute)
	return fmt.Sprintf("ELECTOR_REQUIRE_REDIS=1 %s=%v %s=%d go test -race -count=1 -timeout %v -run 'TestChaos$' -v ./test/chaos",
		envDuration, d, envSeed, seed, timeout)
}

// TestChaos runs five `elector run` replicas through random faults and checks the workers'
// fenced writes (see the package comment and Check).
func TestChaos(t *testing.T) {
	redistest.ServerPath(t) // skip (or fail in CI) before building anything
	d, seed, dir := chaosConfig(t)
	t.Logf("seed %d, %v of faults; reproduce with:\n  %s", seed, d, reproduce(d, seed))
	if os.Getenv(envDir) != "" {
		t.Logf("logs of the run are kept in %s", dir)
	}

	h := newHarness(t, seed, dir)
	ctx, stopDrain := context.WithCancel(context.Background())
	drained := make(chan struct{})
	go h.drainer(ctx, drained)
	defer func() {
		stopDrain()
		<-drained
	}()

	watched := make(chan struct{})
	go h.watchStalls(ctx, watched)
	observed := make(chan struct{})
	if err := h.observe(ctx, observed); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopDrain()
		<-observed
		<-watched
	}()

	h.start = time.Now()
	h.startReplicas()
	if !h.waitRecovered(h.start, 0, 30*time.Second) {
		t.Fatalf("no worker had a write accepted within 30s of starting %d replicas", replicas)
	}
	faultsFrom := time.Now()
	h.schedule(faultsFrom.Add(d))
	end := time.Now()

	for _, r := range h.replicas {
		r.stop(10 * time.Second)
	}
	stopDrain()
	<-drained
	h.drainMu.Lock()
	if err := h.drainLocked(); err != nil {
		h.problem("final read of the accepted writes: %v", err)
	}
	h.drainMu.Unlock()
	// No worker and no elector may outlive the electors' exit.
	time.Sleep(200 * time.Millisecond)
	for _, pid := range processesOf(h.worker, h.elector) {
		h.problem("process %d (%s) still runs after every elector exited", pid, exeOf(pid))
	}

	workers := h.readWorkers() // may record problems: before the events are copied
	electorEvents, electorAcquired := h.electorLogs()
	h.mu.Lock()
	run := Run{
		Seed: seed, Lease: leaseDuration, Bound: leaderlessBound,
		Start: faultsFrom, End: end,
		Workers: workers, Faults: h.faults, Epochs: h.epochs,
		Acquired: append(slices.Clone(h.acquired), electorAcquired...),
		Events:   append(slices.Clone(h.events), electorEvents...),
		Stalls:   slices.Clone(h.stalls),
	}
	h.mu.Unlock()

	rep := Check(run)
	t.Logf("\n%s", rep.Summary())
	if os.Getenv(envDir) != "" {
		writeReport(t, dir, rep)
	}
	t.Logf("reproduce with:\n  %s", reproduce(d, seed))
	if rep.Failed() {
		t.Errorf("\n%s", rep.Failure())
		if os.Getenv(envDir) == "" {
			t.Logf("set %s=DIR to keep the logs of the electors and workers and the whole timeline", envDir)
		}
	}
}

// exeOf returns the executable of pid, for messages.
func exeOf(pid int) string {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return "?"
	}
	return exe
}

// writeReport writes the summary and the whole timeline into dir.
func writeReport(t *testing.T, dir string, rep *Report) {
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(rep.Summary()), 0o644); err != nil {
		t.Error(err)
	}
	f, err := os.Create(filepath.Join(dir, "timeline.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := rep.WriteTimeline(f); err != nil {
		t.Error(err)
	}
}
