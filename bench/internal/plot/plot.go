// Package plot draws the few line charts of docs/PERFORMANCE.md as self-contained SVG, with
// the standard library only: linear or logarithmic axes, one polyline per series, a legend.
package plot

import (
	"bytes"
	"errors"
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
)

// Series is one line of a chart.
type Series struct {
	// Name is shown in the legend.
	Name string
	// X and Y are the points, in drawing order.
	X, Y []float64
	// Step draws the line as a staircase (for distribution functions).
	Step bool
	// Dashed draws a dashed line (for bounds and targets).
	Dashed bool
	// Markers draws a dot on every point.
	Markers bool
}

// Chart is a line chart.
type Chart struct {
	Title, XLabel, YLabel string
	// LogX and LogY make an axis logarithmic (base 10); its values must be positive.
	LogX, LogY bool
	// XMin, XMax, YMin, YMax fix the ranges; zero values are taken from the data.
	XMin, XMax, YMin, YMax float64
	// XTick and YTick format tick labels; strconv 'g' formatting when nil.
	XTick, YTick func(float64) string
	Series       []Series
}

// Colours for series, in order (the Okabe-Ito palette, readable by colour-blind readers).
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"}

const (
	width, height                      = 760, 420
	marginL, marginR, marginT, marginB = 72, 24, 40, 110
)

// SVG renders the chart.
func (c Chart) SVG() ([]byte, error) {
	xs, ys := c.extent()
	if math.IsNaN(xs[0]) || math.IsNaN(ys[0]) {
		return nil, errors.New("plot: no finite data to draw")
	}
	xa := axis{min: xs[0], max: xs[1], log: c.LogX, lo: marginL, hi: width - marginR, format: c.XTick}
	ya := axis{min: ys[0], max: ys[1], log: c.LogY, lo: height - marginB, hi: marginT, format: c.YTick}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="13" font-weight="bold">%s</text>`+"\n", marginL, html.EscapeString(c.Title))
	// Grid and ticks.
	for _, t := range xa.ticks() {
		x := xa.pos(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, marginT, x, height-marginB)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, height-marginB+16, html.EscapeString(xa.label(t)))
	}
	for _, t := range ya.ticks() {
		y := ya.pos(t)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", marginL, y, width-marginR, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", marginL-6, y, html.EscapeString(ya.label(t)))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", marginL, marginT, width-marginL-marginR, height-marginT-marginB)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", (marginL+width-marginR)/2, height-marginB+36, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (marginT+height-marginB)/2, html.EscapeString(c.YLabel))
	// Series.
	b.WriteString("<g>\n")
	for i, s := range c.Series {
		colour := palette[i%len(palette)]
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		var pts bytes.Buffer
		prevY := math.NaN()
		for j := range s.X {
			if !xa.ok(s.X[j]) || !ya.ok(s.Y[j]) {
				continue
			}
			x, y := xa.pos(s.X[j]), ya.pos(s.Y[j])
			if s.Step && !math.IsNaN(prevY) {
				fmt.Fprintf(&pts, "%.1f,%.1f ", x, prevY)
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
			prevY = y
			if s.Markers {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", x, y, colour)
			}
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", colour, dash, bytes.TrimSpace(pts.Bytes()))
	}
	b.WriteString("</g>\n")
	// Legend, below the axis label.
	for i, s := range c.Series {
		colour := palette[i%len(palette)]
		col, row := i%2, i/2
		x := marginL + col*340
		y := height - marginB + 58 + row*18
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", x, y, x+28, y, colour, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", x+34, y, html.EscapeString(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.Bytes(), nil
}

// extent returns the x and y ranges: fixed ones, else those of the finite data.
func (c Chart) extent() (x, y [2]float64) {
	x = [2]float64{math.NaN(), math.NaN()}
	y = x
	grow := func(r *[2]float64, v float64, log bool) {
		if math.IsNaN(v) || math.IsInf(v, 0) || (log && v <= 0) {
			return
		}
		if math.IsNaN(r[0]) || v < r[0] {
			r[0] = v
		}
		if math.IsNaN(r[1]) || v > r[1] {
			r[1] = v
		}
	}
	for _, s := range c.Series {
		for i := range s.X {
			grow(&x, s.X[i], c.LogX)
			grow(&y, s.Y[i], c.LogY)
		}
	}
	fix := func(r *[2]float64, lo, hi float64, log bool) {
		if lo != 0 {
			r[0] = lo
		}
		if hi != 0 {
			r[1] = hi
		}
		if r[0] == r[1] && !math.IsNaN(r[0]) {
			if log {
				r[0], r[1] = r[0]/2, r[1]*2
			} else {
				r[0], r[1] = r[0]-1, r[1]+1
			}
		}
		if log && !math.IsNaN(r[0]) { // whole decades
			r[0] = math.Pow(10, math.Floor(math.Log10(r[0])+1e-9))
			r[1] = math.Pow(10, math.Ceil(math.Log10(r[1])-1e-9))
		}
	}
	fix(&x, c.XMin, c.XMax, c.LogX)
	fix(&y, c.YMin, c.YMax, c.LogY)
	return x, y
}

type axis struct {
	min, max float64
	log      bool
	lo, hi   float64 // pixel positions of min and max
	format   func(float64) string
}

func (a axis) t(v float64) float64 {
	if a.log {
		return math.Log10(v)
	}
	return v
}

func (a axis) ok(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && (!a.log || v > 0)
}

func (a axis) pos(v float64) float64 {
	f := (a.t(v) - a.t(a.min)) / (a.t(a.max) - a.t(a.min))
	f = max(-0.02, min(1.02, f))
	return a.lo + f*(a.hi-a.lo)
}

func (a axis) ticks() []float64 {
	var ts []float64
	if a.log {
		for e := math.Floor(math.Log10(a.min)); e <= math.Ceil(math.Log10(a.max)); e++ {
			if v := math.Pow(10, e); v >= a.min*(1-1e-9) && v <= a.max*(1+1e-9) {
				ts = append(ts, v)
			}
		}
		return ts
	}
	span := a.max - a.min
	step := math.Pow(10, math.Floor(math.Log10(span/5)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if span/(step*m) <= 6 {
			step *= m
			break
		}
	}
	for v := math.Ceil(a.min/step) * step; v <= a.max+step*1e-9; v += step {
		ts = append(ts, v)
	}
	return slices.Compact(ts)
}

func (a axis) label(v float64) string {
	if a.format != nil {
		return a.format(v)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// ECDF returns the points of the empirical distribution function of xs, to be drawn as a
// staircase: it starts at (smallest value, 0), then each sorted value with the fraction of
// values at or below it.
func ECDF(xs []float64) (x, y []float64) {
	if len(xs) == 0 {
		return nil, nil
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	x = append([]float64{s[0]}, s...)
	y = make([]float64, len(x))
	for i := range s {
		y[i+1] = float64(i+1) / float64(len(s))
	}
	return x, y
}
