package election

import (
	"container/heap"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/pkg/lease"
)

// The per-lease state machine of a Group. The states and transitions are the table in
// docs/DESIGN.md ("Many leases: Group"); every switch on gl.state below mirrors a row of it.
// groupMachine is owned by the goroutine of Run's loop: nothing else reads or writes it. It
// never blocks and never calls the network or user code: it asks for that through
// groupEffects, whose results come back as calls of its on* methods.

// leaseState is the state of one lease of one Group replica.
type leaseState int8

const (
	stateIdle      leaseState = iota // not ours; queued for an attempt at next (unless Run stops)
	stateAcquiring                   // an acquire is in flight
	stateLeading                     // ours; OnStartedLeading running or returned by itself; renewed
	stateStopping                    // ours; OnStartedLeading's ctx cancelled on purpose; renewed until it returns
	stateReleasing                   // not ours; an owner-checked release is queued or in flight
	stateDraining                    // term lost (ctx cancelled); waiting for OnStartedLeading to return
	stateNotifying                   // OnStoppedLeading of the ended term is running
	numLeaseStates
)

var leaseStateNames = [...]string{"idle", "acquiring", "leading", "stopping", "releasing", "draining", "notifying"}

func (s leaseState) String() string {
	if s >= 0 && int(s) < len(leaseStateNames) {
		return leaseStateNames[s]
	}
	return "invalid"
}

// groupLease is one lease of a Group replica, owned by the machine, and kept by the Group
// (Group.leases) across Runs and Remove/Add for what its core knows. A Group of a million
// leases keeps a million of them on every replica, so it holds only what a lease needs: the
// term by its token (a term's record is always this replica's own: termRecord), no pointer
// but its name, and the cancel of a running term in the held set. A held term is renewed and
// released by its name and record (leasewire.HeldTerm), not with a leasekit.Lease: a Lease is
// about a kilobyte. An acquire batch builds a Lease for each attempt that goes on to the
// acquire script (groupRedis.acquire) and drops it with the reply.
type groupLease struct {
	name string
	core leaseCore // what this replica knows of the lease (term.go)

	next   instant // idle: when to try
	lastOK instant // leading/stopping: send time of the last successful acquire or renew
	token  int64   // the token of the term being led, released or wound down

	warnedBelow int64 // the last holder's token logged as below one seen before (warnBelow)

	heapIdx int32      // index in the try queue, -1 when not queued
	slot    uint16     // the lease's Redis Cluster hash slot (leasewire.LeaseSlot): renewals share a call per slot
	holder  uint16     // idle: its holder's instance as last heard, an index in holders (0: not known)
	state   leaseState // the fields from here on are bytes, so that a lease takes the least memory
	removed bool       // Remove was called (and no Add since): forgotten on reaching idle
	parked  bool       // idle, held by another, tried parkFor later than its holder's expiry (follow)

	workDone bool // leading: OnStartedLeading returned by itself
	notify   bool // releasing: a term was started, so OnStoppedLeading follows the release
	lost     bool // notifying: the term was lost (try again at once) rather than released
	relErr   bool // notifying: the release failed, so the record may still be in Redis
}

// acquireBatch is one batch of attempts; replies and leases are filled in by the batch
// goroutine.
type acquireBatch struct {
	sent    time.Time
	took    time.Duration
	items   []*groupLease
	replies []acquireReply
}

// termItem names one term of one lease in a renew or release batch.
type termItem struct {
	gl   *groupLease
	term lease.Record
}

// renewReply is the outcome of one renew of a batch.
type renewReply struct {
	sent time.Time // when its pipeline was sent; zero: the batch's send time
	ok   bool
	err  error
}

// renewBatch renews every held lease and refreshes the membership.
type renewBatch struct {
	sent    time.Time
	took    time.Duration
	items   []termItem
	replies []renewReply
	members []string // the live members after the heartbeat, "<instance>:<identity>"
	liveErr error    // of the heartbeat
}

// releaseBatch releases terms (owner-checked).
type releaseBatch struct {
	items []termItem
	errs  []error
}

// groupEffects is what the machine asks of the world. Each method returns at once; the
// outcome comes back later as onAcquire, onRenew, onRelease, onWorkReturned or onNotified.
type groupEffects interface {
	acquire(b *acquireBatch)
	renew(b *renewBatch)
	release(b *releaseBatch)
	// startTerm starts OnStartedLeading for the term on a goroutine of its own and returns the
	// function that cancels its ctx.
	startTerm(gl *groupLease, term lease.Record) func()
	// notifyStopped starts OnStoppedLeading of the lease's ended term.
	notifyStopped(gl *groupLease)
}

