package main

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elector/elector/cmd/elector/internal/child"
	"github.com/elector/elector/pkg/election"
)

// elector run's supervisor machine, driven without processes: every event applied to every
// state, each reached by the machine's own transitions.

// machineProc stands for CMD: the machine never calls it, it only hands it back in actions.
var machineProc = new(child.Process)

var errSurvived = fmt.Errorf("the shim was killed: %w", child.ErrSurvivors)

// The events of the table, with what they carry. Terms are 7 (the row's) and 8 (a new one).
var runMachineEvents = []struct {
	name string
	in   runInput
}{
	{"term began", runInput{ev: evTermBegan, token: 8}},
	{"started", runInput{ev: evStarted, proc: machineProc}},
	{"start failed", runInput{ev: evStartFailed, err: errors.New("exec: permission denied")}},
	{"start failed, survivors", runInput{ev: evStartFailed, err: errSurvived}},
	{"exited 0", runInput{ev: evExited}},
	{"exited 3", runInput{ev: evExited, status: child.ExitStatus{Code: 3}}},
	{"exited, survivors", runInput{ev: evExited, status: child.ExitStatus{Err: errSurvived}}},
	{"term lost", runInput{ev: evTermEnded, cause: election.ErrLeadershipLost}},
	{"term resigned", runInput{ev: evTermEnded, cause: election.ErrResigned}},
	{"stopped", runInput{ev: evStopped, status: child.ExitStatus{Code: -1, Signal: syscall.SIGTERM}}},
	{"stopped, survivors", runInput{ev: evStopped, status: child.ExitStatus{Code: -1, Signal: syscall.SIGKILL, Err: errSurvived}}},
	{"SIGTERM", runInput{ev: evSignal, sig: syscall.SIGTERM}},
	{"SIGTERM again", runInput{ev: evSignalAgain, sig: syscall.SIGTERM}},
	{"SIGHUP", runInput{ev: evSignalOther, sig: syscall.SIGHUP}},
	{"give up", runInput{ev: evGiveUp, reason: "not the leader within --timeout 1s"}},
	{"mark holds", runInput{ev: evMarkHolds, wait: time.Hour}},
	{"due", runInput{ev: evDue}},
	{"recheck", runInput{ev: evRecheck}},
	{"run ended", runInput{ev: evRunEnded}},
	{"run ended, lost", runInput{ev: evRunEnded, lost: true}},
	{"slot", runInput{ev: evSlot, slot: time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC), attempt: 2}},
	{"job cancelled", runInput{ev: evJobCancelled, cause: errors.New("the next slot came")}},
}

// input returns the event called name.
func input(name string) runInput {
	for _, e := range runMachineEvents {
		if e.name == name {
			return e.in
		}
	}
	panic("no event " + name)
}

// A row is a state with the flags and what it went through; setup lists the events that
// reach it from a new machine.
type runRow struct {
	name  string
	cfg   string // "", "hold" (--on-success=hold), "once" (--once-per), "once-exit" (with --exit-if-done), "sched" (--schedule)
	state runState
	setup []string
}

