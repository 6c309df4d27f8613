package main

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/elector/elector/internal/testing/redistest"
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	os.Exit(m.Run())
}

// noAPIServer is the rest.Config of an API server that does not exist (nothing listens on
// port 1). The managers below never call it: they elect on Redis, and their only runnable
// under leader election is the test's; the reconciler, which needs the API server, runs in
// the real-cluster e2e (test/k8s, TestControllerRuntimeHandover).
var noAPIServer = &rest.Config{Host: "http://127.0.0.1:1"}

// leaders records which managers run their leader-election runnables, and every overlap.
type leaders struct {
	mu         sync.Mutex
	running    map[string]bool
	violations []string
	started    chan string
}

func (l *leaders) runnable(pod string) manager.RunnableFunc {
	return func(ctx context.Context) error {
		l.mu.Lock()
		for other := range l.running {
			l.violations = append(l.violations, pod+" started leading while "+other+" led")
		}
		l.running[pod] = true
		l.mu.Unlock()
		l.started <- pod
		<-ctx.Done()
		l.mu.Lock()
		delete(l.running, pod)
		l.mu.Unlock()
		return nil
	}
}

// Two managers built by newManager with --lock=redis, against a real redis-server: one leads;
// cancelled, it releases (LeaderElectionReleaseOnCancel) and the other leads, long before the
// lease could have expired.
func TestElectionOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	l := &leaders{running: map[string]bool{}, started: make(chan string, 4)}
	c := config{name: "example", namespace: "default", lock: "redis", probeAddr: "0",
		leaseDuration: 8 * time.Second, renewDeadline: 4 * time.Second, retryPeriod: 200 * time.Millisecond}
	cancels := map[string]context.CancelFunc{}
	dones := map[string]chan error{}
	for _, pod := range []string{"pod-a", "pod-b"} {
		rc := srv.Client(t)
		c := c
		c.identity = pod
		mgr, err := newManager(noAPIServer, c, redis.NewClient(rc.Options()))
		if err != nil {
			t.Fatal(err)
		}
		if err := mgr.Add(l.runnable(pod)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		cancels[pod], dones[pod] = cancel, done
		t.Cleanup(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop", pod)
			}
		})
	}
	wait := func(within time.Duration) string {
		t.Helper()
		select {
		case pod := <-l.started:
			return pod
		case <-time.After(within):
			t.Fatalf("no manager led within %v", within)
			return ""
		}
	}
	leader := wait(10 * c.leaseDuration)
	t.Logf("%s leads", leader)
	stopAt := time.Now()
	cancels[leader]()
	if err := <-dones[leader]; err != nil {
		t.Errorf("the cancelled leader's Start: %v", err)
	}
	dones[leader] <- nil // for the cleanup
	next := wait(10 * c.leaseDuration)
	t.Logf("%s -> %s in %v (lease %v)", leader, next, time.Since(stopAt), c.leaseDuration)
	if next == leader {
		t.Fatalf("%s led again after it stopped", next)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.violations {
		t.Error(v)
	}
}

// Every --lock builds a manager; a wrong one, or Redis missing, is refused.
func TestNewManagerLocks(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rc.Close()
	c := config{name: "example", namespace: "default", identity: "pod-a", probeAddr: "0",
		leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second}
	for _, tc := range []struct {
		lock string
		rc   *redis.Client
		ok   bool
	}{{"redis", rc, true}, {"lease", nil, true}, {"lease+redis", rc, true}, {"redis", nil, false}, {"lease+redis", nil, false}, {"configmaps", rc, false}} {
		c := c
		c.lock = tc.lock
		_, err := newManager(noAPIServer, c, tc.rc)
		if (err == nil) != tc.ok {
			t.Errorf("--lock=%s (redis %v): %v", tc.lock, tc.rc != nil, err)
		}
	}
}
