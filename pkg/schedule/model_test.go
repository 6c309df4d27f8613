package schedule

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// scheduleModelRuns are hack/model.sh's runs of model/schedule.pml (keep them alike).
var scheduleModelRuns = []struct{ name, flags string }{
	{"pause-stale", "-DT=2 -DPAUSES=1 -DSTALE=1 -DGIVEUPS=1 -DFAILS=1"},
	{"crash-restart", "-DT=2 -DPAUSES=0 -DCRASHES=1 -DRESTARTS=1 -DSTALE=1 -DGIVEUPS=1 -DFAILS=0"},
	{"data-loss", "-DT=2 -DPAUSES=0 -DLOSSES=1 -DSTALE=1 -DGIVEUPS=1 -DFAILS=0"},
	{"three-terms", "-DT=3 -DNS=1 -DPAUSES=1 -DLOSSES=1 -DSTALE=0 -DGIVEUPS=0 -DFAILS=0"},
}

// TestScheduleModel checks the spin model of the slot protocol (model/schedule.pml) in every
// configuration of hack/model.sh: each must explore its state space without a violation. It is
// how hack/mutants.sh refutes the model's mutants (test/mutants/model-schedule-*.patch); opt
// in with SCHEDULE_MODEL=1 (make model runs the same searches); needs spin and gcc.
func TestScheduleModel(t *testing.T) {
	if os.Getenv("SCHEDULE_MODEL") != "1" {
		t.Skip("SCHEDULE_MODEL=1 runs the spin model (make model does)")
	}
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "model", "schedule.pml"))
	if err != nil {
		t.Fatal(err)
	}
	errorsRe := regexp.MustCompile(`errors: (\d+)`)
	for _, r := range scheduleModelRuns {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "schedule.pml"), src, 0o644); err != nil {
			t.Fatal(err)
		}
		sh := "spin -a " + r.flags + " schedule.pml >spin.out 2>&1 && gcc -O1 -w -DSAFETY -DCOLLAPSE -o pan pan.c && ./pan -E -m3000000 -w24"
		cmd := exec.Command("sh", "-c", sh)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		m := errorsRe.FindSubmatch(out)
		if m == nil {
			spinOut, _ := os.ReadFile(filepath.Join(dir, "spin.out"))
			t.Fatalf("%s: spin or pan did not run (%v):\n%s%s", r.name, err, spinOut, out)
		}
		if string(m[1]) != "0" {
			v := regexp.MustCompile(`assertion violated[^\n]*`).Find(out)
			t.Errorf("%s (%s): violation: %s", r.name, r.flags, v)
		}
	}
}
