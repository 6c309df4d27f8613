package chaos

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is the checker of TestScheduleChaos (schedule_test.go): what the job of each slot
// recorded (schedjob's lines), what Redis's history says (elector status -o json) and what the
// test did (its faults and the times a leader could act again) in; the figures of issue 45's
// closing note out.

// JobRecord is one line of schedjob's log.
type JobRecord struct {
	What    string // start, end, overlap
	Slot    time.Time
	Attempt int
	Token   int64
	PID     int
	At      time.Time
}

// ParseJobLog reads schedjob's log.
func ParseJobLog(path string) ([]JobRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []JobRecord
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fs := strings.Fields(sc.Text())
		if len(fs) != 6 {
			return nil, fmt.Errorf("%s:%d: %q: want 6 fields", path, n, sc.Text())
		}
		slot, err := time.Parse(time.RFC3339, fs[1])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: slot: %v", path, n, err)
		}
		attempt, err1 := strconv.Atoi(fs[2])
		token, err2 := strconv.ParseInt(fs[3], 10, 64)
		pid, err3 := strconv.Atoi(fs[4])
		ns, err4 := strconv.ParseInt(fs[5], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			return nil, fmt.Errorf("%s:%d: %q: bad number", path, n, sc.Text())
		}
		out = append(out, JobRecord{What: fs[0], Slot: slot.UTC(), Attempt: attempt, Token: token, PID: pid, At: time.Unix(0, ns)})
	}
	return out, sc.Err()
}

// StatusRun and StatusMissed are the runs and missed ranges of `elector status -o json`.
type StatusRun struct {
	Slot    time.Time `json:"slot"`
	Holder  string    `json:"holder"`
	Token   int64     `json:"token"`
	Attempt int       `json:"attempt"`
	Result  string    `json:"result"`
}

type StatusMissed struct {
	First  time.Time `json:"first"`
	Last   time.Time `json:"last"`
	Count  int       `json:"count"`
	Reason string    `json:"reason"`
}

// ScheduleStatus is the schedule part of `elector status -o json`.
type ScheduleStatus struct {
	Spec       string         `json:"spec"`
	Runs       []StatusRun    `json:"runs"`
	RunsKept   int            `json:"runsKept"`
	Missed     []StatusMissed `json:"missed"`
	MissedKept int            `json:"missedKept"`
}

// Outage is a time the test made every slot impossible: every replica down, or Redis down.
// From is when it began, Until when the test ended it (replicas started, Redis back) and
// Recovered when the test first saw a live replica hold the lease again.
type Outage struct {
	Kind                   string
	From, Until, Recovered time.Time
}

// ClockStep is a step of Redis's clock: from At on, Redis's clock reads the wall clock plus
// Offset (libfaketime).
type ClockStep struct {
	At     time.Time
	Offset time.Duration
}

// FaultWindow is a fault and the time until a leader worked again, for the delay figures:
// a slot in one is not "on time" by construction.
type FaultWindow struct {
	Kind       string
	From, Till time.Time
}

// SchedRun is what TestScheduleChaos collects for the checker.
type SchedRun struct {
	Period, Deadline time.Duration
	// First and Last are the first and the last slot the check covers.
	First, Last time.Time
	Jobs        []JobRecord
	Status      ScheduleStatus
	// Metrics is the sum over the replicas' processes of elector_schedule_missed_slots_total
	// at their last scrape (best effort: a process killed with SIGKILL loses what it counted
	// after its last scrape); -1 when not scraped.
	Metrics  float64
	Outages  []Outage
	Steps    []ClockStep
	Faults   []FaultWindow
	Floor    []time.Duration // /bin/true: fork, exec, wait
	JobFloor []time.Duration // schedjob -floor: parent's clock before exec to the child's main
}

// SchedReport is the outcome of CheckSchedule.
type SchedReport struct {
	Slots int
	// Concurrent counts the slots that had two runs at once (from the runs' intervals and
	// the flock); AnyOverlap counts runs that found the lock held (two runs of any slots at
	// once).
	Concurrent, AnyOverlap int
	Done                   int
	DoneTwice              []time.Time // done twice, one after the other (at least once)
	// Impossible are the slots the test made impossible; Missed the slots reported missed;
	// MissedCount their count by the ranges' counts; Lost the slots neither done nor made
	// impossible (whether reported missed or not); Unrecorded slots neither done nor missed.
	Impossible, Missed, Lost, Unrecorded []time.Time
	MissedCount                          int
	MissedByReason                       map[string]int
	ImpossibleButDone                    []time.Time
	Ambiguous                            []time.Time // within 250ms of the oracle's edge
	Early                                []string    // runs that started before their slot by Redis's clock
	Runs, Retries                        int         // starts in the job log; of them attempt > 1
	Results                              map[string]int
	OnTime, All                          []time.Duration // slot to CMD's start (Redis's clock)
	Problems                             []string
}

