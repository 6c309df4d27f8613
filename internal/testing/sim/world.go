package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"
)

// Faults are the misbehaviours of the network, drawn per message from the world's seed.
type Faults struct {
	Loss    float64       // a request is lost before it runs, or its reply after
	Slow    float64       // a message is delayed by up to SlowMax instead of at most 1ms
	SlowMax time.Duration // the longest delay of a slow message
	PubLoss float64       // a pub/sub message is lost on its way to one subscriber
}

// ErrRefused is the transport error of a call to a Redis that is down or unreachable.
var ErrRefused = errors.New("dial tcp: connect: connection refused")

// ErrReset is the transport error of a call whose connection broke (Redis restarted).
var ErrReset = errors.New("read tcp: connection reset by peer")

type msgKind int

const (
	request msgKind = iota // node -> Redis
	reply                  // Redis -> node
	push                   // Redis -> a subscriber
)

// msg is one message on the network, delivered by the driver at its time.
type msg struct {
	kind    msgKind
	at      time.Time
	seq     uint64
	node    *Node
	call    *call
	sub     *Sub
	payload string
	res     result
}

// call is one request of a node and what became of it.
type call struct {
	id        uint64
	name      string // for the trace: the script's name or the command
	script    string // "" for a command (args) or a subscription (sub)
	keys      []string
	args      []string
	sub       *Sub
	reply     chan result
	abandoned bool // the caller stopped waiting (under World.mu)
}

type result struct {
	v   any
	err error
}

// World is a simulated Redis and the network between it and the nodes (replicas). Nodes call
// it from their own goroutines; the driver — one goroutine of the test — delivers the
// messages one at a time, in the order of their simulated times, drawing every delay, loss
// and fault from Rand. In a testing/synctest bubble, with the driver calling synctest.Wait
// before each step, the same seed gives the same run.
type World struct {
	Redis  *Redis
	Rand   *rand.Rand // the seed's one source: the driver's goroutine only
	Faults Faults

	start   time.Time
	mu      sync.Mutex
	pending []*msg // requests submitted since the last Absorb
	queue   []*msg // scheduled, ordered by (at, seq)
	seq     uint64
	calls   uint64
	wake    chan struct{}
	nodes   []*Node
	subs    map[string][]*Sub // server side: channel -> subscribers
	down    bool              // Redis refuses connections
	lastPub map[*Sub]time.Time
	timers  []*Timer // armed timers of the nodes' clocks, ordered by Timer.before
	fired   []*Timer // fired timers whose time was not received yet, in firing order

	trace strings.Builder
}

// NewWorld returns a world whose random choices all come from seed. Call it inside the
// synctest bubble: its clock is the bubble's.
func NewWorld(seed uint64) *World {
	w := &World{
		Rand:    rand.New(rand.NewPCG(seed, 0x5eed)),
		start:   time.Now(),
		wake:    make(chan struct{}, 1),
		subs:    map[string][]*Sub{},
		lastPub: map[*Sub]time.Time{},
	}
	w.Redis = NewRedis(time.Now, w.publish)
	return w
}

// Tracef appends one line to the trace, stamped with the simulated time since the start.
func (w *World) Tracef(format string, args ...any) {
	fmt.Fprintf(&w.trace, "%11.6fs ", time.Since(w.start).Seconds())
	fmt.Fprintf(&w.trace, format, args...)
	w.trace.WriteByte('\n')
}

// Trace returns the trace so far.
func (w *World) Trace() string { return w.trace.String() }

// Elapsed returns the simulated time since the world began.
func (w *World) Elapsed() time.Duration { return time.Since(w.start) }

// Node is one replica's connections to Redis.
type Node struct {
	w    *World
	id   int
	name string
	// IgnoreCtx makes calls wait for their reply until ReadTimeout whatever their context
	// says: a go-redis client with ContextTimeoutEnabled off (go-redis's default).
	IgnoreCtx   bool
	ReadTimeout time.Duration

	stallUntil         time.Time // until then, its messages take stallMin..stallMax
	stallMin, stallMax time.Duration
	cut                bool // partitioned: messages to and from it are lost
	refuse             bool // while cut: calls fail at once instead of hanging
	crashed            bool
	pausedUntil        time.Time // Pause: until then nothing reaches the node and it sends nothing
	timerSeq           uint64    // timers armed (Timer.seq)
	fired              int       // its timers in World.fired
}

// NewNode adds a node called name.
func (w *World) NewNode(name string) *Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := &Node{w: w, id: len(w.nodes), name: name, ReadTimeout: 3 * time.Second}
	w.nodes = append(w.nodes, n)
	return n
}

