// Command worker is the child process of the end-to-end tests of `elector run`: a singleton job
// that records what happens to it as JSON lines in a log file shared by all replicas.
//
// At start it takes an exclusive flock(2) on the -lock file without waiting. The kernel drops
// the lock when the process dies, even by SIGKILL, so a worker that finds the lock taken has
// proof that another replica's worker still runs: it logs an "overlap" event.
//
// Events: start (with the ELECTOR_* variables it was given), overlap, signal (each signal
// received), exit (the code it exits with).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// event is one line of the log.
type event struct {
	Ev    string `json:"ev"`
	ID    string `json:"id"`
	Lease string `json:"lease"`
	Token int64  `json:"token"`
	PID   int    `json:"pid"`
	T     int64  `json:"t"` // Unix nanoseconds
	Sig   string `json:"sig,omitempty"`
	Code  int    `json:"code,omitempty"`
}

func main() {
	logPath := flag.String("log", "", "file to append events to (required)")
	lockPath := flag.String("lock", "", "file to flock while running; a taken lock is logged as an overlap")
	exitAfter := flag.Duration("exit-after", 0, "exit by itself after this long (0: run until signalled)")
	exitCode := flag.Int("exit-code", 0, "code to exit with after -exit-after")
	termExit := flag.Int("term-exit", 0, "code to exit with on SIGTERM or SIGINT")
	ignoreTerm := flag.Bool("ignore-term", false, "log SIGTERM and SIGINT but keep running")
	flag.Parse()

	f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(100)
	}
	token, _ := strconv.ParseInt(os.Getenv("ELECTOR_FENCING_TOKEN"), 10, 64)
	base := event{ID: os.Getenv("ELECTOR_IDENTITY"), Lease: os.Getenv("ELECTOR_LEASE_NAME"), Token: token, PID: os.Getpid()}
	record := func(ev event) {
		ev.ID, ev.Lease, ev.Token, ev.PID, ev.T = base.ID, base.Lease, base.Token, base.PID, time.Now().UnixNano()
		b, _ := json.Marshal(ev)
		// One write(2) of one line to an O_APPEND file: lines of concurrent workers never mix.
		_, _ = f.Write(append(b, '\n'))
	}
	exit := func(code int) {
		record(event{Ev: "exit", Code: code})
		os.Exit(code)
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	if *lockPath != "" {
		lf, err := os.OpenFile(*lockPath, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(100)
		}
		if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			record(event{Ev: "overlap"})
		}
	}
	record(event{Ev: "start"})

	var timeout <-chan time.Time
	if *exitAfter > 0 {
		timeout = time.After(*exitAfter)
	}
	for {
		select {
		case <-timeout:
			exit(*exitCode)
		case s := <-sigs:
			record(event{Ev: "signal", Sig: s.String()})
			if (s == syscall.SIGTERM || s == syscall.SIGINT) && !*ignoreTerm {
				exit(*termExit)
			}
		}
	}
}
