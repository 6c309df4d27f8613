// Package e2e tests the elector binary end to end: TestMain builds it once (with the race
// detector when the tests run with -race), and every test runs it as separate processes
// against real redis-server processes started by internal/redistest.
//
// The child of `elector run` is testdata/worker, built once as well: it logs its start, the
// signals it gets and its exit to a file shared by all replicas, and detects overlapping
// workers with flock(2).
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/outbuf"
	"github.com/elector/elector/internal/testing/racebuild"
	"github.com/elector/elector/internal/testing/testbin"
	"github.com/elector/elector/internal/testing/wakeprobe"
)

// Fast election timing for the tests; bounds in assertions are many times these.
const (
	testLease = "1s"
	testRenew = "600ms"
	testRetry = "150ms"
)

// bins are the binaries TestMain built; read-only during the tests.
var bins struct {
	elector    string
	worker     string
	libreplica string
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "elector-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins.elector = filepath.Join(dir, "elector")
	bins.worker = filepath.Join(dir, "worker")
	if err := testbin.Build(bins.elector, "../../cmd/elector", racebuild.Enabled); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if err := testbin.Build(bins.worker, "./testdata/worker", false); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	bins.libreplica = filepath.Join(dir, "libreplica")
	if err := testbin.Build(bins.libreplica, "./testdata/libreplica", racebuild.Enabled); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

// proc is one elector process.
type proc struct {
	t      testing.TB
	name   string
	cmd    *exec.Cmd
	stdout outbuf.Buffer
	stderr outbuf.Buffer
	done   chan struct{}
	state  *os.ProcessState // valid after done
	exited time.Time        // valid after done
}

// cleanEnv is the test's environment without anything that would configure the elector.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "ELECTOR_") || name == "REDIS_PASSWORD" || name == "POD_NAME" {
			continue
		}
		env = append(env, kv)
	}
	// A race report makes the process exit with 66 at its end, which every test notices; the
	// race runtime's default sleep of 1s before exiting would distort the exit timing.
	return append(env, "GORACE=exitcode=66 atexit_sleep_ms=0")
}

// startElector starts the elector binary with args and extra environment entries
// ("KEY=value"). The process and its process group are killed at the end of the test.
func startElector(t testing.TB, name string, env []string, args ...string) *proc {
	t.Helper()
	return startProgram(t, name, bins.elector, env, args...)
}

// startProgram starts the program bin as startElector starts the elector.
func startProgram(t testing.TB, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(cleanEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// Its own group, so that cleanup reaches anything it left; Pdeathsig, so that it dies
	// with the test binary (its children die with it in turn).
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.state, p.exited = p.cmd.ProcessState, time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s (%s): stderr:\n%s\nstdout:\n%s", p.name, strings.Join(args, " "), p.stderr.String(), p.stdout.String())
		}
	})
	return p
}

// runElector runs the elector to its end (at most timeout) and returns its exit code.
func runElector(t testing.TB, timeout time.Duration, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startElector(t, strings.TrimSpace("elector "+strings.Join(args, " ")), env, args...)
	code = p.wait(timeout)
	return code, p.stdout.String(), p.stderr.String()
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// signal sends sig to the elector process (not to its group).
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatalf("signal %v to %s: %v", sig, p.name, err)
	}
}

// kill SIGKILLs the elector and its process group, and waits for it.
func (p *proc) kill() {
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// wait waits for the exit and returns the code a shell would show (128+N for signal N).
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %v; stderr:\n%s", p.name, timeout, p.stderr.String())
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return p.state.ExitCode()
}

// waitFor polls cond every 10ms until it holds, failing the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// assertPrompt fails the test when took, how long the elector took to do what, is not below
// wakeprobe.Limit(control, blocked): blocked is what the behaviour tested avoids (a wait for
// the expiry, a timeout), control the wake-up lag of probe in the same window. A fixed bound
// would fail on a starved machine where the processes are late together.
func assertPrompt(t testing.TB, probe *wakeprobe.Probe, what string, took, blocked time.Duration) {
	t.Helper()
	control := probe.Stop()
	limit := wakeprobe.Limit(control, blocked)
	t.Logf("%s took %v (probe lag %v, limit %v)", what, took.Round(time.Millisecond), control.Round(time.Millisecond), limit.Round(time.Millisecond))
	if took >= limit {
		t.Errorf("%s took %v, not below %v: the probe beside it was %v late, and what it must not wait for takes %v", what, took, limit, control, blocked)
	}
}

// leaseArgs are the flags that put a replica on lease name at addr with the test timing.
func leaseArgs(addr, name, identity string) []string {
	return []string{
		"--redis-addr", addr, "--lease-name", name, "--identity", identity,
		"--lease-duration", testLease, "--renew-deadline", testRenew, "--retry-period", testRetry,
	}
}