// groupMachine holds the state of every lease of one Run.
type groupMachine struct {
	cfg      *GroupConfig
	clock    clock.PassiveClock
	jitter   func() time.Duration
	fx       groupEffects
	logger   logr.Logger
	instance string // ours: events about our own terms carry no news

	// leases is the Group's (Group.leases): every lease named since the Group was made, kept
	// across Runs and Remove/Add so that what each one's core knows outlives them: its
	// tokens, which decide which won acquire may start a term (a record we sent a release for
	// is never resumed: a release whose reply was an error may still run and delete the key
	// under the term; nor one older than a token seen: a rollback), and the expiry of the
	// holder last heard of. A removed lease that reached idle is forgotten (forgotten): it
	// keeps its core and nothing else.
	leases    map[string]*groupLease
	queue     tryQueue
	held      map[*groupLease]func() // leading or stopping, with the cancel of OnStartedLeading's ctx
	active    int                    // leases not removed
	acquiring int                    // leases in stateAcquiring
	busy      int                    // leases not idle
	releases  []termItem             // releases not yet sent

	stopping                        bool // Run's ctx was cancelled
	membersKnown                    bool // the first heartbeat came back (or failed)
	renewBusy, acqBusy, releaseBusy bool
	nextRenew                       time.Time // when the held leases are renewed next
	nextBeat                        time.Time // when the next batch is sent for its heartbeat alone
	retry                           backoff
	anyParked                       bool      // a queued lease may be parked (follow)
	nextUnpark                      time.Time // unpark runs at most once per LeaseDuration, but before followAll
	followAll                       time.Time // until then nothing is parked: a member left
	live                            int
	lives                           [2]int
	// The holders of the leases this replica does not hold, for parking: the instances heard
	// holding a lease (groupLease.holder is an index in gone), those of the last heartbeat's
	// members, and which instances left the membership. Index 0 is a holder not known.
	holders    map[string]uint16
	gone       []bool
	members    map[string]struct{}
	unparkGone bool // a member left: unpark the leases of the members gone (tick)
	errs       errorLog

	epoch      time.Time     // what the leases' instants count from: the machine's start
	view       *groupView    // what Held, Check and Members read
	minOK      time.Time     // a lower bound of the held leases' lastOK (see recomputeMinOK)
	minOKValid bool          // minOK is exact
	wakeAt     time.Time     // when the loop planned to wake up next
	maxLag     time.Duration // the latest the loop ever woke up after wakeAt
	started    int           // terms started (for metrics and tests)
}

// newGroupMachine makes the machine of one Run over leases, the Group's table (nil: a new
// one). Every lease in it starts forgotten, as a Run that ended left it: add brings back those
// the Run campaigns for.
func newGroupMachine(cfg *GroupConfig, clk clock.PassiveClock, fx groupEffects, view *groupView, logger logr.Logger,
	instance string, leases map[string]*groupLease) *groupMachine {
	if leases == nil {
		leases = map[string]*groupLease{}
	}
	for _, gl := range leases {
		gl.removed, gl.holder = true, 0
	}
	return &groupMachine{
		cfg: cfg, clock: clk, jitter: jitter, fx: fx, view: view, logger: logger, instance: instance,
		leases: leases, held: map[*groupLease]func(){},
		retry:   newBackoff(cfg.RetryPeriod),
		live:    1,
		holders: map[string]uint16{}, gone: []bool{true},
		epoch: clk.Now(),
	}
}

// termRecord is the record of this replica's term of a lease with token: every term a Group
// replica leads or releases is one it won, and the acquire script writes exactly this record
// ("<instance>:<identity>" with the token) or resumes one equal to it.
func (m *groupMachine) termRecord(token int64) lease.Record {
	return lease.Record{Token: token, Instance: m.instance, Identity: m.cfg.Identity}
}

// instant is a time of the machine's, kept per lease as the nanoseconds since its epoch: two
// of them take 16 bytes, where two time.Time take 48. Run's clock keeps its monotonic reading
// in epoch, so that at and instant measure as time.Time does.
type instant int64

// instant returns t as an instant.
func (m *groupMachine) instant(t time.Time) instant { return instant(t.Sub(m.epoch)) }

// at returns the time of i.
func (m *groupMachine) at(i instant) time.Time { return m.epoch.Add(time.Duration(i)) }

// forgotten reports whether gl was removed and reached idle: the machine keeps only its core.
func (gl *groupLease) forgotten() bool { return gl.removed && gl.state == stateIdle }

