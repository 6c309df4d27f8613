package main

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "status")
	for _, content := range []string{"follower\n", "leader\n"} {
		if err := writeFileAtomic(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != content {
			t.Errorf("content %q, %v; want %q", b, err, content)
		}
		st, _ := os.Stat(path)
		if st.Mode().Perm() != 0o644 {
			t.Errorf("mode %v, want 0644", st.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
	if err := writeFileAtomic(filepath.Join(dir, "missing", "status"), nil, 0o644); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}

// TestStatusFileLastWriteWins races updates against state changes: whatever the order, the
// file ends up with the state at the last update.
func TestStatusFileLastWriteWins(t *testing.T) {
	dir := t.TempDir()
	var leading atomic.Bool
	s := &statusFile{path: filepath.Join(dir, "status"), isLeader: leading.Load}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leading.Store(i%2 == 0)
			s.sync()
		}()
	}
	wg.Wait()
	for _, want := range []bool{true, false} {
		leading.Store(want)
		s.sync()
		b, _ := os.ReadFile(s.path)
		if got := string(b) == "leader\n"; got != want {
			t.Errorf("status file %q after sync with leading=%v", b, want)
		}
	}
	var nilFile *statusFile
	nilFile.sync() // no file configured: nothing happens
}

func TestServeOptionsValidate(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		o  serveOptions
		ok bool
	}{
		{serveOptions{}, true},
		{serveOptions{httpAddr: ":8080", statusFile: filepath.Join(dir, "status")}, true},
		{serveOptions{statusFile: filepath.Join(dir, "missing", "status")}, false},
		{serveOptions{statusFile: dir}, false},
		{serveOptions{httpAddr: "8080"}, false},
	} {
		if err := tc.o.validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.o, err)
		}
	}
}
