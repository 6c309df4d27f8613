package election

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/testing/sim"
)

// The world features of issue 24 that came last (docs/MODEL.md, "Deterministic simulator"):
// clocks that drift, callbacks that panic, `elector resign` as an actor, and the counters that
// show each feature is reached.

// simDriftBound is the documented bound of a replica's clock rate against Redis's, in parts
// per million: timing.DriftMargin (1% + 2ms) is the allowance for two clocks, the leader's
// slow and a follower's fast, so each may be off by 0.5% (docs/MODEL.md, finding 2;
// docs/DESIGN.md, "Timing model").
const simDriftBound = 5_000

// drawDrift draws a replica's clock rate within the bound: at one of its ends one time in
// three, anywhere within it otherwise.
func (d *simBase) drawDrift() int64 {
	if d.rng.IntN(3) == 0 {
		if d.rng.IntN(2) == 0 {
			return simDriftBound
		}
		return -simDriftBound
	}
	return d.rng.Int64N(2*simDriftBound+1) - simDriftBound
}

// drawBeyond draws, in one seed of eight, a replica whose clock is slow beyond the bound (10% to
// 40%): its renew deadline can pass after its lease expired in Redis. An overlap with one of its
// terms is the labelled exception "drift beyond the bound"; -1: none.
func (d *simBase) drawBeyond(n int) (replica int, ppm int64) {
	if d.rng.IntN(8) != 0 {
		return -1, 0
	}
	return d.rng.IntN(n), -100_000 - d.rng.Int64N(300_001)
}

// noteDrift records a replica's rate: the slowest stretches the liveness bounds.
func (d *simBase) noteDrift(ppm int64) { d.slowest = min(d.slowest, ppm) }

// onSlowest returns how long a duration of the slowest replica's clock lasts on Redis's.
func (d *simBase) onSlowest(q time.Duration) time.Duration {
	return time.Duration(float64(q)*1e6/float64(1_000_000+d.slowest)) + time.Millisecond
}

// driftClock reads a replica's drifting clock: Now and Since on its local time.
type driftClock struct{ drift sim.Drift }

func (c driftClock) Now() time.Time                  { return c.drift.Now() }
func (c driftClock) Since(t time.Time) time.Duration { return c.drift.Now().Sub(t) }

// What OnStoppedLeading does.
const (
	stopPrompt = iota // returns at once
	stopSlow          // takes a while
	stopPanic         // panics, half the time after a while
	stopModes
)

var stopNames = [...]string{"prompt", "slow", "panics"}

// drawStop draws a replica's OnStoppedLeading: slow one time in four, panicking one in eight.
func (d *simBase) drawStop() int {
	switch d.rng.IntN(8) {
	case 0, 1:
		return stopSlow
	case 2:
		return stopPanic
	}
	return stopPrompt
}

// drawGroupStop draws a Group replica's OnStoppedLeading: slow one time in two (as before
// panics came), panicking one in six.
func (d *simBase) drawGroupStop() int {
	switch d.rng.IntN(6) {
	case 0, 1, 2:
		return stopSlow
	case 3:
		return stopPanic
	}
	return stopPrompt
}

// simPanic is what the simulator's callbacks panic with.
type simPanic string

// errSimPanic wraps the panic that came out of an Elector's Run (its OnStoppedLeading's).
var errSimPanic = errors.New("Run panicked")

// simCounts counts how often each feature of the world was exercised, from any goroutine.
type simCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *simCounts) add(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
}

func (c *simCounts) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}

// featureTally sums the counts of many seeds: the total of each, and how many seeds had it.
type featureTally struct{ total, seeds map[string]int }

func (f *featureTally) add(counts map[string]int) {
	if f.total == nil {
		f.total, f.seeds = map[string]int{}, map[string]int{}
	}
	for k, v := range counts {
		f.total[k] += v
		if v > 0 {
			f.seeds[k]++
		}
	}
}

