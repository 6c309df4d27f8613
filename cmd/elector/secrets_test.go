package main

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// A secret typed as a flag is refused (exit 2) without its value in the message, whatever
// the number of dashes: "-redis-password=s3cr3t" once came back whole in pflag's
// "unknown shorthand flag" error, and so into the log.
func TestSecretFlagNeverEchoed(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-redis-password=s3cr3t"}, "--redis-password is not a flag"},
		{[]string{"status", "--redis-password=s3cr3t"}, "--redis-password is not a flag"},
		{[]string{"sidecar", "-sentinel-password=s3cr3t"}, "--sentinel-password is not a flag"},
		{[]string{"status", "-lease-name=s3cr3t"}, "a long flag takes two dashes (--lease-name)"},
	} {
		c, _, stderr := testCLI(nil)
		code := c.main(context.Background(), tt.args)
		if code != exitUsage || !strings.Contains(stderr.String(), tt.want) || strings.Contains(stderr.String(), "s3cr3t") {
			t.Errorf("elector %q: exit %d, stderr %q; want exit %d, %q and no value", tt.args, code, stderr, exitUsage, tt.want)
		}
	}
}

// elector run's command starts without the elector's Redis passwords unless
// --keep-redis-credentials; its other variables are kept.
func TestCommandEnvDropsCredentials(t *testing.T) {
	environ := []string{"PATH=/bin", "REDIS_PASSWORD=s3cr3t", "REDIS_SENTINEL_PASSWORD=s3nt", "REDIS_PASSWORD_X=kept", "HOME=/root"}
	if got, want := commandEnv(environ, false), []string{"PATH=/bin", "REDIS_PASSWORD_X=kept", "HOME=/root"}; !slices.Equal(got, want) {
		t.Errorf("commandEnv = %q, want %q", got, want)
	}
	if got := commandEnv(environ, true); !slices.Equal(got, environ) {
		t.Errorf("commandEnv with --keep-redis-credentials = %q, want %q", got, environ)
	}
	if environ[1] != "REDIS_PASSWORD=s3cr3t" {
		t.Errorf("commandEnv changed its argument: %q", environ)
	}
}
