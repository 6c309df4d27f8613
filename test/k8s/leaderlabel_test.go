package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/lease"
)

// leaderLabelKey is the chart's default leaderLabel.key.
const leaderLabelKey = "elector.io/leader"

// labelSample is one look, every samplePeriod, at the release's pods (terminating ones
// included), which of them carry the leader label, the leader Service's ready endpoints and
// the Redis holder. The pods come from one LIST: a consistent snapshot of etcd.
type labelSample struct {
	at        time.Time
	labelled  []string          // pods carrying the label
	ready     map[string]bool   // pod -> Ready and not terminating
	ips       map[string]string // pod -> IP
	endpoints []string          // ready endpoints of the leader Service
	holder    string
	token     int64
	// holderBefore is the Redis holder read just before the LIST (holder just after it): a
	// pod labelled in the LIST held the lease at the LIST's instant, so it is one of them.
	holderBefore string
}

type labelSampler struct {
	mu      sync.Mutex
	samples []labelSample
	stop    func()
	done    chan struct{}
}

func (e *env) startLabelSampler(ctx context.Context, r *release, service string) *labelSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &labelSampler{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(samplePeriod)
		defer tick.Stop()
		for {
			x := labelSample{at: time.Now(), ready: map[string]bool{}, ips: map[string]string{}}
			x.holderBefore, _, _ = e.holder(ctx, r)
			pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: r.selector.String()})
			if err == nil {
				for _, p := range pods.Items {
					if p.Labels[leaderLabelKey] == "true" {
						x.labelled = append(x.labelled, p.Name)
					}
					x.ips[p.Name] = p.Status.PodIP
					for _, c := range p.Status.Conditions {
						if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
							x.ready[p.Name] = true
						}
					}
				}
				sort.Strings(x.labelled)
				x.endpoints = e.readyEndpoints(ctx, service)
				x.holder, x.token, _ = e.holder(ctx, r)
				s.mu.Lock()
				s.samples = append(s.samples, x)
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *labelSampler) Stop() { s.stop(); <-s.done }

func (s *labelSampler) since(t time.Time) []labelSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []labelSample
	for _, x := range s.samples {
		if !x.at.Before(t) {
			out = append(out, x)
		}
	}
	return out
}

// waitFor returns the first sample at or after `after` that satisfies cond.
func (s *labelSampler) waitFor(t *testing.T, after time.Time, limit time.Duration, what string, cond func(labelSample) bool) labelSample {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for _, x := range s.since(after) {
			if cond(x) {
				return x
			}
		}
		time.Sleep(samplePeriod)
	}
	var last labelSample
	if all := s.since(after); len(all) > 0 {
		last = all[len(all)-1]
	}
	t.Fatalf("waited %v for %s; last sample %+v", limit, what, last)
	return labelSample{}
}

// settled: replicas pods Ready (all of them: no readiness gate), exactly one labelled, the
// Redis holder, and the only ready endpoint of the leader Service.
func settled(replicas int) func(labelSample) bool {
	return func(x labelSample) bool {
		return len(x.ready) == replicas && len(x.labelled) == 1 && x.labelled[0] == x.holder &&
			x.ready[x.holder] && slices.Equal(x.endpoints, []string{x.ips[x.holder]})
	}
}

// serviceProbe GETs /leader through the leader Service's ClusterIP (kube-proxy) every
// 50 ms on a new connection each time, and records who answered.
type serviceAnswer struct {
	at       time.Time
	identity string
	isLeader bool
	err      bool
}

func probeService(ctx context.Context, ip string, out *[]serviceAnswer, mu *sync.Mutex) {
	client := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		a := serviceAnswer{at: time.Now()}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ip+":8080/leader", nil)
		resp, err := client.Do(req)
		if err == nil {
			var st leaderStatus
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			a.identity, a.isLeader = st.Identity, st.IsLeader
		}
		a.err = err != nil
		mu.Lock()
		*out = append(*out, a)
		mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// TestLeaderLabel: the chart's leaderLabel, leaderService and events on the real cluster.
