package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/elector/elector/internal/timing"
)

// TestValidateTimingNamesFlags checks that the library's timing check, applied to the flags,
// names the flag at fault and the flag its bound comes from.
func TestValidateTimingNamesFlags(t *testing.T) {
	for _, tc := range []struct {
		ld, rd, rp time.Duration
		want       string
	}{
		{0, 10 * time.Second, 2 * time.Second, "--lease-duration (0s) must be positive"},
		{15 * time.Second, -time.Second, 2 * time.Second, "--renew-deadline (-1s) must be positive"},
		{15*time.Second + time.Microsecond, 10 * time.Second, 2 * time.Second, "--lease-duration (15.000001s) must be a whole number of milliseconds"},
		{15 * time.Second, 15 * time.Second, 2 * time.Second, "--renew-deadline (15s) must be shorter than --lease-duration (15s) minus the clock-drift margin (152ms), i.e. below 14.848s"},
		{15 * time.Second, 10 * time.Second, 9 * time.Second, "--renew-deadline (10s) must be greater than 1.2 × --retry-period (9s), i.e. --retry-period below 8.333s"},
	} {
		if err := validateTiming(tc.ld, tc.rd, tc.rp); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("validateTiming(%v, %v, %v) = %v, want %q", tc.ld, tc.rd, tc.rp, err, tc.want)
		}
	}
	if err := validateTiming(timing.DefaultLeaseDuration, timing.DefaultRenewDeadline, timing.DefaultRetryPeriod); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
}

// TestCallTimeout: the client's timeouts are the library's per-call bound.
func TestCallTimeout(t *testing.T) {
	for _, tc := range []struct{ renew, retry, want time.Duration }{
		{600 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond},
		{10 * time.Second, 2 * time.Second, 5 * time.Second},
		{time.Minute, 2 * time.Second, 30 * time.Second},
		{2 * time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond},
	} {
		o := leaseOptions{renewDeadline: tc.renew, retryPeriod: tc.retry}
		if got := o.callTimeout(); got != tc.want {
			t.Errorf("callTimeout(renew %v, retry %v) = %v, want %v", tc.renew, tc.retry, got, tc.want)
		}
	}
}

func TestParseSignal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want syscall.Signal
	}{
		{"SIGTERM", syscall.SIGTERM}, {"TERM", syscall.SIGTERM}, {"term", syscall.SIGTERM}, {"sigterm", syscall.SIGTERM},
		{"15", syscall.SIGTERM}, {"SIGQUIT", syscall.SIGQUIT}, {"USR1", syscall.SIGUSR1}, {"SIGKILL", syscall.SIGKILL},
		{"SIGINT", syscall.SIGINT}, {"HUP", syscall.SIGHUP}, {"WINCH", syscall.SIGWINCH}, {"64", syscall.Signal(64)},
	} {
		got, err := parseSignal(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseSignal(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "SIG", "SIGFOO", "0", "65", "-1", "TERM2"} {
		if _, err := parseSignal(bad); err == nil {
			t.Errorf("parseSignal(%q) accepted", bad)
		}
	}
}

func TestChildEnv(t *testing.T) {
	base := []string{"PATH=/bin", "ELECTOR_FENCING_TOKEN=1", "ELECTOR_IDENTITY=old", "ELECTOR_LEASE_NAME=old", "ELECTOR_REDIS_ADDR=r:1", "HOME=/root"}
	got := childEnv(base, 42, "pod-a", "job")
	want := []string{"PATH=/bin", "ELECTOR_REDIS_ADDR=r:1", "HOME=/root", "ELECTOR_FENCING_TOKEN=42", "ELECTOR_IDENTITY=pod-a", "ELECTOR_LEASE_NAME=job"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("childEnv = %q, want %q", got, want)
	}
}

func TestCommandAfterDash(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // command line, or the error's start
	}{
		{[]string{"--", "sleep", "1"}, "sleep 1"},
		{[]string{"--x", "1", "--", "sh", "-c", "--x"}, "sh -c --x"},
		{[]string{"--"}, "--: no command after it"},
		{[]string{}, "--: missing, and no command"},
		{[]string{"sleep", "1"}, `--: missing before the command "sleep"`},
		{[]string{"a", "--", "sleep"}, `--: unexpected argument "a"`},
	} {
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		fs.String("x", "", "")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		argv, err := commandAfterDash(fs)
		got := strings.Join(argv, " ")
		if err != nil {
			got = err.Error()
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestValidateListenAddr(t *testing.T) {
	for _, ok := range []string{":8080", "127.0.0.1:0", "[::1]:9090", "localhost:65535"} {
		if err := validateListenAddr(flagHTTPAddr, ok); err != nil {
			t.Errorf("%q rejected: %v", ok, err)
		}
	}
	for _, bad := range []string{"8080", ":http", ":65536", "host:-1", "a:b:c"} {
		err := validateListenAddr(flagHTTPAddr, bad)
		if err == nil || !strings.HasPrefix(err.Error(), "--http-addr") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestCandidateFlags: the candidate flags of run and sidecar are checked before anything
// contacts Redis, each error naming the flag (also when set from the environment), and reach
// the Config.
func TestCandidateFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"sidecar", "--lease-name", "x", "--identity", "a", "--prefer", "best"}, nil, `--prefer: "best" is not a policy`},
		{[]string{"run", "--lease-name", "x", "--identity", "a", "--prefer", "newest", "--", "true"}, nil, "--prefer newest ranks replicas by --candidate-version, which is not set"},
		{[]string{"sidecar", "--lease-name", "x", "--identity", "a", "--prefer", "oldest", "--candidate-version", "v1", "--candidate-priority", "2"}, nil, "--prefer and --candidate-priority both set the priority"},
		{[]string{"sidecar", "--lease-name", "x", "--identity", "a"}, map[string]string{"ELECTOR_CANDIDATE_VERSION": "v1\x01"}, "--candidate-version:"},
		{[]string{"sidecar", "--lease-name", "x", "--identity", "a"}, map[string]string{"ELECTOR_CANDIDATE_PRIORITY": "high"}, "candidate-priority"},
	} {
		c, _, stderr := testCLI(tt.env)
		if code := c.main(context.Background(), tt.args); code != exitUsage || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("elector %q (env %v): exit %d, stderr %q; want exit %d and %q", tt.args, tt.env, code, stderr, exitUsage, tt.want)
		}
	}
	var o commonOptions
	o.cand = candidacy{version: "billing v2.1.0", prefer: preferNewest}
	if err := o.validateCandidate(); err != nil || o.cand.priority != versionPriority(preferNewest, "v2.1.0") {
		t.Errorf("--prefer newest --candidate-version %q: priority %d, err %v; want %d", o.cand.version, o.cand.priority, err, versionPriority(preferNewest, "v2.1.0"))
	}
}
