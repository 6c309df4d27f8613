package election

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/elector/elector/internal/testing/sim"
)

// The simulator's invariants: the recorder collects what the callbacks of every replica do,
// from their own goroutines, and the driver checks it at each step, in an order that does not
// depend on how those goroutines were scheduled within one simulated instant.

type evKind int

// At one instant, ends are applied before starts: a term that ends as another starts does not
// overlap it.
const (
	evCancel   evKind = iota // OnStartedLeading's ctx was cancelled
	evStopped                // OnStoppedLeading was called
	evReturned               // OnStartedLeading returned
	evStarted                // OnStartedLeading was called
)

var evNames = [...]string{"ctx cancelled", "OnStoppedLeading", "OnStartedLeading returned", "OnStartedLeading"}

type simEvent struct {
	at       time.Time
	kind     evKind
	replica  int
	gen      int // incarnation: a crashed replica restarts as the next one
	token    int64
	instance string
}

// simTerm is one started term: [start, end) while its ctx is live.
type simTerm struct {
	replica, gen int
	token        int64
	instance     string
	start, end   time.Time
	live         bool
	dataLoss     bool // Redis lost (or rolled back) data while it was live
}

type genState struct {
	working, awaitingStop, dead bool
}

// recorder checks the invariants of docs/MODEL.md's simulator section.
type recorder struct {
	mu      sync.Mutex
	pending []simEvent

	w            *sim.World
	terms        []*simTerm
	gens         map[[2]int]*genState
	maxToken     int64
	last         *simTerm  // the term with maxToken
	lastDataLoss time.Time // of the last restart without data or restore of a snapshot
	violations   []string
	ends         int // terms ended (ctx cancelled or crashed)
	exceptions   map[string]int
	pauses       []simPause    // replicas paused (the Group driver's fault)
	margin       time.Duration // LeaseDuration − RenewDeadline: a shorter pause is no excuse
	beyond       map[int]bool  // replicas whose clocks drift beyond the documented bound
	live         int           // terms whose ctx is live now
}

// simPause is a replica incarnation paused from start to end: none of its goroutines ran.
type simPause struct {
	replica, gen int
	start, end   time.Time
}

// paused records a pause of a replica incarnation.
func (r *recorder) paused(replica, gen int, start, end time.Time) {
	r.pauses = append(r.pauses, simPause{replica, gen, start, end})
}

// longPause finds a pause of o's replica while o was live, before now, that lasted at least
// the margin (docs/DESIGN.md: safe while no pause outlasts LeaseDuration − RenewDeadline).
func (r *recorder) longPause(o *simTerm, now time.Time) (simPause, bool) {
	for _, p := range r.pauses {
		if p.replica == o.replica && p.gen == o.gen && p.end.After(o.start) && p.start.Before(now) && p.end.Sub(p.start) >= r.margin {
			return p, true
		}
	}
	return simPause{}, false
}

func newRecorder(w *sim.World) *recorder {
	return &recorder{w: w, gens: map[[2]int]*genState{}, exceptions: map[string]int{}, beyond: map[int]bool{}}
}

// add is called by the callbacks, from any goroutine.
func (r *recorder) add(ev simEvent) {
	ev.at = time.Now()
	r.mu.Lock()
	r.pending = append(r.pending, ev)
	r.mu.Unlock()
}

// flush checks the events recorded since the last step; the driver's goroutine only.
func (r *recorder) flush() {
	r.mu.Lock()
	evs := r.pending
	r.pending = nil
	r.mu.Unlock()
	// Within one instant: the ends of terms of other replicas first, then the starts, then the
	// ends of the terms that started in this very instant (a term starts before it ends).
	startedAt := map[[2]int]time.Time{}
	for _, ev := range evs {
		if ev.kind == evStarted {
			startedAt[[2]int{ev.replica, ev.gen}] = ev.at
		}
	}
	phase := func(ev simEvent) int {
		switch {
		case ev.kind == evStarted:
			return 1
		case startedAt[[2]int{ev.replica, ev.gen}].Equal(ev.at):
			return 2
		}
		return 0
	}
	sort.SliceStable(evs, func(i, j int) bool {
		a, b := evs[i], evs[j]
		switch {
		case !a.at.Equal(b.at):
			return a.at.Before(b.at)
		case phase(a) != phase(b):
			return phase(a) < phase(b)
		case a.replica != b.replica:
			return a.replica < b.replica
		case a.gen != b.gen:
			return a.gen < b.gen
		}
		return a.kind < b.kind
	})
	for _, ev := range evs {
		r.apply(ev)
	}
}

func (r *recorder) gen(replica, gen int) *genState {
	k := [2]int{replica, gen}
	g := r.gens[k]
	if g == nil {
		g = &genState{}
		r.gens[k] = g
	}
	return g
}

