package helm

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// kubeAPIPath is where the elector reads its service-account token and CA.
const kubeAPIPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// TestKubeFeaturesOff: by default the elector never talks to the Kubernetes API: no Role,
// no RoleBinding, no leader Service, no token, no flags, no extra environment.
func TestKubeFeaturesOff(t *testing.T) {
	for _, values := range []string{"", "mode: run", "rbac: {create: true}\nleaderService: {enabled: false}"} {
		_, objs := mustRender(t, renderOptions{values: values})
		for _, o := range objs {
			if o.kind == "Role" || o.kind == "RoleBinding" || o.kind == "Lease" || strings.HasSuffix(o.name, "-leader") {
				t.Errorf("%q: renders %s %s with the features off", values, o.kind, o.name)
			}
		}
		_, spec := podSpec(t, objs)
		c := theElector(t, spec)
		for _, f := range []string{"--leader-label", "--events"} {
			for _, a := range electorFlags(c) {
				if strings.HasPrefix(a, f) {
					t.Errorf("%q: elector flag %s with the features off", values, a)
				}
			}
		}
		for _, v := range spec.Volumes {
			if v.Name == "elector-kube-api" {
				t.Errorf("%q: the token volume is rendered with the features off", values)
			}
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%q: automountServiceAccountToken %v, want false", values, spec.AutomountServiceAccountToken)
		}
	}
}

// TestKubeFeaturesOn: each feature renders its flag, the downward-API variables, a token
// mounted in the elector's container only, and a Role with only its own rules.
func TestKubeFeaturesOn(t *testing.T) {
	for _, tc := range []struct {
		values string
		flags  []string
		rules  []rbacv1.PolicyRule
	}{
		{"leaderLabel: {enabled: true}", []string{"--leader-label=elector.io/leader"},
			[]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}}}},
		{"events: {enabled: true}\nmode: run", []string{"--events"},
			[]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}}},
		{"mirrorLease: {enabled: true}", []string{"--mirror-lease=test"},
			[]rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"test"}, Verbs: []string{"get", "patch"}}}},
		{"leaderLabel: {enabled: true, key: example.com/leads}\nevents: {enabled: true}\nsidecar: {native: false}",
			[]string{"--leader-label=example.com/leads", "--events"},
			[]rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}},
				{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			}},
	} {
		t.Run(tc.values, func(t *testing.T) {
			_, objs := mustRender(t, renderOptions{values: tc.values})
			_, spec := podSpec(t, objs)
			c := theElector(t, spec)
			for _, f := range tc.flags {
				if !slices.Contains(electorFlags(c), f) {
					t.Errorf("elector flags %v lack %s", electorFlags(c), f)
				}
			}
			checkKubeEnv(t, c)
			checkTokenMount(t, spec, c)
			checkRBAC(t, objs, tc.rules)
			mirror := slices.ContainsFunc(objs, func(o object) bool { return o.kind == "Lease" && o.name == "test" })
			if want := strings.Contains(tc.values, "mirrorLease"); mirror != want {
				t.Errorf("Lease test rendered %v, want %v", mirror, want)
			}
		})
	}
}

// checkKubeEnv: POD_NAME, POD_NAMESPACE, POD_UID from the downward API.
func checkKubeEnv(t *testing.T, c *corev1.Container) {
	t.Helper()
	want := map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid", "NODE_NAME": "spec.nodeName"}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && want[e.Name] == e.ValueFrom.FieldRef.FieldPath {
			delete(want, e.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("the elector's environment lacks %v", want)
	}
}

// checkTokenMount: the token is mounted in the elector's container, and in no other
// container unless it is the one that runs the app's command (run mode).
func checkTokenMount(t *testing.T, spec *corev1.PodSpec, elector *corev1.Container) {
	t.Helper()
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			c := &list[i]
			mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == "elector-kube-api" && m.MountPath == kubeAPIPath && m.ReadOnly
			})
			if c.Name == elector.Name && !mounted {
				t.Errorf("the elector's container %s does not mount the token at %s", c.Name, kubeAPIPath)
			}
			if c.Name != elector.Name && mounted {
				t.Errorf("container %s mounts the elector's token", c.Name)
			}
		}
	}
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "elector-kube-api" })
	if i < 0 || spec.Volumes[i].Projected == nil || len(spec.Volumes[i].Projected.Sources) != 3 || spec.Volumes[i].Projected.Sources[0].ServiceAccountToken == nil {
		t.Errorf("no projected token volume elector-kube-api: %+v", spec.Volumes)
	}
}

