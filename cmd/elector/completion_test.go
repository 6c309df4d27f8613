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

// TestMain makes this test binary the elector when it is run under the name elector: the
// completion scripts of TestBashCompletion call back `elector __complete ...`.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "elector" {
		c := &cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, lookupEnv: os.LookupEnv,
			environ: os.Environ, hostname: os.Hostname, executable: os.Executable}
		os.Exit(c.main(context.Background(), os.Args[1:]))
	}
	os.Exit(m.Run())
}

// electorOnPath puts this test binary on $PATH as elector, for the completion scripts.
func electorOnPath(t *testing.T) {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, "elector")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(filepath.ListSeparator)+os.Getenv("PATH"))
}

// bashCompleter sources `elector completion bash` in a real bash and returns a function that
// asks it for the completions of a command line, as bash would after TAB.
func bashCompleter(t *testing.T) func(line string) []string {
	bash, err := exec.LookPath("bash")
	if err != nil {
		ciskip.Skip(t, "no bash")
	}
	electorOnPath(t)
	c, stdout, stderr := testCLI(nil)
	if code := c.main(context.Background(), []string{"completion", "bash"}); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	script := filepath.Join(t.TempDir(), "elector.bash")
	if err := os.WriteFile(script, stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return func(line string) []string {
		t.Helper()
		// COMP_WORDS as bash-completion's _get_comp_words_by_ref -n =: gives them (the script
		// needs that package; a stand-in is defined when it is not installed).
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		prog := `source "$1"; complete -p elector >/dev/null || exit 9
declare -F _get_comp_words_by_ref >/dev/null || _get_comp_words_by_ref() {
    cur="${COMP_WORDS[COMP_CWORD]}"; prev="${COMP_WORDS[COMP_CWORD-1]}"; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD
}
COMP_WORDS=(` + strings.Join(quoted, " ") + `); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMP_LINE="$2"; COMP_POINT=${#COMP_LINE}
__start_elector
printf '%s\n' "${COMPREPLY[@]}"`
		out, err := exec.Command(bash, "--norc", "--noprofile", "-c", prog, "bash", script, line).Output()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
}

// TestBashCompletion checks the completions of commands, flags, flag values and, after
// `run ... --`, the programs to run.
func TestBashCompletion(t *testing.T) {
	complete := bashCompleter(t)
	for _, tc := range []struct {
		line     string
		want     []string // all of them among the completions
		wantOnly bool     // and nothing else
	}{
		{"elector st", []string{"status"}, true},
		{"elector ", []string{"run", "sidecar", "status", "completion", "help"}, false},
		{"elector status --lea", []string{"--lease-name"}, true},
		{"elector status -", []string{"--watch", "-w", "--output", "-o", "--all", "--redis-addr", "--log-format"}, false},
		{"elector status -o ", []string{"text", "json", "yaml"}, true},
		{"elector status --output=y", []string{"yaml"}, true}, // the word after "=", as bash takes it
		{"elector sidecar --redis-mode ", []string{"standalone", "sentinel", "cluster"}, true},
		{"elector run --on-success ", []string{"release", "hold"}, true},
		{"elector run --lease-duration", []string{"--lease-duration"}, true},
		{"elector completion ", []string{"bash", "zsh", "fish", "powershell"}, true},
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

// TestCompletionOtherShells checks the zsh, fish and PowerShell scripts: each asks elector
// itself for the words (so they are those of the bash script), and each shell that is
// installed parses its script.
func TestCompletionOtherShells(t *testing.T) {
	for shell, parse := range map[string][]string{"zsh": {"-n", "-c"}, "fish": {"-n", "-c"}, "powershell": nil} {
		c, stdout, stderr := testCLI(nil)
		if code := c.main(context.Background(), []string{"completion", shell}); code != exitOK {
			t.Fatalf("%s: exit %d: %s", shell, code, stderr)
		}
		if !strings.Contains(stdout.String(), "elector __complete") && !strings.Contains(stdout.String(), "__complete") {
			t.Errorf("%s script does not ask elector __complete for the words:\n%s", shell, stdout)
		}
		if path, err := exec.LookPath(shell); err == nil && parse != nil {
			if out, err := exec.Command(path, append(parse, stdout.String())...).CombinedOutput(); err != nil {
				t.Errorf("%s -n: %v\n%s", shell, err, out)
			}
		}
	}
	c, _, stderr := testCLI(nil)
	if code := c.main(context.Background(), []string{"completion", "tcsh"}); code != exitUsage || !strings.Contains(stderr.String(), `unknown shell "tcsh"`) {
		t.Errorf("completion tcsh: exit %d, %s", code, stderr)
	}
}

// TestCompleteEveryCommandAndFlag: what every script offers comes from the command tree
// itself: every command, and every visible flag of each.
func TestCompleteEveryCommandAndFlag(t *testing.T) {
	c, stdout, _ := testCLI(nil)
	if code := c.main(context.Background(), []string{"__complete", ""}); code != exitOK {
		t.Fatalf("__complete: exit %d", code)
	}
	for _, cmd := range testRoot(c).Commands() {
		if !strings.Contains(stdout.String(), cmd.Name()+"\t") {
			t.Errorf("__complete does not offer %s:\n%s", cmd.Name(), stdout)
		}
		c, out, _ := testCLI(nil)
		c.main(context.Background(), []string{"__complete", cmd.Name(), "--"})
		for _, name := range visibleFlags(cmd) {
			if !strings.Contains(out.String(), "--"+name+"\t") && !strings.Contains(out.String(), "--"+name+"\n") {
				t.Errorf("__complete %s -- does not offer --%s", cmd.Name(), name)
			}
		}
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
