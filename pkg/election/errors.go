package election

import (
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/luaerr"
	"github.com/elector/elector/internal/rediserr"
	"github.com/elector/elector/pkg/lease"
)

// ErrorRepeat is how often a Redis failure that persists is logged again at error level (with
// its fix), so that a permanent misconfiguration never falls silent after its first line.
const ErrorRepeat = 30 * time.Second

// errorLog logs Redis failures once per change of state — the first failure of a kind, and
// the recovery — then again every ErrorRepeat while the same failure persists, and every
// attempt at V(4). It keeps the current failure for RedisError (read concurrently) and the
// elector_redis_up gauge. Its methods are used from Run's goroutine only.
type errorLog struct {
	state   string    // "op/reason" of the failure being retried, "" when calls succeed
	logged  time.Time // when the failure was last logged at error level
	metrics *Metrics  // for elector_redis_up; set by Metrics.add or the first failure
	name    string
	now     func() time.Time // nil: time.Now (tests replace it)

	current atomic.Pointer[RedisFailure]
}

// RedisFailure describes the Redis failure an elector is retrying.
type RedisFailure struct {
	// Op is the operation that failed: acquire, renew, release, subscribe, heartbeat.
	Op string `json:"op"`
	// Reason is Reason(err).
	Reason string `json:"reason"`
	// Error is the error text.
	Error string `json:"error"`
	// Fix says what to change, when the reason is a misconfiguration (Hint); "" otherwise.
	Fix string `json:"fix,omitempty"`
	// Since is when this kind of failure began.
	Since time.Time `json:"since"`
	// Count is the number of failed calls since then.
	Count int `json:"count"`
}

func (l *errorLog) clock() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}

func (l *errorLog) failed(logger logr.Logger, m *Metrics, name, op string, err error) {
	reason := Reason(err)
	m.redisError(name, op, err)
	if l.metrics == nil {
		l.metrics, l.name = m, name
	}
	l.metrics.redisUp(l.name, false)
	now := l.clock()
	fix := Hint(err)
	f := &RedisFailure{Op: op, Reason: reason, Error: err.Error(), Fix: fix, Since: now, Count: 1}
	state := op + "/" + reason
	if prev := l.current.Load(); prev != nil && state == l.state {
		f.Since, f.Count = prev.Since, prev.Count+1
	}
	l.current.Store(f)
	kv := []any{"op", op, "reason", reason}
	if fix != "" {
		kv = append(kv, "fix", fix)
	}
	switch {
	case state != l.state:
		l.state, l.logged = state, now
		logger.Error(err, "Redis call failed; retrying with backoff", kv...)
	case now.Sub(l.logged) >= ErrorRepeat:
		l.logged = now
		logger.Error(err, "Redis call still failing; retrying with backoff", append(kv, "since", f.Since, "failures", f.Count)...)
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
func (l *errorLog) failure() *RedisFailure { return l.current.Load() }

// RedisError returns the Redis failure the elector is retrying (a copy), or nil while its
// calls succeed. LeaderHandler serves it as "redisError".
func (e *Elector) RedisError() *RedisFailure {
	f := e.errs.failure()
	if f == nil {
		return nil
	}
	c := *f
	return &c
}

// Reason classifies an error of a Redis call for metrics and logs:
//
//	timeout         the call or the connection timed out
//	closed          the client was closed
//	refused         the connection was refused: nothing listens at the address
//	connection      another network failure (reset, EOF, DNS)
//	unknown_master  a Sentinel answered that it knows no master by the configured name
//	sentinel        no Sentinel gave the master's address (Sentinels down or refusing)
//	auth            authentication failed (wrong password or user, or a password required)
//	noperm          an ACL refused a command, a key or a channel
//	readonly        the server is a read-only replica
//	wrongtype       a lease key holds another Redis type
//	bad_record      a value at the lease key that is not an elector record
//	not_replicated  fewer replicas than Config.ReplicaAck acknowledged a write
//	token_range     the fencing token counter is beyond 2^53-1 (lease.ErrTokenRange)
//	server          another Redis error reply
//	other           anything else
func Reason(err error) string {
	var netErr net.Error
	var redisErr redis.Error
	switch {
	case err == nil:
		return ""
	case rediserr.IsUnknownMaster(err):
		return "unknown_master"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.Is(err, redis.ErrClosed):
		return "closed"
	case errors.Is(err, lease.ErrBadRecord):
		return "bad_record"
	case errors.Is(err, lease.ErrNotReplicated):
		return "not_replicated"
	case errors.Is(err, lease.ErrTokenRange):
		return "token_range"
	case redis.IsAuthError(err), errors.As(err, &redisErr) && isAuthMessage(redisErr.Error()):
		return "auth"
	case redis.IsPermissionError(err), errors.As(err, &redisErr) && isPermMessage(redisErr.Error()):
		return "noperm"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case rediserr.IsSentinelLookup(err):
		return "sentinel"
	case redis.IsReadOnlyError(err):
		return "readonly"
	case errors.As(err, &redisErr):
		if strings.Contains(redisErr.Error(), "WRONGTYPE") {
			return "wrongtype"
		}
		return "server"
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), errors.As(err, new(*net.OpError)):
		return "connection"
	}
	return "other"
}

// isAuthMessage recognises authentication failures that go-redis does not type: the server
// asks for a password that was not sent, or refuses AUTH without a configured password.
func isAuthMessage(msg string) bool {
	return strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "WRONGPASS") ||
		strings.Contains(msg, "AUTH <password> called without any password") || strings.Contains(msg, "invalid password")
}

