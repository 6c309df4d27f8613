package k8s

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// checkAdmissionPolicy: with leaderLabel.admissionPolicy, the elector's ServiceAccount, which
// RBAC lets patch every pod of the namespace, may set and remove the leader label of its
// release's pods and nothing else: an image swap and another label are refused by the
// ValidatingAdmissionPolicy. Every patch is a server-side dry run (admission runs, nothing
// changes), made as the ServiceAccount by impersonation.
func checkAdmissionPolicy(t *testing.T, ctx context.Context, r *release) {
	t.Helper()
	sa := r.deployment.Spec.Template.Spec.ServiceAccountName
	cfg := rest.CopyConfig(e.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:default:" + sa}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: r.selector.String()})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("list the release's pods: %v (%d)", err, len(pods.Items))
	}
	pod := pods.Items[0]
	patch := func(body string) error {
		_, err := cs.CoreV1().Pods("default").Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(body),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	for _, tc := range []struct {
		what, body string
		allowed    bool
	}{
		{"set the leader label", fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, leaderLabelKey), true},
		{"remove the leader label", fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, leaderLabelKey), true},
		{"swap the image", fmt.Sprintf(`{"spec":{"containers":[{"name":%q,"image":"localhost/elsewhere:1"}]}}`, pod.Spec.Containers[0].Name), false},
		{"add another label", `{"metadata":{"labels":{"team":"mallory"}}}`, false},
		{"add an annotation", `{"metadata":{"annotations":{"team":"mallory"}}}`, false},
	} {
		err := patch(tc.body)
		switch {
		case tc.allowed && err != nil:
			t.Errorf("as %s, %s on %s: %v; want it allowed", sa, tc.what, pod.Name, err)
		case !tc.allowed && (err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy")):
			t.Errorf("as %s, %s on %s: %v; want a refusal by the ValidatingAdmissionPolicy", sa, tc.what, pod.Name, err)
		case !tc.allowed:
			logf("admission policy: %s refused: %v", tc.what, err)
		}
	}
	// The administrator is not the elector: the policy does not apply to it.
	if _, err := e.cs.CoreV1().Pods("default").Patch(ctx, pod.Name, types.StrategicMergePatchType,
		[]byte(`{"metadata":{"labels":{"team":"ops"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("as the administrator, add a label (dry run): %v", err)
	}
}
