package stats

import (
	"math"
	"testing"
)

func TestQuantile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, tc := range []struct{ q, want float64 }{{0, 1}, {0.5, 3}, {1, 5}, {0.25, 2}, {0.1, 1.4}} {
		if got := Quantile(xs, tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Quantile(%v, %v) = %v, want %v", xs, tc.q, got, tc.want)
		}
	}
	if xs[0] != 5 {
		t.Fatal("Quantile sorted its input")
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Fatal("Quantile(nil) is not NaN")
	}
}

func TestRatiosAndLatency(t *testing.T) {
	r := Ratios([]float64{2, 9, 4}, []float64{1, 3, 0})
	if len(r) != 2 || r[0] != 2 || r[1] != 3 {
		t.Fatalf("Ratios = %v, want [2 3] (a zero divisor is skipped)", r)
	}
	l := SummarizeLatency([][]float64{{1, 2, 3}, {10, 20, 30}, nil})
	if l.N != 6 || l.Median != 6.5 || l.RunMedians.Min != 2 || l.RunMedians.Max != 20 || l.Max != 30 {
		t.Fatalf("SummarizeLatency = %+v", l)
	}
}
