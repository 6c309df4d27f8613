package main

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/elector/elector/internal/kube"
	"github.com/elector/elector/internal/redistest"
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
	srv := httptest.NewTLSServer(a)
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
		leaseDuration: 2 * time.Second, renewDeadline: 1500 * time.Millisecond, retryPeriod: 200 * time.Millisecond}
	l, err := lease.New(rc, lo.name, lease.Options{Prefix: lo.prefix})
	if err != nil {
		t.Fatal(err)
	}
	held := func() bool {
		st, err := l.Get(context.Background())
		return err == nil && st.Held && st.Record.Identity == "a"
	}
	for _, hang := range []bool{false, true} {
		// The removal is answered after half the bounded wait: within it.
		a := &labelAPI{delay: labelRemoveTimeout(&lo) / 2, held: held}
		if hang {
			a.hang = make(chan struct{})
		}
		ko := kubeOptions{leaderLabel: "elector.io/leader", namespace: "ns", pod: "a", cluster: startLabelAPI(t, a)}
		kh, err := startKube(&ko, &lo)
		if err != nil {
			t.Fatal(err)
		}
		el, err := election.New(election.Config{
			Client: rc, LeaseName: lo.name, KeyPrefix: lo.prefix, Identity: lo.identity,
			LeaseDuration: lo.leaseDuration, RenewDeadline: lo.renewDeadline, RetryPeriod: lo.retryPeriod,
			ReleaseOnCancel: true,
			Callbacks: kh.wrap(election.Callbacks{
				OnStartedLeading: func(ctx context.Context) { <-ctx.Done() },
				OnStoppedLeading: func() {},
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
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
