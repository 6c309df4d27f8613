package election

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/lease"
)

// The Group's state machine, driven deterministically: a fake clock, fake effects (batches
// and callbacks are recorded, their results delivered by the test), no goroutines, no sleeps.

type fakeEffects struct {
	acquires []*acquireBatch
	renews   []*renewBatch
	releases []*releaseBatch
	started  []string // "name/token"
	cancels  map[string]int
	notified []string
}

func (f *fakeEffects) acquire(b *acquireBatch) { f.acquires = append(f.acquires, b) }
func (f *fakeEffects) renew(b *renewBatch)     { f.renews = append(f.renews, b) }
func (f *fakeEffects) release(b *releaseBatch) { f.releases = append(f.releases, b) }
func (f *fakeEffects) startTerm(gl *groupLease, term lease.Record) func() {
	key := fmt.Sprintf("%s/%d", gl.name, term.Token)
	f.started = append(f.started, key)
	return func() { f.cancels[key]++ }
}
func (f *fakeEffects) notifyStopped(gl *groupLease) {
	f.notified = append(f.notified, fmt.Sprintf("%s/%d", gl.name, gl.token))
}

type machineTest struct {
	t   *testing.T
	m   *groupMachine
	fx  *fakeEffects
	clk *clocktesting.FakeClock
	cfg GroupConfig
	tok int64
}

const (
	mtLease   = time.Second
	mtRenew   = 600 * time.Millisecond
	mtRetry   = 150 * time.Millisecond
	mtOurs    = "ours0000"
	mtTheirs  = "theirs00"
	mtHeldTTL = 500 * time.Millisecond
)

func newMachineTest(t *testing.T) *machineTest {
	t.Helper()
	mt := &machineTest{t: t, fx: &fakeEffects{cancels: map[string]int{}}, clk: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), tok: 100}
	mt.cfg = GroupConfig{Group: "g", Identity: "pod", LeaseDuration: mtLease, RenewDeadline: mtRenew, RetryPeriod: mtRetry}
	mt.m = newGroupMachine(&mt.cfg, mt.clk, mt.fx, newGroupView(), logr.Discard(), mtOurs, nil)
	mt.m.jitter = func() time.Duration { return 0 }
	// The first heartbeat: one live member.
	mt.m.tick(mt.clk.Now())
	mt.renewReply(nil, 1)
	return mt
}

func (mt *machineTest) gl(name string) *groupLease { return mt.m.leases[name] }

// termOf is the record of gl's term, as the machine sends it (groupMachine.termRecord).
func termOf(gl *groupLease) lease.Record {
	return lease.Record{Token: gl.token, Instance: mtOurs, Identity: "pod"}
}

func (mt *machineTest) rec(instance string) lease.Record {
	mt.tok++
	return lease.Record{Token: mt.tok, Instance: instance, Identity: "pod"}
}

// renewReply answers the last renew batch: every item ok unless listed in lost, with live
// members (mtMembers).
func (mt *machineTest) renewReply(lost map[string]bool, live int) {
	mt.renewMembers(lost, mtMembers(live))
}

// renewMembers answers the last renew batch as renewReply does, with the members given.
func (mt *machineTest) renewMembers(lost map[string]bool, members []string) {
	b := mt.fx.renews[len(mt.fx.renews)-1]
	b.replies = make([]renewReply, len(b.items))
	for i, it := range b.items {
		b.replies[i] = renewReply{ok: !lost[it.gl.name]}
	}
	b.members = members
	mt.m.onRenew(b)
}

// mtMembers is a membership of n: this replica and n−1 others (m1, m2, ...), whose last
// leaves first as n goes down.
func mtMembers(n int) []string {
	members := []string{mtOurs + ":pod"}
	for i := 1; i < n; i++ {
		members = append(members, fmt.Sprintf("m%d:pod", i))
	}
	return members
}

// tickAcquire ticks and returns the acquire batch started, which must hold name.
func (mt *machineTest) tickAcquire(name string) *acquireBatch {
	mt.t.Helper()
	n := len(mt.fx.acquires)
	mt.m.tick(mt.clk.Now())
	if len(mt.fx.acquires) != n+1 {
		mt.t.Fatalf("no acquire batch started (state %v)", mt.gl(name).state)
	}
	b := mt.fx.acquires[n]
	for _, gl := range b.items {
		if gl.name == name {
			return b
		}
	}
	mt.t.Fatalf("acquire batch without %s", name)
	return nil
}

// answerWon answers the acquire batch b: won for the leases named in won, held by another
// replica (for mtHeldTTL) for the others.
func (mt *machineTest) answerWon(b *acquireBatch, won ...string) {
	b.replies = make([]acquireReply, len(b.items))
	for i, gl := range b.items {
		if slices.Contains(won, gl.name) {
			b.replies[i] = acquireReply{won: true, rec: mt.rec(mtOurs), ttl: mtLease}
		} else {
			b.replies[i] = acquireReply{rec: mt.rec(mtTheirs), ttl: mtHeldTTL}
		}
	}
}

// heartbeat runs the next renew batch, a RetryPeriod later, its heartbeat answering live members.
func (mt *machineTest) heartbeat(live int) {
	mt.t.Helper()
	mt.clk.Step(mtRetry)
	mt.m.tick(mt.clk.Now())
	mt.renewReply(nil, live)
}

func answer(b *acquireBatch, r acquireReply) {
	b.replies = make([]acquireReply, len(b.items))
	for i := range b.replies {
		b.replies[i] = r
	}
}

// Rows of the table: the states of the spec, with the two sub-states that behave differently.
const (
	rowIdle         = "idle"
	rowAcquiring    = "acquiring"
	rowLeading      = "leading"
	rowLeadingDone  = "leading (work returned)"
	rowStopping     = "stopping"
	rowReleasing    = "releasing"
	rowReleasingNew = "releasing (no term started)"
	rowDraining     = "draining"
	rowNotifying    = "notifying"
)

var machineRows = []string{rowIdle, rowAcquiring, rowLeading, rowLeadingDone, rowStopping, rowReleasing, rowReleasingNew, rowDraining, rowNotifying}

// setup brings lease x into the state of row, by the machine's own transitions.
func (mt *machineTest) setup(row string) *groupLease {
	mt.t.Helper()
	m := mt.m
	m.add("x")
	if row == rowIdle {
		b := mt.tickAcquire("x")
		answer(b, acquireReply{rec: mt.rec(mtTheirs), ttl: mtHeldTTL})
		m.onAcquire(b)
		return mt.gl("x")
	}
	b := mt.tickAcquire("x")
	switch row {
	case rowAcquiring:
		return mt.gl("x")
	case rowReleasingNew:
		mt.clk.Step(mtRenew) // the reply comes at sent + RenewDeadline: too late
		answer(b, acquireReply{won: true, rec: mt.rec(mtOurs), ttl: mtLease})
		m.onAcquire(b)
		return mt.gl("x")
	}
	answer(b, acquireReply{won: true, rec: mt.rec(mtOurs), ttl: mtLease})
	m.onAcquire(b)
	gl := mt.gl("x")
	switch row {
	case rowLeading:
	case rowLeadingDone:
		m.onWorkReturned(gl, termOf(gl))
	case rowStopping:
		m.remove("x")
		m.add("x")
	case rowReleasing:
		m.remove("x")
		m.add("x")
		m.onWorkReturned(gl, termOf(gl))
	case rowDraining, rowNotifying:
		mt.clk.Step(m.renewEvery()) // the next renew batch
		m.tick(mt.clk.Now())
		mt.renewReply(map[string]bool{"x": true}, 1)
		if row == rowNotifying {
			m.onWorkReturned(gl, termOf(gl))
		}
	}
	return gl
}

