package election

import (
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/elector/elector/internal/redisfail"
)

// errorRepeat is how often a Redis failure that persists is logged again at error level (with
// its fix), so that a permanent misconfiguration never falls silent after its first line.
const errorRepeat = 30 * time.Second

// errorLog logs Redis failures once per change of state — the first failure of a kind, and
// the recovery — then again every errorRepeat while the same failure persists, and every
// attempt at V(4). It keeps the current failure for redisError (read concurrently) and the
// elector_redis_up gauge. Its methods are used from Run's goroutine only.
type errorLog struct {
	names   redisfail.Names  // how fixes name the settings: Config's fields, or the CLI's flags
	fatal   func(error) bool // errors that end Run (an Elector's; nil for a Group): logged as such
	state   string           // "op/reason" of the failure being retried, "" when calls succeed
	logged  time.Time        // when the failure was last logged at error level
	metrics *Metrics         // for elector_redis_up; set by Metrics.add or the first failure
	name    string

	current atomic.Pointer[redisFailure]
}

// redisFailure describes the Redis failure an elector is retrying.
type redisFailure struct {
	// Op is the operation that failed: acquire, renew, release, subscribe, heartbeat.
	Op string `json:"op"`
	// Reason classifies the error: timeout, closed, refused, connection, unknown_master,
	// sentinel, auth, noperm, readonly, protocol, unknown_command, cluster_mode, wrongtype,
	// bad_record, not_replicated, token_range, server or other (the reason label of
	// elector_redis_errors_total; internal/redisfail).
	Reason string `json:"reason"`
	// Error is the error text.
	Error string `json:"error"`
	// Fix says what to change, when the reason is a misconfiguration; "" otherwise.
	Fix string `json:"fix,omitempty"`
	// Since is when this kind of failure began.
	Since time.Time `json:"since"`
	// Count is the number of failed calls since then.
	Count int `json:"count"`
}

// failed records a failure of op at now, by the caller's clock (the Elector's or the Group's).
func (l *errorLog) failed(logger logr.Logger, m *Metrics, name, op string, err error, now time.Time) {
	reason := redisfail.Reason(err)
	m.redisError(name, op, err)
	if l.metrics == nil {
		l.metrics, l.name = m, name
	}
	l.metrics.redisUp(l.name, false)
	fix := redisfail.Hint(err, l.names)
	f := &redisFailure{Op: op, Reason: reason, Error: err.Error(), Fix: fix, Since: now, Count: 1}
	state := op + "/" + reason
	if prev := l.current.Load(); prev != nil && state == l.state {
		f.Since, f.Count = prev.Since, prev.Count+1
	}
	l.current.Store(f)
	kv := []any{"op", op, "reason", reason}
	if fix != "" {
		kv = append(kv, "fix", fix)
	}
	first, still := "Redis call failed; retrying with backoff", "Redis call still failing; retrying with backoff"
	if l.fatal != nil && l.fatal(err) {
		first, still = "Redis call failed, and retrying cannot help: giving up", "Redis call still failing, and retrying cannot help: giving up"
	}
	switch {
	case state != l.state:
		l.state, l.logged = state, now
		logger.Error(err, first, kv...)
	case now.Sub(l.logged) >= errorRepeat:
		l.logged = now
		logger.Error(err, still, append(kv, "since", f.Since, "failures", f.Count)...)
	default:
		logger.V(4).Info("Redis call failed again", append(kv, "err", err)...)
	}
}

func (l *errorLog) succeeded(logger logr.Logger) {
	l.metrics.redisUp(l.name, true)
	if l.state != "" {
		logger.Info("Redis calls succeed again", "after", l.state)
		l.state = ""
		l.current.Store(nil)
	}
}

// failure returns the failure being retried, nil while calls succeed.
func (l *errorLog) failure() *redisFailure { return l.current.Load() }

// redisError returns the Redis failure the elector is retrying (a copy), or nil while its
// calls succeed. LeaderHandler serves it as "redisError".
func (e *Elector) redisError() *redisFailure {
	f := e.errs.failure()
	if f == nil {
		return nil
	}
	c := *f
	return &c
}