// Pause freezes the node for d, as a stopped process (SIGSTOP, a long GC pause): until then
// its requests wait unsent, and replies, pub/sub messages and the times of its timers wait
// undelivered; then they go in their order. A goroutine of the node that a runtime timer of
// the bubble wakes (a context deadline) still runs, but whatever it sends waits.
func (w *World) Pause(n *Node, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n.pausedUntil = time.Now().Add(d)
}

// Paused reports whether the node is paused now.
func (n *Node) Paused() bool {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	return n.paused(time.Now())
}

func (n *Node) paused(now time.Time) bool { return now.Before(n.pausedUntil) }

// Name returns the node's name.
func (n *Node) Name() string { return n.name }

// Call sends a script (script non-empty, with keys and args) or a command (args) and waits for
// its reply. An error reply is returned as an Error.
func (n *Node) Call(ctx context.Context, name, script string, keys, args []string) (any, error) {
	c := &call{name: name, script: script, keys: keys, args: args, reply: make(chan result, 1)}
	r, err := n.roundTrip(ctx, c)
	if err != nil {
		return nil, err
	}
	if e, ok := r.v.(Error); ok {
		return nil, e
	}
	return r.v, r.err
}

func (n *Node) roundTrip(ctx context.Context, c *call) (result, error) {
	w := n.w
	w.mu.Lock()
	w.pending = append(w.pending, &msg{kind: request, node: n, call: c})
	w.mu.Unlock()
	w.poke()
	var timeout <-chan time.Time
	done := ctx.Done()
	if n.IgnoreCtx {
		t := time.NewTimer(n.ReadTimeout)
		defer t.Stop()
		timeout, done = t.C, nil
	}
	select {
	case r := <-c.reply:
		return r, r.err
	case <-done:
	case <-timeout:
	}
	w.mu.Lock()
	c.abandoned = true
	w.mu.Unlock()
	if err := ctx.Err(); err != nil && !n.IgnoreCtx {
		return result{}, err
	}
	return result{}, fmt.Errorf("read tcp: i/o timeout after %v", n.ReadTimeout)
}

// Sub is a subscription to a channel. The world calls onMsg for each message and onClose when
// the connection breaks, from the driver's goroutine; neither may block.
type Sub struct {
	id      uint64
	node    *Node
	channel string
	onMsg   func(string)
	onClose func()
	live    bool // registered on the server (under World.mu)
	closed  bool
}

