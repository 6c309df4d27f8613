package schedule

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/internal/testing/redistest"
	_ "github.com/elector/elector/pkg/fence" // the function library needs every script
	"github.com/elector/elector/pkg/lease"
)

// fixture is one schedule on a real redis-server, with leases to hold its terms.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	client *redis.Client
	s      *Scheduler
	name   string
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	client := redistest.Start(t).Client(t)
	if cfg.LeaseName == "" {
		cfg.LeaseName = "job"
	}
	if cfg.Spec == "" {
		cfg.Spec = "@every 1s"
	}
	if cfg.Job == nil {
		cfg.Job = func(context.Context) error { return nil }
	}
	cfg.Client = client
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, ctx: t.Context(), client: client, s: s, name: cfg.LeaseName}
}

// acquire takes the lease as identity (after deleting a holder's record: its term expired).
func (f *fixture) acquire(identity string) lease.Record {
	f.t.Helper()
	l, err := lease.New(f.client, f.name, lease.Options{Identity: identity})
	if err != nil {
		f.t.Fatal(err)
	}
	f.client.Del(f.ctx, f.s.keys[0])
	ok, st, err := l.Acquire(f.ctx, time.Minute)
	if err != nil || !ok {
		f.t.Fatalf("acquire as %s: %v %v", identity, ok, err)
	}
	return st.Record
}

// redisNow is Redis's clock, to the millisecond.
func (f *fixture) redisNow() time.Time {
	f.t.Helper()
	tm, err := f.client.Time(f.ctx).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return tm.UTC().Truncate(time.Millisecond)
}

func (f *fixture) run(sc *lualib.Script, args ...any) []int64 {
	f.t.Helper()
	v, err := f.s.caller.call(f.ctx, sc, f.s.keys, args...)
	if err != nil {
		f.t.Fatalf("%s: %v", sc.Name(), err)
	}
	r, err := intsReply(sc.Name(), v, 2)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fixture) claim(tok int64, slot time.Time, max int, deadline time.Duration) []int64 {
	f.t.Helper()
	return f.run(claimScript, tok, ms(slot), max, deadline.Milliseconds(), 100, f.s.spec, f.s.zone)
}

func (f *fixture) finish(tok int64, slot time.Time, attempt int, result string, code int) int64 {
	f.t.Helper()
	return f.run(finishScript, tok, ms(slot), attempt, result, code, 100)[0]
}

func (f *fixture) skip(tok int64, first, last time.Time, count int, reason string) int64 {
	f.t.Helper()
	return f.run(skipScript, tok, ms(first), ms(last), count, reason, 100, f.s.spec, f.s.zone)[0]
}

