package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// The Recorder's limits, after client-go's event correlator: an Event repeated within
// dedupWindow becomes count+1 on the first one (a PATCH), and a token bucket of spamBurst
// calls refilled by one every spamRefill bounds the calls of one pod, so that a flapping
// Redis cannot flood the API server. Each Event is tried eventAttempts times.
const (
	dedupWindow   = 10 * time.Minute
	spamBurst     = 25
	spamRefill    = 5 * time.Minute
	eventAttempts = 3
	queueSize     = 32
)

// Event types.
const (
	TypeNormal  = "Normal"
	TypeWarning = "Warning"
)

// Recorder writes core/v1 Events about one object (the elector's pod) from one goroutine
// (Run); Eventf never blocks and never fails.
type Recorder struct {
	c           *Client
	ref         ObjectReference
	component   string
	host        string
	callTimeout time.Duration
	retryAfter  time.Duration // the first backoff of try, doubled at each attempt
	now         func() time.Time
	fails       *Failures

	queue chan pendingEvent
	done  chan struct{} // closed when Run returned

	// Run's state.
	seen    map[string]*seenEvent
	tokens  float64
	refill  time.Time
	dropped int
}

type pendingEvent struct {
	typ, reason, message string
	at                   time.Time
}

type seenEvent struct {
	name        string
	count       int32
	first, last time.Time
}

// NewRecorder returns a Recorder of Events about ref, from component; each call is bounded
// by callTimeout.
func NewRecorder(c *Client, ref ObjectReference, component string, callTimeout time.Duration) *Recorder {
	return &Recorder{
		c: c, ref: ref, component: component, callTimeout: callTimeout, retryAfter: time.Second, now: time.Now,
		queue: make(chan pendingEvent, queueSize), done: make(chan struct{}),
		seen: map[string]*seenEvent{}, tokens: spamBurst,
		fails: NewFailures(ref.Namespace, c.server.String(), nil),
	}
}

// ReportTo makes the Recorder report its failures to f; call it before Run.
func (r *Recorder) ReportTo(f *Failures) { r.fails = f }

// Eventf queues an Event; a full queue drops it (logged at -v=2).
func (r *Recorder) Eventf(typ, reason, format string, args ...any) {
	e := pendingEvent{typ: typ, reason: reason, message: fmt.Sprintf(format, args...), at: r.now()}
	select {
	case r.queue <- e:
	default:
		klog.V(2).InfoS("Event queue full: event dropped", "reason", reason, "message", e.message)
	}
}

// Run sends the queued Events until ctx ends; then it sends what is still queued, each
// within its call timeout, and returns.
func (r *Recorder) Run(ctx context.Context) {
	defer close(r.done)
	r.refill = r.now()
	for {
		select {
		case e := <-r.queue:
			r.send(ctx, e)
		case <-ctx.Done():
			r.drain()
			return
		}
	}
}

// Done is closed when Run returned.
func (r *Recorder) Done() <-chan struct{} { return r.done }

// drain sends the Events still queued when Run's ctx ended (the last "stopped leading").
func (r *Recorder) drain() {
	for {
		select {
		case e := <-r.queue:
			r.send(context.Background(), e)
		default:
			return
		}
	}
}

// send correlates e with the Events already written and creates or patches one.
func (r *Recorder) send(ctx context.Context, e pendingEvent) {
	if !r.allow(e.at) {
		if r.dropped++; r.dropped == 1 {
			klog.InfoS("Too many Events: dropping them (at most 25 at once, then one every 5 minutes)", "reason", e.reason)
		}
		return
	}
	key := e.typ + "\x00" + e.reason + "\x00" + e.message
	if s, ok := r.seen[key]; ok && e.at.Sub(s.last) < dedupWindow {
		s.count++
		s.last = e.at
		err := r.try(ctx, func(ctx context.Context) error {
			return r.c.PatchEventCount(ctx, r.ref.Namespace, s.name, s.count, s.last)
		})
		if err == nil || !IsStatus(err, 404) {
			r.logFailure(err, e)
			return
		}
		// The Event was deleted (TTL): write it anew.
	}
	s := &seenEvent{name: fmt.Sprintf("%s.%x", r.ref.Name, e.at.UnixNano()), count: 1, first: e.at, last: e.at}
	ev := &Event{
		Name: s.name, Namespace: r.ref.Namespace, InvolvedObject: r.ref,
		Reason: e.reason, Message: e.message, Type: e.typ, Component: r.component, Host: r.host,
		FirstTimestamp: e.at, LastTimestamp: e.at, Count: 1,
		ReportingComponent: r.component, ReportingInstance: r.ref.Name,
	}
	err := r.try(ctx, func(ctx context.Context) error { return r.c.CreateEvent(ctx, ev) })
	if err == nil {
		r.forget(e.at)
		r.seen[key] = s
	}
	r.logFailure(err, e)
}

// try makes call up to eventAttempts times, with a backoff of 1s, 2s between them.
func (r *Recorder) try(ctx context.Context, call func(context.Context) error) error {
	var err error
	for i := range eventAttempts {
		callCtx, cancel := context.WithTimeout(ctx, r.callTimeout)
		err = call(callCtx)
		cancel()
		if err == nil {
			r.fails.Succeeded(OpEvent)
			return nil
		}
		if !expiredEvent(err) {
			r.fails.Failed(OpEvent, err)
		}
		if !Retryable(err) || i == eventAttempts-1 {
			return err
		}
		select {
		case <-time.After(time.Duration(1<<i) * r.retryAfter):
		case <-ctx.Done():
			return err
		}
	}
	return err
}

// expiredEvent reports whether err is the 404 of a count patch: the Event expired, and a
// new one is created instead. That is no failure.
func expiredEvent(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == http.StatusNotFound && ae.Verb == "patch"
}

// logFailure logs, at -v=2, an Event that could not be written (the failure itself was
// reported by try); nil err logs nothing.
func (r *Recorder) logFailure(err error, e pendingEvent) {
	if err != nil {
		klog.V(2).InfoS("Event not written", "err", err, "reason", e.reason, "message", e.message)
	}
}

// allow takes a token of the spam filter at t.
func (r *Recorder) allow(t time.Time) bool {
	if el := t.Sub(r.refill); el > 0 {
		r.tokens = min(spamBurst, r.tokens+float64(el)/float64(spamRefill))
		r.refill = t
	}
	if r.tokens < 1 {
		return false
	}
	r.tokens--
	return true
}

// forget drops the correlation of Events older than the window.
func (r *Recorder) forget(now time.Time) {
	for k, s := range r.seen {
		if now.Sub(s.last) >= dedupWindow {
			delete(r.seen, k)
		}
	}
}

// SetHost sets the source host of the Events (the node name); call it before Run.
func (r *Recorder) SetHost(host string) { r.host = host }
