package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/lease"
)

// helmCmd runs the helm built by hack/k8s-e2e.sh against the cluster.
func (e *env) helmCmd(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.helm, append(args, "--kubeconfig", e.c.Kubeconfig)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// baseValues are the values every release of the tests sets: the local images, the host's
// Redis, the short timings. Nothing else, so that the chart's defaults are what is tested;
// plain --set, as the README's commands.
func (e *env) baseValues() []string {
	return []string{
		"--set", "image.repository=localhost/elector", "--set", "image.tag=e2e",
		"--set", "app.image.repository=localhost/elector-e2e/worker", "--set", "app.image.tag=e2e",
		"--set", "redis.addr=" + e.redisAddr,
		"--set", "lease.duration=" + leaseDuration.String(),
		"--set", "lease.renewDeadline=" + renewDeadline.String(),
		"--set", "lease.retryPeriod=" + retryPeriod.String(),
	}
}

// release is an installed chart release, known by what helm rendered.
type release struct {
	name string
	ns   string
	// kind is the workload's kind; deployment holds a StatefulSet's name, selector, replicas
	// and pod template too, so that what reads the pods works for both.
	kind       string
	deployment appsv1.Deployment
	selector   labels.Selector
	services   []corev1.Service
	leaseName  string
	keyPrefix  string
}

// install runs `helm install NAME charts/elector` with the base values and extra.
func (e *env) install(t *testing.T, ctx context.Context, name string, extra ...string) *release {
	t.Helper()
	return e.installChart(t, ctx, "default", name, filepath.Join(e.repo, "charts", "elector"), append(e.baseValues(), extra...)...)
}

// installChart runs `helm install NAME CHART -n NS` with args (values, flags), uninstalls it
// at the end of the test, and returns what it rendered.
func (e *env) installChart(t *testing.T, ctx context.Context, ns, name, chart string, args ...string) *release {
	t.Helper()
	args = append([]string{"install", name, chart, "-n", ns}, args...)
	if out, err := e.helmCmd(ctx, args...); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("helm install %s:\n%s", name, out)
	}
	t.Cleanup(func() {
		if _, err := e.helmCmd(context.Background(), "uninstall", name, "-n", ns, "--wait", "--timeout", "2m"); err != nil {
			t.Logf("uninstall: %v", err)
		}
	})
	return e.renderedIn(t, ctx, ns, name)
}

// rendered reads the release's manifest: the Deployment (its selector selects the pods, so
// no name is hard-coded), the Services, and the lease flags.
func (e *env) rendered(t *testing.T, ctx context.Context, name string) *release {
	t.Helper()
	return e.renderedIn(t, ctx, "default", name)
}

func (e *env) renderedIn(t *testing.T, ctx context.Context, ns, name string) *release {
	t.Helper()
	out, err := e.helmCmd(ctx, "get", "manifest", name, "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	r := &release{name: name, ns: ns}
	for _, doc := range strings.Split(out, "\n---") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind == "" {
			continue
		}
		switch meta.Kind {
		case "Deployment":
			if err := yaml.Unmarshal([]byte(doc), &r.deployment); err != nil {
				t.Fatal(err)
			}
			r.kind = meta.Kind
		case "StatefulSet":
			var ss appsv1.StatefulSet
			if err := yaml.Unmarshal([]byte(doc), &ss); err != nil {
				t.Fatal(err)
			}
			r.kind = meta.Kind
			r.deployment.ObjectMeta = ss.ObjectMeta
			r.deployment.Spec.Replicas, r.deployment.Spec.Selector, r.deployment.Spec.Template = ss.Spec.Replicas, ss.Spec.Selector, ss.Spec.Template
		case "Service":
			var s corev1.Service
			if err := yaml.Unmarshal([]byte(doc), &s); err != nil {
				t.Fatal(err)
			}
			r.services = append(r.services, s)
		}
	}
	if r.deployment.Spec.Selector == nil {
		t.Fatalf("release %s renders no Deployment or StatefulSet with a selector:\n%s", name, out)
	}
	r.selector, err = metav1.LabelSelectorAsSelector(r.deployment.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	spec := r.deployment.Spec.Template.Spec
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			for _, a := range append(append([]string{}, c.Command...), c.Args...) {
				if v, ok := strings.CutPrefix(a, "--lease-name="); ok {
					r.leaseName = v
				}
				if v, ok := strings.CutPrefix(a, "--key-prefix="); ok {
					r.keyPrefix = v
				}
			}
		}
	}
	if r.leaseName == "" {
		t.Fatalf("release %s: no --lease-name in the rendered pod", name)
	}
	return r
}

// appContainer is the name of the container that runs the app (the one that is not the
// elector sidecar).
func (r *release) appContainer() string {
	for _, c := range r.deployment.Spec.Template.Spec.Containers {
		if len(c.Args) == 0 || c.Args[0] != "sidecar" {
			return c.Name
		}
	}
	return ""
}

// holder reads the lease from Redis: the holder's identity and token ("" and 0 if free).
func (e *env) holder(ctx context.Context, r *release) (string, int64, error) {
	l, err := leasekit.New(e.redis, r.leaseName, lease.Options{Prefix: r.keyPrefix})
	if err != nil {
		return "", 0, err
	}
	st, err := l.Get(ctx)
	if err != nil || !st.Held {
		return "", 0, err
	}
	return st.Record.Identity, st.Record.Token, nil
}

// podState is one pod in a sample.
type podState struct {
	name, ip           string
	ready, terminating bool
}

// sample is what the sampler saw at one moment.
type sample struct {
	at       time.Time
	pods     []podState
	ready    []string // addresses of ready endpoints of the watched Service
	holder   string   // the lease holder (Redis, or the Lease for client-go)
	token    int64    // the fencing token (Redis), or leaseTransitions (Lease)
	holderOK bool
}

