package reliability

import (
	"flag"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

// TestMain registers klog's flags, so that `go test ./test/reliability -args -v=4` shows every
// attempt of the electors under test.
func TestMain(m *testing.M) {
	klog.InitFlags(nil)
	flag.Parse()
	os.Exit(m.Run())
}

// longEnv turns on the long variants of the tests.
const longEnv = "ELECTOR_LONG"

// long reports whether ELECTOR_LONG asks for the long variants.
func long() bool { return os.Getenv(longEnv) != "" }

// rounds returns short, or long when ELECTOR_LONG is set.
func rounds(short, long_ int) int {
	if long() {
		return long_
	}
	return short
}
