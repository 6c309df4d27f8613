package election

import (
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
)

// asyncLogQueue is how many lines an asyncLog holds while its sink blocks; a line that finds
// the queue full is dropped (counted, and reported once the sink takes lines again).
const asyncLogQueue = 1024

// asyncLog writes the log lines of a goroutine that must never block (a Group's loop, which
// checks every lease's renew deadline) from a goroutine of its own: a log call only queues
// the line. A sink that blocks (a write to a stderr that nobody reads) then delays the lines,
// never the loop. The lines keep their order; their call site, as a sink that reports one
// (klog's file:line) sees it, is this file's.
type asyncLog struct {
	lines   chan asyncLine
	dropped atomic.Int64
	onDrop  func() // counts a dropped line (a metric); may be nil
	root    logr.LogSink
	stopped chan struct{}
	done    chan struct{}
	once    sync.Once
}

type asyncLine struct {
	sink  logr.LogSink
	level int
	err   error
	isErr bool
	msg   string
	kv    []any
}

// startAsyncLog starts the writer of logger's lines and returns it with a logger that queues
// to it. A logger without a sink (logr.Discard) is returned as it is.
func startAsyncLog(logger logr.Logger, onDrop func()) (*asyncLog, logr.Logger) {
	a := &asyncLog{lines: make(chan asyncLine, asyncLogQueue), onDrop: onDrop, root: logger.GetSink(),
		stopped: make(chan struct{}), done: make(chan struct{})}
	if a.root == nil {
		close(a.done)
		return a, logger
	}
	go a.write()
	return a, logr.New(asyncSink{a: a, sink: a.root})
}

// stop writes the lines queued so far and ends the writer; it waits for that.
func (a *asyncLog) stop() {
	a.once.Do(func() { close(a.stopped) })
	<-a.done
}

func (a *asyncLog) write() {
	defer close(a.done)
	for {
		select {
		case l := <-a.lines:
			a.writeLine(l)
		case <-a.stopped:
			for {
				select {
				case l := <-a.lines:
					a.writeLine(l)
				default:
					a.reportDropped()
					return
				}
			}
		}
	}
}

func (a *asyncLog) writeLine(l asyncLine) {
	if l.isErr {
		l.sink.Error(l.err, l.msg, l.kv...)
	} else {
		l.sink.Info(l.level, l.msg, l.kv...)
	}
	if len(a.lines) == 0 {
		a.reportDropped()
	}
}

// reportDropped logs how many lines were dropped since the last report, if any.
func (a *asyncLog) reportDropped() {
	if n := a.dropped.Swap(0); n > 0 {
		a.root.Info(0, "Dropped log lines: the log sink did not take them in time (it blocked); the election went on", "dropped", n)
	}
}

// queue hands l to the writer, or drops it when the queue is full.
func (a *asyncLog) queue(l asyncLine) {
	select {
	case a.lines <- l:
	default:
		a.dropped.Add(1)
		if a.onDrop != nil {
			a.onDrop()
		}
	}
}

// asyncSink is the logr.LogSink of an asyncLog's logger: Enabled asks the real sink (a read of
// its verbosity), Info and Error queue the line.
type asyncSink struct {
	a    *asyncLog
	sink logr.LogSink
}

func (s asyncSink) Init(logr.RuntimeInfo)  {}
func (s asyncSink) Enabled(level int) bool { return s.sink.Enabled(level) }
func (s asyncSink) WithName(n string) logr.LogSink {
	return asyncSink{a: s.a, sink: s.sink.WithName(n)}
}

func (s asyncSink) WithValues(kv ...any) logr.LogSink {
	return asyncSink{a: s.a, sink: s.sink.WithValues(kv...)}
}

func (s asyncSink) Info(level int, msg string, kv ...any) {
	s.a.queue(asyncLine{sink: s.sink, level: level, msg: msg, kv: kv})
}

func (s asyncSink) Error(err error, msg string, kv ...any) {
	s.a.queue(asyncLine{sink: s.sink, err: err, isErr: true, msg: msg, kv: kv})
}
