package helm

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The tests in this file are the regression tests of what a Kubernetes user
// hit when trying the chart (issue 15).

// TestUserCommandIsVerbatim: the demo's command and script are defaults of
// the chart, never of a user's command. A user who sets app.command gets
// exactly app.command + app.args, in both modes and in the NOTES.
func TestUserCommandIsVerbatim(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		command      []string // run mode: the wrapped command; sidecar: command
		args         []string // sidecar mode only
		notes        string   // a line of NOTES.txt, run mode only
	}{
		{"run, command only", "mode: run\napp: {command: [/bin/report]}", []string{"/bin/report"}, nil, "Only the leader runs: /bin/report\n"},
		{"run, own image and command", "mode: run\napp: {image: {repository: ghcr.io/acme/report, tag: '1.4'}, command: [/bin/report]}", []string{"/bin/report"}, nil, "Only the leader runs: /bin/report\n"},
		{"run, command and args", "mode: run\napp: {image: {repository: ghcr.io/acme/report}, command: [/bin/report], args: [--daily]}", []string{"/bin/report", "--daily"}, nil, "Only the leader runs: /bin/report --daily\n"},
		{"sidecar, own image", "app: {image: {repository: ghcr.io/acme/billing, tag: '1.4'}}", nil, nil, ""},
		{"sidecar, own image and args", "app: {image: {repository: ghcr.io/acme/billing}, args: [serve]}", nil, []string{"serve"}, ""},
		{"sidecar, own command", "app: {command: [/bin/serve]}", []string{"/bin/serve"}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, objs := mustRender(t, renderOptions{values: tc.values})
			_, spec := podSpec(t, objs)
			app := &spec.Containers[0]
			if strings.HasPrefix(tc.values, "mode: run") {
				if got, _ := wrappedCommand(app); !reflect.DeepEqual(got, tc.command) {
					t.Errorf("wrapped command %q, want %q", got, tc.command)
				}
				if !strings.Contains(r.notes, tc.notes) {
					t.Errorf("NOTES lack %q:\n%s", tc.notes, r.notes)
				}
			} else if !reflect.DeepEqual(app.Command, tc.command) || !reflect.DeepEqual(app.Args, tc.args) {
				t.Errorf("app command %q args %q, want %q %q", app.Command, app.Args, tc.command, tc.args)
			}
			if strings.Contains(r.notes, "the chart's demo") {
				t.Errorf("NOTES call a user's command the demo:\n%s", r.notes)
			}
			if strings.Contains(r.manifest, "trap 'exit 0' TERM") || strings.Contains(r.notes, "trap") {
				t.Errorf("the demo script leaked into a user's command:\n%s", r.notes)
			}
		})
	}
	// The demo itself still runs when nothing about the app is set.
	for _, mode := range []string{"sidecar", "run"} {
		r, objs := mustRender(t, renderOptions{values: "mode: " + mode})
		_, spec := podSpec(t, objs)
		app := &spec.Containers[0]
		argv := append(append([]string{}, app.Command...), app.Args...)
		if mode == "run" {
			argv, _ = wrappedCommand(app)
		}
		if app.Image != "busybox:1.37" || len(argv) != 3 || argv[0] != "sh" || !strings.Contains(argv[2], "trap 'exit 0' TERM") {
			t.Errorf("%s mode demo: image %s argv %q, want busybox running the demo script", mode, app.Image, argv)
		}
		if !strings.Contains(r.notes, "demo") {
			t.Errorf("%s mode NOTES do not say the app is the demo:\n%s", mode, r.notes)
		}
	}
}

