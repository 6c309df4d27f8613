package child

import (
	"bufio"
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
	shimControlFd = 3 // elector → shim: shimKill, or shimSignal and a signal number; EOF: the elector died
	shimReportFd  = 4 // shim → elector: one line per event, see the shimReport* prefixes
)

// The requests on the control pipe.
const (
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
	shimReportGone      = "gone"      // "gone": the command and every descendant are reaped
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

// logShimReports logs what the shim reports after the start until it exits, and records
// whether it reported the command's tree gone.
func (p *Process) logShimReports(r *bufio.Reader) {
	defer close(p.reportsDone)
	defer p.pipes.report.Close()
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
