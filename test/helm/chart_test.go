package helm

import (
	"fmt"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// scenario is one set of values the chart is rendered with, and what the
// rendering must then look like. The expectations are spelled out here, not
// derived from the values, so that the chart's logic is checked against an
// independent statement of it.
type scenario struct {
	name  string
	files []string // values files, relative to the chart

	mode     string // "sidecar" or "run"
	native   bool   // the sidecar is a native sidecar (init container)
	gated    bool   // readiness is leader-only
	httpPort int32
	replicas int32
	// passwordSecret and passwordKey name the Secret key the Redis password
	// comes from; empty: no password.
	passwordSecret, passwordKey string
	// appSecurity is what the app container's securityContext must be:
	// "restricted" (the demo's, or a hardened app.securityContext) or "none"
	// (a user's app without app.securityContext: the pod's settings only).
	appSecurity string
}

var scenarios = []scenario{
	{name: "default", mode: "sidecar", native: true, httpPort: 8080, replicas: 2, appSecurity: "restricted"},
	{name: "sidecar-native", files: []string{"ci/sidecar-native-values.yaml"}, mode: "sidecar", native: true, httpPort: 8080, replicas: 2,
		passwordSecret: "redis-auth", passwordKey: "redis-password", appSecurity: "restricted"},
	{name: "sidecar-plain", files: []string{"ci/sidecar-plain-values.yaml"}, mode: "sidecar", httpPort: 9090, replicas: 2,
		passwordSecret: "redis-auth", passwordKey: "password", appSecurity: "restricted"},
	{name: "gated", files: []string{"ci/gated-values.yaml"}, mode: "sidecar", native: true, gated: true, httpPort: 8080, replicas: 3,
		passwordSecret: "redis-auth", passwordKey: "password", appSecurity: "restricted"},
	{name: "run", files: []string{"ci/run-values.yaml"}, mode: "run", httpPort: 8080, replicas: 2,
		passwordSecret: "redis-auth", passwordKey: "password", appSecurity: "none"},
	{name: "tls", files: []string{"ci/tls-values.yaml"}, mode: "sidecar", native: true, httpPort: 8080, replicas: 2,
		passwordSecret: "redis-auth", passwordKey: "password", appSecurity: "restricted"},
	{name: "sentinel", files: []string{"ci/sentinel-values.yaml"}, mode: "run", httpPort: 8080, replicas: 2,
		passwordSecret: "redis-auth", passwordKey: "password", appSecurity: "restricted"},
	{name: "servicemonitor", files: []string{"ci/servicemonitor-values.yaml"}, mode: "sidecar", native: true, httpPort: 8080, replicas: 2, appSecurity: "restricted"},
}

func scenarioNamed(t *testing.T, name string) scenario {
	t.Helper()
	for _, s := range scenarios {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no scenario %q", name)
	return scenario{}
}

func chartMetadata(t *testing.T) (version, appVersion string) {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return c.Metadata.Version, c.Metadata.AppVersion
}

// TestScenariosCoverCIFiles keeps every ci/*-values.yaml under test: the
// files chart-testing installs are the ones checked here.
func TestScenariosCoverCIFiles(t *testing.T) {
	covered := map[string]bool{}
	for _, s := range scenarios {
		for _, f := range s.files {
			covered[f] = true
		}
	}
	files := ciValuesFiles(t)
	if len(files) < 7 {
		t.Fatalf("found %d ci values files (%v), want at least 7", len(files), files)
	}
	for _, f := range files {
		if !covered[f] {
			t.Errorf("%s has no scenario in chart_test.go", f)
		}
	}
}

// TestLint runs `helm lint --strict` on the chart with the default values and
// with every ci values file.
func TestLint(t *testing.T) {
	kv, err := parseKubeVersion("")
	if err != nil {
		t.Fatal(err)
	}
	for _, files := range append([][]string{nil}, wrap(ciValuesFiles(t))...) {
		name := "default"
		if len(files) > 0 {
			name = filepath.Base(files[0])
		}
		t.Run(name, func(t *testing.T) {
			vals := map[string]any{}
			for _, f := range files {
				v, err := common.ReadValuesFile(filepath.Join(chartDir, f))
				if err != nil {
					t.Fatal(err)
				}
				vals = mergeMaps(vals, v)
			}
			linter := lint.RunAll(chartDir, vals, "default", lint.WithKubeVersion(kv))
			for _, m := range linter.Messages {
				// INFO is advice such as "icon is recommended"; --strict
				// fails on warnings and errors.
				if m.Severity > support.InfoSev {
					t.Errorf("lint: %s", m)
				}
			}
		})
	}
}

func wrap(files []string) [][]string {
	var out [][]string
	for _, f := range files {
		out = append(out, []string{f})
	}
	return out
}

// TestRenderedObjects renders every scenario, decodes every object strictly
// and checks what holds for all of them.
func TestRenderedObjects(t *testing.T) {
	chartVersion, appVersion := chartMetadata(t)
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			_, objs := mustRender(t, renderOptions{valuesFiles: s.files})
			checkLabels(t, objs, chartVersion)
			d, spec := podSpec(t, objs)
			checkDeployment(t, s, d)
			checkSecurity(t, s, spec)
			checkElector(t, s, spec, appVersion)
			checkPassword(t, s, spec)
			checkVolumes(t, spec)
			checkServices(t, d, objs)
			checkPDB(t, s, d, objs)
		})
	}
}

