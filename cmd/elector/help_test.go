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
