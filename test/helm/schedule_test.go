package helm

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
)

// The chart's side of `elector run --schedule`: the schedule values become
// the run container's flags (run mode only), the schema checks them, and the
// PrometheusRule gets the schedule's alerts.

// scheduleFlags returns the --schedule flags among the elector's arguments,
// in their order.
func scheduleFlags(args []string) []string {
	var out []string
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--schedule", "--time-zone", "--overlap", "--catch-up", "--starting-deadline", "--max-attempts", "--retry-delay", "--schedule-history":
			out = append(out, a)
		}
	}
	return out
}

// TestScheduleArgs renders run mode with schedules: the spec alone, every
// option, options at elector run's defaults (left out, however spelled).
func TestScheduleArgs(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		want         []string
	}{
		{"off by default", "mode: run", nil},
		{"a spec", "mode: run\nschedule: {spec: '30 2 * * *'}", []string{"--schedule=30 2 * * *"}},
		{"a descriptor", "mode: run\nschedule: {spec: '@every 10m'}", []string{"--schedule=@every 10m"}},
		{"every option", `mode: run
schedule: {spec: '30 2 * * 1-5', timeZone: Europe/Berlin, overlap: cancel, catchUp: all, startingDeadline: 5m, maxAttempts: 5, retryDelay: 1m30s, history: 20}`,
			[]string{"--schedule=30 2 * * 1-5", "--time-zone=Europe/Berlin", "--overlap=cancel", "--catch-up=all", "--starting-deadline=5m", "--max-attempts=5", "--retry-delay=1m30s", "--schedule-history=20"}},
		{"the defaults spelled out", `mode: run
schedule: {spec: '@hourly', timeZone: UTC, overlap: skip, catchUp: latest, startingDeadline: 0ms, maxAttempts: 3, retryDelay: 10000ms, history: 100}`,
			[]string{"--schedule=@hourly"}},
		{"options without a spec", "mode: run\nschedule: {overlap: wait, maxAttempts: 1}", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, objs := mustRender(t, renderOptions{values: tc.values})
			_, spec := podSpec(t, objs)
			c := theElector(t, spec)
			if got := scheduleFlags(electorFlags(c)); !slices.Equal(got, tc.want) {
				t.Errorf("schedule flags %q, want %q (args %q)", got, tc.want, c.Args)
			}
			if len(tc.want) > 0 {
				if want := `once per slot of the schedule "` + strings.TrimPrefix(tc.want[0], "--schedule=") + `"`; !strings.Contains(r.notes, want) {
					t.Errorf("NOTES lack %q:\n%s", want, r.notes)
				}
			} else if strings.Contains(r.notes, "schedule") {
				t.Errorf("NOTES mention a schedule without one:\n%s", r.notes)
			}
			if wrapped, _ := wrappedCommand(c); len(scheduleFlags(wrapped)) > 0 {
				t.Errorf("schedule flags after the --: %q", c.Args)
			}
		})
	}
}

// TestScheduleNeedsRunMode: a schedule is elector run's, in the chart and in
// a chart built on the library (sidecar only); the message names the values.
func TestScheduleNeedsRunMode(t *testing.T) {
	for _, opts := range []renderOptions{
		{values: "schedule: {spec: '@hourly'}"},
		{values: "mode: sidecar\nschedule: {spec: '30 2 * * *'}"},
		{chart: exampleChartDir, values: "elector: {schedule: {spec: '@hourly'}}"},
	} {
		_, err := renderChart(opts)
		if err == nil || !strings.Contains(err.Error(), "schedule.spec") || !strings.Contains(err.Error(), "needs mode run") {
			t.Errorf("%s with %q: error %v, want one saying schedule.spec needs mode run", opts.chart, opts.values, err)
		}
	}
	if _, err := renderChart(renderOptions{values: "mode: sidecar\nschedule: {overlap: wait}"}); err != nil {
		t.Errorf("sidecar mode with schedule options but no spec: %v", err)
	}
}

