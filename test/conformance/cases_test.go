package conformance

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A scenario runs one mixed election of the client under test c with Go replicas and returns
// its world, whose processes have exited; the caller checks the invariants.
type scenario struct {
	name string
	run  func(t *testing.T, c client) *world
}

var scenarios = []scenario{
	{"handovers", handovers},
	{"faults", faults},
	{"restart-lost", func(t *testing.T, c client) *world { return restarts(t, c, false) }},
	{"restart-kept", func(t *testing.T, c client) *world { return restarts(t, c, true) }},
	{"rule6-restart-lost-lease", rule6},
	{"rule7-resume-released-record", rule7},
	{"rule7-resume-below-seen-token", rule7Floor},
}

// runScenario runs s with c and returns the invariants' violations.
func runScenario(t *testing.T, s scenario, c client) []string {
	w := s.run(t, c)
	v := w.check()
	if len(v) > 0 {
		t.Logf("terms of %s with %s:\n%s", s.name, c.name, w.summary())
	}
	return v
}

func suite(t *testing.T, c client) {
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			if v := runScenario(t, s, c); len(v) > 0 {
				t.Errorf("%s broke the protocol's invariants:\n  %s", c.name, strings.Join(v, "\n  "))
			}
		})
	}
}

func TestConformanceGo(t *testing.T) { suite(t, goClient()) }

func TestConformancePython(t *testing.T) { suite(t, pyClient(t, "python", "")) }

// TestBrokenClientsFail shows that the suite catches a client that skips rule 6 (retry before
// the known expiry after a failed attempt) or rule 7 (resume a released record): each is the
// Python client with one rule switched off (broken/), and the scenario built for the rule
// must report the violation it causes.
func TestBrokenClientsFail(t *testing.T) {
	for _, b := range []struct {
		script, scenario, want string
	}{
		{"skip_rule6.py", "rule6-restart-lost-lease", "overlap"},
		{"skip_rule7.py", "rule7-resume-released-record", "token order"},
		{"skip_rule7.py", "rule7-resume-below-seen-token", "token order"},
	} {
		t.Run(b.script+"/"+b.scenario, func(t *testing.T) {
			c := pyClient(t, strings.TrimSuffix(b.script, ".py"), b.script)
			for _, s := range scenarios {
				if s.name != b.scenario {
					continue
				}
				v := runScenario(t, s, c)
				if !strings.Contains(strings.Join(v, "\n"), b.want) {
					t.Fatalf("the broken client %s passed %s (violations: %q); the suite must catch it", c.name, s.name, v)
				}
				t.Logf("%s caught %s as it must: %s", s.name, c.name, strings.Join(v, "; "))
			}
		})
	}
}

// exitAll ends every process: exit, then SIGKILL after timeout.
func (w *world) exitAll() {
	for _, p := range w.procs {
		if p.cmd != nil {
			p.send("exit")
		}
	}
	for _, p := range w.procs {
		if p.cmd == nil {
			continue
		}
		select {
		case <-p.done:
			p.cmd = nil
		case <-time.After(5 * time.Second):
			w.t.Errorf("%s did not exit within 5 s of exit", p.name)
			p.kill()
		}
	}
}

func kindOf(p *proc) string { return p.c.name }

