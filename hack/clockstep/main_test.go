package main

import (
	"testing"
	"time"
)

// The steps alternate by period and sum to zero over two periods, so a long hunt leaves the
// wall clock near where it was even before the final step back.
func TestStepAt(t *testing.T) {
	const rate, period = 5 * time.Millisecond, 3 * time.Second
	var got []time.Duration
	var sum time.Duration
	for i := 0; i < 6; i++ {
		got = append(got, stepAt(i, rate, period))
		sum += got[i]
	}
	want := []time.Duration{rate, rate, rate, -rate, -rate, -rate}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("steps %v, want %v", got, want)
		}
	}
	if sum != 0 {
		t.Errorf("two periods sum to %v, want 0", sum)
	}
}