func checkLabels(t *testing.T, objs []object, chartVersion string) {
	t.Helper()
	want := map[string]string{
		"helm.sh/chart":                "elector-" + chartVersion,
		"app.kubernetes.io/name":       "test",
		"app.kubernetes.io/instance":   "test",
		"app.kubernetes.io/managed-by": "Helm",
	}
	for _, o := range objs {
		for k, v := range want {
			if o.labels[k] != v {
				t.Errorf("%s %s: label %s=%q, want %q", o.kind, o.name, k, o.labels[k], v)
			}
		}
		if o.labels["app.kubernetes.io/version"] == "" {
			t.Errorf("%s %s: no app.kubernetes.io/version label", o.kind, o.name)
		}
	}
}

func selectorLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": "test", "app.kubernetes.io/instance": "test"}
}

func checkDeployment(t *testing.T, s scenario, d *appsv1.Deployment) {
	t.Helper()
	if d.Spec.Replicas == nil || *d.Spec.Replicas != s.replicas {
		t.Errorf("replicas %v, want %d", d.Spec.Replicas, s.replicas)
	}
	if !reflect.DeepEqual(d.Spec.Selector.MatchLabels, selectorLabels()) || len(d.Spec.Selector.MatchExpressions) > 0 {
		t.Errorf("selector %+v, want matchLabels %v", d.Spec.Selector, selectorLabels())
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("pod template label %s=%q, the selector wants %q", k, d.Spec.Template.Labels[k], v)
		}
	}
	spec := d.Spec.Template.Spec
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Errorf("enableServiceLinks %v, want false: service links put ELECTOR_* variables into the environment", spec.EnableServiceLinks)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken %v, want false: the elector does not use the Kubernetes API", spec.AutomountServiceAccountToken)
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds < 30 {
		t.Errorf("terminationGracePeriodSeconds %v, want >= 30", spec.TerminationGracePeriodSeconds)
	}
	if got := d.Spec.Template.Annotations["kubectl.kubernetes.io/default-container"]; got != spec.Containers[0].Name {
		t.Errorf("default-container annotation %q, want the app container %q", got, spec.Containers[0].Name)
	}
	for _, c := range spec.TopologySpreadConstraints {
		if c.LabelSelector == nil || !reflect.DeepEqual(c.LabelSelector.MatchLabels, selectorLabels()) {
			t.Errorf("topologySpreadConstraint %+v does not select the pods", c)
		}
	}
}

