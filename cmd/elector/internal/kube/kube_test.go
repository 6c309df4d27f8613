package kube

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// request is one request the fake API server received.
type request struct {
	method, path, contentType, auth string
	body                            map[string]any
}

// fakeAPI is an httptest API server that records requests and answers with status(r).
type fakeAPI struct {
	mu     sync.Mutex
	reqs   []request
	status func(r request) int
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	rq := request{method: r.Method, path: r.URL.Path, contentType: r.Header.Get("Content-Type"), auth: r.Header.Get("Authorization")}
	_ = json.Unmarshal(raw, &rq.body)
	f.mu.Lock()
	f.reqs = append(f.reqs, rq)
	status := f.status
	f.mu.Unlock()
	code := http.StatusOK
	if status != nil {
		code = status(rq)
	}
	w.WriteHeader(code)
	if code == http.StatusForbidden {
		_, _ = io.WriteString(w, `{"kind":"Status","reason":"Forbidden","message":"pods \"p\" is forbidden"}`)
		return
	}
	_, _ = io.WriteString(w, `{}`)
}

func (f *fakeAPI) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}

// newTestClient starts a TLS fake API server and a Client trusting it, with a token file.
func newTestClient(t *testing.T, f *fakeAPI) (*Client, string) {
	t.Helper()
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pemOf(srv), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Server: srv.URL, TokenFile: tok, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	return c, tok
}

// TestSetPodLabelShape: a JSON merge patch of metadata.labels, null to remove, with the
// token read again for each request (rotation).
func TestSetPodLabelShape(t *testing.T) {
	f := &fakeAPI{}
	c, tok := newTestClient(t, f)
	v := "true"
	if err := c.SetPodLabel(context.Background(), "ns", "p-1", "elector.io/leader", &v); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tok, []byte("tok-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPodLabel(context.Background(), "ns", "p-1", "elector.io/leader", nil); err != nil {
		t.Fatal(err)
	}
	rs := f.requests()
	if len(rs) != 2 {
		t.Fatalf("%d requests, want 2", len(rs))
	}
	for i, want := range []struct {
		auth  string
		value any
	}{{"Bearer tok-1", "true"}, {"Bearer tok-2", nil}} {
		r := rs[i]
		if r.method != http.MethodPatch || r.path != "/api/v1/namespaces/ns/pods/p-1" || r.contentType != "application/merge-patch+json" || r.auth != want.auth {
			t.Errorf("request %d: %s %s %s %q", i, r.method, r.path, r.contentType, r.auth)
		}
		labels := r.body["metadata"].(map[string]any)["labels"].(map[string]any)
		if got, ok := labels["elector.io/leader"]; !ok || got != want.value {
			t.Errorf("request %d: labels %v, want elector.io/leader: %v", i, labels, want.value)
		}
	}
}

// TestForbiddenNamesThePermission: a 403 says which verb on which resource is missing.
func TestForbiddenNamesThePermission(t *testing.T) {
	f := &fakeAPI{status: func(request) int { return http.StatusForbidden }}
	c, _ := newTestClient(t, f)
	err := c.SetPodLabel(context.Background(), "ns", "p", "k", nil)
	if !IsStatus(err, 403) || Retryable(err) || !strings.Contains(err.Error(), `"patch" on "pods"`) {
		t.Errorf("err %v: want a non-retryable 403 naming patch on pods", err)
	}
}

// TestLabelerOrderAndStartupRemoval: the first patch removes a stale label; a removal
// wanted while an addition is failing is applied, and Wait returns once it was.
func TestLabelerOrderAndStartupRemoval(t *testing.T) {
	var fail sync.Mutex
	failing := true
	f := &fakeAPI{status: func(r request) int {
		fail.Lock()
		defer fail.Unlock()
		labels := r.body["metadata"].(map[string]any)["labels"].(map[string]any)
		if labels["k"] == "true" && failing {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}}
	c, _ := newTestClient(t, f)
	l := NewLabeler(c, "ns", "p", "k", time.Second)
	l.backoffMin = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)
	if err := l.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	add := l.Set(true)
	// The addition keeps failing: Wait for it times out.
	wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if err := l.Wait(wctx, add); err == nil {
		t.Fatal("Wait returned nil for an addition the server refuses")
	}
	wcancel()
	rm := l.Set(false)
	wctx, wcancel = context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := l.Wait(wctx, rm); err != nil {
		t.Fatalf("the removal was not applied: %v", err)
	}
	rs := f.requests()
	first := rs[0].body["metadata"].(map[string]any)["labels"].(map[string]any)
	if v, ok := first["k"]; !ok || v != nil {
		t.Errorf("first patch %v, want the removal of a stale label", first)
	}
	last := rs[len(rs)-1].body["metadata"].(map[string]any)["labels"].(map[string]any)
	if last["k"] != nil {
		t.Errorf("last patch %v, want the removal", last)
	}
	if len(rs) < 3 {
		t.Errorf("%d requests: want the startup removal, failed additions, the removal", len(rs))
	}
}

