package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/elector/elector/internal/testing/racebuild"
	"github.com/elector/elector/internal/testing/testbin"
)

// binDir holds the binaries built for this test binary; TestMain removes it.
var binDir string

// built are the binaries, built once by binaries.
var built struct {
	once            sync.Once
	elector, worker string
	err             error
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "elector-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	return m.Run()
}

// binaries builds the elector (with the race detector when the test runs with it) and the
// worker once, and returns their paths. Only the tests that run processes pay for the build.
func binaries(t testing.TB) (elector, worker string) {
	t.Helper()
	built.once.Do(func() {
		built.elector = filepath.Join(binDir, "elector")
		built.worker = filepath.Join(binDir, "worker")
		if built.err = testbin.Build(built.elector, "../../cmd/elector", racebuild.Enabled); built.err != nil {
			return
		}
		built.err = testbin.Build(built.worker, "./worker", false)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.elector, built.worker
}
