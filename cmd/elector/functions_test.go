package main

import (
	"context"
	"strings"
	"testing"

	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/internal/testing/redistest"
)

// install-functions --print prints the library, needing no Redis; an argument or a bad flag
// value is a usage error (2); with Redis, it loads the library, and again without error.
func TestInstallFunctions(t *testing.T) {
	ctx := context.Background()
	c, stdout, stderr := testCLI(nil)
	if code := c.main(ctx, []string{"install-functions", "--print"}); code != exitOK {
		t.Fatalf("--print: exit %d, stderr %q", code, stderr)
	}
	_, text, err := lualib.Library()
	if err != nil || stdout.String() != text {
		t.Errorf("--print printed %.80q, want the library (%v)", stdout, err)
	}
	for _, args := range [][]string{
		{"install-functions", "now"},
		{"install-functions", "--redis-mode", "ring"},
		{"install-functions", "--redis-scripts", "functions"}, // not a flag of install-functions
	} {
		c, _, stderr := testCLI(nil)
		if code := c.main(ctx, args); code != exitUsage {
			t.Errorf("%v: exit %d, stderr %q; want the usage error %d", args, code, stderr, exitUsage)
		}
	}
	srv := redistest.Start(t)
	for _, want := range []string{"library " + lualib.LibraryName() + " loaded", "already loaded"} {
		c, stdout, stderr := testCLI(nil)
		if code := c.main(ctx, []string{"install-functions", "--redis-addr", srv.Addr()}); code != exitOK || !strings.Contains(stdout.String(), want) {
			t.Errorf("install-functions: exit %d, %q, stderr %q; want 0 and %q", code, stdout, stderr, want)
		}
	}
	c, _, stderr = testCLI(nil)
	if code := c.main(ctx, []string{"status", "--lease-name", "x", "--redis-scripts", "sometimes"}); code != exitUsage ||
		!strings.Contains(stderr.String(), "--redis-scripts") {
		t.Errorf("--redis-scripts sometimes: exit %d, stderr %q; want a usage error naming the flag", code, stderr)
	}
}
