package timing

import (
	"strings"
	"testing"
	"time"
)

// TestCheckNamesTheDurationAtFault: each rule's error starts with the name the caller gave the
// duration at fault, and a timing passes exactly when its handover gap is positive and the
// renew deadline exceeds JitterFactor retry periods.
func TestCheckNamesTheDurationAtFault(t *testing.T) {
	names := Names{"--lease-duration", "--renew-deadline", "--retry-period"}
	for _, tc := range []struct {
		ld, rd, rp time.Duration
		want       string
	}{
		{-time.Second, time.Second, time.Second, "--lease-duration: must be a positive duration"},
		{15 * time.Second, 0, time.Second, "--renew-deadline: must be a positive duration"},
		{15 * time.Second, 10 * time.Second, 0, "--retry-period: must be a positive duration"},
		{1500 * time.Microsecond, time.Millisecond, 100 * time.Microsecond, "--lease-duration: must be a whole number of milliseconds"},
		{15 * time.Second, 14848 * time.Millisecond, time.Second, "--renew-deadline: must be shorter than --lease-duration (15s)"},
		{15 * time.Second, 12 * time.Second, 10 * time.Second, "--retry-period: must be less than --renew-deadline (12s) / 1.2, i.e. below 10s; got 10s"},
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
