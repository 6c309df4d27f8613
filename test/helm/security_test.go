package helm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestRBACNeverBindsDefault: with serviceAccount.create=false and a feature that needs a Role,
// the chart refuses to bind it to the namespace's "default" ServiceAccount by omission (every
// pod without a ServiceAccount of its own would get `patch pods`); a named one gets it.
func TestRBACNeverBindsDefault(t *testing.T) {
	for _, feature := range []string{"leaderLabel: {enabled: true}", "events: {enabled: true}", "mirrorLease: {enabled: true}"} {
		_, err := renderChart(renderOptions{values: feature + "\nserviceAccount: {create: false}"})
		if err == nil || !strings.Contains(err.Error(), "serviceAccount.name") {
			t.Errorf("%s, serviceAccount.create=false: err %v, want a refusal that names serviceAccount.name", feature, err)
		}
		_, objs := mustRender(t, renderOptions{values: feature + "\nserviceAccount: {create: false, name: billing}"})
		rb := only[*rbacv1.RoleBinding](t, objs)
		if len(rb.Subjects) != 1 || rb.Subjects[0].Name != "billing" {
			t.Errorf("%s, serviceAccount.name=billing: subjects %+v, want billing", feature, rb.Subjects)
		}
		// Bring your own: nothing to refuse.
		_, objs = mustRender(t, renderOptions{values: feature + "\nserviceAccount: {create: false}\nrbac: {create: false}"})
		if n := len(objectsOf[*rbacv1.RoleBinding](objs)); n != 0 {
			t.Errorf("%s, rbac.create=false: %d RoleBindings", feature, n)
		}
	}
}

// TestAdmissionPolicy: leaderLabel.admissionPolicy renders a ValidatingAdmissionPolicy that
// matches the elector's ServiceAccount only, allows nothing but the leader label on the
// release's own pods, denies, and a binding to the release's namespace.
func TestAdmissionPolicy(t *testing.T) {
	_, objs := mustRender(t, renderOptions{values: "leaderLabel: {enabled: true}"})
	if n := len(objectsOf[*admissionregistrationv1.ValidatingAdmissionPolicy](objs)); n != 0 {
		t.Errorf("admissionPolicy off: %d policies", n)
	}
	_, objs = mustRender(t, renderOptions{namespace: "jobs", releaseName: "billing",
		values: "leaderLabel: {enabled: true, key: example.com/lead, admissionPolicy: true}"})
	p := only[*admissionregistrationv1.ValidatingAdmissionPolicy](t, objs)
	b := only[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, objs)
	if p.Name != "jobs-billing-leader-label" || b.Spec.PolicyName != p.Name {
		t.Errorf("policy %q, binding's policyName %q; want jobs-billing-leader-label for both", p.Name, b.Spec.PolicyName)
	}
	if !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) ||
		b.Spec.MatchResources == nil || b.Spec.MatchResources.NamespaceSelector == nil ||
		b.Spec.MatchResources.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "jobs" {
		t.Errorf("binding %+v: want Deny in namespace jobs", b.Spec)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", p.Spec.FailurePolicy)
	}
	rules := p.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"pods"}) || !slices.Equal(rules[0].Operations, []admissionregistrationv1.OperationType{"UPDATE"}) {
		t.Errorf("resource rules %+v, want UPDATE of pods", rules)
	}
	if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != `request.userInfo.username == "system:serviceaccount:jobs:billing"` {
		t.Errorf("match conditions %+v, want the elector's ServiceAccount only", p.Spec.MatchConditions)
	}
	var all strings.Builder
	for _, v := range p.Spec.Validations {
		all.WriteString(v.Expression + "\n")
		if v.Reason == nil || *v.Reason != "Forbidden" {
			t.Errorf("validation %q: reason %v, want Forbidden", v.Expression, v.Reason)
		}
	}
	for _, want := range []string{`"billing"`, `"example.com/lead"`, "object.spec == oldObject.spec", "annotations", "ownerReferences", "finalizers"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("validations do not mention %s:\n%s", want, all.String())
		}
	}
	if _, err := renderChart(renderOptions{values: "leaderLabel: {admissionPolicy: nope}"}); err == nil {
		t.Error("admissionPolicy: nope renders; want a schema error")
	}
}