// The events of the table, each applied to lease x as the loop would deliver it.
var machineEvents = []struct {
	name  string
	apply func(mt *machineTest, gl *groupLease)
}{
	{"due", func(mt *machineTest, gl *groupLease) {
		if gl.heapIdx >= 0 {
			mt.clk.SetTime(mt.m.at(gl.next))
		}
		mt.m.tick(mt.clk.Now())
	}},
	{"acquire won", func(mt *machineTest, gl *groupLease) {
		b := &acquireBatch{sent: mt.clk.Now(), items: []*groupLease{gl}}
		if n := len(mt.fx.acquires); gl.state == stateAcquiring && n > 0 {
			b = mt.fx.acquires[n-1]
		}
		answer(b, acquireReply{won: true, rec: mt.rec(mtOurs), ttl: mtLease})
		mt.m.onAcquire(b)
	}},
	{"acquire won, late", func(mt *machineTest, gl *groupLease) {
		b := &acquireBatch{sent: mt.clk.Now().Add(-mtRenew), items: []*groupLease{gl}}
		if n := len(mt.fx.acquires); gl.state == stateAcquiring && n > 0 {
			b = mt.fx.acquires[n-1]
			mt.clk.SetTime(b.sent.Add(mtRenew))
		}
		answer(b, acquireReply{won: true, rec: mt.rec(mtOurs), ttl: mtLease})
		mt.m.onAcquire(b)
	}},
	{"acquire resumes a record whose release failed", func(mt *machineTest, gl *groupLease) {
		// The record is set as poisoned directly; TestGroupMachineStaleReleaseResumeStartsNoTerm
		// reaches it through a failed release.
		rec := mt.rec(mtOurs)
		gl.core.guard.retired = rec.Token
		b := &acquireBatch{sent: mt.clk.Now(), items: []*groupLease{gl}}
		if n := len(mt.fx.acquires); gl.state == stateAcquiring && n > 0 {
			b = mt.fx.acquires[n-1]
		}
		answer(b, acquireReply{won: true, rec: rec, ttl: mtLease})
		mt.m.onAcquire(b)
	}},
	{"acquire held by another", func(mt *machineTest, gl *groupLease) {
		b := &acquireBatch{sent: mt.clk.Now(), items: []*groupLease{gl}}
		if n := len(mt.fx.acquires); gl.state == stateAcquiring && n > 0 {
			b = mt.fx.acquires[n-1]
		}
		answer(b, acquireReply{rec: mt.rec(mtTheirs), ttl: mtHeldTTL})
		mt.m.onAcquire(b)
	}},
	{"acquire error", func(mt *machineTest, gl *groupLease) {
		b := &acquireBatch{sent: mt.clk.Now(), items: []*groupLease{gl}}
		if n := len(mt.fx.acquires); gl.state == stateAcquiring && n > 0 {
			b = mt.fx.acquires[n-1]
		}
		answer(b, acquireReply{err: errors.New("i/o timeout")})
		mt.m.onAcquire(b)
	}},
	{"renew ok", func(mt *machineTest, gl *groupLease) {
		mt.m.onRenew(&renewBatch{sent: mt.clk.Now(), items: []termItem{{gl, termOf(gl)}}, replies: []renewReply{{ok: true}}, members: mtMembers(1)})
	}},
	{"renew says 0", func(mt *machineTest, gl *groupLease) {
		mt.m.onRenew(&renewBatch{sent: mt.clk.Now(), items: []termItem{{gl, termOf(gl)}}, replies: []renewReply{{ok: false}}, members: mtMembers(1)})
	}},
	{"renew error", func(mt *machineTest, gl *groupLease) {
		mt.m.onRenew(&renewBatch{sent: mt.clk.Now(), items: []termItem{{gl, termOf(gl)}}, replies: []renewReply{{err: errors.New("i/o timeout")}}, members: mtMembers(1)})
	}},
	{"deadline", func(mt *machineTest, gl *groupLease) {
		if gl.state == stateLeading || gl.state == stateStopping {
			mt.clk.SetTime(mt.m.at(gl.lastOK).Add(mtRenew))
		}
		mt.m.tick(mt.clk.Now())
	}},
	{"work returned", func(mt *machineTest, gl *groupLease) { mt.m.onWorkReturned(gl, termOf(gl)) }},
	{"Remove", func(mt *machineTest, gl *groupLease) { mt.m.remove("x") }},
	{"Add", func(mt *machineTest, gl *groupLease) { mt.m.add("x") }},
	{"shed", func(mt *machineTest, gl *groupLease) {
		// Hold y too and see two live members twice: the share is 1 of 2, x (first by name) goes.
		m := mt.m
		m.add("y")
		y := mt.gl("y")
		heap.Remove(&m.queue, int(y.heapIdx))
		m.setState(y, stateAcquiring)
		m.begin(y, mt.rec(mtOurs), mt.clk.Now())
		m.observeMembers(2)
		m.observeMembers(2)
	}},
	{"Run stop", func(mt *machineTest, gl *groupLease) { mt.m.stop() }},
	{"release reply", func(mt *machineTest, gl *groupLease) {
		mt.m.onRelease(&releaseBatch{items: []termItem{{gl, termOf(gl)}}, errs: []error{nil}})
	}},
	{"release error", func(mt *machineTest, gl *groupLease) {
		mt.m.onRelease(&releaseBatch{items: []termItem{{gl, termOf(gl)}}, errs: []error{errors.New("i/o timeout")}})
	}},
	{"OnStoppedLeading returned", func(mt *machineTest, gl *groupLease) { mt.m.onNotified(gl, termOf(gl)) }},
	{"event released", func(mt *machineTest, gl *groupLease) {
		mt.m.onEvent("x", leasekit.Event{Kind: leasekit.Released, Record: mt.rec(mtTheirs)})
	}},
	{"event acquired", func(mt *machineTest, gl *groupLease) {
		mt.m.onEvent("x", leasekit.Event{Kind: leasekit.Acquired, TTL: time.Hour, Record: mt.rec(mtTheirs)})
	}},
	{"event with an older token", func(mt *machineTest, gl *groupLease) {
		mt.m.onEvent("x", leasekit.Event{Kind: leasekit.Released, Record: lease.Record{Token: gl.core.guard.seen - 1, Instance: mtTheirs}})
	}},
}

