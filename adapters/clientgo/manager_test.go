package clientgo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func TestMain(m *testing.M) {
	// controller-runtime logs through its global logger, and complains when none was set.
	log.SetLogger(klog.Background())
	os.Exit(m.Run())
}

// noAPIServer is a rest.Config for an API server that does not exist: nothing listens on
// port 1 of the loopback address. The managers below never need it: leader election runs
// on Redis, and nothing else they start talks to Kubernetes.
var noAPIServer = &rest.Config{Host: "http://127.0.0.1:1"}

// workers counts the leader-election runnables that are running across managers.
type workers struct {
	mu         sync.Mutex
	running    map[string]bool
	started    chan string
	violations []string
}

// runnable returns the work of manager id: it runs only while the manager leads.
func (w *workers) runnable(id string) manager.RunnableFunc {
	return func(ctx context.Context) error {
		w.mu.Lock()
		for other := range w.running {
			w.violations = append(w.violations, fmt.Sprintf("%s started while %s was running", id, other))
		}
		w.running[id] = true
		w.mu.Unlock()
		w.started <- id
		<-ctx.Done()
		w.mu.Lock()
		delete(w.running, id)
		w.mu.Unlock()
		return nil
	}
}

type mgr struct {
	id     string
	m      manager.Manager
	cancel context.CancelFunc
	done   chan error
}

// controller-runtime's manager, given a Lock through LeaderElectionResourceLockInterface,
// elects on Redis: its leader-election runnables run on one manager at a time, and with
// LeaderElectionReleaseOnCancel a stopping leader hands over at once.
func TestControllerRuntimeManager(t *testing.T) {
	rc := startRedis(t)
	w := &workers{running: map[string]bool{}, started: make(chan string, 8)}
	lease, renew, retry := 10*time.Second, 5*time.Second, 200*time.Millisecond
	var mgrs []*mgr
	for _, id := range []string{"pod-a", "pod-b", "pod-c"} {
		lock, err := New(newClient(t, rc), "manager", id, Options{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := manager.New(noAPIServer, manager.Options{
			LeaderElection:                      true,
			LeaderElectionID:                    "manager",
			LeaderElectionResourceLockInterface: lock,
			LeaderElectionReleaseOnCancel:       true,
			LeaseDuration:                       &lease,
			RenewDeadline:                       &renew,
			RetryPeriod:                         &retry,
			Metrics:                             metricsserver.Options{BindAddress: "0"},
			Logger:                              klog.Background().WithValues("manager", id),
		})
		if err != nil {
			t.Fatalf("manager.New: %v", err)
		}
		if err := m.Add(w.runnable(id)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		x := &mgr{id: id, m: m, cancel: cancel, done: make(chan error, 1)}
		go func() { x.done <- m.Start(ctx) }()
		t.Cleanup(func() { x.stop(t) })
		mgrs = append(mgrs, x)
	}

	waitStart := func(within time.Duration) string {
		t.Helper()
		select {
		case id := <-w.started:
			return id
		case <-time.After(within):
			t.Fatalf("no manager started its leader-election runnables within %v", within)
			return ""
		}
	}
	leader := waitStart(60 * time.Second)
	for _, x := range mgrs {
		select {
		case <-x.m.Elected():
			if x.id != leader {
				t.Errorf("manager %s says it was elected, but %s leads", x.id, leader)
			}
		case <-time.After(time.Second):
			if x.id == leader {
				t.Errorf("the leading manager %s never closed Elected()", x.id)
			}
		}
	}

	for range 2 {
		var x *mgr
		for _, m := range mgrs {
			if m.id == leader {
				x = m
			}
		}
		stopAt := time.Now()
		if err := x.stop(t); err != nil {
			t.Errorf("Start of the stopped leader %s returned %v", x.id, err)
		}
		next := waitStart(lease / 2) // a takeover at expiry would take 10s
		t.Logf("%s -> %s in %v", leader, next, time.Since(stopAt))
		if next == leader {
			t.Fatalf("%s led again after it stopped", next)
		}
		leader = next
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Error(v)
	}
}

// stop cancels the manager's Start and returns its result.
func (x *mgr) stop(t *testing.T) error {
	x.cancel()
	select {
	case err := <-x.done:
		x.done <- err // for the next caller (the test's cleanup)
		return err
	case <-time.After(60 * time.Second):
		t.Errorf("manager %s did not stop within 60s", x.id)
		return errors.New("timeout")
	}
}
