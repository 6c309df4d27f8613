package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// resignJSON is what `elector resign -o json` prints: the new holder, as status does.
type resignJSON struct {
	Holder string `json:"holder"`
	Token  int64  `json:"token"`
}

func resignCLI(t *testing.T, addr, name string, timeout time.Duration, extra ...string) (code int, out resignJSON, stderr string) {
	t.Helper()
	args := append([]string{"resign", "--redis-addr", addr, "--lease-name", name, "-o", "json"}, extra...)
	code, stdout, stderr := runElector(t, timeout+10*time.Second, nil, args...)
	if code == 0 {
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatalf("elector resign -o json printed %q: %v", stdout, err)
		}
	}
	return code, out, stderr
}

// waitLeader waits until the sidecars agree on one leader and returns it with its token.
func waitLeader(t *testing.T, cars []*sidecar) (*sidecar, int64) {
	t.Helper()
	var leader *sidecar
	waitFor(t, 20*time.Second, "one leader", func() bool {
		var ok bool
		leader, ok = converged(t, cars)
		return ok
	})
	l, _ := leader.leader(t)
	return leader, l.Token
}

// askedHolder finds the holder elector resign asked, in its log.
var askedHolder = regexp.MustCompile(`"Asked the holder to resign"[^\n]* holder="([^"]+)"`)

