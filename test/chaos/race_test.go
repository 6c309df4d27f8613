//go:build race

package chaos

// raceEnabled makes the test build the elector with the race detector too.
const raceEnabled = true
