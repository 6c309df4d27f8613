package conformance

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/internal/testing/testbin"
)

// timing is one election's LeaseDuration, RenewDeadline and RetryPeriod.
type timing struct{ lease, renew, retry time.Duration }

// fast is the timing of most cases; slow leaves the rule-6 case a wide window.
var (
	fast = timing{1000 * time.Millisecond, 600 * time.Millisecond, 150 * time.Millisecond}
	slow = timing{3000 * time.Millisecond, 2000 * time.Millisecond, 1000 * time.Millisecond}
)

// A client is how to start one kind of client of the contract.
type client struct {
	name string
	argv []string
	env  []string
}

var (
	repoRoot = func() string { d, _ := filepath.Abs("../.."); return d }()
	goBin    string // the goclient binary TestMain built
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "elector-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goBin = filepath.Join(dir, "goclient")
	if err := testbin.Build(goBin, "./goclient", false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rc := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(rc)
}

func goClient() client { return client{name: "go", argv: []string{goBin}} }

// python finds an interpreter that imports redis (redis-py): ELECTOR_PYTHON, python3 on PATH,
// /usr/bin/python3 (Debian's python3-redis installs there). Without one the test skips, or
// fails under CI or ELECTOR_REQUIRE_REDIS.
func python(t *testing.T) string {
	t.Helper()
	cands := []string{os.Getenv("ELECTOR_PYTHON"), "python3", "/usr/bin/python3"}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if exec.Command(c, "-c", "import redis").Run() == nil {
			return c
		}
	}
	msg := "no python3 with redis-py (Debian: apt-get install python3-redis python3-pytest; or set ELECTOR_PYTHON)"
	for _, env := range []string{"CI", "ELECTOR_REQUIRE_REDIS"} {
		if os.Getenv(env) != "" {
			t.Fatalf("%s, and %s is set", msg, env)
		}
	}
	t.Skip(msg)
	return ""
}

func pyClient(t *testing.T, name, script string) client {
	py := python(t)
	env := []string{"PYTHONPATH=" + filepath.Join(repoRoot, "clients", "python"), "PYTHONDONTWRITEBYTECODE=1"}
	if script == "" {
		return client{name: name, argv: []string{py, "-m", "elector.contract"}, env: env}
	}
	return client{name: name, argv: []string{py, filepath.Join(repoRoot, "test", "conformance", "broken", script)}, env: env}
}

// term is one term as its client reported it: started and stopped stamps (Unix ns).
type term struct {
	proc        string
	token       int64
	start, stop int64 // stop 0: open
	how         string
}

// world is one election: a Redis, the processes and what they reported.
type world struct {
	t      *testing.T
	srv    *redistest.Server
	rdb    *redis.Client
	lease  string
	timing timing

	mu         sync.Mutex
	terms      []*term
	violations []string
	releases   []release
	procs      []*proc
}

type release struct {
	token int64
	at    int64 // when the harness heard it, Unix ns
}

// proc is one client process, behind its own fault proxy.
type proc struct {
	w        *world
	name     string
	identity string
	c        client
	proxy    *faultproxy.Proxy
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	done     chan struct{}
	idle     int // idle lines seen
	resigns  []string
}

func newWorld(t *testing.T, tm timing, serverArgs ...string) *world {
	t.Helper()
	srv := redistest.Start(t, serverArgs...)
	w := &world{t: t, srv: srv, lease: "conf", timing: tm}
	w.rdb = redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 50, MinRetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond})
	t.Cleanup(func() { _ = w.rdb.Close() })
	w.watchReleases()
	t.Cleanup(func() {
		for _, p := range w.procs {
			p.kill()
		}
	})
	return w
}

