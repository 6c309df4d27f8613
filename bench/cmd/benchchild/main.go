// Command benchchild is the command that electorbench runs under `elector run` to time a
// handover from one child process to the next: it appends "start <unix-ns> <pid>" to the
// file named by $BENCHCHILD_LOG as soon as it runs, and "end <unix-ns> <pid>" when SIGTERM or
// SIGINT arrives, then exits 0.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	path := os.Getenv("BENCHCHILD_LOG")
	if path == "" {
		fmt.Fprintln(os.Stderr, "benchchild: BENCHCHILD_LOG is not set")
		os.Exit(2)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchchild:", err)
		os.Exit(2)
	}
	write := func(what string) {
		// One write per line: appends of a few bytes are atomic between processes.
		if _, err := fmt.Fprintf(f, "%s %d %d\n", what, time.Now().UnixNano(), os.Getpid()); err != nil {
			fmt.Fprintln(os.Stderr, "benchchild:", err)
			os.Exit(2)
		}
	}
	write("start")
	<-sigs
	write("end")
	_ = f.Close()
}
