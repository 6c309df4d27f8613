package chaos

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// KindStats are the figures of one kind of fault.
type KindStats struct {
	Kind  Kind
	Count int
	// Leaderless is the longest gap without an accepted write after a fault of this kind (see
	// Gap); LeaderlessFault the index of that fault, -1 when there was none.
	Leaderless      time.Duration
	LeaderlessFault int
	// Overlaps counts the overlaps this kind of fault caused; Overlap and Unfenced are the
	// longest of them and the longest span of accepted stale writes among them.
	Overlaps          int
	Overlap, Unfenced time.Duration
	StaleAccepted     int
}

// ByKind returns the figures per kind of fault, in the order of Kinds.
func (rep *Report) ByKind() []KindStats {
	stats := map[Kind]*KindStats{}
	var out []KindStats
	for _, k := range Kinds() {
		stats[k] = &KindStats{Kind: k, LeaderlessFault: -1}
	}
	for i, f := range rep.run.Faults {
		s := stats[f.Kind]
		if s == nil {
			continue
		}
		s.Count++
		if g := rep.Gaps[i]; s.LeaderlessFault < 0 || g.Duration() > s.Leaderless {
			s.Leaderless, s.LeaderlessFault = g.Duration(), i
		}
	}
	for _, o := range rep.Overlaps {
		if o.Fault < 0 {
			continue
		}
		s := stats[rep.run.Faults[o.Fault].Kind]
		s.Overlaps++
		s.Overlap = max(s.Overlap, o.Duration())
		s.Unfenced = max(s.Unfenced, o.Unfenced())
	}
	for _, w := range rep.Stale {
		if w.Fault >= 0 {
			stats[rep.run.Faults[w.Fault].Kind].StaleAccepted++
		}
	}
	for _, k := range Kinds() {
		out = append(out, *stats[k])
	}
	return out
}

// StaleCounts returns how many stale writes were accepted in the window after a restart of
// Redis without data, by a frozen leader after SIGSTOP, and elsewhere (violations).
func (rep *Report) StaleCounts() (dataLoss, frozen, unexpected int) {
	for _, s := range rep.Stale {
		switch {
		case !s.Expected:
			unexpected++
		case rep.run.Faults[s.Fault].Kind == Restart:
			dataLoss++
		default:
			frozen++
		}
	}
	return dataLoss, frozen, unexpected
}

// Failed reports whether any rule was broken.
func (rep *Report) Failed() bool { return len(rep.Violations) > 0 }

// at formats t relative to the start of the run.
func (rep *Report) at(t time.Time) string {
	if rep.run.Start.IsZero() {
		return t.Format("15:04:05.000000")
	}
	return fmt.Sprintf("%+.6fs", t.Sub(rep.run.Start).Seconds())
}

// faultName returns "#N kind" for fault index i, "-" for -1.
func (rep *Report) faultName(i int) string {
	if i < 0 {
		return "-"
	}
	f := rep.run.Faults[i]
	return fmt.Sprintf("#%d %s", f.Seq, f.Kind)
}

func ms(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return d.Round(100 * time.Microsecond).String()
}

// Summary returns the figures of the run as a text table.
func (rep *Report) Summary() string {
	var b strings.Builder
	r := rep.run
	fmt.Fprintf(&b, "chaos run: seed %d, %v of faults, lease %v, bound on the time without a worker %v\n",
		r.Seed, r.End.Sub(r.Start).Round(time.Second), r.Lease, r.Bound)
	yes := map[bool]string{true: "yes", false: "NO"}
	fmt.Fprintf(&b, "faults injected: %d; terms: %d; tokens strictly increasing: %s\n", len(r.Faults), len(rep.Terms), yes[rep.TokensIncreasing])
	fmt.Fprintf(&b, "write attempts: %d; accepted %d (%d unacknowledged, %d erased by a restart before they were read); rejected as stale %d; errors %d\n",
		rep.Attempts, rep.Accepted, rep.Unacknowledged, rep.LostWithData, rep.Rejected, rep.Errors)
	dl, fr, bad := rep.StaleCounts()
	fmt.Fprintf(&b, "stale writes accepted: %d outside the documented windows (must be 0); %d after a restart without data; %d by a frozen leader\n", bad, dl, fr)
	var longest, unfenced *Overlap
	for i := range rep.Overlaps {
		o := &rep.Overlaps[i]
		if longest == nil || o.Duration() > longest.Duration() {
			longest = o
		}
		if o.Accepted > 0 && (unfenced == nil || o.Unfenced() > unfenced.Unfenced()) {
			unfenced = o
		}
	}
	if longest == nil {
		b.WriteString("overlapping work of two terms: none\n")
	} else {
		var dl, fr, other int
		for _, o := range rep.Overlaps {
			switch {
			case !o.Expected:
				other++
			case rep.run.Faults[o.Fault].Kind == Restart:
				dl++
			default:
				fr++
			}
		}
		fmt.Fprintf(&b, "overlapping work of two terms: %d outside the documented windows (must be 0); %d after a restart without data; %d by a frozen leader\n", other, dl, fr)
		fmt.Fprintf(&b, "longest overlap: %s (token %d of %s went on after token %d of %s began; %d attempts, %d accepted), caused by %s\n",
			ms(longest.Duration()), longest.Older, longest.OlderIdentity, longest.Newer, longest.NewerIdentity,
			longest.Attempts, longest.Accepted, rep.faultName(longest.Fault))
	}
	if unfenced == nil {
		b.WriteString("longest unfenced overlap: none (the fence refused every write of an older term)\n")
	} else {
		fmt.Fprintf(&b, "longest unfenced overlap: %s (%d writes of token %d accepted after token %d began), caused by %s\n",
			ms(unfenced.Unfenced()), unfenced.Accepted, unfenced.Older, unfenced.Newer, rep.faultName(unfenced.Fault))
	}
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\tcount\tlongest leaderless\tat\toverlaps\tlongest overlap\tlongest unfenced\tstale accepted\t")
	for _, s := range rep.ByKind() {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\t%d\t\n", s.Kind, s.Count, ms(s.Leaderless), rep.faultName(s.LeaderlessFault),
			s.Overlaps, ms(s.Overlap), ms(s.Unfenced), s.StaleAccepted)
	}
	_ = tw.Flush()
	var longestStall Stall
	for _, st := range r.Stalls {
		if st.To.Sub(st.From) > longestStall.To.Sub(longestStall.From) {
			longestStall = st
		}
	}
	if len(r.Stalls) == 0 {
		b.WriteString("stalls of the test process: none\n")
	} else {
		fmt.Fprintf(&b, "stalls of the test process (machine overloaded): %d; longest %s at %s\n",
			len(r.Stalls), ms(longestStall.To.Sub(longestStall.From)), rep.at(longestStall.From))
	}
	fmt.Fprintf(&b, "violations: %d\n", len(rep.Violations))
	return b.String()
}

