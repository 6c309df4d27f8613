package election_test

import (
	"flag"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

// TestMain registers klog's flags, so that `go test ./pkg/election -args -v=4` shows every
// attempt of the electors under test.
func TestMain(m *testing.M) {
	klog.InitFlags(nil)
	flag.Parse()
	os.Exit(runWithRedis(m))
}