var runMachineRows = []runRow{
	{"campaigning", "", runCampaigning, nil},
	{"gave up", "", runGaveUp, []string{"give up"}},
	{"starting", "", runStarting, []string{"term began 7"}},
	{"running", "", runRunning, []string{"term began 7", "started"}},
	{"running, SIGTERM received", "", runRunning, []string{"term began 7", "started", "SIGTERM"}},
	{"running (hold)", "hold", runRunning, []string{"term began 7", "started"}},
	{"running (once)", "once", runRunning, []string{"term began 7", "due", "started"}},
	{"running (once-exit)", "once-exit", runRunning, []string{"term began 7", "due", "started"}},
	{"stopping", "", runStopping, []string{"term began 7", "started", "term lost"}},
	{"stopping, SIGTERM received", "", runStopping, []string{"term began 7", "started", "SIGTERM", "term lost"}},
	{"holding (hold)", "hold", runHolding, []string{"term began 7", "started", "exited 0"}},
	{"holding (once)", "once", runHolding, []string{"term began 7", "mark holds"}},
	{"checking (once)", "once", runChecking, []string{"term began 7"}},
	{"checking (once-exit)", "once-exit", runChecking, []string{"term began 7"}},
	{"following", "", runFollowing, []string{"term began 7", "started", "term lost", "stopped"}},
	{"following, stopped for SIGTERM", "", runFollowing, []string{"term began 7", "started", "SIGTERM", "term lost", "stopped"}},
	{"following (hold, done)", "hold", runFollowing, []string{"term began 7", "started", "exited 0", "term lost"}},
	{"following (once)", "once", runFollowing, []string{"term began 7", "term lost"}},
	{"ended", "", runEnded, []string{"term began 7", "started", "exited 3"}},
	{"withheld", "", runWithheld, []string{"term began 7", "started", "exited, survivors"}},
	{"scheduled (sched)", "sched", runScheduled, []string{"term began 7"}},
	{"scheduled, SIGTERM received (sched)", "sched", runScheduled, []string{"term began 7", "SIGTERM"}},
	{"starting (sched)", "sched", runStarting, []string{"term began 7", "slot"}},
	{"running (sched)", "sched", runRunning, []string{"term began 7", "slot", "started"}},
	{"stopping (sched)", "sched", runStopping, []string{"term began 7", "slot", "started", "job cancelled"}},
	{"following (sched)", "sched", runFollowing, []string{"term began 7", "slot", "started", "exited 0", "term lost"}},
}

// Row groups, to name every pair of the table.
var (
	termRows = []string{"starting", "running", "running, SIGTERM received", "running (hold)", "running (once)", "running (once-exit)",
		"stopping", "stopping, SIGTERM received", "holding (hold)", "holding (once)", "checking (once)", "checking (once-exit)",
		"scheduled (sched)", "scheduled, SIGTERM received (sched)", "starting (sched)", "running (sched)", "stopping (sched)"}
	cmdRows     = []string{"running", "running, SIGTERM received", "running (hold)", "running (once)", "running (once-exit)", "stopping", "stopping, SIGTERM received", "running (sched)", "stopping (sched)"}
	runningRows = cmdRows[:5] // CMD runs and its exit ends or holds the run (not --schedule)
	noTermRows  = []string{"campaigning", "gave up", "following", "following, stopped for SIGTERM", "following (hold, done)", "following (once)", "ended", "withheld", "following (sched)"}
	// --schedule: the term leads between slots, in which the Scheduler's job asks for CMD.
	schedRows = []string{"scheduled (sched)", "scheduled, SIGTERM received (sched)"}
	allRows   = append(append([]string(nil), termRows...), noTermRows...)
)

// Outcomes: "—" the state stays and nothing is done (a possible event that changes nothing
// visible), "✗" the event cannot happen in that state (ignored: step says so, does nothing),
// "actions" in the same state, otherwise "next state: actions".
const (
	same   = "—"
	cannot = "✗"
)

// cells gives outcome to each of rows.
func cells(outcome string, rows ...[]string) map[string]string {
	m := map[string]string{}
	for _, rs := range rows {
		for _, r := range rs {
			m[r] = outcome
		}
	}
	return m
}

// with adds the cells of each of more to m, overriding those before.
func with(m map[string]string, more ...map[string]string) map[string]string {
	for _, mm := range more {
		for r, o := range mm {
			m[r] = o
		}
	}
	return m
}

// one is a group of one row.
func one(r ...string) []string { return r }

