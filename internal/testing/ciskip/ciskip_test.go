package ciskip

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSkipFailsUnderCI runs a test that calls Skip in a child process with and without CI.
func TestSkipFailsUnderCI(t *testing.T) {
	if os.Getenv("CISKIP_CHILD") != "" {
		Skip(t, "the reason %d", 42)
		return
	}
	for _, tc := range []struct {
		ci   string
		want string
	}{{"", "--- SKIP"}, {"true", "--- FAIL"}} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestSkipFailsUnderCI$", "-test.v")
		cmd.Env = append(os.Environ(), "CISKIP_CHILD=1", Env+"="+tc.ci)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "the reason 42") {
			t.Errorf("CI=%q: want %q and the reason in:\n%s", tc.ci, tc.want, out)
		}
	}
}
