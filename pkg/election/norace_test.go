//go:build !race

package election

// raceEnabled is true when the tests run under the race detector (make test); the replay
// checks then run fewer seeds (replaySeeds).
const raceEnabled = false