// machineTable is the transition table of docs/DESIGN.md ("Many leases: Group"): per event,
// per row, the state lease x is in afterwards; "—" means unchanged (the event is ignored or
// cannot happen in that state), "gone" that the lease was forgotten. TestGroupMachineTableMatchesDesign
// checks that the doc says the same.
var machineTable = map[string]map[string]string{
	"due":                     {rowIdle: "acquiring"},
	"acquire won":             {rowAcquiring: "leading"},
	"acquire won, late":       {rowAcquiring: "releasing (no term started)"},
	"acquire held by another": {rowAcquiring: "idle"},
	"acquire resumes a record whose release failed": {rowAcquiring: "idle"},
	"acquire error":             {rowAcquiring: "idle"},
	"renew ok":                  {},
	"renew says 0":              {rowLeading: "draining", rowLeadingDone: "notifying", rowStopping: "draining"},
	"renew error":               {},
	"deadline":                  {rowLeading: "draining", rowLeadingDone: "notifying", rowStopping: "draining"},
	"work returned":             {rowLeading: "leading (work returned)", rowStopping: "releasing", rowDraining: "notifying"},
	"Remove":                    {rowIdle: "gone", rowLeading: "stopping", rowLeadingDone: "releasing"},
	"Add":                       {},
	"shed":                      {rowLeading: "stopping", rowLeadingDone: "releasing"},
	"Run stop":                  {rowLeading: "stopping", rowLeadingDone: "releasing"},
	"release reply":             {rowReleasing: "notifying", rowReleasingNew: "idle"},
	"release error":             {rowReleasing: "notifying", rowReleasingNew: "idle"},
	"OnStoppedLeading returned": {rowNotifying: "idle"},
	"event released":            {},
	"event acquired":            {},
	"event with an older token": {},
}

// rowOf names the row lease x is in.
func rowOf(m *groupMachine, gl *groupLease) string {
	if m.leases[gl.name] != gl || gl.forgotten() {
		return "gone"
	}
	switch {
	case gl.state == stateLeading && gl.workDone:
		return rowLeadingDone
	case gl.state == stateReleasing && !gl.notify:
		return rowReleasingNew
	}
	return gl.state.String()
}

// TestGroupMachineEveryStateAndEvent applies every event to every state and checks the
// result against machineTable. It fails on a pair the table does not list, so a new state
// or event cannot go untested.
func TestGroupMachineEveryStateAndEvent(t *testing.T) {
	pairs := 0
	for _, ev := range machineEvents {
		want, ok := machineTable[ev.name]
		if !ok {
			t.Errorf("event %q is not in machineTable", ev.name)
			continue
		}
		for _, row := range machineRows {
			pairs++
			t.Run(row+"+"+ev.name, func(t *testing.T) {
				mt := newMachineTest(t)
				gl := mt.setup(row)
				if got := rowOf(mt.m, gl); got != row {
					t.Fatalf("setup reached %q, want %q", got, row)
				}
				next, removed := mt.m.at(gl.next), gl.removed
				ev.apply(mt, gl)
				expect := want[row]
				if expect == "" {
					expect = row
				}
				if got := rowOf(mt.m, gl); got != expect {
					t.Fatalf("%s + %s -> %s, want %s", row, ev.name, got, expect)
				}
				mt.checkEffects(row, ev.name, gl, next, removed)
			})
		}
	}
	for name := range machineTable {
		found := false
		for _, ev := range machineEvents {
			found = found || ev.name == name
		}
		if !found {
			t.Errorf("machineTable lists event %q that no test applies", name)
		}
	}
	if want := len(machineRows) * len(machineEvents); pairs != want {
		t.Errorf("covered %d pairs, want %d", pairs, want)
	}
	t.Logf("%d states (with 2 sub-states) x %d events = %d pairs, each covered", len(machineRows), len(machineEvents), pairs)
}

// checkEffects checks what a transition must do beside changing the state.
func (mt *machineTest) checkEffects(row, ev string, gl *groupLease, nextBefore time.Time, removedBefore bool) {
	t := mt.t
	t.Helper()
	now := mt.clk.Now()
	after := rowOf(mt.m, gl)
	// Callbacks: a term's OnStartedLeading exactly when it begins, OnStoppedLeading only
	// after it returned and only for a started term.
	wantStarted := 0
	switch row {
	case rowLeading, rowLeadingDone, rowStopping, rowReleasing, rowDraining, rowNotifying:
		wantStarted = 1
	}
	if after == rowLeading && row == rowAcquiring {
		wantStarted = 1
	}
	if ev == "shed" {
		wantStarted++ // y
	}
	if len(mt.fx.started) != wantStarted {
		t.Errorf("terms started: %v, want %d", mt.fx.started, wantStarted)
	}
	if after == rowNotifying && row != rowNotifying && len(mt.fx.notified) != 1 {
		t.Errorf("entered notifying without OnStoppedLeading: %v", mt.fx.notified)
	}
	if after != rowNotifying && row != rowNotifying && after != "idle" && len(mt.fx.notified) != 0 {
		t.Errorf("OnStoppedLeading before notifying: %v", mt.fx.notified)
	}
	// A lease is queued for an attempt exactly when it is idle (and not stopping).
	if after == "idle" && !mt.m.stopping && gl.heapIdx < 0 {
		t.Errorf("idle lease not queued")
	}
	if after != "idle" && gl.heapIdx >= 0 {
		t.Errorf("%s lease queued for an attempt", after)
	}
	// When the next attempt is.
	switch {
	case after != "idle":
	case row == rowIdle && ev == "event released":
		if !mt.m.at(gl.next).Equal(now) {
			t.Errorf("released event below the share: next in %v, want now", mt.m.at(gl.next).Sub(now))
		}
	case row == rowIdle && ev == "event acquired":
		if !mt.m.at(gl.next).Equal(now.Add(mtLease)) {
			t.Errorf("acquired event with TTL 1h: next in %v, want LeaseDuration (capped)", mt.m.at(gl.next).Sub(now))
		}
	case row == rowIdle:
		if !mt.m.stopping && !mt.m.at(gl.next).Equal(nextBefore) {
			t.Errorf("next moved by %v", mt.m.at(gl.next).Sub(nextBefore))
		}
	case row == rowAcquiring && ev == "acquire held by another":
		if !mt.m.at(gl.next).Equal(now.Add(mtHeldTTL)) {
			t.Errorf("held: next in %v, want the holder's TTL", mt.m.at(gl.next).Sub(now))
		}
	case row == rowAcquiring && ev == "acquire resumes a record whose release failed":
		if !mt.m.at(gl.next).Equal(now.Add(mtLease+timing.DriftMargin(mtLease))) || len(mt.m.releases) != 0 {
			t.Errorf("resume of a poisoned record: next in %v, releases queued %d; want its TTL and drift margin, none", mt.m.at(gl.next).Sub(now), len(mt.m.releases))
		}
	case row == rowAcquiring && ev == "acquire error":
		if !mt.m.at(gl.next).Equal(now.Add(mtRetry)) {
			t.Errorf("error: next in %v, want RetryPeriod", mt.m.at(gl.next).Sub(now))
		}
	case row == rowReleasingNew && ev == "release reply":
		if !mt.m.at(gl.next).Equal(now.Add(mtRetry)) {
			t.Errorf("late win released: next in %v, want RetryPeriod (a failed attempt)", mt.m.at(gl.next).Sub(now))
		}
	case row == rowReleasingNew && ev == "release error":
		if !mt.m.at(gl.next).Equal(now.Add(mtLease)) {
			t.Errorf("late win, release failed: next in %v, want LeaseDuration (the release may still run)", mt.m.at(gl.next).Sub(now))
		}
	}
	// Releases: queued exactly on entering releasing.
	if after == rowReleasing || after == rowReleasingNew {
		if row != after && (len(mt.m.releases) == 0 && len(mt.fx.releases) == 0) {
			t.Errorf("entered %s without queuing a release", after)
		}
	}
	if ev == "Remove" && after != "gone" && !gl.removed {
		t.Errorf("Remove did not set removed")
	}
	if ev == "Add" && gl.removed {
		t.Errorf("Add did not clear removed")
	}
	_ = removedBefore
}

