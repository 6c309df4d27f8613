package suite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/elector/elector/bench/internal/redisproc"
	"github.com/elector/elector/bench/internal/stats"
)

// SidecarResult is what item 6 measured of the elector binary, or why it could not.
type SidecarResult struct {
	// Missing says why nothing was measured (no cmd/elector yet, the build failed, ...).
	Missing string
	// BinaryBytes is the size of the binary that hack/build.sh builds (static, trimmed).
	BinaryBytes int64
	// PeakRSSLeader and PeakRSSFollower are VmHWM after SidecarIdle, in bytes.
	PeakRSSLeader, PeakRSSFollower int64
	// StartToLeadingMs are the times from exec to the first 200 of /readyz on an empty lease.
	StartToLeadingMs []float64
	// RunMissing says why the `elector run` handover was not measured.
	RunMissing string
	// RunHandoverMs are the times from the old child's last action (its SIGTERM handler) to
	// the new child's first, through two `elector run` processes.
	RunHandoverMs []float64
	// RunHandover summarises RunHandoverMs; StartToLeading StartToLeadingMs.
	RunHandover, StartToLeading stats.Latency
}

func runSidecar(ctx context.Context, cfg Config, srv *redisproc.Server, logf func(string, ...any)) SidecarResult {
	var res SidecarResult
	bin, err := buildElector(ctx, cfg)
	if err != nil {
		res.Missing = err.Error()
		res.RunMissing = res.Missing
		logf("  TODO: elector binary not measured: %v", err)
		return res
	}
	if fi, err := os.Stat(bin); err == nil {
		res.BinaryBytes = fi.Size()
	}
	// Start to leading, each time on a new (empty) lease.
	for i := 0; i < cfg.SidecarStarts; i++ {
		d, err := startToLeading(ctx, bin, srv.Addr(), fmt.Sprintf("start-%d-%d", time.Now().UnixNano(), i))
		if err != nil {
			res.Missing = err.Error()
			res.RunMissing = "not tried: " + err.Error()
			logf("  TODO: %v", err)
			return res
		}
		res.StartToLeadingMs = append(res.StartToLeadingMs, ms(d))
	}
	res.StartToLeading = stats.SummarizeLatency([][]float64{res.StartToLeadingMs})

	// Peak RSS of an idle leader and follower; the `elector run` trials run meanwhile.
	idleLease := fmt.Sprintf("idle-%d", time.Now().UnixNano())
	leader, err := startSidecar(ctx, bin, srv.Addr(), idleLease, "idle-leader")
	if err != nil {
		res.Missing = err.Error()
		return res
	}
	defer leader.stop()
	if err := leader.waitReady(10 * time.Second); err != nil {
		res.Missing = err.Error()
		return res
	}
	follower, err := startSidecar(ctx, bin, srv.Addr(), idleLease, "idle-follower")
	if err != nil {
		res.Missing = err.Error()
		return res
	}
	defer follower.stop()
	idleUntil := time.Now().Add(cfg.SidecarIdle)

	childBin, err := buildChild(ctx, cfg)
	if err != nil {
		res.RunMissing = err.Error()
	} else if res.RunHandoverMs, err = runHandovers(ctx, cfg, bin, childBin, srv.Addr()); err != nil {
		res.RunMissing = err.Error()
		logf("  TODO: elector run handover not measured: %v", err)
	}
	res.RunHandover = stats.SummarizeLatency([][]float64{res.RunHandoverMs})

	if err := sleepCtx(ctx, time.Until(idleUntil)); err != nil {
		res.Missing = err.Error()
		return res
	}
	if res.PeakRSSLeader, err = redisproc.PeakRSS(leader.cmd.Process.Pid); err != nil {
		res.Missing = err.Error()
	}
	if res.PeakRSSFollower, err = redisproc.PeakRSS(follower.cmd.Process.Pid); err != nil {
		res.Missing = err.Error()
	}
	return res
}

// buildElector builds cmd/elector with the project's release build script.
func buildElector(ctx context.Context, cfg Config) (string, error) {
	if _, err := os.Stat(filepath.Join(cfg.Root, "cmd", "elector")); err != nil {
		return "", fmt.Errorf("cmd/elector does not exist yet")
	}
	out := filepath.Join(cfg.Work, "elector")
	var cmd *exec.Cmd
	if _, err := os.Stat(filepath.Join(cfg.Root, "hack", "build.sh")); err == nil {
		cmd = exec.CommandContext(ctx, "bash", "hack/build.sh", out)
	} else {
		cmd = exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/elector")
	}
	cmd.Dir = cfg.Root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build cmd/elector: %v: %s", err, lastLine(string(b)))
	}
	return out, nil
}

