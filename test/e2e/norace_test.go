//go:build !race

package e2e

// raceEnabled makes TestMain build the elector with the race detector too.
const raceEnabled = false
