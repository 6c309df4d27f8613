package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/election"
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
	state := func() election.Status {
		if !leading.Load() {
			return election.Status{}
		}
		now := time.Now()
		return election.Status{IsLeader: true, LastRenew: &now}
	}
	s := newStatusFile(filepath.Join(dir, "status"), state, leaseOptions{leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second})
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
		if got := strings.HasPrefix(string(b), "leader\n"); got != want {
			t.Errorf("status file %q after sync with leading=%v", b, want)
		}
	}
	var nilFile *statusFile
	nilFile.sync() // no file configured: nothing happens
	nilFile.withhold()
}

// TestStatusFileContent: a leader's file says until when it may be trusted, the send time of
// its last renew plus the renew deadline minus the drift margin, on the wall clock; the
// documented reader's check (docs/CLI.md), run by sh, says leader before that instant only.
func TestStatusFileContent(t *testing.T) {
	lo := leaseOptions{leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second}
	path := filepath.Join(t.TempDir(), "status")
	renew := time.Now()
	var st election.Status
	s := newStatusFile(path, func() election.Status { return st }, lo)
	check := func() bool {
		err := exec.Command("sh", "-c", strings.ReplaceAll(statusCheck, "/var/run/elector/status", path)).Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return err == nil
	}

	s.sync()
	if b, _ := os.ReadFile(path); string(b) != "follower\n" || check() {
		t.Errorf("follower: file %q, check %v", b, check())
	}
	st = election.Status{IsLeader: true, LastRenew: &renew}
	s.sync()
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	want := renew.Add(lo.renewDeadline - timing.DriftMargin(lo.leaseDuration))
	if len(lines) != 3 || lines[0] != "leader" || lines[1] != fmt.Sprintf("until_unix=%d", want.Unix()) {
		t.Fatalf("leader: file %q, want leader, until_unix=%d, until=...", b, want.Unix())
	}
	until, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(lines[2], "until="))
	// The deadline is mapped to the wall clock when the file is written (the wall clock's
	// reading then, plus the monotonic time left): within a millisecond of the renew's own.
	if d := until.Sub(want.Round(0)); err != nil || d > time.Millisecond || d < -time.Millisecond {
		t.Errorf("until %v (%v); want %v", until, err, want.Round(0))
	}
	if !check() {
		t.Errorf("the reader's check says not leader for %q at %v", b, time.Now())
	}
	// A renew sent long ago: the deadline has passed, the file must not say leader.
	old := renew.Add(-lo.renewDeadline)
	st.LastRenew = &old
	s.sync()
	if b, _ := os.ReadFile(path); string(b) != "follower\n" || check() {
		t.Errorf("leader past its deadline: file %q", b)
	}
	// The check compares until_unix with date +%s: a file whose deadline has passed is not
	// a leader's, whatever its first line.
	stale := fmt.Sprintf("leader\nuntil_unix=%d\nuntil=x\n", time.Now().Unix())
	if err := os.WriteFile(path, []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	if check() {
		t.Errorf("the reader's check says leader for a deadline that has passed: %q", stale)
	}
}

// statusCheck is the reader's check that docs/CLI.md documents; TestStatusFileContent runs
// it, TestStatusCheckDocumented finds it in the docs.
const statusCheck = `{ read -r s; read -r u; } < /var/run/elector/status && [ "$s" = leader ] && [ "$(date +%s)" -lt "${u#until_unix=}" ]`

// TestStatusCheckDocumented: the documents that tell a reader how to use the status file
// show statusCheck, the check that TestStatusFileContent runs.
func TestStatusCheckDocumented(t *testing.T) {
	for _, doc := range []string{"../../docs/CLI.md", "../../docs/KUBERNETES.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), statusCheck) {
			t.Errorf("%s does not show the status file's check:\n%s", doc, statusCheck)
		}
	}
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