// TestScheduleSchemaRejects: the policies are enums, durations Go durations,
// the spec five fields or a descriptor (the zone is timeZone's).
func TestScheduleSchemaRejects(t *testing.T) {
	for _, tc := range []struct {
		values, wantAt string
	}{
		{"schedule: {overlap: queue}", "/schedule/overlap"},
		{"schedule: {catchUp: first}", "/schedule/catchUp"},
		{"schedule: {startingDeadline: 5}", "/schedule/startingDeadline"},
		{"schedule: {retryDelay: ten}", "/schedule/retryDelay"},
		{"schedule: {maxAttempts: 0}", "/schedule/maxAttempts"},
		{"schedule: {history: 0}", "/schedule/history"},
		{"schedule: {timeZone: ''}", "/schedule/timeZone"},
		{"schedule: {spec: '30 2 * *'}", "/schedule/spec"},
		{"schedule: {spec: 'CRON_TZ=Europe/Berlin 30 2 * * *'}", "/schedule/spec"},
		{"schedule: {spec: '@fortnightly'}", "/schedule/spec"},
		{"schedule: {interval: 1h}", "interval"},
		{"metrics: {prometheusRule: {schedule: {noSuccessFor: 2days}}}", "/metrics/prometheusRule/schedule/noSuccessFor"},
		{"metrics: {prometheusRule: {schedule: {window: ''}}}", "/metrics/prometheusRule/schedule/window"},
	} {
		t.Run(tc.values, func(t *testing.T) {
			_, err := renderChart(renderOptions{values: "mode: run\n" + tc.values})
			if err == nil {
				t.Fatalf("values %q rendered, want a schema error", tc.values)
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.wantAt) {
				t.Errorf("error %v, want a schema error about %s", err, tc.wantAt)
			}
		})
	}
	for _, spec := range []string{"*/15 * * * *", "0  9 * * MON-FRI", "@every 1h30m", "@daily", "@annually", ""} {
		if _, err := renderChart(renderOptions{values: fmt.Sprintf("mode: run\nschedule: {spec: %q}", spec)}); err != nil {
			t.Errorf("spec %q: %v", spec, err)
		}
	}
}

// scheduleAlerts are the alerts a schedule adds.
var scheduleAlerts = []string{"ElectorScheduleFailing", "ElectorScheduleMissedSlot", "ElectorScheduleNoSuccess"}

// TestSchedulePrometheusRule: the schedule's alerts come with a spec only,
// select the release's lease, and take their thresholds from the values or,
// for a descriptor, from its period.
func TestSchedulePrometheusRule(t *testing.T) {
	alertNames := func(values string) []string {
		var names []string
		for _, g := range renderedRules(t, withMonitoring(t, values)).Groups {
			for _, r := range g.Rules {
				names = append(names, r.Alert)
			}
		}
		return names
	}
	for _, values := range []string{"", "mode: run"} {
		if names := alertNames(values); slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "ElectorSchedule") }) {
			t.Errorf("values %q: alerts %v, want no schedule alerts without schedule.spec", values, names)
		}
	}

	groups := renderedRules(t, withMonitoring(t, "mode: run\nschedule: {spec: '30 2 * * *'}\nmetrics: {prometheusRule: {severity: critical, alertLabels: {team: billing}, schedule: {noSuccessFor: 2d, window: 3h}}}"))
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
			if r.Labels["severity"] != "critical" || r.Labels["team"] != "billing" || r.Annotations["summary"] == "" {
				t.Errorf("%s: labels %v annotations %v, want severity critical, team billing and a summary", r.Alert, r.Labels, r.Annotations)
			}
		}
	}
	for _, n := range scheduleAlerts {
		if !slices.Contains(names, n) {
			t.Errorf("alerts %v lack %s", names, n)
		}
	}
	for _, n := range []string{"ElectorScheduleMissedSlot", "ElectorScheduleFailing"} {
		if r := alertRule(t, groups, n); !strings.Contains(r.Expr, "[3h]") {
			t.Errorf("%s: %s, want the window 3h", n, r.Expr)
		}
	}
	if r := alertRule(t, groups, "ElectorScheduleNoSuccess"); !strings.Contains(r.Expr, "> 172800\n") || !strings.Contains(r.Expr, "[2d]") {
		t.Errorf("ElectorScheduleNoSuccess: %s, want 2d (172800 s)", r.Expr)
	}

	// noSuccessFor from a descriptor's period; five fields need it set.
	for spec, want := range map[string]string{"@hourly": "7200", "@daily": "172800", "@weekly": "1209600", "@every 90s": "180", "@every 1500ms": "3"} {
		groups := renderedRules(t, withMonitoring(t, fmt.Sprintf("mode: run\nschedule: {spec: %q}", spec)))
		if r := alertRule(t, groups, "ElectorScheduleNoSuccess"); !strings.Contains(r.Expr, "> "+want+"\n") {
			t.Errorf("spec %s: ElectorScheduleNoSuccess %s, want the threshold %s s", spec, r.Expr, want)
		}
	}
	_, err := renderChart(withMonitoring(t, "mode: run\nschedule: {spec: '*/5 * * * *'}"))
	if err == nil || !strings.Contains(err.Error(), "metrics.prometheusRule.schedule.noSuccessFor") {
		t.Errorf("five fields without noSuccessFor: %v, want an error naming metrics.prometheusRule.schedule.noSuccessFor", err)
	}
	if _, err := renderChart(renderOptions{values: "mode: run\nschedule: {spec: '*/5 * * * *'}"}); err != nil {
		t.Errorf("five fields without the PrometheusRule: %v", err)
	}
}