// TestGroupMachineAddAfterRemoveWaitsForTheRelease is issue #12's third path: Remove(X), then
// Add(X) while the release is in flight. The lease must not be tried (an acquire would
// resume the very term the release then deletes) until the release reply came back and
// OnStoppedLeading returned; then it leaves X to the others for a lease duration.
func TestGroupMachineAddAfterRemoveWaitsForTheRelease(t *testing.T) {
	mt := newMachineTest(t)
	m := mt.m
	gl := mt.setup(rowLeading)
	term := termOf(gl)
	m.remove("x")
	if gl.state != stateStopping || mt.fx.cancels["x/"+fmt.Sprint(term.Token)] != 1 {
		t.Fatalf("Remove: state %v, cancels %v", gl.state, mt.fx.cancels)
	}
	m.onWorkReturned(gl, term)
	m.tick(mt.clk.Now())
	if len(mt.fx.releases) != 1 {
		t.Fatalf("no release batch after the work returned")
	}
	rel := mt.fx.releases[0]
	acquires := len(mt.fx.acquires)
	m.add("x")
	for i := 0; i < 20; i++ { // three lease durations of ticks with the release in flight
		mt.clk.Step(mtRetry)
		m.tick(mt.clk.Now())
		if len(m.fx.(*fakeEffects).renews) > 0 {
			if b := mt.fx.renews[len(mt.fx.renews)-1]; b.replies == nil {
				mt.renewReply(nil, 1)
			}
		}
	}
	if gl.state != stateReleasing || gl.heapIdx >= 0 || len(mt.fx.acquires) != acquires {
		t.Fatalf("Add during the release: state %v, queued %v, acquire batches %d -> %d", gl.state, gl.heapIdx >= 0, acquires, len(mt.fx.acquires))
	}
	if len(mt.fx.notified) != 0 {
		t.Fatalf("OnStoppedLeading before the release reply: %v", mt.fx.notified)
	}
	rel.errs = []error{nil}
	m.onRelease(rel)
	if gl.state != stateNotifying || len(mt.fx.notified) != 1 {
		t.Fatalf("release reply: state %v, notified %v", gl.state, mt.fx.notified)
	}
	mt.clk.Step(5 * time.Second) // a slow OnStoppedLeading: still not tried
	m.tick(mt.clk.Now())
	if len(mt.fx.acquires) != acquires {
		t.Fatalf("tried while OnStoppedLeading ran")
	}
	m.onNotified(gl, term)
	if gl.state != stateIdle || !mt.m.at(gl.next).Equal(mt.clk.Now().Add(mtLease)) {
		t.Fatalf("after OnStoppedLeading: state %v, next in %v, want idle in LeaseDuration", gl.state, mt.m.at(gl.next).Sub(mt.clk.Now()))
	}
}

// TestGroupMachineSlowStopDoesNotDelayOthers is issue #12's first path: Remove(X) while Y is
// held, and X's OnStoppedLeading takes 3 s. Y must be renewed every renewEvery throughout,
// and its deadline stays where its last good renew put it.
func TestGroupMachineSlowStopDoesNotDelayOthers(t *testing.T) {
	mt := newMachineTest(t)
	m := mt.m
	x := mt.setup(rowLeading)
	m.add("y")
	b := mt.tickAcquire("y")
	answer(b, acquireReply{won: true, rec: mt.rec(mtOurs), ttl: mtLease})
	m.onAcquire(b)
	y := mt.gl("y")
	m.remove("x")
	m.onWorkReturned(x, termOf(x))
	m.tick(mt.clk.Now())
	rel := mt.fx.releases[len(mt.fx.releases)-1]
	rel.errs = make([]error, len(rel.items))
	m.onRelease(rel)
	if x.state != stateNotifying {
		t.Fatalf("x: %v", x.state)
	}
	renewals, every := 0, m.renewEvery()
	start := mt.clk.Now()
	for mt.clk.Since(start) < 3*time.Second {
		wake := m.tick(mt.clk.Now())
		if len(mt.fx.renews) > 0 && mt.fx.renews[len(mt.fx.renews)-1].replies == nil {
			b := mt.fx.renews[len(mt.fx.renews)-1]
			if len(b.items) > 1 || len(b.items) == 1 && b.items[0].gl != y { // none: a heartbeat alone
				t.Fatalf("renew batch %v, want y only", b.items)
			}
			renewals += len(b.items)
			mt.renewReply(nil, 1)
			wake = m.tick(mt.clk.Now())
		}
		if wake.Sub(mt.clk.Now()) > mtRetry {
			t.Fatalf("loop plans to sleep %v with a lease held, more than RetryPeriod (the heartbeat's period)", wake.Sub(mt.clk.Now()))
		}
		mt.clk.SetTime(wake)
	}
	if y.state != stateLeading || mt.clk.Since(mt.m.at(y.lastOK)) > every {
		t.Fatalf("y after 3 s of x's OnStoppedLeading: %v, last renew %v ago", y.state, mt.clk.Since(mt.m.at(y.lastOK)))
	}
	if renewals < int(3*time.Second/every)-1 {
		t.Fatalf("y renewed %d times in 3 s, want once per renewEvery (%v)", renewals, every)
	}
}

