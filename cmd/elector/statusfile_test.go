package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/elector/elector/internal/testing/outbuf"
	"github.com/elector/elector/internal/testing/redistest"
)

// electorArgsEnv carries the arguments of TestElectorProcess, one per line. It does not
// begin with ELECTOR_, so the elector does not take it for a flag's variable.
const electorArgsEnv = "ELECTORTEST_ARGS"

// TestElectorProcess is not a test of its own: it is the elector, when startElectorProcess
// runs this test binary with electorArgsEnv set, so that a test can limit, kill and watch a
// real elector process.
func TestElectorProcess(t *testing.T) {
	args := os.Getenv(electorArgsEnv)
	if args == "" {
		t.Skip("the elector run by startElectorProcess")
	}
	c := &cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, lookupEnv: os.LookupEnv,
		environ: os.Environ, hostname: os.Hostname, executable: os.Executable}
	os.Exit(c.main(context.Background(), strings.Split(args, "\n")))
}

// electorProc is an elector process of a test.
type electorProc struct {
	name   string
	cmd    *exec.Cmd
	stderr outbuf.Buffer
	done   chan struct{}
}

// startElectorProcess starts an elector process with args. With nobody, it runs as user
// 65534 when the test runs as root (from a copy of the test binary that user may run), so
// that file permissions bind it. It is killed at the end of the test.
func startElectorProcess(t *testing.T, name string, nobody bool, args ...string) *electorProc {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if nobody && os.Geteuid() == 0 {
		bin = copyForNobody(t, bin)
		attr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	p := &electorProc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "-test.run=^TestElectorProcess$", "-test.count=1")
	// Without the test run's ELECTOR_* variables (the harness's, such as ELECTOR_REDIS_SERVER
	// under make compat): the elector refuses a variable no flag reads.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "ELECTOR_") })
	p.cmd.Env = append(env, electorArgsEnv+"="+strings.Join(args, "\n"), "GORACE=exitcode=66 atexit_sleep_ms=0")
	p.cmd.Stdout, p.cmd.Stderr = io.Discard, &p.stderr
	p.cmd.SysProcAttr = attr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, p.stderr.String())
		}
	})
	return p
}

