//go:build elector_mutants

package election

import (
	"context"
	"sync/atomic"
)

// activeMutant is the mutant the simulator switched on (0: none). A test-only build's switch:
// production builds compile mutant_off.go instead.
var activeMutant atomic.Int64

// mutant reports whether mutant n is switched on.
func mutant(n int) bool { return activeMutant.Load() == int64(n) }

// setMutant switches mutant n on (0: off); true: this build has mutants.
func setMutant(n int) bool {
	activeMutant.Store(int64(n))
	return true
}

// mutantDeadlineFromReply is mutant 8: the renew deadline counts from the reply of the last
// renew instead of its send time.
func mutantDeadlineFromReply(l *leadership) {
	if mutant(8) {
		l.lastOK = l.e.clock.Now()
	}
}

// subscribe is mutant 2: the Group's (pattern) subscription is made on the loop goroutine,
// which waits for it (up to RetryPeriod, more on a client that ignores deadlines) and neither
// renews nor checks deadlines meanwhile. ctx is the subscription goroutine's.
func (r *groupRun) subscribe(ctx, sctx context.Context) (groupSubscription, error) {
	if !mutant(2) {
		return r.rd.subscribe(sctx)
	}
	var sub groupSubscription
	var err error
	done := make(chan struct{})
	select {
	case r.onLoop <- func() { sub, err = r.rd.subscribe(sctx); close(done) }:
		<-done
		return sub, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// mutantOnLoop is the channel on which mutant 2 hands the subscribe call to the loop.
func mutantOnLoop() chan func() { return make(chan func()) }