// TestScheduleAlertExpressions evaluates the schedule's alerts on series of
// the release's replicas (a 5m window, noSuccessFor 10m): each fires on what
// it is about and stays silent otherwise.
func TestScheduleAlertExpressions(t *testing.T) {
	groups := renderedRules(t, withMonitoring(t, "mode: run\nschedule: {spec: '@every 1m'}\nmetrics: {prometheusRule: {schedule: {noSuccessFor: 10m, window: 5m}}}"))
	series := func(metric, labels string, pods ...string) string {
		var b strings.Builder
		for i := 0; i+1 < len(pods); i += 2 {
			fmt.Fprintf(&b, "  %s{namespace=\"default\", name=\"test\", pod=%q%s} %s\n", metric, pods[i], labels, pods[i+1])
		}
		return b.String()
	}
	missed := func(reason string, pods ...string) string {
		return series("elector_schedule_missed_slots_total", `, reason="`+reason+`"`, pods...)
	}
	runs := func(result string, pods ...string) string {
		return series("elector_schedule_runs_total", `, result="`+result+`"`, pods...)
	}
	const success = "elector_schedule_last_success_timestamp_seconds"
	for _, tc := range []struct {
		name, alert, series string
		until               time.Duration
		want                []int
	}{
		{"no slot missed", "ElectorScheduleMissedSlot",
			missed("overlap", "a", "0x40", "b", "0x40") + missed("attempts", "a", "0x40"), 20 * time.Minute, nil},
		// One slot missed at 300 s: firing at once, until the window no longer
		// holds a sample from before it (270 s leaves it at 570 s).
		{"a slot missed", "ElectorScheduleMissedSlot",
			missed("overlap", "a", "0x9 1x30") + missed("attempts", "a", "0x40"), 20 * time.Minute, seconds(300, 540, 30)},
		{"another series of another lease", "ElectorScheduleMissedSlot",
			`  elector_schedule_missed_slots_total{namespace="default", name="other", pod="a", reason="overlap"} 0x9 1x30` + "\n", 20 * time.Minute, nil},
		{"runs done, lost and cancelled", "ElectorScheduleFailing",
			runs("done", "a", "0+1x40") + runs("lost", "a", "0 1x39") + runs("cancelled", "b", "0 0 1x38") + runs("failed", "a", "0x40"), 20 * time.Minute, nil},
		// A failed run at 600 s (retried): firing for the 5m window.
		{"a failed run", "ElectorScheduleFailing",
			runs("done", "a", "0+1x40") + runs("failed", "a", "0x19 1x20"), 20 * time.Minute, seconds(600, 840, 30)},
		// A success every minute: never 10m without one.
		{"succeeding", "ElectorScheduleNoSuccess",
			runs("done", "a", "0x60") + series(success, "", "a", "_ _ 60x1 120x1 180x1 240x1 300x1 360x1 420x1 480x1 540x1 600x1 660x1 720x1 780x1 840x1 900x1 960x1 1020x1 1080x1 1140x1 1200x1 1260x1 1320x1 1380x1 1440x1 1500x1 1560x1 1620x1 1680x1 1740x1 1800x1"), 30 * time.Minute, nil},
		// The last success at 60 s: firing once 10m have passed.
		{"successes stop", "ElectorScheduleNoSuccess",
			runs("done", "a", "0x60") + series(success, "", "a", "_ _ 60x58"), 30 * time.Minute, seconds(690, 1800, 30)},
		// The replica that recorded the last success (60 s) is replaced at
		// 300 s by one that never succeeds: the alert still fires after 10m,
		// and goes on once the old replica's series has left the window.
		{"successes stop across a rollout", "ElectorScheduleNoSuccess",
			runs("done", "a", "0x10", "c", "_x10 0x50") + series(success, "", "a", "_ _ 60x8"), 30 * time.Minute, seconds(690, 1800, 30)},
		// A new schedule that never succeeds: firing once it has run 10m.
		{"never a success", "ElectorScheduleNoSuccess",
			runs("done", "a", "0x60", "b", "0x60"), 30 * time.Minute, seconds(600, 1800, 30)},
		// Uninstalled at 300 s: nothing to alert on.
		{"no schedule any more", "ElectorScheduleNoSuccess",
			runs("done", "a", "0x10"), 30 * time.Minute, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := firing(t, alertRule(t, groups, tc.alert), tc.series, tc.until)
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s fired at %v s, want %v s\nexpr: %s\nseries:\n%s", tc.alert, got, tc.want, alertRule(t, groups, tc.alert).Expr, tc.series)
			}
		})
	}
}

