package main

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/cmd/elector/internal/kube"
	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// labelPatch is one label patch the fake API server received: the label's value (nil: a
// removal) and, for a removal, whether Redis still held this replica's term when the
// server answered it.
type labelPatch struct {
	value        any
	heldAtAnswer bool
}

// labelAPI is an httptest API server for the label patches; a removal is answered after
// delay (or never, while hang is open), and Redis is read just before the answer.
type labelAPI struct {
	mu      sync.Mutex
	patches []labelPatch
	delay   time.Duration
	hang    chan struct{}
	held    func() bool
}

func (a *labelAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Metadata struct {
			Labels map[string]any `json:"labels"`
		} `json:"metadata"`
	}
	raw, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(raw, &body)
	p := labelPatch{value: body.Metadata.Labels["elector.io/leader"]}
	if p.value == nil {
		if a.hang != nil {
			select {
			case <-a.hang:
			case <-r.Context().Done():
				return
			}
		}
		time.Sleep(a.delay)
		p.heldAtAnswer = a.held()
	}
	a.mu.Lock()
	a.patches = append(a.patches, p)
	a.mu.Unlock()
	_, _ = io.WriteString(w, "{}")
}

func (a *labelAPI) list() []labelPatch {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]labelPatch(nil), a.patches...)
}

// startLabelAPI starts a TLS labelAPI and returns the cluster config trusting it.
func startLabelAPI(t *testing.T, a *labelAPI) kube.Config {
	t.Helper()
	return startAPI(t, a)
}

// startAPI starts a TLS API server answering with h and returns the cluster config
// trusting it.
func startAPI(t *testing.T, h http.Handler) kube.Config {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return kube.Config{Server: srv.URL, CAFile: ca}
}

// TestLabelRemovedBeforeRelease: a leader that stops removes its label, and the API server
// has answered the removal while Redis still holds the term: the release comes after. A
// removal the API server never answers delays the release only, by the bounded wait.
func TestLabelRemovedBeforeRelease(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	lo := leaseOptions{name: "lbl", prefix: lease.DefaultPrefix, identity: "a",
		leaseDuration: 4 * time.Second, renewDeadline: 3 * time.Second, retryPeriod: time.Second}
	l, err := leasekit.New(rc, lo.name, lease.Options{Prefix: lo.prefix})
	if err != nil {
		t.Fatal(err)
	}
	held := func() bool {
		st, err := l.Get(context.Background())
		return err == nil && st.Held && st.Record.Identity == "a"
	}
	for _, hang := range []bool{false, true} {
		// The removal is answered after an eighth of the bounded wait (about 60 ms of 479 ms):
		// within it, with the rest as the margin for a loaded machine's scheduling.
		a := &labelAPI{delay: labelRemoveTimeout(&lo) / 8, held: held}
		if hang {
			a.hang = make(chan struct{})
		}
		ko := kubeOptions{leaderLabel: "elector.io/leader", namespace: "ns", pod: "a", cluster: startLabelAPI(t, a)}
		kh, err := startKube(&ko, &lo)
		if err != nil {
			t.Fatal(err)
		}
		el := newKubeElector(t, rc, &lo, kh, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- el.Run(ctx) }()
		waitUntil(t, "the label added", func() bool {
			ps := a.list()
			return len(ps) > 0 && ps[len(ps)-1].value == "true"
		})
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("hang=%v: Run did not return", hang)
		}
		if held() {
			t.Errorf("hang=%v: the lease is still held after Run returned", hang)
		}
		if hang {
			close(a.hang)
		}
		kh.close()
		ps := a.list()
		if !hang {
			last := ps[len(ps)-1]
			if last.value != nil || !last.heldAtAnswer {
				t.Errorf("last patch %+v: want a removal answered while Redis still held the term", last)
			}
		}
		t.Logf("hang=%v: patches %+v", hang, ps)
	}
}