// watchReleases records the released events the harness hears, with their time, to check
// that each term's client stopped calling itself leader before (R9).
func (w *world) watchReleases() {
	ctx, cancel := context.WithCancel(context.Background())
	w.t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			ps := w.rdb.Subscribe(ctx, "elector:{"+w.lease+"}:events")
			for msg := range ps.Channel(redis.WithChannelHealthCheckInterval(time.Second)) {
				kind, rest, _ := strings.Cut(msg.Payload, " ")
				if kind != "released" {
					continue
				}
				_, rec, _ := strings.Cut(rest, " ")
				parts := strings.SplitN(rec, ":", 4)
				if len(parts) < 2 {
					continue
				}
				tok, _ := strconv.ParseInt(parts[1], 10, 64)
				w.mu.Lock()
				w.releases = append(w.releases, release{tok, time.Now().UnixNano()})
				w.mu.Unlock()
			}
			_ = ps.Close()
			time.Sleep(20 * time.Millisecond)
		}
	}()
}

// start starts a client process called name with identity and sends it campaign.
func (w *world) start(c client, name, identity string) *proc {
	w.t.Helper()
	p := &proc{w: w, name: name, identity: identity, c: c}
	p.proxy = faultproxy.Start(w.t, w.srv.Addr())
	w.mu.Lock()
	w.procs = append(w.procs, p)
	w.mu.Unlock()
	p.launch()
	p.send("campaign")
	return p
}

func (p *proc) launch() {
	w := p.w
	cmd := exec.Command(p.c.argv[0], p.c.argv[1:]...)
	cmd.Env = append(os.Environ(), p.c.env...)
	cmd.Env = append(cmd.Env,
		"ELECTOR_REDIS_ADDR="+p.proxy.Addr(), "ELECTOR_LEASE_NAME="+w.lease, "ELECTOR_IDENTITY="+p.identity,
		fmt.Sprintf("ELECTOR_LEASE_DURATION_MS=%d", w.timing.lease.Milliseconds()),
		fmt.Sprintf("ELECTOR_RENEW_DEADLINE_MS=%d", w.timing.renew.Milliseconds()),
		fmt.Sprintf("ELECTOR_RETRY_PERIOD_MS=%d", w.timing.retry.Milliseconds()),
		fmt.Sprintf("ELECTOR_RESIGN_HOLD_OFF_MS=%d", w.timing.lease.Milliseconds()))
	logf, err := os.Create(filepath.Join(w.t.TempDir(), p.name+".log"))
	if err != nil {
		w.t.Fatal(err)
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		w.t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		w.t.Fatalf("start %s: %v", p.c.name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		defer close(p.done)
		defer logf.Close()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.line(sc.Text())
		}
		_ = cmd.Wait()
	}()
}

// line takes one line of the contract from the process.
func (p *proc) line(s string) {
	w := p.w
	f := strings.Fields(s)
	if len(f) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	bad := func(format string, args ...any) {
		w.violations = append(w.violations, fmt.Sprintf("%s: %q: ", p.name, s)+fmt.Sprintf(format, args...))
	}
	switch f[0] {
	case "started", "stopped":
		if len(f) != 3 {
			bad("want %s TOKEN STAMP", f[0])
			return
		}
		tok, err1 := strconv.ParseInt(f[1], 10, 64)
		at, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			bad("not integers")
			return
		}
		open := w.openLocked(p.name)
		if f[0] == "started" {
			if open != nil {
				bad("started while its term %d is live", open.token)
			}
			w.terms = append(w.terms, &term{proc: p.name, token: tok, start: at})
			return
		}
		if open == nil || open.token != tok {
			bad("stopped a term it does not lead")
			return
		}
		open.stop, open.how = at, "stopped"
	case "idle":
		p.idle++
	case "resign":
		p.resigns = append(p.resigns, s)
	}
}

func (w *world) openLocked(name string) *term {
	for i := len(w.terms) - 1; i >= 0; i-- {
		if t := w.terms[i]; t.proc == name && t.stop == 0 {
			return t
		}
	}
	return nil
}

func (p *proc) send(cmd string) {
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		p.w.t.Logf("%s: send %q: %v", p.name, cmd, err)
	}
}

