package luaerr

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ExplainTx returns err wrapped with the command and key that Redis refused, when err is the
// EXECABORT of a MULTI/EXEC transaction (Redis discards the whole transaction when it refused
// a queued command, and EXECABORT does not say which or why). cmds are the transaction's
// commands, whose errors go-redis sets from the replies to MULTI's queueing. Otherwise err
// is returned unchanged.
func ExplainTx(err error, cmds ...redis.Cmder) error {
	if err == nil || !redis.IsExecAbortError(err) {
		return err
	}
	for _, cmd := range cmds {
		cerr := cmd.Err()
		if cerr == nil || !redis.IsPermissionError(cerr) {
			continue
		}
		name := strings.ToUpper(cmd.Name())
		key := ""
		if args := cmd.Args(); len(args) > 1 {
			key = fmt.Sprint(args[1])
		}
		return fmt.Errorf("%w: Redis refused %s %s: %w (%s)", err, name, key, cerr, grant(cerr.Error(), name, key))
	}
	return err
}

// grant says which ACL rule lets the user do what msg, a NOPERM error of command name on key,
// refused.
func grant(msg, name, key string) string {
	// Redis 7.0: "…no permissions to access one of the keys…"; 7.2 and Valkey: "No
	// permissions to access a key". A refused command's message names no key.
	if strings.Contains(strings.ToLower(msg), "key") && key != "" {
		return "the Redis user may not access key " + key + ": allow its key pattern, " + KeyPattern(key) + " (or %R~ for read-only)"
	}
	return "the Redis user may not run " + name + ": grant +" + strings.ToLower(name)
}

// KeyPattern returns the ACL key pattern that covers key and every other key of its prefix:
// "elector:{job}:lease" gives "~elector:*".
func KeyPattern(key string) string {
	if i := strings.Index(key, ":{"); i >= 0 {
		return "~" + key[:i+1] + "*"
	}
	return "~" + key
}
