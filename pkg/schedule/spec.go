package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// parseSpec parses a cron spec with robfig/cron/v3's standard parser (five fields, or a
// descriptor: @hourly, @daily, @every 5m, ...; a CRON_TZ= or TZ= prefix names the zone) and
// returns its slots in loc (UTC when nil). A spec's own zone must agree with loc when both are
// given.
//
// @every D is the one change to robfig's meaning: its slots are the multiples of D since
// 1970-01-01 00:00 UTC, not D after whenever a process started its cron, so that every
// replica, and every term, computes the same slots.
func parseSpec(spec string, loc *time.Location) (cron.Schedule, error) {
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", spec, err)
	}
	switch s := sched.(type) {
	case cron.ConstantDelaySchedule:
		return everySchedule{s.Delay}, nil
	case *cron.SpecSchedule:
		hasTZ := strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=")
		switch {
		case !hasTZ && loc != nil:
			s.Location = loc
		case !hasTZ:
			s.Location = time.UTC
		case loc != nil && loc.String() != s.Location.String():
			return nil, fmt.Errorf("schedule %q names the time zone %s, and the time zone %s is given too", spec, s.Location, loc)
		}
		return s, nil
	}
	return nil, fmt.Errorf("schedule %q: unknown kind %T", spec, sched)
}

// everySchedule is @every D counted from the Unix epoch.
type everySchedule struct{ d time.Duration }

// Next returns the first multiple of d since the epoch after t.
func (e everySchedule) Next(t time.Time) time.Time {
	n := t.UnixNano()
	d := int64(e.d)
	next := (n/d + 1) * d
	if n < 0 && n%d != 0 {
		next -= d
	}
	return time.Unix(0, next).UTC()
}

// maxEnumerate bounds the slots one plan counts: a larger backlog is decided in chunks of it.
const maxEnumerate = 100_000

// dueRange returns, for the first undecided slot first (not after now), the last slot at or
// before now, the one before it (zero if first is the last), and how many slots lie from
// first to last; at most maxEnumerate (then last is where counting stopped).
func dueRange(s cron.Schedule, first, now time.Time) (last, prev time.Time, count int) {
	last, count = first, 1
	for count < maxEnumerate {
		n := s.Next(last)
		if n.IsZero() || n.After(now) {
			break
		}
		prev, last = last, n
		count++
	}
	return last, prev, count
}
