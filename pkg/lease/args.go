package lease

import (
	"sync"
	"sync/atomic"
)

// argBoxes keeps the script arguments of a Lease boxed once. go-redis's Script.Run takes its
// arguments as []any, and boxing a string, or an int64 above 255, allocates; a Lease sends the
// same owner, channel and TTL on every call, and the same record on every renewal and the
// release of a term. Nothing here is protocol state: a miss costs one allocation, no more.
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
