// Package testbin builds the programs that end-to-end tests run as separate processes.
//
// It owns the build of those binaries into a test's temporary directory. It must not be
// imported by non-test code.
package testbin

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Build compiles the package at pkg (a path relative to the current directory, as go build
// takes it) into out, with the race detector when race is set. The error carries go build's
// output.
func Build(out, pkg string, race bool) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command(goBin, append(args, pkg)...)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, output.String())
	}
	return nil
}