// String lists each feature as "name total/seeds", in name order.
func (f *featureTally) String() string {
	parts := make([]string, 0, len(f.total))
	for _, k := range slices.Sorted(maps.Keys(f.total)) {
		parts = append(parts, fmt.Sprintf("%s %d/%d", k, f.total[k], f.seeds[k]))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// reasonSink is the logger of an Elector's Run in the simulator: it keeps the reason of the
// last "Stopped leading" line (term.go stepDown), which says whether the term is released
// (resigned; stopped with ReleaseOnCancel), and discards everything else. Under the
// stalled-log fault every line blocks its writer until the stall ends, as a write to a stderr
// pipe that nobody reads blocks until the reader comes back. Writers take turns, as klog's
// writers do under its lock, through a channel (a goroutine blocked on it is durably blocked
// for synctest; on a mutex it would not be): they wake one after another, in the order they
// came, and seeds replay.
type reasonSink struct {
	mu           sync.Mutex
	reason       string
	stalledUntil time.Time
	turn         chan struct{} // holds a token while a writer writes
}

func newReasonSink() *reasonSink { return &reasonSink{turn: make(chan struct{}, 1)} }

func (s *reasonSink) Init(logr.RuntimeInfo)             {}
func (s *reasonSink) Enabled(level int) bool            { return level == 0 }
func (s *reasonSink) Error(error, string, ...any)       { s.write() }
func (s *reasonSink) WithValues(...any) logr.LogSink    { return s }
func (s *reasonSink) WithName(string) logr.LogSink      { return s }
func (s *reasonSink) Info(_ int, msg string, kv ...any) { s.write(); s.note(msg, kv) }

// stall makes every line written before until block until then.
func (s *reasonSink) stall(until time.Time) {
	s.mu.Lock()
	s.stalledUntil = until
	s.mu.Unlock()
}

// write waits for its turn and, while the sink is stalled, for the stall's end (in the
// bubble's virtual time).
func (s *reasonSink) write() {
	s.turn <- struct{}{}
	defer func() { <-s.turn }()
	s.mu.Lock()
	until := s.stalledUntil
	s.mu.Unlock()
	if d := time.Until(until); d > 0 {
		time.Sleep(d)
	}
}

func (s *reasonSink) note(msg string, kv []any) {
	if msg != "Stopped leading" {
		return
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "reason" {
			s.mu.Lock()
			s.reason, _ = kv[i+1].(string)
			s.mu.Unlock()
		}
	}
}

// take returns the last reason and forgets it.
func (s *reasonSink) take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reason
	s.reason = ""
	return r
}

// errNoHolder is the outcome of an `elector resign` that found nobody holding the lease.
var errNoHolder = errors.New("lease has no holder: nothing to resign")

// resignRequest is `elector resign` (cmd/elector resign.go) as an actor of the world: a client
// of its own reads the holder's record, then writes the request naming that term, as
// lease.RequestResign with Term does (resign.lua), with a target that is present (a running
// replica), absent (no such replica), late (a replica that is down now and comes back later),
// vanishing (a live replica that crashes right after the registry check) or none, and a
// hold-off within the replicas' own; the registry refuses some, as `elector resign` does. One time in three the request goes out
// late, up to two lease durations after the read: the term it names may have ended.
func (d *simDriver) resignRequest() {
	d.cliN++
	node := d.w.NewNode(fmt.Sprintf("cli%d", d.cliN))
	target, kind := "", "anyone"
	switch d.rng.IntN(5) {
	case 1:
		var up []*simReplica
		for _, r := range d.replicas {
			if r.running && !r.crashed {
				up = append(up, r)
			}
		}
		if len(up) > 0 {
			target, kind = up[d.rng.IntN(len(up))].identity, "present"
		}
	case 2:
		target, kind = "absent", "absent"
	case 3:
		r := d.pick()
		target, kind = r.identity, "late"
		if r.running && !r.crashed { // down now, back later: maybe after the hold-off
			dt := d.dur(d.timing.lease/2, 2*d.timing.lease)
			d.w.Tracef("user: cancel Run of %s, the late target; run again in %v", r.node.Name(), dt)
			r.cancel()
			e := r.e
			d.after(dt, "run again", func() {
				if !r.crashed && !r.running && r.e == e && !d.busy(r) {
					d.restart(r)
				}
			})
		}
	}
	var vanish *simReplica
	if target == "" && d.rng.IntN(5) == 0 { // case 4 in part: --to a live replica that crashes right after the check
		for _, r := range d.replicas {
			if r.running && !r.crashed && !r.e.IsLeader() {
				vanish = r
			}
		}
		if vanish != nil {
			target, kind = vanish.identity, "vanishing"
		}
	}
	holdOff := max(d.dur(time.Millisecond, d.holdOff).Truncate(time.Millisecond), time.Millisecond)
	timeout := d.dur(d.timing.lease, 3*d.timing.lease).Truncate(time.Millisecond)
	var delay time.Duration
	if d.rng.IntN(3) == 0 || vanish != nil {
		delay = d.dur(0, 2*d.timing.lease)
	}
	if vanish != nil { // the check (right after the read) sees it live; it crashes before the write
		dt := d.dur(0, delay)
		d.after(dt, "the target vanishes", func() {
			if !vanish.crashed {
				d.crashReplica(vanish, "actor")
			}
		})
	}
	name := fmt.Sprintf("%s: elector resign --to=%q --hold-off=%v --timeout=%v (target %s, written %v after the read)", node.Name(), target, holdOff, timeout, kind, delay)
	d.w.Tracef("user: %s", name)
	d.counts.add("resign request " + kind)
	keys, scripts, w := d.keys, d.scripts, d.w
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), delay+2*d.timing.lease)
		defer cancel()
		done <- cliResign(ctx, node, scripts, keys, target, holdOff, timeout, delay)
		w.Poke()
	}()
	d.ops = append(d.ops, simOp{name: name, done: done, after: func(err error) {
		switch {
		case err == nil:
			d.counts.add("resign request written")
		case errors.Is(err, leasekit.ErrOtherTerm):
			d.counts.add("resign request for an ended term")
		case errors.Is(err, leasekit.ErrTargetIsHolder):
			d.counts.add("resign request to the holder")
		case errors.Is(err, errNoHolder):
			d.counts.add("resign request without holder")
		case errors.Is(err, errRefused):
			d.counts.add("resign request refused (" + kind + ")")
		}
	}})
}

