// Command worker is the child of `elector run` in the chaos test (package chaos): a singleton
// job that makes a fenced write to Redis about every 5ms with the fencing token of its term
// and records the outcome of each one in a log file of its own.
//
// Each write is an RPUSH of "<token> <pid> <seq> <sent>" onto the -list key through
// fence.Fence.Do, so the fence script refuses it when a larger token has been presented
// before; the list is the resource's own record of every write it accepted, in the order it
// accepted them, including writes whose reply the worker never saw.
//
// The log is DIR/worker-<identity>-<pid>.log, one line per event, times in Unix nanoseconds
// of the wall clock (all processes of the test run on one machine):
//
//	start <t> <pid> <token> <identity>
//	w <sent> <done> <token> <seq> accepted|rejected|error [reason]
//	exit <t> <signal>
//
// Redis errors are logged and the loop goes on; SIGTERM or SIGINT ends it at once (an
// in-flight write is abandoned and logged as an error).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/pkg/fence"
)

func main() {
	dir := flag.String("dir", "", "directory of the log file (required)")
	addr := flag.String("redis", "", "Redis host:port (required)")
	fenceKey := flag.String("fence", "chaos:fence", "key of the fence")
	listKey := flag.String("list", "chaos:writes", "list the fenced writes push onto")
	interval := flag.Duration("interval", 5*time.Millisecond, "pause between two writes")
	timeout := flag.Duration("timeout", 500*time.Millisecond, "bound of one write, and of dial, read and write")
	flag.Parse()
	if err := run(*dir, *addr, *fenceKey, *listKey, *interval, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(100)
	}
}

func run(dir, addr, fenceKey, listKey string, interval, timeout time.Duration) error {
	// Signals first: a SIGTERM that arrives during the set-up must still end the worker.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if dir == "" || addr == "" {
		return errors.New("-dir and -redis are required")
	}
	token, err := strconv.ParseInt(os.Getenv("ELECTOR_FENCING_TOKEN"), 10, 64)
	if err != nil || token <= 0 {
		return fmt.Errorf("ELECTOR_FENCING_TOKEN=%q is not a positive integer", os.Getenv("ELECTOR_FENCING_TOKEN"))
	}
	identity := os.Getenv("ELECTOR_IDENTITY")
	pid := os.Getpid()
	path := filepath.Join(dir, fmt.Sprintf("worker-%s-%d.log", identity, pid))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer f.Close()
	// One write(2) per line: a line is whole in the file even if the worker is SIGKILLed
	// right after.
	logLine := func(format string, args ...any) {
		_, _ = f.WriteString(fmt.Sprintf(format, args...) + "\n")
	}
	logLine("start %d %d %d %s", time.Now().UnixNano(), pid, token, identity)

	client, err := redisclient.New(redisclient.Config{
		Addrs: []string{addr}, Mode: redisclient.ModeStandalone,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		MaxRetries: -1, // one log line is one attempt
	})
	if err != nil {
		return fmt.Errorf("redis client: %w", err)
	}
	defer client.Close()
	fc, err := fence.New(client, fenceKey)
	if err != nil {
		return err
	}

	for seq := int64(1); ctx.Err() == nil; seq++ {
		sent := time.Now().UnixNano()
		wctx, cancel := context.WithTimeout(ctx, timeout)
		value := fmt.Sprintf("%d %d %d %d", token, pid, seq, sent)
		_, err := fc.Do(wctx, token, []string{listKey}, "RPUSH", listKey, value)
		cancel()
		done := time.Now().UnixNano()
		switch {
		case err == nil:
			logLine("w %d %d %d %d accepted", sent, done, token, seq)
		case errors.Is(err, fence.ErrStale):
			logLine("w %d %d %d %d rejected", sent, done, token, seq)
		default:
			logLine("w %d %d %d %d error %s", sent, done, token, seq, reason(err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
	logLine("exit %d signal", time.Now().UnixNano())
	return nil
}

// reason reduces an error to one word for the log.
func reason(err error) string {
	var ne interface{ Timeout() bool }
	switch s := err.Error(); {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case strings.Contains(s, "refused"):
		return "refused"
	case strings.Contains(s, "reset"), strings.Contains(s, "EOF"), strings.Contains(s, "closed"), strings.Contains(s, "broken pipe"):
		return "closed"
	case strings.Contains(s, "LOADING"):
		return "loading"
	default:
		return "other"
	}
}
