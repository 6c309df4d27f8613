//go:build elector_mutants

package election

import "sync/atomic"

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