// TestNetworkPolicy: off by default; on, it selects the release's pods, lets the elector's
// port in only from electorFrom and the app's ports from anywhere, and with egress on allows
// Redis, the API (with a feature that needs it), DNS and extraEgress only.
func TestNetworkPolicy(t *testing.T) {
	_, objs := mustRender(t, renderOptions{})
	if n := len(objectsOf[*networkingv1.NetworkPolicy](objs)); n != 0 {
		t.Errorf("default: %d NetworkPolicies", n)
	}
	values := `app: {ports: [{name: web, containerPort: 9000}]}
networkPolicy:
  enabled: true
  electorFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
`
	_, objs = mustRender(t, renderOptions{values: values})
	np := only[*networkingv1.NetworkPolicy](t, objs)
	if np.Spec.PodSelector.MatchLabels["app.kubernetes.io/instance"] != "test" {
		t.Errorf("podSelector %+v, want the release's pods", np.Spec.PodSelector)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policyTypes %v, want Ingress only", np.Spec.PolicyTypes)
	}
	if len(np.Spec.Ingress) != 2 {
		t.Fatalf("ingress %+v, want the elector's rule and the app's", np.Spec.Ingress)
	}
	el, app := np.Spec.Ingress[0], np.Spec.Ingress[1]
	if len(el.From) != 1 || el.From[0].NamespaceSelector == nil || len(el.Ports) != 1 || el.Ports[0].Port.IntValue() != 8080 {
		t.Errorf("elector rule %+v, want port 8080 from the monitoring namespace", el)
	}
	if len(app.From) != 0 || len(app.Ports) != 1 || app.Ports[0].Port.IntValue() != 9000 {
		t.Errorf("app rule %+v, want port 9000 from anywhere", app)
	}

	_, objs = mustRender(t, renderOptions{values: values + `  egress:
    enabled: true
    redisTo: [{ipBlock: {cidr: 10.0.0.5/32}}]
    extraEgress: [{ports: [{port: 5432}]}]
leaderLabel: {enabled: true}
`})
	np = only[*networkingv1.NetworkPolicy](t, objs)
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(np.Spec.Egress) != 4 {
		t.Fatalf("egress %+v, want Redis, the API, DNS and the extra rule", np.Spec.Egress)
	}
	redis, api, dns, extra := np.Spec.Egress[0], np.Spec.Egress[1], np.Spec.Egress[2], np.Spec.Egress[3]
	if len(redis.To) != 1 || redis.To[0].IPBlock.CIDR != "10.0.0.5/32" || redis.Ports[0].Port.IntValue() != 6379 {
		t.Errorf("Redis rule %+v", redis)
	}
	if api.Ports[0].Port.IntValue() != 443 || dns.Ports[0].Port.IntValue() != 53 || extra.Ports[0].Port.IntValue() != 5432 {
		t.Errorf("API %+v, DNS %+v, extra %+v", api, dns, extra)
	}
}

// TestNotesACL: the NOTES print README.md's per-lease ACL line for the release's own lease
// (glob characters of the name escaped), with the cluster commands in cluster mode.
func TestNotesACL(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "ACL SETUSER elector on >PASSWORD "
	var line string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, prefix) {
			line = l
		}
	}
	if !strings.Contains(line, "{NAME}") {
		t.Fatalf("README.md's elector ACL line %q has no per-lease {NAME}", line)
	}
	for _, tc := range []struct{ values, name, extra string }{
		{"", "test", ""},
		{"lease: {name: 'jobs*[1]'}", `jobs\*\[1\]`, ""},
		{"redis: {mode: cluster}", "test", " +cluster|slots +command"},
	} {
		r, _ := mustRender(t, renderOptions{values: tc.values})
		want := strings.ReplaceAll(line, "{NAME}", "{"+tc.name+"}") + tc.extra
		if !strings.Contains(r.notes, want+"\n") && !strings.HasSuffix(strings.TrimSpace(r.notes), want) {
			t.Errorf("%q: the NOTES do not print\n%s\nNOTES:\n%s", tc.values, want, r.notes)
		}
	}
}
