package kube

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

// TestReasonOfEachFailure: every answer and transport failure of the API server gets the
// reason of elector_kubernetes_errors_total, and the fix names what to change.
func TestReasonOfEachFailure(t *testing.T) {
	for _, tc := range []struct {
		code        int
		reason, fix string
	}{
		{http.StatusForbidden, ReasonForbidden, "grant the ServiceAccount patch on pods in namespace ns: see charts/elector values rbac.create"},
		{http.StatusUnauthorized, ReasonUnauthorized, "token"},
		{http.StatusNotFound, ReasonNotFound, "$POD_NAME"},
		{http.StatusConflict, ReasonConflict, "another writer"},
		{http.StatusTooManyRequests, ReasonServer, "overloaded"},
		{http.StatusInternalServerError, ReasonServer, "overloaded"},
		{http.StatusGatewayTimeout, ReasonTimeout, "did not answer"},
		{http.StatusUnprocessableEntity, ReasonOther, ""},
	} {
		f := &fakeAPI{status: func(request) int { return tc.code }}
		c, _ := newTestClient(t, f)
		err := c.SetPodLabel(context.Background(), "ns", "p", "k", nil)
		fs := NewFailures("ns", c.server.String(), nil)
		fs.Failed(OpLabel, err)
		got := fs.Current()
		if got.Reason != tc.reason || !strings.Contains(got.Fix, tc.fix) || (tc.fix == "" && got.Fix != "") {
			t.Errorf("HTTP %d: got reason %q fix %q; want %q and a fix with %q", tc.code, got.Reason, got.Fix, tc.reason, tc.fix)
		}
	}

	// Nothing listens: unreachable.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	c, err := New(Config{Server: closed.URL})
	if err != nil {
		t.Fatal(err)
	}
	if r := Reason(c.SetPodLabel(context.Background(), "ns", "p", "k", nil)); r != ReasonUnreachable {
		t.Errorf("closed port: reason %q, want %q", r, ReasonUnreachable)
	}

	// No answer within the call's deadline: timeout.
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	if c, err = New(Config{Server: srv.URL}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if r := Reason(c.SetPodLabel(ctx, "ns", "p", "k", nil)); r != ReasonTimeout {
		t.Errorf("no answer: reason %q, want %q", r, ReasonTimeout)
	}
}

// logLines is a logger that keeps the lines it is given.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, args)
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

// TestLabelerFailureLoggedOnceCountedAndCleared: a Labeler refused by RBAC retries; the
// failure is logged once at error level however many retries fail, each failed call is
// counted, Current shows it with the permission to grant; once RBAC allows the patch, the
// recovery is logged once and Current is nil.
func TestLabelerFailureLoggedOnceCountedAndCleared(t *testing.T) {
	var forbidden atomic.Bool
	forbidden.Store(true)
	f := &fakeAPI{status: func(request) int {
		if forbidden.Load() {
			return http.StatusForbidden
		}
		return http.StatusOK
	}}
	c, _ := newTestClient(t, f)
	var counted atomic.Int64
	fs := NewFailures("ns", c.server.String(), func(op, reason string) {
		if op == OpLabel && reason == ReasonForbidden {
			counted.Add(1)
		}
	})
	logs := &logLines{}
	fs.logger = funcr.New(logs.add, funcr.Options{Verbosity: 0})
	l := NewLabeler(c, "ns", "p", "elector.io/leader", time.Second)
	l.backoffMin, l.maxOff = time.Millisecond, 5*time.Millisecond
	l.ReportTo(fs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)
	l.Set(true)
	waitFor(t, "5 failed patches counted", func() bool { return counted.Load() >= 5 })
	cur := fs.Current()
	if cur == nil || cur.Op != OpLabel || cur.Reason != ReasonForbidden || cur.Count < 5 ||
		!strings.Contains(cur.Fix, "grant the ServiceAccount patch on pods in namespace ns") {
		t.Fatalf("Current() = %+v: want the label's forbidden failure with its fix and count", cur)
	}
	if n := logs.count("Kubernetes API call failed"); n != 1 {
		t.Errorf("%d error lines after %d failed calls, want 1: %q", n, counted.Load(), logs.lines)
	}
	forbidden.Store(false)
	waitFor(t, "the failure cleared", func() bool { return fs.Current() == nil })
	if n := logs.count("Kubernetes API calls succeed again"); n != 1 {
		t.Errorf("%d recovery lines, want 1", n)
	}
	t.Logf("%d failed calls, %d log lines", counted.Load(), len(logs.lines))
}

// TestFailuresCurrentIsTheLatest: with two ops failing, Current is the one that failed last;
// a new reason of an op starts a new failure (since, count) and is logged again.
func TestFailuresCurrentIsTheLatest(t *testing.T) {
	fs := NewFailures("ns", "https://api", nil)
	logs := &logLines{}
	fs.logger = funcr.New(logs.add, funcr.Options{})
	now := time.Unix(1000, 0)
	fs.now = func() time.Time { now = now.Add(time.Second); return now }
	fs.Failed(OpEvent, &APIError{Verb: "create", Resource: "events", Code: 403})
	fs.Failed(OpLease, &APIError{Verb: "get", Resource: "leases", Code: 404})
	if cur := fs.Current(); cur.Op != OpLease || cur.Reason != ReasonNotFound || !strings.Contains(cur.Fix, "--mirror-lease") {
		t.Errorf("Current() = %+v, want the lease's not_found", cur)
	}
	fs.Failed(OpEvent, &APIError{Verb: "create", Resource: "events", Code: 403})
	if cur := fs.Current(); cur.Op != OpEvent || cur.Count != 2 || !cur.Since.Equal(time.Unix(1001, 0)) {
		t.Errorf("Current() = %+v, want the event's failure, twice since 1001", cur)
	}
	fs.Failed(OpEvent, &APIError{Verb: "create", Resource: "events", Code: 500})
	if cur := fs.Current(); cur.Reason != ReasonServer || cur.Count != 1 {
		t.Errorf("Current() = %+v, want a new server failure", cur)
	}
	if n := logs.count("Kubernetes API call failed"); n != 3 {
		t.Errorf("%d error lines, want 3 (event forbidden, lease not_found, event server)", n)
	}
	fs.Succeeded(OpEvent)
	if cur := fs.Current(); cur == nil || cur.Op != OpLease {
		t.Errorf("Current() = %+v after the events recovered, want the lease's failure", cur)
	}
}

// waitFor polls cond every 5 ms for at most a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("waited a minute for %s", what)
}
