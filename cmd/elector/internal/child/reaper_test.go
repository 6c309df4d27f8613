//go:build linux

package child

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReaper runs helperReaper in a separate process that is made a child
// subreaper, so that it inherits orphans the way PID 1 of a container does,
// without changing the process of the other tests.
func TestReaper(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=reaper")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("reaper helper: %v\n%s", err, out)
	}
	t.Logf("reaper helper:\n%s", out)
}

func TestNeedsReaper(t *testing.T) {
	if got, want := NeedsReaper(), os.Getpid() == 1; got != want {
		t.Errorf("NeedsReaper() = %v, want %v", got, want)
	}
}

// zombieChildren returns the pids of this process's children that are zombies.
func zombieChildren() []int {
	self := strconv.Itoa(os.Getpid())
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	var zombies []int
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:]) // state, ppid, ...
		if len(fields) > 1 && fields[0] == "Z" && fields[1] == self {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			zombies = append(zombies, pid)
		}
	}
	return zombies
}

// waitNoZombies waits up to 10s until this process has no zombie children.
func waitNoZombies() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		z := zombieChildren()
		if len(z) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zombie children left after 10s: %v", z)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// helperReaper checks the Reaper in a child subreaper and returns the exit
// code of the helper process.
func helperReaper() int {
	fail := func(format string, args ...any) int {
		fmt.Printf("FAIL: "+format+"\n", args...)
		return 1
	}
	const prSetChildSubreaper = 36
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fail("prctl(PR_SET_CHILD_SUBREAPER): %v", errno)
	}
	ctx := context.Background()

	// 1. Without a Reaper, an orphan that escaped the child's process group
	// stays a zombie child of this process: the setup works.
	p, err := Start(ctx, Spec{Path: "sh", Args: []string{"-c", "setsid sleep 0.01 & exit 0"}})
	if err != nil {
		return fail("start: %v", err)
	}
	if st := p.Wait(); st.Code != 0 {
		return fail("first child: %+v", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(zombieChildren()) == 0 {
		if time.Now().After(deadline) {
			return fail("no orphan zombie appeared without a Reaper")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("without a Reaper: zombies %v\n", zombieChildren())

	// 2. The Reaper reaps it.
	r := NewReaper()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go r.Run(runCtx)
	if err := waitNoZombies(); err != nil {
		return fail("Reaper did not reap: %v", err)
	}

	// 3. Supervised children keep their exact exit status while orphans, in
	// and out of their process groups, exit around them and are reaped.
	for i := range 40 {
		code := 1 + i%100
		script := fmt.Sprintf("(sleep 0.01; exit 1) & (setsid sh -c 'sleep 0.0%d' &); sleep 0.00%d; exit %d", i%5, i%3, code)
		p, err := Start(ctx, Spec{Path: "sh", Args: []string{"-c", script}, Reaper: r})
		if err != nil {
			return fail("start %d: %v", i, err)
		}
		if st := p.Wait(); st.Code != code || st.Err != nil {
			return fail("child %d: status %+v, want exit code %d (status stolen by the Reaper?)", i, st, code)
		}
	}
	// A child that exits at once, before Start could possibly return.
	for i := range 40 {
		p, err := Start(ctx, Spec{Path: "true", Reaper: r})
		if err != nil {
			return fail("start true %d: %v", i, err)
		}
		if st := p.Wait(); st.Code != 0 || st.Err != nil {
			return fail("true %d: status %+v", i, st)
		}
	}
	if err := waitNoZombies(); err != nil {
		return fail("%v", err)
	}
	if len(r.supervised) != 0 {
		return fail("Reaper still tracks %v", r.supervised)
	}
	fmt.Println("ok: 80 supervised exit codes intact, all orphans reaped")
	return 0
}
