package schedule

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	lastSuccessDesc = prometheus.NewDesc("elector_schedule_last_success_timestamp_seconds",
		"When the last successful run of a slot ended (Redis's clock), as this replica recorded it.", []string{"name"}, nil)
	nextSlotDesc = prometheus.NewDesc("elector_schedule_next_slot_timestamp_seconds",
		"The first slot not decided yet, as this replica last read the state.", []string{"name"}, nil)
	runsDesc = prometheus.NewDesc("elector_schedule_runs_total",
		"Runs of slots this replica recorded, by result: done, failed, lost (the term ended first), cancelled.", []string{"name", "result"}, nil)
	missedDesc = prometheus.NewDesc("elector_schedule_missed_slots_total",
		"Slots this replica recorded as missed, by reason: catch-up, deadline, overlap, attempts.", []string{"name", "reason"}, nil)
)

// metrics are what a Scheduler collects: counts of what this replica's terms recorded.
type metrics struct {
	name        string
	mu          sync.Mutex
	runs        map[string]float64
	missedN     map[string]float64
	lastSuccess time.Time
	next        time.Time
}

func newMetrics(name string) metrics {
	return metrics{name: name, runs: map[string]float64{}, missedN: map[string]float64{}}
}

func (m *metrics) ran(result string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs[result]++
	if result == phaseDone && at.After(m.lastSuccess) {
		m.lastSuccess = at
	}
}

func (m *metrics) missed(reason string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.missedN[reason] += float64(n)
}

func (m *metrics) setNext(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next = t
}

// Describe sends the descriptors of the Scheduler's metrics (prometheus.Collector).
func (s *Scheduler) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lastSuccessDesc, nextSlotDesc, runsDesc, missedDesc} {
		ch <- d
	}
}

// Collect sends the Scheduler's metrics (prometheus.Collector): each run's result and each
// missed slot this replica recorded, its last success and the next slot it knows of.
func (s *Scheduler) Collect(ch chan<- prometheus.Metric) {
	m := &s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.lastSuccess.IsZero() {
		ch <- prometheus.MustNewConstMetric(lastSuccessDesc, prometheus.GaugeValue, float64(m.lastSuccess.UnixMilli())/1e3, m.name)
	}
	if !m.next.IsZero() {
		ch <- prometheus.MustNewConstMetric(nextSlotDesc, prometheus.GaugeValue, float64(m.next.UnixMilli())/1e3, m.name)
	}
	for _, r := range []string{phaseDone, phaseFailed, phaseLost, phaseCancelled} {
		ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.CounterValue, m.runs[r], m.name, r)
	}
	for _, r := range []string{"catch-up", "deadline", "overlap", "attempts"} {
		ch <- prometheus.MustNewConstMetric(missedDesc, prometheus.CounterValue, m.missedN[r], m.name, r)
	}
}
