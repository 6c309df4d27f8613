// Command schedjob is the CMD of TestScheduleChaos (test/chaos/schedule_test.go): the job that
// `elector run --schedule` runs once per slot. It takes an exclusive, non-blocking flock on
// -lock (a second run at the same time cannot have it), appends a "start" line to -log, works
// for -work, then appends an "end" line. A run that finds the lock held appends "overlap"
// instead and exits 0: the checker fails the test on it. Each line is one write(2) to a file
// opened with O_APPEND, so lines of runs killed mid-way are whole or absent:
//
//	start|end|overlap SLOT ATTEMPT TOKEN PID UNIXNANO
//
// SLOT, ATTEMPT and TOKEN are ELECTOR_SLOT, ELECTOR_ATTEMPT and ELECTOR_FENCING_TOKEN; UNIXNANO
// is the wall clock when main began (start, overlap) or when the work ended (end).
//
// With -floor it prints the wall clock when main began and exits: the test measures the exec
// floor of this same binary (its parent's clock before the exec to this one).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"
)

func main() {
	began := time.Now()
	logPath := flag.String("log", "", "append-only record of the runs")
	lockPath := flag.String("lock", "", "lock file held while a run works")
	work := flag.Duration("work", 700*time.Millisecond, "how long a run works")
	floor := flag.Bool("floor", false, "print the start time and exit")
	flag.Parse()
	if *floor {
		fmt.Println(began.UnixNano())
		return
	}
	if *logPath == "" || *lockPath == "" {
		fmt.Fprintln(os.Stderr, "schedjob: -log and -lock are required")
		os.Exit(2)
	}
	id := fmt.Sprintf("%s %s %s %d", env("ELECTOR_SLOT"), env("ELECTOR_ATTEMPT"), env("ELECTOR_FENCING_TOKEN"), os.Getpid())
	logf, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedjob:", err)
		os.Exit(1)
	}
	lock, err := os.OpenFile(*lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedjob:", err)
		os.Exit(1)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			write(logf, "overlap %s %d\n", id, began.UnixNano())
			return
		}
		fmt.Fprintln(os.Stderr, "schedjob: flock:", err)
		os.Exit(1)
	}
	write(logf, "start %s %d\n", id, began.UnixNano())
	time.Sleep(*work)
	write(logf, "end %s %d\n", id, time.Now().UnixNano())
	// The lock goes with the process.
}

func env(name string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return "-"
}

// write appends one line in one write(2).
func write(f *os.File, format string, args ...any) {
	if _, err := f.WriteString(fmt.Sprintf(format, args...)); err != nil {
		fmt.Fprintln(os.Stderr, "schedjob:", err)
		os.Exit(1)
	}
}
