package kube

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestInCluster: the API server's URL comes from $KUBERNETES_SERVICE_HOST and _PORT (an
// IPv6 host in brackets), the token and CA from the standard paths; outside a pod it is an
// error naming the variables.
func TestInCluster(t *testing.T) {
	env := map[string]string{EnvServiceHost: "fd00::1", EnvServicePort: "443"}
	cfg, err := InCluster(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != "https://[fd00::1]:443" || cfg.TokenFile != DefaultTokenFile || cfg.CAFile != DefaultCAFile {
		t.Errorf("InCluster = %+v", cfg)
	}
	delete(env, EnvServicePort)
	if _, err := InCluster(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), EnvServicePort) {
		t.Errorf("without $%s: err %v, want one naming it", EnvServicePort, err)
	}
}

// TestUnreadableTokenAndCA: a CA file without a certificate fails New; a token file that
// vanished fails the call (no request without credentials) as unauthorized, with a fix
// naming the file (it was reported as unreachable, with a NetworkPolicy hint: an
// *fs.PathError is a net.Error), and the next call after the kubelet wrote it again
// succeeds with the new token.
func TestUnreadableTokenAndCA(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Server: "https://k:443", CAFile: bad}); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("New with a CA file without a certificate: %v", err)
	}
	f := &fakeAPI{}
	c, tok := newTestClient(t, f)
	if err := os.Remove(tok); err != nil {
		t.Fatal(err)
	}
	err := c.SetPodLabel(context.Background(), "ns", "p", "k", nil)
	if err == nil || !strings.Contains(err.Error(), "read the service-account token") || Reason(err) != ReasonUnauthorized {
		t.Errorf("without a token file: err %v (reason %s), want a read error, unauthorized", err, Reason(err))
	}
	fs := NewFailures("ns", c.server.String(), nil)
	fs.Failed(OpLabel, err)
	if cur := fs.Current(); !strings.Contains(cur.Fix, "no readable service-account token at "+tok) {
		t.Errorf("fix %q, want it to name the token file", cur.Fix)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests sent without a token", n)
	}
	if err := os.WriteFile(tok, []byte("tok-3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPodLabel(context.Background(), "ns", "p", "k", nil); err != nil {
		t.Fatal(err)
	}
	if rs := f.requests(); len(rs) != 1 || rs[0].auth != "Bearer tok-3" {
		t.Errorf("after the token came back: %+v, want one request with Bearer tok-3", rs)
	}
}

