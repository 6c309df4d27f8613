package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// gateWriter blocks every Write until open is closed, as a pipe whose reader stopped.
type gateWriter struct {
	open chan struct{}
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (w *gateWriter) Write(p []byte) (int, error) {
	<-w.open
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *gateWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// A stderr that takes nothing never blocks a write: lines wait up to stderrLogMax, the rest
// are dropped and counted (elector_stderr_lines_dropped_total), and once stderr takes lines
// again every kept line comes out, in order, followed by how many were dropped.
func TestStderrLogNeverBlocks(t *testing.T) {
	out := &gateWriter{open: make(chan struct{})}
	l := newStderrLog(out)
	line := []byte(strings.Repeat("x", 1023) + "\n")
	n := 2 * stderrLogMax / len(line)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range n {
			if _, err := l.Write(line); err != nil {
				t.Error(err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("writes to a stderr that takes nothing blocked")
	}
	// The writer holds the batch it took when stderr stopped; the buffer then fills once more.
	dropped := l.Dropped()
	if dropped == 0 || dropped > int64(n-stderrLogMax/len(line)) {
		t.Errorf("dropped %d of %d lines of %d bytes with a buffer of %d bytes", dropped, n, len(line), stderrLogMax)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(l.collectors()...)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "elector_stderr_lines_dropped_total" || mfs[0].Metric[0].GetCounter().GetValue() != float64(dropped) {
		t.Errorf("gathered %v, %v; want elector_stderr_lines_dropped_total %d", mfs, err, dropped)
	}
	close(out.open)
	l.flush(time.Minute)
	got := out.String()
	if kept := strings.Count(got, strings.Repeat("x", 1023)); int64(kept) != int64(n)-dropped {
		t.Errorf("%d lines came out, want the %d kept", kept, int64(n)-dropped)
	}
	// Each batch the writer takes is followed by the report of the lines dropped before it:
	// whether the last batch dropped any depends on when the writer took its first, so the
	// reports together, not the last line, must account for every dropped line.
	var reported int64
	for _, m := range regexp.MustCompile(`Dropped (\d+) log lines: .*the election went on\n`).FindAllStringSubmatch(got, -1) {
		k, _ := strconv.ParseInt(m[1], 10, 64)
		reported += k
	}
	if reported != dropped {
		t.Errorf("the reports of dropped lines add up to %d, want %d; output ends %q", reported, dropped, got[max(0, len(got)-200):])
	}
}
