//go:build !race

// Package racebuild tells tests whether they run under the race detector: the e2e and chaos
// suites then build the binaries they start with it too, and the simulator's replay checks
// run fewer seeds.
package racebuild

// Enabled reports whether this binary was built with the race detector (go test -race).
const Enabled = false