// setState moves gl to s, keeping the held set and the counters.
func (m *groupMachine) setState(gl *groupLease, s leaseState) {
	was := gl.state
	if was == s {
		return
	}
	wasHeld, isHeld := was == stateLeading || was == stateStopping, s == stateLeading || s == stateStopping
	if wasHeld && !isHeld {
		delete(m.held, gl)
		m.view.drop(gl.name)
	}
	if isHeld && !wasHeld {
		m.held[gl] = nil // begin sets the cancel once the term started
		if lastOK := m.at(gl.lastOK); len(m.held) == 1 || lastOK.Before(m.minOK) {
			m.minOK = lastOK
		}
		m.view.set(gl.name, heldTerm{token: gl.token, lastOK: m.at(gl.lastOK)})
	}
	if was == stateAcquiring {
		m.acquiring--
	}
	if s == stateAcquiring {
		m.acquiring++
	}
	if was == stateIdle {
		m.busy++
	}
	if s == stateIdle {
		m.busy--
	}
	gl.state = s
}

// add is Group.Add applied: "any state + Add".
func (m *groupMachine) add(name string) {
	now := m.clock.Now()
	gl := m.leases[name]
	if gl == nil {
		gl = &groupLease{name: name, heapIdx: -1, slot: uint16(leasewire.LeaseSlot(name))}
		m.leases[name] = gl
		m.active++
		m.toIdle(gl, now)
		return
	}
	if gl.removed {
		gl.removed = false
		m.active++
	}
	// Add never resumes a term and never changes a non-idle state: a lease whose release is
	// in flight, or whose callbacks still run, is scheduled when it reaches idle.
	if gl.state == stateIdle && gl.heapIdx < 0 && !m.stopping {
		m.schedule(gl, now)
	}
}

// remove is Group.Remove applied: "any state + Remove".
func (m *groupMachine) remove(name string) {
	gl := m.leases[name]
	if gl == nil || gl.removed {
		return
	}
	gl.removed = true
	m.active--
	switch gl.state {
	case stateIdle:
		m.toIdle(gl, time.Time{}) // dequeued and forgotten
	case stateLeading:
		m.stopTerm(gl)
	case stateAcquiring, stateStopping, stateReleasing, stateDraining, stateNotifying:
		// They go on and are forgotten on reaching idle; a won acquire is released.
	}
}

// stopTerm ends a leading term on purpose (Remove, shed, Run stop): "leading + Remove | shed
// | Run stop".
func (m *groupMachine) stopTerm(gl *groupLease) {
	if gl.state != stateLeading {
		return
	}
	m.held[gl]()
	if gl.workDone {
		m.toReleasing(gl, gl.token, true)
		return
	}
	m.setState(gl, stateStopping)
}

// stop is Run's ctx cancelled: every leading lease stops, nothing is tried any more.
func (m *groupMachine) stop() {
	if m.stopping {
		return
	}
	m.stopping = true
	for gl := range m.held {
		m.stopTerm(gl)
	}
	for len(m.queue) > 0 {
		heap.Pop(&m.queue)
	}
}

// finished reports whether a stopping Run has nothing left to wait for.
func (m *groupMachine) finished() bool {
	return m.stopping && m.busy == 0 && !m.renewBusy && !m.acqBusy && !m.releaseBusy && len(m.releases) == 0
}

// toIdle moves gl to idle, queued for an attempt at next; a removed lease is forgotten and
// none is queued while Run stops.
func (m *groupMachine) toIdle(gl *groupLease, next time.Time) {
	m.setState(gl, stateIdle)
	gl.workDone, gl.notify, gl.lost, gl.relErr = false, false, false, false
	switch {
	case gl.removed: // forgotten
		if gl.heapIdx >= 0 {
			heap.Remove(&m.queue, int(gl.heapIdx))
		}
	case m.stopping:
		if gl.heapIdx >= 0 {
			heap.Remove(&m.queue, int(gl.heapIdx))
		}
	default:
		m.schedule(gl, next)
	}
}

// schedule queues an idle lease for an attempt at t, not parked.
func (m *groupMachine) schedule(gl *groupLease, t time.Time) {
	gl.next, gl.parked = m.instant(t), false
	if gl.heapIdx >= 0 {
		heap.Fix(&m.queue, int(gl.heapIdx))
	} else {
		heap.Push(&m.queue, gl)
	}
}

// toReleasing queues an owner-checked release of our term with token; notify tells whether
// a term was started (so OnStoppedLeading follows).
func (m *groupMachine) toReleasing(gl *groupLease, token int64, notify bool) {
	m.setState(gl, stateReleasing)
	gl.token, gl.notify = token, notify
	gl.core.guard.retire(token) // whatever the outcome, no term starts on this record again
	m.releases = append(m.releases, termItem{gl, m.termRecord(token)})
}

// toNotifying lets OnStoppedLeading of the ended term run.
func (m *groupMachine) toNotifying(gl *groupLease, lost bool) {
	m.setState(gl, stateNotifying)
	gl.lost = lost
	m.fx.notifyStopped(gl)
}