// Failed reports whether a promise was broken.
func (r *SchedReport) Failed() bool {
	return r.Concurrent > 0 || r.AnyOverlap > 0 || len(r.Lost) > 0 || len(r.Unrecorded) > 0 ||
		len(r.Early) > 0 || len(r.Problems) > 0 || r.MissedCount != len(r.Impossible)
}

// offsetAt is Redis's clock minus the wall clock at t.
func (run *SchedRun) offsetAt(t time.Time) time.Duration {
	var o time.Duration
	for _, s := range run.Steps {
		if !s.At.After(t) {
			o = s.Offset
		}
	}
	return o
}

// CheckSchedule computes the figures of a run.
func CheckSchedule(run SchedRun) *SchedReport {
	rep := &SchedReport{MissedByReason: map[string]int{}, Results: map[string]int{}}
	var slots []time.Time
	for s := run.First; !s.After(run.Last); s = s.Add(run.Period) {
		slots = append(slots, s)
	}
	rep.Slots = len(slots)
	inRange := func(s time.Time) bool { return !s.Before(run.First) && !s.After(run.Last) }

	// Runs from the job log: intervals by pid; overlaps.
	type iv struct {
		slot       time.Time
		attempt    int
		start, end time.Time
	}
	byPID := map[int]*iv{}
	var ivs []*iv
	for _, j := range run.Jobs {
		switch j.What {
		case "overlap":
			rep.AnyOverlap++
			rep.Problems = append(rep.Problems, fmt.Sprintf("run of slot %s (attempt %d, token %d, pid %d) found another run holding the lock",
				j.Slot.Format(time.RFC3339), j.Attempt, j.Token, j.PID))
		case "start":
			v := &iv{slot: j.Slot, attempt: j.Attempt, start: j.At}
			byPID[j.PID] = v
			ivs = append(ivs, v)
			rep.Runs++
			if j.Attempt > 1 {
				rep.Retries++
			}
			redisStart := j.At.Add(run.offsetAt(j.At))
			d := redisStart.Sub(j.Slot)
			if d < -10*time.Millisecond {
				rep.Early = append(rep.Early, fmt.Sprintf("slot %s attempt %d started %v before it (Redis's clock)", j.Slot.Format(time.RFC3339), j.Attempt, -d))
			}
			if inRange(j.Slot) {
				rep.All = append(rep.All, d)
				if j.Attempt == 1 && !run.disturbed(j.Slot) {
					rep.OnTime = append(rep.OnTime, d)
				}
			}
		case "end":
			if v := byPID[j.PID]; v != nil {
				v.end = j.At
			}
		}
	}
	concurrent := map[time.Time]bool{}
	for i, a := range ivs {
		for _, b := range ivs[i+1:] {
			if a.end.IsZero() || b.end.IsZero() {
				continue // killed mid-run: the flock speaks for it
			}
			if a.start.Before(b.end) && b.start.Before(a.end) {
				rep.AnyOverlap++
				if a.slot.Equal(b.slot) {
					concurrent[a.slot] = true
				}
				rep.Problems = append(rep.Problems, fmt.Sprintf("runs of slots %s and %s overlap in time", a.slot.Format(time.RFC3339), b.slot.Format(time.RFC3339)))
			}
		}
	}
	for _, j := range run.Jobs {
		if j.What == "overlap" {
			concurrent[j.Slot] = true // conservative: the holder may have run another slot
		}
	}
	rep.Concurrent = len(concurrent)

	// Redis's history.
	done := map[time.Time]int{}
	for _, r := range run.Status.Runs {
		rep.Results[r.Result]++
		if r.Result == "done" {
			done[r.Slot.UTC()]++
		}
	}
	missed := map[time.Time]bool{}
	for _, m := range run.Status.Missed {
		n := 0
		for s := m.First.UTC(); !s.After(m.Last.UTC()); s = s.Add(run.Period) {
			n++
			if inRange(s) {
				missed[s] = true
			}
		}
		if n != m.Count {
			rep.Problems = append(rep.Problems, fmt.Sprintf("missed range %s..%s says %d slots, spans %d", m.First.Format(time.RFC3339), m.Last.Format(time.RFC3339), m.Count, n))
		}
		if inRange(m.First) || inRange(m.Last) {
			rep.MissedCount += m.Count
			rep.MissedByReason[m.Reason] += m.Count
		}
	}
	if run.Status.RunsKept != len(run.Status.Runs) || run.Status.MissedKept != len(run.Status.Missed) {
		rep.Problems = append(rep.Problems, "elector status -o json did not list every run and missed range it keeps")
	}

	// The oracle: a slot of an outage whose starting deadline passed before a live replica
	// held the lease again.
	impossible := map[time.Time]bool{}
	for _, o := range run.Outages {
		for _, s := range slots {
			if s.Before(o.From) || s.After(o.Until) {
				continue
			}
			edge := s.Add(run.Deadline).Sub(o.Recovered)
			if edge < 0 {
				impossible[s] = true
			}
			if edge > -250*time.Millisecond && edge < 250*time.Millisecond {
				rep.Ambiguous = append(rep.Ambiguous, s)
			}
		}
	}
	for _, s := range slots {
		switch {
		case done[s] > 1:
			rep.DoneTwice = append(rep.DoneTwice, s)
		}
		if done[s] > 0 {
			rep.Done++
		}
		if impossible[s] {
			rep.Impossible = append(rep.Impossible, s)
			if done[s] > 0 {
				rep.ImpossibleButDone = append(rep.ImpossibleButDone, s)
			}
		}
		if missed[s] {
			rep.Missed = append(rep.Missed, s)
		}
		if done[s] == 0 && !impossible[s] {
			rep.Lost = append(rep.Lost, s)
		}
		if done[s] == 0 && !missed[s] {
			rep.Unrecorded = append(rep.Unrecorded, s)
		}
		if done[s] > 0 && missed[s] {
			rep.Problems = append(rep.Problems, fmt.Sprintf("slot %s both done and recorded missed", s.Format(time.RFC3339)))
		}
	}
	if !slices.EqualFunc(rep.Missed, rep.Impossible, time.Time.Equal) {
		rep.Problems = append(rep.Problems, fmt.Sprintf("slots reported missed %v differ from the slots made impossible %v", fmtSlots(rep.Missed), fmtSlots(rep.Impossible)))
	}
	return rep
}

