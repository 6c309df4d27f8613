package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/lease"
	"github.com/elector/elector/pkg/schedule"
)

// Flag names of elector run --once-per (docs/DESIGN.md, "Once per period").
const (
	flagOncePer    = "once-per"
	flagExitIfDone = "exit-if-done"
	flagForce      = "force"
)

// validateOnce checks --once-per and the flags that need it.
func (o *runOptions) validateOnce() error {
	switch {
	case o.oncePer < 0 || o.oncePer%time.Millisecond != 0:
		return fmt.Errorf("--%s: must be 0 (off) or a positive whole number of milliseconds such as 24h, got %v", flagOncePer, o.oncePer)
	case o.oncePer == 0 && o.exitIfDone:
		return fmt.Errorf("--%s: needs --%s", flagExitIfDone, flagOncePer)
	case o.oncePer == 0 && o.force:
		return fmt.Errorf("--%s: needs --%s (it ignores the done mark that --%s writes)", flagForce, flagOncePer, flagOncePer)
	case o.oncePer > 0 && o.onSuccess == onSuccessHold:
		return fmt.Errorf("--%s=%s: not with --%s, which keeps the lease after a success already (add --%s to exit instead)", flagOnSuccess, onSuccessHold, flagOncePer, flagExitIfDone)
	}
	return nil
}

// oncePeriod is --once-per on the slot machinery of --schedule (pkg/schedule's OncePer): every
// run claims a slot of its own at Redis's time, fenced by the term's token, and its end is
// recorded by finish.lua (PREFIX:{NAME}:schedule and :runs, shown by elector status); a
// successful run's finish also writes the done mark, which every term reads before it runs
// the command.
type oncePeriod struct {
	l          *leasekit.Lease // the done mark's reads
	slots      *schedule.OncePer
	period     time.Duration // --once-per
	exitIfDone bool          // --exit-if-done
	recheck    time.Duration // how often a leader that waits for a mark re-reads it: --lease-duration
	retry      time.Duration // between the attempts of a failed read or write: --retry-period
	call       time.Duration // timeout of one read or write
	markFor    time.Duration // how long a failed mark write is retried: --lease-duration

	mu     sync.Mutex
	force  bool  // --force: ignore a mark until the command succeeded here once
	logged int64 // the token of the last mark logged, not to log it at every re-read
}

// newOncePeriod returns the --once-per state of rc, nil without --once-per.
func newOncePeriod(rc *runConfig, client redis.UniversalClient) (*oncePeriod, error) {
	if rc.run.oncePer == 0 {
		return nil, nil
	}
	lo := &rc.common.lease
	l, err := leasekit.New(client, lo.name, lease.Options{Prefix: lo.prefix})
	if err != nil {
		return nil, err
	}
	slots, err := schedule.NewOncePer(schedule.OnceConfig{Client: client, LeaseName: lo.name, Prefix: lo.prefix, Period: rc.run.oncePer})
	if err != nil {
		return nil, err
	}
	return &oncePeriod{l: l, slots: slots, period: rc.run.oncePer, exitIfDone: rc.run.exitIfDone, force: rc.run.force,
		recheck: lo.leaseDuration, retry: lo.retryPeriod, call: lo.callTimeout(), markFor: lo.leaseDuration}, nil
}

// check reads the done mark for the term under --once-per and, when none holds, claims the
// term's run (a slot at Redis's time): evDue when the command is due, evMarkHolds while a
// mark holds, evTermEnded when the term ended first.
func (t *term) check() runInput {
	o := t.s.once
	if t.ctx.Err() != nil {
		return runInput{ev: evTermEnded, cause: context.Cause(t.ctx)}
	}
	wait, ok := o.due(t.ctx)
	switch {
	case !ok:
		return runInput{ev: evTermEnded, cause: context.Cause(t.ctx)}
	case wait > 0:
		return runInput{ev: evMarkHolds, wait: wait}
	}
	slot, ok := o.claim(t.ctx, t.token)
	if !ok {
		<-t.ctx.Done()
		return runInput{ev: evTermEnded, cause: context.Cause(t.ctx)}
	}
	t.onceRun = slot
	return runInput{ev: evDue}
}

// waitUntil waits, leading, until until: evRecheck, or evTermEnded when the term ends first.
func (t *term) waitUntil(until time.Time) runInput {
	if !sleepCtx(t.ctx, time.Until(until)) || t.ctx.Err() != nil {
		return runInput{ev: evTermEnded, cause: context.Cause(t.ctx)}
	}
	return runInput{ev: evRecheck}
}

// claim claims the run of the term with token; false when the term ended first (or ctx did).
// Redis errors are retried: the command is not run unclaimed.
func (o *oncePeriod) claim(ctx context.Context, token int64) (schedule.Slot, bool) {
	for {
		slot, err := o.slots.Claim(ctx, token)
		switch {
		case err == nil:
			return slot, true
		case errors.Is(err, schedule.ErrFenced):
			klog.InfoS("The term ended before its run was claimed; not running the command", "token", token)
			return schedule.Slot{}, false
		case ctx.Err() != nil:
			return schedule.Slot{}, false
		}
		klog.ErrorS(err, "Cannot claim the run; retrying before running the command", "token", token)
		if !sleepCtx(ctx, o.retry) {
			return schedule.Slot{}, false
		}
	}
}

