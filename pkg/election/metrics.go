package election

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/elector/elector/internal/redisfail"
)

// Metrics are the Prometheus figures of the electors of a process, labelled by elector name.
// Create one with NewMetrics and pass it in Config.Metrics of every Elector. A nil *Metrics
// records nothing.
type Metrics struct {
	masterStatus *prometheus.GaugeVec
	isLeader     *prometheus.GaugeVec
	transitions  *prometheus.CounterVec
	renewLatency *prometheus.HistogramVec
	errors       *prometheus.CounterVec
	redisUpG     *prometheus.GaugeVec
	token        *prometheus.GaugeVec
	sinceRenew   *prometheus.Desc
	groupLeases  *prometheus.GaugeVec
	groupTerms   *prometheus.CounterVec
	groupSheds   *prometheus.CounterVec
	groupBatches *prometheus.HistogramVec
	evictionG    *prometheus.GaugeVec
	logDrops     *prometheus.CounterVec
	candidates   *prometheus.GaugeVec

	mu       sync.Mutex
	electors map[string]*Elector
}

// NewMetrics creates the metrics and registers them on reg (use prometheus.DefaultRegisterer
// only if you want them on the global registry):
//
//	leader_election_master_status{name}          1 while leading, else 0 (as client-go's)
//	elector_is_leader{name}                      1 while leading, else 0
//	elector_leadership_transitions_total{name}   terms this replica began
//	elector_renew_duration_seconds{name}         latency of successful renewals
//	elector_redis_errors_total{name,op,reason}   failed Redis calls (op: acquire, renew, release, subscribe,
//	                                             heartbeat; reason: see redisFailure.Reason)
//	elector_redis_up{name}                       1 while Redis answers this replica's calls, 0 while they fail
//	                                             (a Group's series appears at its first failed call)
//	elector_redis_eviction_risk{name}            1 when Redis may evict the lease keys (a maxmemory limit with a
//	                                             policy other than noeviction), 0 when not; absent while unknown
//	                                             (CONFIG GET and INFO refused, or a named ACL user: not checked).
//	                                             See docs/RELIABILITY.md, section 7.
//	elector_fencing_token{name}                  token of the current term, 0 when not leading
//	elector_seconds_since_last_renew{name}       age of the last successful renew (only while leading)
//	elector_group_leases_held{group}             leases a Group holds
//	elector_group_terms_total{group}             terms a Group began
//	elector_group_shed_total{group}              leases a Group released to rebalance
//	elector_group_batch_duration_seconds{group,op}  round trips of a Group's batches (op: acquire, renew)
//	elector_log_lines_dropped_total{name}        log lines a Group dropped because its logger blocked
//	elector_candidates{name}                     live entries of the lease's candidate registry, as this
//	                                             replica's last heartbeat found them (this one included)
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		masterStatus: gaugeVec("leader_election_master_status",
			"Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
			"name"),
		isLeader: gaugeVec("elector_is_leader",
			"1 while this replica leads the named election, else 0.",
			"name"),
		transitions: counterVec("elector_leadership_transitions_total",
			"Terms this replica began leading.",
			"name"),
		renewLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "elector_renew_duration_seconds",
			Help:    "Round-trip time of successful lease renewals.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12),
		}, []string{"name"}),
		errors: counterVec("elector_redis_errors_total",
			"Failed Redis calls by operation (acquire, renew, release, subscribe) and reason.",
			"name", "op", "reason"),
		redisUpG: gaugeVec("elector_redis_up",
			"1 while Redis answers this replica's calls for the named election or Group, 0 while they fail (see elector_redis_errors_total for the reason).",
			"name"),
		token: gaugeVec("elector_fencing_token",
			"Fencing token of this replica's current term, 0 when it does not lead.",
			"name"),
		sinceRenew: prometheus.NewDesc("elector_seconds_since_last_renew",
			"Seconds since the send time of the last successful renew of the current term (only while leading).",
			[]string{"name"}, nil),
		groupLeases: gaugeVec("elector_group_leases_held",
			"Leases the named Group holds on this replica.",
			"group"),
		groupTerms: counterVec("elector_group_terms_total",
			"Terms the named Group began on this replica.",
			"group"),
		groupSheds: counterVec("elector_group_shed_total",
			"Leases the named Group released to rebalance them to other replicas.",
			"group"),
		evictionG: gaugeVec("elector_redis_eviction_risk",
			"1 when Redis may evict the lease keys under memory pressure (maxmemory with a policy other than noeviction), else 0.",
			"name"),
		groupBatches: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "elector_group_batch_duration_seconds",
			Help:    "Duration of a Group's batched acquire and renew round trips.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12),
		}, []string{"group", "op"}),
		logDrops: counterVec("elector_log_lines_dropped_total",
			"Log lines the named Group dropped because its logger did not take them in time (it blocked).",
			"name"),
		candidates: gaugeVec("elector_candidates",
			"Live candidates of the named election (replicas that campaign or lead, this one included), as this replica's last heartbeat in the candidate registry found them.",
			"name"),
		electors: map[string]*Elector{},
	}
	for _, c := range []prometheus.Collector{m.masterStatus, m.isLeader, m.transitions, m.renewLatency, m.errors, m.redisUpG, m.token,
		(*sinceRenewCollector)(m), m.groupLeases, m.groupTerms, m.groupSheds, m.groupBatches, m.evictionG, m.logDrops, m.candidates} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register elector metrics: %w", err)
		}
	}
	return m, nil
}

