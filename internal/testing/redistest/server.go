package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest/serverbin"
)

const (
	// readyTimeout bounds how long a started process may take to answer on its port.
	readyTimeout = 10 * time.Second
	// restartTimeout bounds how long Restart keeps retrying to bind the same port.
	restartTimeout = 10 * time.Second
	// startAttempts is how many free ports a fresh start tries before giving up.
	startAttempts = 5
	// logTailLines is how much of a log file goes into error messages.
	logTailLines = 40
	// clusterBusOffset is the distance from a node's port to its cluster bus port.
	clusterBusOffset = 10000
)

// errAddrInUse marks a start that failed because the port (or the cluster bus port) was taken.
var errAddrInUse = errors.New("address already in use")

// requiredBy returns the name of the environment variable that turns a missing binary from a skip
// into a failure, or "" when neither is set.
func requiredBy() string {
	for _, name := range []string{"CI", "ELECTOR_REQUIRE_REDIS"} {
		if os.Getenv(name) != "" {
			return name
		}
	}
	return ""
}

// lookup returns the program find finds. When it is not installed the test skips, or fails when
// CI or ELECTOR_REQUIRE_REDIS is set; an environment variable that names a missing program fails
// the test always.
func lookup(t testing.TB, find func() (string, error), hint string) string {
	t.Helper()
	path, err := find()
	if err == nil {
		return path
	}
	if !errors.Is(err, serverbin.ErrNotFound) {
		t.Fatal(err)
	}
	msg := fmt.Sprintf("%v; %s or run make test", err, hint)
	if env := requiredBy(); env != "" {
		t.Fatalf("%s (failing instead of skipping because %s is set)", msg, env)
	}
	t.Skip(msg)
	return ""
}

// ServerPath returns the path of the server program: the one named by ELECTOR_REDIS_SERVER, else
// redis-server or valkey-server on PATH (package serverbin). When none is installed the test is
// skipped with a message saying how to install it, unless the environment variable CI or
// ELECTOR_REQUIRE_REDIS is non-empty: then the test fails with the same message.
func ServerPath(t testing.TB) string {
	t.Helper()
	return lookup(t, serverbin.Server, "install redis-server (apt-get install redis-server)")
}

// cliPath returns the path of the client program of the server (ELECTOR_REDIS_CLI, else
// redis-cli or valkey-cli), skipping or failing like ServerPath when it is absent.
func cliPath(t testing.TB) string {
	t.Helper()
	return lookup(t, serverbin.CLI, "install redis-tools (apt-get install redis-tools)")
}

// sentinelPath returns the program that runs Sentinel and its arguments (ELECTOR_REDIS_SENTINEL,
// else the sentinel program of the server's family, else the server with --sentinel).
func sentinelPath(t testing.TB) (string, []string) {
	t.Helper()
	var args []string
	path := lookup(t, func() (string, error) {
		p, a, err := serverbin.Sentinel()
		args = a
		return p, err
	}, "install redis-sentinel (apt-get install redis-sentinel)")
	return path, args
}

// Server is one redis-server (or redis-sentinel) process started by a test. All methods are safe
// for concurrent use; the process is killed at the end of the test that started it.
type Server struct {
	t        testing.TB
	name     string // "redis-server" or "redis-sentinel", for messages
	bin      string
	dir      string
	logPath  string
	password string
	env      []string                // added to the test binary's environment ("NAME=value")
	args     func(port int) []string // command line after the binary, for the given port
	busPort  bool                    // port+10000 must be free too (cluster nodes)

	mu   sync.Mutex // serialises starting, stopping and signalling
	port int
	proc *process // nil while stopped
}

// process is one run of the server binary.
type process struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed once Wait has returned
	waitErr error         // valid after done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process group (this works on a stopped process too) and waits for the exit.