// Failure describes every violation (at most maxShown, each with the timeline around it) and
// the seed that reproduces the run.
func (rep *Report) Failure() string {
	const maxShown = 5
	var b strings.Builder
	fmt.Fprintf(&b, "%d violations (seed %d; set ELECTOR_CHAOS_SEED=%d to replay the same schedule of faults):\n",
		len(rep.Violations), rep.run.Seed, rep.run.Seed)
	for i, v := range rep.Violations {
		if i == maxShown {
			fmt.Fprintf(&b, "... and %d more:\n", len(rep.Violations)-maxShown)
		}
		if i >= maxShown {
			fmt.Fprintf(&b, "  %s %s\n", rep.at(v.Time), v.Msg)
			continue
		}
		fmt.Fprintf(&b, "\nVIOLATION at %s: %s\ntimeline from %s to %s:\n", rep.at(v.Time), v.Msg,
			rep.at(v.Time.Add(-timelineSpan)), rep.at(v.Time.Add(timelineSpan)))
		b.WriteString(rep.Timeline(v.Time.Add(-timelineSpan), v.Time.Add(timelineSpan)))
	}
	fmt.Fprintf(&b, "\nseed %d\n", rep.run.Seed)
	return b.String()
}

// timelineSpan is how much of the timeline Failure shows on each side of a violation.
const timelineSpan = 3 * time.Second

// maxTimelineLines bounds one printed timeline.
const maxTimelineLines = 150

// Timeline returns the events between from and to, one per line (at most 150): faults, the
// context events of the run, the starts, changes of outcome and exits of workers, stale writes
// and violations.
func (rep *Report) Timeline(from, to time.Time) string {
	var b strings.Builder
	evs := rep.timeline(from, to)
	for i, e := range evs {
		if i == maxTimelineLines {
			fmt.Fprintf(&b, "  ... %d more lines\n", len(evs)-i)
			break
		}
		fmt.Fprintf(&b, "  %s  %s\n", rep.at(e.Time), e.Text)
	}
	return b.String()
}

// WriteTimeline writes the whole timeline of the run to w.
func (rep *Report) WriteTimeline(w io.Writer) error {
	for _, e := range rep.timeline(time.Time{}, time.Unix(1<<62, 0)) {
		if _, err := fmt.Fprintf(w, "%s  %s\n", rep.at(e.Time), e.Text); err != nil {
			return fmt.Errorf("write timeline: %w", err)
		}
	}
	return nil
}

func (rep *Report) timeline(from, to time.Time) []Event {
	var evs []Event
	add := func(t time.Time, format string, args ...any) {
		if !t.Before(from) && !t.After(to) {
			evs = append(evs, Event{Time: t, Text: fmt.Sprintf(format, args...)})
		}
	}
	for _, f := range rep.run.Faults {
		add(f.Start, "FAULT %v", f)
		if f.Heal.After(f.Start) {
			add(f.Heal, "fault #%d %s ends", f.Seq, f.Kind)
		}
	}
	for _, e := range rep.run.Events {
		add(e.Time, "%s", e.Text)
	}
	for _, st := range rep.run.Stalls {
		add(st.From, "the test process stalls for %s (machine overloaded)", ms(st.To.Sub(st.From)))
	}
	for _, w := range rep.run.Workers {
		add(w.Start, "%v starts", w)
		var last Result
		for i, wr := range w.Writes {
			if wr.Result != last || i == len(w.Writes)-1 {
				what := "writes: " + string(wr.Result)
				if wr.Reason != "" {
					what += " (" + wr.Reason + ")"
				}
				if i == len(w.Writes)-1 {
					what = "last write: " + strings.TrimPrefix(what, "writes: ")
				}
				add(wr.Sent, "%v %s, write %d done after %v", w, what, wr.Seq, ms(wr.Done.Sub(wr.Sent)))
				last = wr.Result
			}
		}
		if !w.Exit.IsZero() {
			add(w.Exit, "%v exits on its signal", w)
		}
	}
	for _, s := range rep.Stale {
		add(s.Sent, "stale write accepted: token %d of %s (process %d) write %d, token %d had started: %s", s.Token, s.Identity, s.PID, s.Seq, s.Newer, s.Why)
	}
	for _, v := range rep.Violations {
		add(v.Time, "VIOLATION: %s", v.Msg)
	}
	slices.SortStableFunc(evs, func(a, b Event) int { return a.Time.Compare(b.Time) })
	return evs
}
