package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/election"
)

// TestExitCodePrecedence checks the order in which what ended a run decides the exit code:
// lost with --exit-on-lost, given up, Run's error, another runtime error, the command's code
// (exited by itself before stopped for the exit), 0.
func TestExitCodePrecedence(t *testing.T) {
	runErr := errors.New("run failed")
	httpErr := errors.New("serve HTTP failed")
	lostErr := fmt.Errorf("run elector: %w", election.ErrLeadershipLost)
	for _, tc := range []struct {
		name   string
		o      outcome
		want   int
		stderr string
	}{
		{"nothing", outcome{childCode: -1, stopped: -1}, exitOK, ""},
		{"lost beats everything", outcome{runErr: lostErr, lost: true, runtimeErr: httpErr, gaveUp: "x", childCode: 7, stopped: 8}, exitNoLeader, ""},
		{"gave up beats a runtime error and the command", outcome{gaveUp: "timeout", runtimeErr: httpErr, childCode: 7, stopped: 8}, exitNotLeader, ""},
		{"Run's error beats giving up", outcome{runErr: runErr, gaveUp: "timeout", childCode: -1, stopped: -1}, exitError, "run failed"},
		{"Run's error beats a runtime error", outcome{runErr: runErr, runtimeErr: httpErr, childCode: 7, stopped: -1}, exitError, "run failed"},
		{"a runtime error beats the command", outcome{runtimeErr: httpErr, childCode: 7, stopped: 8}, exitError, "serve HTTP failed"},
		{"the command's own exit beats its stop", outcome{childCode: 7, stopped: 8}, 7, ""},
		{"a command's exit 0 is 0", outcome{childCode: 0, stopped: 8}, 0, ""},
		{"stopped for the exit", outcome{childCode: -1, stopped: 143}, 143, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, stderr := testCLI(nil)
			if got := c.exitCode("elector run", tc.o); got != tc.want {
				t.Errorf("exit code %d, want %d", got, tc.want)
			}
			if tc.stderr != "" && !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tc.stderr)
			}
		})
	}
}

// TestSessionSignals checks the routing of caught signals: the first SIGTERM or SIGINT
// cancels the run after onStop, a later one goes to onAgain without cancelling again (or
// cancels again without onAgain), others go to onOther.
func TestSessionSignals(t *testing.T) {
	var calls []string
	record := func(what string) func(syscall.Signal) {
		return func(sig syscall.Signal) { calls = append(calls, fmt.Sprintf("%s %d", what, sig)) }
	}
	cancel := func() { calls = append(calls, "cancel") }
	s := newSession(nil, nil, sessionHooks{stopMsg: "stopping", onStop: record("stop"), onAgain: record("again"), onOther: record("other")})
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGTERM} {
		s.signal(sig, cancel)
	}
	want := fmt.Sprintf("[other %d stop %d cancel again %d other %d again %d]",
		syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGTERM)
	if got := fmt.Sprint(calls); got != want {
		t.Errorf("calls %s, want %s", got, want)
	}
	if s.received != syscall.SIGTERM {
		t.Errorf("received %v, want the first one, SIGTERM", s.received)
	}

	calls = nil
	plain := newSession(nil, nil, sessionHooks{stopMsg: "stopping"}) // sidecar: no hooks
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		plain.signal(sig, cancel)
	}
	if got := fmt.Sprint(calls); got != "[cancel cancel]" {
		t.Errorf("without hooks: calls %s, want every SIGTERM and SIGINT to cancel", got)
	}
}

// TestSessionEndings checks how endings land in the outcome: during the run each kind sets
// its field; after Run returned only the command's own exit counts (it exited just as the
// elector stopped), and a late giving up or start failure is ignored.
func TestSessionEndings(t *testing.T) {
	o := outcome{childCode: -1, stopped: -1}
	o.apply(ending{gaveUp: "timeout"})
	o.apply(ending{err: errors.New("start failed")})
	if o.gaveUp != "timeout" || o.runtimeErr == nil || o.childCode != -1 {
		t.Errorf("outcome %+v after giving up and a failed start", o)
	}
	o.apply(ending{exited: true, code: 0})
	if o.childCode != 0 {
		t.Errorf("childCode %d after an exit 0, want 0", o.childCode)
	}

	sup := &supervisor{ends: make(chan ending, 4)}
	s := newSession(nil, nil, sup.hooks())
	sup.sendEnding(ending{gaveUp: "late"})
	sup.sendEnding(ending{exited: true, code: 9})
	sup.sendEnding(ending{err: errors.New("late start failure")})
	late := outcome{childCode: -1, stopped: -1}
	s.lateExit(&late)
	if late.childCode != 9 || late.gaveUp != "" || late.runtimeErr != nil {
		t.Errorf("late outcome %+v, want only the exit code 9", late)
	}
	for range 10 { // more endings than the buffer holds: sendEnding must not block
		sup.sendEnding(ending{gaveUp: "again"})
	}
}

// TestStopMessage: a follower's SIGTERM does not speak of a command to stop or a lease to
// release (issue 28 item 12): it has neither.
func TestStopMessage(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	defer client.Close()
	e, err := election.New(election.Config{
		Client: client, LeaseName: "x", Identity: "a",
		Callbacks: election.Callbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	const leaderMsg = "Received signal: stopping the command and releasing the lease"
	s := newSession(&replica{elector: e}, nil, sessionHooks{stopMsg: leaderMsg})
	if got := s.stopMessage(); got != followerStopMsg {
		t.Errorf("not leading: %q, want %q", got, followerStopMsg)
	}
}
