package helm

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// monitoringValues turns on everything the chart renders for monitoring.
const monitoringValues = "metrics: {serviceMonitor: {enabled: true}, prometheusRule: {enabled: true}, grafanaDashboard: {enabled: true}}"

// withMonitoring renders with monitoringValues and then values.
func withMonitoring(t *testing.T, values string) renderOptions {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(monitoringValues), &v); err != nil {
		t.Fatal(err)
	}
	return renderOptions{vals: v, values: values}
}

// promParser is the PromQL parser Prometheus uses by default.
var promParser = parser.NewParser(parser.Options{})

// renderedRules renders the chart's PrometheusRule and parses its groups the
// way Prometheus loads a rule file: strictly (no unknown field), every
// expression and every template checked.
func renderedRules(t *testing.T, opts renderOptions) *rulefmt.RuleGroups {
	t.Helper()
	_, objs := mustRender(t, opts)
	var found []map[string]any
	for _, o := range objs {
		if o.kind == "PrometheusRule" {
			found = append(found, o.typed.(map[string]any))
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d PrometheusRules rendered, want 1", len(found))
	}
	spec, err := yaml.Marshal(found[0]["spec"])
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promParser, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		t.Fatalf("the PrometheusRule does not load as Prometheus rules: %v\n%s", errs, spec)
	}
	return groups
}

func alertRule(t *testing.T, groups *rulefmt.RuleGroups, name string) rulefmt.Rule {
	t.Helper()
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == name {
				return r
			}
		}
	}
	t.Fatalf("no alert %s in %+v", name, groups)
	return rulefmt.Rule{}
}

// TestPrometheusRule checks the rule file: it is off by default, loads as
// Prometheus rules, selects the release's lease, and has the alerts the
// chart's README lists with the configured thresholds.
func TestPrometheusRule(t *testing.T) {
	_, objs := mustRender(t, renderOptions{})
	for _, o := range objs {
		if o.kind == "PrometheusRule" || o.kind == "ConfigMap" {
			t.Errorf("%s %s rendered by default; it is opt-in", o.kind, o.name)
		}
	}

	groups := renderedRules(t, withMonitoring(t, "lease: {duration: 20s, renewDeadline: 15s, retryPeriod: 3s}"))
	var names []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			expr, err := promParser.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("%s: %v", r.Alert, err)
			}
			for _, sel := range parser.ExtractSelectors(expr) {
				if !hasMatcher(sel, "namespace", "default") || !hasMatcher(sel, "name", "test") {
					t.Errorf("%s: selector %v does not select the release's lease (namespace default, name test)", r.Alert, sel)
				}
			}
			if r.Labels["severity"] != "warning" || r.Annotations["summary"] == "" {
				t.Errorf("%s: labels %v annotations %v, want severity warning and a summary", r.Alert, r.Labels, r.Annotations)
			}
		}
	}
	if want := []string{"ElectorFlapping", "ElectorNoLeader", "ElectorRedisErrors"}; !slices.Equal(sortedCopy(names), want) {
		t.Errorf("alerts %v, want %v", names, want)
	}
	if got := alertRule(t, groups, "ElectorNoLeader").For; time.Duration(got) != 20*time.Second {
		t.Errorf("ElectorNoLeader for %v, want lease.duration 20s", got)
	}

	// Thresholds and labels from the values; no absent() with 0 replicas.
	groups = renderedRules(t, withMonitoring(t, `replicaCount: 0
lease: {duration: 1500ms, renewDeadline: 1s, retryPeriod: 500ms}
metrics: {prometheusRule: {severity: critical, alertLabels: {team: billing}, flappingTransitions: 9, flappingWindow: 30m, redisErrorsFor: 10m, labels: {release: prom}}}`))
	noLeader := alertRule(t, groups, "ElectorNoLeader")
	if strings.Contains(noLeader.Expr, "absent") || time.Duration(noLeader.For) != 1500*time.Millisecond {
		t.Errorf("with replicaCount 0: expr %q for %v, want no absent() and for 1500ms", noLeader.Expr, noLeader.For)
	}
	if r := alertRule(t, groups, "ElectorFlapping"); !strings.Contains(r.Expr, "[30m])) > 9") || r.Labels["severity"] != "critical" || r.Labels["team"] != "billing" {
		t.Errorf("ElectorFlapping %+v, want the window 30m, threshold 9, severity critical, team billing", r)
	}
	if r := alertRule(t, groups, "ElectorRedisErrors"); time.Duration(r.For) != 10*time.Minute {
		t.Errorf("ElectorRedisErrors for %v, want 10m", r.For)
	}
}

