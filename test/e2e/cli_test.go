package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elector/elector/internal/testing/redistest"
)

// TestBadInput checks every kind of bad input: exit code 2 and one line on stderr that names
// the flag (or argument) and what is allowed, before any attempt to reach Redis.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	emptyPassword := filepath.Join(dir, "empty-password")
	if err := os.WriteFile(emptyPassword, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	// Nothing listens here: a usage error must come before any connection attempt.
	redis := []string{"--redis-addr", redistest.FreeAddr(t), "--lease-name", "bad"}
	run := func(args ...string) []string {
		return append(append([]string{"run"}, redis...), append(args, "--", "true")...)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string // in the one line on stderr
	}{
		{"no command", nil, nil, "elector help"},
		{"unknown command", []string{"frobnicate"}, nil, `unknown command "frobnicate"`},
		{"flag before command", []string{"--lease-name", "x"}, nil, "unknown flag --lease-name"},
		{"unknown flag", run("--no-such-flag"), nil, "unknown flag: --no-such-flag"},
		{"unknown shorthand", run("-q"), nil, "-q"},
		{"run without --", append(append([]string{"run"}, redis...), "true"), nil, "--: missing before the command"},
		{"run without CMD", append(append([]string{"run"}, redis...), "--"), nil, "--: no command after it"},
		{"run without -- and CMD", append([]string{"run"}, redis...), nil, "--: missing"},
		{"run argument before --", append(append([]string{"run"}, redis...), "x", "--", "true"), nil, `--: unexpected argument "x"`},
		{"command not found", append(append([]string{"run"}, redis...), "--", "no-such-command-anywhere"), nil, `"no-such-command-anywhere"`},
		{"negative replica acks", run("--redis-replica-acks", "-1"), nil, "--redis-replica-acks: must be 0 or more"},
		{"replica ack timeout too long", run("--redis-replica-acks", "1", "--redis-replica-ack-timeout", "5s"), nil, "--redis-replica-ack-timeout: must be shorter than --retry-period"},
		{"command not executable", append(append([]string{"run"}, redis...), "--", notPEM), nil, "permission denied"},
		{"missing lease name", []string{"run", "--", "true"}, nil, "--lease-name is required"},
		{"missing lease name in sidecar", []string{"sidecar"}, nil, "--lease-name is required"},
		{"missing lease name in status", []string{"status"}, nil, "--lease-name is required"},
		{"bad lease name", []string{"status", "--lease-name", "a{b}"}, nil, "--lease-name"},
		{"bad key prefix", []string{"status", "--lease-name", "x", "--key-prefix", "a b"}, nil, "--key-prefix"},
		{"bad identity", []string{"sidecar", "--lease-name", "x", "--identity", "a\nb"}, nil, "--identity"},
		{"bad identity from POD_NAME", []string{"sidecar", "--lease-name", "x"}, []string{"POD_NAME=a\tb"}, "--identity (from $POD_NAME)"},
		{"renew deadline equal to lease", run("--lease-duration", "10s", "--renew-deadline", "10s"), nil, "--renew-deadline (10s) must be shorter than --lease-duration (10s)"},
		{"renew deadline above lease", run("--lease-duration", "1s", "--renew-deadline", "2s"), nil, "--renew-deadline"},
		{"retry period too close to renew", run("--renew-deadline", "2s", "--retry-period", "2s"), nil, "--renew-deadline (2s) must be greater than 1.2 × --retry-period (2s), i.e. --retry-period below 1.667s"},
		{"retry period within jitter", run("--renew-deadline", "2s", "--retry-period", "1700ms"), nil, "--retry-period"},
		{"zero lease duration", run("--lease-duration", "0s"), nil, "--lease-duration (0s) must be positive"},
		{"negative renew deadline", run("--renew-deadline", "-1s"), nil, "--renew-deadline (-1s) must be positive"},
		{"zero retry period", run("--retry-period", "0"), nil, "--retry-period (0s) must be positive"},
		{"unparsable duration", run("--lease-duration", "fortnight"), nil, `"--lease-duration"`},
		{"fractional millisecond lease", run("--lease-duration", "1500us", "--renew-deadline", "1ms", "--retry-period", "100us"), nil, "--lease-duration (1.5ms) must be a whole number of milliseconds"},
		{"negative kill grace", run("--kill-grace", "-1s"), nil, "--kill-grace"},
		{"bad stop signal", run("--stop-signal", "SIGFOO"), nil, `--stop-signal: unknown signal "SIGFOO"`},
		{"stop signal out of range", run("--stop-signal", "99"), nil, "--stop-signal"},
		{"empty redis addr", []string{"status", "--lease-name", "x", "--redis-addr="}, nil, "--redis-addr: must not be empty"},
		{"redis addr without port", []string{"status", "--lease-name", "x", "--redis-addr", "localhost"}, nil, "--redis-addr"},
		{"redis addr as URL", []string{"status", "--lease-name", "x", "--redis-addr", "redis://localhost:6379"}, nil, "--redis-addr"},
		{"redis addr bad port", []string{"status", "--lease-name", "x", "--redis-addr", "localhost:99999"}, nil, "--redis-addr"},
		{"two addrs standalone", []string{"status", "--lease-name", "x", "--redis-addr", "a:1,b:2"}, nil, "--redis-addr: standalone mode takes exactly one"},
		{"unknown redis mode", []string{"status", "--lease-name", "x", "--redis-mode", "ring"}, nil, `--redis-mode: unknown mode "ring"`},
		{"sentinel without master", []string{"status", "--lease-name", "x", "--redis-mode", "sentinel"}, nil, "--sentinel-master: required"},
		{"cluster with db", []string{"status", "--lease-name", "x", "--redis-mode", "cluster", "--redis-db", "1"}, nil, "--redis-db"},
		{"unreadable password file", []string{"sidecar", "--lease-name", "x", "--redis-password-file", missing}, nil, "--redis-password-file: cannot read"},
		{"empty password file", []string{"sidecar", "--lease-name", "x", "--redis-password-file", emptyPassword}, nil, "--redis-password-file"},
		{"password twice", []string{"sidecar", "--lease-name", "x", "--redis-password-file", notPEM}, []string{"REDIS_PASSWORD=x"}, "--redis-password-file: conflicts with the REDIS_PASSWORD"},
		{"password as a flag", []string{"sidecar", "--lease-name", "x", "--redis-password", "hunter2"}, nil, "--redis-password is not a flag"},
		{"unreadable CA file", []string{"status", "--lease-name", "x", "--redis-tls", "--redis-tls-ca-file", missing}, nil, "--redis-tls-ca-file: cannot read"},
		{"CA file without PEM", []string{"status", "--lease-name", "x", "--redis-tls", "--redis-tls-ca-file", notPEM}, nil, "--redis-tls-ca-file"},
		{"unreadable cert file", []string{"status", "--lease-name", "x", "--redis-tls", "--redis-tls-cert-file", missing, "--redis-tls-key-file", notPEM}, nil, "--redis-tls-cert-file"},
		{"cert without key", []string{"status", "--lease-name", "x", "--redis-tls", "--redis-tls-cert-file", notPEM}, nil, "--redis-tls-cert-file: requires --redis-tls-key-file"},
		{"TLS file without TLS", []string{"status", "--lease-name", "x", "--redis-tls-ca-file", notPEM}, nil, "--redis-tls-ca-file: requires --redis-tls"},
		{"bad http addr", []string{"sidecar", "--lease-name", "x", "--http-addr", "8080"}, nil, "--http-addr"},
		{"bad http port", []string{"sidecar", "--lease-name", "x", "--http-addr", ":http-alt"}, nil, "--http-addr"},
		{"status file in missing dir", []string{"sidecar", "--lease-name", "x", "--status-file", filepath.Join(missing, "status")}, nil, "--status-file"},
		{"sidecar argument", []string{"sidecar", "--lease-name", "x", "extra"}, nil, `unexpected argument "extra"`},
		{"bad output format", []string{"status", "--lease-name", "x", "-o", "xml"}, nil, `--output: unknown format "xml"; allowed: text, json, yaml`},
		{"mistyped command", []string{"statsu"}, nil, `did you mean "status"?`},
		{"mistyped flag", []string{"status", "--lease-nme", "x"}, nil, "unknown flag: --lease-nme; did you mean --lease-name?"},
		{"timing flag in status", []string{"status", "--lease-name", "x", "--lease-duration", "5s"}, nil, "unknown flag: --lease-duration"},
		{"username without password", []string{"sidecar", "--lease-name", "x", "--redis-username", "bob"}, nil, `--redis-username "bob": no password`},
		{"sentinel username without password", []string{"status", "--lease-name", "x", "--redis-mode", "sentinel", "--sentinel-master", "m", "--sentinel-username", "s"}, nil, `--sentinel-username "s": no password`},
		{"watch with all", []string{"status", "--all", "--watch"}, nil, "--watch"},
		{"bad log format", []string{"status", "--lease-name", "x", "--log-format", "xml"}, nil, `--log-format: unknown format "xml"`},
		{"completion without shell", []string{"completion"}, nil, "want exactly one shell"},
		{"completion unknown shell", []string{"completion", "tcsh"}, nil, `unknown shell "tcsh"`},
		{"bad value in environment", []string{"sidecar", "--lease-name", "x"}, []string{"ELECTOR_RETRY_PERIOD=soon"}, "ELECTOR_RETRY_PERIOD (flag --retry-period)"},
		{"bad mode in environment", []string{"status", "--lease-name", "x"}, []string{"ELECTOR_REDIS_MODE=ring"}, "--redis-mode"},
		{"unknown variable in environment", []string{"status", "--lease-name", "x"}, []string{"ELECTOR_LEASE_NAMEE=x"}, "unknown environment variable ELECTOR_LEASE_NAMEE: no flag reads it; did you mean ELECTOR_LEASE_NAME?"},
		{"CMD's flags are CMD's", append(run("--kill-grace", "-1s"), "--help", "--bogus"), nil, "--kill-grace"},
		{"bad verbosity", []string{"status", "--lease-name", "x", "-v", "loud"}, nil, "-v"},
		{"demo replicas", []string{"demo", "--replicas", "1"}, nil, "--replicas: must be from 2 to 9"},
		{"demo duration", []string{"demo", "--duration", "0s"}, nil, "--duration"},
		{"demo redis flag without addr", []string{"demo", "--redis-mode", "cluster"}, nil, "--redis-mode: only with --redis-addr"},
		{"install without path", []string{"install"}, nil, "PATH: missing"},
		{"install two paths", []string{"install", "a", "b"}, nil, `unexpected argument "b"`},
		{"version argument", []string{"version", "x"}, nil, `unexpected argument "x"`},
		{"help unknown command", []string{"help", "frobnicate"}, nil, `unknown command "frobnicate"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runElector(t, 10*time.Second, tc.env, tc.args...)
			if code != 2 {
				t.Errorf("elector %q: exit code %d, want 2; stderr:\n%s", tc.args, code, stderr)
			}
			if tc.name == "no command" { // prints the whole help to stderr
				if !strings.Contains(stderr, tc.want) {
					t.Errorf("no help on stderr: %s", stderr)
				}
				return
			}
			line := oneLine(t, stderr)
			if !strings.Contains(line, tc.want) {
				t.Errorf("elector %q: stderr %q does not contain %q", tc.args, line, tc.want)
			}
			if stdout != "" {
				t.Errorf("stdout: %q", stdout)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runElector(t, 10*time.Second, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "elector ") || !strings.Contains(out, "go1.") {
		t.Errorf("elector version: exit code %d, output %q", code, out)
	}
	code, out2, _ := runElector(t, 10*time.Second, nil, "--version")
	if code != 0 || out2 != out {
		t.Errorf("elector --version: exit code %d, output %q; want %q", code, out2, out)
	}
}

// TestLogFormatJSON: with --log-format=json every log line is a JSON object with the
// message and the structured values, and -v still sets the verbosity.
func TestLogFormatJSON(t *testing.T) {
	srv := redistest.Start(t)
	s := startSidecar(t, srv.Addr(), "json-logs", "a", t.TempDir(), nil, "--log-format=json", "-v=4")
	waitFor(t, 10*time.Second, "a to lead", s.ready)
	s.signal(syscall.SIGTERM)
	if code := s.wait(5 * time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(s.stderr.String()), "\n")
	var started, verbose bool
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %q (%v)", l, err)
		}
		if m["msg"] == "Campaigning" && m["lease"] == "json-logs" {
			started = true
		}
		if lvl, _ := m["level"].(string); strings.HasPrefix(lvl, "DEBUG") {
			verbose = true
		}
	}
	if !started || !verbose {
		t.Errorf("no Campaigning line with its lease (%v) or no -v=4 line (%v):\n%s", started, verbose, s.stderr.String())
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := runElector(t, 10*time.Second, nil, "help")
	if code != 0 {
		t.Errorf("elector help: exit code %d", code)
	}
	for _, want := range []string{"run", "sidecar", "status", "demo", "version", "install", "Exit codes", "ELECTOR_REDIS_ADDR", "REDIS_PASSWORD"} {
		if !strings.Contains(out, want) {
			t.Errorf("elector help lacks %q", want)
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}} {
		if code, out2, _ := runElector(t, 10*time.Second, nil, args...); code != 0 || out2 != out {
			t.Errorf("elector %s: exit code %d, output differs from elector help", args[0], code)
		}
	}
	for _, cmd := range []string{"run", "sidecar", "status", "resign", "demo", "version", "install", "completion"} {
		code, viaFlag, _ := runElector(t, 10*time.Second, nil, cmd, "--help")
		if code != 0 || !strings.HasPrefix(viaFlag, "Usage: elector "+cmd) {
			t.Errorf("elector %s --help: exit code %d, output:\n%s", cmd, code, viaFlag)
		}
		// Its length is TestHelpShort's (cmd/elector), on the same text.
		if !strings.Contains(viaFlag, "docs/CLI.md#elector-") {
			t.Errorf("elector %s --help: no link to its section of docs/CLI.md:\n%s", cmd, viaFlag)
		}
		code, viaHelp, _ := runElector(t, 10*time.Second, nil, "help", cmd)
		if code != 0 || viaHelp != viaFlag {
			t.Errorf("elector help %s: exit code %d, output differs from --help", cmd, code)
		}
	}
}

func TestInstall(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "bin", "elector")
	if err := os.Mkdir(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, []byte("old"), 0o600); err != nil { // replaced, not appended to
		t.Fatal(err)
	}
	code, _, stderr := runElector(t, 20*time.Second, nil, "install", dst)
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr)
	}
	st, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", st.Mode().Perm())
	}
	want, _ := os.ReadFile(bins.elector)
	got, _ := os.ReadFile(dst)
	if string(got) != string(want) {
		t.Errorf("installed file differs from the running executable")
	}
	entries, _ := os.ReadDir(filepath.Dir(dst))
	if len(entries) != 1 {
		t.Errorf("files left next to the installed binary: %v", entries)
	}

	// Into a directory.
	code, out, stderr := runElector(t, 20*time.Second, nil, "install", dir)
	if code != 0 || !strings.Contains(out, filepath.Join(dir, "elector")) {
		t.Fatalf("install into a directory: exit code %d, output %q, stderr %s", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "elector")); err != nil {
		t.Error(err)
	}

	code, _, stderr = runElector(t, 20*time.Second, nil, "install", filepath.Join(dir, "missing", "elector"))
	if code != 1 || !strings.Contains(stderr, "missing") {
		t.Errorf("install into a missing directory: exit code %d (want 1), stderr %s", code, stderr)
	}
}

// TestDemo runs the README's first command, with no Redis anywhere: the demo starts its own.
func TestDemo(t *testing.T) {
	code, out, stderr := runElector(t, 60*time.Second, nil, "demo", "--duration", "5s")
	if code != 0 {
		t.Fatalf("exit code %d; stdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	for _, want := range []string{"embedded", "LEADS", "first leader", "CRASHES", "crash takeover", "after its lease expired", "RESTARTS", "Summary", "overlapping terms:            0", "PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if stderr != "" {
		t.Errorf("demo wrote to stderr:\n%s", stderr)
	}
}
