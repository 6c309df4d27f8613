package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// target is what the failover scenarios act on: a set of pods electing through some lease.
type target struct {
	label    string // for the figures: "elector-native", "clientgo", ...
	replicas int
	selector labels.Selector
	service  string // the Service whose EndpointSlice must hold only the leader
	holder   func(context.Context) (string, int64, error)
	// procMarker is an argument of the electing process's command line, to find it on the
	// host for the crash case.
	procMarker string
	// releasesAfterApp is true where the lease is released only after the app exited (the
	// native sidecar): there the old leader's address must have left the ready endpoints
	// before anyone else holds the lease. Elsewhere (a plain sidecar, whose elector gets
	// SIGTERM with the app and releases at once; client-go's single container) nothing orders
	// the release before the EndpointSlice controller's reaction to the same deletion, so an
	// overlap is logged and written as a figure, not failed.
	releasesAfterApp bool
}

// steady waits for REPLICAS running pods, exactly one of them Ready, that one the lease's
// holder and the only ready endpoint of the Service, and checks it stays so for 3 s.
func steady(t *testing.T, s *sampler, tg target, after time.Time) sample {
	t.Helper()
	ok := func(x sample) bool {
		live := 0
		for _, p := range x.pods {
			if !p.terminating && p.ip != "" {
				live++
			}
		}
		rp := x.readyPods()
		if live != tg.replicas || len(rp) != 1 || x.holder != rp[0] {
			return false
		}
		p, _ := x.pod(rp[0])
		return slices.Equal(x.ready, []string{p.ip})
	}
	first := s.waitFor(t, after, 3*time.Minute, fmt.Sprintf("%s: %d pods, exactly one Ready, the holder, the only endpoint", tg.label, tg.replicas), ok)
	time.Sleep(3 * time.Second)
	for _, x := range s.since(first.at) {
		if len(x.readyPods()) > 1 || len(x.ready) > 1 {
			t.Fatalf("%s: two pods ready at once at %s: pods %+v, endpoints %v", tg.label, x.at.Format(time.RFC3339Nano), x.pods, x.ready)
		}
	}
	return first
}

// failoverResult is what one delete measured.
type failoverResult struct {
	// Handover: from the delete (or kill) until the lease has a new holder (token).
	Handover time.Duration
	// Ready: until another pod is Ready and the only ready endpoint.
	Ready time.Duration
	// NoEndpoint: how long the Service had no ready endpoint.
	NoEndpoint time.Duration
	// StaleEndpoint: how long (to the sampler's period) the old leader was still a ready
	// endpoint while another replica held the lease; zero if never seen.
	StaleEndpoint time.Duration
	// Old and New are the leaders before and after (the same after a kill that resumed);
	// T0 is the delete or kill, ReadyAt when New was Ready and the only endpoint.
	Old, New    string
	T0, ReadyAt time.Time
}

