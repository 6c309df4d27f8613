package schedule

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/pkg/election"
)

// maxWait bounds one wait of a term: it reads the state again at least this often, so that a
// slow or fast local clock errs by at most its drift over this long, and a state changed by
// hand (DEL of the schedule key) is noticed.
const maxWait = time.Minute

// errOverlap is the cause of a run's ctx cancelled by OverlapCancel.
var errOverlap = errors.New("schedule: the next slot came (overlap policy cancel)")

// Lead runs the schedule for the term whose OnStartedLeading received ctx (election.TokenFrom
// gives its fencing token) and returns once ctx is done and the job returned; call it from
// OnStartedLeading, one term at a time.
func (s *Scheduler) Lead(ctx context.Context) error {
	token := election.TokenFrom(ctx)
	if token <= 0 {
		return errors.New("schedule: Lead needs the ctx of OnStartedLeading (it carries no fencing token)")
	}
	return s.lead(ctx, token)
}

// run is this term's run of a slot.
type run struct {
	slot      time.Time
	started   time.Time // by Redis's clock: the claim's reply
	attempt   int
	cancel    context.CancelCauseFunc
	done      chan error
	cancelled bool // by the overlap policy
}

// term is one term's pass over the schedule.
type term struct {
	s      *Scheduler
	token  int64
	tok    string
	logger klog.Logger
	job    *run
	// Redis's time as of the last reply, and the local clock's reading when it came: Redis's
	// now is estimated as serverAt + clock.Since(localAt).
	serverAt, localAt time.Time
	idle              int // steps in a row that changed nothing
}

func (s *Scheduler) lead(ctx context.Context, token int64) error {
	if !s.leading.CompareAndSwap(false, true) {
		return errors.New("schedule: Lead runs already (one term at a time)")
	}
	defer s.leading.Store(false)
	t := &term{s: s, token: token, tok: strconv.FormatInt(token, 10),
		logger: klog.FromContext(ctx).WithValues("lease", s.cfg.LeaseName, "token", token)}
	defer t.stop(ctx)
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		v, err := t.read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				t.logger.Error(err, "Failed to read the schedule's state; retrying")
			}
			t.wait(ctx, time.Time{}, backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		running := current{last: s.lastRun()}
		if t.job != nil {
			running.slot, running.started = t.job.slot, t.job.started
		}
		var a action
		if v.has && (v.st.spec != s.spec || v.st.zone != s.zone) {
			// The state names another schedule (the spec changed, or the state is older than
			// the spec in it): write this term's, so that status tells the schedule that runs.
			a = skip(v.st.cursor, v.st.cursor, 0, "spec")
		} else {
			a = s.plan(v, running, token, s.knownCursor())
		}
		if v.has {
			s.m.setNext(s.sched.Next(v.st.cursor))
		}
		if !t.do(ctx, a) {
			<-ctx.Done() // fenced: another term holds the lease; the Elector ends this one
			return nil
		}
	}
	return nil
}

