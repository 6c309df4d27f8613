package redistest

import "time"

// WallClock strips t's monotonic reading, so that differences of its results are taken on the
// wall clock, the clock Redis (and miniredis) keeps expiries on. Compare a key's expiry with
// WallClock readings, not with time.Since: a host whose wall clock is being corrected (NTP, a
// hypervisor's time sync) runs it at another rate than the monotonic clock for a while — a CI
// machine of ours measured 5 ms/s, which made expiries look 25–40 ms early on the monotonic
// clock (docs/DESIGN.md; hack/clockstep reproduces it).
func WallClock(t time.Time) time.Time { return t.Round(0) }