// TestGroupMachineRenewalsAndHeartbeats: a held lease is renewed every renewEvery, the
// membership heartbeat goes every RetryPeriod (alone between renewals), and a heartbeat alone
// is never sent less than its bound (renewTimeout) before a renewal is due, so that it cannot
// hold the renewal up.
func TestGroupMachineRenewalsAndHeartbeats(t *testing.T) {
	mt := newMachineTest(t)
	m := mt.m
	// RD − 2·RP is 400 ms, not a whole number of RetryPeriods: a heartbeat alone 300 ms after a
	// renewal would still be in flight when one due 400 ms after it was.
	mt.cfg.RenewDeadline = 700 * time.Millisecond
	mt.setup(rowLeading)
	every, bound := m.renewEvery(), renewTimeout(&mt.cfg)
	if every < 2*mtRetry {
		t.Fatalf("renewEvery %v: the test wants room for a heartbeat alone between two renewals", every)
	}
	type sent struct {
		at    time.Time
		renew bool
	}
	var batches []sent
	start := mt.clk.Now()
	for mt.clk.Since(start) < 10*every {
		n := len(mt.fx.renews)
		wake := m.tick(mt.clk.Now())
		if len(mt.fx.renews) > n {
			b := mt.fx.renews[n]
			batches = append(batches, sent{b.sent, len(b.items) > 0})
			m.recomputeMinOK()
			mt.renewReply(nil, 1)
			if len(b.items) == 0 && !m.minOKValid {
				t.Errorf("a heartbeat alone invalidated the earliest renewal time: the next tick scans every held lease for nothing")
			}
			wake = m.tick(mt.clk.Now())
		}
		mt.clk.SetTime(wake)
	}
	var renewals []time.Time
	for i, b := range batches {
		if i > 0 && b.at.Sub(batches[i-1].at) > mtRetry {
			t.Errorf("batch %d sent %v after the one before; want a heartbeat every RetryPeriod %v", i, b.at.Sub(batches[i-1].at), mtRetry)
		}
		if b.renew {
			renewals = append(renewals, b.at)
		}
	}
	for i := 1; i < len(renewals); i++ {
		if d := renewals[i].Sub(renewals[i-1]); d != every {
			t.Errorf("renewal %d came %v after the one before, want renewEvery %v", i, d, every)
		}
	}
	for i, b := range batches {
		if b.renew {
			continue
		}
		for _, r := range renewals {
			if r.After(b.at) && r.Sub(b.at) < bound {
				t.Errorf("batch %d, a heartbeat alone, sent %v before a renewal; want at least its bound %v", i, r.Sub(b.at), bound)
			}
		}
	}
	if len(renewals) < 9 || len(batches) <= len(renewals) {
		t.Fatalf("%d batches, %d of them renewals, in %v; want about one renewal per renewEvery %v and heartbeats alone between", len(batches), len(renewals), 10*every, every)
	}
}

// TestGroupMachineDeadlineIsATimer is issue #12's second path seen from the machine: with
// lease 1 s / renew deadline 900 ms / retry 700 ms and renew batches that never come back (a
// stalled path), the term ends exactly at last good send + RenewDeadline, and the loop is
// told to wake up then. Nothing here depends on a subscription.
func TestGroupMachineDeadlineIsATimer(t *testing.T) {
	mt := newMachineTest(t)
	mt.cfg.LeaseDuration, mt.cfg.RenewDeadline, mt.cfg.RetryPeriod = time.Second, 900*time.Millisecond, 700*time.Millisecond
	m := mt.m
	gl := mt.setup(rowLeading)
	sent := m.at(gl.lastOK)
	for {
		wake := m.tick(mt.clk.Now())
		if gl.state != stateLeading {
			break
		}
		if wake.After(sent.Add(900 * time.Millisecond)) {
			t.Fatalf("next wake-up %v after the last good send, past the renew deadline", wake.Sub(sent))
		}
		mt.clk.SetTime(wake) // renew batches stay in flight: never answered
	}
	if gl.state != stateDraining || !mt.clk.Now().Equal(sent.Add(900*time.Millisecond)) {
		t.Fatalf("state %v at %v after the last good send, want draining at exactly 900ms", gl.state, mt.clk.Now().Sub(sent))
	}
	if mt.fx.cancels[fmt.Sprintf("x/%d", gl.token)] != 1 {
		t.Fatalf("ctx not cancelled at the deadline")
	}
}

// TestGroupMachineLateWinStartsNoTerm: an acquire reply at or after sent + RenewDeadline
// starts no term and is released (owner-checked); one just before starts one.
func TestGroupMachineLateWinStartsNoTerm(t *testing.T) {
	for _, tc := range []struct {
		after time.Duration
		lead  bool
	}{{mtRenew - time.Millisecond, true}, {mtRenew, false}, {2 * mtRenew, false}} {
		mt := newMachineTest(t)
		mt.m.add("x")
		b := mt.tickAcquire("x")
		mt.clk.Step(tc.after)
		rec := mt.rec(mtOurs)
		answer(b, acquireReply{won: true, rec: rec, ttl: mtLease})
		mt.m.onAcquire(b)
		gl := mt.gl("x")
		if led := len(mt.fx.started) == 1; led != tc.lead || (gl.state == stateLeading) != tc.lead {
			t.Errorf("reply after %v: state %v, started %v", tc.after, gl.state, mt.fx.started)
		}
		if !tc.lead && (len(mt.m.releases) != 1 || mt.m.releases[0].term != rec) {
			t.Errorf("reply after %v: release of the won record not queued: %v", tc.after, mt.m.releases)
		}
	}
}

// TestGroupMachineBoundsAcquireBatches: of more leases due than maxAcquireBatch, one batch
// tries maxAcquireBatch and the next, started when the first came back, the rest; every lease
// won in either starts a term (a batch of all of them would come back too late to start any
// on a loaded machine).
func TestGroupMachineBoundsAcquireBatches(t *testing.T) {
	mt := newMachineTest(t)
	k := maxAcquireBatch + 100
	for i := range k {
		mt.m.add(fmt.Sprintf("lease-%05d", i))
	}
	for _, want := range []int{maxAcquireBatch, 100} {
		n := len(mt.fx.acquires)
		mt.m.tick(mt.clk.Now())
		if len(mt.fx.acquires) != n+1 {
			t.Fatalf("no acquire batch started; %d held", len(mt.m.held))
		}
		b := mt.fx.acquires[n]
		if len(b.items) != want {
			t.Fatalf("acquire batch of %d leases, want %d", len(b.items), want)
		}
		b.replies = make([]acquireReply, len(b.items))
		for i := range b.items {
			b.replies[i] = acquireReply{won: true, rec: mt.rec(mtOurs), ttl: mtLease}
		}
		mt.m.onAcquire(b)
	}
	if len(mt.m.held) != k || len(mt.fx.started) != k {
		t.Errorf("%d held, %d terms started; want all %d", len(mt.m.held), len(mt.fx.started), k)
	}
}

// TestGroupMachineCapsAndOrder: TTLs from replies and events are capped at LeaseDuration, a
// lease without expiry is tried every RetryPeriod, and older events are ignored.
func TestGroupMachineCapsAndOrder(t *testing.T) {
	for _, tc := range []struct {
		ttl, want time.Duration
	}{{time.Hour, mtLease}, {lease.NoExpiry, mtRetry}, {300 * time.Millisecond, 300 * time.Millisecond}} {
		mt := newMachineTest(t)
		mt.m.add("x")
		b := mt.tickAcquire("x")
		answer(b, acquireReply{rec: mt.rec(mtTheirs), ttl: tc.ttl})
		mt.m.onAcquire(b)
		if got := mt.m.at(mt.gl("x").next).Sub(mt.clk.Now()); got != tc.want {
			t.Errorf("held with TTL %v: next in %v, want %v", tc.ttl, got, tc.want)
		}
	}
	mt := newMachineTest(t)
	gl := mt.setup(rowIdle)
	seen := gl.core.guard.seen
	next := mt.m.at(gl.next)
	mt.m.onEvent("x", leasekit.Event{Kind: leasekit.Acquired, TTL: time.Hour, Record: lease.Record{Token: seen - 1, Instance: mtTheirs}})
	mt.m.onEvent("x", leasekit.Event{Kind: leasekit.Released, Record: lease.Record{Token: seen - 1, Instance: mtTheirs}})
	if !mt.m.at(gl.next).Equal(next) {
		t.Errorf("an older event moved the attempt by %v", mt.m.at(gl.next).Sub(next))
	}
	mt.m.onEvent("x", leasekit.Event{Kind: leasekit.Released, Record: lease.Record{Token: seen, Instance: mtTheirs}})
	if !mt.m.at(gl.next).Equal(mt.clk.Now()) {
		t.Errorf("release of the known term: next in %v, want now", mt.m.at(gl.next).Sub(mt.clk.Now()))
	}
	mt.m.onEvent("x", leasekit.Event{Kind: leasekit.Renewed, TTL: time.Hour, Record: lease.Record{Token: seen, Instance: mtTheirs}})
	if !mt.m.at(gl.next).Equal(mt.clk.Now()) {
		t.Errorf("renewed event of a term heard released moved the attempt")
	}
}

