package suite

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/bench/internal/redisproc"
	"github.com/elector/elector/bench/internal/stats"
)

// Machine describes where a run happened.
type Machine struct {
	CPU          string
	CPUs         int
	GOMAXPROCS   int
	MemoryGiB    float64
	Kernel       string
	GoVersion    string
	RedisVersion string
	// LoadAvgStart and LoadAvgEnd are /proc/loadavg at the start and the end of the run: the
	// machine may be shared.
	LoadAvgStart, LoadAvgEnd string
	// PingMicros is the median round trip of PING on one connection, with its spread over 5
	// batches.
	PingMicros stats.Summary
}

func describeMachine(ctx context.Context, srv *redisproc.Server) (Machine, error) {
	m := Machine{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(), CPU: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %f kB", &kb); err == nil {
			m.MemoryGiB = kb / (1 << 20)
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	m.LoadAvgStart = loadAvg()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1})
	defer c.Close()
	info, err := redisproc.Info(ctx, c, "server")
	if err != nil {
		return m, err
	}
	m.RedisVersion = info["redis_version"]
	var batches []float64
	for b := 0; b < 5; b++ {
		const n = 500
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if err := c.Ping(ctx).Err(); err != nil {
				return m, fmt.Errorf("PING: %w", err)
			}
		}
		batches = append(batches, float64(time.Since(t0).Microseconds())/n)
	}
	m.PingMicros = stats.Summarize(batches)
	return m, nil
}

// loadAvg returns the 1, 5 and 15 minute load averages from /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
