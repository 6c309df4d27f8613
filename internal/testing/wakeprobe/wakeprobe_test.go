package wakeprobe

import (
	"testing"
	"time"
)

// TestProbeSeesABlockedScheduler: a probe measures a lag of its own and the limit separates a
// delay held by a blocked call from the control.
func TestProbeSeesABlockedScheduler(t *testing.T) {
	p := Start(t)
	time.Sleep(5 * Period)
	control := p.Stop()
	if control < 0 {
		t.Fatalf("negative lag %v", control)
	}
	if again := p.Stop(); again != control {
		t.Fatalf("second Stop returned %v, first %v", again, control)
	}
	const blocked = time.Second
	if l := Limit(control, blocked); l != control+blocked/2 {
		t.Fatalf("Limit = %v", l)
	}
	t.Logf("probe lag %v over %v", control, 5*Period)
}

// TestLimitCatchesAHeldLoop: a loop that plans a wake-up and is then held by a call of 300ms
// wakes up at least 300ms late, which the limit rejects unless the machine itself starved the
// probe beside it for half of that; a free loop stays within it.
func TestLimitCatchesAHeldLoop(t *testing.T) {
	const blocked = 300 * time.Millisecond
	lagOf := func(held bool) time.Duration {
		planned := time.Now().Add(Period)
		if held {
			time.Sleep(blocked) // the blocking call on the loop
		}
		time.Sleep(time.Until(planned))
		return time.Since(planned)
	}
	p := Start(t)
	free, held := lagOf(false), lagOf(true)
	control := p.Stop()
	limit := Limit(control, blocked)
	t.Logf("free loop %v late, held loop %v late, probe %v, limit %v", free, held, control, limit)
	if held < limit && control < blocked/2 {
		t.Errorf("a loop held for %v was %v late, under the limit %v", blocked, held, limit)
	}
	if free >= limit {
		t.Errorf("a free loop was %v late, over the limit %v (probe %v)", free, limit, control)
	}
}
