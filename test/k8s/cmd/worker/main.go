// Command worker is the e2e tests' application. Subcommands:
//
//	worker idle   the app of sidecar mode: runs until SIGTERM.
//	worker job    the command of run mode: every 200 ms a fenced write (pkg/fence, with
//	              ELECTOR_FENCING_TOKEN) appends "identity token unix-ms event" to the
//	              Redis list WORKER_LOG_KEY at WORKER_REDIS; with WORKER_IGNORE_TERM=1 it
//	              records SIGTERM and keeps writing, so that elector run's kill grace ends it.
//	worker ps     prints the command line of every process it can see (the image has no ps).
//	worker active an app that records, from its own side, when it does the singleton work
//	              (active.go): "pod instance token unix-ms start|stop" in the Redis list
//	              WORKER_LOG_KEY at WORKER_REDIS; takes WORKER_STOP_DELAY to stop on SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/fence"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: worker idle|job|ps|active")
		os.Exit(2)
	}
	// No extra arguments: a chart that appended anything to the command (its demo script,
	// say) makes the pod fail instead of passing unseen.
	if extra := os.Args[2:]; len(extra) > 0 && os.Args[1] != "ps" {
		fmt.Fprintf(os.Stderr, "worker %s: unexpected arguments %q; it takes none\n", os.Args[1], extra)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "idle":
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
	case "ps":
		ps()
	case "active":
		if err := active(); err != nil {
			fmt.Fprintln(os.Stderr, "worker active:", err)
			os.Exit(1)
		}
	case "job":
		if err := job(); err != nil {
			fmt.Fprintln(os.Stderr, "worker job:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "worker: unknown subcommand %q; allowed: idle, job, ps, active\n", os.Args[1])
		os.Exit(2)
	}
}

func ps() {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		fmt.Printf("%s %s\n", e.Name(), strings.Join(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), " "))
	}
}

func job() error {
	token, err := strconv.ParseInt(os.Getenv("ELECTOR_FENCING_TOKEN"), 10, 64)
	if err != nil {
		return fmt.Errorf("ELECTOR_FENCING_TOKEN %q: %w", os.Getenv("ELECTOR_FENCING_TOKEN"), err)
	}
	identity := os.Getenv("ELECTOR_IDENTITY")
	logKey := os.Getenv("WORKER_LOG_KEY")
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("WORKER_REDIS")})
	defer client.Close()
	f, err := fence.New(client, logKey+":fence")
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	ignore := os.Getenv("WORKER_IGNORE_TERM") == "1"
	write := func(event string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := f.Do(ctx, token, []string{logKey}, "RPUSH", logKey,
			fmt.Sprintf("%s %d %d %s", identity, token, time.Now().UnixMilli(), event))
		if errors.Is(err, fence.ErrStale) {
			return err
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker job: write:", err)
		}
		return nil
	}
	if err := write("start"); err != nil {
		return err
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case s := <-sig:
			if err := write("signal-" + s.String()); err != nil {
				return err
			}
			if !ignore {
				return nil
			}
		case <-tick.C:
			if err := write("write"); err != nil {
				return err
			}
		}
	}
}
