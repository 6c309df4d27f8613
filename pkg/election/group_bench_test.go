package election_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/election"
)

// BenchmarkGroup10k runs 3 Groups of 10,000 leases with client-go's default timing (15s,
// 10s, 2s) in this process against one real Redis, waits until the leases are spread, then
// measures a steady-state window. Run it once:
//
//	go test -run '^$' -bench Group10k -benchtime 1x ./pkg/election
//
// Reported: CPU per replica in % of one core, Redis commands per second (INFO
// commandstats), Go heap per replica, and the time from start to a ±10% spread.
func BenchmarkGroup10k(b *testing.B) {
	const k, replicas = 10000, 3
	window := 20 * time.Second
	srv := redistest.Start(b)
	admin := srv.Client(b)
	names := make([]string, k)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%05d", i)
	}
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		var groups []*election.Group
		done := make(chan error, replicas)
		start := time.Now()
		for i := 0; i < replicas; i++ {
			client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
			defer client.Close()
			g, err := election.NewGroup(election.GroupConfig{
				Client: client, Group: "bench", Identity: fmt.Sprintf("pod-%d", i), Leases: names,
				Callbacks: election.GroupCallbacks{
					OnStartedLeading: func(ctx context.Context, _ string) { <-ctx.Done() },
					OnStoppedLeading: func(string) {},
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			groups = append(groups, g)
			go func() { done <- g.Run(ctx) }()
		}
		for {
			counts, total := []int{}, 0
			for _, g := range groups {
				n := len(g.Held())
				counts, total = append(counts, n), total+n
			}
			ok := total == k
			for _, n := range counts {
				ok = ok && float64(n) >= 0.9*k/replicas && float64(n) <= 1.1*k/replicas
			}
			if ok {
				break
			}
			if time.Since(start) > 2*time.Minute {
				b.Fatalf("not spread after 2 minutes: %v", counts)
			}
			time.Sleep(50 * time.Millisecond)
		}
		settle := time.Since(start)
		// The steady state: every follower tried each of the others' leases once at its share
		// and parked it (follow), within a LeaseDuration of the spread; the leases the spread
		// unparked came due again.
		time.Sleep(4 * timing.DefaultLeaseDuration)

		admin.ConfigResetStat(context.Background())
		runtime.GC()
		cpu0, wall0, rcpu0 := cpuTime(), time.Now(), redisCPU(b, admin)
		time.Sleep(window)
		cpu, wall, rcpu := cpuTime()-cpu0, time.Since(wall0), redisCPU(b, admin)-rcpu0
		scripts, all := commandCalls(b, admin)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)

		cancel()
		for range groups {
			<-done
		}
		b.ReportMetric(100*cpu.Seconds()/wall.Seconds()/replicas, "cpu%/replica")
		b.ReportMetric(100*rcpu.Seconds()/wall.Seconds(), "redis-cpu%")
		b.ReportMetric(float64(scripts)/wall.Seconds(), "script-calls/s")
		b.ReportMetric(float64(all)/wall.Seconds(), "redis-cmds/s")
		b.ReportMetric(float64(ms.HeapInuse)/replicas/(1<<20), "heap-MB/replica")
		b.ReportMetric(settle.Seconds(), "s-to-spread")
	}
}

// cpuTime returns the user+system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// commandCalls returns the script calls (EVALSHA, EVAL) and all commands counted by INFO
// commandstats, which include those run inside scripts; INFO and CONFIG are left out.
func commandCalls(b *testing.B, c *redis.Client) (scripts, all int) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") || strings.HasPrefix(line, "cmdstat_config|") {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		all += n
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			scripts += n
		}
	}
	return scripts, all
}

// redisCPU returns the server's used_cpu_sys + used_cpu_user (INFO cpu): what a shared Redis
// pays for the Groups.
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
