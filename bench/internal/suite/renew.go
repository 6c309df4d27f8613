package suite

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/bench/internal/redisproc"
	"github.com/elector/elector/bench/internal/systems"
)

// RenewResult is the cost of one renewal by a leading pkg/election Elector (its timers,
// contexts, goroutine, metrics-free logging and the lease call), per window.
type RenewResult struct {
	Timing systems.Timing
	// Per window: renewals, and per renewal: allocations, CPU of this process and of Redis in
	// microseconds.
	Renewals                                     []float64
	AllocsPerRenew, ClientCPUMicros, RedisMicros []float64
}

func runRenewCost(ctx context.Context, cfg Config, srv *redisproc.Server) (RenewResult, error) {
	t := cfg.RenewTiming
	res := RenewResult{Timing: t}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	var renewals atomic.Int64
	started := make(chan struct{}, 1)
	r, err := systems.ElectorKind.New(systems.ReplicaConfig{
		Client: c, Lease: "renew-cost", Identity: "leader", Timing: t, ReleaseOnCancel: true,
		Hooks: systems.Hooks{
			Started: func(string) { started <- struct{}{} },
			Renewed: func(time.Time) { renewals.Add(1) },
		},
	})
	if err != nil {
		return res, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		return res, fmt.Errorf("the elector did not lead")
	}
	if err := sleepCtx(ctx, 50*t.RetryPeriod); err != nil {
		return res, err
	}
	const windows = 3
	for w := 0; w < windows; w++ {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		n0 := renewals.Load()
		cpu0 := selfCPU()
		rcpu0, err := srv.CPU()
		if err != nil {
			return res, err
		}
		if err := sleepCtx(ctx, cfg.RenewDur/windows); err != nil {
			return res, err
		}
		rcpu1, err := srv.CPU()
		if err != nil {
			return res, err
		}
		cpu1 := selfCPU()
		n := float64(renewals.Load() - n0)
		runtime.ReadMemStats(&m1)
		select {
		case err := <-done:
			return res, fmt.Errorf("the elector stopped leading (renewals timed out on a busy machine?): %v", err)
		default:
		}
		if n == 0 {
			return res, fmt.Errorf("no renewal in %v", cfg.RenewDur/windows)
		}
		res.Renewals = append(res.Renewals, n)
		res.AllocsPerRenew = append(res.AllocsPerRenew, float64(m1.Mallocs-m0.Mallocs)/n)
		res.ClientCPUMicros = append(res.ClientCPUMicros, float64(cpu1-cpu0)/float64(time.Microsecond)/n)
		res.RedisMicros = append(res.RedisMicros, float64(rcpu1-rcpu0)/float64(time.Microsecond)/n)
	}
	return res, nil
}
