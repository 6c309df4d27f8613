// Package timing holds the timing rules of an election: the default durations, the clock-drift margin, client-go's
// jitter factor, the check that ties LeaseDuration, RenewDeadline and RetryPeriod together,
// the timeout of one Redis call, and how long a subscription stays silent before it pings.
// package election enforces them; the CLI checks its flags with the same Check (naming the
// flags through Names) and times its Redis client with CallTimeout; internal/leasekit's
// subscriptions use HealthInterval.
//
// It owns numbers and checks only: it must not talk to Redis, start timers, or know of flags.
package timing

import (
	"fmt"
	"time"
)

// The defaults of LeaseDuration, RenewDeadline and RetryPeriod, the same as client-go's
// leaderelection: package election takes them for zero durations, the CLI for its flags.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
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

// Names are what the errors of Check call the three durations: words for Validate, the
// fields for election's Config ("Config.LeaseDuration"), the flags for the CLI. A duration
// marked Defaulted was not set and took its default: the error says "(default 10s)" and, when
// the rule it breaks ties it to one that was set, to set it too.
type Names struct {
	LeaseDuration, RenewDeadline, RetryPeriod string

	LeaseDefaulted, RenewDefaulted, RetryDefaulted bool
}

// Validate is Check with the durations named in words: "lease duration", "renew deadline",
// "retry period".
func Validate(leaseDuration, renewDeadline, retryPeriod time.Duration) error {
	return Check(leaseDuration, renewDeadline, retryPeriod, Names{LeaseDuration: "lease duration", RenewDeadline: "renew deadline", RetryPeriod: "retry period"})
}

// Check checks LeaseDuration > RenewDeadline > JitterFactor × RetryPeriod > 0, with
// LeaseDuration a whole number of milliseconds and RenewDeadline shorter than LeaseDuration
// minus its DriftMargin (a positive HandoverGap). It is the one check of these rules: package
// election applies it to its Config, the CLI to its flags. Its error, one line, names the
// durations as n does, with their values, and says what would pass:
//
//	renew deadline (15s) must be shorter than lease duration (15s) minus the clock-drift margin (152ms), i.e. below 14.848s
//	Config.RenewDeadline (default 10s) must be shorter than Config.LeaseDuration (5s) minus the clock-drift margin (52ms), i.e. below 4.948s; set Config.RenewDeadline too
func Check(leaseDuration, renewDeadline, retryPeriod time.Duration, n Names) error {
	lease := named{n.LeaseDuration, leaseDuration, n.LeaseDefaulted}
	renew := named{n.RenewDeadline, renewDeadline, n.RenewDefaulted}
	retry := named{n.RetryPeriod, retryPeriod, n.RetryDefaulted}
	for _, d := range []named{lease, renew, retry} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive", d)
		}
	}
	if leaseDuration%time.Millisecond != 0 {
		return fmt.Errorf("%s must be a whole number of milliseconds", lease)
	}
	if HandoverGap(leaseDuration, renewDeadline) <= 0 {
		return fmt.Errorf("%s must be shorter than %s minus the clock-drift margin (%v), i.e. below %v%s",
			renew, lease, DriftMargin(leaseDuration), leaseDuration-DriftMargin(leaseDuration), setToo(renew, lease))
	}
	if float64(renewDeadline) <= JitterFactor*float64(retryPeriod) {
		return fmt.Errorf("%s must be greater than %.1f × %s, i.e. %s below %v%s",
			renew, JitterFactor, retry, n.RetryPeriod,
			time.Duration(float64(renewDeadline)/JitterFactor).Round(time.Millisecond), setToo(renew, retry))
	}
	return nil
}

// named is a duration as an error of Check shows it: "name (10s)", or "name (default 10s)".
type named struct {
	name      string
	v         time.Duration
	defaulted bool
}

func (d named) String() string {
	if d.defaulted {
		return fmt.Sprintf("%s (default %v)", d.name, d.v)
	}
	return fmt.Sprintf("%s (%v)", d.name, d.v)
}

// setToo returns the advice that ends the error of a rule between a and b when one took its
// default and the other was set: the default does not fit the value set, so set it too.
func setToo(a, b named) string {
	switch {
	case a.defaulted && !b.defaulted:
		return "; set " + a.name + " too"
	case b.defaulted && !a.defaulted:
		return "; set " + b.name + " too"
	}
	return ""
}