// leaseKey is the Redis key of a lease with the default prefix.
func leaseKey(name string) string { return "elector:{" + name + "}:lease" }

// leaseValue returns the record at the lease key, "" when the key is absent.
func leaseValue(t testing.TB, c *redis.Client, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.Get(ctx, leaseKey(name)).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %s: %v", leaseKey(name), err)
	}
	return v
}

// assertLeaseGone fails unless the lease key is absent: every exit after acquiring releases.
func assertLeaseGone(t testing.TB, c *redis.Client, name string) {
	t.Helper()
	if v := leaseValue(t, c, name); v != "" {
		t.Errorf("lease %q is still held after the electors exited: %q", name, v)
	}
}

// holderOf returns the identity in a record "v1:<token>:<instance>:<identity>".
func holderOf(record string) string {
	parts := strings.SplitN(record, ":", 4)
	if len(parts) < 4 {
		return ""
	}
	return parts[3]
}

// httpGet returns the status code and body of a GET, or 0 and the error text.
func httpGet(url string) (int, string) {
	return httpDo(http.MethodGet, url)
}

func httpDo(method, url string) (int, string) {
	return httpDoWithin(method, url, 2*time.Second)
}

// httpPostWait is a POST that waits as long as a handler that waits for a step-down may take
// (POST /resign answers within the server's write timeout).
func httpPostWait(url string) (int, string) {
	return httpDoWithin(http.MethodPost, url, 30*time.Second)
}

func httpDoWithin(method, url string, timeout time.Duration) (int, string) {
	c := &http.Client{Timeout: timeout}
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	if method == http.MethodPost {
		req.Header.Set("X-Elector-Resign", "1") // POST /resign needs it (docs/CLI.md)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// workerEvent is one line of the worker log (see testdata/worker).
type workerEvent struct {
	Ev    string `json:"ev"`
	ID    string `json:"id"`
	Lease string `json:"lease"`
	Token int64  `json:"token"`
	PID   int    `json:"pid"`
	T     int64  `json:"t"`
	Sig   string `json:"sig"`
	Code  int    `json:"code"`
}

func (e workerEvent) time() time.Time { return time.Unix(0, e.T) }

func (e workerEvent) String() string {
	return fmt.Sprintf("%s %-7s %-4s token=%d pid=%d sig=%q code=%d", e.time().Format("15:04:05.000000"), e.Ev, e.ID, e.Token, e.PID, e.Sig, e.Code)
}

// workerLog is the log file of the workers of one test.
type workerLog string

func (l workerLog) events(t testing.TB) []workerEvent {
	t.Helper()
	f, err := os.Open(string(l))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []workerEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev workerEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("worker log line %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

func (l workerLog) dump(t testing.TB) string {
	var b strings.Builder
	for _, ev := range l.events(t) {
		b.WriteString("  " + ev.String() + "\n")
	}
	return b.String()
}

// waitEvent waits until the log has an event matching f at an index ≥ from and returns it
// with its index.
func (l workerLog) waitEvent(t testing.TB, from int, timeout time.Duration, what string, f func(workerEvent) bool) (workerEvent, int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		evs := l.events(t)
		for i := from; i < len(evs); i++ {
			if f(evs[i]) {
				return evs[i], i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v; worker log:\n%s", what, timeout, l.dump(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// workerArgs returns "--" and the worker command line writing to l (and flocking lock).
func workerArgs(l workerLog, lock string, extra ...string) []string {
	return append([]string{"--", bins.worker, "-log", string(l), "-lock", lock}, extra...)
}

// checkWorkers fails on any overlap event and on start tokens that did not increase. The one
// exception is a replica that stepped down (renew deadline, on an overloaded machine) while
// Redis still held its lease: it resumes the same term, so its next worker gets the same token.
func (l workerLog) checkWorkers(t testing.TB) (starts int) {
	t.Helper()
	var last int64
	var lastID string
	for _, ev := range l.events(t) {
		switch ev.Ev {
		case "overlap":
			t.Errorf("two workers ran at once: %v\nworker log:\n%s", ev, l.dump(t))
		case "start":
			starts++
			if ev.Token < last || ev.Token == last && ev.ID != lastID {
				t.Errorf("token %d of %s is not larger than the previous token %d\nworker log:\n%s", ev.Token, ev.ID, last, l.dump(t))
			}
			last, lastID = ev.Token, ev.ID
		}
	}
	return starts
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	}
	// The state follows the command name in parentheses: "pid (comm) S ...".
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

// oneLine fails unless s is exactly one line of text.
func oneLine(t testing.TB, s string) string {
	t.Helper()
	s = strings.TrimSuffix(s, "\n")
	if s == "" || strings.Contains(s, "\n") {
		t.Errorf("want exactly one line on stderr, got %q", s)
	}
	return s
}
