package lease

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// script is one of the lease scripts, with the values every call sends boxed once: a call
// then allocates one argument slice instead of boxing each argument again (go-redis's
// Script.Run boxes them all on every call).
type script struct {
	*redis.Script
	source any // for EVAL, after NOSCRIPT
	sha    any // for EVALSHA
}

func newScript(source string) script {
	s := redis.NewScript(source)
	return script{Script: s, source: source, sha: s.Hash()}
}

// processor runs a command: a client, a pipeline or a dedicated connection.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Boxed command words and key counts (constants box without allocating, but keeping them
// here keeps the argument lists readable).
var (
	wordEvalSha any = "evalsha"
	wordEval    any = "eval"
	oneKey      any = 1
	threeKeys   any = 3
)

// args returns the whole EVALSHA command of s: rest is the key count, the keys and the
// arguments.
func (s script) args(rest ...any) []any {
	args := make([]any, 0, 2+len(rest)) // one allocation, not two
	args = append(args, wordEvalSha, s.sha)
	return append(args, rest...)
}

// run sends args (made by args) and, if Redis does not know the script, sends it again as
// EVAL with the source, which also loads it.
func (s script) run(ctx context.Context, c processor, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	_ = c.Process(ctx, cmd)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		args[0], args[1] = wordEval, s.source
		cmd = redis.NewCmd(ctx, args...)
		_ = c.Process(ctx, cmd)
	}
	return cmd
}

// boxedTTL memoises the boxed form of the last TTL a Lease sent: an elector sends the same
// one every time.
type boxedTTL struct {
	ms  int64
	box any
}

// ttlArg returns ms boxed, reusing the last box of l for the same value.
func (l *Lease) ttlArg(ms int64) any {
	if b := l.ttl.Load(); b != nil && b.ms == ms {
		return b.box
	}
	b := &boxedTTL{ms: ms, box: ms}
	l.ttl.Store(b)
	return b.box
}

// leaseArgs holds a Lease's keys, owner and channel boxed once.
type leaseArgs struct {
	key, tokenKey, termsKey, owner, channel any
	ttl                                     atomic.Pointer[boxedTTL]

	// The record of the last term this Lease acquired, boxed as Redis returned it: its
	// renewals and release send it without formatting it again. A mutex, not an atomic
	// pointer, so that remembering it allocates nothing.
	termMu  sync.Mutex
	termRec Record
	termBox any
}

// rememberTerm keeps the boxed record of a term just acquired.
func (l *Lease) rememberTerm(rec Record, box any) {
	l.termMu.Lock()
	l.termRec, l.termBox = rec, box
	l.termMu.Unlock()
}

// termArg returns term's record for a script argument.
func (l *Lease) termArg(term Record) any {
	l.termMu.Lock()
	rec, box := l.termRec, l.termBox
	l.termMu.Unlock()
	if box != nil && rec == term {
		return box
	}
	return term.String()
}