// checkSecurity checks the restricted Pod Security Standard for the
// elector's containers (non-root as 65532, RuntimeDefault seccomp, no
// privilege escalation, no capabilities, a read-only root filesystem), and
// that the app container gets only what s.appSecurity says: the pod's
// settings impose no user on it.
func checkSecurity(t *testing.T, s scenario, spec *corev1.PodSpec) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v, want seccompProfile RuntimeDefault", psc)
	}
	if psc != nil && (psc.RunAsUser != nil || psc.RunAsGroup != nil || psc.RunAsNonRoot != nil) {
		t.Errorf("pod securityContext %+v imposes a user on the app", psc)
	}
	if psc == nil || psc.FSGroup == nil || *psc.FSGroup != 65532 {
		t.Errorf("pod securityContext %+v, want fsGroup 65532: the elector reads the 0440 credentials through it", psc)
	}
	app := spec.Containers[0].Name
	for _, c := range allContainers(spec) {
		if c.Name == app {
			switch s.appSecurity {
			case "none":
				if c.SecurityContext != nil {
					t.Errorf("app container %q: securityContext %+v, want none (the pod's settings only)", c.Name, c.SecurityContext)
				}
				continue
			case "restricted":
			default:
				t.Fatalf("scenario %s: appSecurity %q", s.name, s.appSecurity)
			}
		} else if sc := c.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.RunAsGroup == nil || *sc.RunAsGroup != 65532 {
			t.Errorf("elector container %q: securityContext %+v, want runAsUser and runAsGroup 65532", c.Name, sc)
		}
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("container %q has no securityContext", c.Name)
			continue
		case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
			t.Errorf("container %q: runAsNonRoot %v, want true", c.Name, sc.RunAsNonRoot)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %q: allowPrivilegeEscalation %v, want false", c.Name, sc.AllowPrivilegeEscalation)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("container %q: readOnlyRootFilesystem %v, want true", c.Name, sc.ReadOnlyRootFilesystem)
		case sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
			t.Errorf("container %q: capabilities %+v, want drop [ALL], add none", c.Name, sc.Capabilities)
		case (sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) && c.Name != app:
			t.Errorf("container %q: seccompProfile %+v, want RuntimeDefault", c.Name, sc.SeccompProfile)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("container %q is privileged", c.Name)
		}
	}
}

