package election_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// evictionRun is one Elector ("job", identity "a") run against srv with its metrics, its
// /leader handler and its log lines (verbosity 2) at hand.
type evictionRun struct {
	e   *election.Elector
	reg *prometheus.Registry
	mu  sync.Mutex
	log []string
}

func runForEviction(t *testing.T, client redis.UniversalClient) *evictionRun {
	t.Helper()
	r := &evictionRun{reg: prometheus.NewRegistry()}
	m, err := election.NewMetrics(r.reg)
	if err != nil {
		t.Fatal(err)
	}
	r.e, err = election.New(election.Config{
		Client: client, LeaseName: "job", Identity: "a", Metrics: m, ReleaseOnCancel: true,
		// Renewals every 10 s: the fill below runs between two of them.
		LeaseDuration: 30 * time.Second, RenewDeadline: 20 * time.Second, RetryPeriod: 10 * time.Second,
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context) { <-ctx.Done() },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	logger := funcr.New(func(prefix, args string) {
		r.mu.Lock()
		r.log = append(r.log, args)
		r.mu.Unlock()
	}, funcr.Options{Verbosity: 2})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan struct{})
	go func() { defer close(done); _ = r.e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// logged returns the log lines that contain s.
func (r *evictionRun) logged(s string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.log {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// gauge returns elector_redis_eviction_risk{name="job"}, and false while it is absent.
func (r *evictionRun) gauge(t *testing.T) (float64, bool) {
	fams, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "elector_redis_eviction_risk" {
			for _, m := range f.GetMetric() {
				if m.GetLabel()[0].GetValue() == "job" {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// leaderJSON returns the /leader body as a map.
func (r *evictionRun) leaderJSON(t *testing.T) map[string]any {
	w := httptest.NewRecorder()
	r.e.LeaderHandler().ServeHTTP(w, httptest.NewRequest("GET", "/leader", nil))
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("/leader: %v: %s", err, w.Body.String())
	}
	return body
}

// limitMemory sets maxmemory to 1 MB above what Redis uses now, and policy.
func limitMemory(t *testing.T, admin *redis.Client, policy string) {
	t.Helper()
	limitMemoryWith(t, admin, "CONFIG", policy)
}

// limitMemoryWith is limitMemory with CONFIG renamed to config.
func limitMemoryWith(t *testing.T, admin *redis.Client, config, policy string) {
	t.Helper()
	ctx := context.Background()
	info, err := admin.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	used := infoInt(t, info, "used_memory")
	for k, v := range map[string]string{"maxmemory": strconv.FormatInt(used+1<<20, 10), "maxmemory-policy": policy} {
		if err := admin.Do(ctx, config, "SET", k, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func infoInt(t *testing.T, info, field string) int64 {
	t.Helper()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("INFO has no %s", field)
	return 0
}

// fill writes keys without an expiry (the application's data) until the lease key is gone or
// Redis refuses a write for want of memory (the write that evicts the last key with an expiry
// may be refused too: it frees too little). It returns the writes sent, whether the lease key
// was evicted, and the refusal.
func fill(t *testing.T, admin *redis.Client, leaseKey string) (writes int, evicted bool, oom error) {
	ctx := context.Background()
	value := strings.Repeat("x", 10<<10)
	for i := 1; i <= 10000; i++ {
		oom = admin.Set(ctx, fmt.Sprintf("app:%d", i), value, 0).Err()
		n, err := admin.Exists(ctx, leaseKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 || oom != nil {
			return i, n == 0, oom
		}
	}
	t.Fatal("10000 keys of 10 KB written under a 1 MB limit: neither evicted nor refused")
	return 0, false, nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
	}
}

// TestEvictionRiskFlaggedAndReal (issue 23, item 5): under maxmemory with volatile-lru, Run
// warns with the fix, elector_redis_eviction_risk is 1 and /leader says so; and the risk is
// real: once the application's data fills the memory, Redis evicts the lease key (the only
// key with an expiry) while its holder leads, and a second replica acquires.
func TestEvictionRiskFlaggedAndReal(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	limitMemory(t, admin, "volatile-lru")
	r := runForEviction(t, srv.Client(t))
	waitFor(t, "leader", r.e.IsLeader)
	waitFor(t, "eviction gauge", func() bool { _, ok := r.gauge(t); return ok })
	if v, _ := r.gauge(t); v != 1 {
		t.Errorf("elector_redis_eviction_risk = %v under volatile-lru, want 1", v)
	}
	if w := r.logged("Warning: Redis may evict the lease keys"); len(w) != 1 || !strings.Contains(w[0], "noeviction") {
		t.Errorf("want one warning naming the fix, got %q", w)
	}
	if b := r.leaderJSON(t); b["evictionPolicy"] != "volatile-lru" || b["evictionRisk"] != true {
		t.Errorf("/leader = %v, want evictionPolicy volatile-lru and evictionRisk true", b)
	}

	leaseKey := leasewire.KeysFor(lease.DefaultPrefix, "job").Lease
	n, evicted, oom := fill(t, admin, leaseKey)
	if !evicted {
		t.Fatalf("write %d refused and the lease key kept: %v", n, oom)
	}
	info, err := admin.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	b, err := leasekit.New(srv.Client(t), "job", lease.Options{Identity: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 20; i++ { // room for b's record
		if err := admin.Del(context.Background(), fmt.Sprintf("app:%d", i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	won, _, err := b.Acquire(context.Background(), 30*time.Second)
	if err != nil || !won {
		t.Fatalf("after the eviction, replica b's acquire: won %v, err %v", won, err)
	}
	leading := r.e.IsLeader()
	t.Logf("lease key evicted at write %d of 10 KB (evicted_keys %d, write refused: %v); replica b acquired; a still leads: %v",
		n, infoInt(t, info, "evicted_keys"), oom != nil, leading)
}

// TestNoEvictionNotFlagged: with maxmemory-policy noeviction the same setup flags nothing
// (gauge 0, evictionRisk false, no warning), and the fill ends in OOM with the lease intact.
func TestNoEvictionNotFlagged(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	limitMemory(t, admin, "noeviction")
	r := runForEviction(t, srv.Client(t))
	waitFor(t, "leader", r.e.IsLeader)
	waitFor(t, "eviction gauge", func() bool { _, ok := r.gauge(t); return ok })
	if v, _ := r.gauge(t); v != 0 {
		t.Errorf("elector_redis_eviction_risk = %v under noeviction, want 0", v)
	}
	if w := r.logged("Warning:"); len(w) != 0 {
		t.Errorf("warning under noeviction: %q", w)
	}
	if b := r.leaderJSON(t); b["evictionPolicy"] != "noeviction" || b["evictionRisk"] != false {
		t.Errorf("/leader = %v, want evictionPolicy noeviction and evictionRisk false", b)
	}
	n, evicted, oom := fill(t, admin, leasewire.KeysFor(lease.DefaultPrefix, "job").Lease)
	if evicted || oom == nil || !strings.Contains(oom.Error(), "OOM") {
		t.Fatalf("fill under noeviction: %d writes, lease key evicted %v, err %v; want an OOM refusal with the lease key kept", n, evicted, oom)
	}
}

// TestEvictionCheckWithoutConfig: with CONFIG renamed (as managed services do), the policy
// still comes from INFO memory; a default user refused both is not flagged and logs no error;
// a named ACL user (README's) is not checked at all, so that ACL LOG stays empty.
func TestEvictionCheckWithoutConfig(t *testing.T) {
	const renamed = "config-9f2c"
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		flagged bool
		setup   func(t *testing.T, srv *redistest.Server, admin *redis.Client) redis.UniversalClient
	}{
		{"INFO", true, func(t *testing.T, srv *redistest.Server, admin *redis.Client) redis.UniversalClient {
			return srv.Client(t)
		}},
		{"refused", false, func(t *testing.T, srv *redistest.Server, admin *redis.Client) redis.UniversalClient {
			if err := admin.Do(ctx, "ACL", "SETUSER", "default", "-info").Err(); err != nil {
				t.Fatal(err)
			}
			return srv.Client(t)
		}},
		{"ACL user", false, func(t *testing.T, srv *redistest.Server, admin *redis.Client) redis.UniversalClient {
			args := []any{"ACL", "SETUSER", "elector", "on", ">pw"}
			for _, a := range strings.Fields("resetkeys resetchannels ~elector:* &elector:* -@all +evalsha +eval +get +set +pexpire +pttl +del +time +publish +multi +exec +subscribe +ping") {
				args = append(args, a)
			}
			if err := admin.Do(ctx, args...).Err(); err != nil {
				t.Fatal(err)
			}
			opts := srv.Options()
			opts.Username, opts.Password = "elector", "pw"
			// As the CLI's client builder (internal/redisclient): no CLIENT SETINFO on connect,
			// which README's user may not run (Redis 7.2+ would log its refusal in ACL LOG).
			opts.DisableIdentity = true
			client := redis.NewClient(opts)
			t.Cleanup(func() { _ = client.Close() })
			return client
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t, "--rename-command", "CONFIG", renamed)
			admin := srv.Client(t)
			limitMemoryWith(t, admin, renamed, "allkeys-lru")
			r := runForEviction(t, c.setup(t, srv, admin))
			waitFor(t, "leader", r.e.IsLeader)
			if c.flagged {
				waitFor(t, "eviction gauge", func() bool { v, ok := r.gauge(t); return ok && v == 1 })
				if b := r.leaderJSON(t); b["evictionPolicy"] != "allkeys-lru" || b["evictionRisk"] != true {
					t.Errorf("/leader = %v, want evictionPolicy allkeys-lru, evictionRisk true", b)
				}
				return
			}
			waitFor(t, "skipped or refused check", func() bool {
				return len(r.logged("Cannot read Redis's eviction policy"))+len(r.logged("Not reading Redis's eviction policy")) > 0
			})
			if _, ok := r.gauge(t); ok {
				t.Error("elector_redis_eviction_risk set although the policy is unknown")
			}
			if b := r.leaderJSON(t); b["evictionPolicy"] != nil || b["evictionRisk"] != nil {
				t.Errorf("/leader = %v, want no eviction fields", b)
			}
			if e := r.logged(`"error"`); len(e) != 0 {
				t.Errorf("the check logged errors: %q", e)
			}
			if c.name == "ACL user" {
				if log, err := admin.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(log) != 0 {
					t.Errorf("ACL LOG of README's elector user: %v %v; want empty", log, err)
				}
			}
		})
	}
}

// TestGroupEvictionRisk: a Group checks the policy when it subscribes to the lease events, and
// flags volatile-ttl (lease keys go first: theirs is the shortest expiry) in the same gauge,
// labelled with the group's name.
func TestGroupEvictionRisk(t *testing.T) {
	srv := redistest.Start(t)
	limitMemory(t, srv.Client(t), "volatile-ttl")
	reg := prometheus.NewRegistry()
	m, err := election.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := election.NewGroup(election.GroupConfig{
		Client: srv.Client(t), Group: "shards", Identity: "a", Leases: []string{"s1"}, Metrics: m,
		Callbacks: election.GroupCallbacks{
			OnStartedLeading: func(ctx context.Context, _ string) { <-ctx.Done() },
			OnStoppedLeading: func(string) {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &evictionRun{reg: reg}
	logger := funcr.New(func(prefix, args string) {
		r.mu.Lock()
		r.log = append(r.log, args)
		r.mu.Unlock()
	}, funcr.Options{})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// The Group logs through its loop's asynchronous logger: the warning may be written a
	// moment after the gauge is set, so wait for both.
	waitFor(t, "eviction gauge of the group and its warning", func() bool {
		if len(r.logged("Warning: Redis may evict the lease keys")) == 0 {
			return false
		}
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			for _, x := range f.GetMetric() {
				if f.GetName() == "elector_redis_eviction_risk" && x.GetLabel()[0].GetValue() == "shards" {
					return x.GetGauge().GetValue() == 1
				}
			}
		}
		return false
	})
	if w := r.logged("Warning: Redis may evict the lease keys"); len(w) == 0 || !strings.Contains(w[0], "volatile-ttl") {
		t.Errorf("want a warning naming volatile-ttl, got %q", w)
	}
}
