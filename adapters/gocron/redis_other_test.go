//go:build !linux

package gocron

import "syscall"

// sysProcAttr: Pdeathsig exists only on Linux; elsewhere redis-server is killed at t.Cleanup.
func sysProcAttr() *syscall.SysProcAttr { return nil }
