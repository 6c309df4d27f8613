package election_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/election"
)

// FuzzValidateTiming checks the duration validation with arbitrary values, the way the CLI
// passes its flags: it never panics, it accepts only LeaseDuration > RenewDeadline + drift
// margin, RenewDeadline > 1.2 × RetryPeriod, all positive and LeaseDuration in whole
// milliseconds, and New applies the same rule after filling in zero values with the defaults,
// refusing negative ones by field name.
func FuzzValidateTiming(f *testing.F) {
	for _, d := range [][3]int64{
		{int64(15 * time.Second), int64(10 * time.Second), int64(2 * time.Second)},
		{0, 0, 0},
		{int64(10 * time.Second), int64(10 * time.Second), int64(time.Second)},
		{int64(10 * time.Second), int64(9950 * time.Millisecond), int64(time.Second)},
		{int64(15*time.Second + 1), int64(10 * time.Second), int64(2 * time.Second)},
		{-1, int64(time.Second), int64(time.Millisecond)},
		{1<<63 - 1, 1<<63 - 2, 1<<62 - 1},
		{int64(time.Millisecond), 1, 1},
	} {
		f.Add(d[0], d[1], d[2])
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // never dialled
	f.Cleanup(func() { _ = client.Close() })
	f.Fuzz(func(t *testing.T, l, r, p int64) {
		lease, renew, retry := time.Duration(l), time.Duration(r), time.Duration(p)
		err := timing.Validate(lease, renew, retry)
		valid := lease > 0 && renew > 0 && retry > 0 && lease%time.Millisecond == 0 &&
			renew < lease-timing.DriftMargin(lease) && float64(renew) > timing.JitterFactor*float64(retry)
		if (err == nil) != valid {
			t.Fatalf("timing.Validate(%v, %v, %v) = %v; the rule says valid=%v", lease, renew, retry, err, valid)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\r\n") {
			t.Fatalf("timing.Validate(%v, %v, %v) error %q spans several lines", lease, renew, retry, err)
		}

		cfg := election.Config{
			Client: client, LeaseName: "job", Identity: "pod-a",
			LeaseDuration: lease, RenewDeadline: renew, RetryPeriod: retry,
			Callbacks: election.Callbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
		}
		e, err := election.New(cfg)
		def := func(d, v time.Duration) time.Duration {
			if d == 0 {
				return v
			}
			return d
		}
		dl, dr, dp := def(lease, timing.DefaultLeaseDuration), def(renew, timing.DefaultRenewDeadline), def(retry, timing.DefaultRetryPeriod)
		switch {
		case lease < 0 || renew < 0 || retry < 0:
			if err == nil || !strings.Contains(err.Error(), "must be positive") {
				t.Fatalf("New with %v, %v, %v: err = %v, want a negative duration named", lease, renew, retry, err)
			}
		case timing.Validate(dl, dr, dp) != nil:
			if err == nil {
				t.Fatalf("New with %v, %v, %v (defaults: %v, %v, %v) succeeded; timing.Validate refuses them", lease, renew, retry, dl, dr, dp)
			}
		case err != nil:
			t.Fatalf("New with %v, %v, %v: %v", lease, renew, retry, err)
		default:
			got := election.ConfigOf(e)
			if got.LeaseDuration != dl || got.RenewDeadline != dr || got.RetryPeriod != dp {
				t.Fatalf("New with %v, %v, %v kept %v, %v, %v; want %v, %v, %v", lease, renew, retry,
					got.LeaseDuration, got.RenewDeadline, got.RetryPeriod, dl, dr, dp)
			}
		}
	})
}
