package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	_ "time/tzdata" // --time-zone works in an image without /usr/share/zoneinfo

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/elector/elector/cmd/elector/internal/child"
	"github.com/elector/elector/pkg/schedule"
)

// Flag names of elector run --schedule (docs/DESIGN.md, "Schedules").
const (
	flagSchedule         = "schedule"
	flagTimeZone         = "time-zone"
	flagOverlap          = "overlap"
	flagCatchUp          = "catch-up"
	flagStartingDeadline = "starting-deadline"
	flagMaxAttempts      = "max-attempts"
	flagRetryDelay       = "retry-delay"
	flagScheduleHistory  = "schedule-history"
)

// scheduleGroup is the help heading of the --schedule flags.
const scheduleGroup = "Schedule flags"

// scheduleOptions are the flags of elector run --schedule.
type scheduleOptions struct {
	spec             string
	timeZone         string
	overlap          string
	catchUp          string
	startingDeadline time.Duration
	maxAttempts      int
	retryDelay       time.Duration
	history          int

	loc *time.Location // timeZone loaded by validate
}

// addFlags registers the --schedule flags on fs.
func (o *scheduleOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.spec, flagSchedule, "", "run CMD once per slot of this cron `spec` across replicas (five fields or @hourly, @every 10m, ...; @every counts from 1970-01-01 UTC); the term holds the lease without CMD between slots; off when empty")
	fs.StringVar(&o.timeZone, flagTimeZone, "UTC", "time `zone` of --schedule's fields: an IANA name such as Europe/Berlin; daylight saving changes as a CronJob's")
	fs.StringVar(&o.overlap, flagOverlap, string(schedule.OverlapSkip), "`policy` for a slot that comes while CMD runs: skip (record it missed), wait (decide it after the run) or cancel (stop CMD, run the new slot)")
	fs.StringVar(&o.catchUp, flagCatchUp, string(schedule.CatchUpLatest), "`policy` for slots nobody ran in time (all replicas or Redis down): none, latest (run the latest only) or all (run each, oldest first)")
	fs.DurationVar(&o.startingDeadline, flagStartingDeadline, 0, "how late after its time a slot may still start, else it is recorded missed; 0: no limit (10s with --catch-up none)")
	fs.IntVar(&o.maxAttempts, flagMaxAttempts, 3, "runs a slot gets, counting failed runs and runs whose term ended first")
	fs.DurationVar(&o.retryDelay, flagRetryDelay, 10*time.Second, "time after a failed run before its slot runs again (a run whose term ended runs again at once on the next leader)")
	fs.IntVar(&o.history, flagScheduleHistory, 100, "how many runs and missed ranges Redis keeps for elector status")
}

// validate checks the --schedule flags against each other and run's others (changed: whether
// the user set a flag); each error names the flag and what is allowed.
func (o *scheduleOptions) validate(ro *runOptions, changed func(string) bool) error {
	if o.spec == "" {
		for _, f := range []string{flagTimeZone, flagOverlap, flagCatchUp, flagStartingDeadline, flagMaxAttempts, flagRetryDelay, flagScheduleHistory} {
			if changed(f) {
				return fmt.Errorf("--%s: needs --%s", f, flagSchedule)
			}
		}
		return nil
	}
	switch {
	case ro.oncePer > 0:
		return fmt.Errorf("--%s: not with --%s: a schedule decides already when CMD runs (each slot once)", flagSchedule, flagOncePer)
	case changed(flagOnSuccess):
		return fmt.Errorf("--%s: not with --%s: under a schedule CMD's exit ends its slot's run, and the term waits for the next slot", flagSchedule, flagOnSuccess)
	}
	loc, err := time.LoadLocation(o.timeZone)
	if err != nil || o.timeZone == "" {
		return fmt.Errorf("--%s: unknown time zone %q; want an IANA name such as UTC or Europe/Berlin", flagTimeZone, o.timeZone)
	}
	o.loc = loc
	if !changed(flagTimeZone) && (strings.HasPrefix(o.spec, "CRON_TZ=") || strings.HasPrefix(o.spec, "TZ=")) {
		o.loc = nil // the spec's own zone, not the flag's default
	}
	switch schedule.Overlap(o.overlap) {
	case schedule.OverlapSkip, schedule.OverlapWait, schedule.OverlapCancel:
	default:
		return fmt.Errorf("--%s: unknown policy %q; allowed: skip, wait, cancel", flagOverlap, o.overlap)
	}
	switch schedule.CatchUp(o.catchUp) {
	case schedule.CatchUpNone, schedule.CatchUpLatest, schedule.CatchUpAll:
	default:
		return fmt.Errorf("--%s: unknown policy %q; allowed: none, latest, all", flagCatchUp, o.catchUp)
	}
	switch {
	case o.startingDeadline < 0 || o.startingDeadline%time.Millisecond != 0:
		return fmt.Errorf("--%s: must be 0 (no limit) or a positive whole number of milliseconds such as 5m, got %v", flagStartingDeadline, o.startingDeadline)
	case o.maxAttempts < 1:
		return fmt.Errorf("--%s: must be 1 or more, got %d", flagMaxAttempts, o.maxAttempts)
	case o.retryDelay <= 0:
		return fmt.Errorf("--%s: must be a positive duration such as 10s, got %v", flagRetryDelay, o.retryDelay)
	case o.history < 1:
		return fmt.Errorf("--%s: must be 1 or more, got %d", flagScheduleHistory, o.history)
	}
	// The spec last, by the Scheduler's own parser, on a client that is never dialled.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer func() { _ = c.Close() }()
	if _, err := o.newScheduler(c, "check", "check", func(context.Context) error { return nil }); err != nil {
		msg := strings.TrimPrefix(err.Error(), "new schedule: ")
		return fmt.Errorf("--%s: %s; want five cron fields (minute hour day-of-month month day-of-week) or a descriptor such as @hourly or @every 10m", flagSchedule, msg)
	}
	return nil
}

