package gocron

// A minimal redis-server starter. The main module's internal/redistest cannot be imported from
// this module (Go forbids importing another module's internal packages), so this is the small
// part of it that these tests need.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startRedis starts a redis-server on a free 127.0.0.1 port for the test, without persistence,
// and returns a client for it; both are gone at t.Cleanup. Without redis-server on PATH the test
// skips, or fails when CI or ELECTOR_REQUIRE_REDIS is set.
func startRedis(t testing.TB) *redis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found on PATH; install redis-server (apt-get install redis-server)"
		for _, env := range []string{"CI", "ELECTOR_REQUIRE_REDIS"} {
			if os.Getenv(env) != "" {
				t.Fatalf("%s (failing instead of skipping because %s is set)", msg, env)
			}
		}
		t.Skip(msg)
	}
	for attempt := 1; ; attempt++ {
		client, err := tryStartRedis(t, bin)
		if err == nil {
			return client
		}
		if attempt == 3 { // another process may have taken the free port before redis-server
			t.Fatalf("start redis-server: %v", err)
		}
	}
}

func tryStartRedis(t testing.TB, bin string) (*redis.Client, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(l.Addr().(*net.TCPAddr).Port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no", "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr() // the server dies with the test binary (Linux)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return client, nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("redis-server on %s exited: %s", addr, log)
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("redis-server on %s not ready after 10s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newClient returns another client of the server that c talks to, closed at t.Cleanup.
func newClient(t testing.TB, c *redis.Client) *redis.Client {
	t.Helper()
	nc := redis.NewClient(c.Options())
	t.Cleanup(func() { _ = nc.Close() })
	return nc
}
