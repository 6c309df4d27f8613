package gocron

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocronv2 "github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/election"
)

// This file ports gocron v2.21.2's own tests of its distributed modes (scheduler_test.go:
// TestScheduler_WithDistributed, TestScheduler_WithLocker_WithEventListeners) from their
// in-memory testElector and testLocker to this package's Elector and Locker on a real
// redis-server. The schedulers, jobs and assertions are gocron's; what changed:
//
//   - every scheduler has its own Elector or Locker (own client, own identity), as replicas do,
//     built in the goroutine that starts its scheduler, so that they all boot together;
//   - the refusals are counted by a wrapper around the real Elector or Locker (gocron's fakes
//     count their own), and the test waits until every scheduler decided its immediate run
//     before it shuts them down, instead of assuming that they did within a second;
//   - the job is due every 10s instead of every second, and the run is awaited for one
//     interval: a run that comes within it is the immediate one (WithStartImmediately), so
//     the meaning of gocron's one-second bound is kept on a loaded machine;
//   - no goroutine-leak check (go.uber.org/goleak is not a dependency; the Redis clients keep
//     goroutines until the test's cleanup).

// countingElector counts the runs that the real Elector refused.
type countingElector struct {
	*Elector
	refused *atomic.Int32
}

func (c countingElector) IsLeader(ctx context.Context) error {
	err := c.Elector.IsLeader(ctx)
	if err != nil {
		c.refused.Add(1)
	}
	return err
}

// countingLocker counts the runs that the real Locker refused.
type countingLocker struct {
	*Locker
	refused *atomic.Int32
}

func (c countingLocker) Lock(ctx context.Context, key string) (gocronv2.Lock, error) {
	lk, err := c.Locker.Lock(ctx, key)
	if err != nil {
		c.refused.Add(1)
	}
	return lk, err
}

// distributedInterval is the interval of the job of TestScheduler_WithDistributed.
const distributedInterval = 10 * time.Second

// options returns the scheduler and job options of one replica in a case of
// TestScheduler_WithDistributed.
type distributedCase struct {
	name     string
	count    int
	runCount int
	refusals int
	options  func(t *testing.T, client *redis.Client, identity string, refused *atomic.Int32) ([]gocronv2.SchedulerOption, []gocronv2.JobOption)
}

func newCountingElector(t *testing.T, client *redis.Client, identity string, refused *atomic.Int32) countingElector {
	t.Helper()
	el, err := NewElector(context.Background(), election.Config{
		Client:          client,
		LeaseName:       "distributed",
		Identity:        identity,
		LeaseDuration:   3 * time.Second,
		RenewDeadline:   2 * time.Second,
		RetryPeriod:     500 * time.Millisecond,
		ReleaseOnCancel: true,
	})
	if err != nil {
		t.Error(err)
		return countingElector{}
	}
	t.Cleanup(func() { _ = el.Close() })
	return countingElector{Elector: el, refused: refused}
}

func newCountingLocker(t *testing.T, client *redis.Client, identity string, refused *atomic.Int32) countingLocker {
	t.Helper()
	l, err := NewLocker(client, LockerOptions{Identity: identity})
	if err != nil {
		t.Error(err)
		return countingLocker{}
	}
	return countingLocker{Locker: l, refused: refused}
}

func TestScheduler_WithDistributed(t *testing.T) {
	tests := []distributedCase{
		{"3 schedulers with elector", 3, 1, 2,
			func(t *testing.T, c *redis.Client, id string, refused *atomic.Int32) ([]gocronv2.SchedulerOption, []gocronv2.JobOption) {
				return []gocronv2.SchedulerOption{gocronv2.WithDistributedElector(newCountingElector(t, c, id, refused))}, nil
			}},
		{"3 schedulers with locker", 3, 1, 2,
			func(t *testing.T, c *redis.Client, id string, refused *atomic.Int32) ([]gocronv2.SchedulerOption, []gocronv2.JobOption) {
				return []gocronv2.SchedulerOption{gocronv2.WithDistributedLocker(newCountingLocker(t, c, id, refused))}, nil
			}},
		{"3 schedulers and job with Distributed locker", 3, 1, 2,
			func(t *testing.T, c *redis.Client, id string, refused *atomic.Int32) ([]gocronv2.SchedulerOption, []gocronv2.JobOption) {
				return nil, []gocronv2.JobOption{gocronv2.WithDistributedJobLocker(newCountingLocker(t, c, id, refused))}
			}},
		{"3 schedulers and job with disabled Distributed locker", 3, 3, 0,
			func(t *testing.T, c *redis.Client, id string, refused *atomic.Int32) ([]gocronv2.SchedulerOption, []gocronv2.JobOption) {
				return []gocronv2.SchedulerOption{gocronv2.WithDistributedLocker(newCountingLocker(t, c, id, refused))},
					[]gocronv2.JobOption{gocronv2.WithDisabledDistributedJobLocker(true)}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runDistributedCase(t, tt) })
	}
}