// failover deletes (or kills) the leader and measures the takeover.
func failover(t *testing.T, ctx context.Context, s *sampler, tg target, how string) failoverResult {
	t.Helper()
	st := steady(t, s, tg, time.Now())
	old := st.readyPods()[0]
	oldPod, _ := st.pod(old)
	oldToken := st.token
	t0 := time.Now()
	switch how {
	case "delete":
		e.kubectlDelete(t, ctx, old, false)
	case "force":
		e.kubectlDelete(t, ctx, old, true)
	case "kill":
		pids := electingPIDs(old, tg.procMarker)
		if len(pids) != 1 {
			t.Fatalf("%s: want the one electing process of pod %s on the host, found %v", tg.label, old, pids)
		}
		t0 = time.Now()
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	// The old leader stops counting: deleted (terminating), or, killed, unready until its
	// container restarts.
	gone := s.waitFor(t, t0, time.Minute, tg.label+": the old leader not ready", func(x sample) bool {
		p, ok := x.pod(old)
		return !ok || p.terminating || !p.ready || x.token != oldToken
	})
	// A killed client-go replica restarts with the same identity and may resume its own
	// term (same Lease holder, same acquire time): accept that as the recovery of a kill.
	newLeader := s.waitFor(t, gone.at, 2*time.Minute, tg.label+": one pod Ready, the holder, the only endpoint", func(x sample) bool {
		rp := x.readyPods()
		if len(rp) != 1 || x.holder != rp[0] || (x.token == oldToken && how != "kill") {
			return false
		}
		p, _ := x.pod(rp[0])
		return slices.Equal(x.ready, []string{p.ip})
	})
	handover, newTerm := newLeader, false
	for _, x := range s.since(t0) {
		if x.holderOK && x.holder != "" && x.token != oldToken {
			handover, newTerm = x, true
			break
		}
	}
	if handover.at.After(newLeader.at) {
		handover, newTerm = newLeader, false
	}
	res := failoverResult{Handover: handover.at.Sub(t0), Ready: newLeader.at.Sub(t0), Old: old, New: newLeader.holder, T0: t0, ReadyAt: newLeader.at}
	var emptySince, staleFrom, staleTo time.Time
	for _, x := range s.since(t0) {
		if x.at.After(newLeader.at) {
			break
		}
		if len(x.readyPods()) > 1 || len(x.ready) > 1 {
			t.Errorf("%s %s: two pods ready at once at +%v: pods %+v, endpoints %v", tg.label, how, x.at.Sub(t0), x.pods, x.ready)
		}
		if len(x.ready) == 0 && emptySince.IsZero() {
			emptySince = x.at
		}
		// The old leader's address still a ready endpoint while another holds the lease.
		if x.holder != "" && x.holder != old && slices.Contains(x.ready, oldPod.ip) && how != "kill" {
			if staleFrom.IsZero() {
				staleFrom = x.at
			}
			staleTo = x.at
		}
	}
	if !emptySince.IsZero() {
		res.NoEndpoint = newLeader.at.Sub(emptySince)
	}
	if !staleFrom.IsZero() {
		msg := fmt.Sprintf("%s %s: the old leader %s was still a ready endpoint while %s held the lease, in the samples from +%v to +%v",
			tg.label, how, old, newLeader.holder, staleFrom.Sub(t0), staleTo.Sub(t0))
		if tg.releasesAfterApp {
			t.Error(msg)
		} else {
			t.Log(msg + " (the release and the EndpointSlice update follow the same deletion unordered)")
		}
		res.StaleEndpoint = staleTo.Sub(staleFrom) + samplePeriod
	}
	if how == "kill" && !newTerm {
		t.Logf("%s: after SIGKILL, the restarted process of %s resumed its own term (same identity, no new term) after %v", tg.label, old, res.Ready)
		e.figure(tg.label+"_kill_resumed_same_term", true)
	}
	if how == "kill" && newTerm {
		// Nobody may take over before the killed leader's lease expired: at least
		// leaseDuration after its last renew, which was at most retryPeriod (plus the jitter
		// and a round trip) before the kill.
		if min := leaseDuration - retryPeriod - retryPeriod/5 - 200*time.Millisecond; res.Handover < min {
			t.Errorf("%s: takeover %v after SIGKILL of the leader, before its lease could expire (>= %v)", tg.label, res.Handover, min)
		}
	}
	t.Logf("%s %s of leader %s: new holder %s after %v, Ready and sole endpoint after %v, no ready endpoint for %v",
		tg.label, how, old, newLeader.holder, res.Handover, res.Ready, res.NoEndpoint)
	e.figure(tg.label+"_"+how+"_handover_s", secs(res.Handover))
	e.figure(tg.label+"_"+how+"_ready_s", secs(res.Ready))
	e.figure(tg.label+"_"+how+"_no_endpoint_s", secs(res.NoEndpoint))
	if how != "kill" {
		e.figure(tg.label+"_"+how+"_stale_endpoint_s", secs(res.StaleEndpoint))
	}
	return res
}

// electingPIDs finds, by PID on the host, the processes of pod whose environment says
// POD_NAME=pod and whose command line has marker.
func electingPIDs(pod, marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", en.Name(), "environ"))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), "POD_NAME="+pod) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", en.Name(), "cmdline"))
		if slices.Contains(strings.Split(string(cmd), "\x00"), marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// runFailovers deletes, force-deletes and kills the leader, sampling the pods and the Service
// every samplePeriod and asking the Service's ClusterIP (kube-proxy) who answers every 50 ms,
// as TestLeaderLabel does for the leader Service: the handover as a client of the Service
// sees it is a figure of each.
func (e *env) runFailovers(t *testing.T, ctx context.Context, tg target) {
	s := e.startSampler(ctx, tg.selector, tg.service, tg.holder)
	defer s.Stop()
	svc, err := e.cs.CoreV1().Services("default").Get(ctx, tg.service, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var answers []serviceAnswer
	var mu sync.Mutex
	pctx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() { defer close(probeDone); probeService(pctx, svc.Spec.ClusterIP, &answers, &mu) }()
	defer func() { stopProbe(); <-probeDone }()
	for _, how := range []string{"delete", "force", "kill"} {
		t.Run(how, func(t *testing.T) {
			res := failover(t, ctx, s, tg, how)
			gap, notLeader := failoverThroughService(t, &answers, &mu, res)
			t.Logf("%s %s through the Service: last answer from %s -> first from the leader %s %v; %d answers from a pod not leading",
				tg.label, how, res.Old, res.New, gap, notLeader)
			e.figure(tg.label+"_"+how+"_service_handover_s", secs(gap))
			e.figure(tg.label+"_"+how+"_service_not_leader_answers", notLeader)
		})
	}
	steady(t, s, tg, time.Now())
}

// failoverThroughService waits (at most 30 s) for the first answer through the Service from
// the new leader, claiming to lead, after it was Ready and the only endpoint, and returns
// the time from the last answer of the old leader before it (the longest gap between
// answers from a leader, when a killed replica resumed its own term) and the answers
// between the failover and then from a pod that did not lead.
func failoverThroughService(t *testing.T, answers *[]serviceAnswer, mu *sync.Mutex, res failoverResult) (time.Duration, int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		as := slices.Clone(*answers)
		mu.Unlock()
		end := slices.IndexFunc(as, func(a serviceAnswer) bool {
			return !a.at.Before(res.ReadyAt) && a.identity == res.New && a.isLeader
		})
		if end < 0 {
			continue
		}
		var last time.Time
		var gap time.Duration
		notLeader := 0
		for _, a := range as[:end+1] {
			if a.at.Before(res.T0.Add(-5 * time.Second)) {
				continue
			}
			if !a.at.Before(res.T0) && !a.err && !a.isLeader {
				notLeader++
			}
			switch {
			case res.Old != res.New && a.identity == res.Old:
				last = a.at
			case res.Old == res.New && a.identity == res.New && a.isLeader:
				if !last.IsZero() && a.at.Sub(last) > gap {
					gap = a.at.Sub(last)
				}
				last = a.at
			}
		}
		if res.Old != res.New {
			if last.IsZero() {
				last = res.T0
			}
			gap = as[end].at.Sub(last)
		}
		return gap, notLeader
	}
	t.Errorf("the Service did not answer from the new leader %s within 30 s of its readiness", res.New)
	return 0, 0
}
