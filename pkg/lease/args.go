package lease

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// A script call is sent as the command EVALSHA sha numkeys keys... args..., built here in one
// slice from values boxed once (issue 27 item 2): go-redis's Script.Run copies its keys and
// arguments into a new []any and boxes every key and the SHA1 on every call, 5 allocations for
// an acquire, 3 for a release, against the 1 of the slice built here.
//
// Concurrency: each call builds its own slice, and go-redis keeps that slice (in the Cmd) until
// the reply is read, so no two calls share one. What is shared between the calls of a Lease,
// possibly concurrent (a renewal beside a release), is only the boxes below, each written once
// before it is published and never changed after: immutable values, read by every call.

// script is one of the package's Lua scripts with its SHA1 and source boxed once. It is an
// immutable value; sharing it is not shared state.
type script struct {
	*redis.Script
	sha, src any
}

func newScript(src string) script {
	s := redis.NewScript(src)
	return script{Script: s, sha: s.Hash(), src: src}
}

// processor runs one command: a client, a pipeline or a connection.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// command returns the command that runs s with keys and args: EVALSHA, or EVAL with the
// source when eval is set. keys are the key names, boxed.
func (s script) command(ctx context.Context, eval bool, keys []any, args ...any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	if eval {
		a = append(a, "eval", s.src, len(keys))
	} else {
		a = append(a, "evalsha", s.sha, len(keys))
	}
	a = append(a, keys...)
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // the Cluster slot is the first key's
	}
	return cmd
}

// run runs s on c as EVALSHA and, if Redis does not know the script (after a restart, a
// failover or SCRIPT FLUSH), as EVAL, which also caches it: what go-redis's Script.Run does.
func (s script) run(ctx context.Context, c processor, keys []any, args ...any) *redis.Cmd {
	cmd := s.command(ctx, false, keys, args...)
	_ = c.Process(ctx, cmd) // the error is cmd.Err()
	// err != nil first: HasErrorPrefix allocates even for a nil error.
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = s.command(ctx, true, keys, args...)
		_ = c.Process(ctx, cmd)
	}
	return cmd
}

// boxKeys returns the key names boxed, for script.command.
func boxKeys(keys ...string) []any {
	boxed := make([]any, len(keys))
	for i, k := range keys {
		boxed[i] = k
	}
	return boxed
}

// argBoxes keeps the script arguments of a Lease boxed once: boxing a string, or an int64
// above 255, allocates; a Lease sends the same owner, channel and TTL on every call, and the
// same record on every renewal and the release of a term. Nothing here is protocol state: a
// miss costs one allocation, no more.
type argBoxes struct {
	owner, channel any
	ttl            atomic.Pointer[boxedTTL]

	// The record of the last term acquired, boxed as Redis returned it. A mutex, not an
	// atomic pointer, so that remembering it allocates nothing.
	termMu  sync.Mutex
	termRec Record
	termBox any
}

// boxedTTL is a TTL in milliseconds with its box.
type boxedTTL struct {
	ms  int64
	box any
}

// ttlArg returns ms boxed, reusing the box of the last TTL sent when it is the same.
func (l *Lease) ttlArg(ms int64) any {
	if b := l.boxes.ttl.Load(); b != nil && b.ms == ms {
		return b.box
	}
	b := &boxedTTL{ms: ms, box: ms}
	l.boxes.ttl.Store(b)
	return b.box
}

// rememberTerm keeps the boxed record of a term just acquired.
func (l *Lease) rememberTerm(rec Record, box any) {
	l.boxes.termMu.Lock()
	l.boxes.termRec, l.boxes.termBox = rec, box
	l.boxes.termMu.Unlock()
}

// termArg returns term's record as a script argument.
func (l *Lease) termArg(term Record) any {
	l.boxes.termMu.Lock()
	rec, box := l.boxes.termRec, l.boxes.termBox
	l.boxes.termMu.Unlock()
	if box != nil && rec == term {
		return box
	}
	return term.String()
}