func hasMatcher(sel []*labels.Matcher, name, value string) bool {
	return slices.ContainsFunc(sel, func(m *labels.Matcher) bool {
		return m.Name == name && m.Type == labels.MatchEqual && m.Value == value
	})
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	sort.Strings(c)
	return c
}

// firing evaluates an alerting rule of the chart every 30 s over series
// loaded in promqltest's notation (samples every 30 s from time 0), as
// Prometheus's rule manager does, and returns the evaluation times (in
// seconds) at which the alert fired.
func firing(t *testing.T, r rulefmt.Rule, series string, until time.Duration) []int {
	t.Helper()
	storage := promqltest.LoadedStorage(t, "load 30s\n"+series)
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 1_000_000)
	expr, err := promParser.ParseExpr(r.Expr)
	if err != nil {
		t.Fatal(err)
	}
	rule := rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), 0, labels.FromMap(r.Labels), labels.FromMap(r.Annotations),
		labels.EmptyLabels(), "", true, slog.New(slog.NewTextHandler(io.Discard, nil)))
	query := rules.EngineQueryFunc(engine, storage)
	var fired []int
	for ts := time.Duration(0); ts <= until; ts += 30 * time.Second {
		if _, err := rule.Eval(context.Background(), 0, time.Unix(0, 0).Add(ts), query, nil, 0); err != nil {
			t.Fatalf("%s at %v: %v", r.Alert, ts, err)
		}
		for _, a := range rule.ActiveAlerts() {
			if a.State == rules.StateFiring {
				fired = append(fired, int(ts.Seconds()))
				break
			}
		}
	}
	return fired
}

// TestAlertExpressions unit-tests the alerts on series like those of two
// replicas of release "test" in namespace "default" (what `promtool test
// rules` does, with Prometheus's own rule evaluation).
func TestAlertExpressions(t *testing.T) {
	groups := renderedRules(t, renderOptions{values: monitoringValues})
	const sel = `{namespace="default", name="test", pod="%s"}`
	series := func(metric string, pods ...string) string {
		var b strings.Builder
		for i := 0; i+1 < len(pods); i += 2 {
			b.WriteString("  " + metric + strings.Replace(sel, "%s", pods[i], 1) + " " + pods[i+1] + "\n")
		}
		return b.String()
	}
	for _, tc := range []struct {
		name, alert, series string
		until               time.Duration
		want                []int
	}{
		{"a leader throughout", "ElectorNoLeader",
			series("leader_election_master_status", "a", "1x20", "b", "0x20"), 10 * time.Minute, nil},
		{"a handover within one scrape", "ElectorNoLeader",
			series("leader_election_master_status", "a", "1 1 1 0x17", "b", "0 0 0 0 1x16"), 10 * time.Minute, nil},
		// The leader is gone from 90 s: pending at 90 s, firing once the
		// 15 s of the lease have passed, at the next evaluation.
		{"no leader after the lease", "ElectorNoLeader",
			series("leader_election_master_status", "a", "1 1 1 0x17", "b", "0x20"), 10 * time.Minute, seconds(120, 600, 30)},
		{"no replica reports", "ElectorNoLeader",
			series("elector_is_leader", "a", "1x20"), 2 * time.Minute, seconds(30, 120, 30)},
		{"one rollout", "ElectorFlapping",
			series("elector_leadership_transitions_total", "a", "0 1 1x18", "b", "0 0 1 2 2x16"), 10 * time.Minute, nil},
		// A new term every 30 s: the sixth, at 180 s, fires.
		{"a term every 30 s", "ElectorFlapping",
			series("elector_leadership_transitions_total", "a", "0+1x40"), 20 * time.Minute, seconds(180, 1200, 30)},
		{"one failed call", "ElectorRedisErrors",
			series("elector_redis_errors_total", "a", "0 0 1x38"), 20 * time.Minute, nil},
		// Errors every scrape from 60 s: pending at once, firing 5 min later.
		{"errors that go on", "ElectorRedisErrors",
			series("elector_redis_errors_total", "a", "0 0+1x40"), 20 * time.Minute, seconds(360, 1200, 30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := firing(t, alertRule(t, groups, tc.alert), tc.series, tc.until)
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s fired at %v s, want %v s\nexpr: %s\nseries:\n%s", tc.alert, got, tc.want, alertRule(t, groups, tc.alert).Expr, tc.series)
			}
		})
	}
}

