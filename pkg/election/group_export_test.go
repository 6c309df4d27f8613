package election

import "time"

// GroupMaxLag returns the latest g's loop woke up after the time it had planned (a deadline,
// a renewal, an attempt) since the last ResetGroupMaxLag: what a blocked loop would show.
func GroupMaxLag(g *Group) time.Duration { return time.Duration(g.maxLag.Load()) }

// ResetGroupMaxLag starts a new measurement of GroupMaxLag.
func ResetGroupMaxLag(g *Group) { g.maxLag.Store(0) }
