package main

import (
	"context"
	"strings"
	"testing"
)

// TestHelpHeadingsOnce: every heading of a command's help appears once (run printed "Redis
// flags:" twice, status "Status flags:" twice), and status lists no flag it ignores.
func TestHelpHeadingsOnce(t *testing.T) {
	for _, cmd := range commands() {
		c, stdout, stderr := testCLI(nil)
		if code := c.main(context.Background(), []string{cmd.name, "--help"}); code != exitOK {
			t.Fatalf("%s --help: exit %d: %s", cmd.name, code, stderr)
		}
		seen := map[string]bool{}
		for _, line := range strings.Split(stdout.String(), "\n") {
			if strings.HasSuffix(line, "flags:") || strings.HasSuffix(line, "):") && !strings.HasPrefix(line, " ") {
				if seen[line] {
					t.Errorf("elector %s --help has the heading %q twice", cmd.name, line)
				}
				seen[line] = true
			}
		}
	}
	for _, ignored := range []string{"identity", "lease-duration", "renew-deadline", "retry-period", "redis-replica-acks"} {
		for _, name := range flagsInHelp(t, "status") {
			if name == ignored {
				t.Errorf("status --help lists --%s, which status does not use", ignored)
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
	for _, cmd := range commands() {
		line, ok := byName[cmd.name]
		if !ok {
			t.Errorf("elector --help does not list %s", cmd.name)
			continue
		}
		col := strings.Index(line, cmd.short)
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
