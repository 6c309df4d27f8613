package k8s

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// activity is one record of `worker active` (test/k8s/cmd/worker/active.go): the app's own
// account of when it started and stopped the singleton work (start, stop, with the term's
// token) and when its process came up and went down (up, down).
type activity struct {
	pod, instance string
	token         int64
	at            time.Time
	event         string
}

// interval is an instance's span of work (start..stop) or of life (up..down); stop is zero
// while it lasts.
type interval struct {
	pod, instance string
	token         int64
	start, stop   time.Time
}

func (iv interval) String() string {
	stop := "…"
	if !iv.stop.IsZero() {
		stop = iv.stop.Format("15:04:05.000")
	}
	return fmt.Sprintf("%s/%s token %d %s-%s", iv.pod, iv.instance, iv.token, iv.start.Format("15:04:05.000"), stop)
}

// workerActiveValues are the chart values that run `worker active` as the app, recording
// into key, taking stopDelay to stop after SIGTERM.
func (e *env) workerActiveValues(key string, stopDelay time.Duration) []string {
	return []string{
		"--set", "app.command={/worker,active}",
		"--set-json", fmt.Sprintf(`app.env=[{"name":"WORKER_REDIS","value":%q},{"name":"WORKER_LOG_KEY","value":%q},{"name":"WORKER_STOP_DELAY","value":%q}]`,
			e.redisAddr, key, stopDelay.String()),
	}
}

func (e *env) activities(ctx context.Context, key string) ([]activity, error) {
	lines, err := e.redis.LRange(ctx, key, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	var out []activity
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 5 {
			return nil, fmt.Errorf("bad activity record %q", l)
		}
		tok, err1 := strconv.ParseInt(f[2], 10, 64)
		ms, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("bad activity record %q", l)
		}
		out = append(out, activity{f[0], f[1], tok, time.UnixMilli(ms), f[4]})
	}
	return out, nil
}

// spans pairs the begin and end records (start/stop or up/down) of each instance.
func spans(acts []activity, begin, end string) []interval {
	var out []interval
	open := map[string]int{} // instance -> index in out
	for _, a := range acts {
		switch a.event {
		case begin:
			open[a.instance] = len(out)
			out = append(out, interval{pod: a.pod, instance: a.instance, token: a.token, start: a.at})
		case end:
			if i, ok := open[a.instance]; ok {
				out[i].stop = a.at
				delete(open, a.instance)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// overlaps lists every two spans of different instances that share a moment (a stop and a
// start in the same millisecond do not).
func overlaps(ivs []interval) []string {
	var out []string
	end := func(iv interval) time.Time {
		if iv.stop.IsZero() {
			return time.Unix(1<<40, 0)
		}
		return iv.stop
	}
	for i, a := range ivs {
		for _, b := range ivs[i+1:] {
			if a.instance != b.instance && a.start.Before(end(b)) && b.start.Before(end(a)) {
				out = append(out, fmt.Sprintf("%v and %v", a, b))
			}
		}
	}
	return out
}

// openWork is the instance working now (the last work span, still open), if any.
func openWork(acts []activity) (interval, bool) {
	ivs := spans(acts, "start", "stop")
	for i := len(ivs) - 1; i >= 0; i-- {
		if ivs[i].stop.IsZero() {
			return ivs[i], true
		}
	}
	return interval{}, false
}

// podsIn lists the pods of a selector in ns.
func (e *env) podsIn(ctx context.Context, ns, selector string) ([]corev1.Pod, error) {
	l, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func podReady(p corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// readyNames are the names of the Ready pods that are not terminating.
func readyNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		if podReady(p) {
			out = append(out, p.Name)
		}
	}
	sort.Strings(out)
	return out
}

// labelledNames are the pods carrying the leader label.
func labelledNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		if p.Labels[leaderLabelKey] == "true" {
			out = append(out, p.Name)
		}
	}
	sort.Strings(out)
	return out
}

// settledWork waits until the release has replicas Ready pods, a lease holder among them,
// and the holder's app working in the holder's term; it returns the holder, its token and
// its work span.
func (e *env) settledWork(t *testing.T, ctx context.Context, r *release, replicas int, key string, limit time.Duration) (string, int64, interval) {
	t.Helper()
	var holder string
	var token int64
	var work interval
	err := waitUntil(ctx, limit, func() error {
		pods, err := e.podsIn(ctx, r.ns, r.selector.String())
		if err != nil {
			return err
		}
		if ready := readyNames(pods); len(ready) != replicas {
			return fmt.Errorf("ready pods %v, want %d", ready, replicas)
		}
		h, tok, err := e.holder(ctx, r)
		if err != nil || h == "" {
			return fmt.Errorf("no holder (%v)", err)
		}
		acts, err := e.activities(ctx, key)
		if err != nil {
			return err
		}
		w, ok := openWork(acts)
		if !ok || w.pod != h || w.token != tok {
			return fmt.Errorf("holder %s (token %d), the app working: %v (%t)", h, tok, w, ok)
		}
		holder, token, work = h, tok, w
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", r.name, err)
	}
	return holder, token, work
}
