// Package wakeprobe is the control of the timing tests: a goroutine that sleeps a short period
// again and again and records how late it wakes up. That is the machine's scheduling delay in
// the same window of the same run, which the code under test suffers too, so that a test can
// assert "not held for the blocked call's duration" (lag < control + blocked/2) instead of a
// fixed latency bound that a loaded machine breaks: on a starved machine both are late
// together.
package wakeprobe

import (
	"sync"
	"testing"
	"time"
)

// Period is how long the probe sleeps between measurements.
const Period = 10 * time.Millisecond

// Probe measures its own wake-up lag until Stop.
type Probe struct {
	stop, done chan struct{}
	once       sync.Once
	max        time.Duration // written by the probe until done is closed
}

// Start starts a probe; it is stopped by Stop or at the test's cleanup.
func Start(t testing.TB) *Probe {
	p := &Probe{stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	t.Cleanup(func() { p.Stop() })
	return p
}

func (p *Probe) run() {
	defer close(p.done)
	for {
		start := time.Now()
		select {
		case <-p.stop:
			return
		case <-time.After(Period):
		}
		p.max = max(p.max, time.Since(start)-Period)
	}
}

// Stop stops the probe and returns the latest it woke up. It may be called more than once.
func (p *Probe) Stop() time.Duration {
	p.once.Do(func() { close(p.stop) })
	<-p.done
	return p.max
}

// Limit is the most a measured delay may be when the code under test was not held by a call
// that blocks for blocked: the control plus half the blocked duration. A held caller is at
// least blocked late; a free one as late as the machine lets any goroutine.
func Limit(control, blocked time.Duration) time.Duration { return control + blocked/2 }
