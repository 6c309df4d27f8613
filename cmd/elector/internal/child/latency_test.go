//go:build linux

package child

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// figuresEnv enables TestShimLatencyFigures, which only measures (docs/CLI.md quotes it):
//
//	ELECTOR_CHILD_FIGURES=1 hack/under-load.sh go test -count=1 -run TestShimLatencyFigures -v ./internal/child/
const figuresEnv = "ELECTOR_CHILD_FIGURES"

// latencies formats the median, 90th percentile and maximum of ds.
func latencies(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("p50 %v, p90 %v, max %v (n=%d)", r(s[len(s)/2]), r(s[len(s)*9/10]), r(s[len(s)-1]), len(s))
}

// TestShimLatencyFigures measures what the shim adds to the time between a lost leadership
// and the command's death, which comes out of the margin between --kill-grace and its
// bound: Start (a term that ends while its command starts is stopped once Start returns),
// the /proc walk, and Kill until Wait returns for a tree with an orphan in another session;
// and Stop of a command that exits on SIGTERM, the path of a handover.
// Each is measured with and without the shim in the same run, so the difference is the
// shim's. It asserts nothing.
func TestShimLatencyFigures(t *testing.T) {
	if os.Getenv(figuresEnv) == "" {
		t.Skipf("set %s=1 to measure", figuresEnv)
	}
	const n = 40
	for _, shim := range []bool{false, true} {
		var starts, kills []time.Duration
		for i := range n {
			pidFile := filepath.Join(t.TempDir(), fmt.Sprint(i))
			spec := Spec{Shim: shim, Path: "sh", Env: []string{"PIDS=" + pidFile, "PATH=" + os.Getenv("PATH")},
				Args: []string{"-c", treeScript + "while :; do sleep 0.05; done"}}
			begin := time.Now()
			p, err := Start(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			starts = append(starts, time.Since(begin))
			for _, pid := range waitPids(t, pidFile, 3) {
				killLong(t, pid)
			}
			begin = time.Now()
			p.Kill()
			p.Wait()
			kills = append(kills, time.Since(begin))
		}
		var stops []time.Duration
		for range n {
			// The handover's path: a command that exits on the stop signal.
			p, err := Start(context.Background(), Spec{Shim: shim, Path: "sleep", Args: []string{long}})
			if err != nil {
				t.Fatal(err)
			}
			killLong(t, p.CommandPid())
			begin := time.Now()
			p.Stop(context.Background())
			stops = append(stops, time.Since(begin))
		}
		t.Logf("shim %v: Start %s; Kill until Wait returns %s; Stop (SIGTERM, CMD exits on it) until it returns %s",
			shim, latencies(starts), latencies(kills), latencies(stops))
	}
	var walks []time.Duration
	procs, _ := os.ReadDir("/proc")
	for range 200 {
		begin := time.Now()
		descendants(os.Getpid())
		walks = append(walks, time.Since(begin))
	}
	t.Logf("/proc walk (%d entries in /proc): %s", len(procs), latencies(walks))
}

// TestStandbyLatencyFigures measures where the start of a command under the shim goes, the
// path of every handover and takeover of `elector run`: Start without the shim (the command's
// fork and exec), Start with a cold shim (this program's fork, exec and runtime start, the
// go-ahead, then the command's fork and exec) and Standby.Start of a shim prepared ahead (the
// go-ahead and the command's fork and exec only), interleaved. Start returns once the
// command has been executed. It asserts nothing (docs/PERFORMANCE.md quotes it):
//
//	ELECTOR_CHILD_FIGURES=1 go test -count=1 -run TestStandbyLatencyFigures -v ./internal/child/
func TestStandbyLatencyFigures(t *testing.T) {
	if os.Getenv(figuresEnv) == "" {
		t.Skipf("set %s=1 to measure", figuresEnv)
	}
	const n = 60
	var direct, cold, warm []time.Duration
	run := func(out *[]time.Duration, start func() (*Process, error)) {
		begin := time.Now()
		p, err := start()
		if err != nil {
			t.Fatal(err)
		}
		*out = append(*out, time.Since(begin))
		p.Stop(context.Background())
	}
	spec := Spec{Path: "sleep", Args: []string{long}}
	for range n {
		run(&direct, func() (*Process, error) { return Start(context.Background(), spec) })
		shim := spec
		shim.Shim = true
		run(&cold, func() (*Process, error) { return Start(context.Background(), shim) })
		sb := Prepare(shim)
		time.Sleep(50 * time.Millisecond) // a follower's shim waits long before its term
		run(&warm, func() (*Process, error) { return sb.Start(context.Background(), nil) })
	}
	t.Logf("Start without shim (fork+exec of CMD): %s", latencies(direct))
	t.Logf("Start, cold shim (shim exec + runtime start + go-ahead + CMD): %s", latencies(cold))
	t.Logf("Standby.Start, shim prepared 50ms ahead (go-ahead + CMD): %s", latencies(warm))
}
