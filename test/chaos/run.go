package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Kind is a kind of fault the chaos test injects.
type Kind string

// The faults of the chaos test.
const (
	// SigKill is SIGKILL of the leading elector (its worker dies with it).
	SigKill Kind = "sigkill"
	// SigTerm is SIGTERM of the leading elector: a graceful stop and handover.
	SigTerm Kind = "sigterm"
	// SigStop is SIGSTOP of the leading elector's process group and of its worker's, for longer
	// than the lease, then SIGCONT: a frozen process that wakes up after its term ended.
	SigStop Kind = "sigstop"
	// Restart is a restart of Redis without its data: the lease, the token counter and the
	// fence are forgotten.
	Restart Kind = "restart"
	// Unreachable makes Redis unreachable (silent black hole, or refused connections) for
	// twice the lease duration.
	Unreachable Kind = "unreachable"
	// Latency adds 200ms to every round trip for a while.
	Latency Kind = "latency"
	// Cut severs every open connection to Redis.
	Cut Kind = "cut"
)

// Kinds returns every kind of fault, in the order reports list them.
func Kinds() []Kind { return []Kind{SigKill, SigTerm, SigStop, Restart, Unreachable, Latency, Cut} }

// redisReachableDuring reports whether Redis answers while the fault lasts, so that the time
// without a worker counts from the start of the fault rather than from its end.
func (k Kind) redisReachableDuring() bool { return k != Restart && k != Unreachable }

// Fault is one injected fault.
type Fault struct {
	// Seq numbers the faults of a run from 1.
	Seq int
	// Kind is what was done.
	Kind Kind
	// Start is when the fault was injected; Heal is when it ended (SIGCONT sent, Redis
	// answering again, latency removed). Instant faults have Heal == Start.
	Start, Heal time.Time
	// Target is the identity of the leader the fault hit, "" for faults of Redis or the network.
	Target string
	// Token is the fencing token of the lease holder when the fault began, 0 if none was known.
	Token int64
	// Detail says more, e.g. the variant or the duration.
	Detail string
}

func (f Fault) String() string {
	s := fmt.Sprintf("fault #%d %s", f.Seq, f.Kind)
	if f.Target != "" {
		s += fmt.Sprintf(" of %s (token %d)", f.Target, f.Token)
	}
	if f.Detail != "" {
		s += ": " + f.Detail
	}
	return s
}

// Result is the outcome of one fenced write as the worker saw it.
type Result string

// The outcomes of a fenced write.
const (
	// Accepted: the fence let the write through.
	Accepted Result = "accepted"
	// Rejected: the fence refused the token as stale.
	Rejected Result = "rejected"
	// Error: no answer (timeout, connection lost, Redis down); the write may or may not have
	// been executed.
	Error Result = "error"
)

// Write is one write attempt of a worker.
type Write struct {
	// Seq numbers the attempts of one worker from 1.
	Seq int64
	// Sent and Done are when the attempt began and when its outcome was known.
	Sent, Done time.Time
	// Result is the outcome; Reason a one-word cause of an Error.
	Result Result
	Reason string
}

// Worker is the log of one worker process: one run of the child of `elector run`.
type Worker struct {
	// Identity of the elector that started it, its process id and the token of its term.
	Identity string
	PID      int
	Token    int64
	// Start is when it started; Exit when it exited on a signal (zero if it was killed).
	Start, Exit time.Time
	// Writes are its attempts in order.
	Writes []Write
	// Path is the log file.
	Path string
}

// End returns the time of the last line of the worker's log.
func (w Worker) End() time.Time {
	end := w.Start
	if n := len(w.Writes); n > 0 && w.Writes[n-1].Done.After(end) {
		end = w.Writes[n-1].Done
	}
	if w.Exit.After(end) {
		end = w.Exit
	}
	return end
}

func (w Worker) String() string {
	return fmt.Sprintf("worker %d of %s (token %d)", w.PID, w.Identity, w.Token)
}

// Entry is one write the fence accepted, as Redis recorded it: the list the workers push onto.
type Entry struct {
	Token int64
	PID   int
	Seq   int64
	Sent  time.Time
}

// ParseEntry decodes a list element "<token> <pid> <seq> <sent>".
func ParseEntry(s string) (Entry, error) {
	f := strings.Fields(s)
	if len(f) != 4 {
		return Entry{}, fmt.Errorf("list element %q: want 4 fields", s)
	}
	var n [4]int64
	for i, v := range f {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return Entry{}, fmt.Errorf("list element %q: field %d: %w", s, i+1, err)
		}
		n[i] = x
	}
	return Entry{Token: n[0], PID: int(n[1]), Seq: n[2], Sent: time.Unix(0, n[3])}, nil
}