func (p *process) kill() {
	// A process group id stays reserved while any member lives, so signalling the group cannot
	// hit an unrelated process; it also reaches children that redis-server forked.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	if !p.exited() {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// Start starts one redis-server on a free 127.0.0.1 port in its own t.TempDir(), with
// --save "" --appendonly no followed by extraArgs (for example "--requirepass", "secret"), waits
// until it answers, and kills it at t.Cleanup. It skips or fails the test like ServerPath when
// redis-server is not installed.
func Start(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	return StartEnv(t, nil, extraArgs...)
}

// StartEnv is Start with env ("NAME=value" entries) added to the environment of the process, for
// example LD_PRELOAD and FAKETIME to run it under libfaketime. Restart keeps env.
func StartEnv(t testing.TB, env []string, extraArgs ...string) *Server {
	t.Helper()
	s := startEnv(t, env, extraArgs)
	logStarted(t, standaloneMode(extraArgs), s.bin, s.Addr())
	return s
}

// startEnv is StartEnv without the log line (for the masters of StartSentinel).
func startEnv(t testing.TB, env, extraArgs []string) *Server {
	t.Helper()
	s := newRedisServer(t, ServerPath(t), extraArgs, false)
	s.env = append([]string(nil), env...)
	s.startFresh(t)
	return s
}

// newRedisServer prepares (but does not start) a redis-server with an empty config file, so that
// CONFIG REWRITE (which Sentinel sends on failover) works.
func newRedisServer(t testing.TB, bin string, extraArgs []string, busPort bool) *Server {
	t.Helper()
	s := newServer(t, "redis-server", bin)
	s.busPort = busPort
	s.password = passwordFrom(extraArgs)
	conf := filepath.Join(s.dir, "redis.conf")
	if err := os.WriteFile(conf, nil, 0o644); err != nil {
		t.Fatalf("write %s: %v", conf, err)
	}
	s.args = redisArgs(conf, s.dir, extraArgs)
	return s
}

// redisArgs returns the command line of a redis-server with config file conf and working
// directory dir, for a port, followed by extraArgs.
func redisArgs(conf, dir string, extraArgs []string) func(port int) []string {
	extra := append([]string(nil), extraArgs...)
	return func(port int) []string {
		args := []string{conf,
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--dir", dir,
			"--daemonize", "no",
			"--save", "",
			"--appendonly", "no",
		}
		return append(args, extra...)
	}
}

// newServer creates the directory and log file of a server and registers its cleanup.
func newServer(t testing.TB, name, bin string) *Server {
	t.Helper()
	dir := t.TempDir() // removed after the cleanup below has killed the process
	s := &Server{t: t, name: name, bin: bin, dir: dir, logPath: filepath.Join(dir, name+".log")}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s (port %d) log %s, last lines:\n%s", s.name, s.Port(), s.logPath, s.logTail())
		}
		s.Stop()
	})
	return s
}

// passwordFrom returns the value of the last --requirepass in args.
func passwordFrom(args []string) string {
	password := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--requirepass" {
			password = args[i+1]
		}
	}
	return password
}

// startFresh starts the server on a free port, failing the test when that does not work.
func (s *Server) startFresh(t testing.TB) {
	t.Helper()
	if err := s.startFreshErr(); err != nil {
		t.Fatalf("start %s: %v", s.name, err)
	}
}

// startFreshErr starts the server on a free port, trying another port when the chosen one was
// taken between picking and binding. It does not touch the test, so it may run in any goroutine.
func (s *Server) startFreshErr() error {
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		var port int
		port, err = freePort(s.busPort)
		if err != nil {
			return err
		}
		s.mu.Lock()
		err = s.launchLocked(port)
		s.mu.Unlock()
		if err == nil || !errors.Is(err, errAddrInUse) {
			return err
		}
	}
	return fmt.Errorf("%d attempts: %w", startAttempts, err)
}

// freePort returns a port on 127.0.0.1 that was free a moment ago; with bus, port+10000 was free
// too. Callers must still handle losing the race for it.
func freePort(bus bool) (int, error) {
	var lastErr error
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !bus {
			_ = l.Close()
			return port, nil
		}
		if port+clusterBusOffset > 65535 {
			_ = l.Close()
			continue
		}
		l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+clusterBusOffset)))
		_ = l.Close()
		if err != nil {
			lastErr = err
			continue
		}
		_ = l2.Close()
		return port, nil
	}
	return 0, fmt.Errorf("find a free port with a free cluster bus port: %v", lastErr)
}

// launchLocked starts the binary on port and waits until it answers. s.mu must be held.
func (s *Server) launchLocked(port int) error {
	args := s.args(port)
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	fmt.Fprintf(logf, "### redistest %s: %s %q\n", time.Now().Format(time.RFC3339Nano), s.bin, args)
	offset, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		_ = logf.Close()
		return fmt.Errorf("seek log: %w", err)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf // an *os.File is handed to the child: no copying goroutine
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	_ = logf.Close()
	if err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := s.waitReady(p, port, offset); err != nil {
		p.kill()
		return err
	}
	s.port, s.proc = port, p
	return nil
}