// TestRecorderDedupAndSpam: a repeat within the window is a PATCH of count; distinct Events
// beyond the token bucket are dropped.
func TestRecorderDedupAndSpam(t *testing.T) {
	f := &fakeAPI{}
	c, _ := newTestClient(t, f)
	ref := ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p", UID: "u-1"}
	r := NewRecorder(c, ref, "elector", time.Second)
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	r.refill = now
	ctx := context.Background()
	send := func(msg string) {
		r.send(ctx, pendingEvent{typ: TypeNormal, reason: "BecameLeader", message: msg, at: r.now()})
	}
	send("a")
	now = now.Add(time.Second)
	send("a")
	rs := f.requests()
	if len(rs) != 2 || rs[0].method != http.MethodPost || rs[0].path != "/api/v1/namespaces/ns/events" {
		t.Fatalf("requests %+v: want a POST then a PATCH", rs)
	}
	b := rs[0].body
	obj := b["involvedObject"].(map[string]any)
	if b["reason"] != "BecameLeader" || b["type"] != "Normal" || obj["uid"] != "u-1" || obj["kind"] != "Pod" || b["count"] != float64(1) ||
		b["source"].(map[string]any)["component"] != "elector" || b["reportingComponent"] != "elector" {
		t.Errorf("event body %v", b)
	}
	name := b["metadata"].(map[string]any)["name"].(string)
	if rs[1].method != http.MethodPatch || rs[1].path != "/api/v1/namespaces/ns/events/"+name || rs[1].body["count"] != float64(2) {
		t.Errorf("repeat: %+v, want a PATCH of count 2 on %s", rs[1], name)
	}
	for i := range 40 {
		send(strings.Repeat("x", i+1))
	}
	if n := len(f.requests()); n != spamBurst {
		t.Errorf("%d requests after a burst of 42 Events, want the bucket's %d", n, spamBurst)
	}
	now = now.Add(spamRefill)
	send("after refill")
	if n := len(f.requests()); n != spamBurst+1 {
		t.Errorf("%d requests after a refill, want %d", n, spamBurst+1)
	}
}

// pemOf returns the PEM of srv's certificate.
func pemOf(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// TestMirrorLeaseShape: a leader reads the Lease and patches it with the resourceVersion it
// read, itself as the holder and one more transition; a step-down clears the holder.
func TestMirrorLeaseShape(t *testing.T) {
	var mu sync.Mutex
	holder := "old-pod"
	f := &fakeAPI{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			mu.Lock()
			h := holder
			mu.Unlock()
			_, _ = io.WriteString(w, `{"metadata":{"resourceVersion":"7"},"spec":{"holderIdentity":"`+h+`","leaseTransitions":3,"acquireTime":"2026-12-02T09:00:00.000000Z"}}`)
			return
		}
		f.ServeHTTP(w, r)
		mu.Lock()
		holder = "p"
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pemOf(srv), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Server: srv.URL, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMirror(c, "ns", "l", "p", 15*time.Second, time.Second)
	ctx := context.Background()
	m.write(ctx, true)
	m.write(ctx, false)
	rs := f.requests()
	if len(rs) != 2 {
		t.Fatalf("%d patches, want 2", len(rs))
	}
	for i, want := range []struct {
		holder      string
		transitions float64
	}{{"p", 4}, {"", 3}} { // the fake always answers 3 transitions
		r := rs[i]
		spec := r.body["spec"].(map[string]any)
		rv := r.body["metadata"].(map[string]any)["resourceVersion"]
		if r.method != http.MethodPatch || r.path != "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l" || rv != "7" ||
			spec["holderIdentity"] != want.holder || spec["leaseTransitions"] != want.transitions || spec["leaseDurationSeconds"] != float64(15) {
			t.Errorf("patch %d: %s %s %v, want holder %q, %v transitions, resourceVersion 7", i, r.method, r.path, r.body, want.holder, want.transitions)
		}
	}
}