// TestGroupMachineMaxLeases: no more acquires in flight or held than MaxLeases.
func TestGroupMachineMaxLeases(t *testing.T) {
	mt := newMachineTest(t)
	mt.cfg.MaxLeases = 2
	for _, n := range []string{"a", "b", "c", "d"} {
		mt.m.add(n)
	}
	mt.m.tick(mt.clk.Now())
	b := mt.fx.acquires[len(mt.fx.acquires)-1]
	if len(b.items) != 2 {
		t.Fatalf("acquire batch of %d with MaxLeases 2", len(b.items))
	}
	answer(b, acquireReply{won: true, rec: mt.rec(mtOurs), ttl: mtLease})
	mt.m.onAcquire(b)
	mt.clk.Step(mtRetry / 2)
	mt.m.tick(mt.clk.Now())
	if got := mt.fx.acquires[len(mt.fx.acquires)-1]; got != b {
		t.Fatalf("another acquire batch (%d) at the cap", len(got.items))
	}
}

// TestGroupMachineRunStop: Run stop ends every term, releases, waits for the callbacks, and
// only then is the machine finished; nothing is tried meanwhile.
func TestGroupMachineRunStop(t *testing.T) {
	mt := newMachineTest(t)
	m := mt.m
	gl := mt.setup(rowLeading)
	m.add("z") // idle, queued
	m.stop()
	if gl.state != stateStopping || m.finished() {
		t.Fatalf("after stop: %v, finished %v", gl.state, m.finished())
	}
	m.onWorkReturned(gl, termOf(gl))
	m.tick(mt.clk.Now())
	if m.finished() {
		t.Fatal("finished with a release in flight")
	}
	rel := mt.fx.releases[len(mt.fx.releases)-1]
	rel.errs = make([]error, len(rel.items))
	m.onRelease(rel)
	if m.finished() {
		t.Fatal("finished while OnStoppedLeading runs")
	}
	m.onNotified(gl, termOf(gl))
	if b := mt.fx.renews[len(mt.fx.renews)-1]; b.replies == nil {
		mt.renewReply(nil, 1)
	}
	if !m.finished() {
		t.Fatalf("not finished: busy %d, renew %v acquire %v release %v", m.busy, m.renewBusy, m.acqBusy, m.releaseBusy)
	}
	if len(mt.fx.acquires) != 1 {
		t.Fatalf("%d acquire batches; none after stop wanted", len(mt.fx.acquires))
	}
}

// TestGroupMachineTableMatchesDesign checks that docs/DESIGN.md's transition table says what
// machineTable (and so the machine) does.
func TestGroupMachineTableMatchesDesign(t *testing.T) {
	table := designTable(t, "| event \\ state |")
	header := table[0][1:]
	if strings.Join(header, ",") != strings.Join(machineRows, ",") {
		t.Fatalf("table columns %q, want %q", header, machineRows)
	}
	seen := map[string]bool{}
	for _, cells := range table[1:] {
		ev := strings.Trim(cells[0], "*`")
		want, ok := machineTable[ev]
		if !ok {
			t.Errorf("doc row %q is not an event of machineTable", ev)
			continue
		}
		seen[ev] = true
		for i, row := range machineRows {
			cell := cells[i+1]
			got := "—"
			if rest, ok := strings.CutPrefix(cell, "→ "); ok {
				got = strings.TrimSpace(strings.SplitN(rest, ";", 2)[0])
			}
			w := want[row]
			if w == "" {
				w = "—"
			}
			if got != w {
				t.Errorf("doc: %s + %s is %q, machineTable says %q", row, ev, cell, w)
			}
		}
	}
	for ev := range machineTable {
		if !seen[ev] {
			t.Errorf("docs/DESIGN.md's table has no row for event %q", ev)
		}
	}
}

// TestGroupMachineStaleReleaseResumeStartsNoTerm is docs/MODEL.md's finding 1: a release
// whose reply is an error may still run later. An acquire that then resumes the same record
// (the script renews a record its owner holds) must not start a term, for the stale release
// would delete the key under it and another replica acquire. It is taken as held by another
// (no term, no second release, next attempt when it expired); a reply with another record
// ends the suspicion. Both release paths: a late win (no term started) and a term given up
// (Remove, then Add).
func TestGroupMachineStaleReleaseResumeStartsNoTerm(t *testing.T) {
	for _, path := range []string{"late win", "term released"} {
		t.Run(path, func(t *testing.T) {
			mt := newMachineTest(t)
			m := mt.m
			var rec lease.Record
			switch path {
			case "late win":
				gl := mt.setup(rowReleasingNew)
				rec = termOf(gl)
			case "term released":
				gl := mt.setup(rowLeading)
				rec = termOf(gl)
				m.remove("x")
				m.onWorkReturned(gl, rec)
			}
			m.tick(mt.clk.Now())
			if len(mt.fx.releases) != 1 || mt.fx.releases[0].items[0].term != rec {
				t.Fatalf("release of %v not sent: %v", rec, mt.fx.releases)
			}
			rel := mt.fx.releases[0]
			rel.errs = []error{errors.New("i/o timeout")} // sent; it may run at any time
			m.onRelease(rel)
			if path == "term released" {
				gl := mt.gl("x")
				m.onNotified(gl, rec) // forgotten (removed)...
				if !gl.forgotten() || gl.heapIdx >= 0 {
					t.Fatal("removed lease not forgotten")
				}
				m.add("x") // ...and added again
			}
			gl := mt.gl("x")
			started, releases := len(mt.fx.started), len(mt.fx.releases)
			mt.clk.SetTime(mt.m.at(gl.next))
			b := mt.tickAcquire("x")
			answer(b, acquireReply{won: true, rec: rec, ttl: mtLease}) // the resume
			m.onAcquire(b)
			m.tick(mt.clk.Now())
			if len(mt.fx.started) != started {
				t.Fatalf("term started on a resumed record whose release failed: %v", mt.fx.started)
			}
			if gl.state != stateIdle || !mt.m.at(gl.next).Equal(mt.clk.Now().Add(mtLease+timing.DriftMargin(mtLease))) {
				t.Fatalf("after the resume: state %v, next in %v, want idle, next in LeaseDuration", gl.state, mt.m.at(gl.next).Sub(mt.clk.Now()))
			}
			if len(mt.fx.releases) != releases || len(m.releases) != 0 {
				t.Fatalf("the resumed record was released again")
			}
			// Expired meanwhile: a new record is a new term, trusted.
			mt.clk.SetTime(mt.m.at(gl.next))
			if n := len(mt.fx.renews); n > 0 && mt.fx.renews[n-1].replies == nil {
				mt.renewReply(nil, 1)
			}
			b = mt.tickAcquire("x")
			fresh := mt.rec(mtOurs)
			answer(b, acquireReply{won: true, rec: fresh, ttl: mtLease})
			m.onAcquire(b)
			if gl.state != stateLeading || termOf(gl) != fresh {
				t.Fatalf("new record: state %v, term %v, want leading %v", gl.state, termOf(gl), fresh)
			}
			if gl.core.guard.retired < rec.Token {
				t.Fatal("the record whose release failed is trusted again")
			}
		})
	}
}

