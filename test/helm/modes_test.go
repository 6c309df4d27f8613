package helm

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	deploymentutil "k8s.io/kubectl/pkg/util/deployment"
)

func TestDefaultValues(t *testing.T) {
	r, objs := mustRender(t, renderOptions{})
	d, spec := podSpec(t, objs)
	c := theElector(t, spec)

	if got := mustFlag(t, c, "lease-name"); got != "test" {
		t.Errorf("--lease-name=%s, want the release fullname test", got)
	}
	for flag, want := range map[string]string{
		"redis-addr": "redis:6379", "redis-mode": "standalone", "key-prefix": "elector",
		"lease-duration": "15s", "renew-deadline": "10s", "retry-period": "2s", "v": "0",
	} {
		if got := mustFlag(t, c, flag); got != want {
			t.Errorf("--%s=%s, want %s", flag, got, want)
		}
	}
	for _, absent := range []string{"redis-tls", "sentinel-master", "sentinel-username", "sentinel-password-file", "redis-username", "redis-db", "redis-password-file"} {
		if _, ok := flagValue(c, absent); ok || hasFlag(c, "--"+absent) {
			t.Errorf("default values set --%s", absent)
		}
	}

	// A ready follower always exists during a rollout.
	want := appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
		MaxSurge: ptr(intstr.FromInt32(1)), MaxUnavailable: ptr(intstr.FromInt32(0))}}
	if !reflect.DeepEqual(d.Spec.Strategy, want) {
		t.Errorf("strategy %+v, want %+v", d.Spec.Strategy, want)
	}
	pdb := only[*policyv1.PodDisruptionBudget](t, objs)
	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) {
		t.Errorf("PDB maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}
	sa := only[*corev1.ServiceAccount](t, objs)
	if sa.Name != spec.ServiceAccountName || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("service account %s (automount %v), pod uses %s; want the same, without token", sa.Name, sa.AutomountServiceAccountToken, spec.ServiceAccountName)
	}
	svc := only[*corev1.Service](t, objs)
	if svc.Name != "test-metrics" || svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("metrics service %s %s %+v, want test-metrics, ClusterIP, port 8080", svc.Name, svc.Spec.Type, svc.Spec.Ports)
	}
	if len(serviceMonitors(objs)) > 0 {
		t.Error("a ServiceMonitor is rendered although metrics.serviceMonitor.enabled is false")
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("sidecar resources %+v, want requests and a memory limit", c.Resources)
	}

	for _, want := range []string{
		"port-forward deployment/test 8080:8080",
		"curl -s http://127.0.0.1:8080/leader",
		"get pods -l 'app.kubernetes.io/name=test,app.kubernetes.io/instance=test'",
	} {
		if !strings.Contains(r.notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, r.notes)
		}
	}
}

func TestSidecarNative(t *testing.T) {
	s := scenarioNamed(t, "sidecar-native")
	_, objs := mustRender(t, renderOptions{valuesFiles: s.files})
	d, spec := podSpec(t, objs)
	if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != sidecarName {
		t.Fatalf("init containers %v, want the native sidecar only", containerNames(spec.InitContainers))
	}
	app := findContainer(t, spec.Containers, "web")
	if app.Image != "registry.k8s.io/e2e-test-images/agnhost:2.53" || len(app.Command) > 0 || !reflect.DeepEqual(app.Args, []string{"netexec", "--http-port=8081"}) {
		t.Errorf("app %s %q %q, want the image's own entrypoint with app.args", app.Image, app.Command, app.Args)
	}
	// The app's own probes are kept in sidecar mode.
	if app.ReadinessProbe == nil || app.ReadinessProbe.HTTPGet == nil || resolvePort(t, app, app.ReadinessProbe.HTTPGet.Port) != 8081 {
		t.Errorf("app readiness probe %+v, want the app's own on port http (8081)", app.ReadinessProbe)
	}
	if app.LivenessProbe == nil || app.LivenessProbe.TCPSocket == nil {
		t.Errorf("app liveness probe %+v, want the app's own tcpSocket", app.LivenessProbe)
	}
	if m := volumeMount(app, "tmp"); m == nil || volume(spec, "tmp") == nil {
		t.Errorf("extra volume tmp not mounted in the app")
	}
	if got := mustFlag(t, theElector(t, spec), "redis-username"); got != "elector" {
		t.Errorf("--redis-username=%s, want elector", got)
	}
	if d.Spec.Template.Labels["example.com/tier"] != "backend" || d.Spec.Template.Annotations["example.com/team"] != "platform" {
		t.Errorf("pod labels %v, annotations %v: podLabels/podAnnotations missing", d.Spec.Template.Labels, d.Spec.Template.Annotations)
	}
}

