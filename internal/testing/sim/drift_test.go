package sim

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestDrift: a local clock off by ppm reads ppm more (or less) per second of Redis's, and a
// local duration lasts on Redis's clock until the local clock has advanced by it, not one
// nanosecond less.
func TestDrift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := time.Now()
		time.Sleep(time.Second)
		for _, tc := range []struct {
			ppm  int64
			read time.Duration // local time elapsed after one second of Redis's
		}{{0, time.Second}, {5_000, 1005 * time.Millisecond}, {-5_000, 995 * time.Millisecond}, {-400_000, 600 * time.Millisecond}} {
			d := Drift{Origin: origin, PPM: tc.ppm}
			if got := d.Now().Sub(origin); got != tc.read {
				t.Errorf("ppm %d: local clock read %v after 1s, want %v", tc.ppm, got, tc.read)
			}
			for _, local := range []time.Duration{time.Nanosecond, 987 * time.Millisecond, time.Hour} {
				r := d.Real(local)
				now, target := time.Now(), d.Now().Add(local)
				if d.Local(now.Add(r)).Before(target) || !d.Local(now.Add(r-1)).Before(target) {
					t.Errorf("ppm %d: Real(%v) = %v is not the first instant the local clock advanced by it", tc.ppm, local, r)
				}
			}
		}
	})
}
