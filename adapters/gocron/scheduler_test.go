package gocron

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	gocronv2 "github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/election"
)

// run is one execution of the test job.
type run struct {
	tick      int // which scheduled run: the last one due at at
	late      time.Duration
	scheduler string
	token     int64
	at        time.Time
}

// runs records the executions of one job on all schedulers. Every scheduler schedules the job
// at start + k × interval, so a tick number identifies one scheduled run across schedulers.
type runs struct {
	start    time.Time
	interval time.Duration
	mu       sync.Mutex
	list     []run
}

func (r *runs) add(scheduler string, token int64) {
	at := time.Now()
	// gocron schedules on the wall clock (its now() strips the monotonic reading): so do the
	// ticks, or a wall clock running fast (a host whose clock is being corrected) names
	// the run after a run still due a moment ago. Its timers never fire early by the clock
	// they were set by, but the wall clock may be stepped while one waits (make flake-hunt
	// steps it 5 ms every second): a run up to a tenth of an interval early by the wall clock
	// is still that run. A run that fires late belongs to the last scheduled run before it
	// (a run later than nine tenths of an interval would be misnamed).
	since := at.Round(0).Sub(r.start.Round(0))
	tick := int((since + r.interval/10) / r.interval)
	r.mu.Lock()
	r.list = append(r.list, run{tick: tick, scheduler: scheduler, token: token, at: at,
		late: since - time.Duration(tick)*r.interval})
	r.mu.Unlock()
}

func (r *runs) snapshot() []run {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]run(nil), r.list...)
}

// waitFor waits until n runs happened after from on schedulers other than the excluded
// ones, and returns all runs.
func (r *runs) waitFor(t *testing.T, from time.Time, n int, exclude ...string) []run {
	t.Helper()
	deadline := time.Now().Add(30*time.Second + time.Duration(n)*r.interval)
	for {
		list := r.snapshot()
		count := 0
		for _, x := range list {
			if !x.at.Before(from) && !slices.Contains(exclude, x.scheduler) {
				count++
			}
		}
		if count >= n {
			return list
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d runs happened", count, n)
		}
		time.Sleep(r.interval / 10)
	}
}

// firstRun returns the time of the first run by scheduler at or after from.
func firstRun(list []run, scheduler string, from time.Time) time.Time {
	for _, x := range list {
		if x.scheduler == scheduler && !x.at.Before(from) {
			return x.at
		}
	}
	return time.Time{}
}

// checkOnce fails the test if a scheduled run happened twice.
func checkOnce(t *testing.T, list []run) {
	t.Helper()
	by := map[int]run{}
	var late time.Duration
	for _, x := range list {
		late = max(late, x.late)
		if prev, dup := by[x.tick]; dup {
			t.Errorf("run %d happened twice: on %s at %v and on %s at %v",
				x.tick, prev.scheduler, prev.at.Format("15:04:05.000"), x.scheduler, x.at.Format("15:04:05.000"))
		}
		by[x.tick] = x
	}
	t.Logf("%d runs, the latest %v after its time", len(list), late)
	if t.Failed() {
		for _, x := range list {
			t.Logf("run %d on %s at %v (%v late), token %d", x.tick, x.scheduler, x.at.Format("15:04:05.000"), x.late, x.token)
		}
	}
}

// startScheduler starts a gocron scheduler with the job "tick" every r.interval from r.start.
func startScheduler(t *testing.T, r *runs, name string, token func() int64, opts ...gocronv2.SchedulerOption) {
	t.Helper()
	s, err := gocronv2.NewScheduler(opts...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.NewJob(gocronv2.DurationJob(r.interval),
		gocronv2.NewTask(func() { r.add(name, token()) }),
		gocronv2.WithName("tick"),
		gocronv2.WithStartAt(gocronv2.WithStartDateTime(r.start)))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Errorf("shut down scheduler %s: %v", name, err)
		}
	})
}

// Three schedulers with a Locker each: every scheduled run happens on exactly one of them,
// with a fencing token larger than the one of the run before.
func TestLockerThreeSchedulers(t *testing.T) {
	rc := startRedis(t)
	// MinHold (default: 500ms) must cover how much later than the first scheduler the others
	// try for the same run, and end before the next run: on a loaded machine with the race
	// detector, timers fire up to a few hundred milliseconds late.
	r := &runs{start: time.Now().Add(time.Second), interval: time.Second}
	for _, name := range []string{"s1", "s2", "s3"} {
		client := newClient(t, rc)
		if err := client.Ping(context.Background()).Err(); err != nil { // connect before the first run
			t.Fatal(err)
		}
		locker, err := NewLocker(client, LockerOptions{Identity: name})
		if err != nil {
			t.Fatal(err)
		}
		token := func() int64 {
			tok, ok := locker.Token("tick")
			if !ok {
				t.Errorf("%s runs the job without holding its lock", name)
			}
			return tok
		}
		startScheduler(t, r, name, token, gocronv2.WithDistributedLocker(locker))
	}
	list := r.waitFor(t, time.Time{}, 8)
	checkOnce(t, list)
	for i := 1; i < len(list); i++ {
		if list[i].tick != list[i-1].tick+1 {
			t.Errorf("run %d followed run %d: the runs between did not happen", list[i].tick, list[i-1].tick)
		}
		if list[i].token <= list[i-1].token {
			t.Errorf("run %d has token %d, not larger than run %d's %d", list[i].tick, list[i].token, list[i-1].tick, list[i-1].token)
		}
	}
	perScheduler := map[string]int{}
	for _, x := range list {
		perScheduler[x.scheduler]++
	}
	t.Logf("runs per scheduler: %v", perScheduler)
}

