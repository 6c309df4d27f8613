package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/election"
)

// TestValidateTimingAgreesWithLibrary checks that the flag-naming checks accept exactly what
// timing.Validate accepts, on a grid around every boundary.
func TestValidateTimingAgreesWithLibrary(t *testing.T) {
	values := []time.Duration{
		-time.Second, 0, time.Microsecond, 500 * time.Microsecond, 1500 * time.Microsecond,
		100 * time.Millisecond, 499 * time.Millisecond, 500 * time.Millisecond, 501 * time.Millisecond,
		600 * time.Millisecond, 601 * time.Millisecond, 988 * time.Millisecond, 989 * time.Millisecond,
		time.Second, 1200 * time.Millisecond, 2 * time.Second, 10 * time.Second, 14848 * time.Millisecond,
		14849 * time.Millisecond, 15 * time.Second,
	}
	for _, ld := range values {
		for _, rd := range values {
			for _, rp := range values {
				lib := timing.Validate(ld, rd, rp)
				ours := validateTiming(ld, rd, rp)
				if (lib == nil) != (ours == nil) {
					t.Errorf("lease %v, renew %v, retry %v: library says %v, flags say %v", ld, rd, rp, lib, ours)
				}
				if ours != nil && !strings.HasPrefix(ours.Error(), "--") {
					t.Errorf("error does not start with the flag: %v", ours)
				}
			}
		}
	}
	if err := validateTiming(election.DefaultLeaseDuration, election.DefaultRenewDeadline, election.DefaultRetryPeriod); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
}

func TestCallTimeout(t *testing.T) {
	for _, tc := range []struct{ renew, want time.Duration }{
		{600 * time.Millisecond, 300 * time.Millisecond},
		{10 * time.Second, 5 * time.Second},
		{time.Minute, 5 * time.Second},
	} {
		if got := callTimeout(tc.renew); got != tc.want {
			t.Errorf("callTimeout(%v) = %v, want %v", tc.renew, got, tc.want)
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
