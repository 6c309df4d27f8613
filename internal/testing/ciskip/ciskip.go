// Package ciskip makes a test's skip a failure in CI: when the environment variable CI is
// non-empty (.ci/run sets CI=true), Skip fails the test instead, so that a check CI is meant
// to run cannot silently not run. The skips CI allows are listed, with their reasons, in
// docs/CI.md; they do not use this package.
package ciskip

import (
	"fmt"
	"os"
	"testing"
)

// Env is the variable that turns skips into failures.
const Env = "CI"

// Skip skips t with the reason, or fails it when Env is set.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(Env) != "" {
		t.Fatalf("%s (failing instead of skipping because %s is set: a skip in CI is a failure unless docs/CI.md lists it)", msg, Env)
	}
	t.Skip(msg)
}
