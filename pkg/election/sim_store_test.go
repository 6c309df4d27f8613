package election

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/testing/sim"
	"github.com/elector/elector/pkg/lease"
)

// simStore is the store seam of one Elector over the simulator's network: it runs the
// project's own scripts (read from pkg/lease/scripts) on the simulated Redis with the keys and
// arguments pkg/lease sends, and decodes their replies as pkg/lease does.
type simStore struct {
	node    *sim.Node
	scripts sim.Scripts
	keys    leasewire.Keys
	owner   string // "<instance>:<identity>"

	mu       sync.Mutex
	won      []lease.Record        // records an acquire reply gave this replica, in order
	released map[lease.Record]bool // records a release was sent for
}

func (s *simStore) note(rec lease.Record, won bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if won {
		s.won = append(s.won, rec)
		return
	}
	if s.released == nil {
		s.released = map[lease.Record]bool{}
	}
	s.released[rec] = true
}

// leftHeld returns the records this replica won that neither started a term (started) nor
// were released.
func (s *simStore) leftHeld(started func(lease.Record) bool) []lease.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []lease.Record
	for _, rec := range s.won {
		if !s.released[rec] && !started(rec) {
			out = append(out, rec)
		}
	}
	return out
}

func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func (s *simStore) acquire(ctx context.Context, ttl time.Duration) (bool, lease.Status, *leasekit.Reservation, error) {
	k := s.keys
	v, err := s.node.Call(ctx, "acquire", s.scripts.Acquire, []string{k.Lease, k.Token, k.Terms, k.Resign}, []string{s.owner, millis(ttl), k.Events})
	if err != nil {
		return false, lease.Status{}, nil, fmt.Errorf("acquire: %w", err)
	}
	reply, _ := v.([]any)
	if len(reply) == 4 && reply[0] == int64(2) {
		rec, err := leasekit.ParseRecord(asString(reply[1]))
		if err != nil {
			return false, lease.Status{}, nil, fmt.Errorf("acquire: reservation: %w", err)
		}
		pttl, _ := reply[2].(int64)
		return false, lease.Status{}, &leasekit.Reservation{Resigned: rec, Target: asString(reply[3]), TTL: pttlOf(pttl)}, nil
	}
	if len(reply) != 3 {
		return false, lease.Status{}, nil, fmt.Errorf("acquire: unexpected reply %v", v)
	}
	rec, err := leasekit.ParseRecord(asString(reply[1]))
	if err != nil {
		return false, lease.Status{}, nil, fmt.Errorf("acquire: %w", err)
	}
	pttl, _ := reply[2].(int64)
	if reply[0] == int64(1) {
		s.note(rec, true)
	}
	return reply[0] == int64(1), lease.Status{Held: true, Record: rec, TTL: pttlOf(pttl)}, nil, nil
}

func asString(v any) string { s, _ := v.(string); return s }

func pttlOf(ms int64) time.Duration {
	if ms < 0 {
		return lease.NoExpiry
	}
	return time.Duration(ms) * time.Millisecond
}

func (s *simStore) renew(ctx context.Context, term lease.Record, ttl time.Duration) (bool, error) {
	k := s.keys
	v, err := s.node.Call(ctx, "renew", s.scripts.Renew, []string{k.Lease, k.Resign}, []string{term.String(), millis(ttl), k.Events})
	if err != nil {
		return false, fmt.Errorf("renew: %w", err)
	}
	if v == int64(2) {
		return true, fmt.Errorf("renew: token %d: %w", term.Token, leasekit.ErrResignRequested)
	}
	return v == int64(1), nil
}

func (s *simStore) release(ctx context.Context, term lease.Record) (bool, error) {
	s.note(term, false)
	k := s.keys
	v, err := s.node.Call(ctx, "release", s.scripts.Release, []string{k.Lease, k.Resign}, []string{term.String(), k.Events})
	if err != nil {
		return false, fmt.Errorf("release: %w", err)
	}
	return v == int64(1), nil
}

func (s *simStore) resign(ctx context.Context, term lease.Record, target string, holdOff, timeout time.Duration) error {
	k := s.keys
	args := []string{millis(holdOff), target, millis(timeout), k.Events, term.String()}
	v, err := s.node.Call(ctx, "resign", s.scripts.Resign, []string{k.Lease, k.Resign}, args)
	var rerr sim.Error
	switch {
	case errors.As(err, &rerr) && strings.HasPrefix(string(rerr), "ERR resign target is the holder"):
		return fmt.Errorf("resign: %w: %q", leasekit.ErrTargetIsHolder, target)
	case err != nil:
		return fmt.Errorf("resign: %w", err)
	}
	if reply, _ := v.([]any); len(reply) != 2 || reply[0] != int64(1) {
		return fmt.Errorf("resign: token %d: %w (%v)", term.Token, leasekit.ErrOtherTerm, v)
	}
	return nil
}

func (s *simStore) advertise(ctx context.Context, ttl time.Duration, priority int64, version string, leave bool) (leasekit.Candidates, error) {
	args := leasekit.CandidateArgs(s.owner, ttl, priority, version, leave)
	sargs := make([]string, len(args))
	for i, a := range args {
		sargs[i] = fmt.Sprint(a)
	}
	v, err := s.node.Call(ctx, "candidate", s.scripts.Candidate, []string{s.keys.Candidates}, sargs)
	if err != nil {
		return leasekit.Candidates{}, fmt.Errorf("candidate: %w", err)
	}
	reply, _ := v.([]any)
	return leasekit.ParseCandidateReply(reply)
}

func (s *simStore) subscribe(ctx context.Context) (subscription, error) {
	ss := &simSub{events: make(chan leasekit.Event, 16)}
	sub, err := s.node.Subscribe(ctx, s.keys.Events, ss.deliver, ss.broken)
	if err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	ss.sub = sub
	return ss, nil
}

// simSub is a subscription of the simulated network, as leasekit.Subscription delivers it.
type simSub struct {
	events chan leasekit.Event
	sub    *sim.Sub
	once   sync.Once
}

func (s *simSub) Events() <-chan leasekit.Event { return s.events }

func (s *simSub) Close() error {
	if s.sub != nil {
		s.sub.Close()
	}
	s.broken()
	return nil
}

func (s *simSub) broken() { s.once.Do(func() { close(s.events) }) }

// deliver is called by the driver, never after Close (the world checks under its lock).
func (s *simSub) deliver(payload string) {
	ev, err := leasekit.ParseEvent(payload)
	if err != nil {
		return
	}
	select {
	case s.events <- ev:
	default: // a full buffer: lost, as a slow subscriber's messages are
	}
}