// TestAppSecurityContext: the elector's containers are restricted; the app
// container gets the pod's settings and app.securityContext only.
func TestAppSecurityContext(t *testing.T) {
	restricted := func(t *testing.T, c *corev1.Container) {
		t.Helper()
		sc := c.SecurityContext
		if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %q securityContext %+v, want restricted as 65532", c.Name, sc)
		}
	}
	for _, mode := range []string{"sidecar", "run"} {
		t.Run(mode, func(t *testing.T) {
			base := fmt.Sprintf("mode: %s\napp: {image: {repository: ghcr.io/acme/billing}, command: [/bin/billing]", mode)
			_, objs := mustRender(t, renderOptions{values: base + "}"})
			_, spec := podSpec(t, objs)
			app := &spec.Containers[0]
			if app.SecurityContext != nil {
				t.Errorf("app securityContext %+v, want none: the app has the pod's settings only", app.SecurityContext)
			}
			psc := spec.SecurityContext
			if psc == nil || psc.RunAsUser != nil || psc.RunAsGroup != nil || psc.RunAsNonRoot != nil {
				t.Errorf("pod securityContext %+v imposes a user on every container", psc)
			}
			for _, c := range allContainers(spec) {
				if c.Name != app.Name {
					restricted(t, &c)
				}
			}

			_, objs = mustRender(t, renderOptions{values: base + ", securityContext: {runAsUser: 1000, readOnlyRootFilesystem: true}}"})
			_, spec = podSpec(t, objs)
			app = &spec.Containers[0]
			if want := (&corev1.SecurityContext{RunAsUser: ptr(int64(1000)), ReadOnlyRootFilesystem: ptr(true)}); !reflect.DeepEqual(app.SecurityContext, want) {
				t.Errorf("app securityContext %+v, want exactly app.securityContext %+v", app.SecurityContext, want)
			}
		})
	}
}

// TestAppNames: the workload and its labels carry the app's name, which is
// the release's unless nameOverride says otherwise.
func TestAppNames(t *testing.T) {
	for _, tc := range []struct {
		release, values, fullname, name string
	}{
		{"billing", "", "billing", "billing"},
		{"billing", "nameOverride: invoices", "billing-invoices", "invoices"},
		{"billing-invoices", "nameOverride: invoices", "billing-invoices", "invoices"},
		{"billing", "fullnameOverride: pay", "pay", "billing"},
	} {
		t.Run(tc.release+"/"+tc.values, func(t *testing.T) {
			r, objs := mustRender(t, renderOptions{releaseName: tc.release, values: tc.values})
			d, spec := podSpec(t, objs)
			if d.Name != tc.fullname {
				t.Errorf("Deployment %s, want %s", d.Name, tc.fullname)
			}
			for _, o := range objs {
				if o.labels["app.kubernetes.io/name"] != tc.name || o.labels["app.kubernetes.io/instance"] != tc.release {
					t.Errorf("%s %s labels %v, want name %s instance %s", o.kind, o.name, o.labels, tc.name, tc.release)
				}
				if strings.Contains(o.name, "elector") {
					t.Errorf("%s %s is named after the chart, not the app", o.kind, o.name)
				}
			}
			if got := mustFlag(t, theElector(t, spec), "lease-name"); got != tc.fullname {
				t.Errorf("--lease-name=%s, want the fullname %s", got, tc.fullname)
			}
			if !strings.Contains(r.notes, "deployment/"+tc.fullname) {
				t.Errorf("NOTES do not name deployment/%s:\n%s", tc.fullname, r.notes)
			}
		})
	}
}

// TestZeroReplicas: replicaCount 0 parks the workload.
func TestZeroReplicas(t *testing.T) {
	for _, values := range []string{"replicaCount: 0", "replicaCount: 0\ngateReadiness: true", "replicaCount: 0\nmode: run"} {
		_, objs := mustRender(t, renderOptions{values: values})
		d, _ := podSpec(t, objs)
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
			t.Errorf("%q: replicas %v, want 0", values, d.Spec.Replicas)
		}
	}
}

