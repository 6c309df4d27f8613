package faultproxy_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// strictClient returns a client of addr that honours context deadlines and never retries, so that
// every fault shows up as an error of the command that met it.
func strictClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// timeout returns a context that ends after d.
func timeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls check every 20ms for up to 10s.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after 10s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestForwards(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	if p.Target() != srv.Addr() {
		t.Fatalf("Target() = %q, want %q", p.Target(), srv.Addr())
	}
	client := strictClient(t, p.Addr())
	ctx := timeout(t, 10*time.Second)
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through proxy: %v", err)
	}
	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through proxy: %v", err)
	}
	// The data really reached the server behind the proxy.
	if got, err := srv.Client(t).Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k on the server = %q, %v; want v", got, err)
	}
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns() = %d, want 1", n)
	}
	// A large value survives chunking intact.
	big := strings.Repeat("0123456789", 100_000)
	if err := client.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatalf("SET big: %v", err)
	}
	if got, err := client.Get(ctx, "big").Result(); err != nil || got != big {
		t.Fatalf("GET big: %d bytes, %v; want %d bytes back", len(got), err, len(big))
	}
}

func TestCut(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	client := strictClient(t, p.Addr())
	if err := client.Ping(timeout(t, 10*time.Second)).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}

	// Cut while a command is in flight: BLPOP blocks on the server until the cut.
	errc := make(chan error, 1)
	go func() {
		errc <- client.BLPop(timeout(t, 30*time.Second), 20*time.Second, "nothing").Err()
	}()
	direct := srv.Client(t)
	eventually(t, "BLPOP blocked on the server", func() error {
		info, err := direct.Info(context.Background(), "clients").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "blocked_clients:1\r\n") {
			return fmt.Errorf("no blocked client yet")
		}
		return nil
	})
	start := time.Now()
	p.Cut()
	select {
	case err := <-errc:
		if err == nil || errors.Is(err, redis.Nil) {
			t.Fatalf("BLPOP across Cut = %v, want a connection error", err)
		}
		t.Logf("BLPOP after Cut: %v (after %v)", err, time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("BLPOP did not fail within 10s of Cut")
	}
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns() = %d after Cut, want 0", n)
	}

	// New connections are still accepted: the client reconnects.
	if err := client.Ping(timeout(t, 10*time.Second)).Err(); err != nil {
		t.Fatalf("PING after Cut: %v", err)
	}
}

func TestBlackhole(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	client := strictClient(t, p.Addr())
	if err := client.Ping(timeout(t, 10*time.Second)).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}

	p.Blackhole(true)
	start := time.Now()
	err := client.Set(timeout(t, 200*time.Millisecond), "lost", "1", 0).Err()
	if err == nil {
		t.Fatal("SET through a black hole succeeded")
	}
	if elapsed := time.Since(start); elapsed < 150*time.Millisecond {
		t.Fatalf("SET failed after %v with %v; want a timeout, not a quick error", elapsed, err)
	}
	// New connections are accepted but get nothing through either.
	other := strictClient(t, p.Addr())
	if err := other.Ping(timeout(t, 200*time.Millisecond)).Err(); err == nil {
		t.Fatal("PING on a new connection through a black hole succeeded")
	}
	// A connection stays open but silent: reading times out rather than ending.
	raw, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("PING\r\n")); err != nil {
		t.Fatalf("write PING: %v", err)
	}
	_ = raw.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := raw.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a black hole = %d bytes, %v; want a timeout", n, err)
	}
	// The SET never reached Redis.
	if n, err := srv.Client(t).Exists(context.Background(), "lost").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS lost = %d, %v; want 0 (bytes must be dropped)", n, err)
	}

	p.Blackhole(false)
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns() = %d after the black hole ended, want 0 (blackholed connections are closed)", n)
	}
	// The blackholed connection was closed when the black hole ended.
	_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := raw.Read(make([]byte, 64)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a blackholed connection after the black hole = %d bytes, %v; want it closed", n, err)
	}
	eventually(t, "PING after the black hole", func() error {
		return client.Ping(timeout(t, 2*time.Second)).Err()
	})
}

