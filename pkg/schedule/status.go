package schedule

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/rediserr"
)

// Status is a schedule's state as Redis holds it.
type Status struct {
	// Spec and Location are the schedule, as configured.
	Spec     string
	Location *time.Location
	// Now is Redis's time when the state was read.
	Now time.Time
	// Decided is the cursor: every slot at or before it is done, missed or being run (zero:
	// the schedule has no state yet).
	Decided time.Time
	// Next is the first slot after Decided: the next to run (before Now: it is due).
	Next time.Time
	// Current is the record of the last slot claimed, nil before the first.
	Current *Run
	// Runs are the last finished runs, newest first (Config.History entries with Missed).
	Runs []Run
	// Missed are the last missed ranges, newest first.
	Missed []Missed
}

// Status reads the schedule's state and history in one round trip, without a script (MULTI
// TIME GET GET EXEC): a Redis user that may only read the keys may call it.
func (s *Scheduler) Status(ctx context.Context) (Status, error) {
	var tm *redis.TimeCmd
	var st, runs *redis.StringCmd
	_, err := s.cfg.Client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		tm = p.Time(ctx)
		st = p.Get(ctx, s.keys[1])
		runs = p.Get(ctx, s.keys[2])
		return nil
	})
	if err != nil && !rediserr.IsNil(err) {
		return Status{}, fmt.Errorf("schedule status of %q: %w", s.cfg.LeaseName, err)
	}
	out := Status{Spec: s.cfg.Spec, Location: s.cfg.Location, Now: tm.Val().UTC().Truncate(time.Millisecond)}
	if v, err := st.Result(); err == nil {
		state, err := parseState(v)
		if err != nil {
			return Status{}, fmt.Errorf("schedule status of %q: %w", s.cfg.LeaseName, err)
		}
		out.Decided, out.Next = state.cursor, s.Next(state.cursor)
		if !state.run.Slot.IsZero() {
			r := state.run
			out.Current = &r
		}
	} else {
		out.Next = s.Next(out.Now)
	}
	if v, err := runs.Result(); err == nil {
		out.Runs, out.Missed = parseHistory(v)
	}
	return out, nil
}