// runMachineTable is the transition table: per event, per row, the outcome. Every pair is
// named; why a pair cannot happen is said once per group.
var runMachineTable = map[string]map[string]string{
	// The elector runs one term at a time: OnStartedLeading returns before the next begins.
	"term began": with(cells(cannot, termRows), map[string]string{
		"campaigning": "starting: start(8)", "following": "starting: start(8)", "following, stopped for SIGTERM": "starting: start(8)",
		"following (hold, done)": "holding: hold(done earlier)", "following (once)": "checking: check",
		"following (sched)": "scheduled: schedule(8)",
		"gave up":           same, "ended": same, "withheld": same, // none of them starts CMD
	}),
	// Only a term's start brings these.
	"started": with(cells(cannot, allRows), cells("running: run", one("starting", "starting (sched)"))),
	// Under --schedule a failed start fails the slot's run, not the run.
	"start failed":            with(cells(cannot, allRows), map[string]string{"starting": "ended: end(start failed)", "starting (sched)": "scheduled: prepare finish(start failed)"}),
	"start failed, survivors": with(cells(cannot, allRows), cells("withheld: withhold", one("starting", "starting (sched)"))),
	// A CMD that runs exits; one being stopped comes back as "stopped".
	"exited 0": with(cells(cannot, allRows), map[string]string{
		"running": "ended: end(exited 0)", "running, SIGTERM received": "ended: end(exited 0)",
		"running (hold)": "holding: hold(succeeded)", "running (once)": "holding: markDone waitPeriod",
		"running (once-exit)": "ended: markDone end(done ran)",
		"running (sched)":     "scheduled: prepare finish(0)", // the slot's run is over; the term waits for the next
	}),
	"exited 3":          with(cells(cannot, allRows), cells("ended: end(exited 3)", runningRows), map[string]string{"running (sched)": "scheduled: prepare finish(3)"}),
	"exited, survivors": with(cells(cannot, allRows), cells("withheld: withhold", runningRows), cells("withheld: withhold", one("running (sched)"))),
	// The term's goroutine looks at the term's end while CMD runs or it leads without CMD,
	// not while it starts CMD or waits for the stop; no term runs in the others.
	// Under --schedule the job's goroutine sees the term end while CMD runs (the stop then
	// returns to scheduled, its job returns), the term's once its Scheduler returned.
	"term lost": with(cells(cannot, allRows), cells("stopping: stop(quit, leadership lost)", runningRows), map[string]string{
		"running, SIGTERM received": "stopping: stop(terminated, elector stopping)",
		"holding (hold)":            "following", "holding (once)": "following", "checking (once)": "following", "checking (once-exit)": "following",
		"running (sched)": "stopping: stop(quit, leadership lost)",
	}, cells("following", schedRows)),
	"term resigned": with(cells(cannot, allRows), cells("stopping: stop(quit, resigned)", runningRows), map[string]string{
		"running, SIGTERM received": "stopping: stop(terminated, elector stopping)",
		"holding (hold)":            "following", "holding (once)": "following", "checking (once)": "following", "checking (once-exit)": "following",
		"running (sched)": "stopping: stop(quit, resigned)",
	}, cells("following", schedRows)),
	"stopped": with(cells(cannot, allRows), map[string]string{
		"stopping": "following: prepare", "stopping, SIGTERM received": "following",
		"stopping (sched)": "scheduled: prepare finish(143)",
	}),
	"stopped, survivors": with(cells(cannot, allRows), cells("withheld: withhold", one("stopping", "stopping, SIGTERM received", "stopping (sched)"))),
	// Signals come at any time.
	"SIGTERM":       cells(same, allRows),
	"SIGTERM again": with(cells("ignore(terminated)", allRows), cells("kill", cmdRows)),
	"SIGHUP":        with(cells("ignore(hangup)", allRows), cells("forward(hangup)", cmdRows)),
	"give up":       with(cells(same, allRows), map[string]string{"campaigning": "gave up: end(gave up)"}),
	// --once-per's reads and waits, in a term that checks or holds for the mark.
	"mark holds": with(cells(cannot, allRows), map[string]string{
		"checking (once)": "holding: waitMark", "checking (once-exit)": "ended: end(done seen)",
	}),
	"due":     with(cells(cannot, allRows), cells("starting: start(7)", one("checking (once)", "checking (once-exit)"))),
	"recheck": with(cells(cannot, allRows), map[string]string{"holding (once)": "checking: check"}),
	// Run returns after the term's OnStartedLeading returned.
	"run ended": with(cells(cannot, termRows), cells(same, noTermRows), map[string]string{
		"following, stopped for SIGTERM": "stoppedCode(143)",
	}),
	"run ended, lost": with(cells(cannot, termRows), cells("release(7)", one("following", "following (hold, done)", "following (once)", "following (sched)")), map[string]string{
		"campaigning": same, "gave up": same, "withheld": same, // no term, or its tree may survive: no release
		"following, stopped for SIGTERM": "release(7) stoppedCode(143)",
		"ended":                          "release(7)",
	}),
	// --schedule: a slot comes from the Scheduler of a term that leads without CMD; none
	// starts CMD once the elector was signalled or the run ends (the job then returns when
	// the term ends, and its run is recorded lost for the next leader).
	"slot": with(cells(cannot, allRows), map[string]string{
		"scheduled (sched)": "starting: start(7)", "scheduled, SIGTERM received (sched)": same,
		"gave up": same, "ended": same, "withheld": same,
	}),
	// Only the job's CMD is cancelled alone (--overlap cancel), with --stop-signal.
	"job cancelled": with(cells(cannot, allRows), map[string]string{
		"running (sched)": "stopping: stop(quit, the next slot came (--overlap cancel))",
	}),
}

