package leasekit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/lease"
)

// EventKind tells what happened to a lease.
type EventKind int

const (
	// Acquired: a new term began; Event.Record is its record, Event.TTL its lease time.
	Acquired EventKind = iota + 1
	// Renewed: the holder renewed its term for Event.TTL from now (only with
	// Ext.AnnounceRenewals).
	Renewed
	// Released: the holder released its term; Event.Record is the ended term's record.
	Released
	// ResignRequested: the term Event.Record was asked to step down (Lease.RequestResign);
	// Event.TTL is the hold-off. Parsers older than the resign protocol drop it as an unknown
	// kind.
	ResignRequested
)

var eventWords = [...]string{Acquired: "acquired", Renewed: "renewed", Released: "released", ResignRequested: "resign"}

// String returns the word used for the kind on the channel: "acquired", "renewed", "released",
// "resign".
func (k EventKind) String() string {
	if k >= Acquired && int(k) < len(eventWords) {
		return eventWords[k]
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one announcement on a lease's channel.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// TTL is the lease time the holder set: from the moment of the event, the lease lasts TTL
	// unless renewed or released. 0 for Released; the hold-off for ResignRequested.
	TTL time.Duration
	// Record is the term the event is about.
	Record lease.Record
}

// maxTTLMillis is the largest lease time, in milliseconds, that a time.Duration holds.
const maxTTLMillis = int64(1<<63-1) / int64(time.Millisecond)

// ParseEvent decodes a message of the channel: "<kind> <ttl_ms> <record>", where kind is
// acquired, renewed, released or resign.
func ParseEvent(payload string) (Event, error) {
	word, rest, ok := strings.Cut(payload, " ")
	ttl, value, ok2 := strings.Cut(rest, " ")
	if !ok || !ok2 {
		return Event{}, fmt.Errorf("parse event %q: want \"<kind> <ttl_ms> <record>\"", payload)
	}
	var kind EventKind
	for k, w := range eventWords {
		if w != "" && w == word {
			kind = EventKind(k)
		}
	}
	if kind == 0 {
		return Event{}, fmt.Errorf("parse event %q: unknown kind %q", payload, word)
	}
	ms, err := strconv.ParseInt(ttl, 10, 64)
	if err != nil || ms < 0 || ms > maxTTLMillis {
		return Event{}, fmt.Errorf("parse event %q: ttl %q is not an integer from 0 to %d", payload, ttl, maxTTLMillis)
	}
	rec, err := seam.ParseRecord(value)
	if err != nil {
		return Event{}, fmt.Errorf("parse event: %w", err)
	}
	return Event{Kind: kind, TTL: time.Duration(ms) * time.Millisecond, Record: rec}, nil
}

// Subscription delivers the events of one lease. Messages that are not events of this
// protocol are dropped. The subscription ends, and Events is closed, when Close is called or
// when its connection fails: it breaks, or a ping sent after timing.HealthInterval of silence goes
// unanswered for as long again. Observers subscribe again after that, and poll meanwhile,
// as package election does: events published while nobody listens are lost.
type Subscription struct {
	ps      *redis.PubSub
	channel string
	events  chan Event
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	logger  klog.Logger
	broken  map[string]bool // the kinds of event already logged as breaking the protocol
}

// Subscribe subscribes to the lease's channel and returns once Redis confirmed the
// subscription, so that no event published after Subscribe returns is missed.
func (l *Lease) Subscribe(ctx context.Context) (*Subscription, error) {
	ps := seam.Client(l.Lease).Subscribe(ctx, l.Keys().Events)
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, fmt.Errorf("subscribe to events of lease %q: %w", l.Name(), err)
	}
	s := &Subscription{ps: ps, channel: l.Keys().Events, events: make(chan Event, 16), done: make(chan struct{}), logger: klog.FromContext(ctx)}
	s.wg.Add(1)
	go s.receive()
	return s, nil
}

// Events returns the channel of events. It is closed when the subscription ends.
func (s *Subscription) Events() <-chan Event { return s.events }

// Close unsubscribes, closes the connection and waits until the Events channel is closed.
// It is safe to call twice.
func (s *Subscription) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.ps.Close()
		s.wg.Wait()
	})
	return err
}

// receive reads the subscription's connection itself rather than through go-redis's
// PubSub.Channel, whose extra goroutine costs a scheduling hop (about 0.1 ms on an idle
// machine) on the way of every release to the follower that takes over.
func (s *Subscription) receive() {
	defer s.wg.Done()
	defer close(s.events)
	ctx := context.Background()
	pinged := false
	for {
		msg, err := s.ps.ReceiveTimeout(ctx, timing.HealthInterval)
		var netErr net.Error
		var redisErr redis.Error
		switch {
		case err == nil:
			pinged = false
		case errors.As(err, &redisErr):
			// An error reply, e.g. a PING that the user's ACL refuses: the connection works.
			pinged = false
			continue
		case !pinged && errors.As(err, &netErr) && netErr.Timeout():
			pctx, cancel := context.WithTimeout(ctx, timing.HealthInterval)
			err = s.ps.Ping(pctx)
			cancel()
			if err != nil {
				return
			}
			pinged = true
			continue
		default: // broken, closed, or the ping went unanswered
			return
		}
		m, ok := msg.(*redis.Message)
		if !ok {
			continue // the answer to a ping, or a subscription confirmation
		}
		ev, err := ParseEvent(m.Payload)
		if err != nil {
			s.dropped(m.Payload, err)
			continue
		}
		select {
		case s.events <- ev:
		case <-s.done:
			return
		}
	}
}

// dropped logs, once per kind of event per subscription, a message of a known kind that does
// not parse: a client outside the protocol publishes on the lease's channel. Messages of kinds
// this version does not know are dropped silently, for a newer protocol's sake.
func (s *Subscription) dropped(payload string, err error) {
	word, _, _ := strings.Cut(payload, " ")
	known := false
	for _, w := range eventWords {
		known = known || (w != "" && w == word)
	}
	if !known || s.broken[word] {
		return
	}
	if s.broken == nil {
		s.broken = map[string]bool{}
	}
	s.broken[word] = true
	if len(payload) > 200 {
		payload = payload[:200]
	}
	s.logger.Error(err, "Dropped a message on the lease channel that breaks the protocol (docs/PROTOCOL.md, Events)", "channel", s.channel, "payload", payload)
}
