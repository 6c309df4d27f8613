package main

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// --log-format and its values.
const (
	flagLogFormat = "log-format"
	logFormatText = "text"
	logFormatJSON = "json"
)

// setupLogging routes klog through log/slog's JSON handler for --log-format=json, with the
// verbosity of -v (klog's V(n) is slog level -n); for text it keeps klog's own format. With
// logs set (the process's own stderr, see stderrLog), both formats write through it, so that
// no log call of the elector ever waits for stderr; klog's --logtostderr=false (with
// --log_file) keeps klog's own outputs. fs holds klog's flags.
func setupLogging(stderr io.Writer, logs *stderrLog, format string, fs *pflag.FlagSet) error {
	switch format {
	case logFormatText, logFormatJSON:
	default:
		return fmt.Errorf("--%s: unknown format %q; allowed: %s, %s", flagLogFormat, format, logFormatText, logFormatJSON)
	}
	out := stderr
	if logs != nil {
		out = logs
		if f := fs.Lookup("logtostderr"); f == nil || f.Value.String() == "true" {
			// klog writes to its outputs, one copy of each line, instead of os.Stderr.
			for name, value := range map[string]string{"logtostderr": "false", "one_output": "true", "stderrthreshold": "FATAL"} {
				if f := fs.Lookup(name); f != nil {
					if err := f.Value.Set(value); err != nil {
						return fmt.Errorf("set klog's -%s: %w", name, err)
					}
				}
			}
			klog.SetOutput(logs)
		}
	}
	if format == logFormatText {
		return nil
	}
	level := 0
	if v := fs.Lookup("v"); v != nil {
		level, _ = strconv.Atoi(v.Value.String()) // klog has checked it
	}
	h := slog.NewJSONHandler(out, &slog.HandlerOptions{Level: slog.Level(-level)})
	klog.SetSlogLogger(slog.New(h))
	return nil
}

// stderrLogMax bounds the bytes a stderrLog holds while stderr does not take them.
const stderrLogMax = 1 << 20

// stderrLog is the process's stderr as the logs see it: Write copies a line into a bounded
// buffer and returns at once; a goroutine of its own writes the buffer to stderr. When
// whoever reads stderr stops (a container runtime's log pipe that backs up, a `| consumer`
// that stalls), lines wait in the buffer and, once it is full, are dropped and counted; the
// count is logged when stderr takes lines again. So no log call, on any goroutine of the
// elector, waits for stderr: not the one that ends a term at its deadline, nor the one that
// stops CMD (docs/DESIGN.md, "The trust deadline").
type stderrLog struct {
	out     io.Writer
	mu      sync.Mutex
	lines   [][]byte
	size    int
	dropped int64 // since the last report
	wake    chan struct{}
	idle    *sync.Cond // signalled when the writer has written everything queued

	writing bool
	total   atomic.Int64 // lines dropped since the start (elector_log_lines_dropped_total)
}

// newStderrLog starts the writer of out.
func newStderrLog(out io.Writer) *stderrLog {
	l := &stderrLog{out: out, wake: make(chan struct{}, 1)}
	l.idle = sync.NewCond(&l.mu)
	go l.loop()
	return l
}

// Write queues a copy of p (klog reuses its buffers), or drops it when the buffer is full.
// It never blocks on out and never fails.
func (l *stderrLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	if l.size+len(p) > stderrLogMax {
		l.dropped++
		l.mu.Unlock()
		l.total.Add(1)
		return len(p), nil
	}
	l.lines = append(l.lines, append([]byte(nil), p...))
	l.size += len(p)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

// Dropped returns the number of lines dropped since the start.
func (l *stderrLog) Dropped() int64 { return l.total.Load() }

// collectors returns the metric of the lines l dropped, elector_stderr_lines_dropped_total;
// none for a nil l (tests of single commands, whose logs go where klog's defaults send them).
func (l *stderrLog) collectors() []prometheus.Collector {
	if l == nil {
		return nil
	}
	return []prometheus.Collector{prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "elector_stderr_lines_dropped_total",
		Help: "Log lines the elector dropped because stderr did not take them in time (whoever reads it stopped).",
	}, func() float64 { return float64(l.Dropped()) })}
}

func (l *stderrLog) loop() {
	for range l.wake {
		for {
			l.mu.Lock()
			lines, dropped := l.lines, l.dropped
			l.lines, l.size, l.dropped = nil, 0, 0
			l.writing = len(lines) > 0 || dropped > 0
			if !l.writing {
				l.idle.Broadcast()
				l.mu.Unlock()
				break
			}
			l.mu.Unlock()
			for _, b := range lines {
				_, _ = l.out.Write(b)
			}
			if dropped > 0 {
				// Not through klog: it would queue behind lines written since.
				fmt.Fprintf(l.out, "W%s elector] Dropped %d log lines: stderr did not take them in time (whoever reads it stopped); the election went on\n",
					time.Now().Format("0102 15:04:05.000000"), dropped)
			}
		}
	}
}

// flush waits until what was written so far is on stderr, or timeout passed.
func (l *stderrLog) flush(timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		l.mu.Lock()
		for l.writing || len(l.lines) > 0 || l.dropped > 0 {
			l.idle.Wait()
		}
		l.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}
