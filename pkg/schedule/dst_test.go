package schedule

import (
	"testing"
	"time"
)

// Daylight saving time. Slots are instants (UTC), computed by robfig/cron/v3 in the schedule's
// zone, which is exactly what a Kubernetes CronJob does: its controller parses
// "TZ=<.spec.timeZone> <.spec.schedule>" with cron.ParseStandard and takes each next time with
// Schedule.Next. So a 02:30 job in Europe/Berlin
//
//   - does not run on the spring-forward day (29 March 2026: 02:00 CET becomes 03:00 CEST, no
//     02:30 exists), and nothing is recorded missed: there is no such slot;
//   - runs twice on the fall-back day (25 October 2026: 03:00 CEST becomes 02:00 CET, 02:30
//     happens twice), as two slots an hour apart, each once.
//
// (Vixie cron differs: it runs a job of the skipped hour right after the change and a job of
// the repeated hour once. elector follows CronJob, whose parser it uses.)

func berlin(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	return loc
}

// slotsBetween lists the slots of s after from, up to and including to.
func slotsBetween(s *Scheduler, from, to time.Time) []time.Time {
	var out []time.Time
	for n := s.Next(from); !n.IsZero() && !n.After(to); n = s.Next(n) {
		out = append(out, n)
	}
	return out
}

func sameSlots(t *testing.T, what string, got []time.Time, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: slots %v, want %v", what, got, want)
	}
	for i := range got {
		if !got[i].Equal(at(want[i])) {
			t.Errorf("%s: slot %d is %v, want %s", what, i, got[i], want[i])
		}
	}
}

func TestDSTSpringForward(t *testing.T) {
	loc := berlin(t)
	for _, cfg := range []Config{
		{Spec: "30 2 * * *", Location: loc},
		{Spec: "CRON_TZ=Europe/Berlin 30 2 * * *"},
	} {
		s := newPlanner(t, cfg)
		got := slotsBetween(s, at("2026-03-27T00:00:00Z"), at("2026-03-31T12:00:00Z"))
		sameSlots(t, cfg.Spec, got,
			"2026-03-27T01:30:00Z", // 02:30 CET
			"2026-03-28T01:30:00Z", // 02:30 CET
			// 29 March: no 02:30
			"2026-03-30T00:30:00Z", // 02:30 CEST
			"2026-03-31T00:30:00Z")
		for _, g := range got {
			if w := g.In(loc); w.Hour() != 2 || w.Minute() != 30 {
				t.Errorf("slot %v is %v in Berlin", g, w)
			}
		}
		// A term that reads the state on the 29th at 03:00 CEST, the 28th's slot done, waits for
		// the 30th: nothing runs, nothing is missed.
		v := stateAt(at("2026-03-28T01:30:00Z"), done("2026-03-28T01:30:00Z"))
		v.now = at("2026-03-29T01:00:00Z")
		if got, want := s.plan(v, current{}, 8, time.Time{}), waitUntil(at("2026-03-30T00:30:00Z")); got != want {
			t.Errorf("plan on the spring-forward day: %+v, want %+v", got, want)
		}
	}
}

func TestDSTFallBack(t *testing.T) {
	loc := berlin(t)
	s := newPlanner(t, Config{Spec: "30 2 * * *", Location: loc})
	got := slotsBetween(s, at("2026-10-23T12:00:00Z"), at("2026-10-26T12:00:00Z"))
	sameSlots(t, "fall back", got,
		"2026-10-24T00:30:00Z", // 02:30 CEST
		"2026-10-25T00:30:00Z", // 02:30 CEST, the first 02:30 of the day
		"2026-10-25T01:30:00Z", // 02:30 CET, the second
		"2026-10-26T01:30:00Z") // 02:30 CET
	// The first 02:30 done, the second is a slot of its own: claimed at 02:30 CET.
	v := stateAt(at("2026-10-25T00:30:00Z"), done("2026-10-25T00:30:00Z"))
	v.now = at("2026-10-25T01:00:00Z")
	if got, want := s.plan(v, current{}, 8, time.Time{}), waitUntil(at("2026-10-25T01:30:00Z")); got != want {
		t.Errorf("plan between the two 02:30s: %+v, want %+v", got, want)
	}
	v.now = at("2026-10-25T01:30:00.004Z")
	if got, want := s.plan(v, current{}, 8, time.Time{}), claim(at("2026-10-25T01:30:00Z")); got != want {
		t.Errorf("plan at the second 02:30: %+v, want %+v", got, want)
	}
	// Both done: the next is the 26th, and a slot is never run twice (claim.lua refuses a slot
	// at or before the cursor: TestClaimRunsASlotOnce).
	v = stateAt(at("2026-10-25T01:30:00Z"), done("2026-10-25T01:30:00Z"))
	v.now = at("2026-10-25T01:31:00Z")
	if got, want := s.plan(v, current{}, 8, time.Time{}), waitUntil(at("2026-10-26T01:30:00Z")); got != want {
		t.Errorf("plan after the second 02:30: %+v, want %+v", got, want)
	}
	// Hourly in the repeated hour: 02:00 CEST and 02:00 CET are both slots.
	h := newPlanner(t, Config{Spec: "0 * * * *", Location: loc})
	sameSlots(t, "hourly", slotsBetween(h, at("2026-10-24T23:30:00Z"), at("2026-10-25T02:30:00Z")),
		"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z")
}
