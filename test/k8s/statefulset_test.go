package k8s

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestStatefulSet (issue 48): workload.kind=StatefulSet with the leader label and Events.
// Pods NAME-0 and NAME-1, the holder one of them and the only labelled pod, the headless
// Service there; the leader's pod deleted: the holder moves to the other pod, the same name
// comes back with a new pod, and the apps' own records show that no two processes of one
// pod name ever lived at once, and no two apps worked at once; a helm upgrade changing an
// annotation rolls both pods and completes.
func TestStatefulSet(t *testing.T) {
	ctx := context.Background()
	const name = "sts"
	key := "e2e:{" + name + "}:activity"
	e.redis.Del(ctx, key)
	r := e.install(t, ctx, name, append([]string{"--set", "workload.kind=StatefulSet", "--set", "replicaCount=2",
		"--set", "leaderLabel.enabled=true", "--set", "events.enabled=true"},
		e.workerActiveValues(key, time.Second)...)...)
	if r.kind != "StatefulSet" {
		t.Fatalf("the release rendered a %s", r.kind)
	}
	pods := []string{name + "-0", name + "-1"}
	headless, err := e.cs.CoreV1().Services("default").Get(ctx, name+"-headless", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the headless Service: %v", err)
	}
	if headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("%s has ClusterIP %q, want None", headless.Name, headless.Spec.ClusterIP)
	}

	holder, token, _ := e.settledWork(t, ctx, r, 2, key, 3*time.Minute)
	if !slices.Contains(pods, holder) {
		t.Fatalf("holder %s is not one of %v", holder, pods)
	}
	labelled := func(want string) error {
		ps, err := e.podsIn(ctx, "default", r.selector.String())
		if err != nil {
			return err
		}
		if l := labelledNames(ps); !slices.Equal(l, []string{want}) {
			return fmt.Errorf("labelled pods %v, want only %s", l, want)
		}
		return nil
	}
	if err := waitUntil(ctx, time.Minute, func() error { return labelled(holder) }); err != nil {
		t.Fatal(err)
	}
	old, err := e.cs.CoreV1().Pods("default").Get(ctx, holder, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Delete the leader's pod: the other takes over; the name returns with another pod.
	t0 := time.Now()
	e.kubectlDelete(t, ctx, holder, false)
	other := pods[0]
	if other == holder {
		other = pods[1]
	}
	var newUID types.UID
	if err := waitUntil(ctx, 30*time.Second+2*leaseDuration+2*time.Minute, func() error {
		h, tok, err := e.holder(ctx, r)
		if err != nil {
			return err
		}
		if h != other || tok <= token {
			return fmt.Errorf("holder %s token %d, want %s in a new term", h, tok, other)
		}
		if err := labelled(other); err != nil {
			return err
		}
		p, err := e.cs.CoreV1().Pods("default").Get(ctx, holder, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s not back yet", holder)
		}
		if err != nil {
			return err
		}
		if p.UID == old.UID || !podReady(*p) {
			return fmt.Errorf("%s: the old pod, or the new one not Ready yet", holder)
		}
		newUID = p.UID
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	back := time.Since(t0)
	// The Event of the new term, on the new holder's pod.
	if err := waitUntil(ctx, 30*time.Second, func() error {
		evs, err := e.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + other + ",reason=BecameLeader"})
		if err != nil {
			return err
		}
		if len(evs.Items) == 0 {
			return fmt.Errorf("no BecameLeader Event on %s", other)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	// A rollout: helm upgrade with a changed annotation; the StatefulSet rolls one pod at a
	// time, highest ordinal first, and completes.
	t1 := time.Now()
	if _, err := e.helmCmd(ctx, "upgrade", name, e.repo+"/charts/elector", "--reuse-values", "--set-string", "podAnnotations.e2e/rollout=1"); err != nil {
		t.Fatal(err)
	}
	if err := waitUntil(ctx, 6*time.Minute, func() error {
		ss, err := e.cs.AppsV1().StatefulSets("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := ss.Status
		if st.ObservedGeneration < ss.Generation || st.UpdateRevision != st.CurrentRevision || st.UpdatedReplicas != 2 || st.ReadyReplicas != 2 {
			return fmt.Errorf("rollout: %+v", st)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rollout := time.Since(t1)
	final, _, _ := e.settledWork(t, ctx, r, 2, key, 3*time.Minute)
	if err := waitUntil(ctx, time.Minute, func() error { return labelled(final) }); err != nil {
		t.Fatal(err)
	}
	ps, err := e.podsIn(ctx, "default", r.selector.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Name == holder && p.UID == newUID {
			t.Errorf("%s was not replaced by the rollout", holder)
		}
		if p.Annotations["e2e/rollout"] != "1" {
			t.Errorf("%s lacks the new annotation after the rollout", p.Name)
		}
	}

	acts, err := e.activities(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range overlaps(spans(acts, "start", "stop")) {
		t.Errorf("two apps working at once: %s", o)
	}
	// Per pod name, the processes of the successive pods never lived at once.
	lives := spans(acts, "up", "down")
	instances := map[string]int{}
	for _, p := range pods {
		var mine []interval
		for _, iv := range lives {
			if iv.pod == p {
				mine = append(mine, iv)
			}
		}
		instances[p] = len(mine)
		for _, o := range overlaps(mine) {
			t.Errorf("two pods named %s lived at once: %s", p, o)
		}
	}
	if instances[holder] < 3 {
		t.Errorf("%s had %d app processes, want 3 (the first, after the delete, after the rollout)", holder, instances[holder])
	}
	t.Logf("StatefulSet: holder %s deleted, %s took over and %s was back Ready after %v; rollout complete in %v; app processes per name %v",
		holder, other, holder, back.Round(time.Millisecond), rollout.Round(time.Millisecond), instances)
	e.figure("statefulset_delete_back_ready_s", secs(back))
	e.figure("statefulset_rollout_s", secs(rollout))
}
