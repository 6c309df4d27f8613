package election

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/elector/elector/internal/readonly"
)

// LeaderHandler returns an http.Handler that serves Status as JSON to GET and HEAD requests:
//
//	{"name":"pod-b","identity":"pod-a","isLeader":false,"lease":"my-job","token":0}
//
// name is the current leader, as the classic Kubernetes leader-elector sidecar reports it.
// While the elector's Redis calls fail, "redisError" carries the failure (redisError): a
// replica that cannot reach Redis, or that Redis refuses, says so instead of only "name":"".
// Once Run read Redis's eviction policy, "evictionPolicy" is its maxmemory-policy and
// "evictionRisk" whether Redis may evict the lease keys (docs/RELIABILITY.md); both are
// absent while unknown (CONFIG GET and INFO refused, or a named ACL user, which is not checked).
func (e *Elector) LeaderHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !readonly.Allow(w, r) {
			return
		}
		body, err := json.Marshal(newLeaderBody(e))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(body, '\n'))
	})
}

// leaderBody is the JSON of LeaderHandler: Status's fields, the current Redis failure and
// Redis's eviction policy.
type leaderBody struct {
	Status
	CandidateCount int           `json:"candidateCount,omitempty"` // len(Candidates): 0 (absent) before the first heartbeat
	RedisError     *redisFailure `json:"redisError,omitempty"`
	EvictionPolicy string        `json:"evictionPolicy,omitempty"`
	EvictionRisk   *bool         `json:"evictionRisk,omitempty"`
}

// newLeaderBody returns e's leaderBody now.
func newLeaderBody(e *Elector) leaderBody {
	b := leaderBody{Status: e.Status(), RedisError: e.redisError()}
	b.CandidateCount = len(b.Candidates)
	if v := e.evict.get(); v.policy != "" {
		risky := v.risky()
		b.EvictionPolicy, b.EvictionRisk = v.policy, &risky
	}
	return b
}

// HealthzAdaptor is a liveness check in the shape of client-go's leaderelection
// HealthzAdaptor (Name and Check, as k8s.io/apiserver's healthz.HealthChecker wants). It fails
// only when this replica believes it leads while its last successful renew is older than
// RenewDeadline + tolerance: the step-down should have happened by then, so the elector is
// wedged and a restart is the safe way out. It never fails a follower.
type HealthzAdaptor struct {
	lease      string
	limit      time.Duration                // RenewDeadline + tolerance
	sinceRenew func() (time.Duration, bool) // Elector.sinceRenew
}

// HealthzAdaptor returns the elector's health check with the given tolerance.
func (e *Elector) HealthzAdaptor(tolerance time.Duration) *HealthzAdaptor {
	return &HealthzAdaptor{lease: e.cfg.LeaseName, limit: e.cfg.RenewDeadline + tolerance, sinceRenew: e.sinceRenew}
}

// Name returns "leaderElection", the name client-go's adaptor uses.
func (h *HealthzAdaptor) Name() string { return "leaderElection" }

// Check returns an error when the leader's renewals are overdue beyond the tolerance.
func (h *HealthzAdaptor) Check(*http.Request) error {
	if age, leading := h.sinceRenew(); leading && age > h.limit {
		return fmt.Errorf("elector %q leads but its last successful renew was %v ago (limit %v)",
			h.lease, age.Round(time.Millisecond), h.limit)
	}
	return nil
}

// ServeHTTP answers GET and HEAD with 200 "ok", or 500 and the error of Check.
func (h *HealthzAdaptor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !readonly.Allow(w, r) {
		return
	}
	if err := h.Check(r); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}
