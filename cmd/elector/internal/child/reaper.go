package child

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// reapInterval is how often Run looks for zombies without being woken by
// SIGCHLD: signals coalesce, so one SIGCHLD may stand for several exits, and
// the child of a Process may have blocked an earlier round.
const reapInterval = time.Second

// Reaper reaps orphaned processes, which become children of this process
// when it runs as PID 1 (a container's entrypoint) or as a child subreaper.
// It never reaps a child started by Start with this Reaper in its Spec:
// reaping that child would steal its exit status from Process.Wait.
//
// How: on SIGCHLD (and every second) the Reaper asks the kernel which child
// has exited with waitid(P_ALL, WNOHANG|WNOWAIT), which does not reap. If
// that child is not supervised, it reaps exactly that pid with wait4 and
// asks again; if it is supervised, it stops and leaves it to its Process,
// which reaps it with exec.Cmd.Wait and then wakes the Reaper. Start forks
// and registers the child while holding the Reaper's lock, so the Reaper
// never sees a supervised child before it is registered. The classic race of
// reapers that call wait4(-1) in a loop with os/exec (exec.Cmd.Wait failing
// with ECHILD and the exit code lost) therefore cannot happen.
//
// Any other child of the process must be started through this package with
// the Reaper in its Spec, or it may be reaped by the Reaper.
type Reaper struct {
	mu         sync.Mutex
	supervised map[int]struct{}
	wake       chan struct{}
}

// NewReaper returns a Reaper; call Run to start reaping.
func NewReaper() *Reaper {
	return &Reaper{supervised: make(map[int]struct{}), wake: make(chan struct{}, 1)}
}

// NeedsReaper reports whether this process must reap orphans: whether it
// runs as PID 1.
func NeedsReaper() bool { return os.Getpid() == 1 }

// Run reaps orphaned children until ctx is done. It does nothing outside
// Linux. Run it in its own goroutine, at most once per process.
func (r *Reaper) Run(ctx context.Context) {
	if !reapSupported {
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	ticker := time.NewTicker(reapInterval)
	defer ticker.Stop()
	for {
		r.reap()
		select {
		case <-ctx.Done():
			return
		case <-sigs:
		case <-r.wake:
		case <-ticker.C:
		}
	}
}

func (r *Reaper) reap() {
	r.mu.Lock()
	reaped, err := reapOrphans(r.supervised)
	r.mu.Unlock()
	for _, pid := range reaped {
		klog.V(4).InfoS("Reaped orphaned process", "pid", pid)
	}
	if err != nil {
		klog.ErrorS(err, "Reaping orphaned processes failed")
	}
}

// forget unregisters a supervised child after its Process reaped it, and
// wakes Run, which may have stopped at that child.
func (r *Reaper) forget(pid int) {
	r.mu.Lock()
	delete(r.supervised, pid)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}