// newScheduler returns the Scheduler of the flags for the lease name under prefix.
func (o *scheduleOptions) newScheduler(c redis.UniversalClient, name, prefix string, job func(context.Context) error) (*schedule.Scheduler, error) {
	return schedule.New(schedule.Config{
		Client: c, LeaseName: name, Prefix: prefix, Spec: o.spec, Location: o.loc, Job: job,
		Overlap: schedule.Overlap(o.overlap), CatchUp: schedule.CatchUp(o.catchUp),
		StartingDeadline: o.startingDeadline, MaxAttempts: o.maxAttempts, RetryDelay: o.retryDelay,
		History: o.history,
	})
}

// scheduleMetrics serves the Scheduler's metrics, which exists only once the Redis client
// does (after the registry): nothing until set.
type scheduleMetrics struct {
	s atomic.Pointer[schedule.Scheduler]
}

// Describe sends the Scheduler's descriptors, which do not depend on the Scheduler.
func (m *scheduleMetrics) Describe(ch chan<- *prometheus.Desc) {
	(*schedule.Scheduler)(nil).Describe(ch)
}

// Collect sends the Scheduler's metrics once it is set.
func (m *scheduleMetrics) Collect(ch chan<- prometheus.Metric) {
	if s := m.s.Load(); s != nil {
		s.Collect(ch)
	}
}

// schedule is actSchedule: the Scheduler runs the term's slots (its job, job, starts CMD
// through the machine) until the term ends and the job returned: evTermEnded.
func (t *term) schedule() runInput {
	s := t.s
	s.mu.Lock()
	s.cur = t
	s.mu.Unlock()
	if err := s.sched.Lead(t.ctx); err != nil {
		klog.ErrorS(err, "The schedule cannot run in this term", "token", t.token)
	}
	<-t.ctx.Done()
	s.mu.Lock()
	s.cur = nil
	s.mu.Unlock()
	return runInput{ev: evTermEnded, cause: context.Cause(t.ctx)}
}

// cmdExit is a slot's run of CMD that did not succeed: its exit status, with the exit code
// the Scheduler records.
type cmdExit struct{ status child.ExitStatus }

func (e cmdExit) Error() string { return "the command ended: " + e.status.String() }

// ExitCode is CMD's exit code (128+N after signal N).
func (e cmdExit) ExitCode() int { return e.status.ExitCode() }

// errNotStarted is a slot's job that started no CMD: the term is ending (the elector's
// SIGTERM), or the run ends.
var errNotStarted = errors.New("the command was not started: the term or the run is ending")

// job is the Scheduler's Job: it asks the machine to start CMD for the slot in ctx, performs
// the actions (start, run, stop), and returns CMD's end: nil for exit 0, else a cmdExit or
// the failed start's error. The machine refusing the slot (the elector stopping, the run
// ending) starts nothing, and the job returns when the term ends.
func (s *supervisor) job(ctx context.Context) error {
	slot, _ := schedule.SlotFrom(ctx)
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur == nil || cur.token != slot.Token || ctx.Err() != nil {
		<-ctx.Done()
		return context.Cause(ctx)
	}
	t := &term{s: s, ctx: cur.ctx, token: cur.token, job: ctx, slot: slot.Time, attempt: slot.Attempt}
	klog.InfoS("Slot due: starting the command", "slot", slot.Time.UTC().Format(time.RFC3339), "attempt", slot.Attempt, "token", slot.Token)
	acts := s.step(runInput{ev: evSlot, slot: slot.Time, attempt: slot.Attempt})
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		if a.kind == actFinish {
			switch {
			case a.err != nil:
				klog.ErrorS(a.err, "Cannot start the command for the slot", "command", s.spec.Path, "slot", slot.Time.UTC().Format(time.RFC3339))
				return fmt.Errorf("start the command: %w", a.err)
			}
			klog.InfoS("The command ended; waiting for the next slot", "status", a.status.String(), "slot", slot.Time.UTC().Format(time.RFC3339), "attempt", slot.Attempt, "token", slot.Token)
			if a.status.Signal == 0 && a.status.Code == 0 && a.status.Err == nil {
				return nil
			}
			return cmdExit{a.status}
		}
		if in, ok := t.do(a); ok {
			acts = append(acts, s.step(in)...)
		}
	}
	<-ctx.Done()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return errNotStarted
}

var _ prometheus.Collector = (*scheduleMetrics)(nil)
