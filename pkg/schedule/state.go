package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Run is one run of a slot, as Redis records it.
type Run struct {
	// Slot is the slot's scheduled time.
	Slot time.Time
	// Result is running, done, failed, lost (its term ended first), cancelled (by the overlap
	// policy) or missed (a retry found it past its deadline or out of attempts).
	Result string
	// Attempt counts the runs of the slot: 1, then 2 after a failed or lost attempt.
	Attempt int
	// Token is the fencing token of the term that ran it.
	Token int64
	// Started and Ended are by Redis's clock; Ended is zero while it runs.
	Started, Ended time.Time
	// ExitCode is the job's exit code (0 for success, -1 for a lost run).
	ExitCode int
	// Holder is the lease record of the term that ran it: v1:<token>:<instance>:<identity>.
	Holder string
}

// Missed is a range of slots decided without a run, as Redis records it.
type Missed struct {
	// First and Last are the first and the last slot of the range.
	First, Last time.Time
	// Count is how many slots the range holds.
	Count int
	// Reason says why: catch-up, deadline, overlap, attempts, or state lost.
	Reason string
}

// state is the value of the schedule key: the cursor (every slot at or before it is decided)
// and the record of the last slot claimed.
type state struct {
	cursor time.Time
	run    Run // Run.Slot is zero before the first claim
	// spec and zone are the schedule of the term that wrote the state last ("" in a v1 state,
	// written before they were kept).
	spec, zone string
}

// phases of a run record; "none" before the first claim.
const (
	phaseNone      = "none"
	phaseRunning   = "running"
	phaseDone      = "done"
	phaseFailed    = "failed"
	phaseLost      = "lost"
	phaseCancelled = "cancelled"
	phaseMissed    = "missed"
)

func msTime(s string) (time.Time, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a time in milliseconds", s)
	}
	if n == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(n).UTC(), nil
}

func msOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// parseState decodes "v2\n<cursor>\n<slot>\n<phase>\n<attempt>\n<token>\n<started>\n<ended>\n
// <exit>\n<spec>\n<zone>\n<record>", or the same in v1 without <spec> and <zone>.
func parseState(v string) (state, error) {
	f := strings.SplitN(v, "\n", 10)
	if len(f) != 10 || (f[0] != "v1" && f[0] != "v2") {
		return state{}, fmt.Errorf("%q is not a schedule state", v)
	}
	var st state
	if f[0] == "v2" {
		g := strings.SplitN(f[9], "\n", 3)
		if len(g) != 3 {
			return state{}, fmt.Errorf("%q is not a schedule state", v)
		}
		st.spec, st.zone, f[9] = g[0], g[1], g[2]
	}
	var err error
	if st.cursor, err = msTime(f[1]); err != nil {
		return state{}, fmt.Errorf("schedule state cursor: %w", err)
	}
	r := &st.run
	r.Result, r.Holder = f[3], f[9]
	for _, p := range []struct {
		dst *time.Time
		s   string
	}{{&r.Slot, f[2]}, {&r.Started, f[6]}, {&r.Ended, f[7]}} {
		if *p.dst, err = msTime(p.s); err != nil {
			return state{}, fmt.Errorf("schedule state: %w", err)
		}
	}
	if r.Attempt, err = strconv.Atoi(f[4]); err != nil {
		return state{}, fmt.Errorf("schedule state attempt %q is not a number", f[4])
	}
	if f[5] != "" {
		if r.Token, err = strconv.ParseInt(f[5], 10, 64); err != nil {
			return state{}, fmt.Errorf("schedule state token %q is not a number", f[5])
		}
	}
	if r.ExitCode, err = strconv.Atoi(f[8]); err != nil {
		return state{}, fmt.Errorf("schedule state exit code %q is not a number", f[8])
	}
	return st, nil
}

// parseHistory decodes the runs key: lines "run <slot> <result> <attempt> <token> <started>
// <ended> <exit> <record>" and "missed <first> <last> <count> <reason>", newest first. Lines it
// cannot read are skipped: the history is for people, the state is what decides.
func parseHistory(v string) (runs []Run, missed []Missed) {
	if v == "" {
		return nil, nil
	}
	for _, line := range strings.Split(v, "\n") {
		switch kind, rest, _ := strings.Cut(line, " "); kind {
		case "run":
			f := strings.SplitN(rest, " ", 8)
			if len(f) != 8 {
				continue
			}
			r := Run{Result: f[1], Holder: f[7]}
			var err1, err2, err3, err4, err5, err6 error
			r.Slot, err1 = msTime(f[0])
			r.Attempt, err2 = strconv.Atoi(f[2])
			r.Token, err3 = strconv.ParseInt(f[3], 10, 64)
			r.Started, err4 = msTime(f[4])
			r.Ended, err5 = msTime(f[5])
			r.ExitCode, err6 = strconv.Atoi(f[6])
			if err1 == nil && err2 == nil && err3 == nil && err4 == nil && err5 == nil && err6 == nil {
				runs = append(runs, r)
			}
		case "missed":
			f := strings.SplitN(rest, " ", 4)
			if len(f) != 4 {
				continue
			}
			m := Missed{Reason: f[3]}
			var err1, err2, err3 error
			m.First, err1 = msTime(f[0])
			m.Last, err2 = msTime(f[1])
			m.Count, err3 = strconv.Atoi(f[2])
			if err1 == nil && err2 == nil && err3 == nil {
				missed = append(missed, m)
			}
		}
	}
	return runs, missed
}
