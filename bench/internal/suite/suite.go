// Package suite runs the measurements of docs/PERFORMANCE.md against one redis-server that it
// starts, interleaving the systems compared (A B C A B C ...) so that a slow moment of the
// machine hurts all of them alike, and renders the tables and SVG plots.
package suite

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/elector/elector/bench/internal/redisproc"
	"github.com/elector/elector/bench/internal/systems"
)

// Params size a run.
type Params struct {
	// Mode is "full" or "quick".
	Mode string

	// ThroughputRounds repeats every throughput measurement, each ThroughputDur long.
	ThroughputRounds int
	ThroughputDur    time.Duration
	// Concurrency lists the numbers of goroutines (each with its own key) measured.
	Concurrency []int

	// Timing is used by the handover and crash trials (client-go's defaults, scaled).
	Timing systems.Timing
	// TimingScale is the divisor that scaled client-go's defaults down to Timing.
	TimingScale int64
	// HandoverRounds interleave one trial of each peer with ElectorTrials trials of elector.
	HandoverRounds, ElectorTrials int
	// CrashRounds run one crash trial of every system, staggered.
	CrashRounds int

	// LoadTiming is used by the Redis load measurement (client-go's defaults in a full run).
	LoadTiming systems.Timing
	// LoadFollowers lists the numbers of idle followers.
	LoadFollowers []int
	// LoadSettle is waited after all replicas started; then LoadWindows windows of LoadWindow.
	LoadSettle, LoadWindow time.Duration
	LoadWindows            int

	// RenewTiming is the (fast) timing of the leader whose allocations per renew are counted,
	// for RenewDur.
	RenewTiming systems.Timing
	RenewDur    time.Duration

	// SidecarIdle is how long the sidecar idles before its peak RSS is read; SidecarStarts
	// is the number of start-to-leading trials; RunHandovers the number of handovers through
	// `elector run`.
	SidecarIdle                 time.Duration
	SidecarStarts, RunHandovers int

	// GoBenchCount and GoBenchTime are passed to go test -count and -benchtime; 0 skips it.
	GoBenchCount int
	GoBenchTime  string
}

// FullParams is the run that docs/PERFORMANCE.md shows (about 12 minutes on 2 cores).
func FullParams() Params {
	return Params{
		Mode:             "full",
		ThroughputRounds: 15, ThroughputDur: 400 * time.Millisecond, Concurrency: []int{1, 16},
		Timing: systems.DefaultTiming.Scale(8), TimingScale: 8,
		HandoverRounds: 60, ElectorTrials: 4,
		CrashRounds:   30,
		LoadTiming:    systems.DefaultTiming,
		LoadFollowers: []int{2, 10, 100},
		LoadSettle:    3 * time.Second, LoadWindow: 8 * time.Second, LoadWindows: 2,
		RenewTiming: systems.Timing{LeaseDuration: time.Second, RenewDeadline: 600 * time.Millisecond, RetryPeriod: 20 * time.Millisecond},
		RenewDur:    6 * time.Second,
		SidecarIdle: time.Minute, SidecarStarts: 10, RunHandovers: 20,
		GoBenchCount: 6, GoBenchTime: "1s",
	}
}

// QuickParams is a run of a few seconds for CI: every code path, no meaningful figures.
func QuickParams() Params {
	return Params{
		Mode:             "quick",
		ThroughputRounds: 2, ThroughputDur: 100 * time.Millisecond, Concurrency: []int{1, 16},
		Timing: systems.DefaultTiming.Scale(40), TimingScale: 40,
		HandoverRounds: 3, ElectorTrials: 2,
		CrashRounds:   2,
		LoadTiming:    systems.DefaultTiming.Scale(40),
		LoadFollowers: []int{2, 10},
		LoadSettle:    300 * time.Millisecond, LoadWindow: 500 * time.Millisecond, LoadWindows: 1,
		RenewTiming: systems.Timing{LeaseDuration: time.Second, RenewDeadline: 600 * time.Millisecond, RetryPeriod: 20 * time.Millisecond},
		RenewDur:    600 * time.Millisecond,
		SidecarIdle: time.Second, SidecarStarts: 2, RunHandovers: 2,
	}
}

