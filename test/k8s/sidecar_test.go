package k8s

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sidecarRelease installs the chart in sidecar mode with gated readiness and 3 replicas,
// the app being the worker's idle loop.
func sidecarRelease(t *testing.T, ctx context.Context, name string, native bool) (*release, target) {
	r := e.install(t, ctx, name,
		"--set", "replicaCount=3", "--set", "gateReadiness=true",
		"--set", fmt.Sprintf("sidecar.native=%t", native),
		"--set", "app.command={/worker,idle}")
	svc := name + "-leader"
	e.leaderService(t, ctx, svc, r.deployment.Spec.Selector.MatchLabels)
	return r, target{
		label: name, replicas: 3, selector: r.selector, service: svc,
		holder:     func(ctx context.Context) (string, int64, error) { return e.holder(ctx, r) },
		procMarker: "sidecar",
		// The native sidecar outlives the app: its release follows the app's exit.
		releasesAfterApp: native,
	}
}

// TestSidecarNative: scenario 1 (native sidecar), then 6 (metrics), the documented kubectl
// commands, 5 (helm test) and 2 (rolling update) on the same release.
func TestSidecarNative(t *testing.T) {
	ctx := context.Background()
	r, tg := sidecarRelease(t, ctx, "sc-native", true)
	e.runFailovers(t, ctx, tg)
	t.Run("metrics", func(t *testing.T) { testMetrics(t, ctx, r) })
	t.Run("documented-kubectl", func(t *testing.T) { testDocumentedKubectl(t, ctx, r) })
	t.Run("helm-test", func(t *testing.T) { testHelmTest(t, ctx, r) })
	t.Run("rolling-update", func(t *testing.T) { testRollingUpdate(t, ctx, r, tg) })
}

// TestSidecarPlain: scenario 1 with the plain-sidecar fallback.
func TestSidecarPlain(t *testing.T) {
	ctx := context.Background()
	_, tg := sidecarRelease(t, ctx, "sc-plain", false)
	e.runFailovers(t, ctx, tg)
}