func buildChild(ctx context.Context, cfg Config) (string, error) {
	out := filepath.Join(cfg.Work, "benchchild")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/benchchild")
	cmd.Dir = filepath.Join(cfg.Root, "bench")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build bench/cmd/benchchild: %v: %s", err, lastLine(string(b)))
	}
	return out, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// proc is an elector process.
type proc struct {
	cmd  *exec.Cmd
	port int
	done chan struct{}
	out  *os.File
}

func startProc(ctx context.Context, bin string, args []string, env []string, port int) (*proc, error) {
	cmd := exec.Command(bin, args...)
	// Without the benchmark's own ELECTOR_* variables: the elector refuses one no flag reads.
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "ELECTOR_") })
	cmd.Env = append(base, env...)
	logf, err := os.CreateTemp("", "elector-proc-*.log")
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, port: port, done: make(chan struct{}), out: logf}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func startSidecar(ctx context.Context, bin, redisAddr, leaseName, identity string) (*proc, error) {
	port, err := freeTCPPort()
	if err != nil {
		return nil, err
	}
	return startProc(ctx, bin, []string{"sidecar",
		"--lease-name", leaseName, "--identity", identity, "--redis-addr", redisAddr,
		"--http-addr", "127.0.0.1:" + strconv.Itoa(port)}, nil, port)
}

// stop sends SIGTERM and waits for the exit (SIGKILL after 10s).
func (p *proc) stop() {
	defer func() {
		_ = p.out.Close()
		_ = os.Remove(p.out.Name())
	}()
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.out.Name())
	return lastLine(string(b))
}

// waitReady polls /readyz every millisecond until it answers 200.
func (p *proc) waitReady(within time.Duration) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: false}}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", p.port)
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("elector sidecar exited: %s", p.logTail())
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("elector sidecar: /readyz not 200 within %v: %s", within, p.logTail())
}

func startToLeading(ctx context.Context, bin, redisAddr, leaseName string) (time.Duration, error) {
	t0 := time.Now()
	p, err := startSidecar(ctx, bin, redisAddr, leaseName, "starter")
	if err != nil {
		return 0, err
	}
	defer p.stop()
	if err := p.waitReady(10 * time.Second); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runHandovers times handovers between two `elector run` processes whose child is
// benchchild: SIGTERM to the leader's elector, which stops its child (the child's "end") and
// releases; the other elector's child starts ("start").
func runHandovers(ctx context.Context, cfg Config, bin, childBin, redisAddr string) ([]float64, error) {
	logPath := filepath.Join(cfg.Work, "benchchild.log")
	_ = os.Remove(logPath)
	leaseName := fmt.Sprintf("run-%d", time.Now().UnixNano())
	start := func(identity string) (*proc, error) {
		return startProc(ctx, bin, []string{"run", "--lease-name", leaseName, "--identity", identity,
			"--redis-addr", redisAddr, "--", childBin}, []string{"BENCHCHILD_LOG=" + logPath}, 0)
	}
	var procs [2]*proc
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.stop()
			}
		}
	}()
	var err error
	if procs[0], err = start("run-0"); err != nil {
		return nil, err
	}
	if _, err := waitChildLines(logPath, 1, 10*time.Second); err != nil {
		return nil, fmt.Errorf("first child: %w (elector: %s)", err, procs[0].logTail())
	}
	if procs[1], err = start("run-1"); err != nil {
		return nil, err
	}
	var out []float64
	leader := 0
	lines := 1
	for i := 0; i < cfg.RunHandovers; i++ {
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil { // the follower subscribes
			return out, err
		}
		_ = procs[leader].cmd.Process.Signal(syscall.SIGTERM)
		got, err := waitChildLines(logPath, lines+2, 10*time.Second) // old child's end, new child's start
		if err != nil {
			return out, fmt.Errorf("handover %d: %w (old elector: %s)", i, err, procs[leader].logTail())
		}
		lines += 2
		var end, begin int64
		for _, l := range got[len(got)-2:] {
			f := strings.Fields(l)
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "end":
				end = ns
			case "start":
				begin = ns
			}
		}
		if end == 0 || begin == 0 {
			return out, fmt.Errorf("handover %d: child log %q, want an end and a start", i, got[len(got)-2:])
		}
		out = append(out, float64(begin-end)/1e6)
		procs[leader].stop()
		if procs[leader], err = start(fmt.Sprintf("run-%d", leader)); err != nil {
			return out, err
		}
		leader = 1 - leader
	}
	return out, nil
}

// waitChildLines waits until the child log has n lines and returns them.
func waitChildLines(path string, n int, within time.Duration) ([]string, error) {
	deadline := time.Now().Add(within)
	for {
		f, err := os.Open(path)
		if err == nil {
			var lines []string
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				lines = append(lines, sc.Text())
			}
			_ = f.Close()
			if len(lines) >= n {
				return lines, nil
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("child log has fewer than %d lines after %v", n, within)
		}
		time.Sleep(time.Millisecond)
	}
}
