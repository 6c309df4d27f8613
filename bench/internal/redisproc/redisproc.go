// Package redisproc starts and stops the one redis-server process that a benchmark run
// measures, and reads what the run needs from it: its CPU time, INFO sections and the
// commands clients send (MONITOR).
//
// internal/redistest does the same for tests, but it is tied to testing.TB; the bench tool is
// a program, so it has this small equivalent. The server listens on a free 127.0.0.1 port,
// keeps no data on disk (--save "" --appendonly no) and is killed by Stop (and, on Linux, when
// the bench process dies).
package redisproc

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest/serverbin"
)

// Server is one redis-server process.
type Server struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
	log  string
}

// Start starts the server program (ELECTOR_REDIS_SERVER, else redis-server or valkey-server
// from PATH: package serverbin, as the tests find it) on a free loopback port, with its
// working directory and log in dir, and waits until it answers PING.
func Start(ctx context.Context, dir string) (*Server, error) {
	bin, err := serverbin.Server()
	if err != nil {
		return nil, fmt.Errorf("start redis-server: %w (install it: apt-get install redis-server)", err)
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := launch(ctx, bin, dir, port)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, fmt.Errorf("start redis-server: %w", last)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func launch(ctx context.Context, bin, dir string, port int) (*Server, error) {
	logPath := filepath.Join(dir, fmt.Sprintf("redis-%d.log", port))
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create redis log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	s := &Server{cmd: cmd, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), done: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := c.Info(pctx, "server").Result()
		cancel()
		if err == nil && strings.Contains(info, "process_id:"+strconv.Itoa(cmd.Process.Pid)+"\r\n") {
			return s, nil
		}
		select {
		case <-s.done:
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("redis-server on port %d exited: %s", port, lastLines(string(b), 10))
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server on port %d did not answer within 10s: %v", port, err)
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Addr returns "127.0.0.1:PORT".
func (s *Server) Addr() string { return s.addr }

// Pid returns the process id of redis-server.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop kills the server and waits for it to exit. It is safe to call twice.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// CPU returns the CPU time redis-server has used so far, all threads together.
func (s *Server) CPU() (time.Duration, error) { return ProcessCPU(s.Pid()) }

// Info returns the fields of INFO section as a map ("redis_version" -> "7.0.15").
func Info(ctx context.Context, c redis.UniversalClient, section string) (map[string]string, error) {
	text, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("INFO %s: %w", section, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// CommandStats returns the calls of every command from INFO commandstats ("evalsha" -> 12).
// Redis counts the commands that scripts call too.
func CommandStats(ctx context.Context, c redis.UniversalClient) (map[string]int64, error) {
	calls, _, err := CommandStatsTimes(ctx, c)
	return calls, err
}

// CommandStatsTimes is CommandStats with the microseconds Redis spent in each command
// (commandstats usec; a script's includes the commands it called, which count on their own too).
func CommandStatsTimes(ctx context.Context, c redis.UniversalClient) (calls, usec map[string]int64, err error) {
	m, err := Info(ctx, c, "commandstats")
	if err != nil {
		return nil, nil, err
	}
	calls, usec = map[string]int64{}, map[string]int64{}
	for k, v := range m {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		for _, field := range strings.Split(v, ",") {
			if n, ok := strings.CutPrefix(field, "calls="); ok {
				calls[name], _ = strconv.ParseInt(n, 10, 64)
			}
			if n, ok := strings.CutPrefix(field, "usec="); ok {
				usec[name], _ = strconv.ParseInt(n, 10, 64)
			}
		}
	}
	return calls, usec, nil
}

// Call is one command a client sent, as a MONITOR line shows it.
type Call struct {
	From string // the client's address
	Name string // the command, lower-cased
	Args string // the rest of the line: the arguments, each quoted
}

// ByName counts calls by command name.
func ByName(c Call) string { return c.Name }

// Monitor counts the commands that clients send to a server, as MONITOR shows them, by the
// key its key function gives: a command a script calls is not counted (MONITOR marks it
// "lua"), so the count is the number of commands that crossed the network.
type Monitor[K comparable] struct {
	conn   net.Conn
	mu     sync.Mutex
	counts map[K]int64
	done   chan struct{}
}

// StartMonitor opens a MONITOR connection to addr that counts each call under key(call).
func StartMonitor[K comparable](addr string, key func(Call) K) (*Monitor[K], error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("monitor %s: %w", addr, err)
	}
	if _, err := conn.Write([]byte("*1\r\n$7\r\nMONITOR\r\n")); err != nil {
		conn.Close()
		return nil, fmt.Errorf("monitor %s: %w", addr, err)
	}
	r := bufio.NewReaderSize(conn, 64<<10)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+OK") {
		conn.Close()
		return nil, fmt.Errorf("monitor %s: reply %q: %v", addr, line, err)
	}
	m := &Monitor[K]{conn: conn, counts: map[K]int64{}, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if c, ok := clientCall(line); ok {
				k := key(c)
				m.mu.Lock()
				m.counts[k]++
				m.mu.Unlock()
			}
		}
	}()
	return m, nil
}

// clientCall parses a MONITOR line, `+1700000000.123456 [0 127.0.0.1:5555] "evalsha" ...`,
// or returns false for a line of a script ("[0 lua]").
func clientCall(line string) (Call, bool) {
	_, rest, ok := strings.Cut(line, "[")
	if !ok {
		return Call{}, false
	}
	source, rest, ok := strings.Cut(rest, "] \"")
	if !ok || strings.HasSuffix(source, " lua") {
		return Call{}, false
	}
	_, from, _ := strings.Cut(source, " ")
	name, args, _ := strings.Cut(rest, "\"")
	return Call{From: from, Name: strings.ToLower(name), Args: strings.TrimSpace(args)}, true
}

// Take returns the client commands counted since the last Take (or since the start) by key,
// and starts counting anew. Commands sent just before Take may be counted in the next one.
func (m *Monitor[K]) Take() map[K]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.counts
	m.counts = map[K]int64{}
	return c
}

// Close ends the MONITOR connection and waits for its reader to stop.
func (m *Monitor[K]) Close() error {
	err := m.conn.Close()
	<-m.done
	return err
}
