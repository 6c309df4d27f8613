package k8s

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// jobWrite is one fenced write of the worker: identity token unix-ms event.
type jobWrite struct {
	identity string
	token    int64
	at       time.Time
	event    string
}

func (e *env) jobLog(t *testing.T, ctx context.Context, key string) []jobWrite {
	t.Helper()
	lines, err := e.redis.LRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []jobWrite
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("bad log line %q", l)
		}
		tok, _ := strconv.ParseInt(f[1], 10, 64)
		ms, _ := strconv.ParseInt(f[2], 10, 64)
		out = append(out, jobWrite{f[0], tok, time.UnixMilli(ms), f[3]})
	}
	return out
}

// TestRunMode: scenario 3. The wrapped command runs in exactly one pod; deleting that pod
// hands the job over; SIGTERM, kill grace, release and exit fit in
// terminationGracePeriodSeconds on a real kubelet.
func TestRunMode(t *testing.T) {
	ctx := context.Background()
	const killGrace = 2 * time.Second
	const tgps = 20
	logKey := "e2e:{job}:log"
	r := e.install(t, ctx, "job",
		"--set", "mode=run", "--set", "replicaCount=3",
		"--set", "run.killGrace="+killGrace.String(),
		"--set", fmt.Sprintf("terminationGracePeriodSeconds=%d", tgps),
		"--set", "app.command={/worker,job}",
		"--set-json", fmt.Sprintf(`app.env=[{"name":"WORKER_REDIS","value":%q},{"name":"WORKER_LOG_KEY","value":%q},{"name":"WORKER_IGNORE_TERM","value":"1"}]`, e.redisAddr, logKey))
	app := r.appContainer()
	// The command is exactly app.command: nothing of the demo's args appended (as the README
	// installs it, with app.command only).
	var argv []string
	for _, c := range r.deployment.Spec.Template.Spec.Containers {
		if c.Name == app {
			argv = append(append([]string{}, c.Command...), c.Args...)
		}
	}
	if i := slices.Index(argv, "--"); i < 0 || !slices.Equal(argv[i+1:], []string{"/worker", "job"}) {
		t.Fatalf("the app container %q runs %q, want elector run ... -- /worker job", app, argv)
	}

	// Steady: three running pods, the job writing from the holder only.
	var leader string
	if err := waitUntil(ctx, 3*time.Minute, func() error {
		pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: r.selector.String()})
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == "Ready" && c.Status == "True" {
					ready++
				}
			}
		}
		if ready != 3 {
			return fmt.Errorf("%d of %d pods ready", ready, len(pods.Items))
		}
		h, _, err := e.holder(ctx, r)
		if err != nil || h == "" {
			return fmt.Errorf("no holder: %v", err)
		}
		w := e.jobLog(t, ctx, logKey)
		if len(w) < 5 || w[len(w)-1].identity != h {
			return fmt.Errorf("the job has not written from %s yet", h)
		}
		leader = h
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Exactly one pod runs the command: every pod's process list.
	pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: r.selector.String()})
	if err != nil {
		t.Fatal(err)
	}
	var running []string
	for _, p := range pods.Items {
		out, err := e.c.Kubectl(ctx, "exec", p.Name, "-c", app, "--", "/worker", "ps")
		if err != nil {
			t.Fatal(err)
		}
		if runsJob(out) {
			running = append(running, p.Name)
		}
		if !strings.Contains(out, "/elector-bin/elector run") {
			t.Errorf("pod %s does not run elector run:\n%s", p.Name, out)
		}
	}
	if len(running) != 1 || running[0] != leader {
		t.Fatalf("the job runs in %v, want exactly the leader %s", running, leader)
	}
	time.Sleep(2 * time.Second)
	before := e.jobLog(t, ctx, logKey)
	for _, w := range before {
		if w.identity != leader {
			t.Fatalf("write by %s while %s leads: %+v", w.identity, leader, w)
		}
	}

	// Delete the leader: SIGTERM reaches elector run, which forwards it; the worker ignores
	// it, so elector run SIGKILLs it after killGrace, releases the lease, exits.
	t0 := time.Now()
	e.kubectlDelete(t, ctx, leader, false)
	var gone time.Time
	if err := waitUntil(ctx, time.Duration(tgps+30)*time.Second, func() error {
		_, err := e.cs.CoreV1().Pods("default").Get(ctx, leader, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			gone = time.Now()
			return nil
		}
		return fmt.Errorf("pod %s still there (%v)", leader, err)
	}); err != nil {
		t.Fatal(err)
	}
	var w []jobWrite
	if err := waitUntil(ctx, time.Minute, func() error {
		w = e.jobLog(t, ctx, logKey)
		if w[len(w)-1].identity == leader {
			return fmt.Errorf("no write by a new leader yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var term, lastOld, firstNew time.Time
	var newLeader string
	for i, x := range w {
		if i > 0 && x.token < w[i-1].token {
			t.Errorf("write %d has token %d after %d: the fence let a stale write through", i, x.token, w[i-1].token)
		}
		if x.identity == leader {
			if !firstNew.IsZero() {
				t.Errorf("the old leader wrote after the new one started: %+v", x)
			}
			lastOld = x.at
			if strings.HasPrefix(x.event, "signal-") && term.IsZero() {
				term = x.at
			}
		} else if firstNew.IsZero() {
			firstNew, newLeader = x.at, x.identity
		}
	}
	if term.IsZero() {
		t.Fatalf("the job never got SIGTERM (forwarded by elector run): %+v", w[len(w)-5:])
	}
	ranOn := lastOld.Sub(term)
	// The worker ignores SIGTERM: elector run must wait killGrace before SIGKILL, and SIGKILL
	// it then. 200 ms between writes; a loaded machine may add to the upper side.
	if ranOn < killGrace-400*time.Millisecond {
		t.Errorf("the job stopped %v after SIGTERM, before the kill grace %v", ranOn, killGrace)
	}
	if ranOn > killGrace+3*time.Second {
		t.Errorf("the job ran %v after SIGTERM, the kill grace is %v", ranOn, killGrace)
	}
	// The pod is gone before the kubelet would have SIGKILLed elector run.
	if d := gone.Sub(t0); d >= tgps*time.Second {
		t.Errorf("the pod took %v to terminate, terminationGracePeriodSeconds is %ds", d, tgps)
	}
	// The new leader is another pod, which runs the job now; the others do not.
	pods, err = e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: r.selector.String()})
	if err != nil {
		t.Fatal(err)
	}
	running = nil
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
		}
		out, err := e.c.Kubectl(ctx, "exec", p.Name, "-c", app, "--", "/worker", "ps")
		if err != nil {
			continue // a pod still starting
		}
		if runsJob(out) {
			running = append(running, p.Name)
		}
	}
	sort.Strings(running)
	if len(running) != 1 || running[0] != newLeader {
		t.Errorf("after the handover the job runs in %v, want exactly %s", running, newLeader)
	}
	t.Logf("run mode: SIGTERM at +%v, job SIGKILLed %v later (kill grace %v), pod gone at +%v (grace period %ds), new leader %s first wrote at +%v",
		term.Sub(t0), ranOn, killGrace, gone.Sub(t0), tgps, newLeader, firstNew.Sub(t0))
	e.figure("run_sigterm_s", secs(term.Sub(t0)))
	e.figure("run_job_after_sigterm_s", secs(ranOn))
	e.figure("run_pod_gone_s", secs(gone.Sub(t0)))
	e.figure("run_new_job_first_write_s", secs(firstNew.Sub(t0)))
	e.figure("run_gap_between_jobs_s", secs(firstNew.Sub(lastOld)))
}

// runsJob reports whether `worker ps` output lists the job itself ("PID /worker job"), not
// only elector run's command line that ends in it.
func runsJob(ps string) bool {
	for _, l := range strings.Split(ps, "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[1] == "/worker" && f[2] == "job" {
			return true
		}
	}
	return false
}
