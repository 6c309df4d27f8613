package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// newPlanner returns a Scheduler whose plan is tested without Redis.
func newPlanner(t *testing.T, cfg Config) *Scheduler {
	t.Helper()
	cfg.Client = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = cfg.Client.Close() })
	cfg.LeaseName = "job"
	if cfg.Job == nil {
		cfg.Job = func(context.Context) error { return nil }
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// stateAt is a state whose cursor is the slot of a done run (zero: no run).
func stateAt(cursor time.Time, run Run) view {
	return view{has: true, st: state{cursor: cursor, run: run}}
}

func done(slot string) Run { return Run{Slot: at(slot), Result: phaseDone, Attempt: 1, Token: 7} }

func TestPlanCatchUpAfterAnOutage(t *testing.T) {
	// Every 5 minutes; the 10:00 slot ran, then nobody ran one until 11:02 (every replica
	// down, or Redis): 11 slots came, 10:05 to 10:55, and 11:00.
	outage := stateAt(at("2026-05-04T10:00:00Z"), done("2026-05-04T10:00:00Z"))
	outage.now = at("2026-05-04T11:02:00Z")
	for _, tc := range []struct {
		name string
		cfg  Config
		want action
	}{
		{"latest: the earlier slots are missed", Config{CatchUp: CatchUpLatest},
			skip(at("2026-05-04T10:05:00Z"), at("2026-05-04T10:55:00Z"), 11, "catch-up")},
		{"none: the same step (the claim of 11:00 then meets its 10s deadline)", Config{CatchUp: CatchUpNone},
			skip(at("2026-05-04T10:05:00Z"), at("2026-05-04T10:55:00Z"), 11, "catch-up")},
		{"all: the oldest first", Config{CatchUp: CatchUpAll}, claim(at("2026-05-04T10:05:00Z"))},
		{"all with a 20m deadline: those before 10:42 are missed", Config{CatchUp: CatchUpAll, StartingDeadline: 20 * time.Minute},
			skip(at("2026-05-04T10:05:00Z"), at("2026-05-04T10:40:00Z"), 8, "deadline")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newPlanner(t, Config{Spec: "*/5 * * * *", CatchUp: tc.cfg.CatchUp, StartingDeadline: tc.cfg.StartingDeadline})
			if got := s.plan(outage, current{}, 8, time.Time{}); got != tc.want {
				t.Errorf("plan: %+v, want %+v", got, tc.want)
			}
		})
	}
	// After latest's skip the cursor is at 10:55: 11:00 is claimed.
	s := newPlanner(t, Config{Spec: "*/5 * * * *"})
	v := stateAt(at("2026-05-04T10:55:00Z"), done("2026-05-04T10:00:00Z"))
	v.now = at("2026-05-04T11:02:00Z")
	if got, want := s.plan(v, current{}, 8, time.Time{}), claim(at("2026-05-04T11:00:00Z")); got != want {
		t.Errorf("plan after the skip: %+v, want %+v", got, want)
	}
	if s.deadline != 0 {
		t.Errorf("latest's deadline %v, want none", s.deadline)
	}
	if s := newPlanner(t, Config{Spec: "*/5 * * * *", CatchUp: CatchUpNone}); s.deadline != defaultOnTime {
		t.Errorf("none's deadline %v, want %v", s.deadline, defaultOnTime)
	}
}

func TestPlanOverlap(t *testing.T) {
	v := stateAt(at("2026-05-04T11:00:00Z"), Run{Slot: at("2026-05-04T11:00:00Z"), Result: phaseRunning, Attempt: 1, Token: 8})
	v.now = at("2026-05-04T11:05:30Z")
	running := current{slot: at("2026-05-04T11:00:00Z"), started: at("2026-05-04T11:00:00.002Z")}
	for _, tc := range []struct {
		overlap Overlap
		want    action
	}{
		{OverlapSkip, skip(at("2026-05-04T11:05:00Z"), at("2026-05-04T11:05:00Z"), 1, "overlap")},
		{OverlapWait, waitUntil(time.Time{})},
		{OverlapCancel, action{kind: actCancel}},
	} {
		s := newPlanner(t, Config{Spec: "*/5 * * * *", Overlap: tc.overlap})
		if got := s.plan(v, running, 8, time.Time{}); got != tc.want {
			t.Errorf("%s: plan %+v, want %+v", tc.overlap, got, tc.want)
		}
		early := v
		early.now = at("2026-05-04T11:04:00Z")
		if got, want := s.plan(early, running, 8, time.Time{}), waitUntil(at("2026-05-04T11:05:00Z")); got != want {
			t.Errorf("%s before the next slot: plan %+v, want %+v", tc.overlap, got, want)
		}
	}
}

