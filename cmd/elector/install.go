package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/elector/elector/cmd/elector/internal/version"
)

// newVersionCmd returns `elector version`.
func (c *cli) newVersionCmd() *cobra.Command {
	return c.newCommand("version", "print the version, commit and Go version",
		"Print the version, commit, build date, Go version and platform of this binary; a field the\nbuild did not record (e.g. -buildvcs=false) prints as unknown.",
		func(_ context.Context, _ *cobra.Command, args []string) int {
			if len(args) > 0 {
				return c.usageError("elector version", fmt.Errorf("unexpected argument %q: elector version takes no arguments", args[0]))
			}
			fmt.Fprintln(c.stdout, version.String())
			return exitOK
		})
}

// newInstallCmd returns `elector install PATH`.
func (c *cli) newInstallCmd() *cobra.Command {
	return c.newCommand("install PATH", "copy this executable to PATH with mode 0755 (for init containers)",
		"Copy this executable to PATH (into PATH/elector if PATH is a directory) with mode 0755,\natomically (a temporary file renamed over PATH). For init containers of images without cp.",
		func(_ context.Context, _ *cobra.Command, args []string) int { return c.install(args) })
}

// install is `elector install PATH` once cobra parsed its flags.
func (c *cli) install(args []string) int {
	const who = "elector install"
	switch len(args) {
	case 0:
		return c.usageError(who, fmt.Errorf("PATH: missing; want elector install PATH"))
	case 1:
	default:
		return c.usageError(who, fmt.Errorf("unexpected argument %q: elector install takes one PATH", args[1]))
	}
	dst := args[0]
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