func TestSidecarPlain(t *testing.T) {
	s := scenarioNamed(t, "sidecar-plain")
	r, objs := mustRender(t, renderOptions{valuesFiles: s.files})
	_, spec := podSpec(t, objs)
	if len(spec.InitContainers) != 0 {
		t.Errorf("init containers %v, want none without native sidecars", containerNames(spec.InitContainers))
	}
	c := findContainer(t, spec.Containers, sidecarName)
	if c.RestartPolicy != nil {
		t.Errorf("plain sidecar has restartPolicy %v", *c.RestartPolicy)
	}
	for flag, want := range map[string]string{
		"lease-name": "billing-reconciler", "lease-duration": "20s", "renew-deadline": "15s", "retry-period": "3s", "v": "2",
	} {
		if got := mustFlag(t, c, flag); got != want {
			t.Errorf("--%s=%s, want %s", flag, got, want)
		}
	}
	if spec.ServiceAccountName != "existing-sa" || len(objectsOf[*corev1.ServiceAccount](objs)) != 0 {
		t.Errorf("serviceAccountName %q with %d ServiceAccounts rendered, want existing-sa and none", spec.ServiceAccountName, len(objectsOf[*corev1.ServiceAccount](objs)))
	}
	if !strings.Contains(r.notes, "sidecar.native is false") {
		t.Errorf("NOTES.txt does not warn about plain sidecars:\n%s", r.notes)
	}
	// The plain sidecar works on clusters without native sidecars.
	if _, err := renderChart(renderOptions{valuesFiles: s.files, kubeVersion: "v1.28.9"}); err != nil {
		t.Errorf("plain sidecar on Kubernetes 1.28: %v", err)
	}
}

