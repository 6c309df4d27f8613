package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunScheduleUsageErrors: each bad --schedule flag, or a flag that does not go with it,
// exits 2 with a message naming the flag and what is allowed, before anything contacts Redis.
func TestRunScheduleUsageErrors(t *testing.T) {
	base := []string{"run", "--lease-name=job", "--identity=a", "--redis-addr=127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--schedule=61 * * * *"}, "--schedule: "},
		{[]string{"--schedule=@every"}, "want five cron fields"},
		{[]string{"--schedule=@hourly", "--time-zone=Mars/Olympus"}, `--time-zone: unknown time zone "Mars/Olympus"; want an IANA name`},
		{[]string{"--schedule=@hourly", "--overlap=queue"}, `--overlap: unknown policy "queue"; allowed: skip, wait, cancel`},
		{[]string{"--schedule=@hourly", "--catch-up=some"}, `--catch-up: unknown policy "some"; allowed: none, latest, all`},
		{[]string{"--schedule=@hourly", "--starting-deadline=-1s"}, "--starting-deadline: must be 0"},
		{[]string{"--schedule=@hourly", "--max-attempts=0"}, "--max-attempts: must be 1 or more"},
		{[]string{"--schedule=@hourly", "--retry-delay=0s"}, "--retry-delay: must be a positive duration"},
		{[]string{"--schedule=@hourly", "--schedule-history=0"}, "--schedule-history: must be 1 or more"},
		{[]string{"--schedule=@hourly", "--once-per=1h"}, "--schedule: not with --once-per"},
		{[]string{"--schedule=@hourly", "--on-success=hold"}, "--schedule: not with --on-success"},
		{[]string{"--schedule=@hourly", "--on-success=release"}, "--schedule: not with --on-success"},
		{[]string{"--overlap=wait"}, "--overlap: needs --schedule"},
		{[]string{"--time-zone=Europe/Berlin"}, "--time-zone: needs --schedule"},
		{[]string{"--schedule=CRON_TZ=Asia/Tokyo 0 2 * * *", "--time-zone=Europe/Berlin"}, "--schedule: "},
	} {
		c, _, stderr := testCLI(nil)
		args := append(append(append([]string(nil), base...), tc.args...), "--", "true")
		if code := c.main(context.Background(), args); code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("elector %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}

// TestRunScheduleFlags: the flags' defaults and what validate fills in, from the environment.
func TestRunScheduleFlags(t *testing.T) {
	cmd := testCommand(t, "run")
	o := scheduleOptions{spec: "30 2 * * *", timeZone: "Europe/Berlin", overlap: "cancel", catchUp: "all",
		startingDeadline: time.Hour, maxAttempts: 5, retryDelay: time.Minute, history: 10}
	if err := o.validate(&runOptions{}, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if o.loc == nil || o.loc.String() != "Europe/Berlin" {
		t.Errorf("location %v, want Europe/Berlin", o.loc)
	}
	// A CRON_TZ= prefix names the zone when --time-zone was not set: its default is no conflict.
	tz := scheduleOptions{spec: "CRON_TZ=Europe/Berlin 30 2 * * *", timeZone: "UTC", overlap: "skip", catchUp: "latest",
		maxAttempts: 3, retryDelay: time.Second, history: 10}
	if err := tz.validate(&runOptions{}, func(string) bool { return false }); err != nil {
		t.Errorf("CRON_TZ= prefix without --time-zone: %v", err)
	}
	for name, def := range map[string]string{flagSchedule: "", flagTimeZone: "UTC", flagOverlap: "skip", flagCatchUp: "latest",
		flagStartingDeadline: "0s", flagMaxAttempts: "3", flagRetryDelay: "10s", flagScheduleHistory: "100"} {
		f := cmd.Flags().Lookup(name)
		if f == nil || f.DefValue != def {
			t.Errorf("--%s: %v, want default %q", name, f, def)
		}
	}
}

// TestSlotEnv: CMD of a slot gets ELECTOR_SLOT (RFC 3339, UTC) and ELECTOR_ATTEMPT beside the
// token; inherited ones are replaced; without a slot there are none.
func TestSlotEnv(t *testing.T) {
	slot := time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC)
	env := slotEnv(childEnv([]string{"ELECTOR_SLOT=old", "ELECTOR_ATTEMPT=9", "A=b"}, 42, "pod-a", "job"), slot, 2)
	got := strings.Join(env, " ")
	for _, want := range []string{"A=b", "ELECTOR_FENCING_TOKEN=42", "ELECTOR_SLOT=2026-10-25T01:30:00Z", "ELECTOR_ATTEMPT=2"} {
		if !strings.Contains(got, want) {
			t.Errorf("env %q lacks %s", got, want)
		}
	}
	if strings.Contains(got, "old") || strings.Contains(got, "=9") {
		t.Errorf("env %q keeps an inherited slot variable", got)
	}
	if env := slotEnv(childEnv(nil, 1, "i", "l"), time.Time{}, 0); strings.Contains(strings.Join(env, " "), "ELECTOR_SLOT") {
		t.Errorf("no slot, env %q", env)
	}
}