// lose ends a term at once: renew said 0 or the deadline passed. "leading|stopping + renew
// says 0 | deadline".
func (m *groupMachine) lose(gl *groupLease, reason string) {
	switch gl.state {
	case stateLeading, stateStopping:
		m.held[gl]()
		m.logger.V(2).Info("Stopped leading", "lease", gl.name, "token", gl.token, "reason", reason)
		if gl.workDone {
			// The work had returned by itself: there is nothing to wait for.
			m.setState(gl, stateDraining)
			m.toNotifying(gl, true)
			return
		}
		m.setState(gl, stateDraining)
	}
}

// begin starts a term: "acquiring + won".
func (m *groupMachine) begin(gl *groupLease, term lease.Record, sent time.Time) {
	gl.token, gl.lastOK, gl.workDone = term.Token, m.instant(sent), false
	m.setState(gl, stateLeading)
	m.started++
	m.logger.V(2).Info("Became leader", "lease", gl.name, "token", term.Token)
	m.cfg.Metrics.groupStarted(m.cfg.Group)
	m.held[gl] = m.fx.startTerm(gl, m.termRecord(term.Token))
}

// tick runs what is due at now: deadlines, the renew batch, the acquire batch, the release
// batch. It returns when the loop must wake up next.
func (m *groupMachine) tick(now time.Time) time.Time {
	if !m.wakeAt.IsZero() && now.After(m.wakeAt) {
		m.maxLag = max(m.maxLag, now.Sub(m.wakeAt))
	}
	cfg := m.cfg
	if !m.minOKValid {
		m.recomputeMinOK()
	}
	if len(m.held) > 0 && m.timing().overdue(m.minOK, now) {
		var late []*groupLease
		for gl := range m.held {
			if m.timing().overdue(m.at(gl.lastOK), now) {
				late = append(late, gl)
			}
		}
		if len(late) > 0 {
			m.logger.Info("Stopped leading leases: renew deadline exceeded", "leases", len(late))
		}
		for _, gl := range late {
			m.lose(gl, reasonDeadline)
		}
		m.recomputeMinOK()
	}
	if !m.renewBusy && !now.Before(minTime(m.nextRenew, m.nextBeat)) {
		m.startRenew(now)
	}
	if m.anyParked && !m.stopping {
		switch {
		case now.Before(m.followAll):
			if m.unparkGone {
				m.unpark(now, true)
			}
		case !now.Before(m.nextUnpark) && len(m.held) < m.parkAt():
			m.unpark(now, false)
		}
	}
	if !m.stopping && m.membersKnown && !m.acqBusy {
		m.startAcquire(now)
	}
	if !m.releaseBusy && len(m.releases) > 0 {
		b := &releaseBatch{items: m.releases}
		m.releases = nil
		m.releaseBusy = true
		m.fx.release(b)
	}
	next := now.Add(time.Hour)
	if !m.renewBusy {
		next = minTime(next, minTime(m.nextRenew, m.nextBeat))
	}
	if !m.stopping && m.membersKnown && !m.acqBusy && len(m.queue) > 0 && m.room() != 0 {
		next = minTime(next, m.at(m.queue[0].next))
	}
	if len(m.held) > 0 {
		next = minTime(next, m.minOK.Add(cfg.RenewDeadline))
	}
	if m.anyParked && !m.stopping && len(m.held) < m.parkAt() {
		next = minTime(next, maxTime(m.nextUnpark, m.followAll))
	}
	m.wakeAt = next
	return next
}

// recomputeMinOK finds the earliest lastOK of the held leases. Between two calls minOK is a
// lower bound: a lease that starts lowers it, one that stops or is renewed leaves it (a
// deadline check at a stale bound finds nobody late and recomputes it), so a round of the
// loop costs O(held) only once per renew batch, not on every wake-up.
func (m *groupMachine) recomputeMinOK() {
	m.minOK, m.minOKValid = time.Time{}, true
	first := true
	for gl := range m.held {
		if lastOK := m.at(gl.lastOK); first || lastOK.Before(m.minOK) {
			m.minOK, first = lastOK, false
		}
	}
}

// room is how many more leases MaxLeases allows to try; -1 without a cap.
func (m *groupMachine) room() int {
	if m.cfg.MaxLeases == 0 {
		return -1
	}
	return max(m.cfg.MaxLeases-len(m.held)-m.acquiring, 0)
}

// startRenew sends a renew batch: the held leases if their renewal is due, and the membership
// heartbeat, which every batch carries and which is due every RetryPeriod, so that the members
// learn of a join or a death about as soon as when every batch renewed.
func (m *groupMachine) startRenew(now time.Time) {
	b := &renewBatch{sent: now}
	if !now.Before(m.nextRenew) {
		b.items = make([]termItem, 0, len(m.held))
		for gl := range m.held {
			b.items = append(b.items, termItem{gl, m.termRecord(gl.token)})
		}
		m.nextRenew = now.Add(m.renewEvery())
	}
	m.renewBusy = true
	m.nextBeat = now.Add(m.cfg.RetryPeriod)
	m.fx.renew(b)
}