// TestGatedReadinessRollout checks the claim of gateReadiness: only the
// leader is ever Ready, and the rendered strategy still lets both the
// Deployment controller and `helm upgrade --wait` finish a rollout.
func TestGatedReadinessRollout(t *testing.T) {
	for _, mode := range []string{"sidecar", "run"} {
		for replicas := 1; replicas <= 5; replicas++ {
			t.Run(fmt.Sprintf("%s/replicas=%d", mode, replicas), func(t *testing.T) {
				values := fmt.Sprintf("gateReadiness: true\nreplicaCount: %d\nmode: %s\napp: {command: [sleep, infinity], args: []}\n", replicas, mode)
				_, objs := mustRender(t, renderOptions{values: values})
				d, spec := podSpec(t, objs)
				c := theElector(t, spec)
				checkHTTPProbe(t, c, "readiness", c.ReadinessProbe, "/readyz", 8080)
				checkHTTPProbe(t, c, "liveness", c.LivenessProbe, "/healthz", 8080)
				if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
					t.Fatalf("strategy %s: Recreate makes `helm upgrade --wait` wait for all replicas to be Ready", d.Spec.Strategy.Type)
				}
				// At most one pod, the leader, is ever Ready. The Deployment
				// controller scales down old pods only while more than
				// replicas-maxUnavailable pods are available; a new pod
				// cannot become Ready while an old leader lives. So
				// replicas-maxUnavailable must be 0.
				unavailable := maxUnavailable(t, d)
				if minAvailable := *d.Spec.Replicas - unavailable; minAvailable > 0 {
					t.Errorf("maxUnavailable %v keeps %d pods available: the rollout deadlocks with one Ready pod", d.Spec.Strategy.RollingUpdate.MaxUnavailable, minAvailable)
				}
				// helm's --wait (pkg/kube ReadyChecker) wants
				// replicas-maxUnavailable Ready pods of the new ReplicaSet.
				if expectedReady := *d.Spec.Replicas - unavailable; expectedReady > 1 {
					t.Errorf("helm --wait would wait for %d Ready pods; only the leader is Ready", expectedReady)
				}
				surge, err := intstr.GetScaledValueFromIntOrPercent(d.Spec.Strategy.RollingUpdate.MaxSurge, replicas, true)
				if err != nil || surge < 1 {
					t.Errorf("maxSurge %v (%v): want a new pod started before the old leader stops", d.Spec.Strategy.RollingUpdate.MaxSurge, err)
				}
				if pdbs := objectsOf[*policyv1.PodDisruptionBudget](objs); len(pdbs) > 0 {
					t.Errorf("rendered a PodDisruptionBudget under gated readiness: %+v", pdbs[0].Spec)
				}
			})
		}
	}
	r, _ := mustRender(t, renderOptions{valuesFiles: scenarioNamed(t, "gated").files})
	if !strings.Contains(r.notes, "gateReadiness is on") {
		t.Errorf("NOTES.txt does not explain gated readiness:\n%s", r.notes)
	}
}

// TestUngatedRollout checks the default strategy for every replica count:
// the controller keeps all replicas available (so a follower is Ready to
// take over) and `helm upgrade --wait` waits for them.
func TestUngatedRollout(t *testing.T) {
	for replicas := 1; replicas <= 4; replicas++ {
		_, objs := mustRender(t, renderOptions{values: fmt.Sprintf("replicaCount: %d", replicas)})
		d, _ := podSpec(t, objs)
		if mu := maxUnavailable(t, d); mu != 0 {
			t.Errorf("replicas %d: maxUnavailable %d, want 0", replicas, mu)
		}
	}
}

