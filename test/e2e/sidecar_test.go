package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/internal/testing/wakeprobe"
)

// sidecar is one `elector sidecar` process with its endpoints.
type sidecar struct {
	*proc
	id     string
	base   string // http://host:port
	status string // status file
}

func startSidecar(t *testing.T, redisAddr, name, id, dir string, env []string, extra ...string) *sidecar {
	t.Helper()
	s := &sidecar{id: id, status: filepath.Join(dir, id+".status")}
	addr := redistest.FreeAddr(t)
	s.base = "http://" + addr
	args := append([]string{"sidecar"}, leaseArgs(redisAddr, name, id)...)
	args = append(args, "--http-addr", addr, "--status-file", s.status)
	s.proc = startElector(t, id, env, append(args, extra...)...)
	return s
}

// leaderJSON is the body of GET /leader.
type leaderJSON struct {
	Name     string `json:"name"`
	Identity string `json:"identity"`
	IsLeader bool   `json:"isLeader"`
	Lease    string `json:"lease"`
	Token    int64  `json:"token"`
}

func (s *sidecar) leader(t *testing.T) (leaderJSON, bool) {
	code, body := httpGet(s.base + "/leader")
	var l leaderJSON
	if code != http.StatusOK {
		return l, false
	}
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Errorf("GET %s/leader: %v: %s", s.base, err, body)
		return l, false
	}
	return l, true
}

func (s *sidecar) ready() bool {
	code, _ := httpGet(s.base + "/readyz")
	return code == http.StatusOK
}

// statusFile returns the state line of the sidecar's status file, "leader\n" or
// "follower\n" ("" when it cannot be read); a leader's file goes on with its deadline.
func (s *sidecar) statusFile() string {
	b, _ := os.ReadFile(s.status)
	return statusState(b)
}

// statusState returns the first line of a status file's content b, with its newline.
func statusState(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return string(b[:i+1])
	}
	return string(b)
}

// converged reports the one sidecar that leads when exactly one is ready, every /leader
// names it, and every status file agrees.
func converged(t *testing.T, cars []*sidecar) (*sidecar, bool) {
	var leader *sidecar
	for _, s := range cars {
		if s.ready() {
			if leader != nil {
				return nil, false
			}
			leader = s
		}
	}
	if leader == nil {
		return nil, false
	}
	for _, s := range cars {
		l, ok := s.leader(t)
		if !ok || l.Name != leader.id || l.IsLeader != (s == leader) || l.Identity != s.id {
			return nil, false
		}
		want := "follower\n"
		if s == leader {
			want = "leader\n"
		}
		if s.statusFile() != want {
			return nil, false
		}
	}
	return leader, true
}