// TestRedisAddrSchema: redis.addr is host:port (or a list of them), checked
// at install time rather than in a crash loop.
func TestRedisAddrSchema(t *testing.T) {
	for _, bad := range []string{
		`redis: {addr: "redis://redis:6379"}`,
		`redis: {addr: redis}`,
		`redis: {addr: "redis:"}`,
		`redis: {addr: ":6379"}`,
		`redis: {addr: "redis:0"}`,
		`redis: {addr: "redis:65536"}`,
		`redis: {addr: "redis:6379/0"}`,
		`redis: {addr: "redis 6379"}`,
		`redis: {addr: "::1:6379"}`,
		`redis: {mode: cluster, addr: "a:6379,redis://b:6379"}`,
		`redis: {mode: cluster, addr: "a:6379,"}`,
		`redis: {mode: cluster, addr: [a:6379, b]}`,
		`redis: {mode: cluster, addr: ["rediss://a:6379"]}`,
	} {
		_, err := renderChart(renderOptions{values: bad})
		if err == nil || !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), "/redis/addr") {
			t.Errorf("values %s: error %v, want a schema error at /redis/addr", bad, err)
		}
	}
	for _, good := range []string{
		`redis: {addr: "redis:6379"}`,
		`redis: {addr: "redis-master.redis.svc.cluster.local:6380"}`,
		`redis: {addr: "10.0.0.7:6379"}`,
		`redis: {addr: "[fd00::7]:6379"}`,
		`redis: {addr: "redis_1:65535"}`,
		`redis: {mode: cluster, addr: "a:6379,b:6379"}`,
		`redis: {mode: cluster, addr: "a:6379, b:6379"}`,
		`redis: {mode: cluster, addr: [a:6379, "[::1]:7000"]}`,
	} {
		if _, err := renderChart(renderOptions{values: good}); err != nil {
			t.Errorf("values %s: %v", good, err)
		}
	}
}

// killGraceBound is the longest kill grace after which a replica that lost
// leadership has surely stopped its command before another replica can
// start one: LeaseDuration − RenewDeadline − DriftMargin, where the drift
// margin is 1% of the lease duration plus 2 ms (internal/timing.DriftMargin).
func killGraceBound(leaseDuration, renewDeadline time.Duration) time.Duration {
	return leaseDuration - renewDeadline - (leaseDuration/100 + 2*time.Millisecond)
}

