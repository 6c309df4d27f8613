package demoredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// start starts a demo server and a client of it built like the elector
// command builds its client.
func start(t *testing.T) (*Server, redis.UniversalClient) {
	t.Helper()
	s, err := Start(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, newClient(t, s.Addr())
}

func newClient(t *testing.T, addr string) redis.UniversalClient {
	t.Helper()
	client, err := redisclient.New(redisclient.Config{Addrs: []string{addr}, Mode: redisclient.ModeStandalone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func TestKeysExpireInRealTime(t *testing.T) {
	_, client := start(t)
	ctx := testCtx(t)

	// Wall-clock readings: the server's TTLs run on the wall clock (redistest.WallClock; with
	// it 5 ms/s ahead, a PX 300 key looked gone after 298 ms by the monotonic clock).
	now := func() time.Time { return redistest.WallClock(time.Now()) }
	set := now()
	ok, err := client.SetNX(ctx, "lease", "me", 300*time.Millisecond).Result()
	if err != nil || !ok {
		t.Fatalf("SET NX PX 300 = %v, %v", ok, err)
	}
	setDone := now() // the server ran the SET before this
	if ok, err := client.SetNX(ctx, "lease", "you", 300*time.Millisecond).Result(); err != nil || ok {
		t.Fatalf("second SET NX = %v, %v; want false", ok, err)
	}
	time.Sleep(time.Until(setDone.Add(100 * time.Millisecond)))
	// At least 100ms of wall time passed on the server since the SET.
	pttl, err := client.PTTL(ctx, "lease").Result()
	if err != nil {
		t.Fatal(err)
	}
	if pttl > 201*time.Millisecond {
		t.Errorf("PTTL = %v at least 100ms after SET PX 300; want at most 200ms (the TTL runs in real time)", pttl)
	}
	got, err := client.Get(ctx, "lease").Result()
	if elapsed := now().Sub(set); elapsed < 300*time.Millisecond && (err != nil || got != "me") {
		t.Fatalf("key gone after %v (%q, %v), want it until 300ms", elapsed, got, err)
	}
	// Nobody advances any clock: the key must expire by itself.
	deadline := set.Add(1500 * time.Millisecond)
	for {
		n, err := client.Exists(ctx, "lease").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if now().After(deadline) {
			t.Fatalf("key with PX 300 still there after %v of wall time", now().Sub(set))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if elapsed := now().Sub(set); elapsed < 300*time.Millisecond {
		t.Errorf("key with PX 300 expired after only %v", elapsed)
	}
	if ok, err := client.SetNX(ctx, "lease", "you", time.Second).Result(); err != nil || !ok {
		t.Errorf("SET NX after expiry = %v, %v; want true", ok, err)
	}
}

func TestTimeIsWallClock(t *testing.T) {
	_, client := start(t)
	ctx := testCtx(t)
	for _, src := range []string{"TIME command", "TIME in a script"} {
		var got time.Time
		var err error
		if src == "TIME command" {
			got, err = client.Time(ctx).Result()
		} else {
			got, err = scriptTime(ctx, client)
		}
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if d := time.Since(got); d < -2*time.Second || d > 2*time.Second {
			t.Errorf("%s = %v, %v away from the wall clock", src, got, d)
		}
	}
	first, _ := scriptTime(ctx, client)
	time.Sleep(50 * time.Millisecond)
	second, _ := scriptTime(ctx, client)
	if d := second.Sub(first); d < 40*time.Millisecond {
		t.Errorf("TIME advanced %v during 50ms of wall time", d)
	}
}

func scriptTime(ctx context.Context, client redis.UniversalClient) (time.Time, error) {
	v, err := client.Eval(ctx, "local t = redis.call('TIME'); return {t[1], t[2]}", nil).StringSlice()
	if err != nil {
		return time.Time{}, err
	}
	if len(v) != 2 {
		return time.Time{}, fmt.Errorf("TIME in a script returned %q", v)
	}
	sec, err1 := strconv.ParseInt(v[0], 10, 64)
	usec, err2 := strconv.ParseInt(v[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return time.Time{}, fmt.Errorf("TIME in a script returned %q: %w", v, err)
	}
	return time.Unix(sec, usec*1000), nil
}

// probe is a script whose reply must be the same from miniredis and from real
// Redis; KEYS are {p}:a and {p}:b, both empty at the start.
type probe struct {
	name   string
	script string
	args   []any
}

var probes = []probe{
	{"replicate_commands exists", "return type(redis.replicate_commands)", nil},
	{"replicate_commands callable", "if redis.replicate_commands then redis.replicate_commands() end; return redis.call('SET', KEYS[1], 'x')", nil},
	{"TIME returns two integer strings", "local t = redis.call('TIME'); return {type(t[1]), type(t[2]), tonumber(t[1]) > 1600000000, tonumber(t[2]) < 1000000}", nil},
	{"microseconds exact with %.0f", "local t = redis.call('TIME'); local us = tonumber(t[1]) * 1000000 + tonumber(t[2]); return string.format('%.0f', us) == (t[1] .. string.format('%06d', tonumber(t[2])))", nil},
	{"string.format %.0f of a large integer", "return string.format('%.0f', 1700000000123456)", nil},
	{"string.format %.0f of max(prev+1, now)", "local p = tonumber('1700000000123456'); local n = 1700000000123400; if p + 1 > n then n = p + 1 end; return string.format('%.0f', n)", nil},
	{"number argument to redis.call", "redis.call('SET', KEYS[1], 1700000000123456); return redis.call('GET', KEYS[1])", nil},
	{"INCRBY past 2^31", "return redis.call('INCRBY', KEYS[1], 1700000000123456)", nil},
	{"SET NX PX then PTTL", "local a = redis.call('SET', KEYS[1], 'r', 'NX', 'PX', ARGV[1]); local b = redis.call('SET', KEYS[1], 'r', 'NX', 'PX', ARGV[1]); local p = redis.call('PTTL', KEYS[1]); return {a['ok'], b == false, p > 0 and p <= 300}", []any{300}},
	{"PTTL of a missing key", "return redis.call('PTTL', KEYS[1])", nil},
	{"PTTL of a key without expiry", "redis.call('SET', KEYS[1], 'v'); return redis.call('PTTL', KEYS[1])", nil},
	{"PEXPIRE of a missing key", "return redis.call('PEXPIRE', KEYS[1], 1000)", nil},
	{"PEXPIRE then PTTL", "redis.call('SET', KEYS[1], 'v'); local r = redis.call('PEXPIRE', KEYS[1], ARGV[1]); local p = redis.call('PTTL', KEYS[1]); return {r, p > 5000 and p <= 10000}", []any{10000}},
	{"GET of a missing key is false", "local v = redis.call('GET', KEYS[1]); return {v == false, type(v)}", nil},
	{"DEL", "redis.call('SET', KEYS[1], 'v'); return {redis.call('DEL', KEYS[1]), redis.call('DEL', KEYS[1])}", nil},
	{"compare and delete", "redis.call('SET', KEYS[1], ARGV[1]); if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end; return 0", []any{"v1:5:abc:pod-0"}},
	{"string.match of a record", "local tok = string.match(ARGV[1], '^v1:(%d+):'); return {tok, tonumber(tok) + 1}", []any{"v1:1700000000123456:0123456789abcdef:pod-0"}},
	{"tonumber of a non-number", "return tostring(tonumber('abc'))", nil},
	{"error_reply", "return redis.error_reply('ERR fencing token key does not hold an integer')", nil},
	{"PUBLISH without subscribers", "return redis.call('PUBLISH', KEYS[1], 'released 0 v1:1:a:b')", nil},
	{"number reply is truncated to an integer", "return 3.7", nil},
	{"table with a false", "return {1, false, 'x'}", nil},
	{"optional ARGV", "if ARGV[3] then return 'set' end; return 'unset'", []any{"a", "b"}},
	{"string.format %d", "return string.format('%d', 42)", nil},
}

// runProbes runs every probe on a fresh pair of keys and returns the replies
// (or errors) rendered as text.
func runProbes(ctx context.Context, t *testing.T, client redis.UniversalClient, prefix string) map[string]string {
	t.Helper()
	got := make(map[string]string, len(probes))
	for i, p := range probes {
		keys := []string{fmt.Sprintf("%s{p%d}:a", prefix, i), fmt.Sprintf("%s{p%d}:b", prefix, i)}
		v, err := client.Eval(ctx, p.script, keys, p.args...).Result()
		if err != nil {
			got[p.name] = "error: " + err.Error()
		} else {
			got[p.name] = fmt.Sprintf("%#v", v)
		}
	}
	return got
}

// TestLuaMatchesRedis runs the same scripts on the demo server and on a real
// redis-server and requires identical replies: the features internal/lease relies on.
func TestLuaMatchesRedis(t *testing.T) {
	_, demo := start(t)
	real := redistest.Start(t)
	ctx := testCtx(t)
	fromDemo := runProbes(ctx, t, demo, "")
	fromRedis := runProbes(ctx, t, newClient(t, real.Addr()), "")
	for _, p := range probes {
		d, r := fromDemo[p.name], fromRedis[p.name]
		if d != r {
			t.Errorf("%s:\n  miniredis: %s\n  redis:     %s", p.name, d, r)
		}
		if strings.Contains(r, "error") && p.name != "error_reply" {
			t.Errorf("%s: real Redis failed: %s", p.name, r)
		}
	}
	if t.Failed() {
		return
	}
	// Spot-check that the probes test something.
	for name, want := range map[string]string{
		"string.format %.0f of a large integer": `"1700000000123456"`,
		"number argument to redis.call":         `"1700000000123456"`,
		"replicate_commands exists":             `"function"`,
		"microseconds exact with %.0f":          `1`,
		"SET NX PX then PTTL":                   `[]interface {}{"OK", 1, 1}`,
		"PTTL of a missing key":                 `-2`,
		"PTTL of a key without expiry":          `-1`,
		"error_reply":                           `error: ERR fencing token key does not hold an integer`,
	} {
		if got := fromRedis[name]; got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
}

// TestNumberToStringDiffers pins the one difference found between miniredis
// and Redis that a lease script could trip over (see the package comment). If
// it fails, miniredis changed: update the package comment.
func TestNumberToStringDiffers(t *testing.T) {
	_, demo := start(t)
	real := redistest.Start(t)
	ctx := testCtx(t)
	const script = "return {tostring(1700000000123456), 'v1:' .. 1700000000123456}"
	d, err := demo.Eval(ctx, script, nil).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	r, err := newClient(t, real.Addr()).Eval(ctx, script, nil).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"1.7000000001235e+15", "v1:1.7000000001235e+15"}; fmt.Sprint(r) != fmt.Sprint(want) {
		t.Errorf("real Redis: %q, want %q", r, want)
	}
	if want := []string{"1700000000123456", "v1:1700000000123456"}; fmt.Sprint(d) != fmt.Sprint(want) {
		t.Errorf("miniredis: %q, want %q", d, want)
	}
}

func TestScriptCacheAndTransactions(t *testing.T) {
	_, client := start(t)
	ctx := testCtx(t)
	script := redis.NewScript("return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])")
	if exists, err := script.Exists(ctx, client).Result(); err != nil || exists[0] {
		t.Fatalf("SCRIPT EXISTS before the first run = %v, %v", exists, err)
	}
	// Run tries EVALSHA, gets NOSCRIPT and falls back to EVAL, which caches it.
	if err := script.Run(ctx, client, []string{"k"}, "v", 1000).Err(); err != nil {
		t.Fatalf("EVALSHA with NOSCRIPT fallback: %v", err)
	}
	if err := client.EvalSha(ctx, script.Hash(), []string{"k2"}, "v", 1000).Err(); err != nil {
		t.Fatalf("EVALSHA after EVAL: %v", err)
	}
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	if _, err := client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, "k")
		pttl = p.PTTL(ctx, "k")
		return nil
	}); err != nil {
		t.Fatalf("MULTI GET PTTL EXEC: %v", err)
	}
	if get.Val() != "v" || pttl.Val() <= 0 || pttl.Val() > time.Second {
		t.Errorf("MULTI GET PTTL EXEC = %q, %v", get.Val(), pttl.Val())
	}
}

func TestPublishFromScriptReachesSubscriber(t *testing.T) {
	_, client := start(t)
	ctx := testCtx(t)
	ps := client.Subscribe(ctx, "elector:{job}:events")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatalf("SUBSCRIBE: %v", err)
	}
	n, err := client.Eval(ctx, "return redis.call('PUBLISH', KEYS[1], ARGV[1])", []string{"elector:{job}:events"}, "released 0 v1:1:a:b").Int64()
	if err != nil || n != 1 {
		t.Fatalf("PUBLISH from a script = %d, %v; want 1 receiver", n, err)
	}
	select {
	case m := <-ps.Channel():
		if m.Payload != "released 0 v1:1:a:b" {
			t.Errorf("received %q", m.Payload)
		}
	case <-ctx.Done():
		t.Fatal("no message received")
	}
}

// TestLeaseOnDemo runs internal/lease against the demo server: what `elector demo` does.
func TestLeaseOnDemo(t *testing.T) {
	_, client := start(t)
	ctx := testCtx(t)
	a, err := leasekit.New(client, "demo", lease.Options{Identity: "pod-a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := leasekit.New(client, "demo", lease.Options{Identity: "pod-b"})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := b.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	ok, st, err := a.Acquire(ctx, 300*time.Millisecond)
	if err != nil || !ok {
		t.Fatalf("a.Acquire = %v, %v", ok, err)
	}
	first := st.Record
	if d := time.Since(time.UnixMicro(first.Token)); d < -2*time.Second || d > 2*time.Second {
		t.Errorf("first token %d is not the server time in microseconds (off by %v)", first.Token, d)
	}
	ok, st, err = b.Acquire(ctx, 300*time.Millisecond)
	if err != nil || ok || st.Record != first || st.TTL <= 0 || st.TTL > 300*time.Millisecond {
		t.Fatalf("b.Acquire while a holds = %v, %+v, %v", ok, st, err)
	}
	// a does not renew: the lease runs out in real time and b takes over.
	start := time.Now()
	for {
		ok, st, err = b.Acquire(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Since(start) > 1500*time.Millisecond {
			t.Fatalf("lease of 300ms not expired after %v", time.Since(start))
		}
		time.Sleep(st.TTL / 2)
	}
	second := st.Record
	if second.Token <= first.Token || second.Identity != "pod-b" {
		t.Errorf("second term %+v after %+v", second, first)
	}
	if renewed, err := a.Renew(ctx, first, time.Second); err != nil || renewed {
		t.Errorf("a.Renew of its expired term = %v, %v; want false", renewed, err)
	}
	if renewed, err := b.Renew(ctx, second, time.Second); err != nil || !renewed {
		t.Errorf("b.Renew = %v, %v; want true", renewed, err)
	}
	if released, err := b.Release(ctx, second); err != nil || !released {
		t.Errorf("b.Release = %v, %v; want true", released, err)
	}
	got, err := b.Get(ctx)
	if err != nil || got.Held {
		t.Errorf("Get after release = %+v, %v", got, err)
	}
	if last, err := client.Get(ctx, a.Keys().Token).Int64(); err != nil || last != second.Token {
		t.Errorf("last token = %d, %v; want %d", last, err, second.Token)
	}
	// The subscriber saw a's acquisition, b's acquisition and b's release.
	var kinds []string
	for len(kinds) < 3 {
		select {
		case ev := <-sub.Events():
			kinds = append(kinds, ev.Kind.String()+" "+ev.Record.Identity)
		case <-ctx.Done():
			t.Fatalf("events so far %v", kinds)
		}
	}
	if want := "acquired pod-a,acquired pod-b,released pod-b"; strings.Join(kinds, ",") != want {
		t.Errorf("events %v, want %s", kinds, want)
	}
}

func TestCloseAndContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(s.Addr())
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("Addr() = %q", s.Addr())
	}
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatalf("dial running server: %v", err)
	}
	_ = conn.Close()
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err != nil {
			break
		}
		_ = conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("server still accepts connections 5s after its context was cancelled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Close() // idempotent

	s2, err := Start(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	s2.Close()
	if conn, err := net.Dial("tcp", s2.Addr()); err == nil {
		_ = conn.Close()
		t.Error("server accepts connections after Close")
	}

	if _, err := Start(ctx, "127.0.0.1:0"); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a cancelled context = %v", err)
	}
	if _, err := Start(context.Background(), "256.0.0.1:0"); err == nil {
		t.Error("Start on an invalid address succeeded")
	}
}