// exited reports whether the process has exited.
func (p *electorProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// httpBase returns http://ADDR of the process's endpoints, from its log.
func (p *electorProc) httpBase(t *testing.T) string {
	t.Helper()
	re := regexp.MustCompile(`"Serving HTTP" addr="([^"]+)"`)
	var m []string
	waitUntil(t, p.name+" serving HTTP", func() bool { m = re.FindStringSubmatch(p.stderr.String()); return m != nil })
	return "http://" + m[1]
}

// copyForNobody copies bin into a directory that user 65534 may read and enter, removed at
// the end of the test.
func copyForNobody(t *testing.T, bin string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "elector-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	b, err := os.ReadFile(bin)
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	path := filepath.Join(dir, "elector.test")
	if err == nil {
		err = os.WriteFile(path, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// statusDir returns a directory for a status file that any user may write.
func statusDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "elector-status-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755); _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readerSaysLeader is statusCheck in Go: the first line is "leader" and the current Unix
// second is before until_unix.
func readerSaysLeader(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	lines := strings.SplitN(string(b), "\n", 3)
	if len(lines) < 2 || lines[0] != "leader" || !strings.HasPrefix(lines[1], untilUnixKey) {
		return false
	}
	until, err := strconv.ParseInt(strings.TrimPrefix(lines[1], untilUnixKey), 10, 64)
	return err == nil && time.Now().Unix() < until
}

// shellSaysLeader runs statusCheck, as documented, on path.
func shellSaysLeader(t *testing.T, path string) bool {
	t.Helper()
	return exec.Command("sh", "-c", strings.ReplaceAll(statusCheck, "/var/run/elector/status", path)).Run() == nil
}

// overlapSampler reads the status files of a successor, then of the old leader, with the
// reader's check, over and over: a sample in which both say leader means a reader could
// believe in two leaders. The successor is read first: once its file says leader its term
// has begun, so the old leader's file, read after, must not say leader any more.
type overlapSampler struct {
	samples, both, oldLeads atomic.Int64
	stop                    chan struct{}
	done                    chan struct{}
}

func sampleOverlap(successor, old string) *overlapSampler {
	s := &overlapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			next := readerSaysLeader(successor)
			prev := readerSaysLeader(old)
			s.samples.Add(1)
			if prev {
				s.oldLeads.Add(1)
			}
			if next && prev {
				s.both.Add(1)
			}
		}
	}()
	return s
}

func (s *overlapSampler) end() string {
	close(s.stop)
	<-s.done
	return fmt.Sprintf("%d of %d samples with both files saying leader (old leader's alone: %d)", s.both.Load(), s.samples.Load(), s.oldLeads.Load())
}

// statusTiming is the lease timing of the status file tests: a renew deadline of seconds, as
// the reader's check counts whole seconds.
var statusTiming = []string{"--lease-duration=3s", "--renew-deadline=2s", "--retry-period=300ms"}

// startStatusPair starts sidecars a (first, so it leads) and b on srv, each with its own
// status file, and returns them with the files' paths once a leads and b follows.
func startStatusPair(t *testing.T, srv *redistest.Server, lease string, nobodyA bool) (a, b *electorProc, fileA, fileB string) {
	t.Helper()
	fileA, fileB = filepath.Join(statusDir(t), "status"), filepath.Join(statusDir(t), "status")
	args := func(id, file string) []string {
		return append([]string{"sidecar", "--redis-addr=" + srv.Addr(), "--lease-name=" + lease, "--identity=" + id,
			"--http-addr=127.0.0.1:0", "--status-file=" + file}, statusTiming...)
	}
	a = startElectorProcess(t, "a", nobodyA, args("a", fileA)...)
	waitUntil(t, "a's status file says leader", func() bool { return readerSaysLeader(fileA) })
	if !shellSaysLeader(t, fileA) {
		t.Fatalf("the documented check says not leader for a's file %q", readFileString(fileA))
	}
	b = startElectorProcess(t, "b", false, args("b", fileB)...)
	base := b.httpBase(t)
	waitUntil(t, "b follows a", func() bool { return strings.Contains(httpGetBody(base+"/leader"), `"name":"a"`) })
	return a, b, fileA, fileB
}

func readFileString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return string(b)
}

func httpGetBody(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestStatusFileWriteFails: a leading sidecar whose writes fail (prlimit --fsize=0: every
// write of a byte fails with EFBIG; Go ignores SIGXFSZ, so the process lives on) removes its
// status file instead, and is asked to resign: at no moment do both replicas' files pass the
// reader's check, and after the handover the old leader's file does not say leader.
func TestStatusFileWriteFails(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("no prlimit (util-linux)")
	}
	srv := redistest.Start(t)
	a, _, fileA, fileB := startStatusPair(t, srv, "fsize", false)
	if out, err := exec.Command(prlimit, "--pid", strconv.Itoa(a.cmd.Process.Pid), "--fsize=0").CombinedOutput(); err != nil {
		t.Fatalf("prlimit: %v\n%s", err, out)
	}
	s := sampleOverlap(fileB, fileA)
	waitUntil(t, "a's failed write reported", func() bool { return strings.Contains(a.stderr.String(), "Cannot update the status file") })
	if readerSaysLeader(fileA) {
		t.Errorf("a's file passes the reader's check after a failed write: %q", readFileString(fileA))
	}
	code, body := postResign(t, a.httpBase(t)+"/resign", map[string]string{resignHeader: "1"})
	if code != http.StatusOK {
		t.Fatalf("POST /resign on a: %d %q", code, body)
	}
	waitUntil(t, "b's status file says leader", func() bool { return readerSaysLeader(fileB) })
	time.Sleep(500 * time.Millisecond) // more samples with b leading
	res := s.end()
	t.Log(res)
	if s.both.Load() != 0 {
		t.Errorf("%s", res)
	}
	if readerSaysLeader(fileA) || shellSaysLeader(t, fileA) {
		t.Errorf("a's file says leader after b took over: %q", readFileString(fileA))
	}
	if a.exited() {
		t.Errorf("a exited (SIGXFSZ?): %v", a.cmd.ProcessState)
	}
}

// TestStatusFileStuckWithholdsRelease: a leading sidecar that can neither write nor remove
// its status file (its directory turned read-only for it) must not release the lease while
// the file may say leader: on SIGTERM it waits for the file's deadline before the release.
// At no moment do both replicas' files pass the reader's check.
func TestStatusFileStuckWithholdsRelease(t *testing.T) {
	srv := redistest.Start(t)
	a, _, fileA, fileB := startStatusPair(t, srv, "stuck", true)
	if err := os.Chmod(filepath.Dir(fileA), 0o555); err != nil {
		t.Fatal(err)
	}
	s := sampleOverlap(fileB, fileA)
	waitUntil(t, "a's failed update reported", func() bool {
		return strings.Contains(a.stderr.String(), "Cannot update or remove the status file")
	})
	stuck := readFileString(fileA)
	if !strings.HasPrefix(stuck, "leader\n") {
		t.Fatalf("a's file %q; want the leader's file it could not replace", stuck)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "b's status file says leader", func() bool { return readerSaysLeader(fileB) })
	time.Sleep(500 * time.Millisecond)
	res := s.end()
	t.Log(res)
	if s.both.Load() != 0 {
		t.Errorf("%s", res)
	}
	if got := readFileString(fileA); got != stuck && !strings.HasPrefix(got, "leader\n") {
		t.Logf("a's file changed to %q", got)
	}
	if readerSaysLeader(fileA) || shellSaysLeader(t, fileA) {
		t.Errorf("a's file passes the reader's check after b took over: %q", readFileString(fileA))
	}
	if !strings.Contains(a.stderr.String(), "the lease is released once its deadline passed") {
		t.Errorf("a did not say that it withheld the release")
	}
}

// TestStatusFileSigkill: the status file of a leader killed with SIGKILL says leader on its
// first line for ever, but the reader's check says not leader once its deadline has passed,
// before the successor's term can begin.
func TestStatusFileSigkill(t *testing.T) {
	srv := redistest.Start(t)
	a, _, fileA, fileB := startStatusPair(t, srv, "sigkill", false)
	s := sampleOverlap(fileB, fileA)
	if err := syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	waitUntil(t, "a's file no longer passes the reader's check", func() bool { return !readerSaysLeader(fileA) })
	if !strings.HasPrefix(readFileString(fileA), "leader\n") {
		t.Errorf("a's file after SIGKILL %q; want the leader's (nobody rewrote it)", readFileString(fileA))
	}
	if shellSaysLeader(t, fileA) {
		t.Errorf("the documented check says leader for the killed leader's file %q at %d", readFileString(fileA), time.Now().Unix())
	}
	waitUntil(t, "b's status file says leader", func() bool { return readerSaysLeader(fileB) })
	time.Sleep(300 * time.Millisecond)
	res := s.end()
	t.Log(res)
	if s.both.Load() != 0 {
		t.Errorf("%s", res)
	}
}
