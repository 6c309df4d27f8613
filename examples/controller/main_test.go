package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/outbuf"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
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

// A planned switchover, as `elector resign` makes it: the leader steps down and the other
// replica takes over, and the resigned replica keeps running as a follower (run does not
// return: a resign must not look like a crash to Kubernetes) and can lead again later.
func TestControllerExampleResign(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	l, err := leasekit.New(client, "example-controller", lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	outs := map[string]*outbuf.Buffer{}
	dones := map[string]chan error{}
	for _, id := range []string{"pod-a", "pod-b"} {
		ctx, cancel := context.WithCancel(context.Background())
		out, done, ready := &outbuf.Buffer{}, make(chan error, 1), make(chan string, 1)
		go func() {
			done <- run(ctx, []string{"--redis-addr", srv.Addr(), "--identity", id, "--http-addr", "127.0.0.1:0", "--reconcile-every", "20ms"}, out, ready)
		}()
		<-ready
		outs[id], dones[id] = out, done
		t.Cleanup(func() { cancel(); <-done })
	}
	holder := func() string {
		st, err := l.Get(context.Background())
		if err != nil || !st.Held {
			return ""
		}
		return st.Record.Identity
	}
	waitFor(t, func() bool { return holder() != "" })
	first := holder()
	other := map[string]string{"pod-a": "pod-b", "pod-b": "pod-a"}[first]
	for round, from := range []string{first, other} {
		to := other
		if round == 1 {
			to = first
		}
		st, err := l.Get(context.Background())
		if err != nil || st.Record.Identity != from {
			t.Fatalf("round %d: holder %+v (err %v), want %s", round, st.Record, err, from)
		}
		if _, err := l.RequestResign(context.Background(), leasekit.ResignRequest{HoldOff: time.Second, Timeout: 10 * time.Second, Term: st.Record}); err != nil {
			t.Fatalf("round %d: request resign: %v", round, err)
		}
		waitFor(t, func() bool { return holder() == to })
		select {
		case err := <-dones[from]:
			dones[from] <- err // for the cleanup
			t.Fatalf("round %d: %s returned after resigning (%v): a planned switchover must not end the process", round, from, err)
		default:
		}
	}
	if !strings.Contains(outs[first].String(), "reconcile") || !strings.Contains(outs[other].String(), "reconcile") {
		t.Fatalf("both replicas should have reconciled once each:\n%s\n%s", outs[first], outs[other])
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