// testMetrics scrapes every replica at the addresses of the metrics Service's EndpointSlice
// (as Prometheus' endpoint discovery does): leader_election_master_status is 1 on exactly one,
// the lease holder.
func testMetrics(t *testing.T, ctx context.Context, r *release) {
	var svc string
	for _, s := range r.services {
		if s.Spec.PublishNotReadyAddresses {
			svc = s.Name
		}
	}
	if svc == "" {
		t.Fatal("the release renders no metrics Service (publishNotReadyAddresses)")
	}
	var addrs []string
	if err := waitUntil(ctx, time.Minute, func() error {
		addrs = e.readyEndpoints(ctx, svc)
		if len(addrs) != 3 {
			return fmt.Errorf("metrics Service %s has endpoints %v, want 3", svc, addrs)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: r.selector.String()})
	if err != nil {
		t.Fatal(err)
	}
	byIP := map[string]string{}
	for _, p := range pods.Items {
		byIP[p.Status.PodIP] = p.Name
	}
	err = waitUntil(ctx, 30*time.Second, func() error {
		holder, _, err := e.holder(ctx, r)
		if err != nil {
			return err
		}
		var leaders []string
		for _, a := range addrs {
			v, err := masterStatus(ctx, a, r.leaseName)
			if err != nil {
				return err
			}
			if v == 1 {
				leaders = append(leaders, byIP[a])
			}
		}
		if len(leaders) != 1 || leaders[0] != holder {
			return fmt.Errorf("leader_election_master_status is 1 on %v, want exactly the holder %s", leaders, holder)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.figure("metrics_replicas_scraped", len(addrs))
}

func masterStatus(ctx context.Context, ip, leaseName string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ip+":8080/metrics", nil)
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		// One election per sidecar: its one series (name is the lease's name).
		if strings.HasPrefix(l, "leader_election_master_status{") {
			var v float64
			f := strings.Fields(l)
			_, err := fmt.Sscan(f[len(f)-1], &v)
			return v, err
		}
	}
	return 0, fmt.Errorf("%s: no leader_election_master_status for %s", ip, leaseName)
}

// testHelmTest runs `helm test`: passes while a holder exists, fails when none does.
func testHelmTest(t *testing.T, ctx context.Context, r *release) {
	if out, err := e.helmCmd(ctx, "test", r.name, "--timeout", "2m"); err != nil {
		t.Fatalf("helm test with a leader: %v", err)
	} else {
		t.Logf("helm test:\n%s", out)
	}
	// With no replica, the lease is released and the hook must fail.
	scale := func(n int) {
		if _, err := e.c.Kubectl(ctx, "scale", "deployment", r.deployment.Name, fmt.Sprintf("--replicas=%d", n)); err != nil {
			t.Fatal(err)
		}
	}
	scale(0)
	defer scale(3)
	if err := waitUntil(ctx, time.Minute, func() error {
		h, _, err := e.holder(ctx, r)
		if err == nil && h != "" {
			return fmt.Errorf("holder %s", h)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.helmCmd(ctx, "test", r.name, "--timeout", "2m"); err == nil {
		t.Fatal("helm test passed with no replica and no lease holder")
	}
	scale(3)
}

// testRollingUpdate: helm upgrade changing a pod annotation; the rollout completes, and no
// sampled moment has two leaders. Every 100 ms, every pod's /leader is read concurrently;
// a pod claiming a term older than one another pod was seen to lead in before the claim was
// requested is two leaders at once.
func testRollingUpdate(t *testing.T, ctx context.Context, r *release, tg target) {
	s := e.startSampler(ctx, tg.selector, tg.service, tg.holder)
	defer s.Stop()
	steady(t, s, tg, time.Now())
	oldRS := map[string]bool{}
	pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: r.selector.String()})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		oldRS[p.Labels["pod-template-hash"]] = true
	}

	type claim struct {
		pod        string
		token      int64
		sent, recv time.Time
	}
	var mu sync.Mutex
	var claims []claim
	rounds, emptyRounds, doubleRounds := 0, 0, 0
	var gaps []time.Duration
	var gapStart time.Time
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(samplePeriod)
		defer tick.Stop()
		for {
			pods, err := e.cs.CoreV1().Pods("default").List(sctx, metav1.ListOptions{LabelSelector: r.selector.String()})
			if err == nil {
				var wg sync.WaitGroup
				var round []claim
				var rmu sync.Mutex
				for _, p := range pods.Items {
					if p.Status.PodIP == "" {
						continue
					}
					wg.Add(1)
					go func(p corev1.Pod) {
						defer wg.Done()
						sent := time.Now()
						st, err := getLeader(sctx, p.Status.PodIP)
						if err == nil && st.IsLeader {
							rmu.Lock()
							round = append(round, claim{p.Name, st.Token, sent, time.Now()})
							rmu.Unlock()
						}
					}(p)
				}
				wg.Wait()
				mu.Lock()
				rounds++
				claims = append(claims, round...)
				now := time.Now()
				if len(round) > 1 {
					doubleRounds++
				}
				if len(round) == 0 {
					emptyRounds++
					if gapStart.IsZero() {
						gapStart = now
					}
				} else if !gapStart.IsZero() {
					gaps = append(gaps, now.Sub(gapStart))
					gapStart = time.Time{}
				}
				mu.Unlock()
			}
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	t0 := time.Now()
	if _, err := e.helmCmd(ctx, "upgrade", r.name, e.repo+"/charts/elector", "--reuse-values", "--set-string", "podAnnotations.e2e/rollout=1"); err != nil {
		t.Fatal(err)
	}
	// Complete: every pod of the new template, none of the old, exactly one Ready.
	if err := waitUntil(ctx, 4*time.Minute, func() error {
		pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: r.selector.String()})
		if err != nil {
			return err
		}
		n := 0
		for _, p := range pods.Items {
			if oldRS[p.Labels["pod-template-hash"]] {
				return fmt.Errorf("old pod %s still there", p.Name)
			}
			if p.DeletionTimestamp == nil {
				n++
			}
		}
		if n != 3 {
			return fmt.Errorf("%d new pods", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st := steady(t, s, tg, time.Now())
	rollout := st.at.Sub(t0)
	stop()
	<-done

	mu.Lock()
	defer mu.Unlock()
	// Two leaders: a claim of a smaller token requested after a larger token's claim was
	// received.
	for _, a := range claims {
		for _, b := range claims {
			if b.token > a.token && a.sent.After(b.recv) {
				t.Errorf("two leaders: %s claimed token %d at %s, after %s was seen leading with token %d at %s",
					a.pod, a.token, a.sent.Format(time.RFC3339Nano), b.pod, b.token, b.recv.Format(time.RFC3339Nano))
			}
		}
	}
	var maxGap, total time.Duration
	for _, g := range gaps {
		total += g
		if g > maxGap {
			maxGap = g
		}
	}
	if rounds < 10 {
		t.Fatalf("only %d sampling rounds", rounds)
	}
	t.Logf("rollout complete in %v; %d rounds sampled %d claims, %d rounds without a leader; leaderless gaps %v (max %v)", rollout, rounds, len(claims), emptyRounds, gaps, maxGap)
	e.figure("rolling_update_seconds", secs(rollout))
	e.figure("rolling_update_rounds", rounds)
	e.figure("rolling_update_double_leader_rounds", doubleRounds)
	e.figure("rolling_update_leaderless_gaps", len(gaps))
	e.figure("rolling_update_leaderless_max_s", secs(maxGap))
	e.figure("rolling_update_leaderless_total_s", secs(total))
}