// do carries out one action; false when a script said this term no longer holds the lease.
func (t *term) do(ctx context.Context, a action) bool {
	s := t.s
	switch a.kind {
	case actWait:
		t.wait(ctx, a.until, 0)
	case actCancel:
		t.logger.Info("Cancelling the run of the previous slot: the next slot came", "slot", t.job.slot)
		t.job.cancelled = true
		t.job.cancel(errOverlap)
		t.wait(ctx, time.Time{}, 0)
	case actAbandon:
		t.record(ctx, &run{slot: a.slot, attempt: a.attempt}, phaseLost, -1, nil, 1)
	case actSkip:
		if !validReason(a.reason) {
			panic("schedule: invalid skip reason " + a.reason)
		}
		r, err := t.ints(ctx, skipScript, 2, t.tok, ms(a.first), ms(a.last), a.count, a.reason, s.cfg.History, s.spec, s.zone)
		if err != nil {
			t.failed(ctx, err)
			return true
		}
		t.noteNow(r[1])
		switch r[0] {
		case 0:
			return false
		case 1:
			s.noteCursor(a.last)
			if a.count > 0 {
				s.m.missed(a.reason, a.count)
				t.logger.Info("Slots missed", "first", a.first, "last", a.last, "count", a.count, "reason", a.reason)
			}
			t.idle = 0
		default:
			if a.reason == "spec" { // the state names this term's schedule now
				t.idle = 0
				break
			}
			t.noProgress(ctx)
		}
	case actClaim:
		r, err := t.ints(ctx, claimScript, 4, t.tok, ms(a.slot), s.cfg.MaxAttempts, s.deadline.Milliseconds(), s.cfg.History, s.spec, s.zone)
		if err != nil {
			t.failed(ctx, err)
			return true
		}
		t.noteNow(r[2])
		if r[3] == 1 {
			s.m.ran(phaseLost, time.Time{})
		}
		switch r[0] {
		case 0:
			return false
		case 1:
			t.idle = 0
			t.start(ctx, a.slot, int(r[1]))
		case -1:
			t.wait(ctx, a.slot, 0)
		case 4:
			t.idle = 0
			s.m.missed("deadline", 1)
			t.logger.Info("Slot missed: past its starting deadline", "slot", a.slot, "deadline", s.deadline)
		case 5:
			t.idle = 0
			s.m.missed("attempts", 1)
			t.logger.Info("Slot missed: out of attempts", "slot", a.slot, "attempts", r[1])
		default: // 2 decided, 3 busy: read again
			t.noProgress(ctx)
		}
	}
	return true
}

// noProgress backs off when steps change nothing twice in a row (a state the plan and the
// scripts disagree on must not spin).
func (t *term) noProgress(ctx context.Context) {
	t.idle++
	if t.idle >= 2 {
		t.wait(ctx, time.Time{}, time.Second)
	}
}

func (t *term) failed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	t.logger.Error(err, "Schedule step failed; retrying")
	t.wait(ctx, time.Time{}, 100*time.Millisecond)
}

// call runs a script with the lease, schedule and runs keys, bounded by callTimeout.
func (t *term) call(ctx context.Context, sc *lualib.Script, args ...any) (any, error) {
	cctx, cancel := context.WithTimeout(ctx, t.s.callTimeout)
	defer cancel()
	v, err := t.s.caller.call(cctx, sc, t.s.keys, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sc.Name(), err)
	}
	return v, nil
}

// ints runs a script and decodes its reply of at least n integers.
func (t *term) ints(ctx context.Context, sc *lualib.Script, n int, args ...any) ([]int64, error) {
	v, err := t.call(ctx, sc, args...)
	if err != nil {
		return nil, err
	}
	return intsReply(sc.Name(), v, n)
}

func (t *term) read(ctx context.Context) (view, error) {
	cctx, cancel := context.WithTimeout(ctx, t.s.callTimeout)
	defer cancel()
	v, err := t.s.caller.call(cctx, readScript, t.s.keys[1:2])
	if err != nil {
		return view{}, fmt.Errorf("%s: %w", readScript.Name(), err)
	}
	out, err := decodeRead(v)
	if err != nil {
		return view{}, err
	}
	t.noteNow(msOf(out.now))
	if out.has {
		t.s.noteCursor(out.st.cursor)
	}
	return out, nil
}

// noteNow keeps Redis's time of a reply, for the estimate of Redis's now.
func (t *term) noteNow(ms int64) {
	t.serverAt, t.localAt = time.UnixMilli(ms).UTC(), t.s.clock.Now()
}

// wait waits until Redis's clock reads until (zero: maxWait, or at most max when max > 0), the
// run ends (then its end is recorded), or ctx is done.
func (t *term) wait(ctx context.Context, until time.Time, max time.Duration) {
	d := maxWait
	if max > 0 {
		d = max
	}
	if !until.IsZero() {
		est := t.serverAt.Add(t.s.clock.Since(t.localAt))
		d = min(d, until.Sub(est))
	}
	var done chan error
	if t.job != nil {
		done = t.job.done
	}
	if d <= 0 {
		select {
		case err := <-done:
			t.finish(ctx, err)
		default:
		}
		return
	}
	timer := t.s.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case err := <-done:
		t.finish(ctx, err)
	case <-timer.C():
	}
}

