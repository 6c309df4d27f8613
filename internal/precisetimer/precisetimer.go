// Package precisetimer provides a timer that fires within about a tenth of a millisecond of its
// time even when the process is idle.
//
// A runtime timer (time.Timer) in an idle Go process fires up to a millisecond late: with
// nothing to run, the runtime waits for its next timer in epoll_wait(2), whose timeout is in
// whole milliseconds (rounded down, and never below one). A follower's wake-up at a lease's
// expiry starts every takeover, so that millisecond shows in each failover. This timer arms a
// runtime timer Lead early and sleeps the rest with nanosleep(2), which blocks one thread for
// at most Lead and burns no CPU. Outside Linux the rest is slept with time.Sleep.
package precisetimer

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Lead is how early the runtime timer fires before the timer's time: more than the runtime
// timer's lateness on an idle process (up to 1 ms), so that the precise sleep covers it.
const Lead = 2 * time.Millisecond

// Timer is a clock.Timer that fires at its time, give or take the scheduler's wake-up of a
// sleeping thread. Its channel has a buffer of one, as time.Timer's had before Go 1.23: after a
// Stop or Reset that returned false, a value may wait in it (drain it before reusing the
// channel). Its methods are safe for concurrent use.
type Timer struct {
	c chan time.Time

	mu    sync.Mutex
	t     *time.Timer // the runtime timer of the current arming, nil before the first
	gen   uint64      // counts armings: a firing of an older one sends nothing
	armed bool        // armed and not yet fired or stopped
}

var _ clock.Timer = (*Timer)(nil)

// New returns a Timer that fires after d.
func New(d time.Duration) *Timer {
	p := &Timer{c: make(chan time.Time, 1)}
	p.Reset(d)
	return p
}

// C returns the channel on which the time of each firing is sent.
func (p *Timer) C() <-chan time.Time { return p.c }

// Stop prevents the timer from firing. It returns true if the call stopped it, false if it had
// fired or been stopped already.
func (p *Timer) Stop() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.armed
	p.armed = false
	p.gen++
	if p.t != nil {
		p.t.Stop()
	}
	return was
}

// Reset makes the timer fire after d, replacing any arming. It returns true if the timer had
// been armed and not yet fired or stopped.
func (p *Timer) Reset(d time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.armed
	if p.t != nil {
		p.t.Stop()
	}
	p.gen++
	gen, at := p.gen, time.Now().Add(d)
	p.armed = true
	p.t = time.AfterFunc(max(d-Lead, 0), func() { p.fire(gen, at) })
	return was
}

// fire sleeps until at and sends on the channel, unless arming gen was stopped or replaced
// meanwhile.
func (p *Timer) fire(gen uint64, at time.Time) {
	if d := time.Until(at); d > 0 {
		sleep(d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed || p.gen != gen {
		return
	}
	p.armed = false
	select {
	case p.c <- time.Now():
	default: // the last firing was not received: the channel holds one already
	}
}