// Config says what to run and where the output goes.
type Config struct {
	Params
	// Root is the repository root: cmd/elector is built from it and go test -bench runs in
	// Root/bench.
	Root string
	// Doc is the Markdown file whose generated section is replaced; empty: not written.
	Doc string
	// PlotDir receives the SVG plots and results.json; empty: not written.
	PlotDir string
	// Work is a scratch directory (Redis logs, binaries); a temporary one when empty.
	Work string
	// Command is the command line shown in the doc as the way to reproduce it.
	Command string
	// Log receives progress lines.
	Log io.Writer
	// Only, when not empty, lists the steps to run by their number ("1" … "6", "go" for
	// go test -bench); the others are skipped. For working on one figure: such a run is
	// not a full report.
	Only []string
}

// Results are everything a run measured.
type Results struct {
	Params     Params
	Machine    Machine
	Started    time.Time
	Took       time.Duration
	Throughput []ThroughputResult
	Handover   []LatencyResult
	Crash      []LatencyResult
	Load       []LoadResult
	Renew      RenewResult
	Sidecar    SidecarResult
	GoBench    GoBenchResult
	// Failed lists the steps that failed, with their errors; their results are missing.
	Failed []string
}

// Run measures everything and writes the outputs that cfg names.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Work == "" {
		dir, err := os.MkdirTemp("", "electorbench-")
		if err != nil {
			return nil, fmt.Errorf("scratch directory: %w", err)
		}
		defer os.RemoveAll(dir)
		cfg.Work = dir
	}
	// The electors log as in production, but to a file: a terminal would slow them down.
	logf, err := os.Create(filepath.Join(cfg.Work, "klog.log"))
	if err != nil {
		return nil, fmt.Errorf("klog file: %w", err)
	}
	defer logf.Close()
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	for k, v := range map[string]string{"logtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := klogFlags.Set(k, v); err != nil {
			return nil, fmt.Errorf("klog flag %s: %w", k, err)
		}
	}
	klog.SetOutput(logf)
	defer klog.Flush()

	srv, err := redisproc.Start(ctx, cfg.Work)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()

	r := &Results{Params: cfg.Params, Started: time.Now()}
	logf2 := func(format string, args ...any) {
		fmt.Fprintf(cfg.Log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	logf2("redis-server %s (pid %d), %s run, GOMAXPROCS=%d", srv.Addr(), srv.Pid(), cfg.Mode, runtime.GOMAXPROCS(0))
	if r.Machine, err = describeMachine(ctx, srv); err != nil {
		return nil, err
	}
	steps := []struct {
		name string
		run  func() error
	}{
		{"1. lease primitive throughput", func() (err error) { r.Throughput, err = runThroughput(ctx, cfg, srv, logf2); return }},
		{"2. graceful handover", func() (err error) { r.Handover, err = runHandover(ctx, cfg, srv, logf2); return }},
		{"3. crash failover", func() (err error) { r.Crash, err = runCrash(ctx, cfg, srv, logf2); return }},
		{"4. Redis load", func() (err error) { r.Load, err = runLoad(ctx, cfg, srv, logf2); return }},
		{"5. cost of a renew", func() (err error) { r.Renew, err = runRenewCost(ctx, cfg, srv); return }},
		{"6. elector sidecar and run", func() error { r.Sidecar = runSidecar(ctx, cfg, srv, logf2); return nil }},
		{"go test -bench", func() error { r.GoBench = runGoBench(ctx, cfg, logf2); return nil }},
	}
	// A failed step is reported, and the others still run: a long run keeps what it measured.
	var failed []error
	for _, s := range steps {
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, strings.TrimSuffix(strings.Fields(s.name)[0], ".")) {
			continue
		}
		t0 := time.Now()
		logf2("%s ...", s.name)
		if err := s.run(); err != nil {
			err = fmt.Errorf("%s: %w", s.name, err)
			logf2("FAILED %v", err)
			r.Failed = append(r.Failed, err.Error())
			failed = append(failed, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		logf2("%s done in %v", s.name, time.Since(t0).Round(time.Second))
	}
	r.Took = time.Since(r.Started)
	r.Machine.LoadAvgEnd = loadAvg()
	if err := write(cfg, r); err != nil {
		failed = append(failed, err)
	}
	return r, errors.Join(failed...)
}
