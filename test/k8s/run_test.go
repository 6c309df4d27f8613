package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	// The worker records the SIGTERM it ignores with a write to Redis, which a loaded machine
	// can hold up for a second: the grace stays 2s, within the bound that the chart and elector
	// run enforce (8s - 4s - the 82ms drift margin = 3.918s) of a lease longer than the others'.
	const killGrace = 2 * time.Second
	const tgps = 20
	logKey := "e2e:{job}:log"
	r := e.install(t, ctx, "job",
		"--set", "mode=run", "--set", "replicaCount=3",
		"--set", "lease.duration=8s", "--set", "lease.renewDeadline=4s",
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

	// Follow the old leader's elector run log from before the delete: its own times of
	// "Stopping the command" and "The command stopped" are where the kill grace is applied.
	// The worker's writes cannot tell it: on a loaded machine a worker that gets no CPU
	// writes its last line early, and it was seen to (0.375 s and 0.668 s after SIGTERM).
	elog := e.followLog(t, ctx, leader, app, "Started the command")

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
	// it then: read from elector run's own log. The worker's writes bound it from above
	// (200 ms between writes; a loaded machine may add to that side).
	grace := killGraceFromLog(t, elog.wait(t))
	if grace < killGrace-100*time.Millisecond {
		t.Errorf("elector run stopped the command %v after signalling it, before the kill grace %v", grace, killGrace)
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
	t.Logf("run mode: SIGTERM at +%v, job's last write %v later, SIGKILLed by elector run %v after its signal (kill grace %v), pod gone at +%v (grace period %ds), new leader %s first wrote at +%v",
		term.Sub(t0), ranOn, grace, killGrace, gone.Sub(t0), tgps, newLeader, firstNew.Sub(t0))
	e.figure("run_sigterm_s", secs(term.Sub(t0)))
	e.figure("run_kill_grace_observed_s", grace.Seconds())
	e.figure("run_job_after_sigterm_s", secs(ranOn))
	e.figure("run_pod_gone_s", secs(gone.Sub(t0)))
	e.figure("run_new_job_first_write_s", secs(firstNew.Sub(t0)))
	e.figure("run_gap_between_jobs_s", secs(firstNew.Sub(lastOld)))
}

// followedLog is a container's log followed with kubectl logs -f into a file.
type followedLog struct {
	path string
	done chan error
}

// followLog follows container c of pod from its start, and returns once the lines logged
// so far have arrived (one of them contains ready), so that the pod cannot be gone before
// its log was read. The log is printed should the test fail.
func (e *env) followLog(t *testing.T, ctx context.Context, pod, c, ready string) *followedLog {
	t.Helper()
	l := &followedLog{path: filepath.Join(t.TempDir(), pod+"-"+c+".log"), done: make(chan error, 1)}
	f, err := os.Create(l.path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := e.c.KubectlCmd(ctx, "logs", "-f", pod, "-c", c)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	go func() { l.done <- cmd.Wait(); f.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(l.path)
			t.Logf("log of %s/%s:\n%s", pod, c, b)
		}
	})
	if err := waitUntil(ctx, time.Minute, func() error {
		b, _ := os.ReadFile(l.path)
		if !strings.Contains(string(b), ready) {
			return fmt.Errorf("kubectl logs -f %s -c %s has not printed %q yet", pod, c, ready)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return l
}

// wait returns the whole log once kubectl logs -f ended (the container exited).
func (l *followedLog) wait(t *testing.T) string {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(time.Minute):
		t.Fatalf("kubectl logs -f into %s did not end a minute after the pod was gone", l.path)
	}
	b, err := os.ReadFile(l.path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// killGraceFromLog returns the time between elector run's "Stopping the command" and "The
// command stopped" in its log, by klog's own header times (taken when elector run logs,
// before it signals and after the command ended, so the difference is at least the grace
// it applied), and checks the command was SIGKILLed after the grace period.
func killGraceFromLog(t *testing.T, log string) time.Duration {
	t.Helper()
	var stopping, stopped time.Time
	for _, line := range strings.Split(log, "\n") {
		switch {
		case strings.Contains(line, `"Stopping the command"`):
			stopping = klogTime(t, line)
		case strings.Contains(line, `"The command stopped"`):
			stopped = klogTime(t, line)
			if !strings.Contains(line, "killed by signal 9") || !strings.Contains(line, "after the stop grace period") {
				t.Errorf("the command was not SIGKILLed after the grace period: %s", line)
			}
		}
	}
	if stopping.IsZero() || stopped.IsZero() {
		t.Fatalf("elector run's log has no \"Stopping the command\" and \"The command stopped\" lines:\n%s", log)
	}
	return stopped.Sub(stopping)
}

// klogTime is the time of a klog header ("I1201 12:56:01.123456 ..."), on a day of its own:
// only differences of times of one log are used.
func klogTime(t *testing.T, line string) time.Time {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 2 || len(f[0]) != 5 {
		t.Fatalf("not a klog line: %q", line)
	}
	at, err := time.Parse("0102 15:04:05.000000", f[0][1:]+" "+f[1])
	if err != nil {
		t.Fatalf("klog header of %q: %v", line, err)
	}
	return at
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