func TestPlanRetries(t *testing.T) {
	s := newPlanner(t, Config{Spec: "*/5 * * * *", RetryDelay: time.Minute})
	slot := at("2026-05-04T11:00:00Z")
	lost := stateAt(slot, Run{Slot: slot, Result: phaseRunning, Attempt: 1, Token: 7})
	lost.now = at("2026-05-04T11:01:00Z")
	if got, want := s.plan(lost, current{}, 8, time.Time{}), claim(slot); got != want {
		t.Errorf("a run of an ended term: %+v, want %+v (attempt 2 at once)", got, want)
	}
	mine := stateAt(slot, Run{Slot: slot, Result: phaseRunning, Attempt: 1, Token: 8})
	mine.now = lost.now
	if got, want := s.plan(mine, current{}, 8, time.Time{}), claim(slot); got != want {
		t.Errorf("this term's run it does not know of (a lost claim reply): %+v, want %+v", got, want)
	}
	resumed := current{last: runKey{8, slot, 1}}
	if got, want := s.plan(mine, resumed, 8, time.Time{}), (action{kind: actAbandon, slot: slot, attempt: 1}); got != want {
		t.Errorf("this term's run whose job returned, its end unrecorded (a resumed term): %+v, want %+v", got, want)
	}
	failed := stateAt(slot, Run{Slot: slot, Result: phaseFailed, Attempt: 1, Token: 8, Ended: at("2026-05-04T11:00:30Z")})
	failed.now = lost.now
	if got, want := s.plan(failed, current{}, 8, time.Time{}), waitUntil(at("2026-05-04T11:01:30Z")); got != want {
		t.Errorf("a failed run: %+v, want %+v (RetryDelay after its end)", got, want)
	}
	failed.now = at("2026-05-04T11:02:00Z")
	if got, want := s.plan(failed, current{}, 8, time.Time{}), claim(slot); got != want {
		t.Errorf("a failed run after RetryDelay: %+v, want %+v", got, want)
	}
	failed.now = at("2026-05-04T11:06:00Z")
	if got, want := s.plan(failed, current{}, 8, time.Time{}), claim(at("2026-05-04T11:05:00Z")); got != want {
		t.Errorf("a failed run once the next slot came (latest): %+v, want %+v", got, want)
	}
	out := stateAt(slot, Run{Slot: slot, Result: phaseFailed, Attempt: 3, Token: 8})
	out.now = lost.now
	if got, want := s.plan(out, current{}, 8, time.Time{}), claim(slot); got != want {
		t.Errorf("a run out of attempts: %+v, want %+v (the claim records it missed)", got, want)
	}
}

func TestPlanWithoutState(t *testing.T) {
	s := newPlanner(t, Config{Spec: "@hourly"})
	now := at("2026-05-04T11:02:03Z")
	if got, want := s.plan(view{now: now}, current{}, 8, time.Time{}), skip(now, now, 0, "start"); got != want {
		t.Errorf("first term: %+v, want %+v", got, want)
	}
	known := at("2026-05-04T09:00:00Z")
	if got, want := s.plan(view{now: now}, current{}, 8, known), skip(known, known, 0, "state lost"); got != want {
		t.Errorf("state lost: %+v, want %+v", got, want)
	}
}

func TestEveryCountsFromTheEpoch(t *testing.T) {
	s := newPlanner(t, Config{Spec: "@every 7m"})
	for _, from := range []string{"2026-05-04T11:02:03Z", "2026-05-04T11:05:00Z"} {
		n := s.Next(at(from))
		if n.UnixNano()%int64(7*time.Minute) != 0 || !n.After(at(from)) || n.Sub(at(from)) > 7*time.Minute {
			t.Errorf("Next(%s) = %v: not the next multiple of 7m since 1970", from, n)
		}
	}
}

func TestNewRejects(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	job := func(context.Context) error { return nil }
	for name, cfg := range map[string]Config{
		"bad spec":          {Spec: "61 * * * *"},
		"two zones":         {Spec: "CRON_TZ=America/New_York 30 2 * * *", Location: berlin},
		"overlap":           {Spec: "@hourly", Overlap: "allow"},
		"catch-up":          {Spec: "@hourly", CatchUp: "some"},
		"deadline":          {Spec: "@hourly", StartingDeadline: -time.Second},
		"sub-ms deadline":   {Spec: "@hourly", StartingDeadline: time.Microsecond},
		"name with a brace": {Spec: "@hourly", LeaseName: "a{b"},
	} {
		cfg.Client, cfg.Job = client, job
		if cfg.LeaseName == "" {
			cfg.LeaseName = "job"
		}
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	if _, err := New(Config{Client: client, Job: job, LeaseName: "job", Spec: "CRON_TZ=Europe/Berlin 30 2 * * *", Location: berlin}); err != nil {
		t.Errorf("a spec's zone that agrees with Location: %v", err)
	}
}

// TestPlanBacklogIsNoOverlap: with CatchUpAll, the slots that were due when the run began wait
// for it to end, and so does a slot that comes during the run while slots before it wait;
// the overlap policy meets the slots that come during a run once the backlog is decided. (The first
// version skipped the whole backlog as "overlap": TestLeadCatchUpAfterAnOutage/all.)
func TestPlanBacklogIsNoOverlap(t *testing.T) {
	s := newPlanner(t, Config{Spec: "*/5 * * * *", CatchUp: CatchUpAll})
	v := stateAt(at("2026-05-04T10:05:00Z"), Run{Slot: at("2026-05-04T10:05:00Z"), Result: phaseRunning, Attempt: 1, Token: 8})
	v.now = at("2026-05-04T11:02:00Z")
	running := current{slot: at("2026-05-04T10:05:00Z"), started: at("2026-05-04T11:01:59Z")}
	if got, want := s.plan(v, running, 8, time.Time{}), waitUntil(time.Time{}); got != want {
		t.Errorf("plan: %+v, want %+v (wait for the run)", got, want)
	}
	// A slot that comes during the run queues behind the backlog: the policy meets a slot
	// only once the slots before it are decided.
	v.now = at("2026-05-04T11:06:00Z")
	if got, want := s.plan(v, running, 8, time.Time{}), waitUntil(time.Time{}); got != want {
		t.Errorf("plan once a slot came during the run: %+v, want %+v", got, want)
	}
	v.st.cursor = at("2026-05-04T11:00:00Z")
	if got, want := s.plan(v, current{slot: at("2026-05-04T11:00:00Z"), started: at("2026-05-04T11:01:59Z")}, 8, time.Time{}), skip(at("2026-05-04T11:05:00Z"), at("2026-05-04T11:05:00Z"), 1, "overlap"); got != want {
		t.Errorf("plan with the backlog decided: %+v, want %+v", got, want)
	}
}
