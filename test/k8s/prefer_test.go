package k8s

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/lease"
)

// preferSettle is preferred leadership's settle period and minimum hold with the scenarios'
// lease: 2 × leaseDuration.
const preferSettle = 2 * leaseDuration

// TestPreferPriorityJoins: three `elector run` replicas of priority 0 lead; a fourth of
// --candidate-priority 10 joins (a second release of the chart on the same lease). Leadership
// moves exactly once, to it, by a handover no earlier than the settle period after it was
// first seen in the candidate registry; the time from there to its term is a figure.
func TestPreferPriorityJoins(t *testing.T) {
	ctx := context.Background()
	common := []string{"--set", "mode=run", "--set", "app.command={/worker,idle}", "--set", "run.killGrace=500ms"}
	r := e.install(t, ctx, "prefer-priority", append(common, "--set", "replicaCount=3")...)
	l, err := leasekit.New(e.redis, r.leaseName, lease.Options{Prefix: r.keyPrefix})
	if err != nil {
		t.Fatal(err)
	}
	e.waitSteady(t, ctx, r, l, 3)
	// Past the minimum hold of the first term.
	time.Sleep(preferSettle)
	before, err := l.Terms(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hi := e.install(t, ctx, "prefer-priority-hi", append(common, "--set", "replicaCount=1",
		"--set", "lease.name="+r.leaseName, "--set", "run.extraArgs={--candidate-priority=10}")...)
	var hiPod string
	var seen time.Time // when the registry first listed the new replica
	if err := waitUntil(ctx, 3*time.Minute, func() error {
		pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: hi.selector.String()})
		if err != nil || len(pods.Items) != 1 {
			return fmt.Errorf("pods of %s: %v", hi.name, err)
		}
		hiPod = pods.Items[0].Name
		c, err := l.ReadCandidates(ctx)
		if err != nil {
			return err
		}
		for _, x := range c.List {
			if x.Identity == hiPod && x.Priority == 10 {
				seen = time.Now()
				return nil
			}
		}
		return fmt.Errorf("%s is not a candidate of priority 10 yet: %+v", hiPod, c.List)
	}); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	if err := waitUntil(ctx, 3*time.Minute, func() error {
		h, _, err := e.holder(ctx, r)
		if err != nil || h != hiPod {
			return fmt.Errorf("%s holds the lease, not %s (%v)", h, hiPod, err)
		}
		took = time.Since(seen)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Watch two more settle periods: leadership stays.
	time.Sleep(2 * preferSettle)
	after, err := l.Terms(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := e.holder(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a candidate of priority 10 joined 3 of priority 0: it led %v after the registry first listed it (settle period %v); %d leadership moves; %s leads", took.Round(time.Millisecond), preferSettle, after-before, h)
	e.figure("prefer_priority_takeover_seconds", secs(took))
	e.figure("prefer_priority_moves", after-before)
	if after-before != 1 || h != hiPod {
		t.Errorf("leadership moved %d times, now %s leads; want once, to %s", after-before, h, hiPod)
	}
	// A handover by preference waits for the settle period from the first heartbeat the
	// leader saw, which is at most a heartbeat (a third of a lease duration) before the
	// registry read that found it.
	if took < preferSettle-leaseDuration/3 {
		t.Errorf("%s led %v after it was listed, before the settle period %v: not a handover by preference", hiPod, took, preferSettle)
	}
}

// waitSteady waits until r's lease l has a holder and n live candidates.
func (e *env) waitSteady(t *testing.T, ctx context.Context, r *release, l *leasekit.Lease, n int) {
	t.Helper()
	if err := waitUntil(ctx, 3*time.Minute, func() error {
		h, _, err := e.holder(ctx, r)
		if err != nil || h == "" {
			return fmt.Errorf("no holder: %v", err)
		}
		c, err := l.ReadCandidates(ctx)
		if err != nil || len(c.List) != n {
			return fmt.Errorf("candidates %+v (%v), want %d", c.List, err, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestPreferNewestRollingUpdate: on a real cluster. Deployments of 3 and of 5
// `elector run --prefer newest --candidate-version v1.0.0` replicas (the chart, run mode:
// maxSurge 1, maxUnavailable 0) are rolled to --candidate-version v1.1.0, each beside
// client-go's LeaderElector (3 replicas on a Lease, the same timings) rolled at the same
// moment. elector's leadership moves exactly once (the lease's term counter), to a pod of the
// new version; the transitions and the time without a leader of both are logged as figures.
func TestPreferNewestRollingUpdate(t *testing.T) {
	ctx := context.Background()
	cg := e.preferClientGo(t, ctx, "prefer-clientgo")
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("replicas=%d", n), func(t *testing.T) {
			e.preferRollout(t, ctx, n, cg, "--prefer=newest")
		})
	}
	// The control: the same rollout of 5 without --prefer, for the figures (leadership moves
	// whenever the leading pod is replaced: up to 5 times).
	t.Run("replicas=5,no-prefer", func(t *testing.T) {
		e.preferRollout(t, ctx, 5, cg, "")
	})
}

// clientgoLease is client-go's deployment in the test: its pods and its Lease.
type clientgoLease struct {
	name     string
	selector labels.Selector
}

// holder reads the Lease: the holder ("" when none) and leaseTransitions.
func (c clientgoLease) holder(ctx context.Context) (string, int64, error) {
	l, err := e.cs.CoordinationV1().Leases("default").Get(ctx, c.name, metav1.GetOptions{})
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
	return h, int64(tr), nil
}

// preferClientGo deploys client-go's LeaderElector (test/k8s/cmd/clientgo-elector, 3 replicas,
// the Lease lock) with its RBAC (clientgoRBAC) and waits until it leads.
func (e *env) preferClientGo(t *testing.T, ctx context.Context, name string) clientgoLease {
	t.Helper()
	e.clientgoRBAC(t, ctx, name)
	sel := e.clientgoDeployment(t, ctx, name, name, "--lock=lease")
	c := clientgoLease{name: name, selector: labels.SelectorFromSet(sel)}
	if err := waitUntil(ctx, 3*time.Minute, func() error {
		h, _, err := c.holder(ctx)
		if err != nil || h == "" {
			return fmt.Errorf("client-go: no holder yet (%v)", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

// templateHashes returns the pod-template-hash of the live (not terminating) pods of selector.
func templateHashes(ctx context.Context, selector labels.Selector) (map[string]int, error) {
	pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out[p.Labels["pod-template-hash"]]++
		}
	}
	return out, nil
}

// rolledOut waits until every pod of selector is of a template other than old's, n of them,
// and none is left terminating.
func rolledOut(ctx context.Context, selector labels.Selector, old map[string]int, n int) error {
	return waitUntil(ctx, 5*time.Minute, func() error {
		pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err != nil {
			return err
		}
		fresh := 0
		for _, p := range pods.Items {
			if _, ok := old[p.Labels["pod-template-hash"]]; ok || p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s of the old template, or terminating, is still there", p.Name)
			}
			fresh++
		}
		if fresh != n {
			return fmt.Errorf("%d of %d new pods", fresh, n)
		}
		return nil
	})
}

// leaderless sums the time between samples in which nobody led: no holder, or a holder whose
// pod no longer exists (a Lease that outlives its holder until it expires).
func leaderless(samples []sample) time.Duration {
	var total time.Duration
	for i := 1; i < len(samples); i++ {
		s := samples[i-1]
		if _, ok := s.pod(s.holder); !s.holderOK || s.holder == "" || !ok {
			total += samples[i].at.Sub(s.at)
		}
	}
	return total
}

// preferRollout installs n `elector run` replicas with the flag prefer, rolls them and
// client-go's Deployment to a new version at the same moment, and checks and reports the moves.
// With prefer "" (the control) it only reports the moves.
func (e *env) preferRollout(t *testing.T, ctx context.Context, n int, cg clientgoLease, prefer string) {
	name, label := fmt.Sprintf("prefer-%d", n), fmt.Sprintf("prefer_rollout_%d", n)
	args := func(version string) string { return "run.extraArgs={--candidate-version=" + version + "}" }
	if prefer != "" {
		args = func(version string) string {
			return "run.extraArgs={" + prefer + ",--candidate-version=" + version + "}"
		}
	} else {
		name, label = name+"-control", label+"_control"
	}
	r := e.install(t, ctx, name, "--set", "mode=run", "--set", fmt.Sprintf("replicaCount=%d", n),
		"--set", "app.command={/worker,idle}",
		// Within the chart's bound for the short lease (958ms); /worker idle exits at SIGTERM.
		"--set", "run.killGrace=500ms",
		"--set", args("v1.0.0"))
	l, err := leasekit.New(e.redis, r.leaseName, lease.Options{Prefix: r.keyPrefix})
	if err != nil {
		t.Fatal(err)
	}
	e.waitSteady(t, ctx, r, l, n) // of v1.0.0
	e.leaderOnNewestPod(t, ctx, r, l)
	oldElector, err := templateHashes(ctx, r.selector)
	if err != nil {
		t.Fatal(err)
	}
	oldClientGo, err := templateHashes(ctx, cg.selector)
	if err != nil {
		t.Fatal(err)
	}
	termsBefore, err := l.Terms(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, cgBefore, err := cg.holder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	es := e.startSampler(ctx, r.selector, "", func(ctx context.Context) (string, int64, error) { return e.holder(ctx, r) })
	defer es.Stop()
	cs := e.startSampler(ctx, cg.selector, "", cg.holder)
	defer cs.Stop()

	t0 := time.Now()
	if _, err := e.helmCmd(ctx, "upgrade", r.name, e.repo+"/charts/elector", "--reuse-values", "--set", args("v1.1.0")); err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"e2e/prefer-rollout":%q}}}}}`, name)
	if _, err := e.cs.AppsV1().Deployments("default").Patch(ctx, cg.name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := rolledOut(ctx, r.selector, oldElector, n); err != nil {
		t.Fatalf("elector: %v", err)
	}
	electorDone := time.Since(t0)
	if err := rolledOut(ctx, cg.selector, oldClientGo, 3); err != nil {
		t.Fatalf("client-go: %v", err)
	}
	// A handover by preference may come up to a settle period and a minimum hold after the
	// last new pod started: watch that long and a lease duration more, so that a late move is
	// counted.
	time.Sleep(2*preferSettle + 2*leaseDuration)
	es.Stop()
	cs.Stop()

	termsAfter, err := l.Terms(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, cgAfter, err := cg.holder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holder, _, err := e.holder(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.ReadCandidates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var holderVersion string
	for _, x := range c.List {
		if x.Identity == holder {
			holderVersion = x.Version
		}
	}
	var seq []string // the holders in order, with the pods the rollout deleted
	deleted := map[string]bool{}
	for _, x := range es.since(t0) {
		if x.holderOK && (len(seq) == 0 || seq[len(seq)-1] != x.holder) {
			seq = append(seq, x.holder)
		}
		for _, p := range x.pods {
			if p.terminating && !deleted[p.name] {
				deleted[p.name] = true
				seq = append(seq, "(deleting "+p.name+")")
			}
		}
	}
	t.Logf("%s: holders and deletions in order: %s", name, strings.Join(seq, " "))
	moves, cgMoves := termsAfter-termsBefore, cgAfter-cgBefore
	gap, cgGap := leaderless(es.since(t0)), leaderless(cs.since(t0))
	t.Logf("rolling update of %d elector run %q replicas: %d leadership moves, %v without a leader, rolled in %v; now %s (%s) leads; client-go's LeaderElector (3 replicas, Lease) rolled at the same time: %d moves, %v without a leader",
		n, prefer, moves, gap.Round(time.Millisecond), electorDone.Round(time.Second), holder, holderVersion, cgMoves, cgGap.Round(time.Millisecond))
	e.figure(label+"_moves", moves)
	e.figure(label+"_leaderless_seconds", secs(gap))
	e.figure(label+"_clientgo_moves", cgMoves)
	e.figure(label+"_clientgo_leaderless_seconds", secs(cgGap))
	if prefer == "" {
		return
	}
	if moves != 1 {
		t.Errorf("leadership moved %d times during the rolling update of %d replicas with --prefer newest; want exactly 1", moves, n)
	}
	if !strings.HasSuffix(holderVersion, "v1.1.0") {
		t.Errorf("after the rollout %s leads, advertising %q; want a pod of v1.1.0 (candidates %+v)", holder, holderVersion, c.List)
	}
}

// leaderOnNewestPod moves the lease, by a resign to it, to the most recently created pod of r:
// the ReplicaSet prefers to delete recently ready pods (creation times tie at the second, so
// not always first), so the leader is replaced early in the rollout rather than last (the
// case in which any rollout moves leadership once). Without a preference the lease then
// moves each time its holder is replaced, to whichever follower wins (an old or a new pod);
// with one, once, to a new pod.
func (e *env) leaderOnNewestPod(t *testing.T, ctx context.Context, r *release, l *leasekit.Lease) {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: r.selector.String()})
	if err != nil {
		t.Fatal(err)
	}
	var newest corev1.Pod
	for _, p := range pods.Items {
		if newest.Name == "" || p.CreationTimestamp.After(newest.CreationTimestamp.Time) {
			newest = p
		}
	}
	st, err := l.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Record.Identity == newest.Name {
		return
	}
	if _, err := l.RequestResign(ctx, leasekit.ResignRequest{Target: newest.Name, HoldOff: leaseDuration, Timeout: leaseDuration, Term: st.Record}); err != nil {
		t.Fatal(err)
	}
	if err := waitUntil(ctx, time.Minute, func() error {
		h, _, err := e.holder(ctx, r)
		if err != nil || h != newest.Name {
			return fmt.Errorf("%s holds the lease, not %s (%v)", h, newest.Name, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Past the minimum hold, and long enough for every replica to see the others settled.
	time.Sleep(preferSettle + leaseDuration)
}
