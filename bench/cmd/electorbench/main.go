// Command electorbench measures elector against its peers on one real redis-server that it
// starts, and rewrites the generated section of docs/PERFORMANCE.md and the plots in
// docs/perf/ with the results. Run it from the bench module:
//
//	cd bench && go run ./cmd/electorbench          # full run, about 12 minutes on 2 cores
//	cd bench && go run ./cmd/electorbench -quick   # a few seconds: every path, no figures worth quoting
//
// It needs redis-server on PATH (or the server named by ELECTOR_REDIS_SERVER, e.g. a Valkey
// built by make compat), and go (for the go test benchmarks and for building
// cmd/elector with hack/build.sh).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/elector/elector/bench/internal/suite"
)

func main() {
	quick := flag.Bool("quick", false, "run the quick mode (a few seconds, for CI) instead of the full run")
	root := flag.String("root", "", "repository root (default: the parent of the bench module, found from the working directory)")
	doc := flag.String("doc", "", "Markdown file whose generated section is rewritten (default ROOT/docs/PERFORMANCE.md; \"-\" writes none)")
	plots := flag.String("plots", "", "directory for the SVG plots and results.json (default ROOT/docs/perf; \"-\" writes none)")
	rerender := flag.String("render", "", "measure nothing: redraw the plots and the doc from this results.json of an earlier run")
	only := flag.String("only", "", "comma-separated steps to run (1-6, go); the doc and plots are then not written unless -doc/-plots name them")
	flag.Parse()
	if err := run(*quick, *root, *doc, *plots, *rerender, *only); err != nil {
		fmt.Fprintln(os.Stderr, "electorbench:", err)
		os.Exit(1)
	}
}

func run(quick bool, root, doc, plots, rerender, only string) error {
	if root == "" {
		var err error
		if root, err = findRoot(); err != nil {
			return err
		}
	}
	params := suite.FullParams()
	command := "cd bench && go run ./cmd/electorbench"
	if quick {
		params = suite.QuickParams()
		command += " -quick"
	}
	var steps []string
	if only != "" {
		steps = strings.Split(only, ",")
		for _, s := range steps {
			if !slices.Contains([]string{"1", "2", "3", "4", "5", "6", "go"}, s) {
				return fmt.Errorf("-only: unknown step %q; steps are 1, 2, 3, 4, 5, 6 and go", s)
			}
		}
		// A partial run must not replace the full report.
		if doc == "" {
			doc = "-"
		}
		if plots == "" {
			plots = "-"
		}
	}
	switch doc {
	case "":
		doc = filepath.Join(root, "docs", "PERFORMANCE.md")
	case "-":
		doc = ""
	}
	switch plots {
	case "":
		plots = filepath.Join(root, "docs", "perf")
	case "-":
		plots = ""
	}
	cfg := suite.Config{Params: params, Root: root, Doc: doc, PlotDir: plots, Command: command, Log: os.Stderr, Only: steps}
	var r *suite.Results
	if rerender != "" {
		b, err := os.ReadFile(rerender)
		if err != nil {
			return err
		}
		r = new(suite.Results)
		if err := json.Unmarshal(b, r); err != nil {
			return fmt.Errorf("read %s: %w", rerender, err)
		}
		if r.Params.Mode == "quick" {
			cfg.Command = "cd bench && go run ./cmd/electorbench -quick"
		}
		if err := suite.Render(cfg, r); err != nil {
			return err
		}
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		var err error
		if r, err = suite.Run(ctx, cfg); err != nil {
			return err
		}
	}
	for _, c := range suite.Checks(r) {
		verdict := "met"
		switch {
		case c.NotMeasured:
			verdict = "NOT MEASURED"
		case !c.OK:
			verdict = "MISSED"
		}
		fmt.Printf("%-13s %s: %s\n", verdict, c.Target, c.Measured)
	}
	if doc != "" {
		fmt.Println("wrote", doc)
	}
	return nil
}

// findRoot walks up from the working directory to the directory whose go.mod declares the
// module github.com/elector/elector.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/elector/elector\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of github.com/elector/elector above %s; pass -root", dir)
		}
	}
}
