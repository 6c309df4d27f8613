package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The helpers of the controller-runtime scenarios: examples/controller-runtime as a Deployment
// in a namespace of its own, its journal of leadership in Redis, its stamp on a ConfigMap.

// The example's ConfigMap label and annotations (examples/controller-runtime/main.go).
const (
	crWatchLabel   = "example.elector.io/watch"
	crReconciledBy = "example.elector.io/reconciled-by"
	crReconciledAt = "example.elector.io/reconciled-at"
	crName         = "controller" // the Deployment, the leader election ID, the probe ConfigMap
)

// crFleet is one Deployment of the example.
type crFleet struct {
	ns      string
	journal string // the Redis list of the replicas' journal entries
}

// crDeploy creates namespace ns with the example's RBAC, the ConfigMap it reconciles, and a
// Deployment of 3 replicas electing with --lock=lock; it waits until a replica has reconciled.
func (e *env) crDeploy(t *testing.T, ctx context.Context, ns, lock string) *crFleet {
	t.Helper()
	f := &crFleet{ns: ns, journal: "e2e:" + ns + ":journal"}
	if err := e.redis.Del(ctx, f.journal).Err(); err != nil {
		t.Fatal(err)
	}
	core := e.cs.CoreV1()
	if _, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = core.Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	// What the example needs: its ConfigMaps, its Lease (--lock=lease, lease+redis), events.
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: crName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		},
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: crName},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: crName},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: crName, Namespace: ns}},
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: crName, Labels: map[string]string{crWatchLabel: "true"}}}
	if _, err := core.ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: crName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := map[string]string{"app.kubernetes.io/name": crName}
	replicas, grace := int32(3), int64(30)
	surge, unavailable := intstr.FromInt32(1), intstr.FromInt32(0)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: crName},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &unavailable}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{
					ServiceAccountName:            crName,
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name:            "manager",
						Image:           crImage,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Args:            e.crArgs(f, lock),
						Env: []corev1.EnvVar{
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
							{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
						},
						Ports: []corev1.ContainerPort{{Name: "probes", ContainerPort: 8081}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("probes")}},
							PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 1,
						},
					}},
				},
			},
		},
	}
	if _, err := e.cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.crWaitRollout(t, ctx, f, 3*time.Minute)
	e.crWaitLeader(t, ctx, f, "")
	return f
}

// crArgs are the example's flags: the shared durations, the journal, --lock.
func (e *env) crArgs(f *crFleet, lock string) []string {
	return []string{"--name=" + crName, "--lock=" + lock, "--redis-addr=" + e.redisAddr,
		"--lease-duration=" + leaseDuration.String(), "--renew-deadline=" + renewDeadline.String(),
		"--retry-period=" + retryPeriod.String(), "--journal-key=" + f.journal}
}

// crSetLock rolls the Deployment to --lock=lock (a rolling update, one surge pod at a time).
func (e *env) crSetLock(t *testing.T, ctx context.Context, f *crFleet, lock string) {
	t.Helper()
	dep, err := e.cs.AppsV1().Deployments(f.ns).Get(ctx, crName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep.Spec.Template.Spec.Containers[0].Args = e.crArgs(f, lock)
	if _, err := e.cs.AppsV1().Deployments(f.ns).Update(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// crWaitRollout waits until the Deployment runs 3 ready replicas of its current template and
// no other pod (none terminating either).
func (e *env) crWaitRollout(t *testing.T, ctx context.Context, f *crFleet, within time.Duration) {
	t.Helper()
	err := waitUntil(ctx, within, func() error {
		d, err := e.cs.AppsV1().Deployments(f.ns).Get(ctx, crName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != 3 || st.ReadyReplicas != 3 || st.Replicas != 3 {
			return fmt.Errorf("rollout: %+v", st)
		}
		pods, err := e.cs.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pods.Items) != 3 {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// crStamp is who reconciled the ConfigMap last, and when (the pod's clock: the host's).
func (e *env) crStamp(ctx context.Context, f *crFleet) (string, time.Time, error) {
	cm, err := e.cs.CoreV1().ConfigMaps(f.ns).Get(ctx, crName, metav1.GetOptions{})
	if err != nil {
		return "", time.Time{}, err
	}
	by := cm.Annotations[crReconciledBy]
	at, err := time.Parse(time.RFC3339Nano, cm.Annotations[crReconciledAt])
	if by == "" || err != nil {
		return "", time.Time{}, fmt.Errorf("not reconciled yet (%v)", cm.Annotations)
	}
	return by, at, nil
}

// crWaitLeader waits until a live pod other than not has reconciled the ConfigMap, and
// returns it and the time of its reconcile.
func (e *env) crWaitLeader(t *testing.T, ctx context.Context, f *crFleet, not string) (string, time.Time) {
	t.Helper()
	var by string
	var at time.Time
	err := waitUntil(ctx, 20*leaseDuration, func() error {
		var err error
		if by, at, err = e.crStamp(ctx, f); err != nil {
			return err
		}
		if by == not {
			return fmt.Errorf("still reconciled by %s", by)
		}
		p, err := e.cs.CoreV1().Pods(f.ns).Get(ctx, by, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.DeletionTimestamp != nil {
			return fmt.Errorf("reconciled by %s, which is terminating", by)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return by, at
}

// journalEntry is one entry of the example's journal (its entry type).
type journalEntry struct {
	Pod   string `json:"pod"`
	Event string `json:"event"` // start, stop (of leading), cancel (SIGTERM)
	At    int64  `json:"at"`    // Unix microseconds
}

func (e *env) crJournal(t *testing.T, ctx context.Context, f *crFleet) []journalEntry {
	t.Helper()
	raw, err := e.redis.LRange(ctx, f.journal, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]journalEntry, 0, len(raw))
	for _, r := range raw {
		var j journalEntry
		if err := json.Unmarshal([]byte(r), &j); err != nil {
			t.Fatalf("journal entry %q: %v", r, err)
		}
		out = append(out, j)
	}
	return out
}

// leadership is what a journal shows, in Redis's order of the entries: every replica writes
// start after it acquired and stop before it releases, so a start while another replica's
// start has no stop yet is two leaders at once.
type leadership struct {
	starts   int
	overlaps []string
	gaps     []time.Duration // from a stop that left no leader to the next start
}

func analyze(entries []journalEntry) leadership {
	var l leadership
	leading := map[string]bool{}
	var lastStop int64
	for _, j := range entries {
		switch j.Event {
		case "start":
			l.starts++
			for other := range leading {
				l.overlaps = append(l.overlaps, fmt.Sprintf("%s started leading while %s led", j.Pod, other))
			}
			if len(leading) == 0 && lastStop != 0 {
				l.gaps = append(l.gaps, time.Duration(j.At-lastStop)*time.Microsecond)
			}
			leading[j.Pod] = true
		case "stop":
			delete(leading, j.Pod)
			if len(leading) == 0 {
				lastStop = j.At
			}
		}
	}
	return l
}

// lastCancel is the time of pod's last cancel entry (its SIGTERM), zero if none.
func lastCancel(entries []journalEntry, pod string) time.Time {
	var at time.Time
	for _, j := range entries {
		if j.Pod == pod && j.Event == "cancel" {
			at = time.UnixMicro(j.At)
		}
	}
	return at
}

// medianMax of durations, in seconds.
func medianMax(ds []time.Duration) (float64, float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return secs(s[len(s)/2]), secs(s[len(s)-1])
}

func fmtDurations(ds []time.Duration) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, d.Round(time.Millisecond).String())
	}
	return strings.Join(parts, " ")
}
