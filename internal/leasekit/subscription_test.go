package leasekit_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/internal/timing"
)

// expectClosed waits up to within for the Events channel of sub to be closed, skipping
// events.
func expectClosed(t *testing.T, sub *leasekit.Subscription, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	timeout := time.After(within)
	for {
		select {
		case _, open := <-sub.Events():
			if !open {
				return time.Since(start)
			}
		case <-timeout:
			t.Fatalf("Events still open %v after the connection failed", within)
		}
	}
}

// A subscription whose connection breaks ends, so that its owner knows it hears nothing and
// polls (package election does, then subscribes again).
func TestSubscriptionEndsWhenItsConnectionBreaks(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client(t)
	l := newLease(t, c, "job", "pod-a")
	sub, err := l.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if n, err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want the subscription's connection killed", n, err)
	}
	expectClosed(t, sub, 5*time.Second)
	if err := sub.Close(); err != nil {
		t.Fatalf("Close after the connection broke: %v", err)
	}
}

// An idle subscription is kept alive by pings (their answers are not events) and still
// delivers events after several health intervals; when the connection goes silent (a
// black-holed network, no error ever reported), the unanswered ping ends it within two
// intervals.
func TestSubscriptionPingsWhenIdleAndEndsWhenUnanswered(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for several health intervals")
	}
	ctx := context.Background()
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr())
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = viaProxy.Close() })
	observer := newLease(t, viaProxy, "job", "observer")
	holder := newLease(t, srv.Client(t), "job", "holder")

	sub, err := observer.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	select {
	case ev, open := <-sub.Events():
		t.Fatalf("idle subscription delivered %v (open %v) before anything was published", ev, open)
	case <-time.After(2*timing.HealthInterval + timing.HealthInterval/2):
	}
	term := mustAcquire(t, holder, time.Minute)
	expectEvent(t, sub, leasekit.Acquired, term)

	proxy.Blackhole(true)
	took := expectClosed(t, sub, 4*timing.HealthInterval)
	t.Logf("silent connection detected after %v (health interval %v)", took, timing.HealthInterval)
}

// A message of a known kind that does not parse is dropped and logged once per kind (a client
// outside the protocol); an unknown kind is dropped silently (a newer protocol); the events
// after them are delivered.
func TestSubscriptionLogsMessagesThatBreakTheProtocol(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l := newLease(t, c, "job", "pod-a")
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})
	ctx := klog.NewContext(context.Background(), logger)
	sub, err := l.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch := l.Keys().Events
	for _, p := range []string{"acquired x v1:5:i:a", "acquired 10 garbage", "renewed 10 v1:x", "future 1 v1:5:i:a"} {
		if err := c.Publish(ctx, ch, p).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Publish(ctx, ch, "released 0 v1:7:inst:pod-b").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-sub.Events():
		if ev.Kind != leasekit.Released || ev.Record.Token != 7 {
			t.Fatalf("first event delivered: %+v, want the release of token 7", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the valid event after the broken ones was not delivered")
	}
	mu.Lock()
	defer mu.Unlock()
	var acquired, renewed, other int
	for _, l := range lines {
		switch {
		case !strings.Contains(l, "breaks the protocol"):
			other++
		case strings.Contains(l, `"payload"="acquired`):
			acquired++
		case strings.Contains(l, `"payload"="renewed`):
			renewed++
		default:
			t.Errorf("logged: %s", l)
		}
	}
	if acquired != 1 || renewed != 1 {
		t.Errorf("logged %d acquired and %d renewed lines, want one of each (once per kind):\n%s", acquired, renewed, strings.Join(lines, "\n"))
	}
}
