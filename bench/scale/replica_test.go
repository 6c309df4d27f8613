package scale

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// report is one "report" line of a replica: see bench/cmd/scalereplica.
type report struct {
	at    time.Time
	cpu   time.Duration // user+system CPU time so far
	inuse int64         // Go heap in use, bytes
	live  int64         // Go heap live after the last GC, bytes
	held  int           // terms whose work is running
}

// replica is one running scalereplica process, in a process group of its own.
type replica struct {
	id      int
	cmd     *exec.Cmd
	terms   string // its term records file
	stderr  string // its log
	exited  chan struct{}
	exitAt  time.Time // when Wait returned: no term of it can run after that
	stopped bool      // it printed "stopped": it ended every term itself

	mu      sync.Mutex
	reports []report
}

// buildReplica builds bench/cmd/scalereplica once into dir and returns its path.
func buildReplica(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "scalereplica")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/elector/elector/bench/cmd/scalereplica")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build scalereplica: %v\n%s", err, out)
	}
	return bin
}

// startReplica starts replica id with args; it is killed with its process group at cleanup
// (and by the kernel if the test binary dies first).
func startReplica(t *testing.T, bin, dir string, id int, args []string) *replica {
	t.Helper()
	r := &replica{
		id:     id,
		terms:  filepath.Join(dir, fmt.Sprintf("terms-%d.bin", id)),
		stderr: filepath.Join(dir, fmt.Sprintf("replica-%d.log", id)),
		exited: make(chan struct{}),
	}
	logf, err := os.Create(r.stderr)
	if err != nil {
		t.Fatalf("create replica log: %v", err)
	}
	defer logf.Close()
	args = append([]string{"-terms", r.terms, "-identity", fmt.Sprintf("replica-%d", id)}, args...)
	r.cmd = exec.Command(bin, args...)
	r.cmd.Stderr = logf
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("replica %d stdout: %v", id, err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start replica %d: %v", id, err)
	}
	t.Cleanup(func() { r.kill() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.parse(sc.Text())
		}
		_ = r.cmd.Wait()
		r.exitAt = time.Now()
		close(r.exited)
	}()
	return r
}

func (r *replica) parse(line string) {
	f := strings.Fields(line)
	switch {
	case len(f) == 6 && f[0] == "report":
		var v [5]int64
		for i := range v {
			v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
		}
		r.mu.Lock()
		r.reports = append(r.reports, report{at: time.Unix(0, v[0]), cpu: time.Duration(v[1]), inuse: v[2], live: v[3], held: int(v[4])})
		r.mu.Unlock()
	case len(f) == 2 && f[0] == "stopped":
		r.mu.Lock()
		r.stopped = true
		r.mu.Unlock()
	}
}

// last returns the latest report (zero before the first).
func (r *replica) last() report {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reports) == 0 {
		return report{}
	}
	return r.reports[len(r.reports)-1]
}

// between returns the reports taken in [from, to].
func (r *replica) between(from, to time.Time) []report {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []report
	for _, x := range r.reports {
		if !x.at.Before(from) && !x.at.After(to) {
			out = append(out, x)
		}
	}
	return out
}

func (r *replica) pid() int { return r.cmd.Process.Pid }

func (r *replica) alive() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL to the replica's process group and waits for it to be reaped.
func (r *replica) kill() {
	if r.alive() {
		_ = syscall.Kill(-r.pid(), syscall.SIGKILL)
	}
	<-r.exited
}

// stop asks the replica to stop (SIGTERM) and waits up to grace for it, then kills it. It
// reports whether the replica stopped by itself.
func (r *replica) stop(grace time.Duration) bool {
	if r.alive() {
		_ = syscall.Kill(r.pid(), syscall.SIGTERM)
	}
	select {
	case <-r.exited:
	case <-time.After(grace):
		r.kill()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

// rss returns the resident set size of pid in bytes (VmRSS), 0 when it is gone.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
