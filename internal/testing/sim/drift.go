package sim

import "time"

// Drift is a node's local clock running at its own rate: PPM parts per million faster
// (positive) or slower (negative) than Redis's clock, the bubble's. Both read the same at
// Origin. A replica measures every duration on its local clock (its deadlines, its sleeps
// until a lease's known expiry); Redis expires keys on its own.
type Drift struct {
	Origin time.Time
	PPM    int64
}

// Now returns the local clock's reading now.
func (d Drift) Now() time.Time { return d.Local(time.Now()) }

// Local returns the local clock's reading at the instant t of Redis's clock.
func (d Drift) Local(t time.Time) time.Time {
	if d.PPM == 0 {
		return t
	}
	el := t.Sub(d.Origin)
	return d.Origin.Add(el + el/1_000_000*time.Duration(d.PPM) + el%1_000_000*time.Duration(d.PPM)/1_000_000)
}

// Real returns how long a duration of the local clock, from now, lasts on Redis's clock: the
// first instant at which the local clock has advanced by local (a timer of the local clock
// never fires early).
func (d Drift) Real(local time.Duration) time.Duration {
	if d.PPM == 0 || local <= 0 {
		return local
	}
	now := time.Now()
	target := d.Local(now).Add(local)
	r := time.Duration(float64(local) * 1e6 / float64(1_000_000+d.PPM)) // within a few ns
	for r > 0 && !d.Local(now.Add(r-1)).Before(target) {
		r--
	}
	for d.Local(now.Add(r)).Before(target) {
		r++
	}
	return r
}