// TestLabelFollowsTheTermContext: the label is removed as soon as the term's context ends,
// before OnStoppedLeading runs (the elector's loop may be held up, as by a blocked log
// write, while the trust deadline has ended the term), and OnStoppedLeading's removal is
// then not sent a second time.
func TestLabelFollowsTheTermContext(t *testing.T) {
	a := &labelAPI{held: func() bool { return false }}
	ko := kubeOptions{leaderLabel: "elector.io/leader", namespace: "ns", pod: "a", cluster: startLabelAPI(t, a)}
	lo := leaseOptions{name: "lbl", leaseDuration: 4 * time.Second, renewDeadline: 3 * time.Second, retryPeriod: time.Second}
	kh, err := startKube(&ko, &lo)
	if err != nil {
		t.Fatal(err)
	}
	defer kh.close()
	cb := kh.wrap(election.Callbacks{OnStartedLeading: func(ctx context.Context) { <-ctx.Done() }, OnStoppedLeading: func() {}})
	term, end := context.WithCancel(context.Background())
	go cb.OnStartedLeading(term)
	waitUntil(t, "the label added", func() bool {
		ps := a.list()
		return len(ps) > 0 && ps[len(ps)-1].value == "true"
	})
	end() // the term is over; OnStoppedLeading has not run
	waitUntil(t, "the label removed without OnStoppedLeading", func() bool {
		ps := a.list()
		return ps[len(ps)-1].value == nil
	})
	cb.OnStoppedLeading() // returns at once: the removal was applied
	ps := a.list()
	var after int
	for i, p := range ps {
		if p.value == "true" {
			after = len(ps) - i - 1
		}
	}
	if after != 1 {
		t.Errorf("patches %+v: want exactly one removal after the addition", ps)
	}
}

// waitUntil polls cond every 10 ms for at most a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("waited a minute for %s", what)
}

// failingAPI is an httptest API server that refuses every call with 403 or, with hang,
// never answers (until the request's context ends or release is closed).
type failingAPI struct {
	hang    bool
	release chan struct{}
}

func (a *failingAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.hang {
		select {
		case <-a.release:
		case <-r.Context().Done():
		}
		return
	}
	w.WriteHeader(http.StatusForbidden)
	_, _ = io.WriteString(w, `{"kind":"Status","reason":"Forbidden","message":"forbidden by RBAC"}`)
}

// getBody returns the body of GET url.
func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// harmlessCase is one API server failure of TestKubeFailureIsHarmless: the reason it is
// reported with and a part of its fix.
type harmlessCase struct {
	hang        bool
	reason, fix string
}

// TestKubeFailureIsHarmless: with an API server that refuses every call (403) or never
// answers, the leader keeps renewing its term, /leader shows kubernetesError and
// elector_kubernetes_errors_total counts the failures; on cancel the step-down waits for the
// label's removal at most its bound and releases the lease (it does not let it expire).
func TestKubeFailureIsHarmless(t *testing.T) {
	srv := redistest.Start(t)
	lo := leaseOptions{name: "harmless", prefix: lease.DefaultPrefix, identity: "a",
		leaseDuration: 2 * time.Second, renewDeadline: 1500 * time.Millisecond, retryPeriod: 200 * time.Millisecond}
	l, err := leasekit.New(srv.Client(t), lo.name, lease.Options{Prefix: lo.prefix})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []harmlessCase{
		{false, kube.ReasonForbidden, "grant the ServiceAccount "},
		{true, kube.ReasonTimeout, "did not answer in time"},
	} {
		a := &failingAPI{hang: tc.hang, release: make(chan struct{})}
		ko := kubeOptions{leaderLabel: "elector.io/leader", events: true, mirrorLease: "m", namespace: "ns", pod: "a",
			cluster: startAPI(t, a)}
		kh, err := startKube(&ko, &lo)
		if err != nil {
			t.Fatal(err)
		}
		co := commonOptions{lease: lo, redis: redisclient.Config{Addrs: []string{srv.Addr()}, Mode: redisclient.ModeStandalone}}
		so := serveOptions{httpAddr: "127.0.0.1:0", resignEndpoint: resignOff}
		ld, err := startReplica(&co, &so, kh.wrap(election.Callbacks{
			OnStartedLeading: func(ctx context.Context) { <-ctx.Done() },
			OnStoppedLeading: func() {},
		}), false, kh)
		if err != nil {
			t.Fatal(err)
		}
		ld.serveHTTP(make(chan error, 1))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ld.elector.Run(ctx) }()
		reported := checkFailingLeader(t, ld, tc)
		start := time.Now()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("hang=%v: Run did not return", tc.hang)
		}
		took := time.Since(start)
		st, err := l.Get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// Released, not expired: the step-down ended before the lease could expire.
		if st.Held || took >= lo.leaseDuration {
			t.Errorf("hang=%v: held=%v after a step-down of %v: want a release within the lease duration %v (label wait bound %v)",
				tc.hang, st.Held, took, lo.leaseDuration, labelRemoveTimeout(&lo))
		}
		t.Logf("hang=%v: step-down and release took %v (label wait bound %v); kubernetesError %+v", tc.hang, took, labelRemoveTimeout(&lo), reported)
		close(a.release)
		ld.close()
		kh.close()
	}
}