func (r *recorder) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.violations = append(r.violations, fmt.Sprintf("%.6fs %s", r.w.Elapsed().Seconds(), msg))
	r.w.Tracef("VIOLATION: %s", msg)
}

func (r *recorder) except(label, format string, args ...any) {
	r.exceptions[label]++
	r.w.Tracef("exception (%s): %s", label, fmt.Sprintf(format, args...))
}

func (r *recorder) apply(ev simEvent) {
	g := r.gen(ev.replica, ev.gen)
	if g.dead {
		return // a crashed process: its goroutines linger in the simulation, not in the world
	}
	r.w.Tracef("r%d.%d: %s token %d", ev.replica, ev.gen, evNames[ev.kind], ev.token)
	switch ev.kind {
	case evCancel:
		r.endTerm(ev.replica, ev.gen, ev.at)
	case evStopped:
		if !g.awaitingStop {
			r.fail("r%d.%d: OnStoppedLeading without a term", ev.replica, ev.gen)
		}
		g.awaitingStop = false
	case evReturned:
		g.working = false
	case evStarted:
		if g.working || g.awaitingStop {
			r.fail("r%d.%d: OnStartedLeading (token %d) before the previous term's callbacks ended", ev.replica, ev.gen, ev.token)
		}
		g.working, g.awaitingStop = true, true
		r.startTerm(ev)
	}
}

func (r *recorder) endTerm(replica, gen int, at time.Time) {
	for _, t := range r.terms {
		if t.live && t.replica == replica && t.gen == gen {
			t.live, t.end = false, at
			r.ends++
			r.live--
		}
	}
}

func (r *recorder) startTerm(ev simEvent) {
	t := &simTerm{replica: ev.replica, gen: ev.gen, token: ev.token, instance: ev.instance, start: ev.at, live: true}
	// A term won before Redis last lost data but started after it (its acquire's reply, or
	// the rest of its batch, came later) holds a lease Redis forgot, as a term live at the loss
	// does. A token is the server's clock in microseconds when the term was won.
	t.dataLoss = !r.lastDataLoss.IsZero() && t.token < r.lastDataLoss.UnixMicro()
	if t.dataLoss {
		r.w.Tracef("token %d was won before Redis lost data", t.token)
	}
	for _, o := range r.terms {
		if !o.live {
			continue
		}
		if o.dataLoss || t.dataLoss {
			r.except("data loss", "r%d token %d starts while r%d token %d works, one of them on a lease Redis lost", t.replica, t.token, o.replica, o.token)
			continue
		}
		if p, ok := r.longPause(o, t.start); ok {
			r.except("pause", "r%d token %d starts while r%d token %d works, paused for %v (margin %v)", t.replica, t.token, o.replica, o.token, p.end.Sub(p.start), r.margin)
			continue
		}
		if r.beyond[o.replica] || r.beyond[t.replica] {
			r.except("drift beyond the bound", "r%d token %d starts while r%d token %d works, one of them on a clock off by more than %d ppm", t.replica, t.token, o.replica, o.token, simDriftBound)
			continue
		}
		r.fail("two leaders: r%d.%d token %d starts while r%d.%d token %d is live", t.replica, t.gen, t.token, o.replica, o.gen, o.token)
	}
	resumed := r.last != nil && r.last.token == t.token && r.last.instance == t.instance
	if t.token < r.maxToken || (t.token == r.maxToken && !resumed) {
		switch {
		case t.dataLoss || (r.last != nil && r.lastDataLoss.After(r.last.start)):
			r.except("data loss", "token %d after token %d", t.token, r.maxToken)
		case r.beyond[t.replica]:
			// A clock slower than the bound lets an acquire's late reply look in time: the
			// term starts after its lease expired and a newer one began, as with an overlap.
			r.except("drift beyond the bound", "token %d (r%d) after token %d, its clock off by more than %d ppm", t.token, t.replica, r.maxToken, simDriftBound)
		default:
			r.fail("fencing token %d (r%d) after token %d (r%d)", t.token, t.replica, r.maxToken, r.last.replica)
		}
	}
	if t.token >= r.maxToken {
		r.maxToken, r.last = t.token, t
	}
	r.terms = append(r.terms, t)
	r.live++
}

// crash ends a replica's incarnation: its work stops with the process.
func (r *recorder) crash(replica, gen int) {
	r.flush()
	r.endTerm(replica, gen, time.Now())
	r.gen(replica, gen).dead = true
}

// dataLost marks the live terms: Redis no longer holds what they were granted.
func (r *recorder) dataLost() {
	r.flush()
	r.lastDataLoss = time.Now()
	for _, t := range r.terms {
		if t.live {
			t.dataLoss = true
		}
	}
}

// leading reports whether some term is live.
func (r *recorder) leading() bool { return r.live > 0 }