func (s sample) readyPods() []string {
	var out []string
	for _, p := range s.pods {
		if p.ready && !p.terminating {
			out = append(out, p.name)
		}
	}
	return out
}

func (s sample) pod(name string) (podState, bool) {
	for _, p := range s.pods {
		if p.name == name {
			return p, true
		}
	}
	return podState{}, false
}

// samplePeriod is how often the sampler and the rolling update's prober look.
const samplePeriod = 100 * time.Millisecond

// sampler records, every samplePeriod, the pods of a selector, the ready endpoints of a Service
// and the lease holder.
type sampler struct {
	mu       sync.Mutex
	samples  []sample
	stop     func()
	done     chan struct{}
	diagnose func() string // what the cluster says went wrong, for a failed wait
}

func (e *env) startSampler(ctx context.Context, selector labels.Selector, service string, holder func(context.Context) (string, int64, error)) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{stop: cancel, done: make(chan struct{}), diagnose: e.diagnose}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(samplePeriod)
		defer tick.Stop()
		for {
			smp := sample{at: time.Now()}
			if pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector.String()}); err == nil {
				for _, p := range pods.Items {
					ps := podState{name: p.Name, ip: p.Status.PodIP, terminating: p.DeletionTimestamp != nil}
					for _, c := range p.Status.Conditions {
						if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
							ps.ready = true
						}
					}
					smp.pods = append(smp.pods, ps)
				}
			}
			if service != "" {
				smp.ready = e.readyEndpoints(ctx, service)
			}
			if h, tok, err := holder(ctx); err == nil {
				smp.holder, smp.token, smp.holderOK = h, tok, true
			}
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *sampler) Stop() { s.stop(); <-s.done }

func (s *sampler) since(t time.Time) []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sample
	for _, x := range s.samples {
		if !x.at.Before(t) {
			out = append(out, x)
		}
	}
	return out
}

// waitFor returns the first sample at or after t that satisfies cond.
func (s *sampler) waitFor(t *testing.T, after time.Time, limit time.Duration, what string, cond func(sample) bool) sample {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for _, x := range s.since(after) {
			if cond(x) {
				return x
			}
		}
		time.Sleep(samplePeriod)
	}
	last := s.since(after)
	var desc string
	if len(last) > 0 {
		l := last[len(last)-1]
		desc = fmt.Sprintf("last sample: pods %+v, ready endpoints %v, holder %q", l.pods, l.ready, l.holder)
	}
	t.Fatalf("waited %v for %s; %s\n%s", limit, what, desc, s.diagnose())
	return sample{}
}

// diagnose describes why pods may not start or become Ready: the cluster's recent warning
// events, the error lines of the kubelet's and containerd's logs and the free disk space
// (a full disk stops sandboxes and IP allocation, leaving pods without an IP).
func (e *env) diagnose() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	if evs, err := e.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"}); err == nil {
		items := evs.Items
		if len(items) > 10 {
			items = items[len(items)-10:]
		}
		fmt.Fprintf(&b, "warning events (last %d of %d):\n", len(items), len(evs.Items))
		for _, ev := range items {
			fmt.Fprintf(&b, "  %s %s/%s: %s: %s\n", ev.LastTimestamp.Format("15:04:05"), ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
		}
	}
	for _, name := range []string{"kubelet", "containerd"} {
		var errs []string
		for _, l := range strings.Split(e.c.LogTail(name, 2000), "\n") {
			if strings.Contains(l, "level=error") || strings.HasPrefix(l, "E") {
				errs = append(errs, l)
			}
		}
		if len(errs) > 5 {
			errs = errs[len(errs)-5:]
		}
		fmt.Fprintf(&b, "%s error lines (last %d):\n", name, len(errs))
		for _, l := range errs {
			if len(l) > 400 {
				l = l[:400] + "…"
			}
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	var fs syscall.Statfs_t
	if dir := filepath.Dir(e.c.Kubeconfig); syscall.Statfs(dir, &fs) == nil {
		fmt.Fprintf(&b, "free disk space under %s: %d MB\n", dir, fs.Bavail*uint64(fs.Bsize)>>20)
	}
	return b.String()
}

// readyEndpoints are the addresses the Service's EndpointSlices mark ready.
func (e *env) readyEndpoints(ctx context.Context, service string) []string {
	slices, err := e.cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return nil
	}
	var out []string
	for _, sl := range slices.Items {
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				out = append(out, ep.Addresses...)
			}
		}
	}
	sort.Strings(out)
	return out
}

// leaderService creates the Service a user adds under gateReadiness: the pods' selector, the
// elector's port; its EndpointSlice holds only Ready pods.
func (e *env) leaderService(t *testing.T, ctx context.Context, name string, selector map[string]string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 8080}},
		},
	}
	if _, err := e.cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.CoreV1().Services("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// leaderStatus is the part of GET /leader the tests read.
type leaderStatus struct {
	Identity string `json:"identity"`
	IsLeader bool   `json:"isLeader"`
	Token    int64  `json:"token"`
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

func getLeader(ctx context.Context, ip string) (leaderStatus, error) {
	var st leaderStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ip+":8080/leader", nil)
	if err != nil {
		return st, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func secs(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

// kubectlDelete deletes a pod the way a user does; force is --grace-period=0 --force.
func (e *env) kubectlDelete(t *testing.T, ctx context.Context, pod string, force bool) {
	t.Helper()
	args := []string{"delete", "pod", pod, "--wait=false"}
	if force {
		args = append(args, "--grace-period=0", "--force")
	}
	if _, err := e.c.Kubectl(ctx, args...); err != nil {
		t.Fatal(err)
	}
}
