package bench

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/bench/internal/stats"
	"github.com/elector/elector/bench/internal/suite"
	"github.com/elector/elector/bench/internal/systems"
	"github.com/elector/elector/internal/testing/redistest/serverbin"
)

// TestQuick runs every measurement of cmd/electorbench in its quick mode, as CI does
// (`cd bench && go test -run Quick ./...`), so that the benchmark cannot rot. Its figures are
// too short to quote; the assertions are only the ones that hold by many times on any machine.
func TestQuick(t *testing.T) {
	if _, err := serverbin.Server(); err != nil {
		msg := fmt.Sprintf("%v; install it (apt-get install redis-server)", err)
		if os.Getenv("CI") != "" || os.Getenv("ELECTOR_REQUIRE_REDIS") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	out := t.TempDir()
	doc := filepath.Join(out, "PERFORMANCE.md")
	if err := os.WriteFile(doc, []byte("# Performance\n\nprose before\n\n"+suite.BeginMarker+"\nold\n"+suite.EndMarker+"\n\nprose after\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log io.Writer = io.Discard
	if testing.Verbose() {
		log = os.Stderr
	}
	r, err := suite.Run(ctx, suite.Config{
		Params: suite.QuickParams(), Root: root, Doc: doc, PlotDir: filepath.Join(out, "perf"),
		Work: t.TempDir(), Command: "cd bench && go run ./cmd/electorbench -quick", Log: log,
	})
	if err != nil {
		t.Fatalf("quick run: %v", err)
	}

	// Every section measured something, for every system (and the handover for the raw
	// pub/sub floor too).
	if len(r.Throughput) == 0 || len(r.Handover) != len(systems.Kinds())+1 || len(r.Crash) != len(systems.Kinds()) || len(r.Load) == 0 || len(r.Renew.Renewals) == 0 {
		t.Fatalf("a section is empty: %d throughput, %d handover, %d crash, %d load, %d renew windows",
			len(r.Throughput), len(r.Handover), len(r.Crash), len(r.Load), len(r.Renew.Renewals))
	}
	for _, tr := range r.Throughput {
		if m := stats.Median(tr.OpsPerSec); !(m > 0) {
			t.Errorf("%s %s ×%d: %v ops/s", tr.System, tr.Bench, tr.Concurrency, m)
		}
	}
	// elector hands over on the release event and takes over at expiry: far below a retry
	// period (50ms in quick mode), where the pollers are.
	rp := float64(r.Params.Timing.RetryPeriod) / float64(time.Millisecond)
	for _, lr := range append(r.Handover, r.Crash...) {
		if lr.Summary.N == 0 {
			t.Errorf("%s: no trial", lr.System)
		}
		if lr.System == systems.ElectorKind.Name && lr.Summary.Median > rp/2 {
			t.Errorf("elector median latency %.3f ms, want well under a retry period (%.0f ms)", lr.Summary.Median, rp)
		}
	}
	// Idle followers of elector do not poll: the load stays within the bound (with slack for
	// the edges of a short window); the pollers' grows with N.
	for _, l := range r.Load {
		if l.System == systems.ElectorKind.Name && stats.Median(l.ClientCmds) > 1.25*l.Bound {
			t.Errorf("elector, %d followers: %.1f commands/s, bound %.1f", l.Followers, stats.Median(l.ClientCmds), l.Bound)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "elector")); err == nil {
		if r.Sidecar.PeakRSSLeader == 0 || len(r.Sidecar.StartToLeadingMs) == 0 || len(r.Sidecar.RunHandoverMs) == 0 {
			t.Errorf("cmd/elector exists but was not measured: %q / %q", r.Sidecar.Missing, r.Sidecar.RunMissing)
		}
	}

	// The doc kept its prose and got the tables; the plots are well-formed SVG.
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{"prose before", "prose after", "### 1. Lease primitive", "### 4. Redis load", "perf/handover.svg", "### Targets"} {
		if !strings.Contains(text, want) {
			t.Errorf("doc lacks %q", want)
		}
	}
	if strings.Contains(text, "\nold\n") || strings.Count(text, suite.BeginMarker) != 1 {
		t.Errorf("generated section not replaced exactly once:\n%s", text)
	}
	for _, name := range []string{"handover.svg", "crash.svg", "load.svg"} {
		svg, err := os.ReadFile(filepath.Join(out, "perf", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := xml.Unmarshal(svg, new(struct{})); err != nil {
			t.Errorf("%s is not well-formed XML: %v", name, err)
		}
	}
}
