package k8s

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestAcrossClusters (issue 48, item 5): one singleton across two clusters that share one
// Redis. A second cluster (API server, kubelet, network) is more than this e2e can afford,
// so two namespaces of the one cluster stand in for them, each with its own release (its own
// ServiceAccount, Role and leader label), both campaigning for one lease in one Redis, with
// identities that name their "cluster" (--identity=CLUSTER/$(POD_NAME)). What the stand-in
// does not show: two API servers (the label of each set is patched through its own, here the
// same one) and two networks (here one bridge).
//
// Exactly one leader across both sets; then the leading set is cut off from Redis (iptables
// drops its pods' packets to Redis: NetworkPolicy is not enforced by this cluster's bridge
// plugin, and a wrong address would need a rollout, whose graceful stop releases the lease),
// its elector stops leading at renewDeadline and removes its label, the other set takes over
// once the lease expired, and the apps' own records show no overlap. Restored, the cut set
// follows again and the leader stays.
func TestAcrossClusters(t *testing.T) {
	ctx := context.Background()
	key := "e2e:{clusters}:activity"
	e.redis.Del(ctx, key)
	clusters := []string{"east", "west"}
	rels := map[string]*release{}
	for _, c := range clusters {
		ns := "cluster-" + c
		if _, err := e.c.Kubectl(ctx, "create", "namespace", ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = e.c.Kubectl(context.Background(), "delete", "namespace", ns, "--wait=false") })
	}
	for _, c := range clusters {
		rels[c] = e.installChart(t, ctx, "cluster-"+c, c, filepath.Join(e.repo, "charts", "elector"),
			append(append(e.baseValues(), "--set", "replicaCount=2", "--set", "leaderLabel.enabled=true",
				"--set", "lease.name=billing-singleton",
				"--set-json", fmt.Sprintf(`sidecar.extraArgs=["--identity=%s/$(POD_NAME)"]`, c)),
				e.workerActiveValues(key, time.Second)...)...)
	}
	lease := rels["east"] // both read the same lease

	// state is one look at both sets: Ready pods, labelled pods (ns/name), the holder.
	type state struct {
		ready, labelled []string
		pods            map[string]corev1.Pod // ns/name
		holder          string                // CLUSTER/POD
		token           int64
	}
	look := func() (state, error) {
		st := state{pods: map[string]corev1.Pod{}}
		for _, c := range clusters {
			r := rels[c]
			pods, err := e.podsIn(ctx, r.ns, r.selector.String())
			if err != nil {
				return st, err
			}
			for _, p := range pods {
				st.pods[c+"/"+p.Name] = p
			}
			for _, n := range readyNames(pods) {
				st.ready = append(st.ready, c+"/"+n)
			}
			for _, n := range labelledNames(pods) {
				st.labelled = append(st.labelled, c+"/"+n)
			}
		}
		var err error
		st.holder, st.token, err = e.holder(ctx, lease)
		return st, err
	}
	// one: 4 Ready pods, the holder one of them, the only labelled pod, and (in want, if
	// set) of the cluster want.
	one := func(want string) (state, error) {
		st, err := look()
		if err != nil {
			return st, err
		}
		if len(st.ready) != 4 {
			return st, fmt.Errorf("ready %v, want 4", st.ready)
		}
		if !slices.Contains(st.ready, st.holder) || !slices.Equal(st.labelled, []string{st.holder}) {
			return st, fmt.Errorf("holder %q, labelled %v", st.holder, st.labelled)
		}
		if want != "" && !strings.HasPrefix(st.holder, want+"/") {
			return st, fmt.Errorf("holder %s, want one of %s", st.holder, want)
		}
		return st, nil
	}
	var before state
	if err := waitUntil(ctx, 3*time.Minute, func() error {
		var err error
		if before, err = one(""); err != nil {
			return err
		}
		acts, err := e.activities(ctx, key)
		if err != nil {
			return err
		}
		if w, ok := openWork(acts); !ok || !strings.HasSuffix(before.holder, "/"+w.pod) || w.token != before.token {
			return fmt.Errorf("the holder's app is not working: %v", w)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cut := strings.SplitN(before.holder, "/", 2)[0]
	other := clusters[0]
	if other == cut {
		other = clusters[1]
	}
	t.Logf("one leader across both sets: %s (token %d); cutting %s off from Redis", before.holder, before.token, cut)

	// Cut every pod of the leading set off from Redis.
	host, port, _ := net.SplitHostPort(e.redisAddr)
	var rules [][]string
	for name, p := range before.pods {
		if strings.HasPrefix(name, cut+"/") && p.Status.PodIP != "" {
			rules = append(rules, []string{"INPUT", "-s", p.Status.PodIP + "/32", "-d", host + "/32", "-p", "tcp", "--dport", port,
				"-m", "comment", "--comment", "elector-e2e cut " + cut, "-j", "DROP"})
		}
	}
	iptables := func(op string, rule []string) error {
		out, err := exec.Command("iptables", append([]string{op}, rule...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables %s %v: %w: %s", op, rule, err, out)
		}
		return nil
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		for _, r := range rules {
			if err := iptables("-D", r); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(restore)
	t0 := time.Now()
	for _, r := range rules {
		if err := iptables("-I", r); err != nil {
			t.Fatal(err)
		}
	}
	// The cut leader stops at renewDeadline, the other set acquires once the lease expired:
	// bound by the lease's timing, generously.
	var after state
	if err := waitUntil(ctx, 2*leaseDuration+time.Minute, func() error {
		var err error
		after, err = one(other)
		if err == nil && after.token <= before.token {
			err = fmt.Errorf("token %d, not a new term", after.token)
		}
		return err
	}); err != nil {
		t.Fatalf("with %s cut off: %v", cut, err)
	}
	takeover := time.Since(t0)
	var newWork interval
	if err := waitUntil(ctx, time.Minute, func() error {
		acts, err := e.activities(ctx, key)
		if err != nil {
			return err
		}
		w, ok := openWork(acts)
		if !ok || w.token != after.token {
			return fmt.Errorf("the new holder's app is not working yet")
		}
		newWork = w
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	restore()
	t1 := time.Now()
	// The cut app's records reach Redis now; it stopped working before the other started.
	var work []interval
	if err := waitUntil(ctx, time.Minute, func() error {
		acts, err := e.activities(ctx, key)
		if err != nil {
			return err
		}
		work = spans(acts, "start", "stop")
		for _, iv := range work {
			if iv.token == before.token && iv.stop.IsZero() {
				return fmt.Errorf("the cut leader's app has not reported its stop")
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var oldStop time.Time
	for _, iv := range work {
		if iv.token == before.token {
			oldStop = iv.stop
		}
	}
	ov := overlaps(work)
	for _, o := range ov {
		t.Errorf("two apps working at once across the sets: %s", o)
	}
	// Reconnected, the cut set follows: one leader, the same.
	time.Sleep(2 * leaseDuration)
	if _, err := one(other); err != nil {
		t.Errorf("after the cut was healed: %v", err)
	} else if st, _ := look(); st.holder != after.holder {
		t.Errorf("the leadership moved from %s to %s after the cut healed", after.holder, st.holder)
	}
	gap := newWork.start.Sub(oldStop)
	t.Logf("across sets: %s cut at t0; its app stopped at +%v; %s led (lease) and was the only labelled pod at +%v; its app started at +%v (gap %v); healed at +%v, still one leader; %d overlaps",
		cut, oldStop.Sub(t0).Round(time.Millisecond), after.holder, takeover.Round(time.Millisecond),
		newWork.start.Sub(t0).Round(time.Millisecond), gap.Round(time.Millisecond), t1.Sub(t0).Round(time.Millisecond), len(ov))
	e.figure("clusters_cut_app_stopped_s", secs(oldStop.Sub(t0)))
	e.figure("clusters_cut_new_app_started_s", secs(newWork.start.Sub(t0)))
	e.figure("clusters_cut_gap_s", secs(gap))
	e.figure("clusters_cut_overlaps", len(ov))
}