func TestLatency(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	client := strictClient(t, p.Addr())
	ctx := timeout(t, 30*time.Second)
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}

	const d = 100 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with latency: %v", err)
	}
	if rtt := time.Since(start); rtt < 2*d {
		t.Fatalf("round trip took %v with %v one-way latency, want at least %v", rtt, d, 2*d)
	}

	// Order is preserved: a pipeline of INCRs comes back as 1..n.
	const n = 200
	cmds, err := client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for range n {
			pipe.Incr(ctx, "counter")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pipeline with latency: %v", err)
	}
	for i, c := range cmds {
		if got := c.(*redis.IntCmd).Val(); got != int64(i+1) {
			t.Fatalf("reply %d = %d, want %d", i, got, i+1)
		}
	}

	p.SetLatency(0)
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after latency off: %v", err)
	}
}

func TestRefuse(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	old := strictClient(t, p.Addr())
	if err := old.Ping(timeout(t, 10*time.Second)).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}

	p.Refuse(true)
	fresh := strictClient(t, p.Addr())
	if err := fresh.Ping(timeout(t, 5*time.Second)).Err(); err == nil {
		t.Fatal("PING on a new connection while refusing succeeded")
	}
	// Open connections are not affected.
	if err := old.Ping(timeout(t, 5*time.Second)).Err(); err != nil {
		t.Fatalf("PING on an open connection while refusing: %v", err)
	}

	p.Refuse(false)
	if err := fresh.Ping(timeout(t, 10*time.Second)).Err(); err != nil {
		t.Fatalf("PING after refusing ended: %v", err)
	}
}

func TestSetTarget(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ctx := timeout(t, 30*time.Second)
	if err := a.Client(t).Set(ctx, "who", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Client(t).Set(ctx, "who", "b", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p := faultproxy.Start(t, a.Addr())
	client := strictClient(t, p.Addr())
	if got, err := client.Get(ctx, "who").Result(); err != nil || got != "a" {
		t.Fatalf("GET who = %q, %v; want a", got, err)
	}

	p.SetTarget(b.Addr())
	// The open connection still goes to a.
	if got, err := client.Get(ctx, "who").Result(); err != nil || got != "a" {
		t.Fatalf("GET who on the open connection = %q, %v; want a", got, err)
	}
	p.Cut()
	eventually(t, "GET through the new target", func() error {
		got, err := client.Get(ctx, "who").Result()
		if err != nil {
			return err
		}
		if got != "b" {
			return fmt.Errorf("GET who = %q, want b", got)
		}
		return nil
	})
}

func TestTargetDown(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	srv.Stop()
	client := strictClient(t, p.Addr())
	if err := client.Ping(timeout(t, 5*time.Second)).Err(); err == nil {
		t.Fatal("PING through a proxy whose target is down succeeded")
	}
	eventually(t, "connection to the dead target dropped", func() error {
		if n := p.Conns(); n != 0 {
			return fmt.Errorf("Conns() = %d", n)
		}
		return nil
	})
	srv.Restart()
	if err := client.Ping(timeout(t, 10*time.Second)).Err(); err != nil {
		t.Fatalf("PING after the target came back: %v", err)
	}
}

// TestCloseLeavesNoGoroutines closes a proxy with connections in every state (forwarding,
// delayed data in flight, blackholed before and after connecting) and checks that nothing of it
// keeps running.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	srv := redistest.Start(t)
	before := goleak.IgnoreCurrent()

	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	plain := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	p.SetLatency(time.Hour) // the next command's bytes stay queued in the proxy
	slow := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer slow.Close()
	slowErr := make(chan error, 1)
	go func() { slowErr <- slow.Ping(ctx).Err() }()
	eventually(t, "second connection open", func() error {
		if n := p.Conns(); n < 2 {
			return fmt.Errorf("Conns() = %d", n)
		}
		return nil
	})
	p.Blackhole(true)
	held := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer held.Close()
	if err := held.Ping(timeout(t, 100*time.Millisecond)).Err(); err == nil {
		t.Fatal("PING through a black hole succeeded")
	}

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close has waited: not one goroutine of the proxy is at work at this instant.
	buf := make([]byte, 1<<20)
	if busy := atWork(t, string(buf[:runtime.Stack(buf, true)])); len(busy) > 0 {
		t.Fatalf("proxy goroutines still running after Close returned:\n%s", strings.Join(busy, "\n\n"))
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case err := <-slowErr:
		if err == nil {
			t.Fatal("a command whose bytes were queued when the proxy closed succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a client of the closed proxy is still waiting after 10s")
	}
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns() = %d after Close", n)
	}
	if err := plain.Ping(timeout(t, 5*time.Second)).Err(); err == nil {
		t.Fatal("PING through a closed proxy succeeded")
	}
	_ = plain.Close()
	_ = slow.Close()
	_ = held.Close()
	goleak.VerifyNone(t, before)
}

// atWork returns the goroutines of a runtime.Stack dump that run the proxy's code. One whose
// top frame is a closing brace of a function of faultproxy.go is done: its deferred
// wg.Done has run (so Close's Wait may have returned) and it was not yet scheduled again to
// return; on a loaded machine that was seen (a (*conn).read [runnable] at its last line).
func atWork(t *testing.T, stacks string) []string {
	t.Helper()
	ends := closingBraces(t)
	var busy []string
	for _, g := range strings.Split(stacks, "\n\n") {
		if !strings.Contains(g, "faultproxy.(*") {
			continue
		}
		lines := strings.Split(g, "\n")
		// lines[0] "goroutine N [state]:", lines[1] the top function, lines[2] its file:line.
		if len(lines) >= 3 && strings.Contains(lines[1], "/faultproxy.(") {
			loc := strings.Fields(lines[2])
			if len(loc) > 0 {
				file, line, ok := strings.Cut(loc[0], ":")
				if n, err := strconv.Atoi(line); ok && err == nil && strings.HasSuffix(file, "/faultproxy/faultproxy.go") && ends[n] {
					continue
				}
			}
		}
		busy = append(busy, g)
	}
	return busy
}

// closingBraces returns the lines of faultproxy.go that hold the closing brace of a
// function or function literal.
func closingBraces(t *testing.T) map[int]bool {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "faultproxy.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ends := map[int]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch fn := n.(type) {
		case *ast.FuncDecl:
			if fn.Body != nil {
				ends[fset.Position(fn.Body.Rbrace).Line] = true
			}
		case *ast.FuncLit:
			ends[fset.Position(fn.Body.Rbrace).Line] = true
		}
		return true
	})
	return ends
}