// checkElector checks the container that campaigns: its mode, identity,
// HTTP port, probes and image.
func checkElector(t *testing.T, s scenario, spec *corev1.PodSpec, appVersion string) {
	t.Helper()
	c := theElector(t, spec)

	// Identity: the pod's name, from the downward API.
	e := envVar(c, "POD_NAME")
	if e == nil || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("container %q: POD_NAME %+v, want valueFrom.fieldRef metadata.name", c.Name, e)
	}
	if _, ok := flagValue(c, "identity"); ok {
		t.Errorf("container %q sets --identity; the identity must default to $POD_NAME", c.Name)
	}

	for _, f := range []string{"redis-addr", "redis-mode", "lease-name", "key-prefix", "lease-duration", "renew-deadline", "retry-period"} {
		if v := mustFlag(t, c, f); v == "" {
			t.Errorf("container %q: empty --%s", c.Name, f)
		}
	}

	// The HTTP endpoints: --http-addr, the named port and the probes agree.
	if got, want := mustFlag(t, c, "http-addr"), fmt.Sprintf(":%d", s.httpPort); got != want {
		t.Errorf("container %q: --http-addr=%s, want %s", c.Name, got, want)
	}
	if p, ok := containerPort(c, httpPortName); !ok || p != s.httpPort {
		t.Errorf("container %q: port %s = %d (declared %v), want %d", c.Name, httpPortName, p, ok, s.httpPort)
	}
	checkHTTPProbe(t, c, "liveness", c.LivenessProbe, "/healthz", s.httpPort)
	checkHTTPProbe(t, c, "startup", c.StartupProbe, "/healthz", s.httpPort)
	readiness := "/healthz"
	if s.gated {
		readiness = "/readyz"
	}
	checkHTTPProbe(t, c, "readiness", c.ReadinessProbe, readiness, s.httpPort)

	switch s.mode {
	case "sidecar":
		if !isSidecar(c) {
			t.Fatalf("container %q args %q, want `elector sidecar`", c.Name, c.Args)
		}
		if c.Image != "ghcr.io/elector/elector:"+appVersion {
			t.Errorf("sidecar image %q, want the appVersion tag %s", c.Image, appVersion)
		}
		if got := mustFlag(t, c, "status-file"); got != statusFile {
			t.Errorf("--status-file=%s, want %s", got, statusFile)
		}
		native := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		inInit := slices.ContainsFunc(spec.InitContainers, func(ic corev1.Container) bool { return ic.Name == c.Name })
		if native != s.native || inInit != s.native {
			t.Errorf("sidecar: restartPolicy Always %v, in initContainers %v; want native=%v", native, inInit, s.native)
		}
		if len(spec.Containers) != 2-boolInt(s.native) {
			t.Errorf("containers %v, want the app and, unless native, the sidecar", containerNames(spec.Containers))
		}
		app := &spec.Containers[0]
		if e := envVar(app, "ELECTOR_LEADER_URL"); e == nil || e.Value != fmt.Sprintf("http://127.0.0.1:%d/leader", s.httpPort) {
			t.Errorf("app: ELECTOR_LEADER_URL %+v, want http://127.0.0.1:%d/leader", e, s.httpPort)
		}
		if e := envVar(app, "ELECTOR_STATUS_FILE"); e == nil || e.Value != statusFile {
			t.Errorf("app: ELECTOR_STATUS_FILE %+v, want %s", e, statusFile)
		}
		appMount, sideMount := volumeMount(app, "elector-status"), volumeMount(c, "elector-status")
		if appMount == nil || sideMount == nil || appMount.MountPath != path.Dir(statusFile) || sideMount.MountPath != path.Dir(statusFile) {
			t.Errorf("status directory mounts: app %+v, sidecar %+v, want both at %s", appMount, sideMount, path.Dir(statusFile))
		} else if !appMount.ReadOnly || sideMount.ReadOnly {
			t.Errorf("status directory: app readOnly %v, sidecar readOnly %v; want the app read-only and the sidecar writing", appMount.ReadOnly, sideMount.ReadOnly)
		}
		if v := volume(spec, "elector-status"); v == nil || v.EmptyDir == nil {
			t.Errorf("volume elector-status %+v, want an emptyDir", v)
		}
	case "run":
		if len(spec.Containers) != 1 || c != &spec.Containers[0] {
			t.Fatalf("containers %v, want only the app container running `elector run`", containerNames(spec.Containers))
		}
		if !reflect.DeepEqual(c.Command, []string{electorBinary}) || len(c.Args) == 0 || c.Args[0] != "run" {
			t.Errorf("app command %q args %q, want [%s] [run ...]", c.Command, c.Args, electorBinary)
		}
		if _, ok := wrappedCommand(c); !ok {
			t.Errorf("app args %q: no -- before the wrapped command", c.Args)
		}
		if envVar(c, "ELECTOR_LEADER_URL") != nil || envVar(c, "ELECTOR_STATUS_FILE") != nil {
			t.Errorf("run mode sets the sidecar's ELECTOR_LEADER_URL/ELECTOR_STATUS_FILE")
		}
		if len(spec.InitContainers) != 1 {
			t.Fatalf("init containers %v, want only %s", containerNames(spec.InitContainers), installInitName)
		}
		install := &spec.InitContainers[0]
		if install.Name != installInitName || install.Image != "ghcr.io/elector/elector:"+appVersion ||
			!reflect.DeepEqual(install.Args, []string{"install", electorBinary}) || len(install.Command) > 0 || install.RestartPolicy != nil {
			t.Errorf("install init container %+v, want %s running `elector install %s` from the elector image", install, installInitName, electorBinary)
		}
		dir := path.Dir(electorBinary)
		if m := volumeMount(install, "elector-bin"); m == nil || m.MountPath != dir || m.ReadOnly {
			t.Errorf("install container mounts elector-bin as %+v, want writable at %s", m, dir)
		}
		if m := volumeMount(c, "elector-bin"); m == nil || m.MountPath != dir || !m.ReadOnly {
			t.Errorf("app mounts elector-bin as %+v, want read-only at %s", m, dir)
		}
		if v := volume(spec, "elector-bin"); v == nil || v.EmptyDir == nil {
			t.Errorf("volume elector-bin %+v, want an emptyDir", v)
		}
	default:
		t.Fatalf("bad scenario mode %q", s.mode)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkPassword checks that the Redis password can only come from a Secret:
// no literal value anywhere, mounted only where the elector runs, and
// --redis-password-file pointing at the Secret's key.
func checkPassword(t *testing.T, s scenario, spec *corev1.PodSpec) {
	t.Helper()
	for _, c := range allContainers(spec) {
		for _, e := range c.Env {
			if strings.Contains(strings.ToUpper(e.Name), "PASSWORD") && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
				t.Errorf("container %q: env %s is not from a secretKeyRef: %+v", c.Name, e.Name, e)
			}
		}
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			if strings.Contains(a, "--redis-password=") {
				t.Errorf("container %q: password on the command line: %q", c.Name, a)
			}
		}
	}
	elector := theElector(t, spec)
	file, ok := flagValue(elector, "redis-password-file")
	if s.passwordSecret == "" {
		if ok {
			t.Errorf("--redis-password-file=%s without a password secret", file)
		}
		return
	}
	if !ok {
		t.Fatalf("no --redis-password-file although the password is in Secret %s", s.passwordSecret)
	}
	secret, key := projectedSecretKey(t, spec, elector, file)
	if secret != s.passwordSecret || key != s.passwordKey {
		t.Errorf("--redis-password-file=%s is Secret %s key %s, want %s key %s", file, secret, key, s.passwordSecret, s.passwordKey)
	}
	for _, c := range allContainers(spec) {
		if c.Name != elector.Name && volumeMount(&c, "redis-credentials") != nil {
			t.Errorf("container %q mounts the Redis credentials; only the elector needs them", c.Name)
		}
	}
}

