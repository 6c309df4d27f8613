//go:build race

package racebuild

// Enabled reports whether this binary was built with the race detector (go test -race).
const Enabled = true
