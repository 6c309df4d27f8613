// Package timing holds the timing rules of an election: the clock-drift margin, client-go's
// jitter factor, the check that ties LeaseDuration, RenewDeadline and RetryPeriod together,
// the timeout of one Redis call, and how long a subscription stays silent before it pings.
// package election enforces them; the CLI checks its flags with the same Check (naming the
// flags through Names) and times its Redis client with CallTimeout; pkg/lease's subscriptions
// use HealthInterval.
//
// It owns numbers and checks only: it must not talk to Redis, start timers, or know of flags.
package timing

import (
	"fmt"
	"time"
)

// JitterFactor is client-go's: RenewDeadline must exceed JitterFactor × RetryPeriod, so that a
// leader gets more than one renew attempt before its deadline.
const JitterFactor = 1.2

// HealthInterval is how long a subscription waits without a message before it pings Redis;
// when the answer has not come after another HealthInterval, the connection is taken for
// dead and the subscription ends.
const HealthInterval = 3 * time.Second

// DriftMargin returns the clock-drift allowance subtracted from a lease's duration before the
// holder stops trusting it: 1% of the duration plus 2ms (the allowance of Redlock). Local
// monotonic clocks and Redis's clock may run at slightly different rates; over a 15s lease
// the margin is 152ms.
func DriftMargin(leaseDuration time.Duration) time.Duration {
	return leaseDuration/100 + 2*time.Millisecond
}

// HandoverGap is the least time between the moment a leader stops trusting its term, at
// renewDeadline after its last successful renewal at the latest, and the moment another
// replica can acquire the lease, which expires no earlier than leaseDuration minus the
// DriftMargin by the leader's clock. Check keeps it positive; work stopped within it is surely
// over before another term begins (the CLI's --kill-grace bound).
func HandoverGap(leaseDuration, renewDeadline time.Duration) time.Duration {
	return leaseDuration - renewDeadline - DriftMargin(leaseDuration)
}

// CallTimeout bounds one Redis call of an election: max(retryPeriod, renewDeadline/2), so that
// a round trip slower than retryPeriod still succeeds while a leader keeps at least two renew
// attempts before its deadline (a renew is also never allowed past the deadline). package
// election bounds each call and each batch with it; the CLI gives its Redis client the same
// dial, read and write timeouts.
func CallTimeout(renewDeadline, retryPeriod time.Duration) time.Duration {
	return max(retryPeriod, renewDeadline/2)
}

// Names are what the errors of Check call the three durations: election's Config fields
// (Validate), or the CLI's flags.
type Names struct {
	LeaseDuration, RenewDeadline, RetryPeriod string
}

// Validate is Check with the names of election's Config fields.
func Validate(leaseDuration, renewDeadline, retryPeriod time.Duration) error {
	return Check(leaseDuration, renewDeadline, retryPeriod, Names{"LeaseDuration", "RenewDeadline", "RetryPeriod"})
}

// Check checks LeaseDuration > RenewDeadline > JitterFactor × RetryPeriod > 0, with
// LeaseDuration a whole number of milliseconds and RenewDeadline shorter than LeaseDuration
// minus its DriftMargin. It is the one check of these rules: package election applies it to
// its Config, the CLI to its flags. Its error starts with the name of the duration at fault,
// then says what that duration must be and why, in one line:
//
//	RenewDeadline: must be shorter than LeaseDuration (15s) minus its clock-drift margin (152ms), i.e. below 14.848s; got 15s
func Check(leaseDuration, renewDeadline, retryPeriod time.Duration, n Names) error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{n.LeaseDuration, leaseDuration}, {n.RenewDeadline, renewDeadline}, {n.RetryPeriod, retryPeriod}} {
		if d.v <= 0 {
			return fmt.Errorf("%s: must be a positive duration such as 15s or 500ms, got %v", d.name, d.v)
		}
	}
	if leaseDuration%time.Millisecond != 0 {
		return fmt.Errorf("%s: must be a whole number of milliseconds, got %v", n.LeaseDuration, leaseDuration)
	}
	if HandoverGap(leaseDuration, renewDeadline) <= 0 {
		limit := leaseDuration - DriftMargin(leaseDuration)
		return fmt.Errorf("%s: must be shorter than %s (%v) minus its clock-drift margin (%v), i.e. below %v; got %v",
			n.RenewDeadline, n.LeaseDuration, leaseDuration, DriftMargin(leaseDuration), limit, renewDeadline)
	}
	if float64(renewDeadline) <= JitterFactor*float64(retryPeriod) {
		return fmt.Errorf("%s: must be less than %s (%v) / %.1f, i.e. below %v; got %v",
			n.RetryPeriod, n.RenewDeadline, renewDeadline, JitterFactor,
			time.Duration(float64(renewDeadline)/JitterFactor).Round(time.Millisecond), retryPeriod)
	}
	return nil
}