// start runs the job for slot, attempt n, on a goroutine of its own.
func (t *term) start(ctx context.Context, slot time.Time, n int) {
	jctx, cancel := context.WithCancelCause(ctx)
	jctx = context.WithValue(jctx, slotKey{}, Slot{Time: slot, Attempt: n, Token: t.token})
	j := &run{slot: slot, started: t.serverAt, attempt: n, cancel: cancel, done: make(chan error, 1)}
	t.job = j
	t.s.setLastRun(runKey{t.token, slot, n})
	t.logger.Info("Running a slot", "slot", slot, "attempt", n)
	job := t.s.cfg.Job
	go func() {
		defer func() {
			if p := recover(); p != nil {
				j.done <- fmt.Errorf("schedule: job panicked: %v", p)
			}
		}()
		j.done <- job(jctx)
	}()
}

// exitCoder is an error that carries a process's exit code (*exec.ExitError).
type exitCoder interface{ ExitCode() int }

// finish records how the run ended: done, failed, lost (the term's ctx ended first) or
// cancelled, fenced; after the term's ctx ended, one attempt on a context of its own.
func (t *term) finish(ctx context.Context, err error) {
	j := t.job
	t.job = nil
	j.cancel(nil)
	result, code := phaseDone, 0
	switch {
	case err == nil:
	case j.cancelled:
		result, code = phaseCancelled, 1
	case ctx.Err() != nil:
		result, code = phaseLost, 1
	default:
		result, code = phaseFailed, 1
	}
	var ec exitCoder
	if errors.As(err, &ec) {
		code = ec.ExitCode()
	}
	tries := 5
	if ctx.Err() != nil {
		tries = 1
	}
	t.record(ctx, j, result, code, err, tries)
}

// record runs finish.lua for j with result and code, up to tries times while it fails; once
// the term's ctx ended, on a context of its own (the fence keeps it safe).
func (t *term) record(ctx context.Context, j *run, result string, code int, err error, tries int) {
	fctx := ctx
	if ctx.Err() != nil {
		fctx = context.WithoutCancel(ctx)
	}
	for i := 0; i < tries; i++ {
		r, cerr := t.ints(fctx, finishScript, 2, t.tok, ms(j.slot), j.attempt, result, code, t.s.cfg.History)
		if cerr != nil {
			if fctx.Err() == nil {
				t.logger.Error(cerr, "Failed to record the end of a run", "slot", j.slot, "result", result)
				t.sleep(fctx, 100*time.Millisecond)
			}
			continue
		}
		t.noteNow(r[1])
		switch r[0] {
		case 1:
			t.s.m.ran(result, t.serverAt)
			t.logger.Info("Run ended", "slot", j.slot, "attempt", j.attempt, "result", result, "err", err)
		case 0:
			t.logger.Info("Run ended after the term: not recorded, the next term runs the slot again", "slot", j.slot, "attempt", j.attempt, "result", result)
		default:
			t.logger.Info("Run ended, and the state no longer holds it", "slot", j.slot, "attempt", j.attempt, "result", result)
		}
		return
	}
}

func (t *term) sleep(ctx context.Context, d time.Duration) {
	timer := t.s.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C():
	}
}

// stop ends the term's pass: the run's ctx is cancelled with the term's, so wait for the job
// and record its end.
func (t *term) stop(ctx context.Context) {
	if t.job == nil {
		return
	}
	t.job.cancel(context.Cause(ctx))
	t.finish(ctx, <-t.job.done)
}

func (s *Scheduler) setLastRun(k runKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = k
}

func (s *Scheduler) lastRun() runKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}