func (f *fixture) state() state {
	f.t.Helper()
	v, err := f.client.Get(f.ctx, f.s.keys[1]).Result()
	if err != nil {
		f.t.Fatalf("read the state: %v", err)
	}
	st, err := parseState(v)
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

func (f *fixture) history() ([]Run, []Missed) {
	f.t.Helper()
	v, _ := f.client.Get(f.ctx, f.s.keys[2]).Result()
	return parseHistory(v)
}

func TestClaimRunsASlotOnce(t *testing.T) {
	f := newFixture(t, Config{})
	a := f.acquire("a")
	slot := f.redisNow().Add(-time.Second)
	if r := f.claim(a.Token, slot, 3, 0); r[0] != 1 || r[1] != 1 {
		t.Fatalf("first claim: %v, want {1, 1}", r)
	}
	if r := f.claim(a.Token, slot, 3, 0); r[0] != 1 || r[1] != 1 {
		t.Errorf("the same term's claim again (a lost reply): %v, want {1, 1}", r)
	}
	if r := f.claim(a.Token, slot.Add(500*time.Millisecond), 3, 0); r[0] != 3 || r[1] != msOf(slot) {
		t.Errorf("a claim of another slot while the first runs: %v, want {3, %d} (busy)", r, msOf(slot))
	}
	st := f.state()
	if st.run.Result != phaseRunning || st.run.Holder != a.String() || !st.run.Slot.Equal(slot) || !st.cursor.Equal(slot) {
		t.Errorf("state %+v: want slot %v running by %s", st, slot, a)
	}
	if n := f.finish(a.Token, slot, 1, phaseDone, 0); n != 1 {
		t.Fatalf("finish: %d", n)
	}
	if n := f.finish(a.Token, slot, 1, phaseDone, 0); n != 1 {
		t.Errorf("finish again (a lost reply): %d, want 1", n)
	}
	if r := f.claim(a.Token, slot, 3, 0); r[0] != 2 {
		t.Errorf("a claim of a done slot: %v, want {2} (decided)", r)
	}
	if r := f.claim(a.Token, slot.Add(-time.Second), 3, 0); r[0] != 2 {
		t.Errorf("a claim of a slot before the cursor: %v, want {2}", r)
	}
	runs, _ := f.history()
	if len(runs) != 1 || runs[0].Result != phaseDone || runs[0].Token != a.Token || !runs[0].Slot.Equal(slot) || runs[0].Ended.Before(runs[0].Started) {
		t.Errorf("history %+v: want one done run of %v", runs, slot)
	}
}

func TestClaimFencedByTheLease(t *testing.T) {
	f := newFixture(t, Config{})
	slot := f.redisNow().Add(-time.Second)
	if r := f.claim(12345, slot, 3, 0); r[0] != 0 {
		t.Errorf("claim with no lease: %v, want {0}", r)
	}
	a := f.acquire("a")
	if r := f.claim(a.Token-1, slot, 3, 0); r[0] != 0 {
		t.Errorf("claim with a stale token: %v, want {0}", r)
	}
	if r := f.claim(a.Token+1, slot, 3, 0); r[0] != 0 {
		t.Errorf("claim with a later token: %v, want {0}", r)
	}
	if n := f.client.Exists(f.ctx, f.s.keys[1], f.s.keys[2]).Val(); n != 0 {
		t.Errorf("fenced claims wrote %d keys", n)
	}
	if n := f.skip(a.Token-1, slot, slot, 1, "catch-up"); n != 0 {
		t.Errorf("skip with a stale token: %d, want 0", n)
	}
	if r := f.claim(a.Token, slot, 3, 0); r[0] != 1 {
		t.Fatalf("claim by the holder: %v", r)
	}
	if n := f.finish(a.Token-1, slot, 1, phaseDone, 0); n != 0 {
		t.Errorf("finish with a stale token: %d, want 0", n)
	}
	if st := f.state(); st.run.Result != phaseRunning {
		t.Errorf("a fenced finish changed the state: %+v", st)
	}
}

// TestSecondReplicaTakesOverALostRun: while a term runs a slot, no other replica may claim it
// (the fence); once that term is over, the next holder runs it again as attempt 2, the first
// attempt is recorded as lost, and the old term can no longer record its end.
func TestSecondReplicaTakesOverALostRun(t *testing.T) {
	f := newFixture(t, Config{})
	a := f.acquire("a")
	slot := f.redisNow().Add(-time.Second)
	if r := f.claim(a.Token, slot, 3, 0); r[0] != 1 {
		t.Fatalf("claim by a: %v", r)
	}
	l, _ := lease.New(f.client, f.name, lease.Options{Identity: "b"})
	if ok, _, _ := l.Acquire(f.ctx, time.Minute); ok {
		t.Fatal("b acquired a held lease")
	}
	if r := f.claim(a.Token+1, slot, 3, 0); r[0] != 0 {
		t.Errorf("a claim of a running slot by a replica without the lease: %v, want {0}", r)
	}
	b := f.acquire("b") // a's term expired
	r := f.claim(b.Token, slot, 3, 0)
	if r[0] != 1 || r[1] != 2 || r[3] != 1 {
		t.Fatalf("b's claim after a's term: %v, want {1, 2, now, 1} (attempt 2, a lost run recorded)", r)
	}
	if n := f.finish(a.Token, slot, 1, phaseDone, 0); n != 0 {
		t.Errorf("a's finish after its term: %d, want 0 (fenced)", n)
	}
	if n := f.finish(b.Token, slot, 2, phaseDone, 0); n != 1 {
		t.Errorf("b's finish: %d", n)
	}
	runs, _ := f.history()
	if len(runs) != 2 || runs[0].Attempt != 2 || runs[0].Result != phaseDone || runs[1].Attempt != 1 || runs[1].Result != phaseLost || runs[1].Token != a.Token {
		t.Errorf("history %+v: want b's done attempt 2 after a's lost attempt 1", runs)
	}
}

func TestClaimEarlyLateAndOutOfAttempts(t *testing.T) {
	f := newFixture(t, Config{})
	a := f.acquire("a")
	now := f.redisNow()
	if r := f.claim(a.Token, now.Add(time.Hour), 3, 0); r[0] != -1 {
		t.Errorf("claim of a slot an hour ahead: %v, want {-1} (early, by Redis's clock)", r)
	}
	late := now.Add(-time.Minute)
	if r := f.claim(a.Token, late, 3, 30*time.Second); r[0] != 4 {
		t.Errorf("claim a minute late with a 30s deadline: %v, want {4}", r)
	}
	if r := f.claim(a.Token, late, 3, 0); r[0] != 2 {
		t.Errorf("claim of the missed slot: %v, want {2}", r)
	}
	slot := now.Add(-30 * time.Second)
	for attempt := 1; attempt <= 2; attempt++ {
		if r := f.claim(a.Token, slot, 2, 0); r[0] != 1 || r[1] != int64(attempt) {
			t.Fatalf("claim %d: %v", attempt, r)
		}
		if n := f.finish(a.Token, slot, attempt, phaseFailed, 3); n != 1 {
			t.Fatalf("finish %d: %d", attempt, n)
		}
	}
	if r := f.claim(a.Token, slot, 2, 0); r[0] != 5 || r[1] != 2 {
		t.Errorf("a third claim with 2 attempts: %v, want {5, 2}", r)
	}
	if r := f.claim(a.Token, slot, 3, 0); r[0] != 2 {
		t.Errorf("a claim after the slot ran out of attempts: %v, want {2}", r)
	}
	runs, missed := f.history()
	if len(runs) != 2 || runs[0].ExitCode != 3 || runs[0].Result != phaseFailed {
		t.Errorf("runs %+v: want two failed", runs)
	}
	if len(missed) != 2 || missed[0].Reason != "attempts" || missed[1].Reason != "deadline" || !missed[1].First.Equal(late) {
		t.Errorf("missed %+v: want attempts, then deadline", missed)
	}
}

func TestSkipMovesTheCursor(t *testing.T) {
	f := newFixture(t, Config{})
	a := f.acquire("a")
	now := f.redisNow()
	if n := f.skip(a.Token, now, now, 0, "start"); n != 1 {
		t.Fatalf("start: %d", n)
	}
	if _, missed := f.history(); len(missed) != 0 {
		t.Errorf("a start records %v", missed)
	}
	first, last := now.Add(time.Second), now.Add(5*time.Second)
	if n := f.skip(a.Token, first, last, 5, "catch-up"); n != 1 {
		t.Fatalf("skip: %d", n)
	}
	if n := f.skip(a.Token, first, last.Add(-time.Second), 4, "catch-up"); n != 2 {
		t.Errorf("a skip behind the cursor: %d, want 2", n)
	}
	if st := f.state(); !st.cursor.Equal(last) || st.run.Result != phaseNone {
		t.Errorf("state %+v: want cursor %v, no run", st, last)
	}
	_, missed := f.history()
	if len(missed) != 1 || missed[0] != (Missed{First: first, Last: last, Count: 5, Reason: "catch-up"}) {
		t.Errorf("missed %+v", missed)
	}
	// A run of an ended term found by a skip is recorded as lost, and may be retried.
	slot := now.Add(-time.Second)
	f.client.Del(f.ctx, f.s.keys[1])
	if r := f.claim(a.Token, slot, 3, 0); r[0] != 1 {
		t.Fatal(r)
	}
	b := f.acquire("b")
	if n := f.skip(b.Token, now, now, 1, "overlap"); n != 1 {
		t.Fatal(n)
	}
	if st := f.state(); st.run.Result != phaseLost {
		t.Errorf("state %+v: want the run lost", st)
	}
	if r := f.claim(b.Token, slot, 3, 0); r[0] != 1 || r[1] != 2 || r[3] != 0 {
		t.Errorf("retry of the lost run: %v, want {1, 2, now, 0}", r)
	}
}

func TestHistoryKeepsTheNewest(t *testing.T) {
	f := newFixture(t, Config{})
	a := f.acquire("a")
	now := f.redisNow()
	for i := 1; i <= 5; i++ {
		sl := now.Add(time.Duration(i) * time.Millisecond)
		f.run(skipScript, a.Token, ms(sl), ms(sl), 1, "r"+strings.Repeat("x", i), 3, f.s.spec, f.s.zone)
	}
	_, missed := f.history()
	if len(missed) != 3 || missed[0].Reason != "rxxxxx" || missed[2].Reason != "rxxx" {
		t.Errorf("history %+v: want the 3 newest", missed)
	}
}

func TestReadScript(t *testing.T) {
	f := newFixture(t, Config{})
	v, err := f.s.caller.call(f.ctx, readScript, f.s.keys[1:])
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeRead(v)
	if err != nil || got.has || got.now.Sub(f.redisNow()).Abs() > time.Second {
		t.Errorf("read of no state: %+v %v", got, err)
	}
	a := f.acquire("a")
	f.skip(a.Token, got.now, got.now, 0, "start")
	v, _ = f.s.caller.call(f.ctx, readScript, f.s.keys[1:2])
	if got, err := decodeRead(v); err != nil || !got.has || !got.st.cursor.Equal(got.now.Add(0).Truncate(time.Millisecond)) && got.st.cursor.After(got.now) {
		t.Errorf("read: %+v %v", got, err)
	}
}

// TestScriptsAsFunctions: with elector's function library loaded and the client in Functions
// mode (FCALL only), the schedule's scripts run as the library's functions.
func TestScriptsAsFunctions(t *testing.T) {
	f := newFixture(t, Config{})
	if _, err := lualib.Install(f.ctx, f.client); err != nil {
		t.Fatal(err)
	}
	lualib.SetDefaultMode(f.client, lualib.Functions)
	a := f.acquire("a")
	slot := f.redisNow().Add(-time.Second)
	if r := f.claim(a.Token, slot, 3, 0); r[0] != 1 || r[1] != 1 {
		t.Fatalf("claim through FCALL: %v, want {1, 1}", r)
	}
	if n := f.finish(a.Token, slot, 1, phaseDone, 0); n != 1 {
		t.Fatalf("finish through FCALL: %d", n)
	}
	if runs, _ := f.history(); len(runs) != 1 || runs[0].Result != phaseDone {
		t.Errorf("history %+v: want the one run, done", runs)
	}
	v, err := f.s.caller.call(f.ctx, readScript, f.s.keys[1:2])
	if _, derr := decodeRead(v); err != nil || derr != nil {
		t.Errorf("read through FCALL: %v %v", err, derr)
	}
}

// TestStateKeepsSpecAndZone: claim and skip write the term's spec and zone into the state (v2),
// finish keeps them, and a v1 state (written before they were kept) is read, run on and
// written as v2 by the next claim or skip; finish keeps a v1 state v1.
func TestStateKeepsSpecAndZone(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, Config{Spec: "30  2 * * *", Location: berlin})
	a := f.acquire("a")
	// A second in the past, so the slot claimed below (now + 1 ms) has come by the server's
	// clock however quickly the calls in between run.
	now := f.redisNow().Add(-time.Second)
	if n := f.skip(a.Token, now, now, 0, "start"); n != 1 {
		t.Fatal(n)
	}
	if st := f.state(); st.spec != "30 2 * * *" || st.zone != "Europe/Berlin" {
		t.Errorf("state after skip: spec %q zone %q, want the spec on one line and Europe/Berlin", st.spec, st.zone)
	}
	// A v1 state with a run going on: finish keeps it v1 with its record.
	v1 := fmt.Sprintf("v1\n%s\n%s\nrunning\n1\n%d\n%s\n0\n0\n%s", ms(now), ms(now), a.Token, ms(now), a)
	f.client.Set(f.ctx, f.s.keys[1], v1, 0)
	if n := f.finish(a.Token, now, 1, phaseDone, 0); n != 1 {
		t.Fatalf("finish of a v1 run: %d", n)
	}
	v, _ := f.client.Get(f.ctx, f.s.keys[1]).Result()
	if !strings.HasPrefix(v, "v1\n") || !strings.HasSuffix(v, "\n"+a.String()) {
		t.Errorf("v1 state after finish: %q, want v1 with the record", v)
	}
	if st := f.state(); st.spec != "" || st.run.Result != phaseDone || st.run.Holder != a.String() {
		t.Errorf("v1 state read: %+v, want no spec, the run done by %s", st, a)
	}
	// The next claim writes v2 with the spec; finish keeps the spec and the record.
	slot := now.Add(time.Millisecond)
	if r := f.claim(a.Token, slot, 3, 0); r[0] != 1 {
		t.Fatalf("claim on a v1 state: %v", r)
	}
	if n := f.finish(a.Token, slot, 1, phaseFailed, 2); n != 1 {
		t.Fatalf("finish: %d", n)
	}
	st := f.state()
	if st.spec != "30 2 * * *" || st.zone != "Europe/Berlin" || st.run.Result != phaseFailed || st.run.ExitCode != 2 || st.run.Holder != a.String() {
		t.Errorf("state after claim and finish: %+v", st)
	}
	if runs, _ := f.history(); len(runs) != 2 || runs[0].Holder != a.String() || runs[0].Result != phaseFailed {
		t.Errorf("history %+v: want the failed run first, by %s", runs, a)
	}
	// A term with another spec rewrites it with a skip that moves nothing.
	g := newFixtureOn(t, f.client, Config{Spec: "@hourly"})
	if n := g.skip(a.Token, st.cursor, st.cursor, 0, "spec"); n != 2 {
		t.Errorf("skip to the cursor: %d, want 2 (the cursor did not move)", n)
	}
	if st := f.state(); st.spec != "@hourly" || st.zone != "UTC" || !st.cursor.Equal(slot) || st.run.Result != phaseFailed {
		t.Errorf("state after the new spec: %+v", st)
	}
	// Fenced as ever: another token writes nothing, spec or not.
	if n := g.skip(a.Token+1, st.cursor, st.cursor, 0, "spec"); n != 0 {
		t.Errorf("skip of another token: %d, want 0 (fenced)", n)
	}
}

// newFixtureOn is newFixture on the client of another fixture.
func newFixtureOn(t *testing.T, client *redis.Client, cfg Config) *fixture {
	t.Helper()
	if cfg.LeaseName == "" {
		cfg.LeaseName = "job"
	}
	cfg.Client, cfg.Job = client, func(context.Context) error { return nil }
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, ctx: t.Context(), client: client, s: s, name: cfg.LeaseName}
}
