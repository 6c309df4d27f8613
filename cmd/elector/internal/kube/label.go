package kube

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// The backoff between failed label patches.
const (
	labelBackoffMin = 500 * time.Millisecond
	labelBackoffMax = 30 * time.Second
)

// Labeler keeps one label of the pod equal to the wanted state: "true" while this replica
// leads, absent otherwise. One goroutine (Run) sends the patches, so they reach the API
// server in the order the states were wanted: a removal is never overtaken by an older
// addition. A failed patch is retried with backoff until it succeeds or another state is
// wanted. The first wanted state is "absent": a label a crashed predecessor container left on
// this pod is removed when the elector starts.
type Labeler struct {
	c                  *Client
	namespace, pod     string
	key                string
	callTimeout        time.Duration
	backoffMin, maxOff time.Duration
	fails              *Failures

	mu      sync.Mutex
	want    bool
	wantGen uint64        // the generation of want; 1 is the startup removal
	doneGen uint64        // the last generation applied
	applied chan struct{} // closed and replaced when doneGen advances
	kick    chan struct{}
}

// NewLabeler returns a Labeler of the label key on the pod namespace/pod; each patch is
// bounded by callTimeout. Run must be running for anything to be applied.
func NewLabeler(c *Client, namespace, pod, key string, callTimeout time.Duration) *Labeler {
	return &Labeler{
		c: c, namespace: namespace, pod: pod, key: key, callTimeout: callTimeout,
		backoffMin: labelBackoffMin, maxOff: labelBackoffMax,
		wantGen: 1, applied: make(chan struct{}), kick: make(chan struct{}, 1),
		fails: NewFailures(namespace, c.server.String(), nil),
	}
}

// ReportTo makes the Labeler report its failures to f; call it before Run.
func (l *Labeler) ReportTo(f *Failures) { l.fails = f }

// Set wants the label present (leader) or absent, and returns the generation Wait takes.
// A patch in flight is not cancelled: a cancelled request may still be applied by the API
// server after the next one, so the next state is sent only once the patch in flight was
// answered or timed out.
func (l *Labeler) Set(leader bool) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if leader == l.want {
		return l.wantGen // already wanted: applied, or on its way
	}
	l.want = leader
	l.wantGen++
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return l.wantGen
}

// Wait returns nil once the state of generation gen (or a later one) was applied, or ctx's
// error.
func (l *Labeler) Wait(ctx context.Context, gen uint64) error {
	for {
		l.mu.Lock()
		done, ch := l.doneGen >= gen, l.applied
		l.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Run applies the wanted states until ctx ends. Failures are reported (logged once per
// kind, counted) and retried with backoff.
func (l *Labeler) Run(ctx context.Context) {
	backoff, uncertain := l.backoffMin, false
	for ctx.Err() == nil {
		l.mu.Lock()
		want, gen, pending := l.want, l.wantGen, l.wantGen != l.doneGen
		l.mu.Unlock()
		if !pending {
			l.sleep(ctx, -1)
			continue
		}
		err := l.patch(ctx, want)
		if err == nil {
			l.markApplied(gen)
			l.fails.Succeeded(OpLabel)
			backoff = l.backoffMin
			if !want && uncertain {
				l.removeAgain(ctx, gen)
			}
			uncertain = want && uncertain
			continue
		}
		if ctx.Err() != nil {
			return
		}
		// An addition without an answer may still be applied later by the API server.
		uncertain = uncertain || (want && !isAPIError(err))
		l.fails.Failed(OpLabel, err)
		l.sleep(ctx, jitter(backoff))
		backoff = min(2*backoff, l.maxOff)
	}
}

// removeAgain sends the removal of generation gen once more after a call timeout, unless
// another state is wanted by then: an addition that timed out before may have been applied
// by the API server after the first removal.
func (l *Labeler) removeAgain(ctx context.Context, gen uint64) {
	l.sleep(ctx, l.callTimeout)
	l.mu.Lock()
	again := l.wantGen == gen && ctx.Err() == nil
	l.mu.Unlock()
	if !again {
		return
	}
	if err := l.patch(ctx, false); err != nil && ctx.Err() == nil {
		l.fails.Failed(OpLabel, fmt.Errorf("remove the leader label %s again after an addition without an answer: %w", l.key, err))
	}
}

// isAPIError reports whether err is an answer of the API server (the call's outcome is
// known), not a transport error or a timeout.
func isAPIError(err error) bool {
	var ae *APIError
	return errors.As(err, &ae)
}

// patch sends one patch for want.
func (l *Labeler) patch(ctx context.Context, want bool) error {
	callCtx, cancel := context.WithTimeout(ctx, l.callTimeout)
	defer cancel()
	var value *string
	if want {
		v := "true"
		value = &v
	}
	return l.c.SetPodLabel(callCtx, l.namespace, l.pod, l.key, value)
}

// markApplied records that generation gen was applied and wakes the waiters.
func (l *Labeler) markApplied(gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if gen > l.doneGen {
		l.doneGen = gen
		close(l.applied)
		l.applied = make(chan struct{})
	}
}

// sleep waits d (for ever if d < 0) or until Set or ctx ends.
func (l *Labeler) sleep(ctx context.Context, d time.Duration) {
	var timer <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-l.kick:
	case <-timer:
	case <-ctx.Done():
	}
}

// jitter returns d plus up to 20%.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}
