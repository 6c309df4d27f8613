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