// Subscribe subscribes to channel and returns once Redis confirmed it.
func (n *Node) Subscribe(ctx context.Context, channel string, onMsg func(string), onClose func()) (*Sub, error) {
	s := &Sub{node: n, channel: channel, onMsg: onMsg, onClose: onClose}
	c := &call{name: "subscribe", sub: s, reply: make(chan result, 1)}
	if _, err := n.roundTrip(ctx, c); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close ends the subscription from the client's side.
func (s *Sub) Close() {
	w := s.node.w
	w.mu.Lock()
	defer w.mu.Unlock()
	s.closed = true
	w.unregister(s)
}

func (w *World) unregister(s *Sub) {
	if !s.live {
		return
	}
	s.live = false
	list := w.subs[s.channel]
	for i, x := range list {
		if x == s {
			w.subs[s.channel] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	delete(w.lastPub, s)
}

// breakSub ends a subscription from the server's side: the client sees its connection fail.
func (w *World) breakSub(s *Sub, why string) {
	w.unregister(s)
	if !s.closed {
		s.closed = true
		w.Tracef("%s: subscription %d broken (%s)", s.node.name, s.id, why)
		s.onClose()
	}
}

// latency draws the delay of one message.
func (w *World) latency() time.Duration {
	if w.Faults.Slow > 0 && w.Rand.Float64() < w.Faults.Slow && w.Faults.SlowMax > time.Millisecond {
		return time.Millisecond + time.Duration(w.Rand.Int64N(int64(w.Faults.SlowMax-time.Millisecond)))
	}
	return 50*time.Microsecond + time.Duration(w.Rand.Int64N(int64(950*time.Microsecond)))
}

// latencyOf draws the delay of a message to or from n: a stalled node's are long.
func (w *World) latencyOf(n *Node) time.Duration {
	if n != nil && time.Now().Before(n.stallUntil) && n.stallMax > n.stallMin {
		return n.stallMin + time.Duration(w.Rand.Int64N(int64(n.stallMax-n.stallMin)))
	}
	return w.latency()
}

// Stall makes every message to and from n sent in the next d take lo..hi (a connection that
// retransmits, a GC pause of the server's client handling).
func (w *World) Stall(n *Node, d, lo, hi time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n.stallUntil, n.stallMin, n.stallMax = time.Now().Add(d), lo, hi
}

func (w *World) lost(p float64) bool { return p > 0 && w.Rand.Float64() < p }

func (w *World) schedule(m *msg, at time.Time) {
	w.seq++
	m.at, m.seq = at, w.seq
	i := sort.Search(len(w.queue), func(i int) bool {
		q := w.queue[i]
		return q.at.After(at) || (q.at.Equal(at) && q.seq > m.seq)
	})
	w.queue = append(w.queue, nil)
	copy(w.queue[i+1:], w.queue[i:])
	w.queue[i] = m
}

func (c *call) key() string {
	return c.name + "\x00" + strings.Join(c.keys, "\x00") + "\x00" + strings.Join(c.args, "\x00")
}

// Absorb schedules the requests the nodes sent since the last step, in a deterministic order
// (by node, then content), whatever order their goroutines ran in.
func (w *World) Absorb() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	var p, held []*msg
	for _, m := range w.pending {
		if m.node.paused(now) {
			held = append(held, m) // sent when the pause ends
		} else {
			p = append(p, m)
		}
	}
	w.pending = held
	sort.SliceStable(p, func(i, j int) bool {
		if p[i].node.id != p[j].node.id {
			return p[i].node.id < p[j].node.id
		}
		return p[i].call.key() < p[j].call.key()
	})
	for _, m := range p {
		if m.node.crashed {
			// Sent by a crashed process's goroutines as they wind down: the world no longer
			// hears it. Nothing is traced or numbered, so a replay does not depend on how far
			// those goroutines got before the driver's next step.
			continue
		}
		w.calls++
		m.call.id = w.calls
		n := m.node
		w.Tracef("%s: #%d %s sent", n.name, m.call.id, m.call.name)
		switch {
		case n.cut && !n.refuse:
			w.Tracef("%s: #%d %s lost (cut)", n.name, m.call.id, m.call.name)
		case n.cut:
			w.scheduleReply(m, result{err: ErrRefused}, now)
		case w.lost(w.Faults.Loss):
			w.Tracef("%s: #%d %s lost before it ran", n.name, m.call.id, m.call.name)
		default:
			w.schedule(m, now.Add(w.latencyOf(n)))
		}
	}
}

func (n *Node) state() string {
	if n.crashed {
		return "crashed"
	}
	return "cut"
}

func (w *World) scheduleReply(m *msg, r result, now time.Time) {
	w.schedule(&msg{kind: reply, node: m.node, call: m.call, res: r}, now.Add(w.latencyOf(m.node)))
}

// to is the node a reply or a push goes to.
func (m *msg) to() *Node {
	if m.kind == push {
		return m.sub.node
	}
	return m.node
}

// NextAt returns the time of the next message or timer, and false when there is none.
func (w *World) NextAt() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var next time.Time
	if len(w.queue) > 0 {
		next = w.queue[0].at
	}
	if len(w.timers) > 0 && (next.IsZero() || w.timers[0].when.Before(next)) {
		next = w.timers[0].when
	}
	now := time.Now()
	for _, n := range w.nodes { // a pause's end sends what waited
		if n.paused(now) && (next.IsZero() || n.pausedUntil.Before(next)) {
			next = n.pausedUntil
		}
	}
	return next, !next.IsZero()
}

// DeliverDue does the next thing due, if any, and reports whether it did: it hands a fired
// timer's time to its owner if the owner now waits for it, else fires the earliest timer due,
// else delivers the earliest message due.
func (w *World) DeliverDue() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.handOver() || w.fireDue(now) {
		return true
	}
	if len(w.queue) == 0 || w.queue[0].at.After(now) {
		return false
	}
	m := w.queue[0]
	w.queue = w.queue[1:]
	if to := m.to(); m.kind != request && to != nil && to.paused(now) {
		w.schedule(m, to.pausedUntil) // after the pause, in the order they came
		return true
	}
	switch m.kind {
	case request:
		w.execute(m, now)
	case reply:
		w.deliverReply(m)
	case push:
		w.deliverPush(m)
	}
	return true
}

