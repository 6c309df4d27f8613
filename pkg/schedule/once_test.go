package schedule

import (
	"errors"
	"testing"
	"time"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/lease"
)

// newOnce returns the OncePer of period on f's lease and client.
func (f *fixture) newOnce(period time.Duration) *OncePer {
	f.t.Helper()
	o, err := NewOncePer(OnceConfig{Client: f.client, LeaseName: f.name, Period: period})
	if err != nil {
		f.t.Fatal(err)
	}
	return o
}

// doneMark reads the done mark as every elector since --once-per reads it (leasekit.GetDone).
func (f *fixture) doneMark() *leasekit.Done {
	f.t.Helper()
	l, err := leasekit.New(f.client, f.name, lease.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	d, err := l.GetDone(f.ctx)
	if err != nil {
		f.t.Fatalf("the done mark does not read as before: %v", err)
	}
	return d
}

// TestOncePerRunsOnSlots checks --once-per on the slot machinery: a run claims a slot at
// Redis's now, its done finish writes the done mark (the format and key of before, expiring a
// period after the run's start) and a run record; a run never repeats a slot, a run of an
// ended term is recorded lost by the next claim, and status tells the next run.
func TestOncePerRunsOnSlots(t *testing.T) {
	f := newFixture(t, Config{})
	o := f.newOnce(time.Hour)
	a := f.acquire("a")
	before := f.redisNow()
	s1, err := o.Claim(f.ctx, a.Token)
	if err != nil || s1.Attempt != 1 || s1.Token != a.Token || s1.Time.Before(before) || s1.Time.After(f.redisNow()) {
		t.Fatalf("Claim = %+v, %v; want attempt 1 at Redis's now (%v)", s1, err, before)
	}
	st := f.state()
	if st.spec != "@once-per 1h0m0s" || st.zone != "UTC" || st.run.Result != phaseRunning || !st.cursor.Equal(s1.Time) {
		t.Errorf("state after the claim: %+v", st)
	}
	again, err := o.Claim(f.ctx, a.Token) // a lost reply: the term takes its own claim up
	if err != nil || again != s1 {
		t.Errorf("Claim again = %+v, %v; want the running %+v", again, err, s1)
	}
	recorded, mark, err := o.Finish(f.ctx, s1, phaseDone, 0)
	if err != nil || !recorded || mark <= 59*time.Minute || mark > time.Hour {
		t.Fatalf("Finish done = %v, %v, %v; want recorded with a mark of about 1h", recorded, mark, err)
	}
	d := f.doneMark()
	st = f.state()
	if d == nil || d.Term != a || d.ExitCode != 0 || !d.Finished.Equal(st.run.Ended) || d.TTL <= 59*time.Minute {
		t.Fatalf("done mark %+v; want a's, finished at the run's end %v, about 1h left", d, st.run.Ended)
	}
	if left := st.run.Started.Add(time.Hour).Sub(d.Finished.Add(d.TTL)); left < -time.Second || left > time.Second {
		t.Errorf("the mark expires at %v, want a period after the run's start %v", d.Finished.Add(d.TTL), st.run.Started)
	}
	if recorded, mark2, err := o.Finish(f.ctx, s1, phaseDone, 0); err != nil || !recorded || mark2 <= 0 || mark2 > mark {
		t.Errorf("Finish again (a lost reply) = %v, %v, %v; want recorded, the mark's TTL", recorded, mark2, err)
	}
	ss, found, err := ReadStatus(f.ctx, f.client, "", f.name)
	if err != nil || !found || !ss.Next.Equal(st.run.Started.Add(time.Hour)) || ss.Spec != "@once-per 1h0m0s" {
		t.Errorf("ReadStatus = %+v, %v, %v; want next a period after the run's start", ss, found, err)
	}

	// The mark is deleted by hand (the documented reset): the next run is a new slot.
	f.client.Del(f.ctx, o.keys[3])
	s2, err := o.Claim(f.ctx, a.Token)
	if err != nil || !s2.Time.After(s1.Time) || s2.Attempt != 1 {
		t.Fatalf("Claim after a done run = %+v, %v; want a later slot, attempt 1", s2, err)
	}
	// The term ends mid-run; the next term's claim records the run lost and runs a new slot.
	b := f.acquire("b")
	if _, _, err := o.Finish(f.ctx, s2, phaseDone, 0); !errors.Is(err, ErrFenced) {
		t.Errorf("Finish of an ended term = %v; want ErrFenced", err)
	}
	if d := f.doneMark(); d != nil {
		t.Errorf("a fenced finish wrote a mark: %+v", d)
	}
	s3, err := o.Claim(f.ctx, b.Token)
	if err != nil || !s3.Time.After(s2.Time) || s3.Attempt != 1 {
		t.Fatalf("b's Claim = %+v, %v; want a new slot, attempt 1", s3, err)
	}
	if recorded, _, err := o.Finish(f.ctx, s3, phaseFailed, 5); err != nil || !recorded {
		t.Errorf("Finish failed = %v, %v", recorded, err)
	}
	if d := f.doneMark(); d != nil {
		t.Errorf("a failed run wrote a mark: %+v", d)
	}
	runs, missed := f.history()
	if len(runs) != 3 || runs[0].Result != phaseFailed || runs[0].ExitCode != 5 || runs[1].Result != phaseLost ||
		runs[1].Token != a.Token || runs[2].Result != phaseDone || len(missed) != 0 {
		t.Errorf("history %+v, missed %+v; want failed (b), lost (a), done (a)", runs, missed)
	}
	ss, _, _ = ReadStatus(f.ctx, f.client, "", f.name)
	if !ss.Next.Equal(s3.Time) {
		t.Errorf("status next %v after a failed run; want due (%v)", ss.Next, s3.Time)
	}
	if _, err := o.Claim(f.ctx, a.Token); !errors.Is(err, ErrFenced) {
		t.Errorf("Claim by an ended term = %v; want ErrFenced", err)
	}
}

// TestOncePerLongRunWritesNoMark checks that a run longer than the period writes no mark (as
// before: the job is due again), and that a mark of the code before slots, written by
// done.lua, reads as this code's.
func TestOncePerLongRunWritesNoMark(t *testing.T) {
	f := newFixture(t, Config{})
	o := f.newOnce(50 * time.Millisecond)
	a := f.acquire("a")
	s, err := o.Claim(f.ctx, a.Token)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(80 * time.Millisecond)
	if recorded, mark, err := o.Finish(f.ctx, s, phaseDone, 0); err != nil || !recorded || mark != 0 {
		t.Errorf("Finish after the period = %v, %v, %v; want recorded, no mark", recorded, mark, err)
	}
	if d := f.doneMark(); d != nil {
		t.Errorf("a mark after a run longer than the period: %+v", d)
	}
	l, err := leasekit.New(f.client, f.name, lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fin := time.UnixMilli(time.Now().UnixMilli()).UTC()
	if ok, err := l.MarkDone(f.ctx, leasekit.Done{Term: a, ExitCode: 0, Finished: fin, TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("the old writer's MarkDone = %v, %v", ok, err)
	}
	if d := f.doneMark(); d == nil || d.Term != a || !d.Finished.Equal(fin) {
		t.Errorf("the old writer's mark reads %+v", d)
	}
}
