package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/elector/elector/internal/timing"
)

// TestKillGraceBound checks the bound of the --kill-grace warning, drift margin included, and
// that the default --kill-grace is within it at the default timing (the old 5s was not:
// 15s - 10s - 152ms = 4.848s).
func TestKillGraceBound(t *testing.T) {
	for _, tc := range []struct {
		lease, renew, want time.Duration
	}{
		{timing.DefaultLeaseDuration, timing.DefaultRenewDeadline, 4848 * time.Millisecond},
		{time.Second, 600 * time.Millisecond, 388 * time.Millisecond},
		{40 * time.Second, 15 * time.Second, 24598 * time.Millisecond},
	} {
		lo := &leaseOptions{leaseDuration: tc.lease, renewDeadline: tc.renew}
		if got := killGraceBound(lo); got != tc.want {
			t.Errorf("bound for lease %v, renew deadline %v: %v, want %v", tc.lease, tc.renew, got, tc.want)
		}
	}

	var o runOptions
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	o.addFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	lo := &leaseOptions{leaseDuration: timing.DefaultLeaseDuration, renewDeadline: timing.DefaultRenewDeadline}
	if o.killGrace != 4*time.Second || o.killGrace > killGraceBound(lo) {
		t.Errorf("default --kill-grace %v, want 4s, within the bound %v of the default timing", o.killGrace, killGraceBound(lo))
	}
}

// TestRunOptionsValidate checks the errors of the run flags: each names its flag.
func TestRunOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for valid
	}{
		{nil, ""},
		{[]string{"--on-success=hold", "--timeout=30s", "--try-once"}, ""},
		{[]string{"--on-success=release"}, ""},
		{[]string{"--on-success=HOLD"}, `--on-success: want release or hold, got "HOLD"`},
		{[]string{"--on-success="}, `--on-success: want release or hold, got ""`},
		{[]string{"--timeout=-1ms"}, "--timeout: must be 0 (no timeout) or a positive duration"},
		{[]string{"--kill-grace=-1s"}, "--kill-grace: must be 0 or a positive duration"},
		{[]string{"--stop-signal=NOPE"}, "--stop-signal: unknown signal"},
	} {
		var o runOptions
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		o.addFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestKillGraceFromLeaseTiming runs `elector run`'s parsing: an unset --kill-grace follows the
// lease timing (4s at the default, 5/6 of the bound when that is shorter, also with the timing
// from the environment), and one above its bound is a usage error, exit 2, that names the
// flag, the bound and how it is derived (issue 42, item 5).
func TestKillGraceFromLeaseTiming(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want time.Duration // the --kill-grace run uses; 0 with err
		err  string
	}{
		{"default timing", nil, nil, 4 * time.Second, ""},
		{"short lease", nil, []string{"--lease-duration=5s", "--renew-deadline=4s"}, 790 * time.Millisecond, ""},
		{"short lease from the environment", map[string]string{"ELECTOR_LEASE_DURATION": "5s", "ELECTOR_RENEW_DEADLINE": "4s"}, nil, 790 * time.Millisecond, ""},
		{"test timing", nil, []string{"--lease-duration=1s", "--renew-deadline=600ms", "--retry-period=150ms"}, 323333330 * time.Nanosecond, ""},
		{"long lease keeps 4s", nil, []string{"--lease-duration=40s", "--renew-deadline=15s"}, 4 * time.Second, ""},
		{"set within the bound", nil, []string{"--kill-grace=4848ms"}, 4848 * time.Millisecond, ""},
		{"set to 0", nil, []string{"--lease-duration=5s", "--renew-deadline=4s", "--kill-grace=0"}, 0, ""},
		{"set above the bound", nil, []string{"--kill-grace=4849ms"}, 0,
			"elector run: --kill-grace: 4.849s is longer than its bound, --lease-duration minus --renew-deadline minus the drift margin (1% of --lease-duration + 2ms): 15s - 10s - 152ms = 4.848s;"},
		{"default above a short lease's bound", nil, []string{"--lease-duration=5s", "--renew-deadline=4s", "--kill-grace=4s"}, 0,
			"--kill-grace: 4s is longer than its bound, --lease-duration minus --renew-deadline minus the drift margin (1% of --lease-duration + 2ms): 5s - 4s - 52ms = 948ms;"},
		{"from the environment above the bound", map[string]string{"ELECTOR_KILL_GRACE": "1s"}, []string{"--lease-duration=5s", "--renew-deadline=4s"}, 0,
			"set it to 948ms or less"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, stderr := testCLI(tc.env)
			args := append([]string{"--lease-name=k", "--identity=a"}, tc.args...)
			rc, code, ok := parseRun(c, append(args, "--", "true"))
			if tc.err != "" {
				if ok || code != exitUsage || !strings.Contains(stderr.String(), tc.err) {
					t.Errorf("ok %v, exit code %d, stderr %q; want exit %d and %q", ok, code, stderr, exitUsage, tc.err)
				}
				return
			}
			if !ok {
				t.Fatalf("exit code %d, stderr %s", code, stderr)
			}
			if rc.run.killGrace != tc.want {
				t.Errorf("--kill-grace %v, want %v", rc.run.killGrace, tc.want)
			}
			if b := killGraceBound(&rc.common.lease); rc.run.killGrace > b {
				t.Errorf("--kill-grace %v above the bound %v", rc.run.killGrace, b)
			}
		})
	}
}

// parseRun parses args as elector run's, through the command tree as main does, and checks
// them without running anything; ok is false when run would exit with code.
func parseRun(c *cli, args []string) (rc *runConfig, code int, ok bool) {
	run, rc := c.newRunCmd()
	run.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := c.completeRun(cmd, rc); err != nil {
			return exitStatus(c.usageError("elector run", err))
		}
		ok = true
		return nil
	}
	return rc, c.execute(context.Background(), c.newRoot(run), append([]string{"run"}, args...)), ok
}