// TestScheduleArgsRunTheCLI runs two replicas with the rendered arguments of
// a schedule (every option set) against a real Redis: the CLI accepts the
// flags, the leader runs the command per slot with ELECTOR_SLOT and
// ELECTOR_ATTEMPT, the follower never, and the leader exports the metrics
// the schedule's alerts query, labelled with the lease.
func TestScheduleArgsRunTheCLI(t *testing.T) {
	server := requireRedis(t)
	bin := buildElector(t)
	addr := startRedis(t, server, false)

	_, objs := mustRender(t, renderOptions{values: `mode: run
app: {command: [sh, -c, 'true']}
schedule: {spec: '@every 2s', timeZone: Europe/Berlin, overlap: wait, catchUp: all, startingDeadline: 1m, maxAttempts: 2, retryDelay: 1s, history: 10}
metrics: {prometheusRule: {enabled: true}}`})
	_, spec := podSpec(t, objs)
	c := theElector(t, spec)
	if n := len(scheduleFlags(c.Args)); n != 8 {
		t.Fatalf("%d schedule flags in %q, want 8", n, c.Args)
	}
	exe := installLike(t, bin, spec)
	lease := mustFlag(t, c, "lease-name")

	// Each run appends its slot, attempt and fencing token.
	start := func(name string) *replica {
		return startReplicaWith(t, exe, c, name, addr, func(child string) []string {
			return []string{"sh", "-c", `echo "$ELECTOR_SLOT $ELECTOR_ATTEMPT $ELECTOR_FENCING_TOKEN" >> "$0"`, child}
		})
	}
	a, b := start("schedule-pod-a"), start("schedule-pod-b")

	var leader, follower *replica
	waitFor(t, 30*time.Second, "one replica leads", func() error {
		la, errA := a.leader()
		lb, errB := b.leader()
		if errA != nil || errB != nil {
			return errors.Join(errA, errB)
		}
		switch {
		case la.IsLeader && !lb.IsLeader:
			leader, follower = a, b
		case lb.IsLeader && !la.IsLeader:
			leader, follower = b, a
		default:
			return fmt.Errorf("isLeader: %v, %v", la.IsLeader, lb.IsLeader)
		}
		return nil
	}, a, b)

	// Two slots run: each line a slot (RFC 3339, a multiple of 2 s), attempt 1.
	waitFor(t, 20*time.Second, "the leader runs two slots", func() error {
		data, err := os.ReadFile(leader.child)
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) < 2 {
			return fmt.Errorf("%d runs: %q", len(lines), data)
		}
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) != 3 {
				return fmt.Errorf("run %q, want a slot, an attempt and a token", l)
			}
			slot, err := time.Parse(time.RFC3339, f[0])
			if err != nil || slot.Unix()%2 != 0 {
				return fmt.Errorf("ELECTOR_SLOT %q (%v), want a time on the 2s grid", f[0], err)
			}
			if f[1] != "1" {
				return fmt.Errorf("ELECTOR_ATTEMPT %q, want 1", f[1])
			}
			if _, err := strconv.ParseUint(f[2], 10, 64); err != nil {
				return fmt.Errorf("ELECTOR_FENCING_TOKEN %q: %w", f[2], err)
			}
		}
		return nil
	}, a, b)
	if _, err := os.Stat(follower.child); err == nil {
		t.Errorf("%s: the command ran on a follower", follower.name)
	}

	// The metrics the alerts query, with the lease as their name label.
	groups := renderedRules(t, withMonitoring(t, "mode: run\nschedule: {spec: '@every 2s'}"))
	var queried []string
	for _, n := range scheduleAlerts {
		expr, err := promParser.ParseExpr(alertRule(t, groups, n).Expr)
		if err != nil {
			t.Fatal(err)
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok && !slices.Contains(queried, vs.Name) {
				queried = append(queried, vs.Name)
			}
			return nil
		})
	}
	waitFor(t, 10*time.Second, "the leader exports the schedule's metrics", func() error {
		code, body, err := leader.get("/metrics")
		if err != nil || code != 200 {
			return fmt.Errorf("/metrics: %d %v", code, err)
		}
		for _, m := range queried {
			if !strings.Contains(string(body), m+`{name="`+lease+`"`) {
				return fmt.Errorf("no %s{name=%q} in /metrics", m, lease)
			}
		}
		return nil
	}, a, b)
	_ = leader.stop(t, 30*time.Second)
	_ = follower.stop(t, 30*time.Second)
}