func TestRunMode(t *testing.T) {
	s := scenarioNamed(t, "run")
	r, objs := mustRender(t, renderOptions{valuesFiles: s.files})
	_, spec := podSpec(t, objs)
	c := findContainer(t, spec.Containers, "reconciler")
	if c.Image != "registry.example.com/reconciler:2.4.1" {
		t.Errorf("app image %s, want the app's", c.Image)
	}
	if !reflect.DeepEqual(c.Command, []string{electorBinary}) {
		t.Errorf("command %q, want [%s]", c.Command, electorBinary)
	}
	wrapped, _ := wrappedCommand(c)
	if want := []string{"/usr/local/bin/reconciler", "--interval=30s", "--fencing-token-env=ELECTOR_FENCING_TOKEN"}; !reflect.DeepEqual(wrapped, want) {
		t.Errorf("wrapped command %q, want app.command + app.args %q", wrapped, want)
	}
	for flag, want := range map[string]string{"kill-grace": "20s", "stop-signal": "SIGINT", "http-addr": ":8080"} {
		if got := mustFlag(t, c, flag); got != want {
			t.Errorf("--%s=%s, want %s", flag, got, want)
		}
	}
	if !hasFlag(c, "--exit-on-lost") {
		t.Errorf("no --exit-on-lost in %q", c.Args)
	}
	if *spec.TerminationGracePeriodSeconds != 40 {
		t.Errorf("terminationGracePeriodSeconds %d, want 40", *spec.TerminationGracePeriodSeconds)
	}
	if e := envVar(c, "LOG_FORMAT"); e == nil || e.Value != "json" {
		t.Errorf("app env LOG_FORMAT %+v, want json", e)
	}
	if e := envVar(c, "GOMEMLIMIT"); e == nil || e.Value != "100MiB" {
		t.Errorf("extraEnv GOMEMLIMIT %+v, want 100MiB", e)
	}
	if c.Resources.Requests.Cpu().String() != "100m" {
		t.Errorf("app resources %+v, want app.resources", c.Resources)
	}
	if !strings.Contains(r.notes, "Only the leader runs: /usr/local/bin/reconciler") {
		t.Errorf("NOTES.txt does not show the wrapped command:\n%s", r.notes)
	}
	if strings.Contains(r.notes, "WARNING") {
		t.Errorf("NOTES.txt warns with a 20s kill grace within its 40s/15s lease's bound:\n%s", r.notes)
	}
	// The same kill grace with the default lease is refused, as elector run refuses it.
	if _, err := renderChart(renderOptions{valuesFiles: []string{"ci/run-values.yaml"}, values: "lease: {duration: 15s, renewDeadline: 10s}"}); err == nil ||
		!strings.Contains(err.Error(), "run.killGrace (20s) is longer than its bound") || !strings.Contains(err.Error(), "4848ms") {
		t.Errorf("a 20s kill grace with the default lease renders (%v); want a refusal giving the 4848ms bound", err)
	}

	// Without extra flags, the wrapped command follows the defaults and the
	// flags the elector does not need are absent.
	r, objs = mustRender(t, renderOptions{values: "mode: run\napp: {command: [/bin/job], args: [a, '--b']}"})
	_, spec = podSpec(t, objs)
	c = theElector(t, spec)
	if wrapped, _ := wrappedCommand(c); !reflect.DeepEqual(wrapped, []string{"/bin/job", "a", "--b"}) {
		t.Errorf("wrapped %q, want [/bin/job a --b]", wrapped)
	}
	if hasFlag(c, "--exit-on-lost") || mustFlag(t, c, "kill-grace") != "4s" || mustFlag(t, c, "stop-signal") != "SIGTERM" {
		t.Errorf("run flags %q, want the defaults --kill-grace=4s --stop-signal=SIGTERM without --exit-on-lost", electorFlags(c))
	}
	if strings.Contains(r.notes, "WARNING") {
		t.Errorf("NOTES.txt warns with the default kill grace (4s, within the 4848ms bound):\n%s", r.notes)
	}
}

func TestTLS(t *testing.T) {
	s := scenarioNamed(t, "tls")
	_, objs := mustRender(t, renderOptions{valuesFiles: s.files})
	_, spec := podSpec(t, objs)
	c := theElector(t, spec)
	if !hasFlag(c, "--redis-tls") {
		t.Errorf("no --redis-tls in %q", c.Args)
	}
	if got := mustFlag(t, c, "redis-tls-server-name"); got != "redis-cluster.redis.svc" {
		t.Errorf("--redis-tls-server-name=%s", got)
	}
	if got, want := mustFlag(t, c, "redis-addr"), "redis-cluster-0.redis-cluster:6379,redis-cluster-1.redis-cluster:6379,redis-cluster-2.redis-cluster:6379"; got != want {
		t.Errorf("--redis-addr=%s, want the list joined with commas %s", got, want)
	}
	if got := mustFlag(t, c, "redis-mode"); got != "cluster" {
		t.Errorf("--redis-mode=%s, want cluster", got)
	}
	for flag, want := range map[string][2]string{
		"redis-tls-ca-file":   {"redis-ca", "ca.pem"},
		"redis-tls-cert-file": {"elector-redis-client", "tls.crt"},
		"redis-tls-key-file":  {"elector-redis-client", "tls.key"},
	} {
		file := mustFlag(t, c, flag)
		if !strings.HasPrefix(file, redisDir+"/") {
			t.Errorf("--%s=%s, want a file in %s", flag, file, redisDir)
		}
		if secret, key := projectedSecretKey(t, spec, c, file); secret != want[0] || key != want[1] {
			t.Errorf("--%s=%s comes from Secret %s key %s, want %s key %s", flag, file, secret, key, want[0], want[1])
		}
	}
	v := volume(spec, "redis-credentials")
	if v == nil || v.Projected == nil || v.Projected.DefaultMode == nil || *v.Projected.DefaultMode != 0o440 {
		t.Errorf("redis-credentials volume %+v, want projected with mode 0440", v)
	}
	if m := volumeMount(c, "redis-credentials"); m == nil || !m.ReadOnly {
		t.Errorf("redis-credentials mount %+v, want read-only", m)
	}

	// TLS with the system roots: no CA file, no credentials volume.
	_, objs = mustRender(t, renderOptions{values: "redis: {tls: {enabled: true}}"})
	_, spec = podSpec(t, objs)
	c = theElector(t, spec)
	if _, ok := flagValue(c, "redis-tls-ca-file"); ok || !hasFlag(c, "--redis-tls") || volume(spec, "redis-credentials") != nil {
		t.Errorf("TLS without caSecret: args %q, volumes %+v; want --redis-tls only", c.Args, spec.Volumes)
	}
}