// checkFailingLeader waits until ld leads and /leader reports the failure of tc, checks
// /metrics counts it and the term renews after it; it returns the kubernetesError.
func checkFailingLeader(t *testing.T, ld *replica, tc harmlessCase) *kube.Failure {
	t.Helper()
	base := "http://" + ld.http.ln.Addr().String()
	waitUntil(t, "leadership", ld.elector.IsLeader)
	token := ld.elector.Status().Token
	var body struct {
		KubernetesError *kube.Failure `json:"kubernetesError"`
	}
	waitUntil(t, "kubernetesError in /leader", func() bool {
		_ = json.Unmarshal([]byte(getBody(t, base+"/leader")), &body)
		return body.KubernetesError != nil && body.KubernetesError.Reason == tc.reason
	})
	failedAt := time.Now()
	if f := body.KubernetesError; !strings.Contains(f.Fix, tc.fix) || f.Count < 1 || f.Since.IsZero() {
		t.Errorf("hang=%v: kubernetesError %+v: want a fix with %q, a count and a start", tc.hang, f, tc.fix)
	}
	metric := `elector_kubernetes_errors_total{op="label",reason="` + tc.reason + `"}`
	if m := getBody(t, base+"/metrics"); !strings.Contains(m, metric) {
		t.Errorf("hang=%v: /metrics has no %s", tc.hang, metric)
	}
	// Renewals go on while the API calls fail: the same term renews after the failure.
	waitUntil(t, "a renewal after the failure", func() bool {
		st := ld.elector.Status()
		return st.LastRenew != nil && st.LastRenew.After(failedAt)
	})
	if st := ld.elector.Status(); !st.IsLeader || st.Token != token {
		t.Errorf("hang=%v: status %+v: want the term of token %d still leading", tc.hang, st, token)
	}
	return body.KubernetesError
}

