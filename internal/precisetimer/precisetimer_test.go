package precisetimer

import (
	"slices"
	"testing"
	"time"
)

func TestFiresNotBeforeItsTime(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, Lead + 3*time.Millisecond} {
		start := time.Now()
		p := New(d)
		got := <-p.C()
		if got.Sub(start) < d {
			t.Errorf("New(%v) fired after %v", d, got.Sub(start))
		}
		if p.Stop() {
			t.Errorf("New(%v): Stop after the firing returned true", d)
		}
	}
}

func TestStopPreventsTheFiring(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, Lead + time.Millisecond} {
		p := New(d)
		if !p.Stop() {
			t.Fatalf("New(%v): Stop of an armed timer returned false", d)
		}
		// A control armed at the same time, for 3 × d, fires after the stopped one would have.
		control := New(3 * d)
		<-control.C()
		select {
		case <-p.C():
			t.Fatalf("New(%v) fired after Stop", d)
		default:
		}
	}
}

func TestResetReplacesTheArming(t *testing.T) {
	p := New(time.Hour)
	start := time.Now()
	if !p.Reset(Lead + time.Millisecond) {
		t.Error("Reset of an armed timer returned false")
	}
	if got := <-p.C(); got.Sub(start) < Lead+time.Millisecond {
		t.Errorf("fired %v after a Reset to %v", got.Sub(start), Lead+time.Millisecond)
	}
	// An arming replaced before it fired sends nothing: only the second of these does.
	p.Reset(time.Millisecond)
	p.Reset(5 * time.Millisecond)
	<-p.C()
	control := New(10 * time.Millisecond)
	<-control.C()
	select {
	case <-p.C():
		t.Error("a replaced arming fired")
	default:
	}
	if p.Reset(time.Millisecond) {
		t.Error("Reset after the firing returned true")
	}
	<-p.C()
}

// BenchmarkLateness reports how late a timer fires in an idle process, against a runtime
// timer's in the same run: late-µs (the median), late-p90-µs.
func BenchmarkLateness(b *testing.B) {
	for _, c := range []struct {
		name string
		wait func(time.Duration)
	}{
		{"runtime", func(d time.Duration) { <-time.NewTimer(d).C }},
		{"precise", func(d time.Duration) { <-New(d).C() }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var late []float64
			for i := 0; b.Loop(); i++ {
				d := 5*time.Millisecond + time.Duration(i%997)*time.Microsecond
				start := time.Now()
				c.wait(d)
				late = append(late, float64(time.Since(start)-d)/1e3)
			}
			slices.Sort(late)
			b.ReportMetric(late[len(late)/2], "late-µs")
			b.ReportMetric(late[len(late)*9/10], "late-p90-µs")
		})
	}
}