// newRowMachine returns a machine of row's configuration in row's state.
func newRowMachine(t *testing.T, row runRow) *runMachine {
	t.Helper()
	m := &runMachine{stopSignal: syscall.SIGQUIT}
	switch row.cfg {
	case "hold":
		m.hold = true
	case "once":
		m.once = true
	case "once-exit":
		m.once, m.exitIfDone = true, true
	case "sched":
		m.sched = true
	}
	for _, name := range row.setup {
		in := runInput{ev: evTermBegan, token: 7}
		if name != "term began 7" {
			in = input(name)
		}
		if _, ok := m.step(in); !ok {
			t.Fatalf("setup: %s cannot happen in %v", name, m.state)
		}
	}
	if m.state != row.state {
		t.Fatalf("setup reached %v, want %v", m.state, row.state)
	}
	return m
}

// outcomeOf describes what step did, as the table says it.
func outcomeOf(before runState, m *runMachine, acts []runAction, ok bool) string {
	if !ok {
		return cannot
	}
	if m.state == before && len(acts) == 0 {
		return same
	}
	s := make([]string, len(acts))
	for i, a := range acts {
		s[i] = a.String()
	}
	if m.state == before {
		return strings.Join(s, " ")
	}
	return strings.TrimSuffix(m.state.String()+": "+strings.Join(s, " "), ": ")
}

// TestRunMachineEveryStateAndEvent applies every event to every row and checks the outcome
// against runMachineTable, and the safety rules on each transition. It fails on a pair the
// table does not name, so a new state or event cannot go untested.
func TestRunMachineEveryStateAndEvent(t *testing.T) {
	pairs := 0
	for _, ev := range runMachineEvents {
		want, ok := runMachineTable[ev.name]
		if !ok {
			t.Errorf("event %q is not in runMachineTable", ev.name)
			continue
		}
		if len(want) != len(runMachineRows) {
			t.Errorf("event %q names %d rows, want %d", ev.name, len(want), len(runMachineRows))
		}
		for _, row := range runMachineRows {
			pairs++
			t.Run(row.name+"+"+ev.name, func(t *testing.T) {
				m := newRowMachine(t, row)
				before := *m
				acts, ok := m.step(ev.in)
				got := outcomeOf(before.state, m, acts, ok)
				if expect, named := want[row.name]; !named {
					t.Errorf("%s + %s: not in the table (got %q)", row.name, ev.name, got)
				} else if got != expect {
					t.Errorf("%s + %s -> %q, want %q", row.name, ev.name, got, expect)
				}
				checkRunRules(t, &before, m, acts, ok)
			})
		}
	}
	if want := len(runMachineRows) * len(runMachineEvents); pairs != want {
		t.Errorf("covered %d pairs, want %d", pairs, want)
	}
	if len(runMachineTable) != len(runMachineEvents) {
		t.Errorf("runMachineTable has %d events, the test applies %d", len(runMachineTable), len(runMachineEvents))
	}
	t.Logf("%d rows (%d states) x %d events = %d pairs, each named", len(runMachineRows), numRunStates, len(runMachineEvents), pairs)
}

