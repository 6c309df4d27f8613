//go:build !linux

package precisetimer

import "time"

// sleep is time.Sleep outside Linux.
func sleep(d time.Duration) { time.Sleep(d) }
