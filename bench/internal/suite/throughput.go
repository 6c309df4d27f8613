package suite

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/bench/internal/redisproc"
	"github.com/elector/elector/bench/internal/systems"
)

// Benchmarks of the lease primitive.
const (
	benchCycle = "acquire+release"
	benchRenew = "renew"
)

// ThroughputResult is one system in one throughput setting, over the rounds of a run.
type ThroughputResult struct {
	Bench       string // benchCycle or benchRenew
	Concurrency int    // goroutines, each on its own key
	System      string
	Note        string
	// Per round: operations per second, allocations, client CPU and Redis CPU per operation
	// (microseconds), and the ratio of operations per second to the raw floor of the same round.
	OpsPerSec, Allocs, ClientCPU, RedisCPU, Ratio []float64
}

// throughputSpec makes the operations of one system: one Op per goroutine, each doing
// perCall operations.
type throughputSpec struct {
	name, note string
	make       func(ctx context.Context, c redis.UniversalClient, bench string, conc, round int) (ops []systems.Op, perCall int, err error)
}

func primitiveSpec(p systems.Primitive, short string) throughputSpec {
	return throughputSpec{name: p.Name, make: func(ctx context.Context, c redis.UniversalClient, bench string, conc, round int) ([]systems.Op, int, error) {
		ops := make([]systems.Op, conc)
		for g := range ops {
			key := fmt.Sprintf("tp-%s-%s-%d-r%d-%d", short, bench[:5], conc, round, g)
			var err error
			if bench == benchCycle {
				ops[g], err = p.Cycle(c, key)
			} else {
				ops[g], err = p.Renew(ctx, c, key)
			}
			if err != nil {
				return nil, 0, err
			}
		}
		return ops, 1, nil
	}}
}

var batchSpec = throughputSpec{
	name: "elector Batch", note: "one goroutine, all leases in one pipeline (lease.Batch)",
	make: func(ctx context.Context, c redis.UniversalClient, bench string, conc, round int) ([]systems.Op, int, error) {
		keys := make([]string, conc)
		for i := range keys {
			keys[i] = fmt.Sprintf("tp-batch-%s-%d-r%d-%d", bench[:5], conc, round, i)
		}
		var op systems.Op
		var n int
		var err error
		if bench == benchCycle {
			op, n, err = systems.ElectorBatch(c, keys)
		} else {
			op, n, err = systems.ElectorBatchRenew(ctx, c, keys)
		}
		return []systems.Op{op}, n, err
	},
}

func runThroughput(ctx context.Context, cfg Config, srv *redisproc.Server, logf func(string, ...any)) ([]ThroughputResult, error) {
	specs := []throughputSpec{
		primitiveSpec(systems.Raw, "raw"),
		primitiveSpec(systems.Elector, "el"),
		primitiveSpec(systems.Redislock, "rl"),
		primitiveSpec(systems.Redsync, "rs"),
	}
	results := map[string]*ThroughputResult{}
	var order []string
	get := func(bench string, conc int, s throughputSpec) *ThroughputResult {
		k := fmt.Sprintf("%s/%d/%s", bench, conc, s.name)
		if results[k] == nil {
			results[k] = &ThroughputResult{Bench: bench, Concurrency: conc, System: s.name, Note: s.note}
			order = append(order, k)
		}
		return results[k]
	}
	for round := 0; round < cfg.ThroughputRounds; round++ {
		for _, bench := range []string{benchCycle, benchRenew} {
			for _, conc := range cfg.Concurrency {
				list := specs
				if conc > 1 {
					list = append(list[:len(list):len(list)], batchSpec)
				}
				// Rotate the order every round so that no system always runs first.
				n := len(list)
				var raw float64
				roundRes := make([]sample, n)
				for i := 0; i < n; i++ {
					j := (i + round) % n
					s, err := measure(ctx, srv, list[j], bench, conc, round, cfg.ThroughputDur)
					if err != nil {
						return nil, fmt.Errorf("%s %s, %d goroutines: %w", list[j].name, bench, conc, err)
					}
					roundRes[j] = s
				}
				raw = roundRes[0].opsPerSec
				for j, s := range roundRes {
					r := get(bench, conc, list[j])
					r.OpsPerSec = append(r.OpsPerSec, s.opsPerSec)
					r.Allocs = append(r.Allocs, s.allocs)
					r.ClientCPU = append(r.ClientCPU, s.clientCPU)
					r.RedisCPU = append(r.RedisCPU, s.redisCPU)
					r.Ratio = append(r.Ratio, s.opsPerSec/raw)
				}
			}
		}
		logf("  throughput round %d/%d", round+1, cfg.ThroughputRounds)
	}
	out := make([]ThroughputResult, 0, len(order))
	for _, k := range order {
		out = append(out, *results[k])
	}
	return out, nil
}

type sample struct {
	opsPerSec, allocs, clientCPU, redisCPU float64
}

// measure runs the operations of spec for dur, after a warm-up, on a client with one
// connection per goroutine.
func measure(ctx context.Context, srv *redisproc.Server, spec throughputSpec, bench string, conc, round int, dur time.Duration) (sample, error) {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: conc, MaxRetries: -1})
	defer c.Close()
	ops, perCall, err := spec.make(ctx, c, bench, conc, round)
	if err != nil {
		return sample{}, err
	}
	for _, op := range ops { // warm up: connections, scripts, caches
		for i := 0; i < 50; i++ {
			if err := op(ctx); err != nil {
				return sample{}, err
			}
		}
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := selfCPU()
	rcpu0, err := srv.CPU()
	if err != nil {
		return sample{}, err
	}
	start := time.Now()
	deadline := start.Add(dur)
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(ops))
	for _, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := int64(0)
			for time.Now().Before(deadline) {
				if err := op(ctx); err != nil {
					errs <- err
					return
				}
				n++
			}
			total.Add(n)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rcpu1, err := srv.CPU()
	if err != nil {
		return sample{}, err
	}
	cpu1 := selfCPU()
	runtime.ReadMemStats(&m1)
	close(errs)
	if err := <-errs; err != nil {
		return sample{}, err
	}
	n := float64(total.Load() * int64(perCall))
	if n == 0 {
		return sample{}, fmt.Errorf("no operation completed in %v", dur)
	}
	return sample{
		opsPerSec: n / elapsed.Seconds(),
		allocs:    float64(m1.Mallocs-m0.Mallocs) / n,
		clientCPU: float64(cpu1-cpu0) / float64(time.Microsecond) / n,
		redisCPU:  float64(rcpu1-rcpu0) / float64(time.Microsecond) / n,
	}, nil
}

// selfCPU returns the user and system CPU time this process used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
