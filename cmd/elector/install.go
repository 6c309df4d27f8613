package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/elector/elector/cmd/elector/internal/version"
)

// versionCmd is `elector version`.
func (c *cli) versionCmd(_ context.Context, args []string) int {
	cmd, _ := findCommand("version")
	fs := newFlagSet(cmd)
	if code, done := c.parseArgs(fs, args); done {
		return code
	}
	if fs.all.NArg() > 0 {
		return c.usageError("elector version", fmt.Errorf("unexpected argument %q: elector version takes no arguments", fs.all.Arg(0)))
	}
	fmt.Fprintln(c.stdout, version.String())
	return exitOK
}

// installCmd is `elector install PATH`.
func (c *cli) installCmd(_ context.Context, args []string) int {
	cmd, _ := findCommand("install")
	const who = "elector install"
	fs := newFlagSet(cmd)
	if code, done := c.parseArgs(fs, args); done {
		return code
	}
	switch fs.all.NArg() {
	case 0:
		return c.usageError(who, fmt.Errorf("PATH: missing; want elector install PATH"))
	case 1:
	default:
		return c.usageError(who, fmt.Errorf("unexpected argument %q: elector install takes one PATH", fs.all.Arg(1)))
	}
	dst := fs.all.Arg(0)
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		dst = filepath.Join(dst, "elector")
	}
	src, err := c.executable()
	if err != nil {
		return c.runtimeError(who, fmt.Errorf("find the running executable: %w", err))
	}
	if err := installFile(src, dst); err != nil {
		return c.runtimeError(who, err)
	}
	fmt.Fprintf(c.stdout, "installed %s\n", dst)
	return exitOK
}

// installFile copies src to dst with mode 0755 atomically: into a temporary file in dst's
// directory, synced, then renamed over dst, so that dst is never a partial executable.
func installFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer in.Close()
	dir, base := filepath.Split(dst)
	if dir == "" {
		dir = "."
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("install %s: directory %s does not exist or is not a directory: create it first, or give an existing directory or a file path in one", dst, dir)
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // fails harmlessly after the rename
	_, err = io.Copy(tmp, in)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	return nil
}
