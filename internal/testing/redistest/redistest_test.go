package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest/serverbin"
)

// childEnv names the variable that makes a re-executed test binary play the child role.
const childEnv = "REDISTEST_CHILD"

func TestStartStopRestart(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	client := s.Client(t)
	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got := s.Addr(); got != "127.0.0.1:"+strconv.Itoa(s.Port()) {
		t.Fatalf("Addr() = %q, want 127.0.0.1:%d", got, s.Port())
	}
	port, pid := s.Port(), s.PID()
	if pid == 0 {
		t.Fatal("PID() = 0 for a running server")
	}

	s.Restart()
	if s.Port() != port {
		t.Fatalf("Restart moved the server from port %d to %d", port, s.Port())
	}
	if s.PID() == 0 || s.PID() == pid {
		t.Fatalf("PID after Restart = %d, want a new process (old %d)", s.PID(), pid)
	}
	// The old connection is dead; go-redis retries on a new one to the same address.
	if err := client.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart = %v, want redis.Nil (data lost)", err)
	}

	s.Stop()
	if s.PID() != 0 {
		t.Fatalf("PID() = %d after Stop", s.PID())
	}
	if conn, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		_ = conn.Close()
		t.Fatalf("port %d still accepts connections after Stop", port)
	}
	s.Stop() // idempotent

	s.Restart() // from stopped
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Stop+Restart: %v", err)
	}
	if s.Port() != port {
		t.Fatalf("Restart after Stop moved the server from port %d to %d", port, s.Port())
	}
}

func TestRequirePass(t *testing.T) {
	s := Start(t, "--requirepass", "s3cret")
	ctx := context.Background()
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with the password from --requirepass: %v", err)
	}
	anon := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without password = %v, want NOAUTH error", err)
	}
}

func TestPauseResume(t *testing.T) {
	s := Start(t)
	opts := s.Options()
	opts.MaxRetries = -1
	client := redis.NewClient(opts)
	defer client.Close()
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}

	s.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	err := client.Ping(ctx).Err()
	cancel()
	if err == nil {
		t.Fatal("PING to a paused server succeeded")
	}
	if elapsed := time.Since(start); elapsed < 150*time.Millisecond {
		t.Fatalf("PING to a paused server failed after %v (%v), want a timeout", elapsed, err)
	}

	s.Resume()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := poll(ctx, func() error { return client.Ping(ctx).Err() }); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

// TestCleanupKillsPausedServer checks that a server left paused by a test is gone after the test.
func TestCleanupKillsPausedServer(t *testing.T) {
	var pid, port int
	t.Run("leave paused", func(t *testing.T) {
		s := Start(t)
		pid, port = s.PID(), s.Port()
		s.Pause()
	})
	assertGone(t, pid, port)
}

func TestConcurrentControl(t *testing.T) {
	s := Start(t)
	port := s.Port()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				switch i {
				case 0:
					s.Restart()
				case 1:
					s.Pause()
					s.Resume()
				case 2:
					s.Stop()
				case 3:
					_, _ = s.PID(), s.Addr()
				}
			}
		}()
	}
	wg.Wait()
	s.Restart()
	if s.Port() != port {
		t.Fatalf("port changed from %d to %d", port, s.Port())
	}
	if err := s.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING after concurrent Stop/Restart/Pause: %v", err)
	}
}

func TestParallelStartsGetDistinctPorts(t *testing.T) {
	const n = 6
	servers := make([]*Server, n)
	t.Run("group", func(t *testing.T) {
		for i := range n {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				s := Start(t)
				if err := s.Client(t).Ping(context.Background()).Err(); err != nil {
					t.Errorf("PING: %v", err)
				}
				servers[i] = s
			})
		}
	})
	seen := map[int]bool{}
	for _, s := range servers {
		if s == nil {
			continue // a failed subtest already reported
		}
		if seen[s.Port()] {
			t.Fatalf("port %d handed out twice", s.Port())
		}
		seen[s.Port()] = true
	}
}