// due reads the done mark: 0 when the command is due, otherwise how long the mark holds.
// Read errors are retried (the command is not run without knowing); false when ctx ended.
func (o *oncePeriod) due(ctx context.Context) (time.Duration, bool) {
	for {
		cctx, cancel := context.WithTimeout(ctx, o.call)
		d, err := o.l.GetDone(cctx)
		cancel()
		if err == nil {
			return o.judge(d), true
		}
		klog.ErrorS(err, "Cannot read the done mark; retrying before running the command")
		if !sleepCtx(ctx, o.retry) {
			return 0, false
		}
	}
}

// judge returns how long the mark d holds (0 when there is none or --force ignores it), and
// logs a mark the first time it is seen.
func (o *oncePeriod) judge(d *leasekit.Done) time.Duration {
	if d == nil {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.force {
		klog.InfoS("Ignoring the done mark (--force)", "doneBy", d.Term.Identity, "token", d.Term.Token, "finished", d.Finished.Format(time.RFC3339))
		return 0
	}
	wait, until := d.TTL, time.Now().Add(d.TTL).UTC().Format(time.RFC3339)
	if d.TTL == lease.NoExpiry {
		wait, until = o.recheck, "never (the key has no expiry)"
	}
	if o.logged != d.Term.Token {
		o.logged = d.Term.Token
		klog.InfoS("Not running the command: it succeeded in this period already (--once-per)", "doneBy", d.Term.Identity,
			"token", d.Term.Token, "finished", d.Finished.Format(time.RFC3339), "exitCode", d.ExitCode, "markHoldsUntil", until, "key", o.l.Keys().Done)
	}
	return max(wait, time.Millisecond)
}

// markDone records the run done and writes the done mark in the same step (finish.lua),
// fenced, to expire one period after the run's start by Redis's clock: on Redis errors it
// retries for markFor, also after the term ended (the fence refuses a write once another term
// holds the lease). A mark that could not be written means that the next leader runs the
// command again: at least once per period, not at most once.
func (o *oncePeriod) markDone(run schedule.Slot) {
	o.mu.Lock()
	o.force = false
	o.mu.Unlock()
	give := time.Now().Add(o.markFor)
	for {
		cctx, cancel := context.WithTimeout(context.Background(), o.call)
		recorded, mark, err := o.slots.Finish(cctx, run, "done", 0)
		cancel()
		switch {
		case err == nil && recorded && mark > 0:
			klog.InfoS("Wrote the done mark: no replica runs the command again until it expires", "key", o.l.Keys().Done, "token", run.Token, "expires", time.Now().Add(mark).UTC().Format(time.RFC3339))
			return
		case err == nil && recorded:
			klog.InfoS("The command ran longer than --once-per: no done mark, it is due again", "token", run.Token, "oncePer", o.period)
			return
		case err == nil:
			klog.InfoS("The run's record is gone (the schedule key was deleted): no done mark, the next leader runs the command again", "token", run.Token)
			return
		case errors.Is(err, schedule.ErrFenced):
			klog.InfoS("The term ended before the done mark was written: the next leader runs the command again (at-least-once)", "token", run.Token)
			return
		case time.Now().After(give):
			klog.ErrorS(err, "Cannot write the done mark; giving up: the next leader runs the command again (at-least-once)", "token", run.Token)
			return
		}
		klog.ErrorS(err, "Cannot write the done mark; retrying", "token", run.Token)
		time.Sleep(o.retry)
	}
}

// ended records a run that did not succeed: failed (CMD's exit code) or lost (stopped as the
// term ended), in one attempt: a run left unrecorded is recorded lost by the next claim.
func (o *oncePeriod) ended(run schedule.Slot, result string, code int) {
	if run.Token == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), o.call)
	defer cancel()
	recorded, _, err := o.slots.Finish(cctx, run, result, code)
	switch {
	case err != nil && !errors.Is(err, schedule.ErrFenced):
		klog.ErrorS(err, "Cannot record the end of the run; the next claim records it lost", "token", run.Token, "result", result)
	case recorded:
		klog.V(2).InfoS("Recorded the end of the run", "token", run.Token, "result", result, "exitCode", code)
	}
}

// sleepCtx waits for d or the end of ctx; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// doneStatus is the done mark of elector run --once-per (leasekit.Done).
type doneStatus struct {
	// Holder is the identity whose command succeeded.
	Holder string `json:"holder"`
	// Token is the fencing token of the term that ran it.
	Token int64 `json:"token"`
	// ExitCode is the command's exit code.
	ExitCode int `json:"exitCode"`
	// Finished is when the command finished, by that replica's clock.
	Finished time.Time `json:"finished"`
	// TTLMs is how long the mark holds, in milliseconds; -1 when the key has no expiry.
	TTLMs int64 `json:"ttlMs"`
}

// readDone reads the done mark of elector run --once-per, nil when none holds.
func readDone(ctx context.Context, l *leasekit.Lease) (*doneStatus, error) {
	d, err := l.GetDone(ctx)
	if d == nil || err != nil {
		return nil, err
	}
	ttl := d.TTL.Milliseconds()
	if d.TTL == lease.NoExpiry {
		ttl = -1
	}
	return &doneStatus{Holder: d.Term.Identity, Token: d.Term.Token, ExitCode: d.ExitCode, Finished: d.Finished, TTLMs: ttl}, nil
}
