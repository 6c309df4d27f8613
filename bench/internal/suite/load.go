package suite

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/bench/internal/redisproc"
	"github.com/elector/elector/bench/internal/systems"
)

// LoadResult is the load that one leader and Followers idle followers put on Redis.
type LoadResult struct {
	System    string
	Followers int
	// Per measurement window, per second: commands sent by clients (MONITOR, script-internal
	// calls not counted), all commands Redis counted (INFO commandstats, script-internal calls
	// included), Redis CPU and the bench process's CPU (leader, followers, Go runtime), in ms.
	ClientCmds, AllCmds, RedisCPU, BenchCPU []float64
	// ByCommand is the client commands per second of the last window, by command name.
	ByCommand map[string]float64
	// Bound is the target: 1/RetryPeriod + Followers/LeaseDuration commands per second, plus
	// the candidate registry's heartbeats, 3 per LeaseDuration from each replica (leader too).
	Bound float64
}

func runLoad(ctx context.Context, cfg Config, srv *redisproc.Server, logf func(string, ...any)) ([]LoadResult, error) {
	mon, err := redisproc.StartMonitor(srv.Addr(), redisproc.ByName)
	if err != nil {
		return nil, err
	}
	defer mon.Close()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1})
	defer admin.Close()
	t := cfg.LoadTiming
	var out []LoadResult
	for _, n := range cfg.LoadFollowers {
		for ki, kind := range systems.Kinds() {
			res := LoadResult{System: kind.Name, Followers: n,
				Bound: 1/t.RetryPeriod.Seconds() + float64(n+3*(n+1))/t.LeaseDuration.Seconds()}
			if err := measureLoad(ctx, cfg, srv, admin, mon, kind, fmt.Sprintf("load-%d-%d", ki, n), n, &res); err != nil {
				return nil, fmt.Errorf("%s with %d followers: %w", kind.Name, n, err)
			}
			logf("  load %s, %d followers: %.2f client commands/s", kind.Name, n, res.ClientCmds[len(res.ClientCmds)-1])
			out = append(out, res)
		}
	}
	return out, nil
}

func measureLoad(ctx context.Context, cfg Config, srv *redisproc.Server, admin *redis.Client, mon *redisproc.Monitor[string], kind systems.Kind, leaseName string, n int, res *LoadResult) error {
	t := cfg.LoadTiming
	started := make(chan int, n+1)
	type member struct {
		client *redis.Client
		cancel context.CancelFunc
		done   chan error
	}
	var members []*member
	defer func() {
		for _, m := range members {
			m.cancel()
		}
		for _, m := range members {
			<-m.done
			_ = m.client.Close()
		}
	}()
	add := func(i int) error {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		r, err := kind.New(systems.ReplicaConfig{
			Client: c, Lease: leaseName, Identity: fmt.Sprintf("replica-%d", i), Timing: t, ReleaseOnCancel: true,
			Hooks: systems.Hooks{Started: func(string) { started <- i }},
		})
		if err != nil {
			_ = c.Close()
			return err
		}
		rctx, cancel := context.WithCancel(ctx)
		m := &member{client: c, cancel: cancel, done: make(chan error, 1)}
		members = append(members, m)
		go func() { m.done <- r.Run(rctx) }()
		return nil
	}
	if err := add(0); err != nil {
		return err
	}
	select {
	case <-started:
	case <-time.After(10*t.LeaseDuration + 5*time.Second):
		return fmt.Errorf("the first replica did not lead")
	}
	for i := 1; i <= n; i++ {
		if err := add(i); err != nil {
			return err
		}
	}
	if err := sleepCtx(ctx, cfg.LoadSettle); err != nil {
		return err
	}
	for w := 0; w < cfg.LoadWindows; w++ {
		mon.Take()
		cs0, err := redisproc.CommandStats(ctx, admin)
		if err != nil {
			return err
		}
		rcpu0, err := srv.CPU()
		if err != nil {
			return err
		}
		cpu0 := selfCPU()
		t0 := time.Now()
		if err := sleepCtx(ctx, cfg.LoadWindow); err != nil {
			return err
		}
		secs := time.Since(t0).Seconds()
		cpu1 := selfCPU()
		rcpu1, err := srv.CPU()
		if err != nil {
			return err
		}
		cs1, err := redisproc.CommandStats(ctx, admin)
		if err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond) // let MONITOR lines of the window arrive
		counts := mon.Take()
		var client, all float64
		by := map[string]float64{}
		for name, c := range counts {
			if name == "info" {
				continue // the bench's own reads
			}
			client += float64(c)
			by[name] = float64(c) / secs
		}
		for name, c := range cs1 {
			if name == "info" {
				continue
			}
			all += float64(c - cs0[name])
		}
		if len(started) > 0 {
			return fmt.Errorf("leadership changed during the measurement")
		}
		res.ClientCmds = append(res.ClientCmds, client/secs)
		res.AllCmds = append(res.AllCmds, all/secs)
		res.RedisCPU = append(res.RedisCPU, ms(rcpu1-rcpu0)/secs)
		res.BenchCPU = append(res.BenchCPU, ms(cpu1-cpu0)/secs)
		res.ByCommand = by
	}
	return nil
}
