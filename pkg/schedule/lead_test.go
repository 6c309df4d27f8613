package schedule

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elector/elector/pkg/election"
)

// slotLog collects the slots a job ran, from its ctx.
type slotLog struct {
	mu    sync.Mutex
	slots []Slot
}

func (l *slotLog) add(ctx context.Context) Slot {
	s, ok := SlotFrom(ctx)
	if !ok {
		panic("the job's ctx carries no slot")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.slots = append(l.slots, s)
	return s
}

func (l *slotLog) get() []Slot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Slot(nil), l.slots...)
}

// TestLeadWithAnElector is the library's use: an Elector's term runs the schedule; each slot
// runs once, with the term's token, and Status and the metrics show it.
func TestLeadWithAnElector(t *testing.T) {
	var log slotLog
	f := newFixture(t, Config{Spec: "@every 1s", Job: func(ctx context.Context) error { log.add(ctx); return nil }})
	e, err := election.New(election.Config{
		Client: f.client, LeaseName: f.name, Identity: "a",
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 300 * time.Millisecond,
		ReleaseOnCancel: true,
		Callbacks: election.Callbacks{OnStartedLeading: func(ctx context.Context) {
			if err := f.s.Lead(ctx); err != nil {
				t.Errorf("Lead: %v", err)
			}
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 3500*time.Millisecond)
	defer cancel()
	if err := e.Run(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v", err)
	}
	slots := log.get()
	if len(slots) < 2 {
		t.Fatalf("ran %v: want at least 2 slots in 3.5s of @every 1s", slots)
	}
	for i, s := range slots {
		if s.Attempt != 1 || s.Token <= 0 || s.Time.UnixMilli()%1000 != 0 {
			t.Errorf("slot %d: %+v", i, s)
		}
		if i > 0 && !s.Time.Equal(slots[i-1].Time.Add(time.Second)) {
			t.Errorf("slot %d is %v after %v: want each second once", i, s.Time, slots[i-1].Time)
		}
	}
	st, err := f.s.Status(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Runs) != len(slots) || st.Current == nil || st.Current.Result != phaseDone || !st.Next.After(st.Decided) {
		t.Errorf("status %+v: want %d done runs", st, len(slots))
	}
	if got, _ := metricValue(f.s, "elector_schedule_runs_total", "done"); int(got) != len(slots) {
		t.Errorf("elector_schedule_runs_total{result=done} = %v, want %d", got, len(slots))
	}
	if got, ok := metricValue(f.s, "elector_schedule_last_success_timestamp_seconds", ""); !ok || got < float64(slots[len(slots)-1].Time.Unix()) {
		t.Errorf("elector_schedule_last_success_timestamp_seconds = %v, %v: want the last run's end", got, ok)
	}
	if err := f.s.Lead(context.Background()); err == nil {
		t.Error("Lead outside a term: no error")
	}
}

// waitRedisMs waits until Redis's clock is between lo and hi ms into its second.
func (f *fixture) waitRedisMs(lo, hi int) time.Time {
	for {
		n := f.redisNow()
		if m := n.Nanosecond() / 1e6; m >= lo && m < hi {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLeadCatchUpAfterAnOutage: the state says the last slot decided was 10 seconds ago (every
// replica was down); a term then runs the policy's slots, and records the others as missed.
func TestLeadCatchUpAfterAnOutage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		check func(t *testing.T, outage time.Time, runs []Run, missed []Missed)
	}{
		{"latest", Config{CatchUp: CatchUpLatest}, func(t *testing.T, outage time.Time, runs []Run, missed []Missed) {
			m := missed[len(missed)-1]
			if m.Reason != "catch-up" || m.Count < 9 || !m.First.Equal(outage.Add(time.Second)) {
				t.Errorf("first missed %+v: want 9 or more slots from %v (catch-up)", m, outage.Add(time.Second))
			}
			if first := runs[len(runs)-1]; !first.Slot.Equal(m.Last.Add(time.Second)) {
				t.Errorf("first run %+v: want the latest slot, %v", first, m.Last.Add(time.Second))
			}
		}},
		{"all", Config{CatchUp: CatchUpAll}, func(t *testing.T, outage time.Time, runs []Run, missed []Missed) {
			if len(missed) != 0 || len(runs) < 10 {
				t.Errorf("missed %v, %d runs: want every slot run", missed, len(runs))
			}
			for i := range runs {
				if want := outage.Add(time.Duration(len(runs)-i) * time.Second); !runs[i].Slot.Equal(want) {
					t.Errorf("run %d of slot %v, want %v (oldest first, each once)", i, runs[i].Slot, want)
				}
			}
		}},
		{"all with a 3s deadline", Config{CatchUp: CatchUpAll, StartingDeadline: 3 * time.Second}, func(t *testing.T, outage time.Time, runs []Run, missed []Missed) {
			m := missed[len(missed)-1]
			if m.Reason != "deadline" || m.Count < 6 || !m.First.Equal(outage.Add(time.Second)) {
				t.Errorf("missed %+v: want the slots older than 3s (deadline)", m)
			}
			if first := runs[len(runs)-1]; !first.Slot.Equal(m.Last.Add(time.Second)) {
				t.Errorf("first run %+v: want the slot after the missed ones", first)
			}
		}},
		{"none", Config{CatchUp: CatchUpNone, StartingDeadline: 100 * time.Millisecond}, func(t *testing.T, outage time.Time, runs []Run, missed []Missed) {
			if len(missed) < 2 || missed[len(missed)-1].Reason != "catch-up" || missed[len(missed)-2].Reason != "deadline" {
				t.Errorf("missed %+v: want the backlog (catch-up), then the latest slot, 300ms or more late (deadline)", missed)
			}
			for _, r := range runs {
				if !r.Slot.After(missed[len(missed)-2].Last) {
					t.Errorf("run %+v of a slot from before the term", r)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Spec = "@every 1s"
			f := newFixture(t, tc.cfg)
			a := f.acquire("a")
			now := f.waitRedisMs(300, 600)
			outage := now.Add(-10 * time.Second).Truncate(time.Second)
			f.skip(a.Token, outage, outage, 0, "start")
			ctx, cancel := context.WithTimeout(f.ctx, 1500*time.Millisecond)
			defer cancel()
			if err := f.s.lead(ctx, a.Token); err != nil {
				t.Fatal(err)
			}
			runs, missed := f.history()
			t.Logf("runs %d, missed %+v", len(runs), missed)
			if len(runs) == 0 || (tc.cfg.CatchUp != CatchUpAll || tc.cfg.StartingDeadline > 0) && len(missed) == 0 {
				t.Fatalf("runs %+v, missed %+v", runs, missed)
			}
			tc.check(t, outage, runs, missed)
		})
	}
}

// TestLeadLostTermRunsTheSlotAgain: a term ends while its job runs (its lease expired); the
// next holder, another replica, runs the slot again as attempt 2, and the old term's end is
// not recorded.
func TestLeadLostTermRunsTheSlotAgain(t *testing.T) {
	started := make(chan Slot, 1)
	var log slotLog
	fa := newFixture(t, Config{Spec: "@every 1h", CatchUp: CatchUpAll, Job: func(ctx context.Context) error {
		started <- log.add(ctx)
		<-ctx.Done()
		return context.Cause(ctx)
	}})
	a := fa.acquire("a")
	now := fa.redisNow()
	fa.skip(a.Token, now.Add(-time.Hour), now.Add(-time.Hour), 0, "start") // a slot is due
	ctxA, cancelA := context.WithCancel(fa.ctx)
	doneA := make(chan error, 1)
	go func() { doneA <- fa.s.lead(ctxA, a.Token) }()
	first := <-started
	// a's term ends: its lease expired and b took it; then a's work is cancelled.
	sb, err := New(Config{Client: fa.client, LeaseName: fa.name, Spec: "@every 1h", CatchUp: CatchUpAll,
		Job: func(ctx context.Context) error { log.add(ctx); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	b := fa.acquire("b")
	cancelA()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	ctxB, cancelB := context.WithTimeout(fa.ctx, time.Second)
	defer cancelB()
	if err := sb.lead(ctxB, b.Token); err != nil {
		t.Fatal(err)
	}
	slots := log.get()
	if len(slots) != 2 || slots[1].Attempt != 2 || !slots[1].Time.Equal(first.Time) || slots[1].Token != b.Token {
		t.Fatalf("slots %+v: want %v run again by b as attempt 2", slots, first.Time)
	}
	runs, _ := fa.history()
	if len(runs) != 2 || runs[0].Result != phaseDone || runs[0].Attempt != 2 || runs[1].Result != phaseLost || runs[1].Token != a.Token {
		t.Errorf("history %+v: want a's lost attempt 1, then b's done attempt 2", runs)
	}
	if got, _ := metricValue(sb, "elector_schedule_runs_total", "lost"); got != 1 {
		t.Errorf("b's lost runs metric %v, want 1 (b found a's run lost)", got)
	}
}

// TestLeadOverlapCancel: a run still going when the next slot comes is cancelled, recorded as
// cancelled, and the next slot runs.
func TestLeadOverlapCancel(t *testing.T) {
	var log slotLog
	causes := make(chan error, 10)
	f := newFixture(t, Config{Spec: "@every 1s", Overlap: OverlapCancel, Job: func(ctx context.Context) error {
		log.add(ctx)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}})
	a := f.acquire("a")
	ctx, cancel := context.WithTimeout(f.ctx, 2500*time.Millisecond)
	defer cancel()
	if err := f.s.lead(ctx, a.Token); err != nil {
		t.Fatal(err)
	}
	if got := len(log.get()); got < 2 {
		t.Fatalf("%d runs, want 2 or more", got)
	}
	if c := <-causes; !errors.Is(c, errOverlap) {
		t.Errorf("the first run's cause %v, want the overlap", c)
	}
	runs, _ := f.history()
	for _, r := range runs[1:] {
		if r.Result != phaseCancelled {
			t.Errorf("run %+v: want cancelled", r)
		}
	}
	if r := runs[0]; r.Result != phaseLost || !strings.HasPrefix(r.Holder, "v1:") {
		t.Errorf("the last run %+v: want lost (the term ended during it)", r)
	}
}

// TestLeadResumedTermRunsTheNextAttempt: a term whose work stopped (its renew deadline) but
// whose run's end could not be recorded is resumed with the same token (Redis still held it);
// the state says its slot runs under its token, yet its job returned. The run is recorded lost
// and the slot runs as attempt 2, not as attempt 1 again.
func TestLeadResumedTermRunsTheNextAttempt(t *testing.T) {
	var log slotLog
	started := make(chan struct{}, 2)
	f := newFixture(t, Config{Spec: "@every 1h", CatchUp: CatchUpAll, Job: func(ctx context.Context) error {
		log.add(ctx)
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}})
	a := f.acquire("a")
	now := f.redisNow()
	f.skip(a.Token, now.Add(-time.Hour), now.Add(-time.Hour), 0, "start")
	ctx1, cancel1 := context.WithCancel(f.ctx)
	done1 := make(chan error, 1)
	go func() { done1 <- f.s.lead(ctx1, a.Token) }()
	<-started
	// The end is not recorded: the lease is gone for the moment of the term's last finish.
	f.client.Del(f.ctx, f.s.keys[0])
	cancel1()
	if err := <-done1; err != nil {
		t.Fatal(err)
	}
	if st := f.state(); st.run.Result != phaseRunning || st.run.Token != a.Token {
		t.Fatalf("state %+v: want the run still running under token %d", st, a.Token)
	}
	f.client.Set(f.ctx, f.s.keys[0], a.String(), time.Minute) // the term, resumed
	ctx2, cancel2 := context.WithTimeout(f.ctx, 500*time.Millisecond)
	defer cancel2()
	if err := f.s.lead(ctx2, a.Token); err != nil {
		t.Fatal(err)
	}
	slots := log.get()
	if len(slots) != 2 || slots[1].Attempt != 2 {
		t.Fatalf("slots %+v: want the slot run again as attempt 2", slots)
	}
	runs, _ := f.history()
	if len(runs) < 1 || runs[len(runs)-1].Result != phaseLost || runs[len(runs)-1].Attempt != 1 {
		t.Errorf("history %+v: want attempt 1 recorded lost first", runs)
	}
}
