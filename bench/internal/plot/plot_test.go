package plot

import (
	"encoding/xml"
	"strings"
	"testing"
)

func TestSVGIsWellFormedAndScaled(t *testing.T) {
	x, y := ECDF([]float64{0.3, 2, 0.5, 40})
	c := Chart{
		Title: "a <b> & c", XLabel: "ms", YLabel: "fraction", LogX: true, YMin: 0.001, YMax: 1,
		Series: []Series{{Name: "elector", X: x, Y: y, Step: true}, {Name: "bound", X: []float64{0.1, 100}, Y: []float64{1, 1}, Dashed: true}},
	}
	svg, err := c.SVG()
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(string(svg)))
	polylines := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("SVG is not well-formed XML: %v\n%s", err, svg)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	if polylines != 2 {
		t.Fatalf("%d polylines, want 2", polylines)
	}
	for _, want := range []string{"a &lt;b&gt; &amp; c", ">0.1<", ">100<", "elector", "stroke-dasharray"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if _, err := (Chart{}).SVG(); err == nil {
		t.Error("empty chart rendered without error")
	}
}
