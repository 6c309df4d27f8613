package schedule

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/pkg/lease"
)

// onceSpecPrefix starts the spec a --once-per state keeps: "@once-per 24h0m0s".
const onceSpecPrefix = "@once-per "

// OnceSpec is the spec that the state of a --once-per D lease keeps, for status.
func OnceSpec(period time.Duration) string { return onceSpecPrefix + period.String() }

// parseOnceSpec returns the period of a spec OnceSpec wrote; false for any other spec.
func parseOnceSpec(spec string) (time.Duration, bool) {
	s, ok := strings.CutPrefix(spec, onceSpecPrefix)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	return d, err == nil && d > 0
}

// OnceConfig configures a OncePer.
type OnceConfig struct {
	// Client is the Redis client of the lease (required).
	Client redis.UniversalClient
	// LeaseName and Prefix name the lease (Prefix lease.DefaultPrefix when empty).
	LeaseName, Prefix string
	// Period is D of --once-per D: a whole number of milliseconds, at least 1ms.
	Period time.Duration
	// History is how many entries the runs key keeps; 100 when 0.
	History int
}

// OncePer is elector run --once-per D on the slot machinery: a rolling schedule whose every
// run claims a slot of its own at Redis's time of the claim (after the cursor), with the same
// keys and scripts as a Scheduler's (claim.lua, finish.lua), so that elector status shows its
// runs. The period is the done mark's (PREFIX:{NAME}:done, its value as before): finish.lua
// writes it in the step that records a run done, to expire Period after the run's start by
// Redis's clock; a term runs only while no mark holds. A slot is never retried (each run is a
// new slot), so MaxAttempts and the deadline do not apply.
type OncePer struct {
	period      time.Duration
	keys        []string // lease, schedule, runs, done
	spec        string
	history     int
	caller      caller
	callTimeout time.Duration
}

// NewOncePer returns the OncePer of cfg, or an error naming what is wrong with it.
func NewOncePer(cfg OnceConfig) (*OncePer, error) {
	if cfg.Client == nil {
		return nil, errors.New("new once-per: redis client is nil")
	}
	if err := leasewire.ValidateName(cfg.LeaseName); err != nil {
		return nil, fmt.Errorf("new once-per: lease name %q %w", cfg.LeaseName, err)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = lease.DefaultPrefix
	}
	if err := leasewire.ValidateName(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("new once-per: key prefix %q %w", cfg.Prefix, err)
	}
	if cfg.Period < time.Millisecond || cfg.Period%time.Millisecond != 0 || cfg.History < 0 {
		return nil, fmt.Errorf("new once-per: period %v is not a positive whole number of milliseconds, or History is negative", cfg.Period)
	}
	if cfg.History == 0 {
		cfg.History = 100
	}
	k := leasewire.KeysFor(cfg.Prefix, cfg.LeaseName)
	return &OncePer{period: cfg.Period, keys: []string{k.Lease, k.Schedule, k.Runs, k.Done}, spec: OnceSpec(cfg.Period),
		history: cfg.History, caller: redisCaller{cfg.Client, lualib.For(cfg.Client)}, callTimeout: 5 * time.Second}, nil
}

// ErrFenced is returned when the lease no longer holds the term: nothing was written.
var ErrFenced = errors.New("schedule: the lease does not hold the term")

// Claim starts a run for the term with token: a new slot at Redis's now (after the cursor), or
// this term's own claim still running when its reply was lost. It reads and claims until one
// succeeds, ctx ends (its error) or the lease no longer holds the term (ErrFenced). A run of
// an ended term that the state holds is recorded lost on the way (claim.lua).
func (o *OncePer) Claim(ctx context.Context, token int64) (Slot, error) {
	tok := strconv.FormatInt(token, 10)
	for {
		v, err := o.call(ctx, readScript, o.keys[1:2])
		if err != nil {
			return Slot{}, err
		}
		view, err := decodeRead(v)
		if err != nil {
			return Slot{}, err
		}
		slot := view.now
		switch {
		case view.has && view.st.run.Result == phaseRunning && view.st.run.Token == token:
			slot = view.st.run.Slot // this term's claim whose reply was lost
		case view.has && !slot.After(view.st.cursor):
			slot = view.st.cursor.Add(time.Millisecond)
		}
		v, err = o.call(ctx, claimScript, o.keys[:3], tok, ms(slot), 1, 0, o.history, o.spec, "UTC")
		if err != nil {
			return Slot{}, err
		}
		r, err := intsReply(claimScript.Name(), v, 4)
		if err != nil {
			return Slot{}, err
		}
		switch r[0] {
		case 1:
			return Slot{Time: slot, Attempt: int(r[1]), Token: token}, nil
		case 0:
			return Slot{}, ErrFenced
		case -1: // the cursor is ahead of Redis's clock (it went back): wait for the slot
			if d := slot.Sub(time.UnixMilli(r[2])); !sleep(ctx, min(d, maxWait)) {
				return Slot{}, ctx.Err()
			}
		}
		// decided or busy (the state changed under the read): read again.
	}
}

// Finish records how the run of slot ended (result done, failed, lost; code its exit code),
// fenced. A done run also writes the done mark, to expire Period after the run's start by
// Redis's clock; mark is how long it holds, 0 when none was written (the run took the whole
// period). ErrFenced when the lease no longer holds the term; recorded is false when the state
// no longer holds the run (nothing written).
func (o *OncePer) Finish(ctx context.Context, s Slot, result string, code int) (recorded bool, mark time.Duration, err error) {
	v, err := o.call(ctx, finishScript, o.keys, strconv.FormatInt(s.Token, 10), ms(s.Time), s.Attempt, result, code,
		o.history, o.period.Milliseconds())
	if err != nil {
		return false, 0, err
	}
	r, err := intsReply(finishScript.Name(), v, 3)
	if err != nil {
		return false, 0, err
	}
	switch r[0] {
	case 0:
		return false, 0, ErrFenced
	case 1:
		return true, time.Duration(r[2]) * time.Millisecond, nil
	}
	return false, 0, nil
}

func (o *OncePer) call(ctx context.Context, sc *lualib.Script, keys []string, args ...any) (any, error) {
	cctx, cancel := context.WithTimeout(ctx, o.callTimeout)
	defer cancel()
	v, err := o.caller.call(cctx, sc, keys, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sc.Name(), err)
	}
	return v, nil
}

// sleep waits d or until ctx ends; false when it ended.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