// Three schedulers with an Elector each: only the leader's scheduler runs the job. When the
// leader closes its Elector (ReleaseOnCancel), another takes over at once; when the next
// leader loses Redis, it stops running jobs at its renew deadline (1.5s) and the last one
// takes over when the lease expires (3s). No scheduled run happens twice.
func TestElectorThreeSchedulers(t *testing.T) {
	rc := startRedis(t)
	r := &runs{start: time.Now().Add(time.Second), interval: 200 * time.Millisecond}
	type replica struct {
		client *redis.Client
		el     *Elector
	}
	replicas := map[string]*replica{}
	for _, name := range []string{"s1", "s2", "s3"} {
		client := newClient(t, rc)
		el, err := NewElector(context.Background(), election.Config{
			Client:          client,
			LeaseName:       "scheduler",
			Identity:        name,
			LeaseDuration:   3 * time.Second,
			RenewDeadline:   1500 * time.Millisecond,
			RetryPeriod:     300 * time.Millisecond,
			ReleaseOnCancel: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = el.Close() })
		replicas[name] = &replica{client: client, el: el}
		token := func() int64 {
			tok := el.Token()
			if tok == 0 {
				t.Errorf("%s runs the job with no term", name)
			}
			return tok
		}
		startScheduler(t, r, name, token, gocronv2.WithDistributedElector(el))
	}
	leaderOf := func(list []run, from time.Time) (string, error) {
		leader := ""
		for _, x := range list {
			if x.at.Before(from) {
				continue
			}
			if leader != "" && x.scheduler != leader {
				return "", fmt.Errorf("runs on %s and %s", leader, x.scheduler)
			}
			leader = x.scheduler
		}
		return leader, nil
	}

	// Phase 1: one leader runs everything.
	list := r.waitFor(t, time.Time{}, 5)
	first, err := leaderOf(list, time.Time{})
	if err != nil {
		t.Fatalf("before any handover: %v", err)
	}
	if replicas[first].el.IsLeader(context.Background()) != nil {
		t.Fatalf("%s ran the job but its Elector says it does not lead", first)
	}
	for name, rep := range replicas {
		if err := rep.el.IsLeader(context.Background()); name != first && err == nil {
			t.Errorf("%s says it leads too", name)
		}
	}

	// Phase 2: the leader closes its Elector between two runs; its scheduler keeps running
	// but skips every run from then on.
	time.Sleep(r.interval / 3)
	closed := time.Now()
	if err := replicas[first].el.Close(); err != nil {
		t.Fatal(err)
	}
	list = r.waitFor(t, closed, 5, first)
	second, err := leaderOf(list, closed)
	if err != nil {
		t.Fatalf("after %s closed its Elector: %v", first, err)
	}
	if second == first {
		t.Fatalf("%s ran the job after it closed its Elector", first)
	}
	t.Logf("%s -> %s: first run %v after the close", first, second, firstRun(list, second, closed).Sub(closed))

	// Phase 3: the second leader loses Redis (its client is closed: no renewal, no release).
	// It stops at its renew deadline (1.5s); the third takes over at expiry (3s). A run that
	// gocron let start just before the deadline may be recorded a little later: only runs
	// from 1s after the deadline must all be the third's.
	lost := time.Now()
	_ = replicas[second].client.Close()
	list = r.waitFor(t, lost, 5, first, second)
	third, err := leaderOf(list, lost.Add(2500*time.Millisecond))
	if err != nil {
		t.Fatalf("after %s lost Redis: %v", second, err)
	}
	if third == first || third == second {
		t.Fatalf("%s ran the job after it stopped leading", third)
	}
	// Nobody could take over before the lease expired, 3s after the last renewal, which was
	// at most a retry period before the loss.
	took := firstRun(list, third, lost).Sub(lost)
	t.Logf("%s -> %s: first run %v after it lost Redis", second, third, took)
	if took < 2*time.Second {
		t.Errorf("%s ran the job %v after %s lost Redis, before the lease can have expired", third, took, second)
	}
	checkOnce(t, list)
}
