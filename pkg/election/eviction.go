package election

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"
)

// evictionFix is what the warning tells the operator to do.
const evictionFix = "use a Redis dedicated to elector, or set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf)"

// eviction is what Redis says about evicting keys under memory pressure. A lease key carries an
// expiry, so every volatile-* policy may evict it, and every allkeys-* one too: the record is
// gone without a release, and another replica acquires while the holder still trusts its term.
type eviction struct {
	policy    string // maxmemory-policy, "" when Redis did not tell
	maxmemory int64  // bytes; 0: no limit, so nothing is evicted whatever the policy
}

// risky reports whether Redis may evict lease keys now.
func (v eviction) risky() bool { return v.policy != "" && v.policy != "noeviction" && v.maxmemory > 0 }

// evictionState is the outcome of an Elector's last check, for LeaderHandler.
type evictionState struct {
	mu sync.Mutex
	v  eviction
}

func (s *evictionState) get() eviction {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v
}

func (s *evictionState) set(v eviction) {
	s.mu.Lock()
	s.v = v
	s.mu.Unlock()
}

// checkEviction asks Redis for its eviction policy on a goroutine of its own, off the
// campaign's path, once per Run: again with a growing delay (RetryPeriod doubling up to
// LeaseDuration) while Redis cannot be reached, and never again once it answered or refused
// (quietly: a renamed CONFIG is common on managed services). It returns the function that
// stops the goroutine and waits for it, which Run defers.
//
// A client that logs in as a named ACL user is not checked: README's users may run neither
// command, and each refusal would add an ACL LOG entry at every start, a log that stays empty
// for the documented users so that a real refusal stands out.
func (e *Elector) checkEviction(ctx context.Context) (stop func()) {
	if _, real := e.store.(redisStore); !real {
		return func() {} // a test's store (seam tests, the simulator) has no server to ask
	}
	if user := aclUser(e.cfg.Client); user != "" {
		klog.FromContext(ctx).V(2).Info("Not reading Redis's eviction policy as a named ACL user (a refusal would show in ACL LOG); see docs/RELIABILITY.md, Eviction", "user", user)
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait := e.cfg.RetryPeriod
		for {
			v, err := readEviction(ctx, e.cfg.Client, e.callTimeout())
			if err == nil || isRefusal(err) {
				e.evict.set(v)
				reportEviction(klog.FromContext(ctx), e.cfg.Metrics, e.cfg.LeaseName, v, err)
				return
			}
			// The real clock, not e.clock: this wait is no part of the algorithm, and a timer
			// on an injected clock would be one its tests do not expect.
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			wait = min(2*wait, e.cfg.LeaseDuration)
		}
	}()
	return func() { cancel(); <-done }
}

// reportEviction logs the outcome of a check (a warning when lease keys may be evicted) and
// sets elector_redis_eviction_risk{name}.
func reportEviction(logger logr.Logger, m *Metrics, name string, v eviction, err error) {
	switch {
	case err != nil:
		logger.V(2).Info("Cannot read Redis's eviction policy (CONFIG GET and INFO refused or renamed); not checked", "err", err)
		return
	case v.risky():
		logger.Info("Warning: Redis may evict the lease keys under memory pressure (they carry an expiry): an evicted lease lets a second replica acquire while this one still leads",
			"maxmemoryPolicy", v.policy, "maxmemory", v.maxmemory, "fix", evictionFix)
	default:
		logger.V(2).Info("Redis does not evict the lease keys", "maxmemoryPolicy", v.policy, "maxmemory", v.maxmemory)
	}
	m.evictionRisk(name, v.risky())
}

// aclUser returns the ACL user c logs in as, "" for the default user.
func aclUser(c redis.UniversalClient) string {
	var user string
	switch c := c.(type) {
	case *redis.Client:
		user = c.Options().Username
	case *redis.ClusterClient:
		user = c.Options().Username
	}
	if user == "default" {
		return ""
	}
	return user
}

// isRefusal reports whether err is an error reply (NOPERM, an unknown or renamed command)
// rather than a failure to reach Redis: asking again would get the same answer.
func isRefusal(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// readEviction reads maxmemory and maxmemory-policy, through CONFIG GET, else INFO memory
// (which managed services and ACLs more often allow). With a Redis Cluster it asks every
// master and returns the riskiest answer; timeout bounds each call.
func readEviction(ctx context.Context, c redis.UniversalClient, timeout time.Duration) (eviction, error) {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return readNodeEviction(ctx, c, timeout)
	}
	var (
		mu    sync.Mutex
		worst eviction
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		v, err := readNodeEviction(ctx, n, timeout)
		mu.Lock()
		defer mu.Unlock()
		if err == nil && (worst.policy == "" || v.risky() && !worst.risky()) {
			worst = v
		}
		return err
	})
	return worst, err
}

func readNodeEviction(ctx context.Context, c redis.Cmdable, timeout time.Duration) (eviction, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg, cerr := c.ConfigGet(cctx, "maxmemory*").Result()
	if cerr == nil && cfg["maxmemory-policy"] != "" {
		n, err := strconv.ParseInt(cfg["maxmemory"], 10, 64)
		if err != nil {
			return eviction{}, fmt.Errorf("CONFIG GET maxmemory: %q is not a number", cfg["maxmemory"])
		}
		return eviction{policy: cfg["maxmemory-policy"], maxmemory: n}, nil
	}
	info, err := c.Info(cctx, "memory").Result()
	if err != nil {
		return eviction{}, fmt.Errorf("read the eviction policy: CONFIG GET: %v; INFO memory: %w", cerr, err)
	}
	return parseInfoEviction(info)
}

// parseInfoEviction reads the maxmemory and maxmemory_policy fields of INFO memory.
func parseInfoEviction(info string) (eviction, error) {
	var v eviction
	var mm string
	for _, line := range strings.Split(info, "\n") {
		k, val, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "maxmemory_policy":
			v.policy = val
		case "maxmemory":
			mm = val
		}
	}
	n, err := strconv.ParseInt(mm, 10, 64)
	if v.policy == "" || err != nil {
		return eviction{}, fmt.Errorf("INFO memory: no maxmemory and maxmemory_policy fields")
	}
	v.maxmemory = n
	return v, nil
}
