package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Term is one term: one fencing token. A term can have more than one worker when its elector
// stepped down and then re-acquired the lease that Redis still held for that same term, and
// none when its elector lost it before the worker started.
type Term struct {
	Token    int64
	Identity string
	// Start is the earliest evidence of the term: its acquisition or its first worker's start.
	Start   time.Time
	Workers int
	// Accepted, Rejected and Errors count the write attempts of its workers by outcome (as the
	// workers saw them).
	Accepted, Rejected, Errors int
}

// Overlap is the work of an older term done after a newer term had begun.
type Overlap struct {
	// Older and Newer are the two terms' tokens and identities.
	Older, Newer                 int64
	OlderIdentity, NewerIdentity string
	// From and To span the older term's write attempts sent after the newer term began (from
	// the first one's sending to the last one's outcome); Attempts counts them.
	From, To time.Time
	Attempts int
	// UnfencedFrom and UnfencedTo span those of the attempts that the fence accepted, which
	// Accepted counts; zero times when the fence refused them all.
	UnfencedFrom, UnfencedTo time.Time
	Accepted                 int
	// Fault is the index in Run.Faults of the fault that caused it (the last one injected
	// before it began), -1 if none.
	Fault int
	// Expected is set when the overlap falls in a window the design names as a limit (see
	// Check); Why explains the classification.
	Expected bool
	Why      string
}

// Duration is how long the older term went on working.
func (o Overlap) Duration() time.Duration { return o.To.Sub(o.From) }

// Unfenced is how long the older term's writes were accepted while the newer term worked.
func (o Overlap) Unfenced() time.Duration { return o.UnfencedTo.Sub(o.UnfencedFrom) }

// StaleWrite is a write that the fence accepted from an older term after a newer term had begun.
type StaleWrite struct {
	Identity string
	PID      int
	Token    int64
	Seq      int64
	// Newer is the largest token whose term had begun when the write was sent.
	Newer int64
	// Sent and Done bound when the write was executed. Acknowledged tells whether the worker
	// saw the acceptance (else only Redis recorded it).
	Sent, Done   time.Time
	Acknowledged bool
	// Fault is the index in Run.Faults of the last fault injected before the write, -1 if none.
	Fault int
	// Expected is set when the write falls in a window where the design says the fence cannot
	// refuse it (see Check); Why explains the classification.
	Expected bool
	Why      string

	logged bool // the worker logged the attempt
}

// Gap is the longest time without an accepted write in the window after one fault: from the
// fault (or, when the fault made Redis unreachable, from its end) to the next fault.
type Gap struct {
	Fault    int
	From, To time.Time
}

// Duration is the length of the gap.
func (g Gap) Duration() time.Duration { return g.To.Sub(g.From) }

// Violation is a broken rule.
type Violation struct {
	Time time.Time
	Msg  string
}

// Report is what Check found.
type Report struct {
	run Run

	// Terms are the terms in the order they began.
	Terms []Term
	// TokensIncreasing reports that every term's token was larger than every earlier term's.
	TokensIncreasing bool
	// Attempts counts every write attempt; Accepted the writes Redis accepted (acknowledged
	// or not), Unacknowledged those of them the worker never saw accepted; Rejected the
	// attempts the fence refused as stale; Errors the attempts without an answer; LostWithData
	// the acknowledged writes that a restart of Redis erased before the test could read them.
	Attempts, Accepted, Unacknowledged, Rejected, Errors, LostWithData int
	// Overlaps are the overlapping pairs of terms, longest first.
	Overlaps []Overlap
	// Stale are the accepted writes of older terms, expected or not.
	Stale []StaleWrite
	// Gaps has one entry per fault, in the order of Run.Faults.
	Gaps []Gap
	// Violations are the broken rules, in time order. A run passes when there is none.
	Violations []Violation
}

// writeKey identifies one write attempt in the logs and in Redis.
type writeKey struct {
	token int64
	pid   int
	seq   int64
}

// accepted is one write the fence accepted.
type accepted struct {
	worker     int // index in Run.Workers
	sent, done time.Time
	ack        bool // the worker saw it accepted
	logged     bool // the worker logged the attempt, whatever it saw
}

// begun is the beginning of one term, for finding the newest term at a given time.
type begun struct {
	at       time.Time
	token    int64 // the largest token among this and all earlier terms
	identity string
}

