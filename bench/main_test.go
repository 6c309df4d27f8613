package bench

import (
	"io"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

// TestMain sends the electors' klog output to io.Discard: the messages are still formatted,
// as in production, but a terminal does not slow the benchmarks down.
func TestMain(m *testing.M) {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}
