package main

import (
	"os"
	"path/filepath"
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
	if err := installFile(src, filepath.Join(dir, "missing", "elector")); err == nil {
		t.Error("installing into a missing directory succeeded")
	}
}