// renewEvery is the time between two renewals of the held leases that succeed: RD − 2 × the
// batch timeout, rounded down to a whole number of RetryPeriods (at least one), 6 s with
// client-go's timing (15 s, 10 s, 2 s). After a batch that timed out, the next, sent after its
// backoff (from 50 ms), still has nearly a whole timeout before RenewDeadline; and the batches
// that carry the membership heartbeat alone, every RetryPeriod between renewals, end before a
// renewal is due, so they never hold one up. Renewals are most of a settled Group's
// cost to Redis, and this rate is all the deadline asks for. Safety does not depend on it: a
// term is trusted until RenewDeadline after the send time of its last good renewal, whose lease
// lasts LeaseDuration.
func (m *groupMachine) renewEvery() time.Duration {
	c := m.cfg
	periods := (c.RenewDeadline - 2*renewTimeout(c)) / c.RetryPeriod
	return c.RetryPeriod * max(periods, 1)
}

// renewTimeout bounds a renew batch: RetryPeriod. A batch is a few pipelines, a fraction of a
// second even for tens of thousands of leases on a loaded machine; a shorter bound than a
// single Elector's call (timing.CallTimeout, up to RD/2) leaves room for a longer renewEvery.
func renewTimeout(c *GroupConfig) time.Duration { return c.RetryPeriod }

// startAcquire tries, in one batch, the idle leases due within coalesce, at most
// maxAcquireBatch of them: "idle + due". The rest stay due, for the next batch.
func (m *groupMachine) startAcquire(now time.Time) {
	room := m.room()
	b := &acquireBatch{sent: now}
	for len(m.queue) > 0 && m.queue[0].next <= m.instant(now.Add(coalesce)) && room != 0 && len(b.items) < maxAcquireBatch {
		gl := heap.Pop(&m.queue).(*groupLease)
		gl.parked = false
		m.setState(gl, stateAcquiring)
		b.items = append(b.items, gl)
		room--
	}
	if len(b.items) == 0 {
		return
	}
	m.acqBusy = true
	m.fx.acquire(b)
}

// onAcquire handles an acquire batch's replies, as the core decides (leaseCore.reply).
func (m *groupMachine) onAcquire(b *acquireBatch) {
	m.acqBusy = false
	cfg := m.cfg
	cfg.Metrics.groupBatch(cfg.Group, "acquire", b.took)
	now := m.clock.Now()
	t := m.timing()
	retry := func() time.Duration { return cfg.RetryPeriod }
	lateWins := 0
	failed := false
	var following []*groupLease // held by others
	// Leases found held by a token below one seen (a rollback restores many at once): one
	// line per batch, naming the first.
	below, belowLease, belowRec, belowSeen := 0, "", lease.Record{}, int64(0)
	for i, gl := range b.items {
		r := b.replies[i]
		switch gl.state {
		case stateAcquiring:
		case stateIdle, stateLeading, stateStopping, stateReleasing, stateDraining, stateNotifying:
			continue // no acquire of gl in flight: cannot happen
		}
		if r.sent.IsZero() {
			r.sent = b.sent
		}
		d := gl.core.reply(t, now, r, gl.removed || m.stopping, retry, true)
		switch d.verdict {
		case verdictFailed:
			failed = true
			m.errs.failed(m.logger, cfg.Metrics, cfg.Group, "acquire", r.err, now)
			m.toIdle(gl, now.Add(d.wait+m.jitter()))
		case verdictUntrusted:
			logUntrusted(m.logger.WithValues("lease", gl.name), r.rec)
			m.toIdle(gl, now.Add(d.wait+m.jitter()))
		case verdictDecline:
			// No term was started, so no callbacks: release it as a failed attempt.
			if d.late {
				lateWins++
			}
			m.toReleasing(gl, r.rec.Token, false)
		case verdictStart:
			m.begin(gl, r.rec, r.sent)
		case verdictReserved, verdictHeld:
			if d.below != 0 && r.rec.Token != gl.warnedBelow {
				gl.warnedBelow = r.rec.Token // once per record
				if below == 0 {
					belowLease, belowRec, belowSeen = gl.name, r.rec, d.below
				}
				below++
			}
			m.toIdle(gl, now.Add(d.wait+m.jitter()))
			gl.holder = m.holderOf(r.rec.Instance)
			if d.verdict == verdictHeld && gl.heapIdx >= 0 {
				following = append(following, gl)
			}
		}
	}
	// Parked or not by the share as the whole batch left it, not by the order of its replies.
	for _, gl := range following {
		m.follow(gl, m.at(gl.next), now)
	}
	if below > 0 {
		warnBelow(m.logger.WithValues("lease", belowLease, "leases", below), belowRec, belowSeen)
	}
	if lateWins > 0 {
		m.logger.Info("Acquire replies came after the renew deadline; releasing what they won", "leases", lateWins)
	}
	if lateWins == 0 && !failed {
		m.errs.succeeded(m.logger)
	}
}