func TestSentinel(t *testing.T) {
	s := scenarioNamed(t, "sentinel")
	_, objs := mustRender(t, renderOptions{valuesFiles: s.files})
	_, spec := podSpec(t, objs)
	c := theElector(t, spec)
	for flag, want := range map[string]string{
		"redis-mode":             "sentinel",
		"sentinel-master":        "mymaster",
		"redis-addr":             "sentinel-0.sentinel:26379,sentinel-1.sentinel:26379,sentinel-2.sentinel:26379",
		"redis-db":               "2",
		"sentinel-username":      "sentinel-watcher",
		"sentinel-password-file": redisDir + "/sentinel-password",
	} {
		if got := mustFlag(t, c, flag); got != want {
			t.Errorf("--%s=%s, want %s", flag, got, want)
		}
	}
	creds := volume(spec, "redis-credentials")
	if creds == nil || creds.Projected == nil || !slices.ContainsFunc(creds.Projected.Sources, func(p corev1.VolumeProjection) bool {
		return p.Secret != nil && p.Secret.Name == "sentinel-auth" && len(p.Secret.Items) == 1 &&
			p.Secret.Items[0].Key == "password" && p.Secret.Items[0].Path == "sentinel-password"
	}) {
		t.Errorf("redis-credentials volume %+v: want the sentinel-auth Secret's password as sentinel-password", creds)
	}
	wrapped, _ := wrappedCommand(c)
	if len(wrapped) != 3 || wrapped[0] != "sh" || wrapped[1] != "-c" || !strings.Contains(wrapped[2], "$ELECTOR_FENCING_TOKEN") {
		t.Errorf("wrapped %q, want the sh -c script verbatim", wrapped)
	}
}

