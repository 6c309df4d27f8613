package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/elector/elector/internal/testing/ciskip"
)

// TestBashCompletion sources `elector completion bash` in a real bash, checks that complete
// registered it, and asks it for completions as bash would after TAB.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		ciskip.Skip(t, "no bash")
	}
	c, stdout, stderr := testCLI(nil)
	if code := c.main(context.Background(), []string{"completion", "bash"}); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	script := filepath.Join(t.TempDir(), "elector.bash")
	if err := os.WriteFile(script, stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(line string) []string {
		t.Helper()
		// COMP_WORDS as bash splits the line (with "=" a word of its own); an empty last word
		// when the line ends in a space.
		words := strings.Fields(strings.ReplaceAll(line, "=", " = "))
		if strings.HasSuffix(line, " ") || strings.HasSuffix(line, "=") {
			words = append(words, "")
		}
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		prog := `source "$1"; complete -p elector >/dev/null || exit 9
COMP_WORDS=(` + strings.Join(quoted, " ") + `); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _elector
printf '%s\n' "${COMPREPLY[@]}"`
		out, err := exec.Command(bash, "--norc", "--noprofile", "-c", prog, "bash", script).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	for _, tc := range []struct {
		line     string
		want     []string // all of them among the completions
		wantOnly bool     // and nothing else
	}{
		{"elector st", []string{"status"}, true},
		{"elector ", []string{"run", "sidecar", "status", "completion", "--version"}, false},
		{"elector status --lea", []string{"--lease-name"}, true},
		{"elector status -", []string{"--watch", "-w", "--output", "-o", "--all", "--redis-addr", "--log-format"}, false},
		{"elector status -o ", []string{"text", "json", "yaml"}, true},
		{"elector status --output=y", []string{"yaml"}, true},
		{"elector sidecar --redis-mode ", []string{"standalone", "sentinel", "cluster"}, true},
		{"elector run --lease-duration", []string{"--lease-duration"}, true},
		{"elector completion ", []string{"bash", "zsh", "fish"}, true},
		{"elector help si", []string{"sidecar"}, true},
	} {
		got := complete(tc.line)
		for _, w := range tc.want {
			if !contains(got, w) {
				t.Errorf("%q completes to %q, missing %q", tc.line, got, w)
			}
		}
		if tc.wantOnly && len(got) != len(tc.want) {
			t.Errorf("%q completes to %q, want only %q", tc.line, got, tc.want)
		}
	}
	// status has no timing or identity flags: they did nothing there.
	for _, f := range []string{"--lease-duration", "--identity", "--retry-period"} {
		if contains(complete("elector status -"), f) {
			t.Errorf("status offers %s, which it does not have", f)
		}
	}
	// After "--" in run: the command to run, not flags.
	if got := complete("elector run --lease-name x -- bas"); !contains(got, "bash") {
		t.Errorf("after --: %q, want commands such as bash", got)
	}
}

// TestCompletionOtherShells checks that the zsh and fish scripts name every command, and that
// zsh (when installed) parses its script.
func TestCompletionOtherShells(t *testing.T) {
	for _, shell := range []string{"zsh", "fish"} {
		c, stdout, stderr := testCLI(nil)
		if code := c.main(context.Background(), []string{"completion", shell}); code != exitOK {
			t.Fatalf("%s: exit %d: %s", shell, code, stderr)
		}
		for _, cmd := range commands() {
			if !strings.Contains(stdout.String(), cmd.name) {
				t.Errorf("%s script lacks %s", shell, cmd.name)
			}
		}
		if !strings.Contains(stdout.String(), "lease-name") {
			t.Errorf("%s script lacks the flags", shell)
		}
		if path, err := exec.LookPath(shell); err == nil {
			if out, err := exec.Command(path, "-n", "-c", stdout.String()).CombinedOutput(); err != nil {
				t.Errorf("%s -n: %v\n%s", shell, err, out)
			}
		}
	}
	c, _, stderr := testCLI(nil)
	if code := c.main(context.Background(), []string{"completion", "tcsh"}); code != exitUsage || !strings.Contains(stderr.String(), `unknown shell "tcsh"`) {
		t.Errorf("completion tcsh: exit %d, %s", code, stderr)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
