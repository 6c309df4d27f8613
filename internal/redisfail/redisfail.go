// Package redisfail classifies the errors of Redis calls, for the elector_redis_errors_total
// reason label, the logs, the /leader endpoint and the CLI's messages, and says what to change
// when an error comes from a misconfiguration (an ACL, a password, a replica address).
//
// Fatal tells the errors that retrying cannot cure (package election ends Run with them). Fixes
// name the settings as the caller knows them (Names: the library's Config fields, the CLI's
// flags).
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
//	unknown_command the server does not know a command sent, or one a script called (renamed or
//	                disabled by rename-command, or too old a server)
//	cluster_mode    the client and the server disagree about Redis Cluster: a Cluster client to a
//	                server without cluster support, or a redirection (MOVED, ASK) to a client that
//	                is not a Cluster client
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
		switch msg := redisErr.Error(); {
		case strings.Contains(msg, "WRONGTYPE"):
			return "wrongtype"
		case isUnknownCommand(msg):
			return "unknown_command"
		case isClusterDisabled(msg) || isRedirect(msg):
			return "cluster_mode"
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

// isUnknownCommand recognises a command the server does not know, sent by the client or
// called by a script. Redis 7 and Valkey: "ERR unknown command 'evalsha', with args beginning
// with: ..." (Redis 6 quotes the name with backquotes); inside a script, Redis 7: "ERR Unknown
// Redis command called from script", Redis 6: "... Unknown Redis command called from Lua
// script". An unknown subcommand ("ERR unknown subcommand 'x'") is one too.
func isUnknownCommand(msg string) bool {
	lower := strings.ToLower(msg)
	return strings.HasPrefix(lower, "err unknown command") || strings.HasPrefix(lower, "err unknown subcommand") ||
		strings.Contains(lower, "unknown redis command called from")
}

// isClusterDisabled recognises the reply of a server without cluster support to a Cluster
// client's discovery (CLUSTER SLOTS or CLUSTER SHARDS): "ERR This instance has cluster support
// disabled".
func isClusterDisabled(msg string) bool {
	return strings.Contains(msg, "cluster support disabled")
}

// isRedirect recognises a Cluster node's redirection of a key to another node: "MOVED 16287
// 127.0.0.1:7001" or "ASK 16287 127.0.0.1:7001". A Cluster client follows it; any other client
// gets it as the reply.
func isRedirect(msg string) bool {
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")
}

// Fatal reports whether err is one that retrying cannot cure, only a change of configuration:
// the credentials were refused (auth: WRONGPASS, NOAUTH), an ACL refused a command, key or
// channel (noperm: NOPERM), the server does not know a command (unknown_command), or the
// client and the server disagree about Cluster mode (cluster_mode). clusterClient says whether
// the caller's client is a *redis.ClusterClient: a redirection (MOVED, ASK) that reaches such a
// client is a resharding it gave up following, which may heal, not a mismatch.
func Fatal(err error, clusterClient bool) bool {
	switch Reason(err) {
	case "auth", "noperm", "unknown_command":
		return true
	case "cluster_mode":
		var redisErr redis.Error
		return !clusterClient || !errors.As(err, &redisErr) || !isRedirect(redisErr.Error())
	}
	return false
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

// Names are what Hint calls the settings it tells to check: package election's Config fields
// (Library), or the flags of the elector command (its own Names, passed to the library in the
// context of Run through WithNames).
type Names struct {
	Addr           string // the Redis address
	Credentials    string // the Redis user and password
	SentinelMaster string // the Sentinel master name
	Sentinels      string // the Sentinel addresses and their password
	Mode           string // the kind of client: standalone, Sentinel or Cluster
	KeyPrefix      string // the prefix of the lease keys
	Identity       string // this replica's identity
}

// Library names the settings as a program that uses package election sets them.
var Library = Names{
	Addr:           "the address of Config.Client",
	Credentials:    "the Username and Password of Config.Client's options",
	SentinelMaster: "the MasterName of Config.Client's FailoverOptions",
	Sentinels:      "the SentinelAddrs and SentinelPassword of Config.Client's FailoverOptions",
	Mode:           "the kind of Config.Client: redis.NewClient, NewFailoverClient or NewClusterClient",
	KeyPrefix:      "Config.KeyPrefix",
	Identity:       "Config.Identity",
}

type namesKey struct{}

// WithNames returns ctx carrying n, for package election's Run to name the settings in its
// fixes as the caller knows them (the CLI: its flags).
func WithNames(ctx context.Context, n Names) context.Context {
	return context.WithValue(ctx, namesKey{}, n)
}

// NamesFrom returns the Names ctx carries (WithNames), Library if none.
func NamesFrom(ctx context.Context) Names {
	if n, ok := ctx.Value(namesKey{}).(Names); ok {
		return n
	}
	return Library
}

// Hint returns what to change when err comes from a misconfiguration — the ACL permission to
// add, the setting to check, named as n names them — or "" when err is no misconfiguration (a
// timeout, a network failure) or its fix is unknown.
func Hint(err error, n Names) string {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch Reason(err) {
	case "unknown_master":
		return "no Sentinel knows a master by this name: check the master name (" + n.SentinelMaster + ") against SENTINEL MASTERS on a Sentinel"
	case "sentinel":
		return "no Sentinel answered with the master: check the Sentinel addresses and their password (" + n.Sentinels + ")"
	case "refused":
		return "nothing accepts connections at the address: check the Redis address (" + n.Addr + ") and that Redis runs"
	case "auth":
		return "check the Redis user and password (" + n.Credentials + ")"
	case "protocol":
		return "the server at the address does not speak the Redis protocol (an HTTP or other service listens there): check the Redis address and port (" + n.Addr + ")"
	case "readonly":
		return "the address is a read-only replica: point the client at the master (" + n.Addr + ", or a Sentinel client: " + n.Mode + ")"
	case "wrongtype":
		return "a lease key holds another Redis type: use another key prefix (" + n.KeyPrefix + ") or delete the key"
	case "unknown_command":
		return "the server does not know a command the lease needs (renamed or disabled by rename-command, or a server older than Redis 6.2): README.md lists the commands"
	case "cluster_mode":
		if strings.Contains(msg, "cluster support disabled") {
			return "the server is not a Redis Cluster node: use a standalone or Sentinel client (" + n.Mode + ")"
		}
		return "the server is a Redis Cluster node that redirects the lease keys elsewhere: use a Cluster client (" + n.Mode + ")"
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
