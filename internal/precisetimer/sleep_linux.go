package precisetimer

import (
	"errors"
	"syscall"
	"time"
)

// sleep blocks the calling thread for d with nanosleep(2), whose wake-up is as precise as the
// kernel's timer slack (50 µs by default), where time.Sleep's may be a millisecond late.
func sleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		// A signal (the runtime preempts with SIGURG) ends the sleep early; the rest is in ts.
		if err := syscall.Nanosleep(&ts, &ts); !errors.Is(err, syscall.EINTR) {
			return
		}
	}
}