func (w *World) execute(m *msg, now time.Time) {
	n, c := m.node, m.call
	switch {
	case n.crashed || n.cut:
		w.Tracef("%s: #%d %s lost on arrival (%s)", n.name, c.id, c.name, n.state())
		return
	case w.down:
		w.scheduleReply(m, result{err: ErrRefused}, now)
		return
	}
	var r result
	switch {
	case c.sub != nil:
		if c.sub.closed {
			r.err = ErrReset
			break
		}
		w.seq++
		c.sub.id, c.sub.live = w.seq, true
		w.subs[c.sub.channel] = append(w.subs[c.sub.channel], c.sub)
		r.v = Status("OK")
	case c.script != "":
		r.v = w.Redis.Eval(c.script, c.keys, c.args)
	default:
		r.v = w.Redis.Do(c.args...)
	}
	w.Tracef("%s: #%d %s %s -> %s", n.name, c.id, c.name, strings.Join(c.args, " "), FormatReply(r.v))
	if w.lost(w.Faults.Loss) {
		w.Tracef("%s: #%d reply lost", n.name, c.id)
		return
	}
	w.scheduleReply(m, r, now)
}

func (w *World) deliverReply(m *msg) {
	n, c := m.node, m.call
	switch {
	case n.crashed || (n.cut && m.res.err != ErrRefused):
		w.Tracef("%s: #%d reply lost (%s)", n.name, c.id, n.state())
	case c.abandoned:
		w.Tracef("%s: #%d reply came after the caller gave up", n.name, c.id)
	default:
		w.Tracef("%s: #%d reply delivered", n.name, c.id)
		c.reply <- m.res
	}
}

func (w *World) deliverPush(m *msg) {
	s := m.sub
	if s.closed || !s.live {
		return
	}
	w.Tracef("%s: sub %d <- %q", s.node.name, s.id, m.payload)
	s.onMsg(m.payload)
}

// publish is PUBLISH: each subscriber gets the message after its own delay, in order.
func (w *World) publish(channel, message string) int64 {
	subs := w.subs[channel]
	now := time.Now()
	for _, s := range subs {
		if s.node.cut || s.node.crashed || w.lost(w.Faults.PubLoss) {
			w.Tracef("%s: sub %d message lost", s.node.name, s.id)
			continue
		}
		at := now.Add(w.latency())
		if last := w.lastPub[s]; !at.After(last) {
			at = last.Add(time.Nanosecond) // one connection: in order
		}
		w.lastPub[s] = at
		w.schedule(&msg{kind: push, sub: s, payload: message}, at)
	}
	return int64(len(subs))
}

// SleepUntil sleeps until t, or less when a node sends a request, arms a timer, or comes back
// to a select on a timer that fired meanwhile (Timer.C).
func (w *World) SleepUntil(t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-w.wake:
	}
}

// Cut partitions node from Redis (refuse: calls fail at once, else they hang and are lost);
// its subscriptions break.
func (w *World) Cut(n *Node, refuse bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n.cut, n.refuse = true, refuse
	w.breakSubsOf(n, "cut")
}

// Heal ends node's partition.
func (w *World) Heal(n *Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n.cut = false
}

// Crash ends node for good: everything to and from it is lost.
func (w *World) Crash(n *Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n.crashed = true
	w.breakSubsOf(n, "crash")
}

func (w *World) breakSubsOf(n *Node, why string) {
	for _, ch := range w.channels() {
		for _, s := range append([]*Sub(nil), w.subs[ch]...) {
			if n == nil || s.node == n {
				w.breakSub(s, why)
			}
		}
	}
}

func (w *World) channels() []string {
	chs := make([]string, 0, len(w.subs))
	for ch := range w.subs {
		chs = append(chs, ch)
	}
	sort.Strings(chs)
	return chs
}

// RestartRedis restarts the server with the data of snap (nil: none, a restart without
// persistence), down for a while when down is set (until Up). Every connection breaks: a
// request or reply in flight fails with ErrReset.
func (w *World) RestartRedis(snap *Snapshot, down bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Redis.Restore(snap)
	w.down = down
	w.breakSubsOf(nil, "redis restart")
	now := time.Now()
	q := w.queue
	w.queue = nil
	for _, m := range q {
		switch m.kind {
		case request:
			w.scheduleReply(m, result{err: ErrReset}, now)
		case reply:
			w.schedule(&msg{kind: reply, node: m.node, call: m.call, res: result{err: ErrReset}}, m.at)
		}
	}
}

// Up ends a Redis outage.
func (w *World) Up() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.down = false
}

// Snapshot copies Redis's data now.
func (w *World) Snapshot() *Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.Redis.Snapshot()
}

// BreakSubscriptions breaks every subscription of node (all nodes when nil).
func (w *World) BreakSubscriptions(n *Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.breakSubsOf(n, "cut by the network")
}

// Get reads a string key of Redis, for the simulator's checks.
func (w *World) Get(key string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.Redis.Get(key)
}

// FormatReply writes a reply for the trace.
func FormatReply(v any) string {
	switch v := v.(type) {
	case nil:
		return "(nil)"
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = FormatReply(x)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case string:
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprint(v)
}