// gaugeVec and counterVec build a family of the given name, help and labels.
func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// add makes e's state visible, starting its series at "not leading".
func (m *Metrics) add(e *Elector) {
	m.mu.Lock()
	m.electors[e.cfg.LeaseName] = e
	m.mu.Unlock()
	m.setLeading(e.cfg.LeaseName, false, 0)
	m.transitions.WithLabelValues(e.cfg.LeaseName)
	e.errs.metrics, e.errs.name = m, e.cfg.LeaseName // elector_redis_up from the first call on
}

func (m *Metrics) setLeading(name string, leading bool, token int64) {
	if m == nil {
		return
	}
	v := 0.0
	if leading {
		v = 1
		m.transitions.WithLabelValues(name).Inc()
	}
	m.masterStatus.WithLabelValues(name).Set(v)
	m.isLeader.WithLabelValues(name).Set(v)
	m.token.WithLabelValues(name).Set(float64(token))
}

func (m *Metrics) renewed(name string, took time.Duration) {
	if m == nil {
		return
	}
	m.renewLatency.WithLabelValues(name).Observe(took.Seconds())
}

func (m *Metrics) redisError(name, op string, err error) {
	if m == nil {
		return
	}
	m.errors.WithLabelValues(name, op, redisfail.Reason(err)).Inc()
}

func (m *Metrics) redisUp(name string, up bool) {
	if m != nil {
		m.redisUpG.WithLabelValues(name).Set(gaugeBool(up))
	}
}

func (m *Metrics) evictionRisk(name string, risky bool) {
	if m != nil {
		m.evictionG.WithLabelValues(name).Set(gaugeBool(risky))
	}
}

// gaugeBool is a boolean as a gauge's value: 1 or 0.
func gaugeBool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sinceRenewCollector computes elector_seconds_since_last_renew at scrape time.
type sinceRenewCollector Metrics

func (c *sinceRenewCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.sinceRenew }

func (c *sinceRenewCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, e := range c.electors {
		if d, ok := e.sinceRenew(); ok {
			ch <- prometheus.MustNewConstMetric(c.sinceRenew, prometheus.GaugeValue, d.Seconds(), name)
		}
	}
}

// addGroup starts g's series at zero.
func (m *Metrics) addGroup(g *Group) {
	m.groupLeases.WithLabelValues(g.cfg.Group).Set(0)
	m.groupTerms.WithLabelValues(g.cfg.Group)
	m.groupSheds.WithLabelValues(g.cfg.Group)
}

func (m *Metrics) groupHeld(group string, n int) {
	if m != nil {
		m.groupLeases.WithLabelValues(group).Set(float64(n))
	}
}

func (m *Metrics) groupStarted(group string) {
	if m != nil {
		m.groupTerms.WithLabelValues(group).Inc()
	}
}

func (m *Metrics) groupShed(group string, n int) {
	if m != nil {
		m.groupSheds.WithLabelValues(group).Add(float64(n))
	}
}

func (m *Metrics) groupBatch(group, op string, took time.Duration) {
	if m != nil {
		m.groupBatches.WithLabelValues(group, op).Observe(took.Seconds())
	}
}

// logDropped counts a log line that name dropped.
func (m *Metrics) logDropped(name string) {
	if m == nil {
		return
	}
	m.logDrops.WithLabelValues(name).Inc()
}

// setCandidates sets elector_candidates{name}.
func (m *Metrics) setCandidates(name string, n int) {
	if m == nil {
		return
	}
	m.candidates.WithLabelValues(name).Set(float64(n))
}
