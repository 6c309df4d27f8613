package election

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/elector/elector/pkg/lease"
)

// A dead record of this identity, found again just after the expiry first seen (Redis
// counts TTLs in whole milliseconds: the follower can come back a fraction of one early; and
// on its own clock, which may run slower than the local one), is no twin; one found after
// that expiry with a later one was renewed: a twin. (CI once warned about the dead one, and
// make flake-hunt, with the wall clock 0.5 % slow, about one found 4 ms after its expiry.)
func TestTwinWatchRenewedOnly(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type sighting struct {
		ttl        time.Duration
		sent, seen time.Time
	}
	for _, c := range []struct {
		name   string
		second sighting // after the first: 800 ms at t0
		warn   bool
	}{
		{"dead, a fraction of a millisecond after", sighting{ms, at(799 * ms), at(800*ms + 500*time.Microsecond)}, false},
		{"dead, the server's clock 0.5 % slow", sighting{3 * ms, at(801 * ms), at(802 * ms)}, false},
		{"dead, the reply 30 ms late", sighting{3 * ms, at(801 * ms), at(834 * ms)}, false},
		{"renewed", sighting{700 * ms, at(899 * ms), at(900 * ms)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			logger := funcr.New(func(prefix, args string) { out.WriteString(args + "\n") }, funcr.Options{})
			rec := lease.Record{Identity: "host-1", Instance: "deadbeef", Token: 5}
			var w twinWatch
			w.saw(logger, "Config.Identity", "host-1", "mine", rec, 800*ms, false, t0.Add(-ms), t0)
			w.saw(logger, "Config.Identity", "host-1", "mine", rec, c.second.ttl, false, c.second.sent, c.second.seen)
			if warned := strings.Contains(out.String(), "another process campaigns under this replica's identity"); warned != c.warn {
				t.Fatalf("warned %v, want %v: %q", warned, c.warn, out.String())
			}
		})
	}
}