// checkRBAC: one Role with exactly rules, bound to the pods' ServiceAccount.
func checkRBAC(t *testing.T, objs []object, rules []rbacv1.PolicyRule) {
	t.Helper()
	var role *rbacv1.Role
	var binding *rbacv1.RoleBinding
	for _, o := range objs {
		switch v := o.typed.(type) {
		case *rbacv1.Role:
			role = v
		case *rbacv1.RoleBinding:
			binding = v
		}
	}
	if role == nil || binding == nil {
		t.Fatalf("Role %v, RoleBinding %v: want both", role != nil, binding != nil)
	}
	if len(role.Rules) != len(rules) {
		t.Fatalf("Role rules %+v, want %+v", role.Rules, rules)
	}
	for i, r := range rules {
		g := role.Rules[i]
		if !slices.Equal(g.APIGroups, r.APIGroups) || !slices.Equal(g.Resources, r.Resources) || !slices.Equal(g.Verbs, r.Verbs) || !slices.Equal(g.ResourceNames, r.ResourceNames) {
			t.Errorf("Role rule %d is %+v, want %+v", i, g, r)
		}
	}
	var sa string
	for _, o := range objs {
		if o.kind == "ServiceAccount" {
			sa = o.name
		}
	}
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Name != sa {
		t.Errorf("RoleBinding %+v does not bind Role %s to ServiceAccount %s", binding, role.Name, sa)
	}
}

// TestLeaderService: the leader Service selects the pods and the leader label; it needs
// the label; rbac.create=false renders no RBAC but keeps the feature.
func TestLeaderService(t *testing.T) {
	_, objs := mustRender(t, renderOptions{values: "leaderLabel: {enabled: true}\nleaderService: {enabled: true}"})
	var svc *corev1.Service
	for _, o := range objs {
		if s, ok := o.typed.(*corev1.Service); ok && strings.HasSuffix(s.Name, "-leader") {
			svc = s
		}
	}
	if svc == nil {
		t.Fatal("no leader Service rendered")
	}
	want := selectorLabels()
	want["elector.io/leader"] = "true"
	if len(svc.Spec.Selector) != len(want) || !labelsMatch(want, svc.Spec.Selector) || svc.Spec.PublishNotReadyAddresses {
		t.Errorf("leader Service selector %v (publishNotReadyAddresses %v), want %v", svc.Spec.Selector, svc.Spec.PublishNotReadyAddresses, want)
	}
	if _, err := renderChart(renderOptions{values: "leaderService: {enabled: true}"}); err == nil || !strings.Contains(err.Error(), "leaderLabel.enabled") {
		t.Errorf("leaderService without leaderLabel: err %v, want one naming leaderLabel.enabled", err)
	}
	_, objs = mustRender(t, renderOptions{values: "leaderLabel: {enabled: true}\nrbac: {create: false}"})
	for _, o := range objs {
		if o.kind == "Role" || o.kind == "RoleBinding" {
			t.Errorf("rbac.create=false renders %s %s", o.kind, o.name)
		}
	}
	if _, err := renderChart(renderOptions{values: "leaderLabel: {enabled: true, key: 'Not A Key'}"}); err == nil {
		t.Error("a leaderLabel.key that is not a label key renders")
	}
}

// TestLeaderServiceKeepsRolloutAndPDB: routing by the leader label needs no readiness gate,
// so every pod stays Ready: the rollout keeps maxUnavailable 0 and the PodDisruptionBudget
// stays (what gateReadiness must give up, docs/KUBERNETES.md).
func TestLeaderServiceKeepsRolloutAndPDB(t *testing.T) {
	_, objs := mustRender(t, renderOptions{values: "leaderLabel: {enabled: true}\nleaderService: {enabled: true}"})
	d := only[*appsv1.Deployment](t, objs)
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || *ru.MaxUnavailable != intstr.FromInt32(0) {
		t.Errorf("strategy %+v, want maxUnavailable 0", d.Spec.Strategy)
	}
	if n := len(objectsOf[*policyv1.PodDisruptionBudget](objs)); n != 1 {
		t.Errorf("%d PodDisruptionBudgets with the leader Service, want 1", n)
	}
}
