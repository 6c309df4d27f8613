//go:build !linux

package redisproc

import (
	"errors"
	"syscall"
	"time"
)

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// ProcessCPU is only implemented on Linux, where it reads /proc.
func ProcessCPU(pid int) (time.Duration, error) {
	return 0, errors.New("process cpu time: only implemented on Linux")
}

// PeakRSS is only implemented on Linux, where it reads /proc.
func PeakRSS(pid int) (int64, error) {
	return 0, errors.New("peak RSS: only implemented on Linux")
}