// kill ends the process with SIGKILL; a live term ends at the kill (its work dies with it).
func (p *proc) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	at := time.Now().UnixNano()
	_ = p.cmd.Process.Kill()
	<-p.done
	w := p.w
	w.mu.Lock()
	if t := w.openLocked(p.name); t != nil {
		t.stop, t.how = at, "killed"
	}
	w.mu.Unlock()
	p.cmd = nil
}

// restart kills the process and starts it again (a new instance, the same identity).
func (p *proc) restart() {
	p.kill()
	p.launch()
	p.send("campaign")
}

// stopIdle sends stop and waits for the idle report.
func (p *proc) stopIdle(timeout time.Duration) bool {
	p.w.mu.Lock()
	n := p.idle
	p.w.mu.Unlock()
	p.send("stop")
	return p.w.waitFor(timeout, func() bool { return p.idle > n })
}

// waitFor polls cond (called with w.mu held) until it holds or timeout passes.
func (w *world) waitFor(timeout time.Duration, cond func() bool) bool {
	end := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		ok := cond()
		w.mu.Unlock()
		if ok || time.Now().After(end) {
			return ok
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// leader returns the process with a live term, if any (w.mu held).
func (w *world) leaderLocked() (*proc, *term) {
	for _, p := range w.procs {
		if t := w.openLocked(p.name); t != nil {
			return p, t
		}
	}
	return nil, nil
}

// waitLeader waits until some process leads, other than the term not.
func (w *world) waitLeader(timeout time.Duration, not *term) (*proc, *term) {
	var p *proc
	var t *term
	w.waitFor(timeout, func() bool {
		p, t = w.leaderLocked()
		return t != nil && t != not
	})
	if t == not {
		return nil, nil
	}
	return p, t
}

// check returns the violations of the invariants (the simulator's, docs/MODEL.md): one live
// term at a time (S1, S4: the scenarios restart Redis only while every follower listens and
// knows the expiry), tokens increasing with the terms (S2), and no release heard before its client
// reported the term stopped (indicators off before release). Call it after the processes
// stopped or were killed; a term still open counts as live until now.
func (w *world) check() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.violations)
	ts := slices.Clone(w.terms)
	sort.Slice(ts, func(i, j int) bool { return ts[i].start < ts[j].start })
	now := time.Now().UnixNano()
	for i := 1; i < len(ts); i++ {
		a, b := ts[i-1], ts[i]
		end := a.stop
		if end == 0 {
			end = now
		}
		if b.start < end {
			out = append(out, fmt.Sprintf("overlap: %s's term %d started %.1f ms before %s's term %d ended (%s)",
				b.proc, b.token, float64(end-b.start)/1e6, a.proc, a.token, a.how))
		}
		// Equal tokens: a client resuming its own newest term after it stepped down, with no
		// term between (docs/MODEL.md, S2); anything else must carry a larger token.
		if b.token < a.token || (b.token == a.token && b.proc != a.proc) {
			out = append(out, fmt.Sprintf("token order: %s's term %d started after %s's term %d", b.proc, b.token, a.proc, a.token))
		}
	}
	for _, r := range w.releases {
		var rt *term // the latest term with the token that started before the release was heard
		for _, t := range ts {
			if t.token == r.token && t.start <= r.at {
				rt = t
			}
		}
		if rt != nil && (rt.stop == 0 || rt.stop > r.at) {
			out = append(out, fmt.Sprintf("release before step-down: %s's term %d was released while its client still called itself leader", rt.proc, rt.token))
		}
	}
	return out
}

// handover is one measured handover: from the old term's stopped to the new term's started.
type handover struct {
	from, to string // client kinds
	d        time.Duration
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// summary tells the terms and handovers, for the log.
func (w *world) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, t := range w.terms {
		fmt.Fprintf(&b, "  %s term %d %d..%d %s\n", t.proc, t.token, t.start, t.stop, t.how)
	}
	return b.String()
}
