package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// redisSecret creates the Secret redis-auth the examples expect (key password). The e2e's
// Redis has no password: elector authenticates with HELLO 3 AUTH default …, which a Redis
// whose default user has nopass accepts, so the password file is read and used all the same.
func (e *env) redisSecret(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	if _, err := e.c.Kubectl(ctx, "-n", ns, "create", "secret", "generic", "redis-auth", "--from-literal=password=e2e-unused"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.c.Kubectl(context.Background(), "-n", ns, "delete", "secret", "redis-auth", "--ignore-not-found")
	})
}

// TestLibraryChart (issue 48): examples/chart-with-sidecar, a chart of its own with the
// sidecar from charts/elector-lib, installed as its README says with the local images.
// Exactly one pod is labelled elector.io/leader=true, the holder; its status file says
// leader and no other's does; the metrics Service has both replicas; the leader's pod
// deleted, the other pod takes the label.
func TestLibraryChart(t *testing.T) {
	ctx := context.Background()
	e.redisSecret(t, ctx, "default")
	r := e.installChart(t, ctx, "default", "lib", filepath.Join(e.repo, "examples", "chart-with-sidecar"),
		"--set", "image.repository=localhost/elector-e2e/busybox", "--set", "image.tag=e2e",
		"--set", "elector.image.repository=localhost/elector", "--set", "elector.image.tag=e2e",
		"--set", "elector.redis.addr="+e.redisAddr,
		"--set", "elector.lease.duration="+leaseDuration.String(),
		"--set", "elector.lease.renewDeadline="+renewDeadline.String(),
		"--set", "elector.lease.retryPeriod="+retryPeriod.String())
	var metricsSvc string
	for _, s := range r.services {
		if s.Spec.PublishNotReadyAddresses {
			metricsSvc = s.Name
		}
	}
	if metricsSvc == "" {
		t.Fatal("the example renders no metrics Service")
	}
	// leads checks: 2 pods Ready, want the holder, the only labelled pod, the only pod whose
	// status file says leader.
	leads := func(want func(string) bool) (string, error) {
		pods, err := e.podsIn(ctx, "default", r.selector.String())
		if err != nil {
			return "", err
		}
		if ready := readyNames(pods); len(ready) != 2 {
			return "", fmt.Errorf("ready pods %v, want 2", ready)
		}
		h, _, err := e.holder(ctx, r)
		if err != nil || h == "" || !want(h) {
			return "", fmt.Errorf("holder %q (%v)", h, err)
		}
		if l := labelledNames(pods); !slices.Equal(l, []string{h}) {
			return "", fmt.Errorf("labelled %v, holder %s", l, h)
		}
		var saysLeader []string
		for _, p := range readyNames(pods) {
			out, err := e.c.Kubectl(ctx, "exec", p, "-c", "app", "--", "sh", "-c", `head -n 1 "$ELECTOR_STATUS_FILE"`)
			if err != nil {
				return "", err
			}
			if strings.TrimSpace(out) == "leader" {
				saysLeader = append(saysLeader, p)
			}
		}
		if !slices.Equal(saysLeader, []string{h}) {
			return "", fmt.Errorf("the status file says leader on %v, holder %s", saysLeader, h)
		}
		return h, nil
	}
	var holder string
	if err := waitUntil(ctx, 3*time.Minute, func() error {
		var err error
		holder, err = leads(func(string) bool { return true })
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := waitUntil(ctx, time.Minute, func() error {
		if eps := e.readyEndpoints(ctx, metricsSvc); len(eps) != 2 {
			return fmt.Errorf("metrics Service %s: endpoints %v, want 2", metricsSvc, eps)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pods, err := e.podsIn(ctx, "default", r.selector.String())
	if err != nil {
		t.Fatal(err)
	}
	var other string
	for _, p := range readyNames(pods) {
		if p != holder {
			other = p
		}
	}
	t0 := time.Now()
	e.kubectlDelete(t, ctx, holder, false)
	// The grace period (30 s), a lease that expires, a pod start: the bound, not the figure.
	// Another pod takes over: the follower that was Ready (other), or, when it was slower,
	// the Deployment's replacement; never the deleted pod.
	var next string
	if err := waitUntil(ctx, 30*time.Second+2*leaseDuration+time.Minute, func() error {
		var err error
		next, err = leads(func(h string) bool { return h != holder })
		return err
	}); err != nil {
		t.Fatalf("after deleting %s: %v", holder, err)
	}
	t.Logf("library chart: %s led; deleted, %s (the follower was %s) holds the label and says leader %v later",
		holder, next, other, time.Since(t0).Round(time.Millisecond))
	e.figure("library_chart_label_moved_s", secs(time.Since(t0)))
}

// example reads a manifest of examples/kubernetes with its images and Redis address
// replaced by the e2e's, failing when one of them is no longer there.
func (e *env) example(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.repo, "examples", "kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, rp := range [][2]string{
		{"image: ghcr.io/elector/elector:0.1.0", "image: " + electorImage},
		{"image: busybox:1.37", "image: " + busyboxImage},
		{"--redis-addr=redis:6379", "--redis-addr=" + e.redisAddr},
	} {
		if !strings.Contains(s, rp[0]) {
			t.Fatalf("%s has no %q any more: teach this test what to replace", name, rp[0])
		}
		s = strings.ReplaceAll(s, rp[0], rp[1])
	}
	return s
}

func (e *env) apply(t *testing.T, ctx context.Context, manifest string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(p, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Kubectl(ctx, "apply", "-f", p); err != nil {
		t.Fatal(err)
	}
}

// jobDone waits until the Job completed (failing if it failed) and returns its pods' logs of
// container c, joined.
func (e *env) jobDone(t *testing.T, ctx context.Context, job, c string, limit time.Duration) string {
	t.Helper()
	if err := waitUntil(ctx, limit, func() error {
		j, err := e.cs.BatchV1().Jobs("default").Get(ctx, job, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range j.Status.Conditions {
			if cond.Status != "True" {
				continue
			}
			switch cond.Type {
			case "Complete":
				return nil
			case "Failed":
				t.Fatalf("Job %s failed: %s", job, cond.Message)
			}
		}
		return fmt.Errorf("Job %s: %+v", job, j.Status)
	}); err != nil {
		t.Fatal(err)
	}
	pods, err := e.podsIn(ctx, "default", "batch.kubernetes.io/job-name="+job)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	for _, p := range pods {
		out, err := e.c.Kubectl(ctx, "logs", p.Name, "-c", c)
		if err != nil {
			t.Fatal(err)
		}
		logs.WriteString(out)
	}
	return logs.String()
}

// The lines the examples' commands print (elector run's own log quotes the script, with
// $ELECTOR_IDENTITY unexpanded, so the date and the identity tell them apart).
var (
	reportLine  = regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT[\d:]+Z \S+ runs the report, fencing token \d+$`)
	migrateLine = regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT[\d:]+Z \S+ migrates, fencing token \d+$`)
)

// TestOncePerExamples (issue 48): examples/kubernetes/cronjob.yaml and job.yaml as they are,
// with the e2e's images and Redis, side by side. The CronJob's Job started twice at once
// (kubectl create job --from, as a catch-up and a retry do) runs the command once, and the
// done mark shows in elector status; a third Job runs it 0 times. The Job of two pods runs
// it once, and re-applied after its deletion, 0 times.
func TestOncePerExamples(t *testing.T) {
	ctx := context.Background()
	e.redisSecret(t, ctx, "default")
	// Each example sleeps 20 s in its command; the follower waits, then finds the done mark.
	limit := 4 * time.Minute
	t.Run("group", func(t *testing.T) {
		t.Run("cronjob", func(t *testing.T) {
			t.Parallel()
			e.apply(t, ctx, e.example(t, "cronjob.yaml"))
			t.Cleanup(func() {
				_, _ = e.c.Kubectl(context.Background(), "delete", "job", "a", "b", "c", "--ignore-not-found")
				_, _ = e.c.Kubectl(context.Background(), "delete", "cronjob", "nightly-report", "--ignore-not-found")
			})
			for _, j := range []string{"a", "b"} {
				if _, err := e.c.Kubectl(ctx, "create", "job", j, "--from=cronjob/nightly-report"); err != nil {
					t.Fatal(err)
				}
			}
			logs := e.jobDone(t, ctx, "a", "report", limit) + e.jobDone(t, ctx, "b", "report", limit)
			if runs := reportLine.FindAllString(logs, -1); len(runs) != 1 {
				t.Errorf("Jobs a and b ran the report %d times, want once: %q\nlogs:\n%s", len(runs), runs, logs)
			}
			out, err := exec.CommandContext(ctx, filepath.Join(e.bin, "elector"), "status", "--redis-addr="+e.redisAddr, "--lease-name=nightly-report", "-o", "json").Output()
			if err != nil && len(out) == 0 {
				t.Fatalf("elector status: %v", err)
			}
			var st struct {
				Done *struct {
					Holder   string `json:"holder"`
					ExitCode int    `json:"exitCode"`
				} `json:"done"`
			}
			if err := json.Unmarshal(out, &st); err != nil || st.Done == nil || st.Done.ExitCode != 0 || !strings.HasPrefix(st.Done.Holder, "a-") && !strings.HasPrefix(st.Done.Holder, "b-") {
				t.Errorf("elector status shows no done mark of a pod of a or b: %s (%v)", out, err)
			}
			t.Logf("elector status -o json: %s", out)
			if _, err := e.c.Kubectl(ctx, "create", "job", "c", "--from=cronjob/nightly-report"); err != nil {
				t.Fatal(err)
			}
			if logs := e.jobDone(t, ctx, "c", "report", limit); reportLine.MatchString(logs) {
				t.Errorf("Job c ran the report again within the period:\n%s", logs)
			}
		})
		t.Run("job", func(t *testing.T) {
			t.Parallel()
			manifest := e.example(t, "job.yaml")
			var j struct {
				Spec struct {
					Parallelism int `json:"parallelism"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal([]byte(manifest), &j); err != nil || j.Spec.Parallelism != 2 {
				t.Fatalf("job.yaml: parallelism %d (%v), want 2", j.Spec.Parallelism, err)
			}
			e.apply(t, ctx, manifest)
			t.Cleanup(func() { _, _ = e.c.Kubectl(context.Background(), "delete", "job", "migrate", "--ignore-not-found") })
			logs := e.jobDone(t, ctx, "migrate", "migrate", limit)
			if runs := migrateLine.FindAllString(logs, -1); len(runs) != 1 {
				t.Errorf("the Job's two pods migrated %d times, want once: %q\nlogs:\n%s", len(runs), runs, logs)
			}
			if _, err := e.c.Kubectl(ctx, "delete", "job", "migrate", "--wait=true"); err != nil {
				t.Fatal(err)
			}
			if err := waitUntil(ctx, time.Minute, func() error {
				pods, err := e.podsIn(ctx, "default", "batch.kubernetes.io/job-name=migrate")
				if err == nil && len(pods) > 0 {
					err = fmt.Errorf("%d pods of the deleted Job left", len(pods))
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			e.apply(t, ctx, manifest)
			if logs := e.jobDone(t, ctx, "migrate", "migrate", limit); migrateLine.MatchString(logs) {
				t.Errorf("the re-applied Job migrated again within the hour:\n%s", logs)
			}
		})
	})
}

// TestChartFromOCI (issue 48): make chart-package's script packages both charts and pushes
// them (CHART_OCI) to an OCI registry, go-containerregistry's served in this process over
// plain HTTP; helm install oci://… of the pushed chart elects one leader.
func TestChartFromOCI(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	cmd := exec.CommandContext(ctx, filepath.Join(e.repo, "hack", "chart-package.sh"), t.TempDir())
	cmd.Env = append(os.Environ(), "HELM="+e.helm, "CHART_OCI=oci://"+host+"/charts", "CHART_OCI_FLAGS=--plain-http")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/chart-package.sh: %v\n%s", err, out)
	} else {
		t.Logf("hack/chart-package.sh:\n%s", out)
	}
	b, err := os.ReadFile(filepath.Join(e.repo, "charts", "elector", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version string `json:"version"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	r := e.installChart(t, ctx, "default", "oci", "oci://"+host+"/charts/elector",
		append([]string{"--version", chart.Version, "--plain-http", "--set", "app.command={/worker,idle}"}, e.baseValues()...)...)
	if err := waitUntil(ctx, 3*time.Minute, func() error {
		pods, err := e.podsIn(ctx, "default", r.selector.String())
		if err != nil {
			return err
		}
		if ready := readyNames(pods); len(ready) != 2 {
			return fmt.Errorf("ready pods %v, want 2", ready)
		}
		h, _, err := e.holder(ctx, r)
		if err != nil || h == "" {
			return fmt.Errorf("no holder (%v)", err)
		}
		var leaders []string
		for _, p := range pods {
			st, err := getLeader(ctx, p.Status.PodIP)
			if err != nil {
				return err
			}
			if st.IsLeader {
				leaders = append(leaders, p.Name)
			}
		}
		if !slices.Equal(leaders, []string{h}) {
			return fmt.Errorf("pods saying they lead: %v, holder %s", leaders, h)
		}
		t.Logf("installed from oci://%s/charts/elector %s: %s leads, %v after helm install started", host, chart.Version, h, time.Since(t0).Round(time.Millisecond))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