// Check analyses a run and returns its report. The rules:
//
//   - Tokens strictly increase: a term (see Term) that begins after a term with a larger token
//     is a violation, and so is a token seen with two identities.
//   - Within one Redis data set, the fence accepts writes in non-decreasing token order (read
//     from the list the writes push onto, in Redis's order).
//   - The work of two terms does not overlap: a write attempt of token T sent after a term with
//     a larger token began is overlapping work, and if the fence accepted it, a stale write.
//     Both are expected, reported but not violations, only in the two windows the design
//     names as limits (docs/DESIGN.md, "Limits"): after a restart of Redis without data, by
//     the term that held the lease at the restart or an older one (the lease was forgotten;
//     and the fence, kept in the same Redis, forgot the largest token, so the old leader's
//     writes pass until the new leader's first write); and after a SIGSTOP, by the frozen
//     leader. In both cases only when the overlap began within the lease duration after the
//     fault ended. Every other overlap and stale write is a violation.
//   - After every fault, the longest time without an accepted write, counted from the fault's
//     start (from its end when the fault made Redis unreachable: restart, unreachable) until
//     the next fault, is at most Run.Bound.
//   - Every write a worker saw accepted is in Redis, unless a restart erased it; every write in
//     Redis comes from a worker that logged, and was not seen rejected.
func Check(r Run) *Report {
	rep := &Report{run: r, TokensIncreasing: true, Gaps: make([]Gap, len(r.Faults))}
	workers := slices.Clone(r.Workers)
	slices.SortStableFunc(workers, func(a, b Worker) int { return a.Start.Compare(b.Start) })
	rep.run.Workers = workers

	rep.buildTerms(workers)
	acc := rep.collectAccepted(workers)
	rep.checkFenceOrder()

	begins := make([]begun, len(rep.Terms))
	var maxTok int64
	var maxID string
	for i, t := range rep.Terms {
		if t.Token > maxTok {
			maxTok, maxID = t.Token, t.Identity
		}
		begins[i] = begun{at: t.Start, token: maxTok, identity: maxID}
	}
	newest := func(t time.Time) (int64, string) {
		i := sort.Search(len(begins), func(i int) bool { return begins[i].at.After(t) })
		if i == 0 {
			return 0, ""
		}
		return begins[i-1].token, begins[i-1].identity
	}
	rep.findStale(workers, acc, newest)
	rep.findOverlaps(workers, newest)
	rep.measureGaps(acc)
	for _, p := range r.Events {
		if strings.HasPrefix(p.Text, problemPrefix) {
			rep.violate(p.Time, "%s", strings.TrimPrefix(p.Text, problemPrefix))
		}
	}
	slices.SortStableFunc(rep.Violations, func(a, b Violation) int { return a.Time.Compare(b.Time) })
	return rep
}

// problemPrefix marks an Event that is a violation found by the test harness itself (an
// elector that exited by itself, a process left behind, a data race).
const problemPrefix = "PROBLEM: "

// Problem returns an Event that Check reports as a violation.
func Problem(at time.Time, format string, args ...any) Event {
	return Event{Time: at, Text: problemPrefix + fmt.Sprintf(format, args...)}
}

func (rep *Report) violate(at time.Time, format string, args ...any) {
	rep.Violations = append(rep.Violations, Violation{Time: at, Msg: fmt.Sprintf(format, args...)})
}

// buildTerms collects the terms from the acquisitions and the workers, and checks that tokens
// increase from term to term.
func (rep *Report) buildTerms(workers []Worker) {
	byToken := map[int64]*Term{}
	term := func(at time.Time, token int64, identity string) *Term {
		t := byToken[token]
		if t == nil {
			t = &Term{Token: token, Identity: identity, Start: at}
			byToken[token] = t
		}
		if t.Identity != identity {
			rep.TokensIncreasing = false
			rep.violate(at, "token %d was handed to %s and to %s", token, t.Identity, identity)
		}
		t.Start = minTime(t.Start, at)
		return t
	}
	for _, a := range rep.run.Acquired {
		term(a.Time, a.Token, a.Identity)
	}
	for _, w := range workers {
		t := term(w.Start, w.Token, w.Identity)
		t.Workers++
		for _, wr := range w.Writes {
			rep.Attempts++
			switch wr.Result {
			case Accepted:
				t.Accepted++
			case Rejected:
				t.Rejected++
				rep.Rejected++
			case Error:
				t.Errors++
				rep.Errors++
			}
		}
	}
	for _, t := range byToken {
		rep.Terms = append(rep.Terms, *t)
	}
	slices.SortFunc(rep.Terms, func(a, b Term) int { return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Token, b.Token)) })
	var prev Term
	for i, t := range rep.Terms {
		if i > 0 && t.Token < prev.Token {
			rep.TokensIncreasing = false
			rep.violate(t.Start, "the term of %s with token %d began after the term of %s with the larger token %d (at %s)",
				t.Identity, t.Token, prev.Identity, prev.Token, rep.at(prev.Start))
		}
		if t.Token > prev.Token {
			prev = t
		}
	}
}

