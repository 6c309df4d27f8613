package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/schedule"
)

// textRuns is how many of the last runs and missed ranges the text shows; JSON and YAML show
// every one the history keeps.
const textRuns = 5

// scheduleStatus is the schedule of elector run --schedule on the lease, as its state in Redis
// holds it (PREFIX:{NAME}:schedule and :runs); docs/CLI.md documents its JSON form.
type scheduleStatus struct {
	// Spec and TimeZone are the schedule as the last term that wrote the state kept them;
	// "unknown" when the state is older than that.
	Spec     string `json:"spec"`
	TimeZone string `json:"timeZone"`
	// Next is the next slot to run (before now: due), absent when the spec is unknown.
	Next *time.Time `json:"next,omitempty"`
	// Cursor is the last decided slot: every slot at or before it ran, runs or was missed.
	Cursor *time.Time `json:"cursor,omitempty"`
	// Current is the run that goes on, if any.
	Current *scheduleRun `json:"current,omitempty"`
	// Runs are the last ended runs, newest first (textRuns of them in text); RunsKept is how
	// many the history holds.
	Runs     []scheduleRun `json:"runs"`
	RunsKept int           `json:"runsKept"`
	// Missed are the last ranges of missed slots, newest first (textRuns of them in text);
	// MissedKept is how many the history holds.
	Missed     []scheduleMissed `json:"missed"`
	MissedKept int              `json:"missedKept"`
}

// scheduleRun is one run of a slot.
type scheduleRun struct {
	Slot time.Time `json:"slot"`
	// Holder and Token are the identity and the fencing token of the term that ran it.
	Holder  string `json:"holder"`
	Token   int64  `json:"token"`
	Attempt int    `json:"attempt"`
	// Result is running, done, failed, lost, cancelled or missed.
	Result   string    `json:"result"`
	ExitCode int       `json:"exitCode"`
	Started  time.Time `json:"started"`
	// DurationMs is from its start to its end by Redis's clock, absent while it runs.
	DurationMs *int64 `json:"durationMs,omitempty"`
}

// scheduleMissed is a range of slots decided without a run.
type scheduleMissed struct {
	First  time.Time `json:"first"`
	Last   time.Time `json:"last"`
	Count  int       `json:"count"`
	Reason string    `json:"reason"`
}

// readScheduleStatus reads the schedule state of the lease (nil when it has none), with the
// last runs of its history: textRuns of them in text, all in json and yaml.
func readScheduleStatus(ctx context.Context, co *commonOptions, client redis.UniversalClient, output string) (*scheduleStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, co.lease.callTimeout())
	defer cancel()
	st, found, err := schedule.ReadStatus(ctx, client, co.lease.prefix, co.lease.name)
	if err != nil {
		return nil, readError(fmt.Sprintf("cannot read the schedule of lease %q", co.lease.name), co, err)
	}
	if !found {
		return nil, nil
	}
	n := 0
	if output == "text" {
		n = textRuns
	}
	return newScheduleStatus(st, n), nil
}

// newScheduleStatus converts what schedule.ReadStatus found, with at most n runs and missed
// ranges (0: all).
func newScheduleStatus(st schedule.Status, n int) *scheduleStatus {
	out := &scheduleStatus{Spec: st.Spec, TimeZone: st.Zone, RunsKept: len(st.Runs), MissedKept: len(st.Missed),
		Runs: []scheduleRun{}, Missed: []scheduleMissed{}}
	if out.Spec == "" {
		out.Spec, out.TimeZone = "unknown", "unknown"
	}
	if !st.Next.IsZero() {
		out.Next = &st.Next
	}
	if !st.Decided.IsZero() {
		out.Cursor = &st.Decided
	}
	if r := st.Current; r != nil && r.Result == "running" {
		cur := newScheduleRun(*r)
		out.Current = &cur
	}
	for i, r := range st.Runs {
		if n > 0 && i >= n {
			break
		}
		out.Runs = append(out.Runs, newScheduleRun(r))
	}
	for i, m := range st.Missed {
		if n > 0 && i >= n {
			break
		}
		out.Missed = append(out.Missed, scheduleMissed{First: m.First, Last: m.Last, Count: m.Count, Reason: m.Reason})
	}
	return out
}

func newScheduleRun(r schedule.Run) scheduleRun {
	out := scheduleRun{Slot: r.Slot, Holder: r.Holder, Token: r.Token, Attempt: r.Attempt, Result: r.Result,
		ExitCode: r.ExitCode, Started: r.Started}
	if rec, err := leasekit.ParseRecord(r.Holder); err == nil {
		out.Holder = rec.Identity
	}
	if !r.Ended.IsZero() {
		d := r.Ended.Sub(r.Started).Milliseconds()
		out.DurationMs = &d
	}
	return out
}

// printSchedule writes the text form of the schedule part of elector status, after the lease's
// (labels in the same column), times in the schedule's zone.
func printSchedule(w io.Writer, s *scheduleStatus) error {
	if s == nil {
		return nil
	}
	loc := time.UTC
	if l, err := time.LoadLocation(s.TimeZone); err == nil && s.TimeZone != "unknown" {
		loc = l
	}
	at := func(t time.Time) string { return t.In(loc).Format(time.RFC3339) }
	now := time.Now()
	fmt.Fprintf(w, "%-14s%s (time zone %s)\n", "schedule:", s.Spec, s.TimeZone)
	switch {
	case s.Next != nil && s.Next.After(now):
		in := s.Next.Sub(now).Round(time.Second)
		if in < time.Second {
			in = s.Next.Sub(now).Round(time.Millisecond)
		}
		fmt.Fprintf(w, "%-14s%s (in %v)\n", "next slot:", at(*s.Next), in)
	case s.Next != nil:
		fmt.Fprintf(w, "%-14s%s (due)\n", "next slot:", at(*s.Next))
	default:
		fmt.Fprintf(w, "%-14sunknown (the state names no spec: written before elector kept it)\n", "next slot:")
	}
	if s.Cursor != nil {
		fmt.Fprintf(w, "%-14s%s (every slot up to it is decided)\n", "cursor:", at(*s.Cursor))
	}
	if r := s.Current; r != nil {
		fmt.Fprintf(w, "%-14sslot %s, attempt %d, by %s (token %d), for %v\n", "running:", at(r.Slot), r.Attempt, r.Holder, r.Token,
			now.Sub(r.Started).Round(time.Millisecond))
	}
	fmt.Fprintf(w, "%-14s%d of %d kept%s\n", "runs:", len(s.Runs), s.RunsKept, more(len(s.Runs), s.RunsKept))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(s.Runs) > 0 {
		fmt.Fprintf(tw, "  SLOT\tBY\tTOKEN\tATTEMPT\tRESULT\tEXIT\tDURATION\n")
		for _, r := range s.Runs {
			d := "-"
			if r.DurationMs != nil {
				d = (time.Duration(*r.DurationMs) * time.Millisecond).String()
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%d\t%s\n", at(r.Slot), r.Holder, r.Token, r.Attempt, r.Result, r.ExitCode, d)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%-14s%d of %d kept%s\n", "missed:", len(s.Missed), s.MissedKept, more(len(s.Missed), s.MissedKept))
	if len(s.Missed) > 0 {
		fmt.Fprintf(tw, "  FIRST\tLAST\tCOUNT\tREASON\n")
		for _, m := range s.Missed {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", at(m.First), at(m.Last), m.Count, m.Reason)
		}
	}
	return tw.Flush()
}

// more says where the entries the text leaves out are.
func more(shown, kept int) string {
	if shown < kept {
		return " (-o json lists them all)"
	}
	return ""
}
