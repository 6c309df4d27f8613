package election

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/lease"
)

// errorLog logs Redis failures once per change of state — the first failure of a kind, and
// the recovery — and every attempt only at V(4). It is used from Run's goroutine only.
type errorLog struct {
	state string // "op/reason" of the failure being retried, "" when calls succeed
}

func (l *errorLog) failed(logger logr.Logger, m *Metrics, name, op string, err error) {
	reason := Reason(err)
	m.redisError(name, op, err)
	if state := op + "/" + reason; state != l.state {
		l.state = state
		logger.Error(err, "Redis call failed; retrying with backoff", "op", op, "reason", reason)
		return
	}
	logger.V(4).Info("Redis call failed again", "op", op, "reason", reason, "err", err)
}

func (l *errorLog) succeeded(logger logr.Logger) {
	if l.state != "" {
		logger.Info("Redis calls succeed again", "after", l.state)
		l.state = ""
	}
}

// Reason classifies an error of a Redis call for metrics and logs: "timeout", "connection",
// "closed" (the client was closed), "noperm" (refused by an ACL), "wrongtype", "bad_record"
// (a value at the lease key that is not an elector record), "not_replicated" (fewer replicas
// than Config.ReplicaAck acknowledged a write), "token_range" (the fencing token counter is
// beyond 2^53-1, lease.ErrTokenRange), "server" (another Redis error) or "other".
func Reason(err error) string {
	var netErr net.Error
	var redisErr redis.Error
	switch {
	case err == nil:
		return ""
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
	case errors.As(err, &redisErr):
		msg := redisErr.Error()
		switch {
		case strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "NOPERM"):
			return "noperm"
		case strings.Contains(msg, "WRONGTYPE"):
			return "wrongtype"
		}
		return "server"
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.As(err, new(*net.OpError)):
		return "connection"
	}
	return "other"
}