// collectAccepted merges the writes the workers saw accepted with those Redis recorded.
func (rep *Report) collectAccepted(workers []Worker) map[writeKey]accepted {
	byProc := map[[2]int64]int{}
	acc := map[writeKey]accepted{}
	attempts := map[writeKey]Write{}
	for i, w := range workers {
		byProc[[2]int64{w.Token, int64(w.PID)}] = i
		for _, wr := range w.Writes {
			k := writeKey{w.Token, w.PID, wr.Seq}
			attempts[k] = wr
			if wr.Result == Accepted {
				acc[k] = accepted{worker: i, sent: wr.Sent, done: wr.Done, ack: true, logged: true}
			}
		}
	}
	inRedis := map[writeKey]bool{}
	for _, epoch := range rep.run.Epochs {
		for _, e := range epoch {
			k := writeKey{e.Token, e.PID, e.Seq}
			inRedis[k] = true
			if _, ok := acc[k]; ok {
				continue
			}
			wi, known := byProc[[2]int64{e.Token, int64(e.PID)}]
			if !known {
				rep.violate(e.Sent, "Redis holds write %d of process %d with token %d, which no worker logged", e.Seq, e.PID, e.Token)
				continue
			}
			a := accepted{worker: wi, sent: e.Sent, done: e.Sent}
			if wr, ok := attempts[k]; ok {
				a.done, a.logged = wr.Done, true
				if wr.Result == Rejected {
					rep.violate(e.Sent, "%v saw write %d rejected, but Redis accepted it", workers[wi], e.Seq)
				}
			}
			acc[k] = a
			rep.Unacknowledged++
		}
	}
	rep.Accepted = len(acc)
	for k, a := range acc {
		if !a.ack || inRedis[k] {
			continue
		}
		if f := rep.restartAround(a); f >= 0 {
			rep.LostWithData++
			continue
		}
		rep.violate(a.done, "%v saw write %d accepted, but Redis does not have it and was not restarted then", workers[a.worker], k.seq)
	}
	return acc
}

// restartAround returns the index of a restart of Redis that can have erased the accepted
// write a before the test read it, or -1.
func (rep *Report) restartAround(a accepted) int {
	for i, f := range rep.run.Faults {
		if f.Kind == Restart && !a.done.Before(f.Start.Add(-time.Second)) && !a.sent.After(f.Heal) {
			return i
		}
	}
	return -1
}

// checkFenceOrder checks that in each data set the fence accepted tokens in non-decreasing order.
func (rep *Report) checkFenceOrder() {
	for n, epoch := range rep.run.Epochs {
		var maxTok int64
		for _, e := range epoch {
			if e.Token < maxTok {
				rep.violate(e.Sent, "the fence accepted token %d (process %d, write %d) after token %d in the same data set (epoch %d)", e.Token, e.PID, e.Seq, maxTok, n)
			}
			maxTok = max(maxTok, e.Token)
		}
	}
}

// faultBefore returns the index of the last fault injected at or before t, -1 if none.
func (rep *Report) faultBefore(t time.Time) int {
	i := sort.Search(len(rep.run.Faults), func(i int) bool { return rep.run.Faults[i].Start.After(t) })
	return i - 1
}