// runDistributedCase starts tt.count schedulers together, each with a job that starts
// immediately and runs once, and checks that tt.runCount of them ran it and the others were
// refused by the Elector or Locker.
func runDistributedCase(t *testing.T, tt distributedCase) {
	rc := startRedis(t)
	jobsRan := make(chan string, 20)
	var refused atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := tt.count; i > 0; i-- {
		client := newClient(t, rc)
		id := fmt.Sprintf("s%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			schedOpts, extraJobOpts := tt.options(t, client, id, &refused)
			s, err := gocronv2.NewScheduler(append([]gocronv2.SchedulerOption{gocronv2.WithStopTimeout(time.Second)}, schedOpts...)...)
			if err != nil {
				t.Error(err)
				return
			}
			s.Start()
			jobOpts := append([]gocronv2.JobOption{
				gocronv2.WithStartAt(gocronv2.WithStartImmediately()),
				gocronv2.WithLimitedRuns(1),
			}, extraJobOpts...)
			_, err = s.NewJob(gocronv2.DurationJob(distributedInterval), gocronv2.NewTask(func() {
				time.Sleep(100 * time.Millisecond)
				jobsRan <- id
			}), jobOpts...)
			if err != nil {
				t.Error(err)
			}
			<-ctx.Done()
			if err := s.Shutdown(); err != nil {
				t.Errorf("shut down scheduler %s: %v", id, err)
			}
		}()
	}

	// Every scheduler decides its immediate run: tt.runCount run it, the others are refused.
	// A run is awaited for one interval: one that came later would be the second run.
	deadline := time.After(distributedInterval)
	var ran []string
	for len(ran) < tt.runCount || int(refused.Load()) < tt.refusals {
		select {
		case id := <-jobsRan:
			ran = append(ran, id)
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("after one interval (%v): %d runs %v, %d refusals; want %d runs, %d refusals",
				distributedInterval, len(ran), ran, refused.Load(), tt.runCount, tt.refusals)
		}
	}
	cancel()
	wg.Wait()
	for len(jobsRan) > 0 {
		ran = append(ran, <-jobsRan)
	}
	if len(ran) != tt.runCount || int(refused.Load()) != tt.refusals {
		t.Errorf("%d runs %v, %d refusals; want %d runs, %d refusals", len(ran), ran, refused.Load(), tt.runCount, tt.refusals)
	}
}

// TestScheduler_WithLocker_WithEventListeners: a run that the Locker refuses (its job lock is
// held by another replica) calls the AfterLockError listener with ErrLocked.
func TestScheduler_WithLocker_WithEventListeners(t *testing.T) {
	rc := startRedis(t)
	holder, err := NewLocker(newClient(t, rc), LockerOptions{Identity: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	held, err := holder.Lock(context.Background(), "report")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Unlock(context.Background()) }()
	locker, err := NewLocker(newClient(t, rc), LockerOptions{Identity: "s1"})
	if err != nil {
		t.Fatal(err)
	}

	listenerRunCh := make(chan error, 1)
	ran := make(chan struct{}, 1)
	s, err := gocronv2.NewScheduler(gocronv2.WithStopTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.NewJob(gocronv2.DurationJob(10*time.Minute),
		gocronv2.NewTask(func() { ran <- struct{}{} }),
		gocronv2.WithName("report"),
		gocronv2.WithStartAt(gocronv2.WithStartImmediately()),
		gocronv2.WithDistributedJobLocker(locker),
		gocronv2.WithEventListeners(gocronv2.AfterLockError(func(_ uuid.UUID, _ string, err error) {
			listenerRunCh <- err
		})),
		gocronv2.WithLimitedRuns(1))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer func() {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	}()
	select {
	case err := <-listenerRunCh:
		if !errors.Is(err, ErrLocked) {
			t.Errorf("AfterLockError got %v, want ErrLocked", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting for the AfterLockError listener")
	}
	select {
	case <-ran:
		t.Error("the job ran although another replica held its lock")
	default:
	}
}

// NewElector waits for a known leader at most RenewDeadline: with Redis unreachable it returns
// anyway, and the scheduler's runs are refused until this replica leads.
func TestNewElectorReturnsWithoutRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a port with nobody listening once closed
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	started := time.Now()
	el, err := NewElector(context.Background(), election.Config{
		Client: client, LeaseName: "unreachable", Identity: "s1",
		LeaseDuration: 3 * time.Second, RenewDeadline: time.Second, RetryPeriod: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = el.Close() })
	t.Logf("NewElector returned after %v with Redis unreachable", time.Since(started))
	if err := el.IsLeader(context.Background()); !errors.Is(err, ErrNotLeader) {
		t.Errorf("IsLeader = %v, want ErrNotLeader", err)
	}
}