// TestSidecarThreeReplicas checks the endpoints of three sidecars: exactly one is ready, all
// agree on the leader's name, liveness never depends on leadership, and a SIGTERM hands the
// lease over and exits 0 within a second.
func TestSidecarThreeReplicas(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	dir := t.TempDir()
	const name = "sidecars"
	var cars []*sidecar
	for _, id := range []string{"s0", "s1", "s2"} {
		cars = append(cars, startSidecar(t, srv.Addr(), name, id, dir, nil))
	}
	var leader *sidecar
	waitFor(t, 10*time.Second, "one ready sidecar that all others name as leader", func() bool {
		var ok bool
		leader, ok = converged(t, cars)
		return ok
	})
	if h := holderOf(leaseValue(t, client, name)); h != leader.id {
		t.Errorf("lease holder %q, ready sidecar %q", h, leader.id)
	}
	l, _ := leader.leader(t)
	if l.Lease != name || l.Token <= 0 {
		t.Errorf("GET /leader on the leader: %+v", l)
	}
	for _, s := range cars {
		if code, body := httpGet(s.base + "/healthz"); code != http.StatusOK {
			t.Errorf("GET %s/healthz: %d %s", s.id, code, body)
		}
		if s != leader {
			if code, _ := httpGet(s.base + "/readyz"); code != http.StatusServiceUnavailable {
				t.Errorf("GET %s/readyz on a follower: %d, want 503", s.id, code)
			}
			if l, _ := s.leader(t); l.Token != 0 {
				t.Errorf("follower %s reports token %d", s.id, l.Token)
			}
		}
		want := "0"
		if s == leader {
			want = "1"
		}
		code, body := httpGet(s.base + "/metrics")
		if code != http.StatusOK || !strings.Contains(body, `leader_election_master_status{name="`+name+`"} `+want+"\n") {
			t.Errorf("GET %s/metrics: %d, want leader_election_master_status %s in:\n%s", s.id, code, want, body)
		}
		for _, path := range []string{"/leader", "/healthz", "/readyz", "/metrics"} {
			if code, _ := httpDo(http.MethodPost, s.base+path); code != http.StatusMethodNotAllowed {
				t.Errorf("POST %s%s: %d, want 405", s.id, path, code)
			}
		}
		if code, _ := httpDo(http.MethodHead, s.base+"/leader"); code != http.StatusOK {
			t.Errorf("HEAD %s/leader: %d", s.id, code)
		}
	}

	probe := wakeprobe.Start(t)
	sent := time.Now()
	leader.signal(syscall.SIGTERM)
	if code := leader.wait(5 * time.Second); code != 0 {
		t.Errorf("sidecar %s exited with %d after SIGTERM", leader.id, code)
	}
	// It releases and exits, rather than wait for the lease (1s) to run out.
	assertPrompt(t, probe, "the leader's exit after SIGTERM", leader.exited.Sub(sent), 2*time.Second)
	if got := leader.statusFile(); got != "follower\n" {
		t.Errorf("status file of the stopped leader: %q", got)
	}
	var rest []*sidecar
	for _, s := range cars {
		if s != leader {
			rest = append(rest, s)
		}
	}
	var next *sidecar
	waitFor(t, 3*time.Second, "a new leader among the other two (a release hands over at once)", func() bool {
		var ok bool
		next, ok = converged(t, rest)
		return ok
	})
	for _, s := range rest {
		if s != next {
			s.signal(syscall.SIGTERM)
			if code := s.wait(5 * time.Second); code != 0 {
				t.Errorf("sidecar %s exited with %d", s.id, code)
			}
		}
	}
	next.signal(syscall.SIGINT)
	if code := next.wait(5 * time.Second); code != 0 {
		t.Errorf("sidecar %s exited with %d", next.id, code)
	}
	assertLeaseGone(t, client, name)
}

// TestSidecarRedisDown checks that an unreachable Redis is not fatal: the sidecar serves its
// endpoints as a follower, reports the failure once, and leads once Redis is back.
func TestSidecarRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop()
	dir := t.TempDir()
	const name = "down"
	s := startSidecar(t, addr, name, "a", dir, nil)
	time.Sleep(2 * time.Second)
	if !s.running() {
		t.Fatalf("sidecar exited while Redis is down: %s", s.stderr.String())
	}
	if code, _ := httpGet(s.base + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while Redis is down: %d, want 200", code)
	}
	if s.ready() {
		t.Errorf("/readyz is 200 while Redis is down")
	}
	if l, ok := s.leader(t); !ok || l.Name != "" || l.IsLeader {
		t.Errorf("/leader while Redis is down: %+v", l)
	}
	// Once per state change, not once per attempt (about 15 attempts were made).
	if n := strings.Count(s.stderr.String(), "Redis call failed"); n < 1 || n > 2 {
		t.Errorf("%d log lines about the failing Redis in 2s, want 1 (or 2); stderr:\n%s", n, s.stderr.String())
	}
	srv.Restart()
	waitFor(t, 10*time.Second, "the sidecar to lead once Redis is back", s.ready)
	if !strings.Contains(s.stderr.String(), "Redis calls succeed again") {
		t.Errorf("no log line about the recovery; stderr:\n%s", s.stderr.String())
	}
	s.signal(syscall.SIGTERM)
	if code := s.wait(5 * time.Second); code != 0 {
		t.Errorf("exit code %d", code)
	}
	assertLeaseGone(t, srv.Client(t), name)
}