// findOverlaps finds the write attempts of older terms sent after a newer term's worker
// started, and spans the accepted ones with the stale writes found before.
func (rep *Report) findOverlaps(workers []Worker, newest func(time.Time) (int64, string)) {
	type pair struct{ older, newer int64 }
	byPair := map[pair]*Overlap{}
	get := func(older int64, olderID string, newer int64, newerID string, from, to time.Time) *Overlap {
		p := pair{older, newer}
		o := byPair[p]
		if o == nil {
			o = &Overlap{Older: older, Newer: newer, OlderIdentity: olderID, NewerIdentity: newerID, From: from, To: to}
			byPair[p] = o
		}
		return o
	}
	for _, w := range workers {
		for _, wr := range w.Writes {
			tok, id := newest(wr.Sent)
			if tok <= w.Token {
				continue
			}
			o := get(w.Token, w.Identity, tok, id, wr.Sent, wr.Done)
			o.Attempts++
			o.From, o.To = minTime(o.From, wr.Sent), maxTime(o.To, wr.Done)
		}
	}
	for _, s := range rep.Stale {
		_, id := newest(s.Sent)
		o := get(s.Token, s.Identity, s.Newer, id, s.Sent, s.Done)
		if !s.logged {
			o.Attempts++ // an attempt the worker did not live to log
		}
		o.Accepted++
		if o.UnfencedFrom.IsZero() {
			o.UnfencedFrom, o.UnfencedTo = s.Sent, s.Done
		}
		o.UnfencedFrom, o.UnfencedTo = minTime(o.UnfencedFrom, s.Sent), maxTime(o.UnfencedTo, s.Done)
		o.From, o.To = minTime(o.From, s.Sent), maxTime(o.To, s.Done)
	}
	for _, o := range byPair {
		o.Fault = rep.faultBefore(o.From)
		o.Expected, o.Why = rep.excused(o.Fault, o.Older, o.OlderIdentity, o.From)
		rep.Overlaps = append(rep.Overlaps, *o)
		if !o.Expected {
			rep.violate(o.From, "the term of %s with token %d worked for %s after the term of %s with token %d began (%d attempts, %d accepted; %s)",
				o.OlderIdentity, o.Older, ms(o.Duration()), o.NewerIdentity, o.Newer, o.Attempts, o.Accepted, o.Why)
		}
	}
	slices.SortFunc(rep.Overlaps, func(a, b Overlap) int {
		return cmp.Or(cmp.Compare(b.Duration(), a.Duration()), a.From.Compare(b.From))
	})
}

// findStale classifies every accepted write of an older term (see Check).
func (rep *Report) findStale(workers []Worker, acc map[writeKey]accepted, newest func(time.Time) (int64, string)) {
	for k, a := range acc {
		tok, _ := newest(a.sent)
		if tok <= k.token {
			continue
		}
		w := workers[a.worker]
		s := StaleWrite{Identity: w.Identity, PID: w.PID, Token: k.token, Seq: k.seq, Newer: tok,
			Sent: a.sent, Done: a.done, Acknowledged: a.ack, Fault: rep.faultBefore(a.sent), logged: a.logged}
		s.Expected, s.Why = rep.excused(s.Fault, s.Token, s.Identity, s.Sent)
		rep.Stale = append(rep.Stale, s)
		if !s.Expected {
			rep.violate(s.Sent, "stale write accepted: %v write %d sent after the term with token %d began (%s)", w, k.seq, tok, s.Why)
		}
	}
	slices.SortFunc(rep.Stale, func(a, b StaleWrite) int { return a.Sent.Compare(b.Sent) })
}

// excused tells whether work of the term with token, of identity, at t, after a newer term
// began, falls in a window that the design names as a limit, given the fault before it.
func (rep *Report) excused(fault int, token int64, identity string, t time.Time) (bool, string) {
	if fault < 0 {
		return false, "before any fault"
	}
	f := rep.run.Faults[fault]
	late := t.After(f.Heal.Add(rep.run.Lease))
	switch {
	case f.Kind == Restart && (f.Token == 0 || token <= f.Token) && !late:
		return true, fmt.Sprintf("after #%d restart without data", f.Seq)
	case f.Kind == SigStop && identity == f.Target && !late:
		return true, fmt.Sprintf("by the leader frozen by #%d sigstop", f.Seq)
	case late:
		return false, fmt.Sprintf("%v after the end of %v", t.Sub(f.Heal).Round(time.Millisecond), f)
	default:
		return false, fmt.Sprintf("after %v", f)
	}
}

// measureGaps finds, for each fault, the longest time without an accepted write.
func (rep *Report) measureGaps(acc map[writeKey]accepted) {
	times := make([]time.Time, 0, len(acc))
	for _, a := range acc {
		times = append(times, a.sent)
	}
	slices.SortFunc(times, time.Time.Compare)
	faults := rep.run.Faults
	for i, f := range faults {
		from := f.Start
		if !f.Kind.redisReachableDuring() {
			from = f.Heal
		}
		to := rep.run.End
		if i+1 < len(faults) {
			to = faults[i+1].Start
		}
		g := Gap{Fault: i, From: from, To: from}
		if to.Before(from) {
			rep.Gaps[i] = g
			continue
		}
		prev := from
		j := sort.Search(len(times), func(j int) bool { return !times[j].Before(from) })
		for ; j < len(times) && !times[j].After(to); j++ {
			if times[j].Sub(prev) > g.Duration() {
				g.From, g.To = prev, times[j]
			}
			prev = times[j]
		}
		if to.Sub(prev) > g.Duration() {
			g.From, g.To = prev, to
		}
		rep.Gaps[i] = g
		if g.Duration() > rep.run.Bound {
			rep.violate(g.To, "no worker had a write accepted for %v after %v (bound %v)", g.Duration().Round(time.Millisecond), f, rep.run.Bound)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
