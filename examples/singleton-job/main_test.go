package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/internal/testing/outbuf"
	"github.com/elector/elector/internal/testing/redistest"
)

// Two replicas: only one runs the job; when it stops, the other does.
func TestSingletonJobExample(t *testing.T) {
	srv := redistest.Start(t)
	out := &outbuf.Buffer{}
	start := func(id string) (context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, []string{"--redis-addr", srv.Addr(), "--identity", id, "--every", "20ms"}, out)
		}()
		return cancel, done
	}
	cancelA, doneA := start("pod-a")
	out.WaitFor(t, "pod-a: run #3")
	cancelB, doneB := start("pod-b")
	defer func() { cancelB(); <-doneB }()
	time.Sleep(200 * time.Millisecond)
	if strings.Contains(out.String(), "pod-b: run") {
		t.Fatalf("pod-b ran the job while pod-a led:\n%s", out)
	}
	cancelA()
	<-doneA
	out.WaitFor(t, "pod-b: run #2")
}
