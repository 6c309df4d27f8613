package lualib_test

import (
	"strings"
	"testing"

	"github.com/elector/elector/internal/leasewire/lualib"
	_ "github.com/elector/elector/pkg/election" // registers members.lua
	_ "github.com/elector/elector/pkg/fence"    // registers fence.lua
	_ "github.com/elector/elector/pkg/lease"    // registers the lease's scripts
	_ "github.com/elector/elector/pkg/schedule" // registers the schedule's scripts
)

// Version is the hash of the scripts as they are: a script changed without it would load
// under the name of other code, and two elector versions would call each other's functions.
func TestVersion(t *testing.T) {
	if got := lualib.ContentVersion(); got != lualib.Version {
		t.Fatalf("the scripts changed: set Version = %q in internal/leasewire/lualib/version.go (it is %q)", got, lualib.Version)
	}
	name, text, err := lualib.Library()
	if err != nil {
		t.Fatal(err)
	}
	if name != "elector_"+lualib.Version || !strings.HasPrefix(text, "#!lua name="+name+"\n") {
		t.Errorf("library %q starts %q", name, strings.SplitN(text, "\n", 2)[0])
	}
	for _, fn := range []string{"acquire", "renew", "release", "resign", "done", "fence", "members",
		"schedule_claim", "schedule_finish", "schedule_skip", "schedule_read", "candidate", "renew_many"} {
		if !strings.Contains(text, "function_name='"+lualib.FunctionName(fn)+"'") {
			t.Errorf("the library has no function %s", lualib.FunctionName(fn))
		}
	}
}
