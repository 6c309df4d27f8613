package leasewire_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/pkg/lease"
)

// TestKeysMatchProtocol checks KeysFor against the key table of docs/PROTOCOL.md: every
// PREFIX:{NAME}:… row is a field of Keys, and every field a row.
func TestKeysMatchProtocol(t *testing.T) {
	doc, err := os.ReadFile("../../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(PREFIX:\\{NAME\\}:[a-z-]+)` \\|").FindAllSubmatch(doc, -1) {
		rows = append(rows, string(m[1]))
	}
	k := leasewire.KeysFor("PREFIX", "NAME")
	var fields []string // every string field of Keys, so that a new key needs its row
	v := reflect.ValueOf(k)
	for i := range v.NumField() {
		if f := v.Field(i); v.Type().Field(i).IsExported() && f.Kind() == reflect.String {
			fields = append(fields, f.String())
		}
	}
	sort.Strings(rows)
	sort.Strings(fields)
	if strings.Join(rows, " ") != strings.Join(fields, " ") {
		t.Errorf("docs/PROTOCOL.md names the keys\n  %q\nKeysFor(\"PREFIX\", \"NAME\") gives\n  %q", rows, fields)
	}
	if got, want := leasewire.EventsPattern("PREFIX"), "PREFIX:{*}:events"; got != want {
		t.Errorf("EventsPattern = %q, want %q", got, want)
	}
	if got, want := k.Other("fence"), "PREFIX:{NAME}:fence"; got != want {
		t.Errorf("Other(fence) = %q, want %q", got, want)
	}
	if got, want := leasewire.KeysFor(lease.DefaultPrefix, "job").Lease, "elector:{job}:lease"; got != want {
		t.Errorf("KeysFor with the default prefix: Lease = %q, want %q", got, want)
	}
}

// TestKeysHaveOneOwner fails when Go code of the repository outside internal/leasewire/keys.go builds a
// PREFIX:{NAME}:… name by hand, instead of asking KeysFor (tests excepted: they spell out the
// names they expect).
func TestKeysHaveOneOwner(t *testing.T) {
	handmade := regexp.MustCompile(`":\{"|"\}:"|"\{\*\}:|":(lease|token|terms|events|members)"`)
	allowed := map[string]string{
		"internal/leasewire/keys.go": "the owner",
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if _, ok := allowed[filepath.ToSlash(rel)]; ok {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if handmade.MatchString(line) {
				t.Errorf("%s:%d builds a lease key by hand, use leasewire.KeysFor: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"job", "my-controller.kube-system", "tenant/42", "ünïcode"} {
		if err := leasewire.ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a{", "}", "a b", "a\tb", "a\x00", "\xff"} {
		if err := leasewire.ValidateName(bad); err == nil {
			t.Errorf("ValidateName(%q) succeeded", bad)
		}
	}
}

// TestKeysForNames checks every name KeysFor builds in its one buffer against the plain
// concatenation PREFIX:{NAME}:suffix, and that it costs one allocation.
func TestKeysForNames(t *testing.T) {
	for _, c := range [][2]string{{"elector", "job"}, {"p", "tenant-0000001"}, {"a:b", "x{y}"}, {"jobs?", ""}} {
		prefix, name := c[0], c[1]
		k := leasewire.KeysFor(prefix, name)
		base := prefix + ":{" + name + "}:"
		got := []string{k.Lease, k.Token, k.Terms, k.Events, k.Resign, k.Members, k.Done, k.Schedule, k.Runs, k.Candidates, k.Other("fence")}
		want := []string{"lease", "token", "terms", "events", "resign", "members", "done", "schedule", "runs", "candidates", "fence"}
		for i := range want {
			if got[i] != base+want[i] {
				t.Errorf("KeysFor(%q, %q): key %d = %q, want %q", prefix, name, i, got[i], base+want[i])
			}
		}
		if got := leasewire.LeaseKey(prefix, name); got != k.Lease {
			t.Errorf("LeaseKey(%q, %q) = %q, want KeysFor's %q", prefix, name, got, k.Lease)
		}
		if got := leasewire.EventsChannel(prefix, name); got != k.Events {
			t.Errorf("EventsChannel(%q, %q) = %q, want KeysFor's %q", prefix, name, got, k.Events)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = leasewire.KeysFor("elector", "tenant-0000001") }); n != 1 {
		t.Errorf("KeysFor allocates %v times, want 1", n)
	}
}

// TestLeaseSlot checks LeaseSlot against the CRC16 check value of the Redis Cluster
// specification (CRC16("123456789") = 0x31C3) and slots Redis's CLUSTER KEYSLOT gives; the
// leasekit Cluster test compares it with a real Cluster for many names.
func TestLeaseSlot(t *testing.T) {
	for name, want := range map[string]int{"123456789": 0x31C3, "foo": 12182, "bar": 5061, "hello": 866} {
		if got := leasewire.LeaseSlot(name); got != want {
			t.Errorf("LeaseSlot(%q) = %d, want %d", name, got, want)
		}
	}
}

// BenchmarkLeaseSlot: a Group on a Cluster computes the slot of each lease it holds in every
// renew batch (leasekit.Batch.RenewMany's check).
func BenchmarkLeaseSlot(b *testing.B) {
	names := make([]string, 1024)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%07d", i)
	}
	n := 0
	for i := 0; b.Loop(); i++ {
		n += leasewire.LeaseSlot(names[i%len(names)])
	}
	_ = n
}
