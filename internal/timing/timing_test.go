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
	names := Names{"--lease-duration", "--renew-deadline", "--retry-period"}
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
