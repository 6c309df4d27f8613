package luaerr

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ExplainTx returns err wrapped with the command and key that Redis refused, when err is the
// EXECABORT of a MULTI/EXEC transaction (Redis discards the whole transaction when it refused
// a queued command, and EXECABORT does not say which or why). cmds are the transaction's
// commands, whose errors go-redis sets from the replies to MULTI's queueing. keyPattern is the
// ACL key pattern that would allow the keys (~PREFIX:*, built by package lease, which owns the
// key layout): the advice names it when Redis refused a key, and KeyPattern finds it in the
// error. Otherwise err is returned unchanged.
func ExplainTx(err error, keyPattern string, cmds ...redis.Cmder) error {
	if err == nil || !redis.IsExecAbortError(err) {
		return err
	}
	for _, cmd := range cmds {
		cerr := cmd.Err()
		if cerr == nil || !redis.IsPermissionError(cerr) {
			continue
		}
		e := &txRefusal{abort: err, refused: cerr, name: strings.ToUpper(cmd.Name())}
		if args := cmd.Args(); len(args) > 1 {
			e.key = fmt.Sprint(args[1])
		}
		// Redis 7.0: "…no permissions to access one of the keys…"; 7.2 and Valkey: "No
		// permissions to access a key". A refused command's message names no key.
		if strings.Contains(strings.ToLower(cerr.Error()), "key") && e.key != "" {
			e.pattern = keyPattern
		}
		return e
	}
	return err
}

// txRefusal is ExplainTx's error: the EXECABORT, and the queued command Redis refused.
type txRefusal struct {
	abort, refused error
	name, key      string
	pattern        string // the ACL key pattern to allow when a key was refused, else ""
}

func (e *txRefusal) Error() string {
	return fmt.Sprintf("%v: Redis refused %s %s: %v (%s)", e.abort, e.name, e.key, e.refused, e.grant())
}

func (e *txRefusal) Unwrap() []error { return []error{e.abort, e.refused} }

// grant says which ACL rule lets the user do what Redis refused.
func (e *txRefusal) grant() string {
	if e.pattern != "" {
		return "the Redis user may not access key " + e.key + ": allow its key pattern, " + e.pattern + " (or %R" + e.pattern + " for read-only)"
	}
	return "the Redis user may not run " + e.name + ": grant +" + strings.ToLower(e.name)
}

// KeyPattern returns the ACL key pattern that err, or an error it wraps, advises to allow
// because Redis refused a transaction a key (ExplainTx), and false when it advises none.
func KeyPattern(err error) (string, bool) {
	var e *txRefusal
	if errors.As(err, &e) && e.pattern != "" {
		return e.pattern, true
	}
	return "", false
}
