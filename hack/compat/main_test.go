package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// README.md's "Tested with" table is the one generated from the committed results of the last
// `make compat` (hack/compat.sh rewrites both; this keeps a hand edit of either from going in).
func TestReadmeTableIsGenerated(t *testing.T) {
	rows, err := ReadResults("results.tsv")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("results.tsv has no rows")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := ReplaceTable(string(doc), Table(rows))
	if err != nil {
		t.Fatal(err)
	}
	if want != string(doc) {
		t.Errorf("README.md's tested-with table is not generated from hack/compat/results.tsv; run `go run ./hack/compat readme` (or make compat). Want:\n%s", Table(rows))
	}
}

// stream is a `go test -json` stream of two packages: lines are Action, Test, Output.
func stream(pkg string, lines ...[3]string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(`{"Action":"` + l[0] + `","Package":"` + pkg + `"`)
		if l[1] != "" {
			b.WriteString(`,"Test":"` + l[1] + `"`)
		}
		if l[2] != "" {
			b.WriteString(`,"Output":"` + l[2] + `\n"`)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

func parse(t *testing.T, s string) *TestRun {
	t.Helper()
	tr, err := ParseTestJSON(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestSummarize(t *testing.T) {
	ok := parse(t, stream("p",
		[3]string{"run", "TestPlain", ""},
		[3]string{"output", "TestPlain", "    x_test.go:1: redistest: started standalone (Valkey 8.0.1) on 127.0.0.1:1"},
		[3]string{"pass", "TestPlain", ""},
		[3]string{"run", "TestACLModes", ""},
		[3]string{"run", "TestACLModes/cluster", ""},
		[3]string{"output", "TestACLModes/cluster", "    redistest: started cluster (Valkey 8.0.1) on 127.0.0.1:2"},
		[3]string{"pass", "TestACLModes/cluster", ""},
		[3]string{"pass", "TestACLModes", ""},
		[3]string{"run", "TestUnit", ""},
		[3]string{"pass", "TestUnit", ""},
		[3]string{"run", "TestSkipped", ""},
		[3]string{"skip", "TestSkipped", ""},
		[3]string{"pass", "", ""},
	))
	s := Summarize([]*TestRun{ok}, "Valkey", "8.0.1")
	want := map[string]string{"standalone": Pass, "sentinel": NotRun, "cluster": Pass, "tls": NotRun, "acl": Pass}
	for m, w := range want {
		if s.Modes[m] != w {
			t.Errorf("mode %s = %s, want %s", m, s.Modes[m], w)
		}
	}
	if len(s.Problems) != 0 || s.Counts["pass"] != 4 || s.Counts["skip"] != 1 {
		t.Errorf("problems %q, counts %v", s.Problems, s.Counts)
	}

	// Another server than the row's, a failed subtest (its parent fails too) and a package
	// that ended without a result.
	bad := parse(t, stream("q",
		[3]string{"run", "TestOther", ""},
		[3]string{"output", "TestOther", "    redistest: started tls (Redis 7.0.15) on 127.0.0.1:3"},
		[3]string{"pass", "TestOther", ""},
		[3]string{"run", "TestSentinelX", ""},
		[3]string{"run", "TestSentinelX/a=1/b=2", ""},
		[3]string{"output", "TestSentinelX/a=1/b=2", "    redistest: started sentinel (Valkey 8.0.1) on 127.0.0.1:4"},
		[3]string{"fail", "TestSentinelX/a=1/b=2", ""},
		[3]string{"fail", "TestSentinelX", ""},
		[3]string{"run", "TestHung", ""},
		[3]string{"fail", "", ""},
	))
	s = Summarize([]*TestRun{ok, bad}, "Valkey", "8.0.1")
	for m, w := range map[string]string{"tls": Fail, "sentinel": Fail, "standalone": Fail, "cluster": Pass} {
		if s.Modes[m] != w {
			t.Errorf("with failures: mode %s = %s, want %s (problems %q)", m, s.Modes[m], w, s.Problems)
		}
	}
	joined := strings.Join(s.Problems, "\n")
	for _, p := range []string{"q TestOther ran against Redis 7.0.15, want Valkey 8.0.1", "q TestSentinelX/a=1/b=2 failed (sentinel)",
		"q TestSentinelX failed (sentinel)",
		"q TestHung failed (standalone)", "package q failed"} {
		if !strings.Contains(joined, p) {
			t.Errorf("problems lack %q:\n%s", p, joined)
		}
	}

	// A package that failed with its tests passing (a panic after them) fails their modes;
	// one whose test failed fails only that test's modes.
	late := parse(t, stream("r",
		[3]string{"run", "TestTLSOnly", ""},
		[3]string{"output", "TestTLSOnly", "    redistest: started tls (Valkey 8.0.1) on 127.0.0.1:5"},
		[3]string{"pass", "TestTLSOnly", ""},
		[3]string{"fail", "", ""},
	))
	if s := Summarize([]*TestRun{ok, late}, "Valkey", "8.0.1"); s.Modes["tls"] != Fail || s.Modes["cluster"] != Pass {
		t.Errorf("a package failing after its TLS test passed: modes %v", s.Modes)
	}

	if s := Summarize([]*TestRun{parse(t, "")}, "Redis", "7.2.6"); len(s.Problems) == 0 {
		t.Error("an empty run has no problem")
	}
}

func TestResultsRoundTripAndTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.tsv")
	r1 := Row{Key: "a", Server: "Redis", Version: "7.2.6", Source: "src", Modes: map[string]string{"standalone": Pass, "acl": Fail}}
	r2 := Row{Key: "b", Server: "Valkey", Version: "8.0.1", Source: "src", Modes: map[string]string{"standalone": Pass}}
	rows := SetRow(SetRow(nil, r1), r2)
	r1.Version = "7.2.7"
	rows = SetRow(rows, r1)
	if err := WriteResults(path, rows); err != nil {
		t.Fatal(err)
	}
	got, err := ReadResults(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Version != "7.2.7" || got[0].Modes["acl"] != Fail || got[1].Modes["tls"] != NotRun {
		t.Fatalf("read back %+v", got)
	}
	table := Table(got)
	if !strings.Contains(table, "| Redis | 7.2.7 | src | ✓ | not run | not run | not run | ✗ failed |") {
		t.Errorf("table:\n%s", table)
	}
	doc := "a\n" + BeginMarker + "\nold\n" + EndMarker + "\nb\n"
	out, err := ReplaceTable(doc, table)
	if err != nil || out != "a\n"+BeginMarker+"\n"+table+EndMarker+"\nb\n" {
		t.Errorf("ReplaceTable = %q, %v", out, err)
	}
	if _, err := ReplaceTable("no markers", table); err == nil {
		t.Error("ReplaceTable without markers succeeded")
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"nope"}, {"record"}, {"readme", "extra"}} {
		var out, errOut strings.Builder
		err := run(args, &out, &errOut)
		if _, ok := err.(usageError); !ok {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
}

// The digest shows what a failing test itself wrote and its name, not the thousands of log
// lines of the code under test (a soak's intentional panics drowned the failure of CI stop 35
// in them), nor a parent whose subtest failed, nor the output of passing tests.
func TestFailures(t *testing.T) {
	var lines [][3]string
	lines = append(lines,
		[3]string{"run", "TestSoak", ""},
		[3]string{"run", "TestClock", ""},
		[3]string{"run", "TestClock/offset=2s", ""},
		[3]string{"output", "TestClock/offset=2s", "    clock_test.go:128: the replica's TIME is 2s ahead"},
		[3]string{"output", "TestClock/offset=2s", "    clock_test.go:239: the lease ended 2.04s early, want 2s"},
	)
	for i := 0; i < 50; i++ {
		lines = append(lines, [3]string{"output", "TestSoak", `E1203 group_run.go:299] User callback panicked, err=panic: soak`})
	}
	lines = append(lines,
		[3]string{"output", "TestSoak", "    group_soak_test.go:47: seed 1"},
		[3]string{"pass", "TestSoak", ""},
		[3]string{"output", "TestClock/offset=2s", "--- FAIL: TestClock/offset=2s (15.66s)"},
		[3]string{"fail", "TestClock/offset=2s", ""},
		[3]string{"fail", "TestClock", ""},
		[3]string{"fail", "", ""},
	)
	var b strings.Builder
	parse(t, stream("p", lines...)).Failures(&b, 1)
	want := "--- FAIL: TestClock/offset=2s (p)\n    clock_test.go:239: the lease ended 2.04s early, want 2s\n"
	if b.String() != want {
		t.Errorf("Failures wrote\n%s\nwant\n%s", b.String(), want)
	}

	// A package that panicked outside a test: its last lines.
	b.Reset()
	parse(t, stream("q",
		[3]string{"output", "", "panic: boom"},
		[3]string{"output", "", "goroutine 1 [running]:"},
		[3]string{"fail", "", ""},
	)).Failures(&b, 1)
	if want := "FAIL package q\ngoroutine 1 [running]:\n"; b.String() != want {
		t.Errorf("Failures wrote\n%s\nwant\n%s", b.String(), want)
	}
}