// TestGroupMachineErrorKeepsTheKnownExpiry: an acquire in flight when the holder's renewal is
// announced, whose reply is then an error (Redis restarted without its data), tries again
// not before the expiry that renewal announced: the old leader works on until its next renew
// says 0. Before, the event was dropped (the reply "tells more") and the lease tried again
// after RetryPeriod, on the emptied Redis. A release heard instead lets it retry after
// RetryPeriod; a renewal capped at LeaseDuration; an older event changes nothing.
func TestGroupMachineErrorKeepsTheKnownExpiry(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   func(mt *machineTest, holder lease.Record) leasekit.Event
		wait time.Duration
	}{
		{"renewal heard", func(_ *machineTest, h lease.Record) leasekit.Event {
			return leasekit.Event{Kind: leasekit.Renewed, Record: h, TTL: mtHeldTTL}
		}, mtHeldTTL},
		{"renewal longer than the lease", func(_ *machineTest, h lease.Record) leasekit.Event {
			return leasekit.Event{Kind: leasekit.Renewed, Record: h, TTL: time.Hour}
		}, mtLease},
		{"release heard", func(_ *machineTest, h lease.Record) leasekit.Event {
			return leasekit.Event{Kind: leasekit.Released, Record: h}
		}, mtRetry},
		{"older term renewed", func(_ *machineTest, h lease.Record) leasekit.Event {
			return leasekit.Event{Kind: leasekit.Renewed, Record: lease.Record{Token: h.Token - 1, Instance: mtTheirs}, TTL: mtLease}
		}, mtRetry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mt := newMachineTest(t)
			mt.m.add("x")
			b := mt.tickAcquire("x")
			mt.rec(mtTheirs) // a token for the older term
			holder := mt.rec(mtTheirs)
			answer(b, acquireReply{rec: holder, ttl: 10 * time.Millisecond}) // held, expiring soon
			mt.m.onAcquire(b)
			mt.clk.Step(10 * time.Millisecond)
			b = mt.tickAcquire("x")
			mt.m.onEvent("x", tc.ev(mt, holder))
			mt.clk.Step(time.Millisecond)
			answer(b, acquireReply{err: errors.New("EOF")})
			mt.m.onAcquire(b)
			gl := mt.gl("x")
			if got, want := mt.m.at(gl.next).Sub(mt.clk.Now()), tc.wait-time.Millisecond; tc.wait == mtRetry {
				want = mtRetry
				if got != want {
					t.Fatalf("after the error: next attempt in %v, want RetryPeriod %v", got, want)
				}
			} else if got != want {
				t.Fatalf("after the error: next attempt in %v, want the expiry the event announced (%v)", got, want)
			}
		})
	}
}

// A lease held by a term whose token is below one an acquire reply showed before (Redis lost
// writes, or a client broke the resume rules) is warned about once per record, as Run does.
func TestGroupMachineWarnsTokenBelowSeen(t *testing.T) {
	mt := newMachineTest(t)
	var logged []string
	mt.m.logger = funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})
	mt.m.add("x")
	held := func(tok int64) {
		b := mt.tickAcquire("x")
		answer(b, acquireReply{rec: lease.Record{Token: tok, Instance: mtTheirs, Identity: "pod"}, ttl: mtHeldTTL})
		mt.m.onAcquire(b)
		mt.clk.SetTime(mt.m.at(mt.gl("x").next))
	}
	warnings := func() (n int) {
		for _, l := range logged {
			if strings.Contains(l, "token is below one seen before") {
				n++
			}
		}
		return n
	}
	held(200)
	held(200)
	if n := warnings(); n != 0 {
		t.Fatalf("warned %d times with no token below one seen: %v", n, logged)
	}
	held(150)
	held(150)
	if n := warnings(); n != 1 {
		t.Fatalf("warned %d times for one record below the token seen, want once: %v", n, logged)
	}
	held(120)
	if n := warnings(); n != 2 {
		t.Fatalf("warned %d times after a second such record, want twice: %v", n, logged)
	}
	// A batch of many such leases (a rollback) is one line, counting them.
	mt.m.add("y")
	mt.m.add("z")
	b := mt.tickAcquire("y")
	b.replies = make([]acquireReply, len(b.items))
	for i, gl := range b.items {
		tok := int64(300)
		if gl.name == "y" || gl.name == "z" {
			mt.gl(gl.name).core.guard.floor = 400 // these two saw a newer token before
		}
		b.replies[i] = acquireReply{rec: lease.Record{Token: tok, Instance: mtTheirs, Identity: "pod"}, ttl: mtHeldTTL}
	}
	mt.m.onAcquire(b)
	if n := warnings(); n != 3 || !strings.Contains(logged[len(logged)-1], `"leases"=2`) {
		t.Fatalf("warned %d times after a batch with two leases below the token seen, want one more line counting 2: %v", n, logged)
	}
}

// TestGroupMachineParkForBoundsParkedAttempts: parkFor grows with the leases a replica does
// not hold, so that its parked attempts stay within parkRate a second; a lease parked under a
// shorter parkFor still unparks to its holder's expiry, as last heard.
func TestGroupMachineParkForBoundsParkedAttempts(t *testing.T) {
	mt := newMachineTest(t)
	m := mt.m
	mt.heartbeat(2)
	for _, n := range []string{"a", "b", "c", "d"} {
		m.add(n)
	}
	b := mt.tickAcquire("a")
	sent := mt.clk.Now()
	mt.answerWon(b, "a", "b")
	m.onAcquire(b)
	d := mt.gl("d")
	if park := m.parkFor(); park != 3*mtLease || !d.parked || !mt.m.at(d.next).Equal(sent.Add(mtHeldTTL+park)) {
		t.Fatalf("4 leases, 2 held: parkFor %v, d parked %v, next in %v; want 3 × LeaseDuration, parked, at the expiry + that",
			park, d.parked, mt.m.at(d.next).Sub(sent))
	}
	const more = 20_000
	for i := range more {
		m.add(fmt.Sprintf("n%05d", i))
	}
	others := 4 + more - 2
	if got, want := m.parkFor(), time.Duration(others)*time.Second/parkRate; got != want {
		t.Fatalf("%d leases not held: parkFor %v, want %v (at most %d parked attempts a second)", others, got, want, parkRate)
	}
	// Far below the new share: the next tick unparks d, to its holder's expiry.
	m.tick(mt.clk.Now())
	if d.parked || !mt.m.at(d.next).Equal(sent.Add(mtHeldTTL)) {
		t.Fatalf("unparked under a longer parkFor: d parked %v, next in %v; want unparked, at the expiry (%v)", d.parked, mt.m.at(d.next).Sub(sent), mtHeldTTL)
	}
}