func TestServiceMonitor(t *testing.T) {
	s := scenarioNamed(t, "servicemonitor")
	_, objs := mustRender(t, renderOptions{valuesFiles: s.files})
	sms := serviceMonitors(objs)
	if len(sms) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(sms))
	}
	sm := sms[0]
	if sm["apiVersion"] != "monitoring.coreos.com/v1" {
		t.Errorf("apiVersion %v", sm["apiVersion"])
	}
	labels, _ := asStringMap("metadata.labels", sm["metadata"].(map[string]any)["labels"])
	if labels["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v, want metrics.serviceMonitor.labels", labels)
	}
	endpoints := sm["spec"].(map[string]any)["endpoints"].([]any)
	if len(endpoints) != 1 {
		t.Fatalf("endpoints %v, want 1", endpoints)
	}
	ep := endpoints[0].(map[string]any)
	for k, want := range map[string]string{"port": httpPortName, "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"} {
		if ep[k] != want {
			t.Errorf("endpoint %s = %v, want %s", k, ep[k], want)
		}
	}
	if mr, _ := ep["metricRelabelings"].([]any); len(mr) != 1 {
		t.Errorf("metricRelabelings %v, want the one from values", ep["metricRelabelings"])
	}
	svc := only[*corev1.Service](t, objs)
	if svc.Spec.Ports[0].Port != 9100 || svc.Spec.Ports[0].TargetPort != intstr.FromString(httpPortName) {
		t.Errorf("service port %+v, want 9100 -> %s", svc.Spec.Ports[0], httpPortName)
	}
	pdb := only[*policyv1.PodDisruptionBudget](t, objs)
	if pdb.Spec.MinAvailable == nil || *pdb.Spec.MinAvailable != intstr.FromInt32(1) || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("PDB %+v, want minAvailable 1 alone", pdb.Spec)
	}

	// No metrics Service, no ServiceMonitor (and none by default).
	_, objs = mustRender(t, renderOptions{values: "metrics: {service: {enabled: false}}"})
	if n := len(objectsOf[*corev1.Service](objs)) + len(serviceMonitors(objs)); n != 0 {
		t.Errorf("metrics.service.enabled=false rendered %d services/monitors", n)
	}
}

