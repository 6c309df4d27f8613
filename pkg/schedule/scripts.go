package schedule

import (
	_ "embed"

	"github.com/elector/elector/internal/leasewire/lualib"
)

// The package's Lua scripts, each self-contained (KEYS and ARGV in its header comment). They
// are functions of elector's one Redis function library (internal/leasewire/lualib), called
// with FCALL where it is loaded and EVALSHA/EVAL elsewhere, as the lease's scripts are.
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

// claim starts work, so above maxmemory Redis refuses it whole (as a fenced write); recording
// an end, a skip or reading the state is allowed there, like the lease's renew and release.
var (
	claimScript  = lualib.Register("schedule_claim", claimSource, false)
	finishScript = lualib.Register("schedule_finish", finishSource, true)
	skipScript   = lualib.Register("schedule_skip", skipSource, true)
	readScript   = lualib.Register("schedule_read", readSource, true)
)