// cliResign is what `elector resign` sends: GET the lease (Observe's first read), the check of
// the candidate registry (cliCheck), then, after delay, resign.lua with the record read,
// decoded as lease.RequestResign decodes it.
func cliResign(ctx context.Context, node *sim.Node, scripts sim.Scripts, k leasewire.Keys, target string, holdOff, timeout, delay time.Duration) error {
	v, err := node.Call(ctx, "GET", "", nil, []string{"GET", k.Lease})
	if err != nil {
		return fmt.Errorf("read the holder: %w", err)
	}
	if v == nil {
		return errNoHolder
	}
	rec, err := leasekit.ParseRecord(asString(v))
	if err != nil {
		return fmt.Errorf("read the holder: %w", err)
	}
	if err := cliCheck(ctx, node, k, rec.Identity, target); err != nil {
		return err
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	args := []string{millis(holdOff), target, millis(timeout), k.Events, rec.String()}
	v, err = node.Call(ctx, "resign", scripts.Resign, []string{k.Lease, k.Resign}, args)
	var rerr sim.Error
	switch {
	case errors.As(err, &rerr) && strings.HasPrefix(string(rerr), "ERR resign target is the holder"):
		return fmt.Errorf("request resign: %w: %q", leasekit.ErrTargetIsHolder, target)
	case err != nil:
		return fmt.Errorf("request resign: %w", err)
	}
	reply, _ := v.([]any)
	if len(reply) != 2 {
		return fmt.Errorf("request resign: unexpected reply %v", v)
	}
	if n, _ := reply[0].(int64); n != 1 {
		return fmt.Errorf("request resign: token %d: %w (reply %s)", rec.Token, leasekit.ErrOtherTerm, sim.FormatReply(v))
	}
	return nil
}