// TestSidecarPassword checks authentication with the password from REDIS_PASSWORD and from
// --redis-password-file, and that the password is never printed, even at -v=9.
func TestSidecarPassword(t *testing.T) {
	const password = "s3cret-Pa55word"
	srv := redistest.Start(t, "--requirepass", password)
	client := srv.Client(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "password")
	if err := os.WriteFile(file, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		env   []string
		flags []string
	}{
		{"env", []string{"REDIS_PASSWORD=" + password}, nil},
		{"file", nil, []string{"--redis-password-file", file}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startSidecar(t, srv.Addr(), "pw-"+tc.name, "a", dir, tc.env, append(tc.flags, "-v=9")...)
			waitFor(t, 10*time.Second, "the sidecar to lead", s.ready)
			stopHidingSecret(t, s, password)
			assertLeaseGone(t, client, "pw-"+tc.name)
		})
	}
	t.Run("wrong", func(t *testing.T) {
		const wrong = "not-the-Pa55word"
		s := startSidecar(t, srv.Addr(), "pw-wrong", "a", dir, []string{"REDIS_PASSWORD=" + wrong}, "-v=9")
		waitFor(t, 10*time.Second, "an error about the refused password", func() bool {
			return strings.Contains(s.stderr.String(), "WRONGPASS")
		})
		s.signal(syscall.SIGTERM)
		if code := s.wait(5 * time.Second); code != 0 {
			t.Errorf("exit code %d", code)
		}
		if strings.Contains(s.stderr.String()+s.stdout.String(), wrong) {
			t.Errorf("the password appears in the output")
		}
	})
}

// TestSidecarSentinelPassword: against Sentinels that require a password of their own, the
// sidecar finds the master with it from REDIS_SENTINEL_PASSWORD, leads, and never shows it,
// even at -v=9.
func TestSidecarSentinelPassword(t *testing.T) {
	const password = "sentinel-S3cret-pw"
	sentinel := redistest.StartSentinel(t, "mymaster", 0, 1, redistest.WithSentinelPassword(password))
	s := startSidecar(t, strings.Join(sentinel.SentinelAddrs(), ","), "sentinel-pw", "a", t.TempDir(),
		[]string{"REDIS_SENTINEL_PASSWORD=" + password}, "--redis-mode=sentinel", "--sentinel-master=mymaster", "-v=9")
	waitFor(t, 10*time.Second, "the sidecar to lead through the Sentinels", s.ready)
	stopHidingSecret(t, s, password)
	assertLeaseGone(t, sentinel.Client(t), "sentinel-pw")
}

// stopHidingSecret checks that secret shows nowhere the running sidecar s shows anything —
// its argv, every endpoint, the status file — then stops it with SIGTERM and checks its
// output too.
func stopHidingSecret(t *testing.T, s *sidecar, secret string) {
	t.Helper()
	seen := map[string]string{}
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.proc.cmd.Process.Pid)); err == nil {
		seen["argv"] = string(cmdline)
	} else {
		t.Errorf("read argv: %v", err)
	}
	for _, path := range []string{"/leader", "/healthz", "/readyz", "/metrics"} {
		_, seen[path] = httpGet(s.base + path)
	}
	if status, err := os.ReadFile(s.status); err == nil {
		seen["status file"] = string(status)
	}
	for where, text := range seen {
		if strings.Contains(text, secret) {
			t.Errorf("the password appears in %s", where)
		}
	}
	if !strings.Contains(seen["/metrics"], "leader_election_master_status") {
		t.Errorf("/metrics was not read: %.200q", seen["/metrics"])
	}
	s.signal(syscall.SIGTERM)
	if code := s.wait(5 * time.Second); code != 0 {
		t.Errorf("exit code %d", code)
	}
	if out := s.stderr.String() + s.stdout.String(); strings.Contains(out, secret) {
		t.Errorf("the password appears in the output")
	} else if !strings.Contains(out, "Became leader") {
		t.Errorf("the output was not read (no \"Became leader\"): %.300q", out)
	}
}