// timing is the Group's lease timing, as the core reads it.
func (m *groupMachine) timing() leaseTiming {
	return leaseTiming{leaseDuration: m.cfg.LeaseDuration, renewDeadline: m.cfg.RenewDeadline, retryPeriod: m.cfg.RetryPeriod}
}

// onRenew handles a renew batch's replies and the heartbeat.
func (m *groupMachine) onRenew(b *renewBatch) {
	m.renewBusy = false
	cfg := m.cfg
	cfg.Metrics.groupBatch(cfg.Group, "renew", b.took)
	now := m.clock.Now()
	failed, lost := 0, 0
	for i, it := range b.items {
		gl, r := it.gl, b.replies[i]
		switch gl.state {
		case stateLeading, stateStopping:
		case stateIdle, stateAcquiring, stateReleasing, stateDraining, stateNotifying:
			continue // the term ended while the renew was in flight
		}
		if gl.token != it.term.Token {
			continue
		}
		switch {
		case r.err != nil:
			failed++
			m.errs.failed(m.logger, cfg.Metrics, cfg.Group, "renew", r.err, now)
		case !r.ok:
			lost++
			m.lose(gl, reasonLost)
		default:
			sent := r.sent
			if sent.IsZero() {
				sent = b.sent
			}
			if ok := m.instant(sent); ok > gl.lastOK {
				gl.lastOK = ok
				m.view.set(gl.name, heldTerm{token: gl.token, lastOK: sent})
			}
		}
	}
	if lost > 0 {
		m.logger.Info("Stopped leading leases: lease lost", "leases", lost)
	}
	if len(b.items) > 0 {
		m.minOKValid = false // renewed leases moved on; a heartbeat alone moved none
	}
	m.membersKnown = true
	if b.liveErr != nil {
		failed++
		m.errs.failed(m.logger, cfg.Metrics, cfg.Group, "heartbeat", b.liveErr, now)
	} else {
		if m.noteMembers(b.members) { // a smaller count is a member missing too
			// A member left or died: its leases expire within a LeaseDuration, and the
			// attempts at their expiry are what takes them over.
			m.followAll, m.unparkGone = now.Add(cfg.LeaseDuration), true
		}
		m.observeMembers(len(b.members))
	}
	if failed > 0 {
		m.nextRenew = now.Add(m.retry.next())
		m.nextBeat = m.nextRenew
	} else {
		m.errs.succeeded(m.logger)
		m.retry.reset()
	}
}

// onRelease handles a release batch's replies: "releasing + release reply".
func (m *groupMachine) onRelease(b *releaseBatch) {
	m.releaseBusy = false
	now := m.clock.Now()
	for i, it := range b.items {
		gl := it.gl
		switch gl.state {
		case stateReleasing:
		case stateIdle, stateAcquiring, stateLeading, stateStopping, stateDraining, stateNotifying:
			continue // cannot happen: a release is in flight only in releasing
		}
		err := b.errs[i]
		if err != nil {
			m.logger.Error(err, "Failed to release the lease; others take over when it expires", "lease", gl.name, "token", it.term.Token)
			m.cfg.Metrics.redisError(m.cfg.Group, "release", err)
		}
		if gl.notify {
			gl.relErr = err != nil
			m.toNotifying(gl, false)
			continue
		}
		// A won acquire that started no term. If the release failed, it may still run
		// (a command sent is not a command undone): wait until the record expired. The
		// wait is for the others' sake (an earlier attempt would only resume the record,
		// which the guard refuses, and extend its life); safety is the guard's.
		wait := m.cfg.RetryPeriod
		if err != nil {
			wait = m.cfg.LeaseDuration
		}
		m.toIdle(gl, now.Add(wait+m.jitter()))
	}
}

// onWorkReturned handles the return of a term's OnStartedLeading.
func (m *groupMachine) onWorkReturned(gl *groupLease, term lease.Record) {
	if gl.token != term.Token {
		return
	}
	switch gl.state {
	case stateLeading:
		gl.workDone = true // kept, as Elector keeps it, until asked to stop
	case stateStopping:
		m.toReleasing(gl, gl.token, true)
	case stateDraining:
		m.toNotifying(gl, true)
	case stateIdle, stateAcquiring, stateReleasing, stateNotifying:
		// cannot happen: the work of the current term has returned already
	}
}

