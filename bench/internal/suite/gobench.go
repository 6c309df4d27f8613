package suite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// GoBenchResult is the output of the go test benchmarks of package bench and benchstat's
// comparison of their implementations.
type GoBenchResult struct {
	Missing   string
	Command   string
	Raw       string
	Benchstat string
}

func runGoBench(ctx context.Context, cfg Config, logf func(string, ...any)) GoBenchResult {
	if cfg.GoBenchCount == 0 {
		return GoBenchResult{Missing: "skipped in " + cfg.Mode + " mode"}
	}
	dir := filepath.Join(cfg.Root, "bench")
	args := []string{"test", "-run", "^$", "-bench", ".", "-benchmem",
		"-count", strconv.Itoa(cfg.GoBenchCount), "-benchtime", cfg.GoBenchTime, "."}
	res := GoBenchResult{Command: "cd bench && go " + strings.Join(args, " ")}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	res.Raw = string(out)
	if err != nil {
		res.Missing = fmt.Sprintf("%s: %v: %s", res.Command, err, lastLine(string(out)))
		logf("  %s", res.Missing)
		return res
	}
	file := filepath.Join(cfg.Work, "gobench.txt")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		res.Missing = err.Error()
		return res
	}
	// The lease primitives side by side (-col /impl, each against raw); pkg/election's
	// benchmarks, which only elector has, on their own.
	for _, args := range [][]string{
		{"-col", "/impl", "-filter", ".name:(AcquireRelease OR Renew)"},
		{"-filter", ".name:/^Election/"},
	} {
		// "label=file" names the column after the label instead of the temporary file.
		bs := exec.CommandContext(ctx, "go", append(append([]string{"tool", "benchstat"}, args...), "pkg/election="+file)...)
		bs.Dir = dir
		table, err := bs.CombinedOutput()
		if err != nil {
			res.Missing = fmt.Sprintf("benchstat: %v: %s", err, lastLine(string(table)))
			return res
		}
		res.Benchstat += string(table) + "\n"
	}
	return res
}