// TestProcessDiesWithTestBinary kills a test binary that started a server without giving it a
// chance to clean up, and checks that the server dies anyway (Pdeathsig).
func TestProcessDiesWithTestBinary(t *testing.T) {
	if os.Getenv(childEnv) == "hold" {
		s := Start(t)
		fmt.Printf("REDISTEST_SERVER pid=%d port=%d\n", s.PID(), s.Port())
		time.Sleep(2 * time.Minute) // the parent kills us long before
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux only")
	}
	ServerPath(t) // skip or fail here, not in the child

	cmd := childCommand(t, "TestProcessDiesWithTestBinary", childEnv+"=hold")
	// The child is killed before its cleanup runs: its temporary directory goes in one of
	// ours, removed by our cleanup, rather than staying in /tmp after every run.
	cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"), "TMPDIR="+t.TempDir())
	for _, name := range []string{serverbin.EnvServer, serverbin.EnvSentinel, serverbin.EnvCLI} {
		if v, ok := os.LookupEnv(name); ok {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	found := make(chan [2]int, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var pid, port int
			if _, err := fmt.Sscanf(sc.Text(), "REDISTEST_SERVER pid=%d port=%d", &pid, &port); err == nil {
				found <- [2]int{pid, port}
			}
		}
	}()
	var pid, port int
	select {
	case got := <-found:
		pid, port = got[0], got[1]
	case <-time.After(60 * time.Second):
		t.Fatal("child did not report a started server within 60s")
	}
	if !processAlive(pid) {
		t.Fatalf("server pid %d not running while its test binary lives", pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	assertGone(t, pid, port)
}

// TestServerPathMissing re-runs itself with an empty PATH: it must skip normally and fail when
// CI or ELECTOR_REQUIRE_REDIS is set.
func TestServerPathMissing(t *testing.T) {
	if os.Getenv(childEnv) == "serverpath" {
		path := ServerPath(t)
		t.Logf("CHILD-CONTINUED: ServerPath returned %q", path)
		return
	}
	const msg = "redis-server (or valkey-server) not found on PATH and ELECTOR_REDIS_SERVER is not set; install redis-server (apt-get install redis-server) or run make test"
	for _, tc := range []struct {
		name     string
		env      string
		wantFail bool
	}{
		{"skips", "", false},
		{"ELECTOR_REQUIRE_REDIS fails", "ELECTOR_REQUIRE_REDIS=1", true},
		{"CI fails", "CI=true", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := childCommand(t, "TestServerPathMissing", childEnv+"=serverpath", "PATH="+t.TempDir())
			if tc.env != "" {
				cmd.Env = append(cmd.Env, tc.env)
			}
			outb, err := cmd.CombinedOutput()
			out := string(outb)
			if !strings.Contains(out, msg) {
				t.Errorf("output lacks %q:\n%s", msg, out)
			}
			if strings.Contains(out, "CHILD-CONTINUED") {
				t.Errorf("test went on after ServerPath:\n%s", out)
			}
			if tc.wantFail {
				if err == nil || !strings.Contains(out, "--- FAIL: TestServerPathMissing") {
					t.Errorf("want a failing child, got err=%v:\n%s", err, out)
				}
			} else if err != nil || !strings.Contains(out, "--- SKIP: TestServerPathMissing") {
				t.Errorf("want a skipped child, got err=%v:\n%s", err, out)
			}
		})
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.Nodes) != 3 || len(c.Addrs()) != 3 {
		t.Fatalf("got %d nodes, %d addrs; want 3", len(c.Nodes), len(c.Addrs()))
	}
	ctx := context.Background()
	client := c.Client(t)

	slots, err := client.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	covered := 0
	owners := map[string]bool{}
	for _, r := range slots {
		covered += int(r.End-r.Start) + 1
		owners[r.Nodes[0].Addr] = true
	}
	if covered != 16384 || len(owners) != 3 {
		t.Fatalf("slots cover %d of 16384 on %d owners %v, want all on 3", covered, len(owners), owners)
	}

	for i := range 30 {
		k := fmt.Sprintf("key-%d", i)
		if err := client.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		if got, err := client.Get(ctx, k).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", k, got, err, i)
		}
	}
	// The keys really are spread over the nodes.
	withKeys := 0
	for _, n := range c.Nodes {
		size, err := n.Client(t).DBSize(ctx).Result()
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", n.Addr(), err)
		}
		if size > 0 {
			withKeys++
		}
	}
	if withKeys < 2 {
		t.Fatalf("30 keys landed on %d node(s), want them spread", withKeys)
	}
}