// onNotified handles the return of a term's OnStoppedLeading: "notifying + returned".
func (m *groupMachine) onNotified(gl *groupLease, term lease.Record) {
	if gl.token != term.Token {
		return
	}
	switch gl.state {
	case stateNotifying:
		now := m.clock.Now()
		next := now // lost: try again at once
		if !gl.lost || gl.relErr {
			// Released: leave it to the others for a lease duration. A failed release may
			// still run, so the record must have expired before this replica tries again.
			next = now.Add(m.cfg.LeaseDuration + m.jitter())
		}
		m.toIdle(gl, next)
	case stateIdle, stateAcquiring, stateLeading, stateStopping, stateReleasing, stateDraining:
		// cannot happen: OnStoppedLeading runs only in notifying
	}
}

// onEvent handles an announcement on a lease's channel, as the core decides (leaseCore.event).
func (m *groupMachine) onEvent(name string, ev leasekit.Event) {
	gl := m.leases[name]
	if gl == nil || gl.forgotten() || m.stopping || ev.Record.Instance == m.instance {
		return
	}
	switch gl.state {
	case stateIdle, stateAcquiring: // acquiring: the reply tells more, unless it is an error
	case stateLeading, stateStopping, stateReleasing, stateDraining, stateNotifying:
		return // the replies of this replica's own calls tell it more
	}
	now := m.clock.Now()
	expiry := gl.core.known.at // before a release clears it
	current, wake, rearm := gl.core.event(m.timing(), now, ev)
	switch {
	case !current || gl.state != stateIdle:
	case wake:
		if len(m.held) < m.share() {
			m.schedule(gl, now)
		} else if gl.parked && gl.heapIdx >= 0 {
			m.schedule(gl, maxTime(expiry, now)) // free now: its parking is over
		}
	case rearm >= 0 && gl.heapIdx >= 0:
		gl.holder = m.holderOf(ev.Record.Instance)
		m.follow(gl, now.Add(rearm+m.jitter()), now)
	}
}

// holderOf is the index of instance in holders, made if new; 0 (not known) once holders is
// full, so that forged events naming ever new instances cost a bounded table.
func (m *groupMachine) holderOf(instance string) uint16 {
	if id, ok := m.holders[instance]; ok {
		return id
	}
	if len(m.gone) > math.MaxUint16 {
		return 0
	}
	id := uint16(len(m.gone))
	m.holders[instance] = id
	m.gone = append(m.gone, false)
	return id
}

// noteMembers records the members of a heartbeat and reports whether one of the last
// heartbeat's members is missing: it left or died, and the leases heard held by it are
// unparked (unpark) and not parked again for a LeaseDuration (follow). A process makes a new
// instance at each start, but a live one whose heartbeats all failed for RenewDeadline was
// counted out and comes back: it is no longer gone.
func (m *groupMachine) noteMembers(members []string) (left bool) {
	live := make(map[string]struct{}, len(members))
	for _, mem := range members {
		instance, _, _ := strings.Cut(mem, ":")
		live[instance] = struct{}{}
		if id, ok := m.holders[instance]; ok {
			m.gone[id] = false
		}
	}
	for instance := range m.members {
		if _, ok := live[instance]; !ok {
			m.gone[m.holderOf(instance)] = true
			left = true
		}
	}
	m.members = live
	return left
}

// parkFor is how much later than its holder's expiry a replica at or above its fair share
// tries a lease that another replica holds (follow): 3 × LeaseDuration, or longer where the
// leases it does not hold would otherwise be tried more than parkRate times a second.
func (m *groupMachine) parkFor() time.Duration {
	others := max(m.active-len(m.held), 0)
	return max(3*m.cfg.LeaseDuration, time.Duration(others)*time.Second/parkRate)
}

// parkRate bounds the parked attempts of a settled replica, per second: 1,000, a few percent
// of a core on the replica and in Redis. With 1,000,000 leases over 10 replicas, each tries
// the 900,000 it does not hold every 15 minutes rather than every minute (150,000 attempts a
// second among them); none of those attempts finds a lease free that the ways of follow do
// not bring back sooner.
const parkRate = 1000

// follow queues a queued idle lease that another replica holds until at (as a reply or an
// event said) for an attempt then. A replica that holds parkAt leases or more parks it
// instead: tries it parkFor later. That attempt at the expiry almost always finds the lease
// renewed, and such attempts, (R−1)·K per LeaseDuration, were most of an idle Group's cost to
// Redis. What frees a lease brings the attempts back: a release wakes or unparks the lease
// (onEvent); a replica that dies or stops leaves the membership, and for a LeaseDuration after
// that, within which its leases expire, the others park none of the leases they heard it hold
// (or whose holder they never heard), whatever they hold, and park the others' leases
// (followAll); a holder that loses a term tries that lease again itself. Only a release that
// failed after Remove frees a lease silently: the others find it at their parked attempt.
func (m *groupMachine) follow(gl *groupLease, at, now time.Time) {
	park := len(m.held) >= m.parkAt()
	if now.Before(m.followAll) {
		park = !m.gone[gl.holder] // the leases of the members gone are about to be free
	}
	if m.stopping || !park {
		m.schedule(gl, at)
		return
	}
	m.schedule(gl, at.Add(m.parkFor()))
	gl.parked, m.anyParked = true, true
}