// TestMinimalACL runs two sidecars and status with exactly the Redis users that README.md
// documents as sufficient (read from README.md), and checks that nothing was refused.
func TestMinimalACL(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	const name = "acl"
	createREADMEUsers(t, ctx, srv, name)
	dir := t.TempDir()
	env := []string{"REDIS_PASSWORD=pw-elector"}
	a := startSidecar(t, srv.Addr(), name, "a", dir, env, "--redis-username", "elector")
	waitFor(t, 10*time.Second, "a to lead", a.ready)
	b := startSidecar(t, srv.Addr(), name, "b", dir, env, "--redis-username", "elector")
	waitFor(t, 10*time.Second, "b to follow a", func() bool { l, ok := b.leader(t); return ok && l.Name == "a" })

	code, out, stderr := runElector(t, 10*time.Second, []string{"REDIS_PASSWORD=pw-viewer"},
		"status", "--redis-addr", srv.Addr(), "--redis-username", "elector-observer", "--lease-name", name, "-o", "json")
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Holder != "a" {
		t.Errorf("status as elector-observer: exit code %d, output %q, stderr %s", code, out, stderr)
	}

	a.signal(syscall.SIGTERM)
	if code := a.wait(5 * time.Second); code != 0 {
		t.Errorf("a exited with %d", code)
	}
	waitFor(t, 3*time.Second, "b to take over on the release", b.ready)
	b.signal(syscall.SIGTERM)
	if code := b.wait(5 * time.Second); code != 0 {
		t.Errorf("b exited with %d", code)
	}
	assertLeaseGone(t, client, name)
	log, err := client.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 0 {
		t.Errorf("Redis refused commands of the documented users: %v", log)
	}
	for _, p := range []*sidecar{a, b} {
		if strings.Contains(p.stderr.String(), "NOPERM") {
			t.Errorf("%s was refused a command:\n%s", p.id, p.stderr.String())
		}
	}
}

// TestSidecarSlowClients opens many connections that send half a request line and then
// stall, and a client that sends endless headers: the sidecar keeps answering others at once,
// drops the stalled ones after its read-header timeout (5s) and refuses headers over 16 KiB.
func TestSidecarSlowClients(t *testing.T) {
	srv := redistest.Start(t)
	s := startSidecar(t, srv.Addr(), "slow", "a", t.TempDir(), nil)
	waitFor(t, 10*time.Second, "the sidecar to lead", s.ready)
	host := strings.TrimPrefix(s.base, "http://")
	const stalled = 200
	conns := make([]net.Conn, 0, stalled)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < stalled; i++ {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if _, err := c.Write([]byte("GET /leader HTTP/1.1\r\nHost: x\r\n")); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	probe := wakeprobe.Start(t)
	start := time.Now()
	if code, _ := httpGet(s.base + "/healthz"); code != 200 {
		t.Fatalf("/healthz = %d with %d stalled clients", code, stalled)
	}
	assertPrompt(t, probe, fmt.Sprintf("/healthz with %d stalled clients", stalled), time.Since(start), 4*time.Second)
	// The stalled connections are closed by the server after the read-header timeout.
	buf := make([]byte, 1)
	_ = conns[0].SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := conns[0].Read(buf); err == nil {
		t.Fatalf("a stalled connection got an answer instead of being closed")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("a stalled connection was still open after 20s")
	}
	// Headers over the limit are refused.
	big := "GET /leader HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n"
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte(big))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	reply := make([]byte, 64)
	n, _ := c.Read(reply)
	if !strings.Contains(string(reply[:n]), "431") {
		t.Fatalf("oversized headers answered %q, want 431", reply[:n])
	}
	s.signal(syscall.SIGTERM)
	if code := s.wait(5 * time.Second); code != 0 {
		t.Errorf("exit code %d", code)
	}
}
