package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The checker is proven on synthetic runs: a healthy one that must pass, and copies of it with
// exactly one rule broken, each of which must fail with the right violation.

var t0 = time.Unix(1_800_000_000, 0)

// at returns t0 + ms milliseconds.
func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// writes returns attempts sent every 10ms in [from, to), each done 1ms after it was sent,
// numbered from seq.
func writes(seq int64, from, to int, res Result) []Write {
	var out []Write
	for ms := from; ms < to; ms += 10 {
		out = append(out, Write{Seq: seq, Sent: at(ms), Done: at(ms + 1), Result: res})
		seq++
	}
	return out
}

// entries returns what Redis recorded for the accepted writes of the workers, in time order.
func entries(workers ...Worker) []Entry {
	var out []Entry
	for _, w := range workers {
		for _, wr := range w.Writes {
			if wr.Result == Accepted {
				out = append(out, Entry{Token: w.Token, PID: w.PID, Seq: wr.Seq, Sent: wr.Sent})
			}
		}
	}
	sortEntries(out)
	return out
}

func sortEntries(es []Entry) {
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].Sent.Before(es[j-1].Sent); j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

// healthyRun: r0 (token 100) works until it is SIGKILLed at 1000ms; r1 acquires at 1900ms
// (token 200) and works until the end at 4000ms.
func healthyRun() Run {
	a := Worker{Identity: "r0", PID: 10, Token: 100, Start: at(-500), Writes: writes(1, -490, 1000, Accepted)}
	b := Worker{Identity: "r1", PID: 11, Token: 200, Start: at(1950), Writes: writes(1, 1960, 4000, Accepted)}
	return Run{
		Seed: 42, Lease: time.Second, Bound: 2 * time.Second, Start: at(0), End: at(4000),
		Workers:  []Worker{a, b},
		Acquired: []Acquisition{{Time: at(-510), Token: 100, Identity: "r0"}, {Time: at(1900), Token: 200, Identity: "r1"}},
		Faults:   []Fault{{Seq: 1, Kind: SigKill, Start: at(1000), Heal: at(1000), Target: "r0", Token: 100}},
		Epochs:   [][]Entry{entries(a, b)},
	}
}

// expectViolation fails unless the report has a violation containing want.
func expectViolation(t *testing.T, rep *Report, want string) {
	t.Helper()
	if !rep.Failed() {
		t.Fatalf("no violation, want one containing %q; summary:\n%s", want, rep.Summary())
	}
	for _, v := range rep.Violations {
		if strings.Contains(v.Msg, want) {
			return
		}
	}
	t.Fatalf("no violation contains %q; got:\n%s", want, rep.Failure())
}

func expectPass(t *testing.T, rep *Report) {
	t.Helper()
	if rep.Failed() {
		t.Fatalf("unexpected violations:\n%s", rep.Failure())
	}
}

