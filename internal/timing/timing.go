// Package timing holds the timing rules of an election: the clock-drift margin, client-go's
// jitter factor, the check that ties LeaseDuration, RenewDeadline and RetryPeriod together,
// and how long a subscription stays silent before it pings. package election enforces them,
// the CLI words its flag errors with them, pkg/lease's subscriptions use HealthInterval.
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

// Validate checks LeaseDuration > RenewDeadline > JitterFactor × RetryPeriod > 0, with
// LeaseDuration a whole number of milliseconds and RenewDeadline shorter than LeaseDuration
// minus its DriftMargin. The CLI uses it for its flags, so errors name the fields in words
// that match both.
func Validate(leaseDuration, renewDeadline, retryPeriod time.Duration) error {
	switch {
	case leaseDuration <= 0 || renewDeadline <= 0 || retryPeriod <= 0:
		return fmt.Errorf("lease duration (%v), renew deadline (%v) and retry period (%v) must all be positive",
			leaseDuration, renewDeadline, retryPeriod)
	case leaseDuration%time.Millisecond != 0:
		return fmt.Errorf("lease duration %v must be a whole number of milliseconds", leaseDuration)
	case renewDeadline >= leaseDuration-DriftMargin(leaseDuration):
		return fmt.Errorf("renew deadline (%v) must be shorter than lease duration (%v) minus the clock-drift margin (%v)",
			renewDeadline, leaseDuration, DriftMargin(leaseDuration))
	case float64(renewDeadline) <= JitterFactor*float64(retryPeriod):
		return fmt.Errorf("renew deadline (%v) must be greater than %.1f × retry period (%v)",
			renewDeadline, JitterFactor, retryPeriod)
	}
	return nil
}
