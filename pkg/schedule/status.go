package schedule

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/rediserr"
	"github.com/elector/elector/pkg/lease"
)

// Status is a schedule's state as Redis holds it.
type Status struct {
	// Spec and Zone are the schedule: from Scheduler.Status as configured; from ReadStatus as
	// the term that wrote the state last kept them in it ("" when the state is older than
	// that, or there is none).
	Spec, Zone string
	// Location is Zone's time zone, nil when unknown (or not loadable where it is read).
	Location *time.Location
	// Now is Redis's time when the state was read (Scheduler.Status; zero from ReadStatus).
	Now time.Time
	// Decided is the cursor: every slot at or before it is done, missed or being run (zero:
	// the schedule has no state yet).
	Decided time.Time
	// Next is the first slot after Decided: the next to run (before Now: it is due). Zero
	// when the spec is unknown.
	Next time.Time
	// Current is the record of the last slot claimed, nil before the first.
	Current *Run
	// Runs are the last finished runs, newest first (Config.History entries with Missed).
	Runs []Run
	// Missed are the last missed ranges, newest first.
	Missed []Missed
}

// Status reads the schedule's state and history in one round trip, without a script (MULTI
// TIME GET GET EXEC): a Redis user that may only read the keys (and call TIME) may call it.
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
	out, has, err := decodeStatus(st, runs)
	if err != nil {
		return Status{}, fmt.Errorf("schedule status of %q: %w", s.cfg.LeaseName, err)
	}
	out.Spec, out.Zone, out.Location = s.cfg.Spec, s.zone, s.cfg.Location
	out.Now = tm.Val().UTC().Truncate(time.Millisecond)
	if has {
		out.Next = s.Next(out.Decided)
	} else {
		out.Next = s.Next(out.Now)
	}
	return out, nil
}

// ReadStatus reads the schedule state of the lease name under prefix (lease.DefaultPrefix when
// empty) as elector status shows it, without knowing its spec: that is the one the state
// keeps. It reads with MULTI GET GET EXEC, so that a Redis user allowed +get +multi +exec on
// the lease's keys may call it. found is false when the lease has no schedule state nor
// history.
func ReadStatus(ctx context.Context, c redis.UniversalClient, prefix, name string) (st Status, found bool, err error) {
	if prefix == "" {
		prefix = lease.DefaultPrefix
	}
	k := leasewire.KeysFor(prefix, name)
	var state, runs *redis.StringCmd
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		state = p.Get(ctx, k.Schedule)
		runs = p.Get(ctx, k.Runs)
		return nil
	})
	if err != nil && !rediserr.IsNil(err) {
		return Status{}, false, fmt.Errorf("schedule status of %q: %w", name, err)
	}
	out, has, err := decodeStatus(state, runs)
	if err != nil {
		return Status{}, false, fmt.Errorf("schedule status of %q: %w", name, err)
	}
	if !has && out.Runs == nil && out.Missed == nil {
		return Status{}, false, nil
	}
	if out.Zone != "" {
		if loc, err := time.LoadLocation(out.Zone); err == nil {
			out.Location = loc
		}
	}
	if d, ok := parseOnceSpec(out.Spec); ok && has {
		out.Next = onceNext(out, d)
	} else if out.Spec != "" && out.Location != nil && has {
		if sched, err := parseSpec(out.Spec, out.Location); err == nil {
			if n := sched.Next(out.Decided); !n.IsZero() {
				out.Next = n.UTC()
			}
		}
	}
	return out, true, nil
}

// onceNext is the next slot of a --once-per state (period d): the period after the start of its
// last run when that run is done or goes on (the done mark's expiry), else due at once (the
// cursor). A done mark deleted by hand makes it due earlier: the mark decides, not this.
func onceNext(st Status, d time.Duration) time.Time {
	if r := st.Current; r != nil && (r.Result == phaseDone || r.Result == phaseRunning) {
		return r.Started.Add(d)
	}
	return st.Decided
}

// decodeStatus decodes the replies of GET of the schedule and runs keys; has says whether
// the schedule key exists. Spec and Zone are the state's.
func decodeStatus(st, runs *redis.StringCmd) (out Status, has bool, err error) {
	if v, err := st.Result(); err == nil {
		state, err := parseState(v)
		if err != nil {
			return Status{}, false, err
		}
		has, out.Decided, out.Spec, out.Zone = true, state.cursor, state.spec, state.zone
		if !state.run.Slot.IsZero() {
			r := state.run
			out.Current = &r
		}
	}
	if v, err := runs.Result(); err == nil {
		out.Runs, out.Missed = parseHistory(v)
	}
	return out, has, nil
}
