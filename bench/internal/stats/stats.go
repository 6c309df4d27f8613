// Package stats summarises repeated measurements: medians, quantiles, spreads and ratios
// computed pair by pair.
package stats

import (
	"math"
	"slices"
	"time"
)

// Quantile returns the q-quantile (0 <= q <= 1) of xs by linear interpolation between the
// closest ranks; NaN when xs is empty. xs is not modified.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// Median returns the median of xs.
func Median(xs []float64) float64 { return Quantile(xs, 0.5) }

// Summary is the median of repeated runs and their spread.
type Summary struct {
	// Median is the median of the values.
	Median float64
	// Min and Max are the extremes of the values: the spread over the runs.
	Min, Max float64
	// N is the number of values.
	N int
}

// Summarize returns the median and range of xs.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	return Summary{Median: Median(xs), Min: slices.Min(xs), Max: slices.Max(xs), N: len(xs)}
}

// Ratios divides a[i] by b[i]: the ratios of measurements paired by run.
func Ratios(a, b []float64) []float64 {
	n := min(len(a), len(b))
	r := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		if b[i] != 0 {
			r = append(r, a[i]/b[i])
		}
	}
	return r
}

// Millis converts durations to float milliseconds.
func Millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

// Latency summarises latency trials that were grouped in runs: the quantiles of all trials
// pooled, and the spread of the per-run medians.
type Latency struct {
	// Median, P90 and P99 are quantiles of all trials pooled, in milliseconds.
	Median, P90, P99, Max float64
	// RunMedians is the spread of the median of each run, in milliseconds.
	RunMedians Summary
	// N is the number of trials.
	N int
}

// SummarizeLatency pools runs (each a list of trials, in milliseconds) and summarises them.
func SummarizeLatency(runs [][]float64) Latency {
	var all, meds []float64
	for _, r := range runs {
		if len(r) == 0 {
			continue
		}
		all = append(all, r...)
		meds = append(meds, Median(r))
	}
	if len(all) == 0 {
		nan := math.NaN()
		return Latency{Median: nan, P90: nan, P99: nan, Max: nan, RunMedians: Summarize(nil)}
	}
	return Latency{
		Median:     Median(all),
		P90:        Quantile(all, 0.9),
		P99:        Quantile(all, 0.99),
		Max:        slices.Max(all),
		RunMedians: Summarize(meds),
		N:          len(all),
	}
}