// TestKillGraceArithmetic: the chart's default kill grace keeps within the
// bound, rendering fails exactly when a kill grace exceeds it (elector run
// refuses it as a usage error), and
// terminationGracePeriodSeconds must cover the kill grace plus 5 s for the
// release and the exit.
func TestKillGraceArithmetic(t *testing.T) {
	r, objs := mustRender(t, renderOptions{values: "mode: run"})
	_, spec := podSpec(t, objs)
	c := theElector(t, spec)
	grace, err := time.ParseDuration(mustFlag(t, c, "kill-grace"))
	if err != nil {
		t.Fatal(err)
	}
	if grace != 4*time.Second {
		t.Errorf("default --kill-grace=%v, want 4s (elector run's default)", grace)
	}
	if bound := killGraceBound(15*time.Second, 10*time.Second); grace > bound {
		t.Errorf("default kill grace %v exceeds the bound %v of the default lease", grace, bound)
	}
	if strings.Contains(r.notes, "WARNING") {
		t.Errorf("NOTES warn with the default values:\n%s", r.notes)
	}
	if need := int64(math.Ceil((grace + 5*time.Second).Seconds())); *spec.TerminationGracePeriodSeconds < need {
		t.Errorf("terminationGracePeriodSeconds %d < kill grace + 5s = %d", *spec.TerminationGracePeriodSeconds, need)
	}

	for _, lease := range []struct{ duration, renew time.Duration }{
		{15 * time.Second, 10 * time.Second},
		{20 * time.Second, 15 * time.Second},
		{60 * time.Second, 30 * time.Second},
		{3 * time.Second, 2500 * time.Millisecond},
	} {
		bound := killGraceBound(lease.duration, lease.renew)
		for _, kg := range []time.Duration{bound - time.Millisecond, bound, bound + time.Millisecond} {
			if kg < 0 {
				continue
			}
			values := fmt.Sprintf("mode: run\nlease: {duration: %s, renewDeadline: %s, retryPeriod: 1s}\nrun: {killGrace: %s}\nterminationGracePeriodSeconds: 300",
				goDuration(lease.duration), goDuration(lease.renew), goDuration(kg))
			_, err := renderChart(renderOptions{values: values})
			if refused := err != nil; refused != (kg > bound) {
				t.Errorf("lease %v/%v, kill grace %v (bound %v): render error %v, want one: %v", lease.duration, lease.renew, kg, bound, err, kg > bound)
			}
			if err != nil && !strings.Contains(err.Error(), "run.killGrace") {
				t.Errorf("the refusal does not name run.killGrace: %v", err)
			}
		}
	}

	for _, tc := range []struct {
		killGrace string
		need      int
	}{{"4s", 9}, {"4001ms", 10}, {"0s", 5}, {"1m", 65}, {"1.5s", 7}} {
		const lease = "lease: {duration: 2m, renewDeadline: 30s, retryPeriod: 5s}\n" // a bound of 88.798s
		ok := fmt.Sprintf(lease+"mode: run\nrun: {killGrace: %s}\nterminationGracePeriodSeconds: %d", tc.killGrace, tc.need)
		if _, err := renderChart(renderOptions{values: ok}); err != nil {
			t.Errorf("kill grace %s with terminationGracePeriodSeconds %d: %v", tc.killGrace, tc.need, err)
		}
		short := fmt.Sprintf(lease+"mode: run\nrun: {killGrace: %s}\nterminationGracePeriodSeconds: %d", tc.killGrace, tc.need-1)
		if _, err := renderChart(renderOptions{values: short}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("must be at least run.killGrace (%s) + 5s for the release: %d", tc.killGrace, tc.need)) {
			t.Errorf("kill grace %s with terminationGracePeriodSeconds %d: %v, want a failure asking for %d", tc.killGrace, tc.need-1, err, tc.need)
		}
	}
}

// goDuration prints d as the Go duration the chart parses, in whole
// milliseconds.
func goDuration(d time.Duration) string {
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// TestImageDigest: image.digest and app.image.digest pin the images.
func TestImageDigest(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, mode := range []string{"sidecar", "run"} {
		values := fmt.Sprintf("mode: %s\nimage: {digest: %q}\napp: {image: {repository: ghcr.io/acme/billing, tag: '1.4', digest: %q}, command: [/bin/billing]}", mode, digest, digest)
		_, objs := mustRender(t, renderOptions{values: values})
		_, spec := podSpec(t, objs)
		for _, c := range allContainers(spec) {
			want := "ghcr.io/elector/elector@" + digest
			if c.Name == "app" {
				want = "ghcr.io/acme/billing@" + digest
			}
			if c.Image != want {
				t.Errorf("%s mode: container %s image %s, want %s", mode, c.Name, c.Image, want)
			}
		}
	}
	if _, err := renderChart(renderOptions{values: "image: {digest: sha256:abc}"}); err == nil || !strings.Contains(err.Error(), "/image/digest") {
		t.Errorf("a short digest: %v, want a schema error at /image/digest", err)
	}
}

// TestNotesShowLogs: the NOTES say how to read the elector's logs.
func TestNotesShowLogs(t *testing.T) {
	for values, want := range map[string]string{
		"":                         "kubectl --namespace default logs deployment/test -c elector",
		"sidecar: {native: false}": "kubectl --namespace default logs deployment/test -c elector",
		"mode: run":                "kubectl --namespace default logs deployment/test -c app",
	} {
		r, _ := mustRender(t, renderOptions{values: values})
		if !strings.Contains(r.notes, want) {
			t.Errorf("values %q: NOTES lack %q:\n%s", values, want, r.notes)
		}
	}
}
