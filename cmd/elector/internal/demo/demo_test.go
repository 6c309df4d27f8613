package demo

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/elector/elector/cmd/elector/internal/demoredis"
	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/testing/wakeprobe"
)

// testConfig is a demo of replicas for d on the server at addr, as the CLI configures it.
func testConfig(addr string, replicas int, d time.Duration) Config {
	t := CallTimeout()
	return Config{
		Replicas: replicas,
		Duration: d,
		Redis:    redisclient.Config{Addrs: []string{addr}, Mode: redisclient.ModeStandalone, DialTimeout: t, ReadTimeout: t, WriteTimeout: t},
		Where:    "the test's server at " + addr,
		Logger:   logr.Discard(),
	}
}

// TestDemoHandovers runs the demo long enough for one crash and one graceful stop, and checks
// what the demo claims: the crash takeover comes just after the lease expired on the embedded
// server (which must expire keys in real time), the graceful handover in about a round trip,
// and the safety checks hold. It also checks that the demo leaves no goroutine behind.
func TestDemoHandovers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	srv, err := demoredis.Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cfg := testConfig(srv.Addr(), 3, demoFirstDisruption+demoInterval+time.Second) // a crash, then a graceful stop
	var out bytes.Buffer
	probe := wakeprobe.Start(t)
	start := time.Now()
	res, err := runDemo(ctx, &out, cfg)
	if err != nil {
		t.Fatal(err)
	}
	took, control := time.Since(start), probe.Stop()
	// The bounds below are what a wrong demo would show (a takeover a lease later, a
	// graceful handover at the expiry), above the same run's control: no latency bound.
	prompt := wakeprobe.Limit(control, 2*time.Second)
	t.Logf("demo of %v took %v; probe lag %v", cfg.Duration, took, control)
	t.Logf("demo output:\n%s", out.String())
	assertNoKeysLeft(t, srv.Addr())
	if took >= cfg.Duration+2*prompt {
		t.Errorf("a demo of %v took %v", cfg.Duration, took)
	}
	if len(res.failures) > 0 || res.overlaps != 0 || !res.tokensIncreasing || res.fencedStale != 0 {
		t.Fatalf("safety checks failed: %+v", res)
	}
	// An overloaded machine may add step-downs and takeovers; the disruptions must be there.
	kinds := map[string][]handover{}
	for _, h := range res.handovers {
		kinds[h.kind] = append(kinds[h.kind], h)
	}
	if len(kinds[kindFirst]) != 1 || len(kinds[kindCrash]) != 1 || len(kinds[kindGraceful]) != 1 {
		t.Fatalf("handovers %+v, want one first, one crash, one graceful", res.handovers)
	}
	crash := kinds[kindCrash][0]
	// Expected: a few milliseconds after expiry (one round trip); the bound is generous.
	if crash.afterExpiry < 0 || crash.afterExpiry >= prompt {
		t.Errorf("crash takeover %v after the lease expired, want just after", crash.afterExpiry)
	}
	if crash.gap < demoLeaseDuration-demoRetryPeriod-100*time.Millisecond || crash.gap >= demoLeaseDuration+prompt {
		t.Errorf("no leader for %v after a crash, want about the lease duration %v", crash.gap, demoLeaseDuration)
	}
	if g := kinds[kindGraceful][0]; g.gap >= prompt {
		t.Errorf("graceful handover took %v, want about a round trip", g.gap)
	}
	if res.fencedOK == 0 {
		t.Errorf("no fenced write was accepted")
	}
	for _, want := range []string{"CRASHES", "crash takeover from", "STOPS", "graceful handover from", "RESTARTS", "Summary", "PASS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestDemoDetectsNoExpiry runs the demo on a server whose keys never expire by themselves
// (miniredis without real-time expiry would be one): the crash takeover never comes, and the
// demo must say so and fail rather than report a failover that did not happen.
func TestDemoDetectsNoExpiry(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 7s")
	}
	ctx := context.Background()
	srv, err := demoredis.Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cfg := testConfig(srv.Addr(), 2, demoFirstDisruption+demoLeaseDuration+demoRestartDelay+3*time.Second)
	// Keep the lease from expiring: a stand-in for a server without real-time expiry.
	// Stopped, and waited for, before the server closes: a call it makes after the test
	// returned would log through a finished t (a panic).
	stop, persisting := make(chan struct{}), make(chan struct{})
	go func() { defer close(persisting); keepPersisting(t, srv.Addr(), stop) }()
	defer func() { close(stop); <-persisting }()
	var out bytes.Buffer
	res, err := runDemo(ctx, &out, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.failures) == 0 || !strings.Contains(out.String(), "no replica took over") || !strings.Contains(out.String(), "FAIL") {
		t.Errorf("the demo did not notice that the crashed leader's lease never expired:\n%s", out.String())
	}
}

// assertNoKeysLeft fails t if the demo left a key of its prefix on the server at addr: each
// run has a lease of its own, so a key left behind is one more for every run.
func assertNoKeysLeft(t *testing.T, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	keys, err := c.Keys(context.Background(), keyPrefix+":*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	if len(keys) != 0 {
		t.Errorf("the demo left keys behind: %q", keys)
	}
}

// keepPersisting removes the expiry of every demo lease on the server at addr until stop.
func keepPersisting(t *testing.T, addr string, stop <-chan struct{}) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		ctx := context.Background()
		keys, err := c.Keys(ctx, keyPrefix+":*:lease").Result()
		if err != nil {
			t.Logf("KEYS: %v", err)
			continue
		}
		for _, k := range keys {
			_ = c.Persist(ctx, k).Err()
		}
	}
}

// TestRunUnreachable checks that a demo whose Redis does not answer fails with an error
// naming the server, and prints nothing: no timeline without a Redis.
func TestRunUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there any more
	cfg := testConfig(addr, 2, time.Second)
	var out bytes.Buffer
	failures, err := Run(context.Background(), &out, cfg)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the test's server at "+addr) {
		t.Errorf("Run on a closed port: failures %v, err %v; want an error naming it", failures, err)
	}
	if out.Len() != 0 {
		t.Errorf("Run printed without a Redis:\n%s", out.String())
	}
}

// TestFmtDuration checks the three significant digits of the timeline and summary.
func TestFmtDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{2 * time.Second, "2.00s"},
		{1234 * time.Millisecond, "1.23s"},
		{456 * time.Millisecond, "456ms"},
		{45600 * time.Microsecond, "45.6ms"},
		{3890 * time.Microsecond, "3.89ms"},
		{870 * time.Microsecond, "870µs"},
		{-1500 * time.Millisecond, "-1.50s"},
		{0, "0µs"},
	} {
		if got := fmtDuration(tc.d); got != tc.want {
			t.Errorf("fmtDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestMedian checks the middle value, the upper one of an even count, and that the input
// keeps its order.
func TestMedian(t *testing.T) {
	in := []time.Duration{3, 1, 2}
	if got := median(in); got != 2 {
		t.Errorf("median(3, 1, 2) = %v, want 2", got)
	}
	if in[0] != 3 || in[1] != 1 {
		t.Errorf("median sorted its input: %v", in)
	}
	if got := median([]time.Duration{4, 1, 3, 2}); got != 3 {
		t.Errorf("median(4, 1, 3, 2) = %v, want 3 (the upper middle)", got)
	}
}