// checkRunRules checks the safety rules of one transition from before to m with acts.
func checkRunRules(t *testing.T, before, m *runMachine, acts []runAction, ok bool) {
	t.Helper()
	if !ok && (m.state != before.state || len(acts) != 0 || m.proc != before.proc || m.lastTerm != before.lastTerm) {
		t.Errorf("an event that cannot happen changed the machine: %v -> %v, %v", before.state, m.state, acts)
	}
	for i, a := range acts {
		switch a.kind {
		case actStart:
			// Never two commands: CMD starts only where none runs, and never once the run ends.
			if before.proc != nil || (before.state != runCampaigning && before.state != runFollowing && before.state != runChecking && before.state != runScheduled) {
				t.Errorf("start in %v (proc %v)", before.state, before.proc != nil)
			}
		case actRelease:
			// The release comes only once CMD's tree is gone, never after survivors.
			if before.proc != nil || before.state == runWithheld || before.state == runStopping || before.state == runRunning {
				t.Errorf("release in %v", before.state)
			}
		case actStop:
			// The stop signal goes out first, to the command that runs.
			if i != 0 || a.proc != machineProc || before.state != runRunning {
				t.Errorf("stop at %d in %v, to %p", i, before.state, a.proc)
			}
		case actKill, actForward:
			if a.proc != machineProc {
				t.Errorf("%v to %p, want the command", a, a.proc)
			}
		}
	}
	for _, a := range acts {
		// Under --schedule CMD's end is its slot's, never the run's; a start carries the slot.
		if before.sched && (a.kind == actEnd && before.state != runCampaigning || a.kind == actStart && a.slot.IsZero()) {
			t.Errorf("--schedule: %v in %v", a, before.state)
		}
	}
	if before.state == runWithheld && m.state != runWithheld {
		t.Errorf("withheld left for %v", m.state)
	}
	if (m.state == runRunning || m.state == runStopping) != (m.proc != nil) {
		t.Errorf("%v with proc %v", m.state, m.proc != nil)
	}
}

// TestRunMachineNamesEveryState checks that every state has a row and every action a name.
func TestRunMachineNamesEveryState(t *testing.T) {
	seen := map[runState]bool{}
	for _, r := range runMachineRows {
		seen[r.state] = true
	}
	for s := runState(0); s < numRunStates; s++ {
		if !seen[s] {
			t.Errorf("state %v has no row", s)
		}
	}
	if len(runStateNames) != int(numRunStates) || len(runEventNames) != int(numRunEvents) {
		t.Errorf("%d state names for %d states, %d event names for %d events", len(runStateNames), numRunStates, len(runEventNames), numRunEvents)
	}
	evs := map[runEvent]bool{}
	for _, e := range runMachineEvents {
		evs[e.in.ev] = true
	}
	for e := runEvent(0); e < numRunEvents; e++ {
		if !evs[e] {
			t.Errorf("event %v is not applied", e)
		}
	}
}

// TestRunMachineGiveUpRace checks the race of --timeout with a term's start: whichever comes
// first wins, and the other changes nothing.
func TestRunMachineGiveUpRace(t *testing.T) {
	m := &runMachine{}
	m.step(input("give up"))
	if acts, _ := m.step(runInput{ev: evTermBegan, token: 7}); len(acts) != 0 || m.lastTerm != 0 {
		t.Errorf("a term after giving up: %v, last term %d", acts, m.lastTerm)
	}
	m = &runMachine{}
	m.step(runInput{ev: evTermBegan, token: 7})
	if acts, _ := m.step(input("give up")); len(acts) != 0 || m.state != runStarting {
		t.Errorf("giving up in a term: %v, %v", acts, m.state)
	}
}