// handovers: the client and two Go replicas hand the lease around: resign to the client,
// resign from it to a Go replica, plain stops, kill -9 of the leader. The figures of the
// closing note come from here: handovers and stopped→started times by direction.
func handovers(t *testing.T, c client) *world {
	w := newWorld(t, fast)
	cl := w.start(c, "client", "client")
	w.waitLeader(5*time.Second, nil) // the client first when it can
	w.start(goClient(), "go1", "go1")
	w.start(goClient(), "go2", "go2")
	byDir := map[string][]time.Duration{}
	lp, prev := w.waitLeader(5*time.Second, nil)
	if prev == nil {
		t.Fatal("nobody leads after 5 s")
	}
	rounds := 24
	if n, err := strconv.Atoi(os.Getenv("ELECTOR_CONFORMANCE_ROUNDS")); err == nil && n > 0 {
		rounds = n // for figures: ELECTOR_CONFORMANCE_ROUNDS=96
	}
	n := 0
	for i := range rounds {
		action, target := "resign", "client"
		if lp == cl {
			target = []string{"go1", "go2"}[i%2]
		}
		switch i % 8 {
		case 6:
			action = "kill"
		case 7:
			action = "stop"
		}
		switch action {
		case "resign":
			lp.send("resign " + target)
		case "stop":
			// A stop ends with a release bounded by the call timeout: a margin of leases,
			// not a fixed bound, for a loaded machine.
			if limit := 5 * w.timing.lease; !lp.stopIdle(limit) {
				t.Errorf("%s did not stop within %v", lp.name, limit)
			}
			lp.send("campaign")
		case "kill":
			lp.restart()
		}
		np, nt := w.waitLeader(3*w.timing.lease, prev)
		if nt == nil {
			t.Fatalf("round %d (%s %s): nobody took over within %v", i, action, lp.name, 3*w.timing.lease)
		}
		if action == "resign" && np.identity != target {
			t.Errorf("round %d: resigned to %s, but %s took over", i, target, np.name)
		}
		if action != "kill" && prev.stop > 0 {
			dir := kindOf(lp) + "→" + kindOf(np)
			byDir[dir] = append(byDir[dir], time.Duration(nt.start-prev.stop))
		}
		n++
		lp, prev = np, nt
	}
	w.exitAll()
	var b strings.Builder
	for dir, ds := range byDir {
		fmt.Fprintf(&b, " %s: %d, median %v, max %v;", dir, len(ds), median(ds).Round(time.Microsecond), maxDur(ds).Round(time.Microsecond))
	}
	t.Logf("FIGURES %s: %d handovers (%d by kill -9); stopped→started by direction:%s", c.name, n, rounds/8, b.String())
	return w
}

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// faults: the client and a Go replica, each behind its fault proxy; the leader (either) is
// partitioned past its lease, slowed past the call timeout, and has its connections cut
// (replies lost) again and again.
func faults(t *testing.T, c client) *world {
	w := newWorld(t, fast)
	w.start(c, "client", "client")
	w.start(goClient(), "go1", "go1")
	for i := range 6 {
		lp, _ := w.waitLeader(3*w.timing.lease, nil)
		if lp == nil {
			t.Fatalf("round %d: nobody leads", i)
		}
		switch i % 3 {
		case 0: // partition: the leader steps down by its deadline, the other takes over at expiry
			lp.proxy.Blackhole(true)
			time.Sleep(w.timing.lease + 300*time.Millisecond)
			lp.proxy.Blackhole(false)
		case 1: // late replies: a round trip above the call timeout
			lp.proxy.SetLatency(w.timing.renew / 2)
			time.Sleep(w.timing.lease + 300*time.Millisecond)
			lp.proxy.SetLatency(0)
		case 2: // lost replies: connections cut under the calls in flight
			for range 8 {
				lp.proxy.Cut()
				time.Sleep(w.timing.retry * 2 / 3)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	w.exitAll()
	return w
}

// restarts: the client and two Go replicas while Redis restarts three times, without its
// data (the lease and token are lost: the next token comes from the server's clock) or with
// it (AOF, fsync always: the lease survives).
func restarts(t *testing.T, c client, keep bool) *world {
	var w *world
	if keep {
		w = newWorld(t, fast, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		w = newWorld(t, fast)
	}
	w.start(c, "client", "client")
	w.start(goClient(), "go1", "go1")
	w.start(goClient(), "go2", "go2")
	for i := range 3 {
		if lp, _ := w.waitLeader(3*w.timing.lease, nil); lp == nil {
			t.Fatalf("round %d: nobody leads", i)
		}
		w.waitFollowers(2)
		w.srv.Restart()
		time.Sleep(w.timing.lease + 500*time.Millisecond)
	}
	if lp, _ := w.waitLeader(3*w.timing.lease, nil); lp == nil {
		t.Fatal("nobody leads after the restarts")
	}
	w.exitAll()
	return w
}

// rule6 (safety): a Go replica leads with a slow timing (RetryPeriod 1 s), the client follows.
// Right after the leader's renewal Redis restarts without data: the lease is gone, but the
// leader works on until its next renew, about a RetryPeriod later. A follower that tries
// again before the expiry it knows of (its subscription broke: a failed attempt) wins a new
// term while the old one is live: an overlap.
func rule6(t *testing.T, c client) *world {
	w := newWorld(t, slow)
	w.start(goClient(), "go1", "go1")
	if lp, _ := w.waitLeader(5*time.Second, nil); lp == nil {
		t.Fatal("go1 does not lead")
	}
	w.start(c, "client", "client")
	w.waitFollowers(1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*w.timing.retry)
	defer cancel()
	if err := waitEvent(ctx, w.rdb, w.lease, "renewed"); err != nil {
		t.Fatalf("no renewal of go1 heard: %v", err)
	}
	w.srv.Restart()
	time.Sleep(w.timing.lease + time.Second)
	w.exitAll()
	return w
}

// waitFollowers waits until n followers (and the harness) listen on the lease's channel, and
// then a RetryPeriod for their first acquire (sent after they subscribed, R11): every follower
// has heard of the holder and listens. The protocol promises no overlap after a data loss only
// then (docs/MODEL.md, S4): a replica that never heard of the holder (a process still
// starting) may win the emptied Redis before the holder's next renew tells it its term ended.
func (w *world) waitFollowers(n int) {
	w.t.Helper()
	ch := "elector:{" + w.lease + "}:events"
	end := time.Now().Add(10 * time.Second)
	for {
		m, err := w.rdb.PubSubNumSub(context.Background(), ch).Result()
		if err == nil && m[ch] >= int64(n+1) {
			break
		}
		if time.Now().After(end) {
			w.t.Fatalf("%d followers not subscribed within 10 s (%v, %v)", n, m, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(w.timing.retry)
}

// waitEvent waits for an event of kind on the lease's channel.
func waitEvent(ctx context.Context, rdb *redis.Client, lease, kind string) error {
	ps := rdb.Subscribe(ctx, "elector:{"+lease+"}:events")
	defer ps.Close()
	for {
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			return err
		}
		if strings.HasPrefix(m.Payload, kind+" ") {
			return nil
		}
	}
}

// rule7 (safety): the client leads (term 1), stops (releases) and wins term 2; Redis
// restarts from a snapshot taken during term 1, and term 1's record, the client's own, is
// back. Its acquire "wins" it with no new token: a client that resumes a record whose
// release it sent starts term 1 again, after term 2: tokens go backwards.
func rule7(t *testing.T, c client) *world {
	w := newWorld(t, fast)
	cl := w.start(c, "client", "client")
	_, t1 := w.waitLeader(5*time.Second, nil)
	if t1 == nil {
		t.Fatal("the client does not lead")
	}
	ctx := context.Background()
	key := "elector:{" + w.lease + "}:lease"
	r1, err := w.rdb.Get(ctx, key).Result()
	if err != nil || !strings.HasPrefix(r1, fmt.Sprintf("v1:%d:", t1.token)) {
		t.Fatalf("lease key holds %q (%v), not term 1's record", r1, err)
	}
	if !cl.stopIdle(5 * w.timing.lease) {
		t.Fatal("the client did not stop")
	}
	cl.send("campaign")
	if _, t2 := w.waitLeader(3*time.Second, t1); t2 == nil {
		t.Fatal("the client did not lead again")
	}
	// Redis restarts from an older snapshot: as loading it would, put term 1's record back
	// with a TTL (raised, as a snapshot taken long before keeps it) and its token.
	w.srv.Restart()
	if _, err := w.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, r1, 30*time.Second)
		p.Set(ctx, "elector:{"+w.lease+"}:token", t1.token, 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * w.timing.lease)
	w.exitAll()
	return w
}

// rule7Floor (safety): the client leads (term 1) and is partitioned: it steps down at its
// deadline without a release, and a Go replica takes over at the expiry (term 2), which the
// client's acquire replies then show it. Redis restarts from a snapshot taken during term 1:
// the client's own record is back, never released but older than a token it has seen. A
// client that resumes it starts term 1 after term 2: tokens go backwards (and two leaders
// work, the Go replica until its next renew).
func rule7Floor(t *testing.T, c client) *world {
	w := newWorld(t, fast)
	cl := w.start(c, "client", "client")
	_, t1 := w.waitLeader(5*time.Second, nil)
	if t1 == nil {
		t.Fatal("the client does not lead")
	}
	w.start(goClient(), "go1", "go1")
	w.waitFollowers(1)
	ctx := context.Background()
	key := "elector:{" + w.lease + "}:lease"
	r1, err := w.rdb.Get(ctx, key).Result()
	if err != nil || !strings.HasPrefix(r1, fmt.Sprintf("v1:%d:", t1.token)) {
		t.Fatalf("lease key holds %q (%v), not term 1's record", r1, err)
	}
	cl.proxy.Blackhole(true)
	_, t2 := w.waitLeader(3*w.timing.lease, t1)
	if t2 == nil || t2.proc != "go1" {
		t.Fatal("go1 did not take over from the partitioned client")
	}
	cl.proxy.Blackhole(false)
	w.waitFollowers(1) // the client follows again: its acquire reply showed term 2
	w.srv.Restart()
	if _, err := w.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, r1, 30*time.Second)
		p.Set(ctx, "elector:{"+w.lease+"}:token", t1.token, 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * w.timing.lease)
	w.exitAll()
	return w
}
