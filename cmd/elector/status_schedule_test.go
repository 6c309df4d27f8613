package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	yaml "go.yaml.in/yaml/v2"

	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/schedule"
)

// runScheduleTerm runs a Scheduler of spec on lease name under an Elector as identity until
// runs slots' jobs have ended (the next one has started), at most a minute: the state and
// history a real term writes. Every second slot's job fails with exit code 3.
func runScheduleTerm(t *testing.T, srvClient *redis.Client, name, identity, spec string, runs int) {
	t.Helper()
	n := 0
	enough := make(chan struct{})
	s, err := schedule.New(schedule.Config{Client: srvClient, LeaseName: name, Spec: spec,
		Job: func(ctx context.Context) error {
			if n++; n == runs+1 {
				close(enough) // the runs before this one are recorded
			}
			if n%2 == 0 {
				return exitCodeError(3)
			}
			time.Sleep(20 * time.Millisecond)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := election.New(election.Config{Client: srvClient, LeaseName: name, Identity: identity,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 300 * time.Millisecond,
		Callbacks: election.Callbacks{OnStartedLeading: func(ctx context.Context) { _ = s.Lead(ctx) }}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	go func() {
		select {
		case <-enough:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := e.Run(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	select {
	case <-enough:
	default:
		t.Fatalf("%d slots of %s did not run within a minute", runs, spec)
	}
}

type exitCodeError int

func (e exitCodeError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitCodeError) ExitCode() int { return int(e) }

// statusOut runs elector status with args on addr and returns its stdout.
func statusOut(t *testing.T, addr string, env map[string]string, args ...string) string {
	t.Helper()
	c, stdout, stderr := testCLI(env)
	args = append([]string{"status", "--redis-addr", addr}, args...)
	if code := c.main(t.Context(), args); code != exitOK {
		t.Fatalf("elector %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	return stdout.String()
}

// TestStatusShowsTheSchedule: after a term ran 3 slots of @every 1s (one failing), status shows
// the spec, zone, next slot, cursor, the runs and the missed slots in text, JSON and YAML, and
// the observer user of the README (no +time, no script) can read it.
func TestStatusShowsTheSchedule(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	runScheduleTerm(t, client, "report", "pod-a", "@every 1s", 3)
	// A missed range, as a term records one (skip.lua's line).
	hist, _ := client.Get(t.Context(), "elector:{report}:runs").Result()
	client.Set(t.Context(), "elector:{report}:runs", "missed 1000 3000 3 catch-up\n"+hist, 0)

	var js struct {
		Holder   string `json:"holder"`
		Schedule struct {
			Spec, TimeZone string
			Next, Cursor   time.Time
			Runs           []struct {
				Slot       time.Time
				Holder     string
				Token      int64
				Attempt    int
				Result     string
				ExitCode   int
				DurationMs *int64
			}
			RunsKept int
			Missed   []struct {
				First, Last time.Time
				Count       int
				Reason      string
			}
		} `json:"schedule"`
	}
	out := statusOut(t, srv.Addr(), nil, "--lease-name", "report", "-o", "json")
	if err := json.Unmarshal([]byte(out), &js); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	s := js.Schedule
	if s.Spec != "@every 1s" || s.TimeZone != "UTC" || !s.Next.Equal(s.Cursor.Add(time.Second)) || len(s.Runs) < 2 || s.RunsKept != len(s.Runs) {
		t.Fatalf("schedule %+v: want @every 1s in UTC, next a second after the cursor, every run kept", s)
	}
	failed := 0
	for i, r := range s.Runs {
		if r.Holder != "pod-a" || r.Token <= 0 || r.Attempt != 1 || r.DurationMs == nil || *r.DurationMs < 0 ||
			(r.Result == "done") != (r.ExitCode == 0) || i > 0 && !r.Slot.Before(s.Runs[i-1].Slot) {
			t.Errorf("run %d: %+v", i, r)
		}
		if r.Result == "failed" && r.ExitCode == 3 {
			failed++
		}
	}
	if failed == 0 {
		t.Errorf("runs %+v: want a failed run with exit code 3", s.Runs)
	}
	if len(s.Missed) != 1 || s.Missed[0].Count != 3 || s.Missed[0].Reason != "catch-up" || !s.Missed[0].Last.Equal(time.UnixMilli(3000)) {
		t.Errorf("missed %+v: want the catch-up range", s.Missed)
	}

	var y map[string]any
	yout := statusOut(t, srv.Addr(), nil, "--lease-name", "report", "-o", "yaml")
	if err := yaml.Unmarshal([]byte(yout), &y); err != nil {
		t.Fatalf("%v: %s", err, yout)
	}
	ys, _ := y["schedule"].(map[any]any)
	if ys["spec"] != "@every 1s" || ys["timeZone"] != "UTC" || len(ys["runs"].([]any)) != len(s.Runs) || ys["runsKept"] != len(s.Runs) {
		t.Errorf("yaml schedule: %v", ys)
	}
	if i, j := strings.Index(yout, "\nschedule:"), strings.Index(yout, "\ntransitions:"); i < j {
		t.Errorf("yaml: schedule before transitions, not in the JSON order:\n%s", yout)
	}

	text := statusOut(t, srv.Addr(), nil, "--lease-name", "report")
	t.Logf("elector status:\n%s\nelector status -o json:\n%s", text, out)
	for _, want := range []string{
		`(?m)^schedule:     @every 1s \(time zone UTC\)$`,
		`(?m)^next slot:    \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \((in \S+|due)\)$`,
		`(?m)^cursor:       \S+ \(every slot up to it is decided\)$`,
		fmt.Sprintf(`(?m)^runs:         %d of %d kept`, min(5, len(s.Runs)), len(s.Runs)),
		`(?m)^  SLOT +BY +TOKEN +ATTEMPT +RESULT +EXIT +DURATION$`,
		`(?m)^  \S+Z +pod-a +\d+ +1 +failed +3 +\d+(\.\d+)?m?s$`,
		`(?m)^missed:       1 of 1 kept$`,
		`(?m)^  1970-01-01T00:00:01Z +1970-01-01T00:00:03Z +3 +catch-up$`,
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("text does not match %s:\n%s", want, text)
		}
	}

	// The observer user of the README reads it all: GET, MULTI and EXEC, no TIME, no script.
	client.Do(t.Context(), "ACL", "SETUSER", "elector-observer", "on", ">pw-viewer", "resetkeys", "resetchannels",
		"%R~elector:{report}:*", "&elector:{report}:*", "-@all", "+get", "+pttl", "+multi", "+exec", "+subscribe", "+ping")
	obs := statusOut(t, srv.Addr(), map[string]string{"REDIS_PASSWORD": "pw-viewer"},
		"--lease-name", "report", "--redis-username", "elector-observer", "-o", "json")
	if !strings.Contains(obs, `"spec":"@every 1s"`) {
		t.Errorf("status as elector-observer: %s", obs)
	}
}

// TestStatusScheduleWithoutSpec: a state written before it kept the spec (v1) shows
// "spec: unknown" and no next slot; its runs still show. A lease without a schedule shows no
// schedule at all.
func TestStatusScheduleWithoutSpec(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := t.Context()
	client.Set(ctx, "elector:{old}:schedule", "v1\n1764441600000\n1764441600000\ndone\n1\n1764441600123456\n1764441600010\n1764441601510\n0\nv1:1764441600123456:3b9f7bdc537053a2:pod-a", 0)
	client.Set(ctx, "elector:{old}:runs", "run 1764441600000 done 1 1764441600123456 1764441600010 1764441601510 0 v1:1764441600123456:3b9f7bdc537053a2:pod-a", 0)
	c, stdout, stderr := testCLI(nil)
	if code := c.main(ctx, []string{"status", "--redis-addr", srv.Addr(), "--lease-name", "old"}); code != exitNoLeader {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	text := stdout.String()
	for _, want := range []string{
		`(?m)^holder:       \(none\)$`,
		`(?m)^schedule:     unknown \(time zone unknown\)$`,
		`(?m)^next slot:    unknown \(the state names no spec`,
		`(?m)^cursor:       2025-11-29T18:40:00Z `,
		`(?m)^  2025-11-29T18:40:00Z +pod-a +1764441600123456 +1 +done +0 +1.5s$`,
		`(?m)^missed:       0 of 0 kept$`,
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("text does not match %s:\n%s", want, text)
		}
	}
	c, stdout, _ = testCLI(nil)
	c.main(ctx, []string{"status", "--redis-addr", srv.Addr(), "--lease-name", "old", "-o", "json"})
	if out := stdout.String(); !strings.Contains(out, `"schedule":{"spec":"unknown","timeZone":"unknown","cursor":"2025-11-29T18:40:00Z","runs":[{"slot":"2025-11-29T18:40:00Z","holder":"pod-a","token":1764441600123456,"attempt":1,"result":"done","exitCode":0,"started":"2025-11-29T18:40:00.01Z","durationMs":1500}],"runsKept":1,"missed":[],"missedKept":0}`) {
		t.Errorf("json: %s", out)
	}
	c, stdout, _ = testCLI(nil)
	c.main(ctx, []string{"status", "--redis-addr", srv.Addr(), "--lease-name", "none", "-o", "json"})
	if out := stdout.String(); strings.Contains(out, "schedule") {
		t.Errorf("a lease without a schedule: %s", out)
	}
	c, stdout, _ = testCLI(nil)
	c.main(ctx, []string{"status", "--redis-addr", srv.Addr(), "--lease-name", "none"})
	if out := stdout.String(); strings.Contains(out, "schedule") || strings.Contains(out, "runs:") {
		t.Errorf("a lease without a schedule: %s", out)
	}
}
