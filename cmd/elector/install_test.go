package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstallFile(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "bin", "elector")
	if err := os.Mkdir(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, []byte("an older, longer binary that must be replaced entirely"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := installFile(src, dst); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(dst)
	if string(b) != "#!/bin/sh\necho hi\n" {
		t.Errorf("installed %q", b)
	}
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", st.Mode().Perm())
	}
	if entries, _ := os.ReadDir(filepath.Dir(dst)); len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
	if err := installFile(filepath.Join(dir, "missing"), dst); err == nil {
		t.Error("installing a missing source succeeded")
	}
	for _, to := range []string{filepath.Join(dir, "missing", "elector"), filepath.Join(dir, "missing") + "/"} {
		err := installFile(src, to)
		if err == nil {
			t.Fatalf("installing to %s (a missing directory) succeeded", to)
		}
		// The message names the missing directory, not a temporary file of ours.
		if msg := err.Error(); !strings.Contains(msg, "does not exist") || strings.Contains(msg, ".tmp-") {
			t.Errorf("installing to %s: %q, want the missing directory named", to, msg)
		}
	}
}