// waitReady polls until the process p answers on port, exits, or readyTimeout passes.
func (s *Server) waitReady(p *process, port int, logOffset int64) error {
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := s.probe(port, p.cmd.Process.Pid, logOffset)
		if err == nil {
			return nil
		}
		if p.exited() {
			out := s.logSince(logOffset)
			if strings.Contains(out, "already in use") {
				return fmt.Errorf("%w: %s on port %d exited (%v); log %s:\n%s", errAddrInUse, s.name, port, p.waitErr, s.logPath, tail(out))
			}
			return fmt.Errorf("%s on port %d exited before it answered (%v); log %s:\n%s", s.name, port, p.waitErr, s.logPath, tail(out))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s on port %d not ready after %v: %v; log %s:\n%s", s.name, port, readyTimeout, err, s.logPath, tail(s.logSince(logOffset)))
		}
		select {
		case <-tick.C:
		case <-p.done:
		}
	}
}

// probe checks that the process with the given pid answers INFO on port. It compares the
// process_id of the answer, so a port answered by some other process (a lost race for the port)
// does not count as ready.
func (s *Server) probe(port, pid int, logOffset int64) error {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	if s.password != "" {
		if _, err := roundTrip(conn, r, "AUTH", s.password); err != nil {
			return fmt.Errorf("AUTH: %w", err)
		}
	}
	info, err := roundTrip(conn, r, "INFO", "server")
	var rerr respError
	if errors.As(err, &rerr) && strings.HasPrefix(string(rerr), "NOAUTH") {
		// Authentication we do not know about (ACL users): trust the log of this run instead.
		if strings.Contains(s.logSince(logOffset), "Ready to accept connections") {
			return nil
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("INFO: %w", err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			if v == strconv.Itoa(pid) {
				return nil
			}
			return fmt.Errorf("port %d is answered by another process (pid %s, want %d)", port, v, pid)
		}
	}
	return fmt.Errorf("INFO reply without process_id")
}

// respError is an error reply from Redis.
type respError string

func (e respError) Error() string { return string(e) }

// roundTrip sends one command as a RESP array and reads a simple, error or bulk string reply.
func roundTrip(w io.Writer, r *bufio.Reader, args ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return "", respError(line[1:])
	case '$', '=': // bulk string (RESP2) or verbatim string (RESP3)
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}

// Addr returns "127.0.0.1:PORT". The address stays the same across Restart.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port()))
}

// Port returns the TCP port the server listens on.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Dir returns the server's working directory (its t.TempDir()).
func (s *Server) Dir() string { return s.dir }

// Options returns go-redis options for a client of this server, for tests that need to tune
// timeouts or retries: the address, the password when the server was started with --requirepass,
// and ContextTimeoutEnabled, so that context deadlines bound every command as they do for clients
// built by internal/redisclient. Everything else is go-redis' default.
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr(), Password: s.password, ContextTimeoutEnabled: true}
}

// Client returns a new go-redis client for this server built from Options; it is closed at
// t.Cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(s.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop kills the process with SIGKILL and waits for it to exit; all data is lost. Stopping a
// stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.proc == nil {
		return
	}
	s.proc.kill()
	s.proc = nil
}

// Restart stops the server if it is running and starts it again on the same port, with an empty
// data set, and waits until it answers. While the old port is still held (for example by a
// lingering socket) it retries for up to 10s. A failure is reported with t.Errorf (Restart may be
// called from any goroutine), after which the server is stopped.
func (s *Server) Restart() {
	if err := s.restart(); err != nil {
		s.t.Errorf("restart %s on port %d: %v", s.name, s.Port(), err)
	}
}

func (s *Server) restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	deadline := time.Now().Add(restartTimeout)
	for {
		err := s.launchLocked(s.port)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pause freezes the process with SIGSTOP: connections stay open and the kernel still accepts new
// ones, but nothing is answered, like a long GC pause or a frozen VM. Stop, Restart and the test's
// cleanup kill a paused server normally.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return
	}
	_ = syscall.Kill(-s.proc.cmd.Process.Pid, sig)
}

// PID returns the process id of the running server, or 0 when it is stopped or has exited.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// LogPath returns the server's log file (stdout and stderr of every run). When the test fails,
// its path and last lines are written to the test log at cleanup.
func (s *Server) LogPath() string { return s.logPath }

// logSince returns the log written after offset.
func (s *Server) logSince(offset int64) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(read log: %v)", err)
	}
	if offset > int64(len(b)) {
		offset = 0
	}
	return string(b[offset:])
}

// logTail returns the last lines of the whole log.
func (s *Server) logTail() string { return tail(s.logSince(0)) }

// tail returns the last logTailLines lines of text.
func tail(text string) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}
