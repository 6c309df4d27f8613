package child

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/klog/v2"
)

// ShimArg is the first argument that makes the program run as the shim of `elector run`
// (see RunShim). It is not a command for users: main dispatches it before its commands.
const ShimArg = "__elector-child-shim"

// The shim's end of its two pipes to the elector (see the package comment).
const (
	shimControlFd = 3 // elector → shim: shimStart first, then shimKill, or shimSignal and a signal number; EOF: the elector died or gave the shim up
	shimReportFd  = 4 // shim → elector: one line per event, see the shimReport* prefixes
)

// The requests on the control pipe.
const (
	// shimStart, followed by a 4-byte big-endian length and that many bytes (the
	// command's environment, NUL-separated entries), is the go-ahead: the shim starts the
	// command with that environment. It is the first request and the only one before the
	// command runs; until it comes, the shim starts nothing.
	shimStart = 'G'
	// shimKill asks the shim to SIGKILL every descendant now.
	shimKill = 'K'
	// shimSignal, followed by one byte, a signal number, asks the shim to send that signal
	// to the command's process group and to every descendant outside it. SIGKILL is shimKill.
	shimSignal = 'S'
)

// The lines the shim writes on its report pipe.
const (
	shimReportStarted   = "started"   // "started PID": CMD runs with this pid
	shimReportError     = "error"     // "error MESSAGE": CMD could not be started
	shimReportStopped   = "stopped"   // "stopped PID SIGNAL": a child of the shim was stopped
	shimReportContinued = "continued" // "continued PID": it runs again
	shimReportGone      = "gone"      // "gone WAITSTATUS": the command and every descendant are reaped; the command's wait status
)

// shimPipes are the elector's ends of a shim's pipes, and the shim's ends until it started.
type shimPipes struct {
	ctrl, report         *os.File // the elector's: write requests, read events
	shimCtrl, shimReport *os.File // the shim's, closed here once it started
}

// newShimPipes creates the two pipes of a shim.
func newShimPipes() (*shimPipes, error) {
	cr, cw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create the shim's control pipe: %w", err)
	}
	rr, rw, err := os.Pipe()
	if err != nil {
		cr.Close()
		cw.Close()
		return nil, fmt.Errorf("create the shim's report pipe: %w", err)
	}
	return &shimPipes{ctrl: cw, report: rr, shimCtrl: cr, shimReport: rw}, nil
}

// closeShimEnds closes the shim's ends in this process.
func (sp *shimPipes) closeShimEnds() {
	sp.shimCtrl.Close()
	sp.shimReport.Close()
}

// closeAll closes every end.
func (sp *shimPipes) closeAll() {
	sp.closeShimEnds()
	sp.ctrl.Close()
	sp.report.Close()
}

// maxStartMessage bounds the environment a start message may carry (Linux's own limit on
// the arguments and environment of an exec is lower).
const maxStartMessage = 16 << 20

// startMessage encodes the go-ahead with the command's environment env.
func startMessage(env []string) []byte {
	n := 0
	for _, kv := range env {
		n += len(kv) + 1
	}
	b := make([]byte, 5, 5+n)
	b[0] = shimStart
	binary.BigEndian.PutUint32(b[1:], uint32(n))
	for _, kv := range env {
		b = append(b, kv...)
		b = append(b, 0)
	}
	return b
}

// readStartMessage reads the go-ahead from the control pipe and returns the environment it
// carries (never nil). Anything else, the pipe's end included, is an error: the shim must
// then exit without starting the command.
func readStartMessage(r *bufio.Reader) ([]string, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, fmt.Errorf("read the go-ahead: %w", err)
	}
	n := binary.BigEndian.Uint32(head[1:])
	if head[0] != shimStart || n > maxStartMessage {
		return nil, fmt.Errorf("unexpected request %q before the go-ahead", head[0])
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("read the go-ahead's environment: %w", err)
	}
	env := []string{}
	for len(body) > 0 {
		kv, rest, _ := bytes.Cut(body, []byte{0})
		env, body = append(env, string(kv)), rest
	}
	return env, nil
}

// readShimStart reads the shim's first report: the command's pid, or why it did not start.
func readShimStart(r *bufio.Reader) (int, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return 0, errors.New("the shim exited before starting the command")
		}
		return 0, fmt.Errorf("read the shim's report: %w", err)
	}
	kind, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	switch kind {
	case shimReportStarted:
		pid, err := strconv.Atoi(rest)
		if err != nil {
			return 0, fmt.Errorf("the shim reported a bad pid %q", rest)
		}
		return pid, nil
	case shimReportError:
		return 0, errors.New(rest)
	}
	return 0, fmt.Errorf("unexpected report from the shim: %q", line)
}

// readReports reads the shim's reports from its start until it exits: the first one, the
// command's pid or why it did not start, goes to startRes; then it logs what the shim
// reports and records whether it reported the command's tree gone.
func (p *Process) readReports(r *bufio.Reader) {
	defer close(p.reportsDone)
	defer p.pipes.report.Close()
	pid, err := readShimStart(r)
	if err == nil {
		p.cmdPid = pid // read by others only after startRes or reportsDone
		p.cmdStarted.Store(true)
	}
	p.startRes <- err
	if err != nil {
		return
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		kind, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		pidText, sigText, _ := strings.Cut(rest, " ")
		pid, _ := strconv.Atoi(pidText)
		switch kind {
		case shimReportStopped:
			n, _ := strconv.Atoi(sigText)
			sig := syscall.Signal(n)
			klog.InfoS("A process of the command is stopped: it does nothing until it gets SIGCONT", "pid", pid, "signal", sig, "reason", stopReason(sig), "commandPid", p.cmdPid)
		case shimReportContinued:
			klog.InfoS("A stopped process of the command runs again", "pid", pid, "commandPid", p.cmdPid)
		case shimReportGone:
			p.treeGone.Store(true)
			if ws, err := strconv.ParseUint(rest, 10, 32); err == nil && p.direct {
				p.finish(statusOf(syscall.WaitStatus(ws)))
			}
		}
	}
}

// stopReason explains a stop signal.
func stopReason(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTTIN:
		return "it read from the terminal while not in the terminal's foreground"
	case syscall.SIGTTOU:
		return "it wrote to or configured the terminal while not in the terminal's foreground"
	case syscall.SIGTSTP:
		return "stop requested from the terminal (Ctrl-Z) or by SIGTSTP"
	case syscall.SIGSTOP:
		return "SIGSTOP"
	}
	return "stop signal"
}