// TestAtWork pins the parsing of a stack dump: a goroutine at the closing brace of
// (*conn).read is done, one inside it or in another proxy function is at work, and one
// that only mentions the test package is none of the proxy's.
func TestAtWork(t *testing.T) {
	ends := closingBraces(t)
	src, err := os.ReadFile("faultproxy.go")
	if err != nil {
		t.Fatal(err)
	}
	// The lines of read's closing brace and of its Read call, found in the source.
	var readEnd, readCall int
	in := false
	for i, l := range strings.Split(string(src), "\n") {
		switch {
		case strings.HasPrefix(l, "func (c *conn) read("):
			in = true
		case in && strings.Contains(l, "src.Read(buf)"):
			readCall = i + 1
		case in && l == "}":
			readEnd, in = i+1, false
		}
	}
	if readEnd == 0 || readCall == 0 || !ends[readEnd] || ends[readCall] {
		t.Fatalf("read's closing brace at %d (a function end: %t), its Read at %d (%t)", readEnd, ends[readEnd], readCall, ends[readCall])
	}
	// The package's path as a stack dump names it, from one of its functions: a dump made
	// after the package moved names the new path.
	pkg := strings.TrimSuffix(runtime.FuncForPC(reflect.ValueOf(faultproxy.New).Pointer()).Name(), ".New")
	g := func(state string, line int) string {
		return fmt.Sprintf("goroutine 7 [%s]:\n%s.(*conn).read(0xc000118000, {0x7a5e40, 0xc00011c000}, 0xc000120000)\n"+
			"\t/build/faultproxy/faultproxy.go:%d +0x1c5\ncreated by %s.(*conn).run in goroutine 6\n"+
			"\t/build/faultproxy/faultproxy.go:250 +0x1a5", state, pkg, line, pkg)
	}
	test := "goroutine 1 [running]:\n" + pkg + "_test.TestAtWork(0xc000102000)\n\t/build/faultproxy/faultproxy_test.go:400 +0x3a"
	dump := strings.Join([]string{test, g("runnable", readEnd), g("IO wait", readCall)}, "\n\n")
	busy := atWork(t, dump)
	if len(busy) != 1 || !strings.Contains(busy[0], fmt.Sprintf("faultproxy.go:%d ", readCall)) {
		t.Fatalf("atWork = %q, want only the goroutine in read's Read", busy)
	}
}