// projectedSecretKey finds which Secret and key a file in the container
// comes from, through a secret or projected volume.
func projectedSecretKey(t *testing.T, spec *corev1.PodSpec, c *corev1.Container, file string) (secret, key string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(file, m.MountPath+"/") {
			continue
		}
		rel := strings.TrimPrefix(file, m.MountPath+"/")
		v := volume(spec, m.Name)
		if v == nil {
			t.Fatalf("mount %s of a missing volume", m.Name)
		}
		var sources []corev1.VolumeProjection
		if v.Projected != nil {
			sources = v.Projected.Sources
		}
		if v.Secret != nil {
			sources = append(sources, corev1.VolumeProjection{Secret: &corev1.SecretProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: v.Secret.SecretName}, Items: v.Secret.Items}})
		}
		for _, src := range sources {
			if src.Secret == nil {
				continue
			}
			for _, item := range src.Secret.Items {
				if item.Path == rel {
					return src.Secret.Name, item.Key
				}
			}
		}
		t.Fatalf("container %q: %s is not a key of a Secret in volume %s", c.Name, file, m.Name)
	}
	t.Fatalf("container %q: %s is on no mounted volume", c.Name, file)
	return "", ""
}

// checkVolumes checks that every mount has its volume and every volume is
// mounted.
func checkVolumes(t *testing.T, spec *corev1.PodSpec) {
	t.Helper()
	mounted := map[string]bool{}
	for _, c := range allContainers(spec) {
		for _, m := range c.VolumeMounts {
			mounted[m.Name] = true
			if volume(spec, m.Name) == nil {
				t.Errorf("container %q mounts missing volume %s", c.Name, m.Name)
			}
		}
	}
	for _, v := range spec.Volumes {
		if !mounted[v.Name] {
			t.Errorf("volume %s is mounted nowhere", v.Name)
		}
	}
}

func checkServices(t *testing.T, d *appsv1.Deployment, objs []object) {
	t.Helper()
	services := objectsOf[*corev1.Service](objs)
	for _, svc := range services {
		if !reflect.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) {
			t.Errorf("service %s selects %v, want the pods %v", svc.Name, svc.Spec.Selector, d.Spec.Selector.MatchLabels)
		}
		if !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("service %s: publishNotReadyAddresses false: followers' metrics would be missing under gateReadiness", svc.Name)
		}
		for _, p := range svc.Spec.Ports {
			if p.TargetPort.Type != intstr.String || !podPortNamed(&d.Spec.Template.Spec, p.TargetPort.StrVal) {
				t.Errorf("service %s port %s targets %s, which no container declares", svc.Name, p.Name, p.TargetPort.String())
			}
		}
	}
	for _, sm := range serviceMonitors(objs) {
		spec := sm["spec"].(map[string]any)
		match, err := asStringMap("selector.matchLabels", spec["selector"].(map[string]any)["matchLabels"])
		if err != nil {
			t.Fatal(err)
		}
		var target *corev1.Service
		for _, svc := range services {
			if labelsMatch(match, svc.Labels) {
				if target != nil {
					t.Errorf("ServiceMonitor selects services %s and %s", target.Name, svc.Name)
				}
				target = svc
			}
		}
		if target == nil {
			t.Fatalf("ServiceMonitor selector %v matches no rendered Service", match)
		}
		for _, e := range spec["endpoints"].([]any) {
			port := e.(map[string]any)["port"]
			if !slices.ContainsFunc(target.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == port }) {
				t.Errorf("ServiceMonitor endpoint port %v is not a port of service %s", port, target.Name)
			}
		}
	}
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func checkPDB(t *testing.T, s scenario, d *appsv1.Deployment, objs []object) {
	t.Helper()
	pdbs := objectsOf[*policyv1.PodDisruptionBudget](objs)
	if s.gated {
		if len(pdbs) > 0 {
			t.Errorf("gated readiness rendered a PodDisruptionBudget; it would block draining the leader's node")
		}
		return
	}
	if len(pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(pdbs))
	}
	pdb := pdbs[0]
	if !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("PDB selects %v, want the pods %v", pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels)
	}
	if (pdb.Spec.MaxUnavailable == nil) == (pdb.Spec.MinAvailable == nil) {
		t.Errorf("PDB maxUnavailable %v, minAvailable %v: want exactly one", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}
}