// parkAt is the fewest leases a replica holds when every lease is held and none holds more
// than its share, K − (R−1)·share, so that every replica of a settled Group parks (with
// K = 100,000 and R = 3, replicas may hold 33,334, 33,334 and 33,332); at least 1, at most
// the share. A replica below it, or that holds nothing, parks nothing.
func (m *groupMachine) parkAt() int {
	share := m.share()
	return max(min(m.active-(max(m.live, 1)-1)*share, share), 1)
}

// unpark moves parked leases back to their holders' expiry as last heard (knownExpiry, which
// parkFor may have moved since they were parked); those whose expiry passed are spread evenly
// over the next RetryPeriod (a dead replica's leases at once would be one large burst). After a
// member left (goneOnly) it moves only the leases of the members gone and of holders not
// known: the others are held by live members, and trying the leases of every member at once
// after one died (each survivor is below the new parkAt) was 900,000 attempts per survivor at
// 1,000,000 leases. Else (below parkAt) it moves every parked lease, at most once per
// LeaseDuration, so that a replica that goes below and back (a term lost and taken again) costs
// no more attempts than following every lease at its expiry would.
func (m *groupMachine) unpark(now time.Time, goneOnly bool) {
	if goneOnly {
		m.unparkGone = false
	} else {
		m.nextUnpark = now.Add(m.cfg.LeaseDuration)
	}
	m.anyParked = false
	var past []*groupLease
	for _, gl := range m.queue {
		if !gl.parked {
			continue
		}
		if goneOnly && !m.gone[gl.holder] {
			m.anyParked = true
			continue
		}
		gl.parked = false
		if gl.next = m.instant(gl.core.known.at); gl.core.known.at.Before(now) {
			past = append(past, gl)
		}
	}
	for i, gl := range past {
		gl.next = m.instant(now.Add(m.cfg.RetryPeriod * time.Duration(i) / time.Duration(len(past))))
	}
	heap.Init(&m.queue)
}

// share is the number of leases this replica aims to hold: ceil(K/R), capped by MaxLeases.
func (m *groupMachine) share() int {
	live := max(m.live, 1)
	s := (m.active + live - 1) / live
	if m.cfg.MaxLeases > 0 {
		s = min(s, m.cfg.MaxLeases)
	}
	return s
}

// observeMembers records the live member count and sheds what this replica holds beyond
// its share once the count was the same twice in a row (a replica that just died is still
// counted for a moment; shedding on that would move leases twice).
func (m *groupMachine) observeMembers(live int) {
	m.lives = [2]int{m.lives[1], live}
	if m.live != live {
		m.live = live
		m.view.setLive(live)
	}
	// Nothing to shed while the held leases, leading or not, are within the share: the
	// common case, checked before a slice of them is made at every renew batch.
	if m.stopping || m.lives[0] != m.lives[1] || len(m.held) <= m.share() {
		return
	}
	var mine []*groupLease
	for gl := range m.held {
		if gl.state == stateLeading {
			mine = append(mine, gl)
		}
	}
	excess := len(mine) - m.share()
	if excess <= 0 {
		return
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].name < mine[j].name })
	m.logger.Info("Shedding leases beyond the fair share", "held", len(mine), "members", live, "leases", m.active, "shed", excess)
	for _, gl := range mine[:excess] {
		m.stopTerm(gl)
	}
	m.cfg.Metrics.groupShed(m.cfg.Group, excess)
}

// coalesce groups attempts due within this window into one batch.
const coalesce = 5 * time.Millisecond

// maxAcquireBatch bounds the attempts of one acquire batch. Its replies come back to the loop
// together, and a won lease starts a term only if that is before its chunk's send time +
// RenewDeadline: a batch of every lease of a large Group (a replica's start, with 1,000,000
// leases) took longer than that on a loaded machine, so that its early wins were released as
// late and the next batch did the same. 16 chunks of 256 take well under a second.
const maxAcquireBatch = 16 * batchChunk

// tryQueue is a min-heap of idle leases by their next attempt.
type tryQueue []*groupLease

func (q tryQueue) Len() int           { return len(q) }
func (q tryQueue) Less(i, j int) bool { return q[i].next < q[j].next }
func (q tryQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].heapIdx, q[j].heapIdx = int32(i), int32(j)
}
func (q *tryQueue) Push(x any) {
	gl := x.(*groupLease)
	gl.heapIdx = int32(len(*q))
	*q = append(*q, gl)
}
func (q *tryQueue) Pop() any {
	old := *q
	gl := old[len(old)-1]
	old[len(old)-1] = nil
	gl.heapIdx = -1
	*q = old[:len(old)-1]
	return gl
}
