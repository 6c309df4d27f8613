package helm

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// TestFeatureCombinations renders every combination of the feature switches
// (leaderLabel with its admission policy, events, mirrorLease, networkPolicy,
// the workload kind, and the elector's form: run, native or plain sidecar),
// decodes every object and hook strictly, checks that each pod's mounts have
// their volumes and that every selector selects the pods, and lints the chart
// with the values as `helm lint --strict` does.
func TestFeatureCombinations(t *testing.T) {
	switches := []string{
		"leaderLabel: {enabled: true, admissionPolicy: true}\nleaderService: {enabled: true}",
		"events: {enabled: true}",
		"mirrorLease: {enabled: true}",
		"networkPolicy: {enabled: true, egress: {enabled: true}}\napp: {ports: [{name: http, containerPort: 8000}]}",
		"workload: {kind: StatefulSet}",
	}
	forms := map[string]string{
		"native": "",
		"plain":  "sidecar: {native: false}",
		"run":    "mode: run",
	}
	n := 0
	for set := 0; set < 1<<len(switches); set++ {
		for form, formValues := range forms {
			vals := []string{formValues}
			for i, s := range switches {
				if set&(1<<i) != 0 {
					vals = append(vals, s)
				}
			}
			n++
			t.Run(fmt.Sprintf("%s/set%02d", form, set), func(t *testing.T) {
				values := mergeYAML(t, vals)
				r, objs := mustRender(t, renderOptions{vals: values})
				kind, selector, tmpl := workloadPod(t, objs)
				if want := map[bool]string{true: "StatefulSet", false: "Deployment"}[set&(1<<4) != 0]; kind != want {
					t.Errorf("workload %s, want %s", kind, want)
				}
				checkMounts(t, kind, &tmpl.Spec)
				theElector(t, &tmpl.Spec)
				if !labelsMatch(selector.MatchLabels, tmpl.Labels) {
					t.Errorf("selector %v does not select the template's labels %v", selector.MatchLabels, tmpl.Labels)
				}
				for _, svc := range objectsOf[*corev1.Service](objs) {
					if !labelsMatch(svc.Spec.Selector, tmpl.Labels) && !strings.HasSuffix(svc.Name, "-leader") {
						t.Errorf("service %s selects %v, not the pods", svc.Name, svc.Spec.Selector)
					}
				}
				for _, np := range objectsOf[*networkingv1.NetworkPolicy](objs) {
					if !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, selector.MatchLabels) {
						t.Errorf("NetworkPolicy selects %v, want the pods", np.Spec.PodSelector.MatchLabels)
					}
				}
				for _, pdb := range objectsOf[*policyv1.PodDisruptionBudget](objs) {
					if !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, selector.MatchLabels) {
						t.Errorf("PDB selects %v, want the pods", pdb.Spec.Selector.MatchLabels)
					}
				}
				pods := objectsOf[*corev1.Pod](decodeManifest(t, r.hooks))
				if len(pods) != 1 {
					t.Fatalf("%d hook pods, want helm test's one", len(pods))
				}
				checkMounts(t, "helm test pod", &pods[0].Spec)
				lintChart(t, chartDir, values)
			})
		}
	}
	if n != 96 {
		t.Errorf("%d combinations, want 96", n)
	}
}
