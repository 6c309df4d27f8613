package main

import (
	"strings"
	"testing"
	"time"
)

// TestValidateOnce checks the combinations of --once-per, --exit-if-done, --force and
// --on-success that run refuses, and those it takes.
func TestValidateOnce(t *testing.T) {
	for _, tc := range []struct {
		o    runOptions
		want string // "" for none
	}{
		{runOptions{}, ""},
		{runOptions{oncePer: 24 * time.Hour, exitIfDone: true, force: true}, ""},
		{runOptions{oncePer: time.Hour, onSuccess: onSuccessRelease}, ""},
		{runOptions{oncePer: -time.Second}, "--once-per: must be 0 (off) or a positive whole number of milliseconds"},
		{runOptions{oncePer: 1500 * time.Microsecond}, "--once-per: must be 0 (off) or a positive whole number of milliseconds"},
		{runOptions{exitIfDone: true}, "--exit-if-done: needs --once-per"},
		{runOptions{force: true}, "--force: needs --once-per"},
		{runOptions{oncePer: time.Hour, onSuccess: onSuccessHold}, "--on-success=hold: not with --once-per"},
	} {
		err := tc.o.validateOnce()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want no error", tc.o, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}