// TestRecorderRetries: an Event refused with 503 is retried (3 attempts in all, 1x and 2x
// the backoff apart) and written when the API server recovers; a 403 is not retried; every
// failed attempt is counted.
func TestRecorderRetries(t *testing.T) {
	var failFirst atomic.Int32
	var code atomic.Int32
	f := &fakeAPI{status: func(request) int {
		if failFirst.Add(-1) >= 0 {
			return int(code.Load())
		}
		return http.StatusCreated
	}}
	c, _ := newTestClient(t, f)
	var counted sync.Map
	fs := NewFailures("ns", c.server.String(), func(op, reason string) {
		n, _ := counted.LoadOrStore(op+"/"+reason, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	})
	r := NewRecorder(c, ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p"}, "elector", time.Second)
	r.retryAfter = time.Millisecond
	r.ReportTo(fs)
	count := func(key string) int32 {
		n, ok := counted.Load(key)
		if !ok {
			return 0
		}
		return n.(*atomic.Int32).Load()
	}
	ctx := context.Background()

	code.Store(http.StatusServiceUnavailable)
	failFirst.Store(2)
	r.send(ctx, pendingEvent{typ: TypeNormal, reason: "BecameLeader", message: "a", at: time.Now()})
	if rs := f.requests(); len(rs) != 3 || rs[2].method != http.MethodPost {
		t.Fatalf("%d requests after two 503s, want 3 POSTs", len(rs))
	}
	if n := count(OpEvent + "/" + ReasonServer); n != 2 {
		t.Errorf("%d server failures counted, want 2", n)
	}
	if fs.Current() != nil {
		t.Errorf("Current() = %+v after the Event was written, want nil", fs.Current())
	}

	code.Store(http.StatusForbidden)
	failFirst.Store(10)
	r.send(ctx, pendingEvent{typ: TypeNormal, reason: "StoppedLeading", message: "b", at: time.Now()})
	if n := len(f.requests()); n != 4 {
		t.Errorf("%d requests after a 403, want one more (no retry)", n)
	}
	if cur := fs.Current(); cur == nil || cur.Reason != ReasonForbidden || !strings.Contains(cur.Fix, "grant the ServiceAccount create on events") {
		t.Errorf("Current() = %+v, want the forbidden create on events", cur)
	}

	code.Store(http.StatusServiceUnavailable)
	failFirst.Store(10)
	r.send(ctx, pendingEvent{typ: TypeNormal, reason: "StoppedLeading", message: "c", at: time.Now()})
	if n := len(f.requests()); n != 4+eventAttempts {
		t.Errorf("%d requests after a 503 that lasts, want %d more (then dropped)", n-4, eventAttempts)
	}
}

// TestRecorderRecreatesExpiredEvent: the count patch of a repeat answered 404 (the Event
// expired, its TTL is an hour by default) creates the Event anew and counts no failure.
func TestRecorderRecreatesExpiredEvent(t *testing.T) {
	f := &fakeAPI{status: func(r request) int {
		if r.method == http.MethodPatch {
			return http.StatusNotFound
		}
		return http.StatusCreated
	}}
	c, _ := newTestClient(t, f)
	var failed atomic.Int32
	fs := NewFailures("ns", c.server.String(), func(string, string) { failed.Add(1) })
	r := NewRecorder(c, ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p"}, "elector", time.Second)
	r.ReportTo(fs)
	now := time.Now()
	r.send(context.Background(), pendingEvent{typ: TypeWarning, reason: "StoppedLeading", message: "m", at: now})
	r.send(context.Background(), pendingEvent{typ: TypeWarning, reason: "StoppedLeading", message: "m", at: now.Add(time.Second)})
	rs := f.requests()
	var got []string
	for _, x := range rs {
		got = append(got, x.method)
	}
	if strings.Join(got, " ") != "POST PATCH POST" {
		t.Errorf("requests %v, want POST PATCH POST (create, count patch refused, create anew)", got)
	}
	if len(rs) == 3 && (rs[2].body["count"] != float64(1) || rs[2].body["type"] != TypeWarning) {
		t.Errorf("the new Event %v, want count 1, Warning", rs[2].body)
	}
	if failed.Load() != 0 || fs.Current() != nil {
		t.Errorf("%d failures counted, Current %+v: an expired Event is no failure", failed.Load(), fs.Current())
	}
}

// TestLabelerRemovesAgainAfterUnansweredAddition: an addition that got no answer within the
// call timeout may still be applied by the API server later, so the removal that follows is
// sent once more a call timeout after it was answered.
func TestLabelerRemovesAgainAfterUnansweredAddition(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var values []any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Metadata struct {
				Labels map[string]any `json:"labels"`
			} `json:"metadata"`
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		v := body.Metadata.Labels["k"]
		mu.Lock()
		values = append(values, v)
		mu.Unlock()
		if v == "true" {
			select { // no answer: the client's call timeout ends the request
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()
	defer close(release)
	c, err := New(Config{Server: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	const callTimeout = 100 * time.Millisecond
	l := NewLabeler(c, "ns", "p", "k", callTimeout)
	l.backoffMin = time.Millisecond
	var kinds sync.Map
	fs := NewFailures("ns", srv.URL, func(op, reason string) { kinds.Store(op+"/"+reason, true) })
	l.ReportTo(fs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)
	if err := l.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	l.Set(true)
	waitFor(t, "an addition timed out", func() bool { _, ok := kinds.Load(OpLabel + "/" + ReasonTimeout); return ok })
	rm := l.Set(false)
	if err := l.Wait(ctx, rm); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the removal sent again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(values) >= 2 && values[len(values)-1] == nil && values[len(values)-2] == nil
	})
	mu.Lock()
	t.Logf("patches: %v", values)
	mu.Unlock()
}

// TestMirrorConflictAndRecovery: a Lease changed between the read and the write (409) is
// reported as a conflict of the lease op and cleared by the next write that succeeds; a
// replica that never led does not write.
func TestMirrorConflictAndRecovery(t *testing.T) {
	var conflict atomic.Bool
	conflict.Store(true)
	f := &fakeAPI{status: func(r request) int {
		if r.method == http.MethodPatch && conflict.Load() {
			return http.StatusConflict
		}
		return http.StatusOK
	}}
	c, _ := newTestClient(t, f)
	fs := NewFailures("ns", c.server.String(), nil)
	m := NewMirror(c, "ns", "l", "p", 15*time.Second, time.Second)
	m.ReportTo(fs)
	m.write(context.Background(), true)
	cur := fs.Current()
	if cur == nil || cur.Op != OpLease || cur.Reason != ReasonConflict || !strings.Contains(cur.Error, "mirror Lease ns/l (informational only)") {
		t.Fatalf("Current() = %+v, want the lease's conflict", cur)
	}
	conflict.Store(false)
	m.write(context.Background(), true)
	if fs.Current() != nil {
		t.Errorf("Current() = %+v after a successful write, want nil", fs.Current())
	}

	// A replica that never led writes nothing when told it does not lead.
	n := len(f.requests())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	follower := NewMirror(c, "ns", "l", "q", 15*time.Second, time.Second)
	go func() { follower.Run(ctx); close(done) }()
	follower.Set(false)
	// Once Run took the state, the iteration that handles it ends before Run can see the
	// cancel: after <-done, whatever it would send has been sent.
	for len(follower.state) > 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if got := len(f.requests()); got != n {
		t.Errorf("a follower's Set(false) sent %d requests, want none", got-n)
	}
}
