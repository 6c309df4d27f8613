package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
	"k8s.io/utils/clock"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/pkg/lease"
)

// Overlap says what happens when a slot comes while the previous slot's run still goes on.
type Overlap string

const (
	// OverlapSkip lets the run go on and records the new slots as missed ("overlap").
	OverlapSkip Overlap = "skip"
	// OverlapWait lets the run go on and decides the new slots when it ended, by the catch-up
	// policy and the starting deadline.
	OverlapWait Overlap = "wait"
	// OverlapCancel cancels the run's ctx (recorded as cancelled, not retried), waits for the
	// job to return, then runs the new slot.
	OverlapCancel Overlap = "cancel"
)

// CatchUp says which of the slots that came while nobody ran them (every replica down, Redis
// down, a long handover, a long run) are run when a term can run them again.
type CatchUp string

const (
	// CatchUpNone runs only a slot claimed within the starting deadline of its time, and 10s
	// when StartingDeadline is 0; the others are recorded as missed.
	CatchUpNone CatchUp = "none"
	// CatchUpLatest runs the latest slot that came, if within the starting deadline (0: any
	// age), and records the earlier ones as missed ("catch-up"), as a CronJob does.
	CatchUpLatest CatchUp = "latest"
	// CatchUpAll runs every slot that came, oldest first, except those past the starting
	// deadline, which are recorded as missed ("deadline"); slots that come while this backlog
	// runs queue behind it (the overlap policy meets them once it is decided).
	CatchUpAll CatchUp = "all"
)

// defaultOnTime is CatchUpNone's starting deadline when Config.StartingDeadline is 0.
const defaultOnTime = 10 * time.Second

// Config configures a Scheduler.
type Config struct {
	// Client is the Redis client of the lease (required).
	Client redis.UniversalClient
	// LeaseName is the name of the lease whose terms run the schedule: the Elector's LeaseName.
	LeaseName string
	// Prefix is the lease's key prefix; lease.DefaultPrefix when empty.
	Prefix string
	// Spec is the schedule: five cron fields or a descriptor (@hourly, @every 5m, ...), as
	// robfig/cron/v3's standard parser reads them; @every D counts from 1970-01-01 UTC.
	Spec string
	// Location is the time zone of Spec's fields (nil: UTC). A CRON_TZ= prefix in Spec must
	// name the same zone.
	Location *time.Location
	// Job runs one slot; its ctx carries the slot (SlotFrom) and is cancelled when the term
	// ends or the overlap policy cancels the run. A nil error means the slot is done.
	Job func(ctx context.Context) error
	// Overlap is the policy for a slot that comes while a run goes on; OverlapSkip when empty.
	Overlap Overlap
	// CatchUp is the policy for slots nobody ran in time; CatchUpLatest when empty.
	CatchUp CatchUp
	// StartingDeadline is how late after its time a slot may still start (0: no limit, but
	// 10s with CatchUpNone); a slot later than that is recorded as missed ("deadline").
	StartingDeadline time.Duration
	// MaxAttempts is how many runs a slot gets, counting failed runs and runs whose term
	// ended first; 3 when 0.
	MaxAttempts int
	// RetryDelay is how long after a failed run its slot is run again; 10s when 0. A run whose
	// term ended is run again by the next term at once.
	RetryDelay time.Duration
	// History is how many entries (runs and missed ranges) Redis keeps; 100 when 0.
	History int
}

// Slot is the slot a job runs, as SlotFrom finds it in the job's ctx.
type Slot struct {
	// Time is the slot's scheduled time (UTC; a zone's wall time is Time.In(Location)).
	Time time.Time
	// Attempt is 1, or more when an earlier run of the slot failed or its term ended.
	Attempt int
	// Token is the fencing token of the term that runs it.
	Token int64
}

type slotKey struct{}

// SlotFrom returns the slot of the job whose ctx is ctx (or derives from it), and false for any
// other context.
func SlotFrom(ctx context.Context) (Slot, bool) {
	s, ok := ctx.Value(slotKey{}).(Slot)
	return s, ok
}

