package election

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/elector/elector/internal/redisfail"
	"github.com/elector/elector/pkg/lease"
)

// watch keeps a follower's subscription to the lease's events. Subscribing is best effort:
// without it the follower polls every RetryPeriod, so a failure is logged once and retried
// at most every RetryPeriod.
type watch struct {
	e       *Elector
	sub     subscription
	lastTry time.Time
	failing bool
	closing sync.WaitGroup // subscriptions being closed in the background
}

// ensure subscribes if there is no subscription and the last failed try is RetryPeriod old.
func (w *watch) ensure(ctx context.Context) {
	if w.sub != nil || (!w.lastTry.IsZero() && w.e.clock.Since(w.lastTry) < w.e.cfg.RetryPeriod) {
		return
	}
	w.lastTry = w.e.clock.Now()
	sctx, cancel := context.WithTimeout(ctx, w.e.callTimeout())
	defer cancel()
	sub, err := w.e.store.subscribe(sctx)
	logger := logr.FromContextOrDiscard(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		w.e.cfg.Metrics.redisError(w.e.cfg.Name, "subscribe", err)
		if !w.failing {
			w.failing = true
			kv := []any{"reason", redisfail.Reason(err)}
			if fix := redisfail.Hint(err); fix != "" {
				kv = append(kv, "fix", fix)
			}
			logger.Error(err, "Cannot subscribe to lease events; polling every retry period instead", kv...)
		}
		return
	}
	if w.failing {
		w.failing = false
		logger.Info("Subscribed to lease events again")
	}
	w.sub = sub
	w.e.subscriptions.Add(1)
}

// events returns the channel of events, nil (blocking forever) without a subscription.
func (w *watch) events() <-chan lease.Event {
	if w.sub == nil {
		return nil
	}
	return w.sub.Events()
}

func (w *watch) subscribed() bool { return w.sub != nil }

// lost drops a subscription whose channel closed.
func (w *watch) lost(logger logr.Logger) {
	logger.V(2).Info("Lease event subscription closed")
	w.close()
	w.lastTry = time.Time{}
}

// close ends the subscription, if any, without waiting: it is called by a follower that has
// just won the lease, between the acquire and OnStartedLeading. wait waits for it.
func (w *watch) close() {
	if sub := w.sub; sub != nil {
		w.closing.Go(func() { _ = sub.Close() })
		w.sub = nil
	}
	w.lastTry = time.Time{}
}

// wait closes the subscription and waits until every closed subscription has ended.
func (w *watch) wait() {
	w.close()
	w.closing.Wait()
}
