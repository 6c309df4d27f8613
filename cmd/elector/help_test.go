package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// maxHelpLines bounds a command's help: what does not fit is in the documentation.
const maxHelpLines = 40

// helpText returns the help of cmd, as --help prints it.
func helpText(cmd *cobra.Command) string {
	var b bytes.Buffer
	cmd.SetOut(&b)
	if err := cmd.Help(); err != nil {
		return err.Error()
	}
	return b.String()
}

// TestHelpHeadingsOnce: every heading of a command's help appears once (run printed "Redis
// flags:" twice, status "Status flags:" twice), and status lists no flag it ignores.
func TestHelpHeadingsOnce(t *testing.T) {
	c, _, _ := testCLI(nil)
	heading := regexp.MustCompile(`^([A-Z][a-z]* flags[^:]*):`)
	for _, cmd := range testRoot(c).Commands() {
		c, stdout, stderr := testCLI(nil)
		if code := c.main(context.Background(), []string{cmd.Name(), "--help"}); code != exitOK {
			t.Fatalf("%s --help: exit %d: %s", cmd.Name(), code, stderr)
		}
		seen := map[string]bool{}
		for _, line := range strings.Split(stdout.String(), "\n") {
			if m := heading.FindStringSubmatch(line); m != nil {
				if seen[m[1]] {
					t.Errorf("elector %s --help has the heading %q twice", cmd.Name(), m[1])
				}
				seen[m[1]] = true
			}
		}
	}
	for _, ignored := range []string{"identity", "lease-duration", "renew-deadline", "retry-period", "redis-replica-acks"} {
		for _, name := range visibleFlags(testCommand(t, "status")) {
			if name == ignored {
				t.Errorf("status has --%s, which status does not use", ignored)
			}
		}
	}
}

// TestHelpShort: each command's help fits in maxHelpLines, names every flag the command
// shows, and links to the command's section of the documentation (issue 43: run's help had
// 145 lines).
func TestHelpShort(t *testing.T) {
	c, _, _ := testCLI(nil)
	for _, cmd := range testRoot(c).Commands() {
		if cmd.Hidden {
			continue
		}
		c, stdout, _ := testCLI(nil)
		if code := c.main(context.Background(), []string{cmd.Name(), "--help"}); code != exitOK {
			t.Fatalf("%s --help: exit %d", cmd.Name(), code)
		}
		help := stdout.String()
		if n := strings.Count(help, "\n"); n > maxHelpLines {
			t.Errorf("elector %s --help has %d lines, more than %d:\n%s", cmd.Name(), n, maxHelpLines, help)
		}
		if link := docsURL + "#" + docsAnchor(cmd.Name()); !strings.Contains(help, link) {
			t.Errorf("elector %s --help does not link to %s", cmd.Name(), link)
		}
		for _, name := range visibleFlags(cmd) {
			if !regexp.MustCompile(`(^|[ ,])--` + regexp.QuoteMeta(name) + `\b`).MatchString(strings.ReplaceAll(help, "\n", " ")) {
				t.Errorf("elector %s --help does not name --%s", cmd.Name(), name)
			}
		}
	}
}

// TestCommandListAligned: every description in the command list of `elector help` starts in
// one column, however long a command's name (issue 28 item 14: "completion" overflowed the
// list's fixed 9 columns).
func TestCommandListAligned(t *testing.T) {
	c, stdout, _ := testCLI(nil)
	if code := c.main(context.Background(), []string{"--help"}); code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	lines := strings.Split(stdout.String(), "\n")
	byName := map[string]string{}
	for _, line := range lines {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") {
			byName[f[0]] = line
		}
	}
	column := -1
	for _, cmd := range testRoot(c).Commands() {
		line, ok := byName[cmd.Name()]
		if !ok {
			t.Errorf("elector --help does not list %s", cmd.Name())
			continue
		}
		col := strings.Index(line, cmd.Short)
		if column < 0 {
			column = col
		}
		if col != column || line[col-2:col] != "  " {
			t.Errorf("elector --help: %q: the description starts at column %d, want %d after two spaces at least", line, col, column)
		}
	}
}

// TestDemoHelpNoRedisDefault: demo --help shows no default --redis-addr (issue 28 item 14):
// without the flag the demo starts its embedded server, not a connection to the default
// address the other commands use.
func TestDemoHelpNoRedisDefault(t *testing.T) {
	c, stdout, _ := testCLI(nil)
	if code := c.main(context.Background(), []string{"demo", "--help"}); code != exitOK {
		t.Fatalf("demo --help: exit %d", code)
	}
	// The flag's entry: its line and the wrapped lines under it, up to the next flag.
	var entry []string
scan:
	for _, line := range strings.Split(stdout.String(), "\n") {
		switch {
		case strings.Contains(line, "--redis-addr host:port"):
			entry = append(entry, line)
		case len(entry) == 0:
		case line == "" || strings.HasPrefix(strings.TrimSpace(line), "-"):
			break scan
		default:
			entry = append(entry, line)
		}
	}
	if len(entry) == 0 {
		t.Fatalf("demo --help does not list --redis-addr:\n%s", stdout)
	}
	if text := strings.Join(entry, "\n"); strings.Contains(text, "(default") {
		t.Errorf("demo --help shows a --redis-addr default:\n%s", text)
	}
	if !strings.Contains(stdout.String(), "without --redis-addr the demo starts an embedded server") {
		t.Errorf("demo --help does not say what it does without --redis-addr:\n%s", stdout)
	}
}