// seconds lists from, from+step, ... up to to.
func seconds(from, to, step int) []int {
	var out []int
	for s := from; s <= to; s += step {
		out = append(out, s)
	}
	return out
}

// grafanaDashboard is the part of a dashboard the test reads.
type grafanaDashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestGrafanaDashboard checks the dashboard ConfigMap: the sidecar's label,
// valid JSON, and a PromQL expression that parses in every panel, once the
// dashboard's variables are substituted.
func TestGrafanaDashboard(t *testing.T) {
	_, objs := mustRender(t, withMonitoring(t, "metrics: {grafanaDashboard: {annotations: {grafana_folder: elector}}}"))
	cm := only[*corev1.ConfigMap](t, objs)
	if cm.Name != "test-dashboard" || cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "elector" {
		t.Errorf("ConfigMap %s labels %v annotations %v, want test-dashboard with grafana_dashboard=1 and the annotations", cm.Name, cm.Labels, cm.Annotations)
	}
	var d grafanaDashboard
	if err := json.Unmarshal([]byte(cm.Data["elector.json"]), &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	if d.UID == "" || !slices.Equal(vars, []string{"datasource", "namespace", "lease"}) || len(d.Panels) < 6 {
		t.Errorf("dashboard uid %q, variables %v, %d panels; want a uid, datasource/namespace/lease and the panels", d.UID, vars, len(d.Panels))
	}
	for _, expr := range dashboardExprs(t, d) {
		if _, err := promParser.ParseExpr(expr); err != nil {
			t.Errorf("dashboard expression %q: %v", expr, err)
		}
	}
}

func dashboardExprs(t *testing.T, d grafanaDashboard) []string {
	t.Helper()
	vars := strings.NewReplacer("$namespace", "default", "$lease", "test", "${datasource}", "prom")
	var out []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, vars.Replace(tg.Expr))
		}
	}
	return out
}

// monitoredMetrics returns the metric families the alerts and the dashboard
// query, for TestChartArgsRunTheCLI to find in a real replica's /metrics.
func monitoredMetrics(t *testing.T) []string {
	t.Helper()
	groups := renderedRules(t, renderOptions{values: monitoringValues})
	var exprs []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	_, objs := mustRender(t, renderOptions{values: monitoringValues})
	var d grafanaDashboard
	if err := json.Unmarshal([]byte(only[*corev1.ConfigMap](t, objs).Data["elector.json"]), &d); err != nil {
		t.Fatal(err)
	}
	exprs = append(exprs, dashboardExprs(t, d)...)
	set := map[string]bool{}
	for _, e := range exprs {
		expr, err := promParser.ParseExpr(e)
		if err != nil {
			t.Fatal(err)
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				set[strings.TrimSuffix(vs.Name, "_bucket")] = true
			}
			return nil
		})
	}
	var names []string
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
