package k8s

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/elector/elector/adapters/clientgo"
)

// TestClientGo: scenario 4. client-go's LeaderElector on a real Lease, 3 replicas with the
// same durations and the same gated readiness (readiness probe /readyz, 200 only while
// leading, period 2 s) under the same deletes as elector.
func TestClientGo(t *testing.T) {
	ctx := context.Background()
	const name = "clientgo"
	e.clientgoRBAC(t, ctx, name)
	sel := e.clientgoDeployment(t, ctx, name, name, "--lock=lease")
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

// clientgoRBAC creates the ServiceAccount name and a Role and RoleBinding of that name that let
// it get, create and update Leases (client-go's LeaderElector on the Lease lock); they and
// the Lease name are deleted when t ends.
func (e *env) clientgoRBAC(t *testing.T, ctx context.Context, name string) {
	t.Helper()
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
	t.Cleanup(func() {
		bg := context.Background()
		_ = e.cs.RbacV1().RoleBindings("default").Delete(bg, name, metav1.DeleteOptions{})
		_ = e.cs.RbacV1().Roles("default").Delete(bg, name, metav1.DeleteOptions{})
		_ = core.ServiceAccounts("default").Delete(bg, name, metav1.DeleteOptions{})
		_ = e.cs.CoordinationV1().Leases("default").Delete(bg, name, metav1.DeleteOptions{})
	})
}

// TestClientGoRedis: scenario 4's last part, adapters/clientgo in-cluster. The same program,
// client-go's LeaderElector, electing on elector's Redis lock instead of a Lease: 3 replicas,
// the same durations, the same gated readiness, the same deletes. A term is the record's
// holder with the lock's fencing token, read from Redis with the adapter itself.
func TestClientGoRedis(t *testing.T) {
	ctx := context.Background()
	const name = "clientgo-redis"
	sel := e.clientgoDeployment(t, ctx, name, "default", "--lock=redis", "--redis-addr="+e.redisAddr)
	observer, err := clientgo.New(e.redis, name, "e2e-observer", clientgo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tg := target{
		label: "clientgo-redis", replicas: 3, selector: labels.SelectorFromSet(sel), service: name + "-leader",
		holder: func(ctx context.Context) (string, int64, error) {
			rec, _, err := observer.Get(ctx)
			if apierrors.IsNotFound(err) {
				return "", 0, nil
			}
			if err != nil || rec.HolderIdentity == "" {
				return "", 0, err
			}
			tok, err := e.redis.Get(ctx, observer.TokenKey()).Int64()
			if err != nil {
				return "", 0, fmt.Errorf("token of %s: %w", rec.HolderIdentity, err)
			}
			return rec.HolderIdentity, tok, nil
		},
		procMarker: "/clientgo-elector",
	}
	e.runFailovers(t, ctx, tg)
}

// clientgoDeployment creates the Deployment of 3 clientgo-elector replicas called name, run
// as serviceAccount with args and the shared durations, gated by /readyz, and the Service of
// its leader; it returns the pods' labels.
func (e *env) clientgoDeployment(t *testing.T, ctx context.Context, name, serviceAccount string, args ...string) map[string]string {
	t.Helper()
	sel := map[string]string{"app.kubernetes.io/name": name}
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
					ServiceAccountName:            serviceAccount,
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name:            "elector",
						Image:           clientgoImage,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Args: append([]string{"--lease-name=" + name, "--lease-duration=" + leaseDuration.String(),
							"--renew-deadline=" + renewDeadline.String(), "--retry-period=" + retryPeriod.String()}, args...),
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
		_ = e.cs.AppsV1().Deployments("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	e.leaderService(t, ctx, name+"-leader", sel)
	return sel
}
