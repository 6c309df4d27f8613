package chaos

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
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
		if built.err = build(built.elector, "../../cmd/elector", raceEnabled); built.err != nil {
			return
		}
		built.err = build(built.worker, "./worker", false)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.elector, built.worker
}

// build compiles the package at pkg (relative to this directory) into out. It is the same
// few lines as test/e2e's build, which is not importable (a _test.go file of another package).
func build(out, pkg string, race bool) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command(goBin, append(args, pkg)...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, stderr.String())
	}
	return nil
}