func TestCheckHealthyRun(t *testing.T) {
	rep := Check(healthyRun())
	expectPass(t, rep)
	if len(rep.Terms) != 2 || !rep.TokensIncreasing {
		t.Errorf("terms %v, increasing %v; want 2 terms, increasing", rep.Terms, rep.TokensIncreasing)
	}
	if rep.Terms[1].Start != at(1900) {
		t.Errorf("term of r1 began at %v, want its acquisition at 1900ms", rep.Terms[1].Start.Sub(t0))
	}
	if n := 149 + 204; rep.Accepted != n || rep.Attempts != n || rep.Rejected != 0 || rep.Unacknowledged != 0 {
		t.Errorf("accepted %d of %d attempts (%d rejected, %d unacknowledged), want %d of %d", rep.Accepted, rep.Attempts, rep.Rejected, rep.Unacknowledged, n, n)
	}
	// From the SIGKILL at 1000ms to the first write of r1 at 1960ms.
	if g := rep.Gaps[0]; g.From != at(1000) || g.To != at(1960) {
		t.Errorf("gap after the SIGKILL: %v .. %v, want 1000ms .. 1960ms", g.From.Sub(t0), g.To.Sub(t0))
	}
	if len(rep.Overlaps) != 0 || len(rep.Stale) != 0 {
		t.Errorf("overlaps %v, stale %v; want none", rep.Overlaps, rep.Stale)
	}
	s := rep.Summary()
	for _, want := range []string{"seed 42", "terms: 2", "tokens strictly increasing: yes", "sigkill", "960ms", "violations: 0"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}

// staleRun is healthyRun where r0's worker, not killed, goes on writing until 2100ms, and the
// fence accepts its writes until 1970ms (its memory of token 200 was lost) and refuses them
// after that. fault is the fault at 1000ms.
func staleRun(fault Fault) Run {
	r := healthyRun()
	a := &r.Workers[0]
	a.Writes = append(writes(1, -490, 1970, Accepted), writes(500, 1970, 2100, Rejected)...)
	r.Faults = []Fault{fault}
	// Redis: r0's writes up to 1970ms, then r1's first write at 1960ms came after them.
	var es []Entry
	for _, wr := range a.Writes {
		if wr.Result == Accepted {
			es = append(es, Entry{Token: 100, PID: 10, Seq: wr.Seq, Sent: wr.Sent})
		}
	}
	for _, wr := range r.Workers[1].Writes {
		es = append(es, Entry{Token: 200, PID: 11, Seq: wr.Seq, Sent: wr.Sent})
	}
	r.Epochs = [][]Entry{entries(Worker{}), es}
	return r
}

func TestCheckStaleWriteAfterKillFails(t *testing.T) {
	rep := Check(staleRun(Fault{Seq: 1, Kind: SigKill, Start: at(1000), Heal: at(1000), Target: "r0", Token: 100}))
	expectViolation(t, rep, "stale write accepted")
	expectViolation(t, rep, "worked for")
	if _, _, bad := rep.StaleCounts(); bad != 7 {
		t.Errorf("%d unexpected stale writes, want 7 (1900..1960ms)", bad)
	}
	if !strings.Contains(rep.Failure(), "seed 42") || !strings.Contains(rep.Failure(), "FAULT fault #1 sigkill") {
		t.Errorf("failure text lacks the seed or the fault in the timeline:\n%s", rep.Failure())
	}
}

func TestCheckStaleWritesAfterDataLossAreExpected(t *testing.T) {
	rep := Check(staleRun(Fault{Seq: 1, Kind: Restart, Start: at(1000), Heal: at(1100), Token: 100}))
	expectPass(t, rep)
	dl, fr, bad := rep.StaleCounts()
	if dl != 7 || fr != 0 || bad != 0 {
		t.Errorf("stale writes: %d after data loss, %d frozen, %d unexpected; want 7, 0, 0", dl, fr, bad)
	}
	if len(rep.Overlaps) != 1 {
		t.Fatalf("overlaps: %+v, want one", rep.Overlaps)
	}
	o := rep.Overlaps[0]
	if o.Older != 100 || o.Newer != 200 || o.Accepted != 7 || o.Attempts != 20 || !o.Expected {
		t.Errorf("overlap %+v, want tokens 100 after 200, 20 attempts of which 7 accepted, expected", o)
	}
	if o.Unfenced() != 61*time.Millisecond || o.Duration() != 191*time.Millisecond {
		t.Errorf("overlap lasted %v, unfenced %v; want 191ms, 61ms", o.Duration(), o.Unfenced())
	}
	if rep.Rejected != 13 {
		t.Errorf("%d rejected, want 13", rep.Rejected)
	}
	if !strings.Contains(rep.Summary(), "longest unfenced overlap: 61ms") {
		t.Errorf("summary:\n%s", rep.Summary())
	}
}

func TestCheckStaleWritesLongAfterDataLossFail(t *testing.T) {
	// The restart ended at 800ms: the old leader's writes at 1900ms came more than a lease later.
	rep := Check(staleRun(Fault{Seq: 1, Kind: Restart, Start: at(700), Heal: at(800), Token: 100}))
	expectViolation(t, rep, "after the end of fault #1 restart")
}

func TestCheckFrozenLeader(t *testing.T) {
	rep := Check(staleRun(Fault{Seq: 1, Kind: SigStop, Start: at(1000), Heal: at(1500), Target: "r0", Token: 100}))
	expectPass(t, rep)
	if _, fr, _ := rep.StaleCounts(); fr != 7 {
		t.Errorf("%d stale writes by the frozen leader, want 7", fr)
	}
	// Another replica than the frozen one may not work on.
	rep = Check(staleRun(Fault{Seq: 1, Kind: SigStop, Start: at(1000), Heal: at(1500), Target: "r3", Token: 100}))
	expectViolation(t, rep, "stale write accepted")
}

func TestCheckFencedOverlapAfterKillFails(t *testing.T) {
	// The fence refuses every write of r0 after r1 began, but r0 should not work at all then.
	r := healthyRun()
	r.Workers[0].Writes = append(r.Workers[0].Writes, writes(500, 1900, 1950, Rejected)...)
	rep := Check(r)
	expectViolation(t, rep, "the term of r0 with token 100 worked for 41ms after the term of r1 with token 200 began (5 attempts, 0 accepted")
	if len(rep.Stale) != 0 || rep.Rejected != 5 {
		t.Errorf("stale %v, rejected %d; want none, 5", rep.Stale, rep.Rejected)
	}
}

func TestCheckTokensMustIncrease(t *testing.T) {
	r := healthyRun()
	c := Worker{Identity: "r2", PID: 12, Token: 150, Start: at(4100), Writes: writes(1, 4110, 4200, Accepted)}
	r.Workers = append(r.Workers, c)
	r.End = at(4300)
	r.Epochs = [][]Entry{entries(r.Workers[0], r.Workers[1]), entries(c)} // a data loss in between
	rep := Check(r)
	expectViolation(t, rep, "the term of r2 with token 150 began after the term of r1 with the larger token 200")
	if rep.TokensIncreasing {
		t.Error("TokensIncreasing is true")
	}
	// The acquisition log alone, without any worker, is enough evidence.
	r = healthyRun()
	r.Acquired = append(r.Acquired, Acquisition{Time: at(3000), Token: 199, Identity: "r4"})
	expectViolation(t, Check(r), "the term of r4 with token 199 began after")
	// One token, two identities.
	r = healthyRun()
	r.Acquired = append(r.Acquired, Acquisition{Time: at(1900), Token: 200, Identity: "r3"})
	expectViolation(t, Check(r), "token 200 was handed to r1 and to r3")
}

func TestCheckResumedTermIsOneTerm(t *testing.T) {
	// r1 steps down and re-acquires its own term (same token) with a second worker.
	r := healthyRun()
	r.Workers[1].Writes = writes(1, 1960, 2500, Accepted)
	b2 := Worker{Identity: "r1", PID: 13, Token: 200, Start: at(2600), Writes: writes(1, 2610, 4000, Accepted)}
	r.Workers = append(r.Workers, b2)
	r.Epochs = [][]Entry{entries(r.Workers...)}
	rep := Check(r)
	expectPass(t, rep)
	if len(rep.Terms) != 2 || rep.Terms[1].Workers != 2 {
		t.Errorf("terms %+v, want 2, the second with 2 workers", rep.Terms)
	}
}

func TestCheckFenceOrderInRedis(t *testing.T) {
	r := healthyRun()
	es := r.Epochs[0]
	// Redis accepted r0's write 149 (token 100) after r1's first write (token 200).
	last := len(r.Workers[0].Writes) - 1
	moved := es[last]
	es = append(append(append([]Entry{}, es[:last]...), es[last+1:last+3]...), append([]Entry{moved}, es[last+3:]...)...)
	r.Epochs = [][]Entry{es}
	expectViolation(t, Check(r), "the fence accepted token 100 (process 10, write 149) after token 200 in the same data set")
	// The same order across a restart without data is not a fence violation.
	r.Epochs = [][]Entry{es[:last+2], es[last+2:]}
	r.Faults = append(r.Faults, Fault{Seq: 2, Kind: Restart, Start: at(3900), Heal: at(3950)})
	for _, v := range Check(r).Violations {
		if strings.Contains(v.Msg, "the fence accepted") {
			t.Errorf("violation across data sets: %s", v.Msg)
		}
	}
}

func TestCheckLeaderless(t *testing.T) {
	r := healthyRun()
	r.Workers[1].Start = at(3000)
	r.Workers[1].Writes = writes(1, 3010, 4000, Accepted)
	r.Acquired[1].Time = at(2990)
	r.Epochs = [][]Entry{entries(r.Workers...)}
	rep := Check(r)
	expectViolation(t, rep, "no worker had a write accepted for 2.01s after fault #1 sigkill of r0 (token 100) (bound 2s)")
	// Redis unreachable until 2500ms: the time without a worker counts from then (510ms).
	r.Faults[0] = Fault{Seq: 1, Kind: Unreachable, Start: at(1000), Heal: at(2500), Detail: "black hole"}
	rep = Check(r)
	expectPass(t, rep)
	if g := rep.Gaps[0]; g.Duration() != 510*time.Millisecond {
		t.Errorf("gap after unreachable %v, want 510ms", g.Duration())
	}
	// No recovery at all before the next fault.
	r = healthyRun()
	r.Workers = r.Workers[:1]
	r.Epochs = [][]Entry{entries(r.Workers...)}
	expectViolation(t, Check(r), "no worker had a write accepted for 3s")
}

func TestCheckRedisAgreesWithTheLogs(t *testing.T) {
	// A write r1 saw accepted is not in Redis, and no restart explains it.
	r := healthyRun()
	r.Epochs[0] = r.Epochs[0][:len(r.Epochs[0])-1]
	expectViolation(t, Check(r), "saw write 204 accepted, but Redis does not have it")
	// Near a restart it was erased with the data.
	r.Faults = append(r.Faults, Fault{Seq: 2, Kind: Restart, Start: at(3995), Heal: at(4000)})
	rep := Check(r)
	expectPass(t, rep)
	if rep.LostWithData != 1 {
		t.Errorf("LostWithData = %d, want 1", rep.LostWithData)
	}
	// Redis holds a write no worker logged.
	r = healthyRun()
	r.Epochs[0] = append(r.Epochs[0], Entry{Token: 300, PID: 99, Seq: 1, Sent: at(3999)})
	expectViolation(t, Check(r), "Redis holds write 1 of process 99 with token 300, which no worker logged")
	// Redis holds a write its worker saw rejected.
	r = healthyRun()
	r.Workers[1].Writes[3].Result = Rejected
	expectViolation(t, Check(r), "saw write 4 rejected, but Redis accepted it")
	// A write whose reply was lost (the worker logged an error) is accepted, unacknowledged.
	r = healthyRun()
	r.Workers[1].Writes[3].Result, r.Workers[1].Writes[3].Reason = Error, "timeout"
	rep = Check(r)
	expectPass(t, rep)
	if rep.Unacknowledged != 1 || rep.Errors != 1 || rep.Accepted != 149+204 {
		t.Errorf("unacknowledged %d, errors %d, accepted %d; want 1, 1, %d", rep.Unacknowledged, rep.Errors, rep.Accepted, 149+204)
	}
}

func TestCheckHarnessProblems(t *testing.T) {
	r := healthyRun()
	r.Events = append(r.Events, Event{Time: at(500), Text: "elector r2 (pid 5) starts"}, Problem(at(600), "elector %s exited by itself", "r2"))
	rep := Check(r)
	expectViolation(t, rep, "elector r2 exited by itself")
	if len(rep.Violations) != 1 {
		t.Errorf("violations %v, want exactly one", rep.Violations)
	}
	if tl := rep.Timeline(at(0), at(1000)); !strings.Contains(tl, "elector r2 (pid 5) starts") || !strings.Contains(tl, "VIOLATION: elector r2 exited by itself") {
		t.Errorf("timeline:\n%s", tl)
	}
}

func TestParseWorkerLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.log")
	good := "start 1000000000 7 55 r3\n" +
		"w 1000000100 1000000200 55 1 accepted\n" +
		"w 1000000300 1000000400 55 2 rejected\n" +
		"w 1000000500 1000000600 55 3 error timeout\n" +
		"exit 1000000700 signal\n"
	if err := os.WriteFile(path, []byte(good+"w 10000008"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := ParseWorkerLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if w.Identity != "r3" || w.PID != 7 || w.Token != 55 || w.Start != time.Unix(1, 0) || w.Exit != time.Unix(0, 1000000700) || len(w.Writes) != 3 {
		t.Fatalf("parsed %+v", w)
	}
	if wr := w.Writes[2]; wr.Seq != 3 || wr.Result != Error || wr.Reason != "timeout" || wr.Done != time.Unix(0, 1000000600) {
		t.Errorf("third write %+v", wr)
	}
	for name, text := range map[string]string{
		"bad line in the middle": "start 1 7 55 r3\nw 1 2 55 x accepted\nw 3 4 55 2 accepted\n",
		"unknown result":         "start 1 7 55 r3\nw 1 2 55 1 maybe\nexit 5 signal\n",
		"other token":            "start 1 7 55 r3\nw 1 2 56 1 accepted\nexit 5 signal\n",
		"no start":               "w 1 2 55 1 accepted\n",
	} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ParseWorkerLog(path); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseEntry(t *testing.T) {
	e, err := ParseEntry("55 7 3 1000000500")
	if err != nil || e != (Entry{Token: 55, PID: 7, Seq: 3, Sent: time.Unix(0, 1000000500)}) {
		t.Errorf("ParseEntry = %+v, %v", e, err)
	}
	for _, bad := range []string{"", "55 7 3", "55 7 x 1", "55 7 3 1 9"} {
		if _, err := ParseEntry(bad); err == nil {
			t.Errorf("ParseEntry(%q) succeeded", bad)
		}
	}
}