// TestResignSidecars moves the leadership of three sidecars with `elector resign` and POST
// /resign: the old leader never takes it back, --to picks the successor, --to an absent
// identity keeps everyone out for the hold-off and exits 1 naming it, no holder exits 3.
func TestResignSidecars(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	const name = "switchover"
	// Bound on all addresses, so that a request from a non-loopback address can be refused.
	var cars []*sidecar
	for _, id := range []string{"s0", "s1", "s2"} {
		s := &sidecar{id: id, status: filepath.Join(dir, id+".status")}
		_, port, _ := net.SplitHostPort(redistest.FreeAddr(t))
		s.base = "http://127.0.0.1:" + port
		args := append([]string{"sidecar"}, leaseArgs(srv.Addr(), name, id)...)
		args = append(args, "--http-addr", "0.0.0.0:"+port, "--status-file", s.status)
		s.proc = startElector(t, id, nil, args...)
		cars = append(cars, s)
	}

	// Anyone but the holder: a new term, another holder, a larger token.
	for range 3 {
		old, tok := waitLeader(t, cars)
		code, out, stderr := resignCLI(t, srv.Addr(), name, 30*time.Second, "--hold-off", "3s")
		// The holder asked is the one the CLI read: on a loaded machine the leader found above
		// may have missed its renew deadline and been replaced before the request.
		asked := old.id
		if m := askedHolder.FindStringSubmatch(stderr); m != nil && m[1] != old.id {
			t.Logf("leadership moved from %s to %s before the request", old.id, m[1])
			asked = m[1]
		}
		if code != 0 || out.Holder == asked || out.Holder == "" || out.Token <= tok {
			t.Fatalf("elector resign: exit %d, %+v (asked %s; found %s with token %d); stderr:\n%s", code, out, asked, old.id, tok, stderr)
		}
	}
	// --to each follower.
	for _, target := range []string{"s0", "s1", "s2"} {
		old, tok := waitLeader(t, cars)
		if old.id == target {
			continue
		}
		code, out, stderr := resignCLI(t, srv.Addr(), name, 30*time.Second, "--to", target)
		if code != 0 || out.Holder != target || out.Token <= tok {
			t.Fatalf("elector resign --to %s: exit %d, %+v; stderr:\n%s", target, code, out, stderr)
		}
	}
	// --to the holder itself: refused, nothing changes.
	old, tok := waitLeader(t, cars)
	code, _, stderr := resignCLI(t, srv.Addr(), name, 30*time.Second, "--to", old.id)
	if code != 1 || !strings.Contains(stderr, "holds lease") {
		t.Fatalf("elector resign --to the holder: exit %d, stderr %q; want 1 and the reason", code, stderr)
	}
	if l, _ := old.leader(t); !l.IsLeader || l.Token != tok {
		t.Fatalf("the holder changed after a refused request: %+v", l)
	}
	// --to an identity that is no live candidate (issue 46): refused before anything is
	// written, exit 5, naming the live candidates, with a did-you-mean for a near miss.
	waitFor(t, 20*time.Second, "the three candidates", func() bool {
		return candidateCount(old) == 3
	})
	for _, to := range []string{"absent", "s9"} {
		code, _, stderr = resignCLI(t, srv.Addr(), name, 30*time.Second, "--to", to)
		hint := !strings.Contains(stderr, "did you mean")
		if to == "s9" {
			hint = !hint
		}
		if code != 5 || !strings.Contains(stderr, `not a live candidate: "`+to+`"`) || !strings.Contains(stderr, "the live candidates but the holder") || !hint {
			t.Fatalf("elector resign --to %s: exit %d, stderr %q; want 5 naming the live candidates (did-you-mean only for s9)", to, code, stderr)
		}
		t.Logf("elector resign --to %s: exit %d, %s", to, code, strings.TrimSpace(stderr))
	}
	if l, _ := old.leader(t); !l.IsLeader || l.Token != tok {
		t.Fatalf("the holder changed after a refused request: %+v", l)
	}
	if n := srv.Client(t).Exists(t.Context(), "elector:{"+name+"}:resign").Val(); n != 0 {
		t.Fatalf("a refused request was written")
	}
	// --to an absent identity with --force: exit 1 at --timeout naming what did not happen;
	// nobody leads during the hold-off; then someone does.
	const hold = 3 * time.Second
	before := time.Now()
	code, _, stderr = resignCLI(t, srv.Addr(), name, time.Second, "--to", "absent", "--force", "--hold-off", hold.String(), "--timeout", "1s")
	if code != 1 || !strings.Contains(stderr, `--to "absent" did not take over`) {
		t.Fatalf("elector resign --to absent: exit %d, stderr %q; want 1 naming the absent target", code, stderr)
	}
	// elector status shows the reservation (and exits 3: nobody holds the lease).
	if d := time.Since(before); d > hold-time.Second {
		t.Logf("elector resign took %v of the %v hold-off: the status check of the reservation is skipped", d, hold)
	} else {
		code, stdout, stderr := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", name, "-o", "json")
		var st struct {
			Holder   string `json:"holder"`
			Reserved *struct {
				Resigned, Target string
				TTLMs            int64
			} `json:"reserved"`
		}
		if err := json.Unmarshal([]byte(stdout), &st); err != nil || code != 3 {
			t.Fatalf("elector status during the hold-off: exit %d, %q, stderr %q (%v)", code, stdout, stderr, err)
		}
		if r := st.Reserved; r == nil || r.Target != "absent" || r.Resigned == "" || r.TTLMs <= 0 || r.TTLMs > hold.Milliseconds() {
			t.Fatalf("elector status during the hold-off: %s; want reserved for \"absent\" for at most %v", stdout, hold)
		}
	}
	for time.Since(before) < hold-200*time.Millisecond {
		for _, s := range cars {
			if s.ready() {
				t.Fatalf("%s leads %v after resign --to absent, within the hold-off %v", s.id, time.Since(before), hold)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitLeader(t, cars)

	// No holder: exit 3, nothing written.
	if code, _, stderr := resignCLI(t, srv.Addr(), "nobody-holds-this", 5*time.Second); code != 3 || !strings.Contains(stderr, "no holder") {
		t.Fatalf("elector resign of a free lease: exit %d, stderr %q; want 3", code, stderr)
	}
	if n := srv.Client(t).Exists(t.Context(), "elector:{nobody-holds-this}:resign").Val(); n != 0 {
		t.Fatal("a request was written for a lease without holder")
	}

	// POST /resign: GET is 405, a follower answers 409, another host 403, loopback 200.
	leader, tok := waitLeader(t, cars)
	if code, _ := httpDo(http.MethodGet, leader.base+"/resign"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /resign: %d, want 405", code)
	}
	for _, s := range cars {
		if s != leader {
			if code, body := httpDo(http.MethodPost, s.base+"/resign"); code != http.StatusConflict {
				t.Errorf("POST /resign on follower %s: %d %q, want 409", s.id, code, body)
			}
		}
	}
	if ip := nonLoopbackIP(); ip != "" {
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(leader.base, "http://"))
		if code, body := httpDo(http.MethodPost, "http://"+net.JoinHostPort(ip, port)+"/resign"); code != http.StatusForbidden {
			t.Errorf("POST /resign from %s: %d %q, want 403 (loopback only)", ip, code, body)
		}
	} else {
		t.Log("no non-loopback address: the 403 for other peers is covered by TestResignHandlerPolicy only")
	}
	if l, _ := leader.leader(t); !l.IsLeader || l.Token != tok {
		t.Fatalf("a refused POST /resign changed the holder: %+v", l)
	}
	if code, body := httpDo(http.MethodPost, leader.base+"/resign"); code != http.StatusOK || !strings.Contains(body, `"resigned":true`) {
		t.Fatalf("POST /resign on the leader: %d %q", code, body)
	}
	next, ntok := waitLeader(t, cars)
	if next == leader || ntok <= tok {
		t.Fatalf("after POST /resign %s leads with token %d (was %s, %d)", next.id, ntok, leader.id, tok)
	}
}

// nonLoopbackIP returns an address of this host that is not loopback, "" if none.
func nonLoopbackIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// TestResignHolderGone: a holder that never acts on the request (it crashed: its record just
// expires) reserves nothing, so a follower other than --to takes over at the expiry, and
// `elector resign` says so instead of blaming a lapsed reservation.
func TestResignHolderGone(t *testing.T) {
	srv := redistest.Start(t)
	const name = "resign-gone"
	if err := srv.Client(t).Set(context.Background(), leaseKey(name), "v1:42:0123456789abcdef:gone", 2*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	car := startSidecar(t, srv.Addr(), name, "s1", t.TempDir(), nil)
	waitFollowers(t, srv.Client(t), name, 1) // else resign refuses --to: nobody could follow
	code, _, stderr := resignCLI(t, srv.Addr(), name, 20*time.Second, "--to", "absent", "--hold-off", "30s", "--timeout", "20s")
	if code != 1 || !strings.Contains(stderr, `"s1" took over`) || !strings.Contains(stderr, "no release of the holder's term was heard") {
		t.Fatalf("elector resign --to absent of a holder that is gone: exit %d, stderr %q; want 1 saying s1 took over at the expiry", code, stderr)
	}
	waitFor(t, 10*time.Second, "s1 to lead", func() bool { l, _ := car.leader(t); return l.IsLeader })
}

// TestResignBadFlags: exit 2 and one line naming the flag, before Redis is contacted.
func TestResignBadFlags(t *testing.T) {
	redis := []string{"resign", "--redis-addr", redistest.FreeAddr(t), "--lease-name", "bad"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hold-off", "soon"}, "--hold-off"},
		{[]string{"--hold-off", "0s"}, "--hold-off"},
		{[]string{"--timeout", "-1s"}, "--timeout"},
		{[]string{"--to", "a\x01b"}, "--to"},
		{[]string{"-o", "xml"}, "--output"},
		{[]string{"--tp", "x"}, "did you mean --to?"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		code, _, stderr := runElector(t, 10*time.Second, nil, append(redis, tc.args...)...)
		if line := oneLine(t, stderr); code != 2 || !strings.Contains(line, tc.want) {
			t.Errorf("elector %v: exit %d, stderr %q; want 2 naming %s", tc.args, code, line, tc.want)
		}
	}
	if code, _, stderr := runElector(t, 10*time.Second, nil, "resign", "--redis-addr", redistest.FreeAddr(t)); code != 2 || !strings.Contains(stderr, "--lease-name") {
		t.Errorf("no --lease-name: exit %d, %q", code, stderr)
	}
}

// workerFixture starts Redis and names the worker log and lock file of one test.
func workerFixture(t *testing.T) (*redistest.Server, workerLog, string) {
	dir := t.TempDir()
	return redistest.Start(t), workerLog(filepath.Join(dir, "worker.log")), filepath.Join(dir, "worker.lock")
}

// TestResignRun: `elector resign` of three `elector run` replicas stops the leader's command
// with its stop signal, another replica's command starts with a larger token, never two at
// once (the workers flock a file), and the old replica does not rerun it during the hold-off.
// It also measures the handover: from the start of `elector resign` to the new command's
// start, and the gap between the old command's exit and the new one's start.
func TestResignRun(t *testing.T) {
	srv, log, lock := workerFixture(t)
	const name = "resign-run"
	for _, id := range []string{"r0", "r1", "r2"} {
		// Within the lease's margin (1s - 600ms - drift), so that a term lost on a loaded
		// machine cannot leave its worker running into the next one.
		runReplica(t, srv.Addr(), name, id, log, lock, []string{"--kill-grace", "300ms"})
	}
	first, idx := log.waitEvent(t, 0, 20*time.Second, "a first worker", isStart)
	var toStart, gaps []time.Duration
	cur := first
	for i := range 6 {
		var extra []string
		if i%2 == 1 { // every other one names the successor
			for _, id := range []string{"r0", "r1", "r2"} {
				if id != cur.ID {
					extra = []string{"--to", id}
					break
				}
			}
		}
		waitFollowers(t, srv.Client(t), name, 2)
		begin := time.Now()
		code, out, stderr := resignCLI(t, srv.Addr(), name, 30*time.Second, append(extra, "--hold-off", "5s")...)
		if code != 0 {
			t.Fatalf("elector resign %v: exit %d; stderr:\n%s\nworker log:\n%s", extra, code, stderr, log.dump(t))
		}
		ended := oldWorkerEnd(t, log, idx, cur)
		next, j := log.waitEvent(t, idx+1, 20*time.Second, "the next worker", isStart)
		if next.ID == cur.ID || next.Token <= cur.Token || next.ID != out.Holder || (extra != nil && next.ID != extra[1]) {
			t.Fatalf("after resign %v of %s (token %d): worker of %s token %d, resign printed %+v\nworker log:\n%s", extra, cur.ID, cur.Token, next.ID, next.Token, out, log.dump(t))
		}
		toStart = append(toStart, next.time().Sub(begin))
		gaps = append(gaps, next.time().Sub(ended))
		cur, idx = next, j
	}
	log.checkWorkers(t)
	// Each stopped worker got the stop signal before it exited: stopped the usual way.
	signalled := map[int]bool{}
	for _, ev := range log.events(t) {
		switch {
		case ev.Ev == "signal" && ev.Sig == "terminated":
			signalled[ev.PID] = true
		case ev.Ev == "exit" && !signalled[ev.PID]:
			t.Errorf("worker %s (pid %d) exited without SIGTERM first\nworker log:\n%s", ev.ID, ev.PID, log.dump(t))
		}
	}
	t.Logf("elector resign → new command started: %s; old command exited → new started: %s", figures(toStart), figures(gaps))
}

// oldWorkerEnd waits until the worker cur has ended and returns when: the time of its own
// exit record, or, when a loaded machine did not run its SIGTERM handler within the kill
// grace and it was SIGKILLed (no record), the time its process was seen gone.
func oldWorkerEnd(t *testing.T, log workerLog, from int, cur workerEvent) time.Time {
	t.Helper()
	waitFor(t, 20*time.Second, "the old worker's end", func() bool { return processGone(cur.PID) })
	gone := time.Now()
	for _, ev := range log.events(t)[from:] {
		if ev.Ev == "exit" && ev.PID == cur.PID {
			return ev.time()
		}
	}
	return gone
}

// figures formats the median and maximum of ds.
func figures(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("median %v, max %v of %d", s[len(s)/2].Round(100*time.Microsecond), s[len(s)-1].Round(100*time.Microsecond), len(s))
}

// TestResignACL: README.md's elector user may resign (the sidecars run as it too, with no
// ACL refusal logged); the observer user may not, and the error names the refused command.
func TestResignACL(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	const name = "acl-resign"
	createREADMEUsers(t, ctx, srv, name)
	dir := t.TempDir()
	writer := []string{"REDIS_PASSWORD=pw-elector"}
	var cars []*sidecar
	for _, id := range []string{"a0", "a1"} {
		cars = append(cars, startSidecar(t, srv.Addr(), name, id, dir, writer, "--redis-username", "elector"))
	}
	old, tok := waitLeader(t, cars)
	code, stdout, stderr := runElector(t, 40*time.Second, []string{"REDIS_PASSWORD=pw-viewer"},
		"resign", "--redis-addr", srv.Addr(), "--redis-username", "elector-observer", "--lease-name", name, "--timeout", "5s")
	if line := oneLine(t, stderr); code != 1 || !strings.Contains(strings.ToLower(line), "evalsha") {
		t.Errorf("resign as the observer: exit %d, stdout %q, stderr %q; want 1 naming the refused EVALSHA", code, stdout, line)
	}
	srv.Client(t).Do(ctx, "ACL", "LOG", "RESET")
	code, stdout, stderr = runElector(t, 40*time.Second, writer,
		"resign", "--redis-addr", srv.Addr(), "--redis-username", "elector", "--lease-name", name, "-o", "json")
	var out resignJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &out) != nil || out.Holder == old.id || out.Token <= tok {
		t.Fatalf("resign as README's elector user: exit %d, %q; stderr:\n%s", code, stdout, stderr)
	}
	if entries, err := srv.Client(t).Do(ctx, "ACL", "LOG").Slice(); err != nil || len(entries) != 0 {
		t.Errorf("Redis refused commands of README's elector user: %v %v", entries, err)
	}
}

// TestResignRunEndpoint: POST /resign on `elector run --http-addr` stops the leader's command
// with its stop signal, another replica's command starts, and the old replica does not rerun
// its command during the hold-off (--to an absent identity: nobody runs it until then).
func TestResignRunEndpoint(t *testing.T) {
	srv, log, lock := workerFixture(t)
	const name = "resign-run-http"
	addrs := map[string]string{}
	for _, id := range []string{"h0", "h1"} {
		addrs[id] = redistest.FreeAddr(t)
		runReplica(t, srv.Addr(), name, id, log, lock, []string{"--kill-grace", "300ms", "--http-addr", addrs[id]})
	}
	first, idx := log.waitEvent(t, 0, 20*time.Second, "a first worker", isStart)
	other := "h0"
	if first.ID == "h0" {
		other = "h1"
	}
	// The follower's process may not serve yet on a loaded machine.
	waitFor(t, 20*time.Second, other+"'s HTTP server", func() bool {
		code, _ := httpGet("http://" + addrs[other] + "/healthz")
		return code == http.StatusOK
	})
	if code, body := httpDo(http.MethodPost, "http://"+addrs[other]+"/resign"); code != http.StatusConflict {
		t.Fatalf("POST /resign on the follower: %d %q, want 409", code, body)
	}
	// 409 "no other live candidate": the follower's registry entry lapsed on a loaded machine
	// (its heartbeat is every lease duration/3); the refusal is right, so try again.
	waitFor(t, 20*time.Second, "POST /resign on the leader answered 200", func() bool {
		code, body := httpDo(http.MethodPost, "http://"+addrs[first.ID]+"/resign")
		if code == http.StatusConflict && strings.Contains(body, "no other live candidate") {
			t.Logf("POST /resign on the leader: %d %q; trying again", code, body)
			time.Sleep(400 * time.Millisecond)
			return false
		}
		if code != http.StatusOK {
			t.Fatalf("POST /resign on the leader: %d %q, want 200", code, body)
		}
		return true
	})
	next, idx := log.waitEvent(t, idx+1, 20*time.Second, "the next worker", isStart)
	if next.ID != other || next.Token <= first.Token {
		t.Fatalf("after POST /resign on %s: worker of %s, token %d after %d\nworker log:\n%s", first.ID, next.ID, next.Token, first.Token, log.dump(t))
	}
	// ResignTo an identity that is no live candidate over HTTP is refused (issue 46): 409
	// naming the live candidates; nothing moves. With force=1 it goes ahead: nobody runs the
	// command for the hold-off (the lease duration, 1s, for POST /resign), then someone does.
	if code, body := httpDo(http.MethodPost, "http://"+addrs[other]+"/resign?to=absent"); code != http.StatusConflict ||
		!strings.Contains(body, `not a live candidate: "absent"`) || !strings.Contains(body, `the live candidates but the holder "`+other+`": `+first.ID) {
		t.Fatalf("POST /resign?to=absent: %d %q; want 409 naming the live candidates", code, body)
	}
	before := time.Now()
	if code, body := httpDo(http.MethodPost, "http://"+addrs[other]+"/resign?to=absent&force=1"); code != http.StatusOK {
		t.Fatalf("POST /resign?to=absent&force=1: %d %q", code, body)
	}
	later, _ := log.waitEvent(t, idx+1, 20*time.Second, "a worker after the hold-off", isStart)
	if gap := later.time().Sub(before); gap < time.Second-5*time.Millisecond {
		t.Fatalf("%s's command started %v after the resign, within the 1s hold-off\nworker log:\n%s", later.ID, gap, log.dump(t))
	}
	log.checkWorkers(t)
}

// TestResignSubscriptionDrop: the connection of `elector resign` breaks while it waits (a
// holder that does not take part: a record set by hand) and a new term begins while it cannot
// reconnect (its events are lost: a raw SET announces nothing); it subscribes again and reads
// the lease, so that the new term still ends it with exit 0.
func TestResignSubscriptionDrop(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr())
	client := srv.Client(t)
	const name = "resign-drop"
	holdLease(t, client, name, "v1:100:aaaa:old-holder")
	p := startElector(t, "elector resign", nil, "resign", "--redis-addr", proxy.Addr(), "--lease-name", name, "--timeout", "20s", "-o", "json")
	waitFor(t, 10*time.Second, "the request", func() bool {
		return client.Exists(t.Context(), "elector:{"+name+"}:resign").Val() == 1
	})
	// Refused while the new term begins: the CLI cannot subscribe and read before it.
	proxy.Refuse(true)
	proxy.Cut() // the subscription and the pooled connections break
	if err := client.Set(t.Context(), leaseKey(name), "v1:200:bbbb:new-holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	proxy.Refuse(false)
	if code := p.wait(30 * time.Second); code != 0 || !strings.Contains(p.stdout.String(), `"holder":"new-holder"`) {
		t.Fatalf("elector resign after a dropped subscription: exit %d, stdout %q, stderr:\n%s", code, p.stdout.String(), p.stderr.String())
	}
}

// TestResignFailedReadAfterDrop: after the subscription of `elector resign` broke, its first
// read of the lease fails (the key holds a hash: WRONGTYPE, counted by the server, so the test
// waits for that failure), and then a new term begins without an event (a raw SET). The CLI
// retries the read rather than taking the failure for "no holder" and waiting for an event
// that never comes: it reports the new holder well within its --timeout.
func TestResignFailedReadAfterDrop(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr())
	client := srv.Client(t)
	const name = "resign-failed-read"
	holdLease(t, client, name, "v1:100:aaaa:old-holder")
	p := startElector(t, "elector resign", nil, "resign", "--redis-addr", proxy.Addr(), "--lease-name", name, "--timeout", "15s", "-o", "json")
	waitFor(t, 10*time.Second, "the request", func() bool {
		return client.Exists(t.Context(), "elector:{"+name+"}:resign").Val() == 1
	})
	failReadsAfterCut(t, client, proxy, name)
	if err := client.Set(t.Context(), leaseKey(name), "v1:200:bbbb:new-holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(30 * time.Second); code != 0 || !strings.Contains(p.stdout.String(), `"holder":"new-holder"`) {
		t.Fatalf("elector resign after a failed read: exit %d, stdout %q, stderr:\n%s", code, p.stdout.String(), p.stderr.String())
	}
}

// failReadsAfterCut makes every read of the lease fail (its key holds a hash), cuts the
// connections of the proxy and waits until the server refused a read with WRONGTYPE: the
// read that follows the resubscription.
func failReadsAfterCut(t *testing.T, client *redis.Client, proxy *faultproxy.Proxy, name string) {
	t.Helper()
	before := errorCount(t, client, "WRONGTYPE")
	if err := client.Del(t.Context(), leaseKey(name)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.HSet(t.Context(), leaseKey(name), "not", "a record").Err(); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	waitFor(t, 10*time.Second, "a read of the lease refused with WRONGTYPE", func() bool {
		return errorCount(t, client, "WRONGTYPE") > before
	})
}

// errorCount is how many error replies with the prefix the server sent (INFO errorstats).
func errorCount(t *testing.T, client *redis.Client, prefix string) int64 {
	t.Helper()
	info, err := client.Info(t.Context(), "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "errorstat_"+prefix+":count="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// waitFollowers waits until at least n followers can take the lease over: listed in its
// candidate registry under another identity than the holder's (what resign checks before a
// request) and subscribed to its events channel (so that they wake on the release). A replica
// that has just started, or a loaded machine's late heartbeat, would otherwise get a resign
// refused.
func waitFollowers(t *testing.T, client *redis.Client, name string, n int64) {
	t.Helper()
	registry, err := leasekit.New(client, name, lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	channel := "elector:{" + name + "}:events"
	waitFor(t, 20*time.Second, fmt.Sprintf("%d follower(s) in the candidate registry and subscribed to %s", n, channel), func() bool {
		st, err := registry.Get(t.Context())
		if err != nil {
			return false
		}
		c, err := registry.ReadCandidates(t.Context())
		if err != nil {
			return false
		}
		var others int64
		for _, x := range c.List {
			if x.Identity != st.Record.Identity {
				others++
			}
		}
		if others < n {
			return false
		}
		m, err := client.PubSubNumSub(t.Context(), channel).Result()
		return err == nil && m[channel] >= n
	})
}

// TestResignToAbsentTarget (issue 28 item 5, issue 46): with a single replica, `elector resign
// --to nobody` is refused (exit 5, nothing written: the replica keeps leading) instead of
// leaving the lease without a leader for the whole hold-off; POST /resign?to=nobody answers 409
// naming the live candidates (none). A replica resigning alone is refused too, and with --force
// warned about (the outage lasts the hold-off). Once a second replica follows, --to it is allowed and it takes over; resign
// prints the new term with its transitions, as elector status does.
func TestResignToAbsentTarget(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	dir := t.TempDir()
	const name = "resign-absent"
	s1 := startSidecar(t, srv.Addr(), name, "s1", dir, nil)
	_, tok := waitLeader(t, []*sidecar{s1})
	waitFor(t, 20*time.Second, "s1 in the candidate registry", func() bool {
		return candidateCount(s1) == 1
	})
	code, _, stderr := resignCLI(t, srv.Addr(), name, 10*time.Second, "--to", "nobody")
	if code != 5 || !strings.Contains(stderr, `not a live candidate: "nobody"; the live candidates but the holder "s1": none`) {
		t.Fatalf("elector resign --to nobody with one replica: exit %d, stderr %q; want 5, refused", code, stderr)
	}
	if n := admin.Exists(t.Context(), "elector:{"+name+"}:resign").Val(); n != 0 {
		t.Fatalf("a refused request was written")
	}
	req, err := http.NewRequest(http.MethodPost, s1.base+"/resign?to=nobody", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Elector-Resign", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, `the live candidates but the holder "s1": none`) {
		t.Fatalf("POST /resign?to=nobody with one replica: %d %q; want 409 naming the known candidates", resp.StatusCode, body)
	}
	if l, _ := s1.leader(t); !l.IsLeader || l.Token != tok {
		t.Fatalf("s1 after refused requests: %+v, want still leading with token %d", l, tok)
	}
	// Alone, without --to: refused (issue 46: nobody could take over; no hold-off outage), exit
	// 5, s1 keeps its term.
	code, _, stderr = resignCLI(t, srv.Addr(), name, 10*time.Second)
	if code != 5 || !strings.Contains(stderr, `no other live candidate than the holder "s1"`) {
		t.Fatalf("elector resign alone: exit %d, stderr %q; want 5, refused", code, stderr)
	}
	if l, _ := s1.leader(t); !l.IsLeader || l.Token != tok {
		t.Fatalf("s1 after a refused resign: %+v, want still leading with token %d", l, tok)
	}
	// With --force: allowed, with a warning; s1 takes the lease again after the hold-off.
	code, out, stderr := resignCLI(t, srv.Addr(), name, 20*time.Second, "--force", "--hold-off", "500ms", "--timeout", "20s")
	if code != 0 || out.Holder != "s1" || out.Token <= tok || !strings.Contains(stderr, "resigning anyway (--force)") {
		t.Fatalf("elector resign --force alone: exit %d, %+v, stderr %q; want 0, s1 again, and a warning", code, out, stderr)
	}
	// A second replica: --to it is allowed, and it takes over.
	startSidecar(t, srv.Addr(), name, "s2", dir, nil)
	waitFollowers(t, admin, name, 1)
	code, stdout, stderr := runElector(t, 30*time.Second, nil, "resign", "--redis-addr", srv.Addr(), "--lease-name", name, "--to", "s2", "-o", "json")
	var next struct {
		Holder      string `json:"holder"`
		Transitions *int64 `json:"transitions"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &next) != nil || next.Holder != "s2" || next.Transitions == nil || *next.Transitions != 3 {
		t.Fatalf("elector resign --to s2: exit %d, %q; want s2 and transitions 3; stderr:\n%s", code, stdout, stderr)
	}
	// Others follow, and they advertise themselves (issue 46): --to nobody is refused, naming
	// the live candidate s1 (before the registry, their identities were not recorded: resign
	// could only note that it could not check, and nobody led for the hold-off).
	waitFollowers(t, admin, name, 1) // s1, once it follows again
	waitFor(t, 20*time.Second, "s1 back in the candidate registry", func() bool { return candidateCount(s1) == 2 })
	code, _, stderr = resignCLI(t, srv.Addr(), name, 10*time.Second, "--to", "nobody", "--hold-off", "500ms", "--timeout", "10s")
	if code != 5 || !strings.Contains(stderr, `not a live candidate: "nobody"; the live candidates but the holder "s2": s1`) {
		t.Fatalf("elector resign --to nobody with a follower: exit %d, stderr %q; want 5 naming s1", code, stderr)
	}
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// candidateCount is /leader's candidateCount: the live candidates as the sidecar's last
// heartbeat in the lease's candidate registry found them (-1 when unreadable).
func candidateCount(s *sidecar) int {
	code, body := httpGet(s.base + "/leader")
	var l struct {
		CandidateCount *int     `json:"candidateCount"`
		Candidates     []string `json:"candidates"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &l) != nil || l.CandidateCount == nil || *l.CandidateCount != len(l.Candidates) {
		return -1
	}
	return *l.CandidateCount
}
