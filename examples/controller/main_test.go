package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/internal/outbuf"
	"github.com/elector/elector/internal/redistest"
)

// Two replicas of the controller: one reconciles, both agree on the leader; when it stops,
// the other takes over.
func TestControllerExample(t *testing.T) {
	srv := redistest.Start(t)
	type replica struct {
		out    *outbuf.Buffer
		addr   string
		cancel context.CancelFunc
		done   chan error
	}
	start := func(id string) *replica {
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{out: &outbuf.Buffer{}, cancel: cancel, done: make(chan error, 1)}
		ready := make(chan string, 1)
		go func() {
			r.done <- run(ctx, []string{"--redis-addr", srv.Addr(), "--identity", id, "--http-addr", "127.0.0.1:0", "--reconcile-every", "20ms"}, r.out, ready)
		}()
		r.addr = <-ready
		t.Cleanup(func() { cancel(); <-r.done })
		return r
	}
	a := start("pod-a")
	waitFor(t, func() bool { return strings.Contains(a.out.String(), "reconcile #3") })
	b := start("pod-b")
	leader := func(r *replica) map[string]any {
		resp, err := http.Get("http://" + r.addr + "/leader")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	waitFor(t, func() bool { return leader(b)["name"] == "pod-a" })
	if m := leader(a); m["isLeader"] != true || m["name"] != "pod-a" {
		t.Fatalf("pod-a /leader = %v", m)
	}
	if strings.Contains(b.out.String(), "reconcile") {
		t.Fatalf("the follower reconciled:\n%s", b.out)
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		resp, err := http.Get("http://" + b.addr + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	a.cancel()
	if err := <-a.done; err != nil {
		t.Fatalf("pod-a: %v", err)
	}
	a.done <- nil
	waitFor(t, func() bool { return strings.Contains(b.out.String(), "reconcile #2") })
	if m := leader(b); m["isLeader"] != true {
		t.Fatalf("pod-b did not take over: %v", m)
	}
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