// disturbed reports whether slot s came during a fault, before a leader worked again, or in
// the period after (behind the rerun of the slot the fault cut).
func (run *SchedRun) disturbed(s time.Time) bool {
	for _, f := range run.Faults {
		if !s.Before(f.From.Add(-run.Period)) && !s.After(f.Till.Add(run.Period)) {
			return true
		}
	}
	return false
}

func fmtSlots(ts []time.Time) string {
	var b strings.Builder
	b.WriteString("[")
	for i, t := range ts {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(t.UTC().Format("15:04:05"))
	}
	b.WriteString("]")
	return b.String()
}

// durPct returns the p-th percentile of ds (100: the maximum), "-" when empty.
func durPct(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*p)/100)
	return s[i].Round(10 * time.Microsecond).String()
}

// Summary is the report in the words of issue 45's closing note.
func (r *SchedReport) Summary(run SchedRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "slots %d (%s to %s, every %v, starting deadline %v)\n", r.Slots,
		run.First.UTC().Format(time.RFC3339), run.Last.UTC().Format(time.RFC3339), run.Period, run.Deadline)
	fmt.Fprintf(&b, "slots run concurrently twice: %d; runs that found another run at once (flock): %d\n", r.Concurrent, r.AnyOverlap)
	fmt.Fprintf(&b, "slots done: %d; done twice one after the other (at least once): %d\n", r.Done, len(r.DoneTwice))
	fmt.Fprintf(&b, "slots lost that the policy should have run: %d %s; neither done nor recorded missed: %d %s\n",
		len(r.Lost), fmtSlots(r.Lost), len(r.Unrecorded), fmtSlots(r.Unrecorded))
	metrics := "not scraped"
	if run.Metrics >= 0 {
		metrics = fmt.Sprintf("%.0f", run.Metrics)
	}
	fmt.Fprintf(&b, "slots reported missed: %d (elector status -o json; by reason %v; metrics elector_schedule_missed_slots_total summed over the processes: %s) = slots the test made impossible: %d %s; ambiguous (within 250ms of the deadline's edge): %d\n",
		r.MissedCount, r.MissedByReason, metrics, len(r.Impossible), fmtSlots(r.Impossible), len(r.Ambiguous))
	if len(r.ImpossibleButDone) > 0 {
		fmt.Fprintf(&b, "made impossible by the oracle but done: %s\n", fmtSlots(r.ImpossibleButDone))
	}
	fmt.Fprintf(&b, "runs started: %d (%d later attempts); results in Redis's history: %v\n", r.Runs, r.Retries, r.Results)
	fmt.Fprintf(&b, "delay slot → CMD's start (Redis's clock), attempt 1 outside faults (%d runs): p50 %s p99 %s max %s; all runs (%d): p50 %s p99 %s max %s\n",
		len(r.OnTime), durPct(r.OnTime, 50), durPct(r.OnTime, 99), durPct(r.OnTime, 100), len(r.All), durPct(r.All, 50), durPct(r.All, 99), durPct(r.All, 100))
	fmt.Fprintf(&b, "exec floor, interleaved: /bin/true fork+exec+wait (%d): p50 %s p99 %s; schedjob exec to main (%d): p50 %s p99 %s\n",
		len(run.Floor), durPct(run.Floor, 50), durPct(run.Floor, 99), len(run.JobFloor), durPct(run.JobFloor, 50), durPct(run.JobFloor, 99))
	for _, e := range r.Early {
		fmt.Fprintf(&b, "EARLY: %s\n", e)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "PROBLEM: %s\n", p)
	}
	return b.String()
}
