package lease

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire/lualib"
)

// A script call is sent as the command FCALL function numkeys keys... args... (or EVALSHA sha,
// or EVAL source: internal/leasewire/lualib), built in one slice from values boxed once (issue
// 27 item 2): go-redis's Script.Run copies its keys and arguments into a new []any and boxes
// every key and the SHA1 on every call, 5 allocations for an acquire, 3 for a release, against
// the 1 of the slice built by lualib.
//
// Concurrency: each call builds its own slice, and go-redis keeps that slice (in the Cmd) until
// the reply is read, so no two calls share one. What is shared between the calls of a Lease,
// possibly concurrent (a renewal beside a release), is only the boxes below, each written once
// before it is published and never changed after: immutable values, read by every call; and
// the client's lualib.State, which is safe for concurrent use.

// run runs s with keys and args through p (l's client or one of its connections), in the
// client's scripts mode: FCALL, EVALSHA, or EVAL after NOSCRIPT (lualib.Script.Run).
func (l *Lease) run(ctx context.Context, p lualib.Processor, s *lualib.Script, keys []any, args ...any) *redis.Cmd {
	return s.Run(ctx, l.scripts, p, "", keys, args...)
}

// boxKeys returns the key names boxed, for the script calls.
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
