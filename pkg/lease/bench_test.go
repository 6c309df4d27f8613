package lease_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	c := redistest.Start(b).Client(b)
	l := newLease(b, c, "bench", "pod-a")
	b.ReportAllocs()
	for b.Loop() {
		ok, st, err := l.Acquire(ctx, 10*time.Second)
		if err != nil || !ok {
			b.Fatalf("Acquire = %v, %v", ok, err)
		}
		if ok, err := l.Release(ctx, st.Record); err != nil || !ok {
			b.Fatalf("Release = %v, %v", ok, err)
		}
	}
}

func BenchmarkRenew(b *testing.B) {
	ctx := context.Background()
	c := redistest.Start(b).Client(b)
	l := newLease(b, c, "bench", "pod-a")
	term := mustAcquire(b, l, 10*time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := l.Renew(ctx, term, 10*time.Second); err != nil || !ok {
			b.Fatalf("Renew = %v, %v", ok, err)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	c := redistest.Start(b).Client(b)
	l := newLease(b, c, "bench", "pod-a")
	term := mustAcquire(b, l, time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		st, err := l.Get(ctx)
		if err != nil || st.Record != term {
			b.Fatalf("Get = %+v, %v", st, err)
		}
	}
}

// BenchmarkServerTime measures what each command costs Redis itself: the usec that INFO
// commandstats adds up for the command, per call, as redis-µs/op. It shows where the time of
// an acquire+release goes on the server, against the floor's SET NX PX and compare-and-DEL:
//
//	go test -run '^$' -bench ServerTime -count 5 ./pkg/lease
func BenchmarkServerTime(b *testing.B) {
	ctx := context.Background()
	c := redistest.Start(b).Client(b)
	l := newLease(b, c, "bench", "pod-a")
	compareAndDel := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	empty := redis.NewScript(`return 1`)
	var term lease.Record
	for _, bc := range []struct {
		name  string
		stat  string // the commandstats entry that op adds to
		setup func() // before every op, untimed and uncounted (the stats are read after it)
		op    func() error
	}{
		{"op=empty-script", "evalsha", nil, func() error { return empty.Run(ctx, c, nil).Err() }},
		{"op=set-nx-px", "set", func() { c.Del(ctx, "k") }, func() error { return c.SetNX(ctx, "k", "v", 10*time.Second).Err() }},
		{"op=compare-and-del", "evalsha", func() { c.Set(ctx, "k", "v", 0) }, func() error { return compareAndDel.Run(ctx, c, []string{"k"}, "v").Err() }},
		{"op=acquire", "evalsha", func() {
			if term.Token != 0 {
				_, _ = l.Release(context.WithoutCancel(ctx), term)
			}
		}, func() error {
			_, st, err := l.Acquire(ctx, 10*time.Second)
			term = st.Record
			return err
		}},
		{"op=release", "evalsha", func() { term = mustAcquire(b, l, 10*time.Second) }, func() error {
			_, err := l.Release(ctx, term)
			return err
		}},
		{"op=renew", "evalsha", func() {
			if st, err := l.Get(ctx); err != nil || !st.Held {
				term = mustAcquire(b, l, 10*time.Second)
			}
		}, func() error {
			_, err := l.Renew(ctx, term, 10*time.Second)
			return err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var usec, calls float64
			for b.Loop() {
				b.StopTimer()
				if bc.setup != nil {
					bc.setup()
				}
				u0, c0 := commandStat(b, c, bc.stat)
				b.StartTimer()
				if err := bc.op(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				u1, c1 := commandStat(b, c, bc.stat)
				usec, calls = usec+u1-u0, calls+c1-c0
				b.StartTimer()
			}
			b.ReportMetric(usec/calls, "redis-µs/op")
		})
	}
}

// commandStat returns the total usec and calls of one command in INFO commandstats.
func commandStat(b *testing.B, c *redis.Client, cmd string) (usec, calls float64) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "usec":
				usec = f
			case "calls":
				calls = f
			}
		}
	}
	return usec, calls
}