// Scheduler runs a job once per slot of a schedule while its replica leads a lease. Its state
// is in Redis, next to the lease, so that each slot runs once across replicas and restarts.
type Scheduler struct {
	cfg   Config
	sched cron.Schedule
	keys  []string // lease, schedule, runs
	// spec and zone are what the scripts keep in the state for status: Spec on one line,
	// and Location's name.
	spec, zone string
	deadline   time.Duration
	caller     caller
	clock      clock.Clock
	// callTimeout bounds one Redis call; the simulator shortens it.
	callTimeout time.Duration

	leading atomic.Bool
	m       metrics

	mu    sync.Mutex
	known time.Time // the latest cursor this process saw in Redis
	last  runKey    // the last run this process started
}

// New returns a Scheduler for cfg, or an error naming what is wrong with it.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Client == nil {
		return nil, errors.New("new schedule: redis client is nil")
	}
	if cfg.Job == nil {
		return nil, errors.New("new schedule: Job is nil")
	}
	if err := leasewire.ValidateName(cfg.LeaseName); err != nil {
		return nil, fmt.Errorf("new schedule: lease name %q %w", cfg.LeaseName, err)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = lease.DefaultPrefix
	}
	if err := leasewire.ValidateName(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("new schedule: key prefix %q %w", cfg.Prefix, err)
	}
	sched, err := parseSpec(cfg.Spec, cfg.Location)
	if err != nil {
		return nil, fmt.Errorf("new schedule: %w", err)
	}
	if cfg.Location == nil {
		cfg.Location = time.UTC
		if s, ok := sched.(*cron.SpecSchedule); ok {
			cfg.Location = s.Location
		}
	}
	switch cfg.Overlap {
	case "":
		cfg.Overlap = OverlapSkip
	case OverlapSkip, OverlapWait, OverlapCancel:
	default:
		return nil, fmt.Errorf("new schedule: overlap policy %q is none of skip, wait, cancel", cfg.Overlap)
	}
	switch cfg.CatchUp {
	case "":
		cfg.CatchUp = CatchUpLatest
	case CatchUpNone, CatchUpLatest, CatchUpAll:
	default:
		return nil, fmt.Errorf("new schedule: catch-up policy %q is none of none, latest, all", cfg.CatchUp)
	}
	if cfg.StartingDeadline < 0 || cfg.MaxAttempts < 0 || cfg.RetryDelay < 0 || cfg.History < 0 {
		return nil, errors.New("new schedule: StartingDeadline, MaxAttempts, RetryDelay and History must not be negative")
	}
	if cfg.StartingDeadline%time.Millisecond != 0 {
		return nil, fmt.Errorf("new schedule: StartingDeadline %v is not a whole number of milliseconds", cfg.StartingDeadline)
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.RetryDelay == 0 {
		cfg.RetryDelay = 10 * time.Second
	}
	if cfg.History == 0 {
		cfg.History = 100
	}
	deadline := cfg.StartingDeadline
	if cfg.CatchUp == CatchUpNone && deadline == 0 {
		deadline = defaultOnTime
	}
	k := leasewire.KeysFor(cfg.Prefix, cfg.LeaseName)
	return &Scheduler{
		cfg: cfg, sched: sched, deadline: deadline,
		keys: []string{k.Lease, k.Schedule, k.Runs},
		spec: strings.Join(strings.Fields(cfg.Spec), " "), zone: cfg.Location.String(),
		caller: redisCaller{cfg.Client, lualib.For(cfg.Client)}, clock: clock.RealClock{}, callTimeout: 5 * time.Second,
		m: newMetrics(cfg.LeaseName),
	}, nil
}

// Next returns the first slot of the schedule after t (zero when there is none).
func (s *Scheduler) Next(t time.Time) time.Time {
	n := s.sched.Next(t)
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

func (s *Scheduler) noteCursor(c time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.After(s.known) {
		s.known = c
	}
}

func (s *Scheduler) knownCursor() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.known
}

type actionKind int

const (
	actWait    actionKind = iota // until a time of Redis's clock (zero: the job's end, or a resync)
	actSkip                      // skip.lua
	actClaim                     // claim.lua
	actCancel                    // cancel the run (OverlapCancel)
	actAbandon                   // finish.lua: a run of a resumed term whose end was not recorded
)

// action is what plan decides a term does next.
type action struct {
	kind        actionKind
	until       time.Time // actWait
	slot        time.Time // actClaim, actAbandon
	attempt     int       // actAbandon
	first, last time.Time // actSkip
	count       int       // actSkip
	reason      string    // actSkip
}