// TestGroupMachineParksLeasesOfOthersAtItsShare: a replica at its fair share tries a lease
// another replica holds parkFor after the holder's expiry instead of at it; a release, a lost
// term (below the share) or a smaller membership brings the attempts back to the expiry.
func TestGroupMachineParksLeasesOfOthersAtItsShare(t *testing.T) {
	mt := newMachineTest(t)
	m := mt.m
	park := m.parkFor()
	mt.heartbeat(2) // two replicas: the share of 4 leases is 2
	m.add("a")
	m.add("b")
	m.add("c")
	m.add("d")
	b := mt.tickAcquire("a")
	if len(b.items) != 4 {
		t.Fatalf("acquire batch of %d leases, want 4", len(b.items))
	}
	sent := mt.clk.Now()
	mt.answerWon(b, "a", "b")
	m.onAcquire(b)
	c, d := mt.gl("c"), mt.gl("d")
	for _, gl := range []*groupLease{c, d} {
		if !gl.parked || !mt.m.at(gl.next).Equal(sent.Add(mtHeldTTL+park)) {
			t.Fatalf("%s at the share: parked %v, next in %v; want parked, next at the expiry + %v", gl.name, gl.parked, mt.m.at(gl.next).Sub(sent), park)
		}
	}

	// A release of c: it is free now, so its attempt goes back to the expiry.
	m.onEvent("c", leasekit.Event{Kind: leasekit.Released, Record: lease.Record{Token: c.core.known.token, Instance: mtTheirs, Identity: "pod"}})
	if c.parked || !mt.m.at(c.next).Equal(sent.Add(mtHeldTTL)) {
		t.Fatalf("c released: parked %v, next in %v; want unparked, at the expiry", c.parked, mt.m.at(c.next).Sub(sent))
	}

	// a is lost: below the share, the next tick unparks d, due at its holder's expiry.
	mt.clk.Step(m.renewEvery())
	m.tick(mt.clk.Now())
	mt.renewReply(map[string]bool{"a": true}, 2)
	m.tick(mt.clk.Now())
	if d.parked || !mt.m.at(d.next).Equal(sent.Add(mtHeldTTL)) {
		t.Fatalf("below the share: d parked %v, next in %v; want unparked, at the expiry", d.parked, mt.m.at(d.next).Sub(sent))
	}

	// At the share again (c won), d, held by another, is parked again.
	mt.clk.SetTime(mt.m.at(d.next))
	b = mt.tickAcquire("d")
	mt.answerWon(b, "c")
	m.onAcquire(b)
	if len(m.held) != 2 || !d.parked {
		t.Fatalf("held %d, d parked %v; want 2 held and d parked", len(m.held), d.parked)
	}

	// Below the share again (c lost) within a LeaseDuration of the last unpark: d stays
	// parked until that LeaseDuration is over, then unparks. The renew batch in flight since
	// d's attempt was sent before c was won: answered first, then the next one loses c.
	if !m.renewBusy {
		t.Fatal("no renew batch in flight")
	}
	mt.renewReply(nil, 2)
	mt.clk.SetTime(m.nextRenew)
	m.tick(mt.clk.Now())
	mt.renewReply(map[string]bool{"c": true}, 2)
	m.tick(mt.clk.Now())
	if len(m.held) != 1 || !d.parked {
		t.Fatalf("held %d, d parked %v within a LeaseDuration of the last unpark; want 1 held and d still parked", len(m.held), d.parked)
	}
	mt.clk.SetTime(m.nextUnpark)
	m.tick(mt.clk.Now())
	if d.parked {
		t.Fatalf("d still parked a LeaseDuration after the last unpark, below the share")
	}
}

// TestGroupMachineFollowsAllAfterAMemberLeft: when a member leaves the membership, a replica
// unparks at once (whenever it last did) the leases it heard that member hold, and for a
// LeaseDuration parks none of them, even where it holds parkAt leases: they expire within it.
// The leases of the members still there stay parked: nothing frees them.
func TestGroupMachineFollowsAllAfterAMemberLeft(t *testing.T) {
	mt := newMachineTest(t)
	m := mt.m
	ours, theirs, other := mtOurs+":pod", mtTheirs+":pod", "m2:pod"
	mt.clk.Step(mtRetry)
	m.tick(mt.clk.Now())
	mt.renewMembers(nil, []string{ours, theirs, other}) // share 2 of 4, parkAt 1
	for _, n := range []string{"a", "b", "c", "d"} {
		m.add(n)
	}
	b := mt.tickAcquire("a")
	mt.answerWon(b, "a", "b")
	for i, gl := range b.items {
		if gl.name == "c" {
			b.replies[i].rec.Instance = "m2" // c is held by the member that stays
		}
	}
	m.onAcquire(b)
	c, d := mt.gl("c"), mt.gl("d")
	if !c.parked || !d.parked {
		t.Fatalf("at the share: c parked %v, d parked %v; want both parked", c.parked, d.parked)
	}
	m.nextUnpark = mt.clk.Now().Add(time.Hour) // as if it had just unparked
	mt.clk.Step(mtRetry)
	m.tick(mt.clk.Now())
	mt.renewMembers(nil, []string{ours, other}) // theirs left: share 2, parkAt 2, still at it
	now := mt.clk.Now()
	m.tick(now)
	if d.parked || mt.m.at(d.next).After(now.Add(mtHeldTTL)) {
		t.Fatalf("its holder left: d parked %v, next in %v; want unparked, at its expiry", d.parked, mt.m.at(d.next).Sub(now))
	}
	if !c.parked {
		t.Fatalf("c, held by a member still there, unparked when another left")
	}
	m.follow(d, now.Add(mtHeldTTL), now)
	if d.parked {
		t.Fatalf("a lease of the member gone parked within a LeaseDuration of its leaving")
	}
	m.follow(c, now.Add(mtHeldTTL), now)
	if !c.parked {
		t.Fatalf("a lease of a member still there not parked after another left")
	}
	mt.clk.Step(mtLease)
	m.follow(d, mt.clk.Now().Add(mtHeldTTL), mt.clk.Now())
	if !d.parked {
		t.Fatalf("not parked a LeaseDuration after a member left, holding %d (parkAt %d)", len(m.held), m.parkAt())
	}

	// theirs was only counted out (its heartbeats failed): it comes back, and when another
	// member leaves, the leases theirs holds stay parked.
	mt.clk.Step(mtRetry)
	m.tick(mt.clk.Now())
	mt.renewMembers(nil, []string{ours, other, theirs})
	mt.clk.Step(mtRetry)
	m.tick(mt.clk.Now())
	mt.renewMembers(nil, []string{ours, theirs})
	now = mt.clk.Now()
	m.tick(now)
	m.follow(d, now.Add(mtHeldTTL), now)
	if !d.parked {
		t.Fatalf("a lease of a member that came back not parked when another left")
	}
}