func TestSentinelFailover(t *testing.T) {
	s := StartSentinel(t, "elector-test", 2, 3)
	ctx := context.Background()
	oldMaster := s.Master.Addr()
	if cur, err := s.CurrentMaster(ctx); err != nil || cur != oldMaster {
		t.Fatalf("CurrentMaster = %q, %v; want %q", cur, err, oldMaster)
	}
	client := s.Client(t)
	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the failover client: %v", err)
	}
	if n, err := client.Wait(ctx, 2, 5*time.Second).Result(); err != nil || n != 2 {
		t.Fatalf("WAIT 2 = %d, %v", n, err)
	}

	start := time.Now()
	s.Master.Stop()
	const bound = 60 * time.Second // expected: a few seconds (down-after 1s + election)
	waitCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var promoted *Server
	err := poll(waitCtx, func() error {
		cur, err := s.CurrentMaster(waitCtx)
		if err != nil {
			return err
		}
		if cur == oldMaster {
			return fmt.Errorf("sentinels still name %s", cur)
		}
		if promoted = s.ServerAt(cur); promoted == nil {
			return fmt.Errorf("sentinels name unknown master %s", cur)
		}
		opCtx, opCancel := context.WithTimeout(waitCtx, 2*time.Second)
		defer opCancel()
		if err := client.Set(opCtx, "after", "failover", 0).Err(); err != nil {
			return fmt.Errorf("SET through failover client: %w", err)
		}
		info, err := client.Info(opCtx, "server").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "tcp_port:"+strconv.Itoa(promoted.Port())+"\r\n") {
			return fmt.Errorf("failover client is not on the promoted server %s yet", cur)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("no failover within %v: %v", bound, err)
	}
	t.Logf("failover to %s took %v", promoted.Addr(), time.Since(start).Round(time.Millisecond))
	if promoted == s.Master {
		t.Fatal("the stopped master was named master again")
	}
	if got, err := client.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k on the promoted replica = %q, %v; want replicated value", got, err)
	}
}

// childCommand returns a command that re-runs this test binary for one test, with a minimal
// environment (no PATH, CI, ELECTOR_REQUIRE_REDIS or ELECTOR_REDIS_* unless added) plus env.
func childCommand(t *testing.T, test string, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "CI", "ELECTOR_REQUIRE_REDIS", childEnv, serverbin.EnvServer, serverbin.EnvSentinel, serverbin.EnvCLI:
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// assertGone waits up to 10s until process pid has exited and port refuses connections.
func assertGone(t *testing.T, pid, port int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := poll(ctx, func() error {
		if processAlive(pid) {
			return fmt.Errorf("process %d still running", pid)
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			_ = conn.Close()
			return fmt.Errorf("port %d still accepts connections", port)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if runtime.GOOS != "linux" { // no procfs: signal 0 tells whether the pid exists
			return syscall.Kill(pid, 0) == nil
		}
		return false
	}
	// The state follows the command name in parentheses: "pid (comm) S ...".
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}

// TestTakenPortIsNotMistakenForReady starts a second server on a port that another server holds:
// the answer from the other process must not count as ready, and the bind failure must be
// recognised so that Start can retry elsewhere.
func TestTakenPortIsNotMistakenForReady(t *testing.T) {
	holder := Start(t)
	s := newRedisServer(t, ServerPath(t), nil, false)
	s.mu.Lock()
	err := s.launchLocked(holder.Port())
	s.mu.Unlock()
	if !errors.Is(err, errAddrInUse) {
		t.Fatalf("launch on a taken port = %v, want errAddrInUse", err)
	}
	if s.PID() != 0 {
		t.Fatalf("failed launch left process %d behind", s.PID())
	}
}