func waitUntil(t time.Time) action { return action{kind: actWait, until: t} }

func skip(first, last time.Time, count int, reason string) action {
	return action{kind: actSkip, first: first, last: last, count: count, reason: reason}
}

func claim(slot time.Time) action { return action{kind: actClaim, slot: slot} }

// current is what the process knows of its own runs: the run of this term that goes on (slot
// zero: none) and when it began by Redis's clock, and the last run it started in any term.
type current struct {
	slot, started time.Time
	last          runKey
}

// runKey names one attempt of one slot by one term.
type runKey struct {
	token   int64
	slot    time.Time
	attempt int
}

// plan decides the next step of the term with token from v, what read.lua returned; running
// is this term's run that goes on (zero: none), known the latest cursor this process saw. It is pure: every rule of the policies is here, and the scripts enforce what
// safety needs whatever it decides.
func (s *Scheduler) plan(v view, running current, token int64, known time.Time) action {
	now := v.now
	if !v.has {
		// No state: the first term of this schedule, or Redis lost it. Slots before the cursor
		// are never run, so start it at the latest cursor this process knows of (the slots
		// since are then decided by the catch-up policy) or, knowing none, now.
		if !known.IsZero() && known.Before(now) {
			return skip(known, known, 0, "state lost")
		}
		return skip(now, now, 0, "start")
	}
	st, r := v.st, v.st.run
	if !running.slot.IsZero() {
		n := s.sched.Next(later(st.cursor, running.slot))
		if n.IsZero() || n.After(now) {
			return waitUntil(n)
		}
		if !n.After(running.started) {
			// Due before the run began (CatchUpAll's backlog): not an overlap. Those slots
			// are decided once the run ended.
			return waitUntil(time.Time{})
		}
		switch s.cfg.Overlap {
		case OverlapWait:
			return waitUntil(time.Time{})
		case OverlapCancel:
			return action{kind: actCancel}
		}
		last, _, count := dueRange(s.sched, n, now)
		return skip(n, last, count, "overlap")
	}
	if r.Result == phaseRunning && r.Token == token {
		if running.last == (runKey{token, r.Slot, r.Attempt}) {
			// This process ran it and its job returned, but the end was not recorded: the
			// term was resumed (its renew deadline passed while Redis still held it, and the
			// next acquire found it ours). Record the run lost; the slot gets its next attempt.
			return action{kind: actAbandon, slot: r.Slot, attempt: r.Attempt}
		}
		return claim(r.Slot) // this term's claim whose reply was lost: take the run up
	}
	first := s.sched.Next(st.cursor)
	due := !first.IsZero() && !first.After(now)
	if r.Result == phaseRunning || r.Result == phaseFailed || r.Result == phaseLost {
		// An unfinished run: retry it, unless a later slot came and the policy prefers it
		// (its claim then leaves this one as it is: failed, or lost).
		if r.Attempt >= s.cfg.MaxAttempts {
			return claim(r.Slot) // refused: recorded as missed ("attempts")
		}
		if !due || s.cfg.CatchUp == CatchUpAll {
			at := now
			if r.Result == phaseFailed {
				at = r.Ended.Add(s.cfg.RetryDelay)
			}
			if !at.After(now) {
				return claim(r.Slot)
			}
			if due {
				return waitUntil(at)
			}
			return waitUntil(earliest(at, first))
		}
	}
	if !due {
		return waitUntil(first)
	}
	last, prev, count := dueRange(s.sched, first, now)
	if count >= maxEnumerate {
		return skip(first, last, count, "catch-up") // a backlog too long to count at once
	}
	if s.cfg.CatchUp == CatchUpAll {
		if d := s.deadline; d > 0 && first.Before(now.Add(-d)) {
			lateLast, _, lateCount := dueRange(s.sched, first, now.Add(-d-time.Millisecond))
			return skip(first, lateLast, lateCount, "deadline")
		}
		return claim(first)
	}
	if count > 1 {
		return skip(first, prev, count-1, "catch-up")
	}
	return claim(last)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// earliest returns the earlier of a and b, ignoring a zero time.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// validReason reports whether a skip reason can be recorded (one line).
func validReason(r string) bool { return r != "" && !strings.ContainsAny(r, "\n") }
