package timing

import (
	"strings"
	"testing"
	"time"
)

// TestCheckNamesTheDurationAtFault: each rule's error names the durations as the caller does,
// starting with one at fault, and a timing passes exactly when its handover gap is positive
// and the renew deadline exceeds JitterFactor retry periods.
func TestCheckNamesTheDurationAtFault(t *testing.T) {
	names := Names{LeaseDuration: "--lease-duration", RenewDeadline: "--renew-deadline", RetryPeriod: "--retry-period"}
	for _, tc := range []struct {
		ld, rd, rp time.Duration
		want       string
	}{
		{-time.Second, time.Second, time.Second, "--lease-duration (-1s) must be positive"},
		{15 * time.Second, 0, time.Second, "--renew-deadline (0s) must be positive"},
		{15 * time.Second, 10 * time.Second, 0, "--retry-period (0s) must be positive"},
		{1500 * time.Microsecond, time.Millisecond, 100 * time.Microsecond, "--lease-duration (1.5ms) must be a whole number of milliseconds"},
		{15 * time.Second, 14848 * time.Millisecond, time.Second, "--renew-deadline (14.848s) must be shorter than --lease-duration (15s)"},
		{15 * time.Second, 12 * time.Second, 10 * time.Second, "--renew-deadline (12s) must be greater than 1.2 × --retry-period (10s), i.e. --retry-period below 10s"},
	} {
		if err := Check(tc.ld, tc.rd, tc.rp, names); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Check(%v, %v, %v) = %v, want %q", tc.ld, tc.rd, tc.rp, err, tc.want)
		}
	}
	for _, rd := range []time.Duration{14847 * time.Millisecond, 14848 * time.Millisecond} {
		err := Validate(15*time.Second, rd, time.Second)
		if gap := HandoverGap(15*time.Second, rd); (gap > 0) != (err == nil) {
			t.Errorf("renew deadline %v: handover gap %v, Validate %v", rd, gap, err)
		}
	}
	if err := Validate(15*time.Second, 10*time.Second, 2*time.Second); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

// TestCheckSaysWhichValueWasDefaulted: a duration that took its default is shown as such, and
// when a rule ties it to one that was set, the error says to set it too.
func TestCheckSaysWhichValueWasDefaulted(t *testing.T) {
	names := func(lease, renew, retry bool) Names {
		return Names{LeaseDuration: "Config.LeaseDuration", RenewDeadline: "Config.RenewDeadline", RetryPeriod: "Config.RetryPeriod",
			LeaseDefaulted: lease, RenewDefaulted: renew, RetryDefaulted: retry}
	}
	for _, tc := range []struct {
		ld, rd, rp time.Duration
		n          Names
		want       string
	}{
		{5 * time.Second, DefaultRenewDeadline, DefaultRetryPeriod, names(false, true, true),
			"Config.RenewDeadline (default 10s) must be shorter than Config.LeaseDuration (5s) minus the clock-drift margin (52ms), i.e. below 4.948s; set Config.RenewDeadline too"},
		{DefaultLeaseDuration, 20 * time.Second, DefaultRetryPeriod, names(true, false, true),
			"Config.RenewDeadline (20s) must be shorter than Config.LeaseDuration (default 15s) minus the clock-drift margin (152ms), i.e. below 14.848s; set Config.LeaseDuration too"},
		{DefaultLeaseDuration, 2 * time.Second, DefaultRetryPeriod, names(true, false, true),
			"Config.RenewDeadline (2s) must be greater than 1.2 × Config.RetryPeriod (default 2s), i.e. Config.RetryPeriod below 1.667s; set Config.RetryPeriod too"},
		{5 * time.Second, 5 * time.Second, DefaultRetryPeriod, names(false, false, true),
			"Config.RenewDeadline (5s) must be shorter than Config.LeaseDuration (5s) minus the clock-drift margin (52ms), i.e. below 4.948s"},
	} {
		if err := Check(tc.ld, tc.rd, tc.rp, tc.n); err == nil || err.Error() != tc.want {
			t.Errorf("Check(%v, %v, %v) = %v, want %q", tc.ld, tc.rd, tc.rp, err, tc.want)
		}
	}
}

func TestCallTimeout(t *testing.T) {
	for _, tc := range []struct{ rd, rp, want time.Duration }{
		{10 * time.Second, 2 * time.Second, 5 * time.Second},
		{2 * time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond},
	} {
		if got := CallTimeout(tc.rd, tc.rp); got != tc.want {
			t.Errorf("CallTimeout(%v, %v) = %v, want %v", tc.rd, tc.rp, got, tc.want)
		}
	}
}
