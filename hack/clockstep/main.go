// Command clockstep makes this machine's wall clock run at another rate than its monotonic
// clock, as on a host whose clock is being corrected (NTP, a hypervisor's time sync): every
// second it steps CLOCK_REALTIME by the rate, ahead for one period and back for the next, and
// when it is stopped (SIGINT, SIGTERM) it steps the clock back by the sum of its steps.
//
// A CI host of ours ran its wall clock 5 ms/s ahead of its monotonic clock (docs/DESIGN.md):
// Redis keeps expiries on the wall clock and the tests time on the monotonic one, so a test
// that compared the two with a few milliseconds of slack failed there and nowhere else.
// hack/flake-hunt.sh runs this beside the tests (FLAKE_CLOCK_RATE). It needs root
// (CAP_SYS_TIME); a SIGKILL leaves the clock off by up to rate × period.
//
// Usage: clockstep [-rate 5ms] [-period 60s]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	rate := flag.Duration("rate", 5*time.Millisecond, "how far to step the wall clock each second")
	period := flag.Duration("period", time.Minute, "how long to step in one direction before turning")
	flag.Parse()
	if *rate <= 0 || *rate >= time.Second/10 || *period < time.Second || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "clockstep: want -rate in (0, 100ms), -period of at least 1s and no arguments")
		os.Exit(2)
	}
	if err := run(*rate, *period); err != nil {
		fmt.Fprintf(os.Stderr, "clockstep: %v\n", err)
		os.Exit(1)
	}
}

func run(rate, period time.Duration) error {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var total time.Duration
	for i := 0; ; i++ {
		select {
		case <-stop:
			if err := stepWallClock(-total); err != nil {
				return fmt.Errorf("step back by %v: %w", total, err)
			}
			fmt.Fprintf(os.Stderr, "clockstep: stepped the wall clock back by %v\n", total)
			return nil
		case <-tick.C:
			d := stepAt(i, rate, period)
			if err := stepWallClock(d); err != nil {
				return fmt.Errorf("step by %v (needs root): %w", d, err)
			}
			total += d
		}
	}
}

// stepAt is the i-th step (one per second): +rate for a period, then -rate for a period.
func stepAt(i int, rate, period time.Duration) time.Duration {
	if (time.Duration(i)*time.Second/period)%2 == 0 {
		return rate
	}
	return -rate
}

// stepWallClock moves CLOCK_REALTIME by d (microsecond precision); the monotonic clock is
// not moved.
func stepWallClock(d time.Duration) error {
	var tv syscall.Timeval
	if err := syscall.Gettimeofday(&tv); err != nil {
		return err
	}
	t := time.Unix(tv.Sec, tv.Usec*1000).Add(d)
	tv = syscall.NsecToTimeval(t.UnixNano())
	return syscall.Settimeofday(&tv)
}
