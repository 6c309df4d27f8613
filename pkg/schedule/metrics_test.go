package schedule

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metricValue returns the value of the Scheduler's metric name whose other label than name is
// label ("" for a metric with the name label alone), and whether it was collected.
func metricValue(s *Scheduler, name, label string) (float64, bool) {
	ch := make(chan prometheus.Metric, 64)
	s.Collect(ch)
	close(ch)
	for m := range ch {
		if !strings.Contains(m.Desc().String(), `"`+name+`"`) {
			continue
		}
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			continue
		}
		other := ""
		for _, l := range pb.GetLabel() {
			if l.GetName() != "name" {
				other = l.GetValue()
			}
		}
		if other != label {
			continue
		}
		if c := pb.GetCounter(); c != nil {
			return c.GetValue(), true
		}
		return pb.GetGauge().GetValue(), true
	}
	return 0, false
}
