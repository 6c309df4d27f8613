// Package redisfail classifies the errors of Redis calls, for the elector_redis_errors_total
// reason label, the logs, the /leader endpoint and the CLI's messages, and says what to change
// when an error comes from a misconfiguration (an ACL, a password, a replica address).
//
// It owns the classification and the wording of the fixes only: it must not call Redis, log,
// or know of an Elector's state.
package redisfail

import (
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/luaerr"
	"github.com/elector/elector/internal/rediserr"
	"github.com/elector/elector/pkg/lease"
)

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
//	protocol        the server's reply is not in the Redis protocol: the address is another service's
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
	case errors.Is(err, leasewire.ErrBadRecord):
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
	case isProtocolMessage(err.Error()):
		return "protocol"
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

// isProtocolMessage recognises go-redis's errors for a reply that is not RESP (v9 reader:
// "redis: invalid reply: ..." for an unknown type byte, "redis: can't parse ..." for a line it
// cannot read): the address belongs to another kind of server, an HTTP one for instance.
func isProtocolMessage(msg string) bool {
	return strings.Contains(msg, "redis: invalid reply:") || strings.Contains(msg, "redis: can't parse")
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
	case "protocol":
		return "the server at the address does not speak the Redis protocol (an HTTP or other service listens there): check the Redis address and port (--redis-addr)"
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
		if pattern, ok := luaerr.KeyPattern(err); ok {
			return "allow the Redis user the lease keys: " + pattern + " (README.md lists the whole rule)"
		}
		if nopermChanRe.MatchString(msg) || strings.Contains(msg, "channel") {
			return "allow the Redis user the lease channels: &<key-prefix>:* (README.md lists the whole rule)"
		}
		return "the Redis user's ACL refused a command, key or channel: compare it with the rule in README.md (keys ~<key-prefix>:*, channels &<key-prefix>:*)"
	}
	return ""
}