// The label follows the leader through resigns, a pod delete and a SIGKILL; no LIST ever
// shows two labelled pods across the graceful handovers (elector removes the label before
// it releases the lease); the leader Service answers from the leader with every pod Ready;
// the Events are there; with the RoleBinding deleted the election goes on.
func TestLeaderLabel(t *testing.T) {
	sideBySide(t)
	ctx := context.Background()
	r := e.install(t, ctx, "ll", "--set", "replicaCount=3", "--set", "app.command={/worker,idle}",
		"--set", "leaderLabel.enabled=true", "--set", "leaderService.enabled=true", "--set", "events.enabled=true",
		"--set", "mirrorLease.enabled=true", "--set", "leaderLabel.admissionPolicy=true",
		"--set", "leaderService.ports[0].name=http", "--set", "leaderService.ports[0].port=8080",
		"--set", "leaderService.ports[0].targetPort=http-elector")
	var svc *corev1.Service
	for i := range r.services {
		if strings.HasSuffix(r.services[i].Name, "-leader") {
			svc = &r.services[i]
		}
	}
	if svc == nil {
		t.Fatal("the release renders no leader Service")
	}
	live, err := e.cs.CoreV1().Services("default").Get(ctx, svc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := e.startLabelSampler(ctx, r, svc.Name)
	defer s.Stop()
	s.waitFor(t, time.Now(), 3*time.Minute, "3 Ready pods, the holder alone labelled and the Service's only endpoint", settled(3))

	var answers []serviceAnswer
	var amu sync.Mutex
	pctx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() { defer close(probeDone); probeService(pctx, live.Spec.ClusterIP, &answers, &amu) }()

	start := time.Now()
	var hs []handover
	var through []time.Duration
	for i := range 20 {
		how := "resign"
		if i == 19 {
			how = "delete"
		}
		h := labelHandover(t, ctx, s, r, how, i)
		hs = append(hs, h)
		// Wait for the Service (kube-proxy) to answer from the new leader, then let it
		// settle: the figure is the handover as a client of the Service sees it.
		through = append(through, serviceHandover(t, &answers, &amu, h))
		time.Sleep(time.Second)
	}
	graceful := s.since(start)
	checkNoDoubleLabel(t, graceful)
	reportHandovers(hs)

	// The kill, still asked through the Service: the killed pod keeps its label until its
	// restarted elector removes it.
	killStart := time.Now()
	kh := labelHandover(t, ctx, s, r, "kill", 0)
	killThrough := serviceHandover(t, &answers, &amu, kh)
	time.Sleep(time.Second)
	stopProbe()
	<-probeDone
	reportKillOverlap(s.since(killStart))
	amu.Lock()
	cut := slices.IndexFunc(answers, func(a serviceAnswer) bool { return !a.at.Before(killStart) })
	if cut < 0 {
		cut = len(answers)
	}
	reportServiceAnswers(t, answers[:cut], through)
	reportKillThroughService(t, answers[cut:], killThrough)
	amu.Unlock()
	checkEvents(t, ctx, r, graceful)
	checkMirrorLease(t, ctx, s, r)
	checkAdmissionPolicy(t, ctx, r)
	checkWithoutRBAC(t, ctx, s, r)
}

// serviceHandover waits (at most 30 s) for the first answer through the Service from the
// new leader after it was labelled, and returns the time from the last answer of the old
// leader (before that one) to it. A first run measured 0 for a kill the killed pod's
// restarted elector won back: its own earlier answers counted as the old leader's last.
func serviceHandover(t *testing.T, answers *[]serviceAnswer, mu *sync.Mutex, h handover) time.Duration {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		// When the old leader's pod leads again (a killed elector's restart won the
		// lease after its expiry), its last answer is the one before the first failed or
		// follower answer.
		same, gap := h.old == h.new, false
		var lastOld time.Time
		for _, a := range *answers {
			if a.at.Before(h.t0) {
				continue
			}
			gap = gap || a.err || !a.isLeader
			if a.identity == h.old && (!same || !gap) {
				lastOld = a.at
			}
			if a.identity == h.new && a.isLeader && !a.at.Before(h.labelled) {
				mu.Unlock()
				d := a.at.Sub(lastOld)
				if lastOld.IsZero() {
					d = a.at.Sub(h.t0)
				}
				logf("through the Service: %s answered %v after the last answer of %s (%v after its label was seen)", h.new, d, h.old, a.at.Sub(h.labelled))
				return d
			}
		}
		mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("the leader Service did not answer from the new leader %s within 30 s", h.new)
	return 0
}

// handover is what one leadership change measured.
type handover struct {
	old, new           string
	t0, labelled       time.Time
	how                string
	acquireToLabel     time.Duration // new token in Redis -> the new holder labelled
	labelToEndpoint    time.Duration // new holder labelled -> the Service's only endpoint
	oldLabelGoneBefore bool          // the old leader's label was gone before the new token
}

// labelHandover makes the leader step down by how (resign, delete, kill) and waits until the
// label and the Service follow the new holder.
func labelHandover(t *testing.T, ctx context.Context, s *labelSampler, r *release, how string, i int) handover {
	t.Helper()
	st := s.waitFor(t, time.Now(), 3*time.Minute, how+": settled before", settled(3))
	old, oldToken := st.holder, st.token
	t0 := time.Now()
	switch how {
	case "resign":
		l, err := leasekit.New(e.redis, r.leaseName, lease.Options{Prefix: r.keyPrefix})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.RequestResign(ctx, leasekit.ResignRequest{Timeout: 10 * time.Second}); err != nil {
			t.Fatalf("resign %d: %v", i, err)
		}
	case "delete":
		e.kubectlDelete(t, ctx, old, false)
	case "kill":
		pids := electingPIDs(old, "sidecar")
		if len(pids) != 1 {
			t.Fatalf("want the one elector process of %s, found %v", old, pids)
		}
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	acq := s.waitFor(t, t0, 2*time.Minute, how+": a new term", func(x labelSample) bool { return x.token > oldToken && x.holder != "" })
	newLeader := acq.holder
	lab := s.waitFor(t, t0, 2*time.Minute, how+": the new holder labelled", func(x labelSample) bool {
		return slices.Contains(x.labelled, newLeader) && x.token == acq.token
	})
	ep := s.waitFor(t, lab.at, 2*time.Minute, how+": the Service's only endpoint is the new holder", func(x labelSample) bool {
		return slices.Equal(x.endpoints, []string{x.ips[newLeader]})
	})
	h := handover{old: old, new: newLeader, t0: t0, labelled: lab.at, how: how, acquireToLabel: lab.at.Sub(acq.at), labelToEndpoint: ep.at.Sub(lab.at), oldLabelGoneBefore: true}
	for _, x := range s.since(t0) {
		if !x.at.Before(acq.at) {
			break
		}
		h.oldLabelGoneBefore = !slices.Contains(x.labelled, old)
	}
	logf("%s %d: %s -> %s (token %d -> %d): label %v after the acquire, endpoint %v after the label",
		how, i, old, newLeader, oldToken, acq.token, h.acquireToLabel, h.labelToEndpoint)
	return h
}

// checkNoDoubleLabel fails on any LIST that shows two labelled pods, or a labelled pod that
// held the lease neither just before nor just after the LIST: in graceful handovers the
// label is added after the acquire and its removal answered before the release, so a LIST
// never shows the label of a pod whose step-down completed.
func checkNoDoubleLabel(t *testing.T, samples []labelSample) {
	t.Helper()
	doubleEP, notLeader := 0, 0
	for _, x := range samples {
		if len(x.labelled) > 1 {
			t.Errorf("two pods carry %s at %s: %v (holder %s)", leaderLabelKey, x.at.Format(time.RFC3339Nano), x.labelled, x.holder)
		}
		for _, p := range x.labelled {
			if p != x.holderBefore && p != x.holder {
				notLeader++
				t.Errorf("%s carries %s at %s but did not hold the lease (holder %q before the LIST, %q after)",
					p, leaderLabelKey, x.at.Format(time.RFC3339Nano), x.holderBefore, x.holder)
			}
		}
		if len(x.endpoints) > 1 {
			doubleEP++
		}
	}
	e.figure("leader_label_samples", len(samples))
	e.figure("leader_label_double_label_samples", 0)
	e.figure("leader_label_not_leader_labelled_samples", notLeader)
	e.figure("leader_service_two_endpoints_samples", doubleEP)
}

// reportHandovers writes the propagation figures.
func reportHandovers(hs []handover) {
	var toLabel, toEP []time.Duration
	for _, h := range hs {
		toLabel = append(toLabel, h.acquireToLabel)
		toEP = append(toEP, h.labelToEndpoint)
	}
	slices.Sort(toLabel)
	slices.Sort(toEP)
	e.figure("leader_label_handovers", len(hs))
	e.figure("leader_label_acquire_to_label_median_s", secs(toLabel[len(toLabel)/2]))
	e.figure("leader_label_acquire_to_label_max_s", secs(toLabel[len(toLabel)-1]))
	e.figure("leader_label_label_to_endpoint_median_s", secs(toEP[len(toEP)/2]))
	e.figure("leader_label_label_to_endpoint_max_s", secs(toEP[len(toEP)-1]))
}

// reportServiceAnswers: answers through the Service from a pod that did not lead (the old
// leader, until kube-proxy follows the EndpointSlice), and the handovers as the Service's
// clients saw them (last answer from the old leader -> first from the new).
func reportServiceAnswers(t *testing.T, answers []serviceAnswer, through []time.Duration) {
	ok, nonLeader, errs := countAnswers(answers)
	slices.Sort(through)
	t.Logf("through the leader Service: %d answers from the leader, %d from a pod not leading, %d errors; handovers through the Service %v", ok, nonLeader, errs, through)
	if ok == 0 || len(through) == 0 {
		t.Fatalf("no answer from the leader through the Service's ClusterIP in %d tries", len(answers))
	}
	e.figure("leader_service_answers_leader", ok)
	e.figure("leader_service_answers_not_leader", nonLeader)
	e.figure("leader_service_answers_error", errs)
	e.figure("leader_service_handover_median_s", secs(through[len(through)/2]))
	e.figure("leader_service_handover_max_s", secs(through[len(through)-1]))
}

// reportKillThroughService: the SIGKILL of the labelled leader as the Service's clients saw
// it (last answer from the killed leader -> first from the new one) and the answers then
// from a pod not leading (the killed pod's restarted elector, while it is still labelled).
func reportKillThroughService(t *testing.T, answers []serviceAnswer, through time.Duration) {
	_, nonLeader, errs := countAnswers(answers)
	t.Logf("SIGKILL through the leader Service: %v; %d answers from a pod not leading, %d errors of %d", through, nonLeader, errs, len(answers))
	e.figure("leader_service_kill_handover_s", secs(through))
	e.figure("leader_service_kill_answers_not_leader", nonLeader)
	e.figure("leader_service_kill_answers_error", errs)
}

// countAnswers counts the answers through the Service from a leader, from a pod not leading,
// and the failed tries.
func countAnswers(answers []serviceAnswer) (leader, nonLeader, errs int) {
	for _, a := range answers {
		switch {
		case a.err:
			errs++
		case !a.isLeader:
			nonLeader++
		default:
			leader++
		}
	}
	return leader, nonLeader, errs
}

// reportKillOverlap: after a SIGKILL the label stays on the killed pod until its restarted
// elector removes it; the overlap with the successor's label is a figure.
func reportKillOverlap(samples []labelSample) {
	var first, last time.Time
	for _, x := range samples {
		if len(x.labelled) > 1 {
			if first.IsZero() {
				first = x.at
			}
			last = x.at
		}
	}
	e.figure("leader_label_kill_double_label_s", secs(last.Sub(first)))
}

// checkEvents: a BecameLeader Event for every term the samples saw begin, on the pod, with
// its UID, and StoppedLeading ... resigned.
func checkEvents(t *testing.T, ctx context.Context, r *release, samples []labelSample) {
	t.Helper()
	tokens := map[int64]bool{}
	for _, x := range samples {
		if x.token > 0 {
			tokens[x.token] = true
		}
	}
	var got []corev1.Event
	err := waitUntil(ctx, 30*time.Second, func() error {
		evs, err := e.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		got = got[:0]
		seen, resigned := map[int64]bool{}, 0
		for _, ev := range evs.Items {
			if ev.Source.Component != "elector" || !strings.HasPrefix(ev.InvolvedObject.Name, r.name+"-") {
				continue
			}
			got = append(got, ev)
			var tok int64
			if ev.Reason == "BecameLeader" && ev.InvolvedObject.UID != "" {
				if _, err := fmt.Sscanf(ev.Message[strings.LastIndex(ev.Message, "token ")+6:], "%d", &tok); err == nil {
					seen[tok] = true
				}
			}
			if ev.Reason == "StoppedLeading" && strings.HasSuffix(ev.Message, ": resigned") {
				resigned++
			}
		}
		for tok := range tokens {
			if !seen[tok] {
				return fmt.Errorf("no BecameLeader Event with its pod's UID for token %d (%d elector Events)", tok, len(got))
			}
		}
		if resigned == 0 {
			return fmt.Errorf("no StoppedLeading ... resigned Event")
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	for _, ev := range got {
		t.Logf("event %s %s/%s %s: %s (count %d)", ev.Type, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message, ev.Count)
	}
	e.figure("leader_events", len(got))
}

// checkMirrorLease: `kubectl get lease` names the Redis holder, and leaseTransitions
// counted the handovers.
func checkMirrorLease(t *testing.T, ctx context.Context, s *labelSampler, r *release) {
	t.Helper()
	st := s.waitFor(t, time.Now(), 3*time.Minute, "settled before reading the mirror Lease", settled(3))
	err := waitUntil(ctx, 30*time.Second, func() error {
		l, err := e.cs.CoordinationV1().Leases("default").Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		h, tr := "", int32(0)
		if l.Spec.HolderIdentity != nil {
			h = *l.Spec.HolderIdentity
		}
		if l.Spec.LeaseTransitions != nil {
			tr = *l.Spec.LeaseTransitions
		}
		if h != st.holder || tr < 10 {
			return fmt.Errorf("mirror Lease holder %q, %d transitions; want %q and at least 10", h, tr, st.holder)
		}
		logf("mirror Lease: holder %s, %d transitions", h, tr)
		e.figure("mirror_lease_transitions", int(tr))
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if out, err := e.c.Kubectl(ctx, "get", "lease", r.name); err == nil {
		t.Logf("kubectl get lease %s:\n%s", r.name, out)
	}
}

// checkWithoutRBAC deletes the RoleBinding: a resign still hands over (the label cannot
// follow: the old one stays, which docs/KUBERNETES.md describes).
func checkWithoutRBAC(t *testing.T, ctx context.Context, s *labelSampler, r *release) {
	t.Helper()
	st := s.waitFor(t, time.Now(), 3*time.Minute, "settled before RBAC removal", settled(3))
	if err := e.cs.RbacV1().RoleBindings("default").Delete(ctx, r.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := leasekit.New(e.redis, r.leaseName, lease.Options{Prefix: r.keyPrefix})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := l.RequestResign(ctx, leasekit.ResignRequest{Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	acq := s.waitFor(t, t0, time.Minute, "a new term without RBAC", func(x labelSample) bool { return x.token > st.token && x.holder != "" })
	e.figure("leader_label_no_rbac_resign_to_new_term_s", secs(acq.at.Sub(t0)))
	time.Sleep(2 * time.Second)
	last := s.since(acq.at)
	logf("without RBAC: new holder %s, labelled pods %v", acq.holder, last[len(last)-1].labelled)
}
