//go:build !elector_mutants

package election

import "context"

// The mutation switches of the deterministic simulator (issue 24; docs/MODEL.md). Each one
// re-introduces a bug found by review, at a one-line site in the production code, only in a
// build with the tag elector_mutants (mutant_on.go). In every other build they are these
// constant no-ops, which the compiler inlines away.

// mutant reports whether mutant n is switched on: never.
func mutant(int) bool { return false }

// mutantDeadlineFromReply is mutant 8's site: nothing.
func mutantDeadlineFromReply(*leadership) {}

// setMutant switches mutant n on for the simulator; false: this build has none.
func setMutant(int) bool { return false }

// subscribe is mutant 2's site: the subscription goroutine subscribes.
func (r *groupRun) subscribe(_, sctx context.Context) (groupSubscription, error) {
	return r.rd.subscribe(sctx)
}

// mutantOnLoop is mutant 2's channel: none.
func mutantOnLoop() chan func() { return nil }
