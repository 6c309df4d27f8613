package schedule

import (
	_ "embed"
	"iter"

	"github.com/redis/go-redis/v9"
)

// The package's Lua scripts, each self-contained (KEYS and ARGV in its header comment), in the
// order Scripts yields them.
var (
	//go:embed scripts/claim.lua
	claimSource string
	//go:embed scripts/finish.lua
	finishSource string
	//go:embed scripts/skip.lua
	skipSource string
	//go:embed scripts/read.lua
	readSource string
)

// script is one Lua script: its name, its source and go-redis's EVALSHA/EVAL runner.
type script struct {
	name, src string
	run       *redis.Script
}

var (
	claimScript  = &script{"schedule_claim", claimSource, redis.NewScript(claimSource)}
	finishScript = &script{"schedule_finish", finishSource, redis.NewScript(finishSource)}
	skipScript   = &script{"schedule_skip", skipSource, redis.NewScript(skipSource)}
	readScript   = &script{"schedule_read", readSource, redis.NewScript(readSource)}

	allScripts = []*script{claimScript, finishScript, skipScript, readScript}
)

// Scripts yields the name and the Lua source of each script of the package, always in the same
// order, for code that loads them as a Redis function library.
func Scripts() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, s := range allScripts {
			if !yield(s.name, s.src) {
				return
			}
		}
	}
}