// TestLeaderHandlerKubernetesError: /leader carries kubernetesError only while a failure is
// reported, as one more field of the same JSON object.
func TestLeaderHandlerKubernetesError(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"name":"a","isLeader":true}`+"\n")
	})
	var cur *kube.Failure
	h := leaderHandler(inner, func() *kube.Failure { return cur })
	get := func() map[string]any {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/leader", nil))
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("HTTP %d %q: %v", rec.Code, rec.Body, err)
		}
		return m
	}
	if m := get(); m["kubernetesError"] != nil || m["name"] != "a" {
		t.Errorf("no failure: %v, want no kubernetesError", m)
	}
	cur = &kube.Failure{Op: kube.OpLabel, Reason: kube.ReasonForbidden, Error: "e", Fix: "f", Since: time.Unix(1, 0), Count: 3}
	m := get()
	ke, _ := m["kubernetesError"].(map[string]any)
	if m["name"] != "a" || m["isLeader"] != true || ke["op"] != "label" || ke["reason"] != "forbidden" || ke["count"] != 3.0 || ke["fix"] != "f" {
		t.Errorf("failing: %v, want the elector's fields and kubernetesError", m)
	}
}

// eventAPI is an httptest API server that keeps the Events created (reason, type, message).
type eventAPI struct {
	mu     sync.Mutex
	events []map[string]any
}

func (a *eventAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/events") {
		var ev map[string]any
		_ = json.Unmarshal(raw, &ev)
		a.mu.Lock()
		a.events = append(a.events, ev)
		a.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}
	_, _ = io.WriteString(w, "{}")
}

// list returns "type reason: message" of each Event created.
func (a *eventAPI) list() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, ev := range a.events {
		out = append(out, fmt.Sprintf("%v %v: %v", ev["type"], ev["reason"], ev["message"]))
	}
	return out
}

// TestKubeEventsOfATerm: a term writes BecameLeader with its fencing token, and its end
// StoppedLeading with the reason the elector logs: resigned (Normal) after Resign, lease
// lost (Warning) when the lease vanished from Redis.
func TestKubeEventsOfATerm(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	lo := leaseOptions{name: "ev", prefix: lease.DefaultPrefix, identity: "a",
		leaseDuration: 2 * time.Second, renewDeadline: 1500 * time.Millisecond, retryPeriod: 200 * time.Millisecond}
	a := &eventAPI{}
	ko := kubeOptions{events: true, namespace: "ns", pod: "a", uid: "u-a", cluster: startAPI(t, a)}
	kh, err := startKube(&ko, &lo)
	if err != nil {
		t.Fatal(err)
	}
	defer kh.close()
	el := newKubeElector(t, rc, &lo, kh, func(c *election.Config) {
		c.Recampaign, c.ResignHoldOff = true, 200*time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	waitUntil(t, "leadership", el.IsLeader)
	first := el.Status().Token
	if err := el.ResignTo(leasekit.WithForce(context.Background()), ""); err != nil { // alone: refused unless forced
		t.Fatal(err)
	}
	waitUntil(t, "leadership again", func() bool { return el.IsLeader() && el.Status().Token > first })
	second := el.Status().Token
	if err := rc.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the loss's Event", func() bool { return len(a.list()) >= 4 })
	want := []string{
		fmt.Sprintf(`Normal BecameLeader: a became leader of lease "ev" with fencing token %d`, first),
		fmt.Sprintf(`Normal StoppedLeading: a stopped leading lease "ev" (fencing token %d): resigned`, first),
		fmt.Sprintf(`Normal BecameLeader: a became leader of lease "ev" with fencing token %d`, second),
		fmt.Sprintf(`Warning StoppedLeading: a stopped leading lease "ev" (fencing token %d): lease lost`, second),
	}
	if got := a.list()[:4]; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestStopReason: the reason and type of StoppedLeading for each end of a term, as the elector
// words the cause (pkg/election/term.go: "%w: %s" of ErrLeadershipLost and the logged reason).
func TestStopReason(t *testing.T) {
	for _, tc := range []struct {
		cause       error
		reason, typ string
	}{
		{election.ErrResigned, "resigned", kube.TypeNormal},
		{fmt.Errorf("%w: %s", election.ErrLeadershipLost, "lease lost"), "lease lost", kube.TypeWarning},
		{fmt.Errorf("%w: %s", election.ErrLeadershipLost, "renew deadline exceeded"), "renew deadline exceeded", kube.TypeWarning},
		{context.Canceled, "stopped", kube.TypeNormal},
	} {
		if r, typ := stopReason(tc.cause); r != tc.reason || typ != tc.typ {
			t.Errorf("stopReason(%v) = %s, %s; want %s, %s", tc.cause, r, typ, tc.reason, tc.typ)
		}
	}
}

// newKubeElector returns an Elector of lo whose callbacks (waiting for their ctx) go through
// kh, as startReplica wires them, with ReleaseOnCancel; adjust changes the config first.
func newKubeElector(t *testing.T, rc redis.UniversalClient, lo *leaseOptions, kh *kubeHooks, adjust func(*election.Config)) *election.Elector {
	t.Helper()
	cfg := election.Config{
		Client: rc, LeaseName: lo.name, KeyPrefix: lo.prefix, Identity: lo.identity,
		LeaseDuration: lo.leaseDuration, RenewDeadline: lo.renewDeadline, RetryPeriod: lo.retryPeriod,
		ReleaseOnCancel: true,
		Callbacks: kh.wrap(election.Callbacks{
			OnStartedLeading: func(ctx context.Context) { <-ctx.Done() },
			OnStoppedLeading: func() {},
		}),
	}
	if adjust != nil {
		adjust(&cfg)
	}
	el, err := election.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return el
}
