package k8s

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestClientGo: scenario 4. client-go's LeaderElector on a real Lease, 3 replicas with the
// same durations and the same gated readiness (readiness probe /readyz, 200 only while
// leading, period 2 s) under the same deletes as elector.
func TestClientGo(t *testing.T) {
	ctx := context.Background()
	const name = "clientgo"
	sel := map[string]string{"app.kubernetes.io/name": name}
	core := e.cs.CoreV1()
	if _, err := core.ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			Verbs: []string{"get", "create", "update"},
		}},
	}
	if _, err := e.cs.RbacV1().Roles("default").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: "default"}},
	}
	if _, err := e.cs.RbacV1().RoleBindings("default").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicas := int32(3)
	grace := int64(30)
	maxSurge, maxUnavailable := intstr.FromInt32(1), intstr.FromString("100%")
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &maxSurge, MaxUnavailable: &maxUnavailable}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{
					ServiceAccountName:            name,
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name:            "elector",
						Image:           clientgoImage,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Args: []string{"--lease-name=" + name, "--lease-duration=" + leaseDuration.String(),
							"--renew-deadline=" + renewDeadline.String(), "--retry-period=" + retryPeriod.String()},
						Env: []corev1.EnvVar{
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
							{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
						},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}},
							PeriodSeconds: 2, TimeoutSeconds: 1, FailureThreshold: 1,
						},
					}},
				},
			},
		},
	}
	if _, err := e.cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = e.cs.AppsV1().Deployments("default").Delete(bg, name, metav1.DeleteOptions{})
		_ = e.cs.RbacV1().RoleBindings("default").Delete(bg, name, metav1.DeleteOptions{})
		_ = e.cs.RbacV1().Roles("default").Delete(bg, name, metav1.DeleteOptions{})
		_ = core.ServiceAccounts("default").Delete(bg, name, metav1.DeleteOptions{})
	})
	e.leaderService(t, ctx, name+"-leader", sel)
	tg := target{
		label: "clientgo", replicas: 3, selector: labels.SelectorFromSet(sel), service: name + "-leader",
		holder: func(ctx context.Context) (string, int64, error) {
			l, err := e.cs.CoordinationV1().Leases("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return "", 0, err
			}
			var h string
			var tr int32
			if l.Spec.HolderIdentity != nil {
				h = *l.Spec.HolderIdentity
			}
			if l.Spec.LeaseTransitions != nil {
				tr = *l.Spec.LeaseTransitions
			}
			// A term is a holder and its acquire time.
			tok := int64(tr)
			if l.Spec.AcquireTime != nil {
				tok = l.Spec.AcquireTime.UnixMicro()
			}
			if h == "" {
				tok = 0
			}
			return h, tok, nil
		},
		procMarker: "/clientgo-elector",
	}
	e.runFailovers(t, ctx, tg)
}
