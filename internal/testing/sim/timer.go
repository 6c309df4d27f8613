package sim

import (
	"sort"
	"time"
)

// Timers of the nodes' clocks are fired by the driver, one per step like the messages, and a
// fired timer's time is handed over only to a goroutine blocked receiving from its channel.
//
// A runtime timer's channel keeps its value once it fired: a goroutine busy elsewhere when its
// timer fired (in a call made from a case of its select, say) finds it ready on its return,
// and if the driver has meanwhile made another case ready (cancelled its context), Go's select
// picks one of the two at random. A Timer's channel is unbuffered and the driver sends on it
// only with a non-blocking send after synctest.Wait, when every goroutine is blocked: the send
// succeeds only if the owner waits in a select on it, and then that select has no other ready
// case. A fired timer whose owner was not waiting stays fired, and the driver tries again at
// each later step; the owner tells the driver (Timer.C) when it comes back to its select.

type timerState int

const (
	timerIdle  timerState = iota // stopped, or its time was received
	timerArmed                   // waiting for its time, in World.timers
	timerFired                   // its time came; not received yet, in World.fired
)

// Timer is a one-shot timer of a node's clock, with the semantics of a Go 1.23+ time.Timer:
// Stop and Reset drop a time not yet received, and Stop reports whether there was one to stop
// (armed, or fired but not received).
type Timer struct {
	n     *Node
	c     chan time.Time
	when  time.Time
	seq   uint64 // per node: the order of timers due at one instant
	state timerState
}

// NewTimer returns a timer of the node's clock that fires after d. Call it from the goroutine
// that will receive from it; one goroutine per node arms timers, so their order is the same
// in every run.
func (n *Node) NewTimer(d time.Duration) *Timer {
	t := &Timer{n: n, c: make(chan time.Time)}
	w := n.w
	w.mu.Lock()
	w.arm(t, d)
	w.mu.Unlock()
	w.poke()
	return t
}

// C returns the timer's channel. Its callers evaluate it as they enter a select: when a timer
// of this node fired while its goroutine was not waiting, it wakes the driver, which then
// hands the time over once the goroutine blocks in the select.
func (t *Timer) C() <-chan time.Time {
	w := t.n.w
	w.mu.Lock()
	fired := t.n.fired > 0
	w.mu.Unlock()
	if fired {
		w.poke()
	}
	return t.c
}

// Stop stops the timer, dropping a time not received yet; it reports whether it did either.
func (t *Timer) Stop() bool {
	w := t.n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.disarm(t)
}

// Reset makes the timer fire after d, dropping a time not received yet; it reports whether
// the timer was armed or fired and not received.
func (t *Timer) Reset(d time.Duration) bool {
	w := t.n.w
	w.mu.Lock()
	was := w.disarm(t)
	w.arm(t, d)
	w.mu.Unlock()
	w.poke()
	return was
}

// DropTimers forgets every timer of n: call it once nothing will receive from them (the
// goroutine that armed them has returned).
func (n *Node) DropTimers() {
	w := n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, list := range [][]*Timer{w.timers, w.fired} {
		for _, t := range list {
			if t.n == n {
				w.disarm(t)
			}
		}
	}
}

func (w *World) arm(t *Timer, d time.Duration) {
	t.n.timerSeq++
	t.when, t.seq, t.state = time.Now().Add(d), t.n.timerSeq, timerArmed
	i := sort.Search(len(w.timers), func(i int) bool { return t.before(w.timers[i]) })
	w.timers = append(w.timers, nil)
	copy(w.timers[i+1:], w.timers[i:])
	w.timers[i] = t
}

// before orders timers by due time, then node, then arming order: never by goroutine timing.
func (t *Timer) before(u *Timer) bool {
	switch {
	case !t.when.Equal(u.when):
		return t.when.Before(u.when)
	case t.n.id != u.n.id:
		return t.n.id < u.n.id
	}
	return t.seq < u.seq
}

func (w *World) disarm(t *Timer) bool {
	switch t.state {
	case timerArmed:
		w.timers = remove(w.timers, t)
	case timerFired:
		w.fired = remove(w.fired, t)
		t.n.fired--
	default:
		return false
	}
	t.state = timerIdle
	return true
}

func remove(list []*Timer, t *Timer) []*Timer {
	for i, x := range list {
		if x == t {
			return append(list[:i:i], list[i+1:]...)
		}
	}
	return list
}

// Poke wakes the driver from SleepUntil: a goroutine of a node has something for it.
func (w *World) Poke() { w.poke() }

// poke wakes the driver from SleepUntil.
func (w *World) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// handOver gives the time of the first fired timer whose owner is waiting for it, if any.
func (w *World) handOver() bool {
	for _, t := range w.fired {
		if w.offer(t) {
			return true
		}
	}
	return false
}

// offer sends t's time if its owner is blocked receiving from its channel.
func (w *World) offer(t *Timer) bool {
	if t.n.paused(time.Now()) {
		return false // handed over when the pause ends
	}
	select {
	case t.c <- t.when:
	default:
		return false
	}
	w.fired = remove(w.fired, t)
	t.n.fired--
	t.state = timerIdle
	return true
}

// fireDue fires the earliest timer if it is due by now and not later than the next message
// (a timer and a message due at one instant: the timer first).
func (w *World) fireDue(now time.Time) bool {
	if len(w.timers) == 0 {
		return false
	}
	t := w.timers[0]
	if t.when.After(now) || (len(w.queue) > 0 && w.queue[0].at.Before(t.when)) {
		return false
	}
	w.timers = w.timers[1:]
	t.state = timerFired
	w.fired = append(w.fired, t)
	t.n.fired++
	w.offer(t)
	return true
}