// ParseWorkerLog reads the log file of one worker (see the worker command for the format). A
// last line cut short (the worker was killed while writing it) is ignored; any other line that
// does not parse is an error.
func ParseWorkerLog(path string) (Worker, error) {
	f, err := os.Open(path)
	if err != nil {
		return Worker{}, fmt.Errorf("read worker log: %w", err)
	}
	defer f.Close()
	w := Worker{Path: path}
	sc := bufio.NewScanner(f)
	var bad error
	line := 0
	for sc.Scan() {
		line++
		if bad != nil { // a bad line followed by another one: not a cut-off last line
			return Worker{}, bad
		}
		if err := w.parseLine(sc.Text()); err != nil {
			bad = fmt.Errorf("worker log %s line %d %q: %w", path, line, sc.Text(), err)
		}
	}
	if err := sc.Err(); err != nil {
		return Worker{}, fmt.Errorf("read worker log %s: %w", path, err)
	}
	if w.Start.IsZero() {
		return Worker{}, fmt.Errorf("worker log %s: no start line", path)
	}
	return w, nil
}

func (w *Worker) parseLine(s string) error {
	f := strings.Fields(s)
	if len(f) == 0 {
		return errors.New("empty line")
	}
	ints := func(fields []string) ([]int64, error) {
		out := make([]int64, len(fields))
		for i, v := range fields {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	}
	switch f[0] {
	case "start":
		if len(f) < 4 || len(f) > 5 || !w.Start.IsZero() {
			return errors.New("bad start line")
		}
		n, err := ints(f[1:4])
		if err != nil {
			return err
		}
		w.Start, w.PID, w.Token = time.Unix(0, n[0]), int(n[1]), n[2]
		if len(f) == 5 {
			w.Identity = f[4]
		}
	case "w":
		if len(f) < 6 || w.Start.IsZero() {
			return errors.New("bad write line")
		}
		n, err := ints(f[1:5])
		if err != nil {
			return err
		}
		if n[2] != w.Token {
			return fmt.Errorf("token %d in a log of token %d", n[2], w.Token)
		}
		wr := Write{Seq: n[3], Sent: time.Unix(0, n[0]), Done: time.Unix(0, n[1]), Result: Result(f[5])}
		switch wr.Result {
		case Accepted, Rejected:
		case Error:
			if len(f) > 6 {
				wr.Reason = f[6]
			}
		default:
			return fmt.Errorf("unknown result %q", f[5])
		}
		w.Writes = append(w.Writes, wr)
	case "exit":
		if len(f) < 2 {
			return errors.New("bad exit line")
		}
		n, err := ints(f[1:2])
		if err != nil {
			return err
		}
		w.Exit = time.Unix(0, n[0])
	default:
		return fmt.Errorf("unknown line kind %q", f[0])
	}
	return nil
}

// Acquisition is evidence that the term with Token, of Identity, had begun at Time.
type Acquisition struct {
	Time     time.Time
	Token    int64
	Identity string
}

// Event is a line of context for the timeline, such as an elector starting or exiting.
type Event struct {
	Time time.Time
	Text string
}

// Run is everything the checker looks at: what the workers logged, what Redis recorded, and
// what the scheduler did.
type Run struct {
	// Seed is the seed of the scheduler's random choices, printed with every failure.
	Seed int64
	// Lease is the lease duration; Bound the longest time without a worker allowed after a
	// fault while Redis is reachable (the lease duration + 1s).
	Lease, Bound time.Duration
	// Start and End delimit the fault phase; End is when the test began to stop the electors.
	Start, End time.Time
	// Workers are the logs of every worker process.
	Workers []Worker
	// Acquired is evidence of when terms began besides the workers' starts: the "acquired"
	// announcements the test received from Redis and the electors' "Became leader" log lines.
	// A term began at the earliest evidence of it.
	Acquired []Acquisition
	// Faults are the injected faults in order.
	Faults []Fault
	// Epochs are the writes Redis accepted, in the order it accepted them, one slice per data
	// set: a restart without data begins a new epoch.
	Epochs [][]Entry
	// Events are more lines for the timeline.
	Events []Event
	// Stalls are the times the test process itself could not run on time (the machine was
	// overloaded): context for timing violations, which they do not excuse.
	Stalls []Stall
}

// Stall is a time during which a goroutine of the test that wakes up every few milliseconds
// was not scheduled.
type Stall struct {
	From, To time.Time
}
