package main

import (
	"strings"
	"testing"
	"time"

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