// isPermMessage recognises ACL refusals inside scripts, which Redis reports as ERR.
func isPermMessage(msg string) bool {
	return strings.Contains(msg, "NOPERM") || strings.Contains(msg, "can't run this command") ||
		strings.Contains(msg, "can't access at least one of the keys") || strings.Contains(msg, "can't publish to the channel") ||
		// Redis 7.2 and Valkey inside a script: "ERR ACL failure in script: User u has no
		// permissions to run the 'set' command" (7.0 says NOPERM).
		strings.Contains(msg, "ACL failure in script")
}

var (
	nopermCmdRe  = regexp.MustCompile(`no permissions to run the '([^']+)' command`)
	scriptCmdRe  = regexp.MustCompile(`grant (\+[a-z|]+)`)
	nopermKeyRe  = regexp.MustCompile(`access key (\S+):`)
	nopermChanRe = regexp.MustCompile(`no permissions to access one of the channels`)
)

// Hint returns what to change when err comes from a misconfiguration — the ACL permission to
// add, the setting to check — or "" when err is no misconfiguration (a timeout, a network
// failure) or its fix is unknown. The names in parentheses are those of the elector command.
func Hint(err error) string {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch Reason(err) {
	case "unknown_master":
		return "no Sentinel knows a master by this name: check the master name (--sentinel-master) against SENTINEL MASTERS on a Sentinel"
	case "sentinel":
		return "no Sentinel answered with the master: check the Sentinel addresses (--redis-addr) and their password (REDIS_SENTINEL_PASSWORD or --sentinel-password-file)"
	case "refused":
		return "nothing accepts connections at the address: check the Redis address (--redis-addr) and that Redis runs"
	case "auth":
		return "check the Redis user and password (--redis-username, REDIS_PASSWORD or --redis-password-file)"
	case "readonly":
		return "the address is a read-only replica: point the client at the master (--redis-addr, or --redis-mode=sentinel)"
	case "wrongtype":
		return "a lease key holds another Redis type: use another key prefix (--key-prefix) or delete the key"
	case "noperm":
		if m := nopermCmdRe.FindStringSubmatch(msg); m != nil {
			return "grant the Redis user +" + strings.ToLower(m[1]) + " (ACL SETUSER <user> +" + strings.ToLower(m[1]) + "); README.md lists the whole rule"
		}
		if m := scriptCmdRe.FindStringSubmatch(msg); m != nil {
			return "grant the Redis user " + m[1] + "; README.md lists the whole rule"
		}
		if m := nopermKeyRe.FindStringSubmatch(msg); m != nil {
			return "allow the Redis user the lease keys: " + luaerr.KeyPattern(m[1]) + " (README.md lists the whole rule)"
		}
		if nopermChanRe.MatchString(msg) || strings.Contains(msg, "channel") {
			return "allow the Redis user the lease channels: &<key-prefix>:* (README.md lists the whole rule)"
		}
		return "the Redis user's ACL refused a command, key or channel: compare it with the rule in README.md (keys ~<key-prefix>:*, channels &<key-prefix>:*)"
	}
	return ""
}
