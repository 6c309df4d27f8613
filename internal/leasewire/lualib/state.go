package lualib

import (
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// RecheckAfter is how long Auto keeps calling EVALSHA/EVAL on a client after Redis said it
// does not know the library's function, before it tries FCALL again: a library loaded meanwhile
// is used from then on, and a Redis without it costs one extra round trip per client and
// RecheckAfter. An FCALL that Redis refuses (the user's ACL lacks +fcall) is not tried again
// until an EVALSHA or EVAL is refused.
const RecheckAfter = 5 * time.Minute

// State is what Auto learned of one client's Redis, and the client's default mode. It is safe
// for concurrent use.
type State struct {
	def          atomic.Value // Mode: the default of the client (SetDefaultMode), else unset
	missingUntil atomic.Int64 // Unix nanoseconds: until then, EVALSHA/EVAL (the library is missing)
	fcallRefused atomic.Bool  // the ACL refuses FCALL: EVALSHA/EVAL until one is refused
}

// lastMissing is the latest missingUntil of any client: a new client's State starts from it,
// since a process mostly talks to one Redis, whose library the first client found missing.
var lastMissing atomic.Int64

// states maps a client (a weak pointer to it) to its State; a State is dropped when its
// client is collected. other serves the clients that are not pointers.
var (
	states sync.Map // weak.Pointer[byte] -> *State
	other  State
)

// For returns the State of client (a redis.UniversalClient, or any client a Lease or Fence is
// given), the same for every call with the same client.
func For(client any) *State {
	v := reflect.ValueOf(client)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return &other
	}
	p := (*byte)(v.UnsafePointer())
	key := weak.Make(p)
	if st, ok := states.Load(key); ok {
		return st.(*State)
	}
	st := &State{}
	st.missingUntil.Store(lastMissing.Load())
	actual, loaded := states.LoadOrStore(key, st)
	if !loaded {
		runtime.AddCleanup(p, func(k weak.Pointer[byte]) { states.Delete(k) }, key)
	}
	return actual.(*State)
}

// SetDefaultMode sets the mode of every call through client that names none (the elector
// command's --redis-scripts).
func SetDefaultMode(client any, mode Mode) { For(client).def.Store(mode) }

// mode returns m, or the client's default when m is "", or Auto.
func (st *State) mode(m Mode) Mode {
	if m != "" {
		return m
	}
	if d, _ := st.def.Load().(Mode); d != "" {
		return d
	}
	return Auto
}

// preferEval reports whether Auto starts with EVALSHA: the library was missing less than
// RecheckAfter ago, or FCALL is refused.
func (st *State) preferEval() bool {
	return st.fcallRefused.Load() || time.Now().UnixNano() < st.missingUntil.Load()
}

// libraryMissing remembers that Redis does not know the library's function.
func (st *State) libraryMissing() {
	until := time.Now().Add(RecheckAfter).UnixNano()
	st.missingUntil.Store(until)
	lastMissing.Store(until)
}

// preferFunctions forgets what made Auto prefer EVALSHA: Redis refused it.
func (st *State) preferFunctions() {
	st.fcallRefused.Store(false)
	st.missingUntil.Store(0)
	lastMissing.Store(0)
}
