package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/testing/racebuild"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/internal/testing/testbin"
	"github.com/elector/elector/pkg/lease"
)

// snippetMain is the program around README.md's library snippet: the snippet is main's body,
// with the ctx of a signal handler, and reconcile says when it starts and stops.
const snippetMain = `package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/pkg/election"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
SNIPPET
}

func reconcile(ctx context.Context, token int64) {
	fmt.Printf("leading with token %d\n", token)
	<-ctx.Done()
	fmt.Println("stopped leading")
}

// The snippet's imports, used here too, so that the program builds whichever of them the
// snippet happens to use: the test is about its behaviour.
var _, _, _ = redis.Nil, klog.InfoS, election.ErrNotLeader
`

// TestREADMELibrarySnippet builds README.md's library snippet as written (only its Redis
// address is the test's) and runs two copies: `elector resign` of each in turn hands the
// leadership over, and neither copy exits, since a planned switchover is no crash (issue 28
// item 2: built as written, the resigned copy exited 1). SIGTERM then ends each with 0.
func TestREADMELibrarySnippet(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "**The library.**")
	if !ok {
		t.Fatal(`README.md has no "**The library.**" section`)
	}
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(rest)
	if m == nil {
		t.Fatal("README.md's library section has no Go snippet")
	}
	snippet := m[1]
	name := regexp.MustCompile(`LeaseName:\s+"([^"]+)"`).FindStringSubmatch(snippet)
	if name == nil || !strings.Contains(snippet, `"redis:6379"`) {
		t.Fatalf("README.md's snippet has no LeaseName or no \"redis:6379\" address to replace:\n%s", snippet)
	}
	srv := redistest.Start(t)
	admin := srv.Client(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	program := strings.Replace(snippetMain, "SNIPPET", strings.ReplaceAll(snippet, `"redis:6379"`, `"`+srv.Addr()+`"`), 1)
	if err := os.WriteFile(src, []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "snippet")
	if err := testbin.Build(bin, src, racebuild.Enabled); err != nil {
		t.Fatalf("README.md's library snippet does not build: %v", err)
	}

	copies := map[string]*proc{}
	for _, id := range []string{"a", "b"} {
		copies[id] = startProgram(t, "snippet "+id, bin, []string{"POD_NAME=" + id})
		if id == "a" {
			waitFor(t, 10*time.Second, "a to lead", func() bool { return strings.Contains(copies["a"].stdout.String(), "leading") })
		}
	}
	alive := func() {
		for id, p := range copies {
			if !p.running() {
				t.Fatalf("copy %s of the README's snippet exited with %d after a resign; stderr:\n%s", id, p.wait(0), p.stderr.String())
			}
		}
	}
	events := leasewire.KeysFor(lease.DefaultPrefix, name[1]).Events
	for _, to := range []string{"b", "a"} {
		waitFor(t, 20*time.Second, "the other copy to follow the lease", func() bool {
			alive()
			m, err := admin.PubSubNumSub(t.Context(), events).Result()
			return err == nil && m[events] >= 1
		})
		code, out, stderr := resignCLI(t, srv.Addr(), name[1], 30*time.Second, "--to", to)
		if code != 0 || out.Holder != to {
			alive()
			t.Fatalf("elector resign --to %s: exit %d, %+v; stderr:\n%s", to, code, out, stderr)
		}
	}
	alive()
	for id, p := range copies {
		p.signal(syscall.SIGTERM)
		if code := p.wait(20 * time.Second); code != 0 {
			t.Errorf("copy %s exited %d on SIGTERM, want 0; stderr:\n%s", id, code, p.stderr.String())
		}
	}
}
