package main

import (
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/elector/elector/internal/testing/outbuf"
	"github.com/elector/elector/internal/testing/redistest"
)

// Three replicas share 12 tenants: every tenant's job runs, and each replica runs some.
func TestShardedJobsExample(t *testing.T) {
	srv := redistest.Start(t)
	out := &outbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, id := range []string{"pod-a", "pod-b", "pod-c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx, []string{"--redis-addr", srv.Addr(), "--identity", id, "--every", "50ms", "--lease", "600ms"}, out); err != nil {
				t.Errorf("%s: %v", id, err)
			}
		}()
	}
	job := regexp.MustCompile(`(?m)^(pod-.): job #\d+ of (tenant-\d\d)`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		seen, by := map[string]bool{}, map[string]bool{}
		for _, m := range job.FindAllStringSubmatch(out.String(), -1) {
			by[m[1]], seen[m[2]] = true, true
		}
		if len(seen) == 12 && len(by) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenants run: %d of 12, replicas working: %d of 3\n%s", len(seen), len(by), out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
}