// TestTemplateChecks covers what values.schema.json cannot express and the
// chart checks with `fail`.
func TestTemplateChecks(t *testing.T) {
	for _, tc := range []struct {
		name, values, kubeVersion, wantErr string
	}{
		{"native sidecar before 1.29", "", "v1.28.9", "sidecar.native needs Kubernetes >= 1.29"},
		{"strategy with gated readiness", "gateReadiness: true\nstrategy: {type: Recreate}", "", "leave strategy empty"},
		{"duration not longer than renewDeadline", "lease: {duration: 10s, renewDeadline: 10s, retryPeriod: 2s}", "", "lease.duration (10s) must be longer than lease.renewDeadline (10s)"},
		{"units compared", "lease: {duration: 1m, renewDeadline: 90s}", "", "lease.duration (1m) must be longer than lease.renewDeadline (90s)"},
		{"renewDeadline not longer than retryPeriod", "lease: {renewDeadline: 2000ms, retryPeriod: 2s}", "", "lease.renewDeadline (2000ms) must be longer than 1.2 × lease.retryPeriod (2s)"},
		{"renewDeadline within the retry jitter", "lease: {renewDeadline: 2400ms, retryPeriod: 2s}", "", "lease.renewDeadline (2400ms) must be longer than 1.2 × lease.retryPeriod (2s)"},
		{"grace shorter than kill grace", "mode: run\nlease: {duration: 2m, renewDeadline: 30s, retryPeriod: 5s}\nrun: {killGrace: 1m}\nterminationGracePeriodSeconds: 60", "", "terminationGracePeriodSeconds (60) must be at least run.killGrace (1m) + 5s for the release: 65"},
		{"run mode with args but no command", "mode: run\napp: {args: [x]}", "", "mode run needs app.command"},
		{"tag without repository", "app: {image: {tag: '1.4'}}", "", "app.image.tag and app.image.digest need app.image.repository"},
		{"probes of the app in run mode", "mode: run\napp: {livenessProbe: {tcpSocket: {port: 80}}}", "", "mode run does not use app.livenessProbe"},
		{"CA without TLS", "redis: {tls: {caSecret: ca}}", "", "redis.tls.caSecret needs redis.tls.enabled"},
		{"client cert without TLS", "redis: {tls: {clientCertSecret: c}}", "", "redis.tls.clientCertSecret needs redis.tls.enabled"},
		{"ServiceMonitor without Service", "metrics: {service: {enabled: false}, serviceMonitor: {enabled: true}}", "", "metrics.serviceMonitor.enabled needs metrics.service.enabled"},
		{"cluster too old for the chart", "sidecar: {native: false}", "v1.24.0", "incompatible with Kubernetes v1.24.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(renderOptions{values: tc.values, kubeVersion: tc.kubeVersion})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("render error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
	// The same checks accept what is right.
	for _, values := range []string{
		"lease: {duration: 1m30s, renewDeadline: 1m, retryPeriod: 1500ms}",
		"lease: {duration: 3s, renewDeadline: 2500ms, retryPeriod: 2s}",
		"mode: run\nlease: {duration: 2m, renewDeadline: 30s, retryPeriod: 5s}\nrun: {killGrace: 1m}\nterminationGracePeriodSeconds: 65",
		"mode: run\nrun: {killGrace: 500ms}\nterminationGracePeriodSeconds: 6",
	} {
		if _, err := renderChart(renderOptions{values: values}); err != nil {
			t.Errorf("values %q: %v", values, err)
		}
	}
}

// TestSchemaRejects checks that values.schema.json rejects wrong values
// before anything renders, naming the offending value.
func TestSchemaRejects(t *testing.T) {
	for _, tc := range []struct {
		values, wantAt string
	}{
		{`replicaCount: "two"`, "/replicaCount"},
		{`replicaCount: -1`, "/replicaCount"},
		{`mode: other`, "/mode"},
		{`replicas: 2`, "replicas"},
		{`redis: {password: hunter2}`, "password"},
		{`redis: {mode: master}`, "/redis/mode"},
		{`redis: {mode: sentinel}`, "/redis/sentinelMaster"},
		{`redis: {addr: ""}`, "/redis/addr"},
		{`redis: {db: -1}`, "/redis/db"},
		{`lease: {duration: "15"}`, "/lease/duration"},
		{`lease: {name: "a{b}"}`, "/lease/name"},
		{`http: {port: 70000}`, "/http/port"},
		{`image: {pullPolicy: Sometimes}`, "/image/pullPolicy"},
		{`gateReadiness: "yes"`, "/gateReadiness"},
		{`app: {command: "sleep 1"}`, "/app/command"},
		{"mode: run\napp: {image: {repository: ghcr.io/acme/report}, command: []}", "/app/command"},
		{"mode: run\napp: {image: {repository: ghcr.io/acme/report}}", "/app/command"},
		{`app: {image: "ghcr.io/acme/billing:1.4"}`, "/app/image"},
		{`redis: {addr: "redis://redis:6379"}`, "/redis/addr"},
		{`run: {killGrace: 5}`, "/run/killGrace"},
		{`podDisruptionBudget: {maxUnavailable: half}`, "/podDisruptionBudget/maxUnavailable"},
		{`metrics: {serviceMonitor: {interval: often}}`, "/metrics/serviceMonitor/interval"},
		{`sidecar: {native: "true"}`, "/sidecar/native"},
		{`podLabels: {team: 1}`, "/podLabels/team"},
	} {
		t.Run(tc.values, func(t *testing.T) {
			_, err := renderChart(renderOptions{values: tc.values})
			if err == nil {
				t.Fatalf("values %q rendered, want a schema error", tc.values)
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.wantAt) {
				t.Errorf("error %v, want a schema error about %s", err, tc.wantAt)
			}
		})
	}
}

// maxUnavailable is how many pods a rolling update may take down, as both the
// Deployment controller and helm's --wait (its internal deploymentutil) compute
// it from the strategy.
func maxUnavailable(t *testing.T, d *appsv1.Deployment) int32 {
	t.Helper()
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || *d.Spec.Replicas == 0 {
		return 0
	}
	ru := d.Spec.Strategy.RollingUpdate
	_, unavailable, err := deploymentutil.ResolveFenceposts(ru.MaxSurge, ru.MaxUnavailable, *d.Spec.Replicas)
	if err != nil {
		t.Fatalf("strategy %+v: %v", ru, err)
	}
	return min(unavailable, *d.Spec.Replicas)
}

func ptr[T any](v T) *T { return &v }
