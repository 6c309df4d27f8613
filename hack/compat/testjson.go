package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// TestRun is what one `go test -json` stream says.
type TestRun struct {
	// Tests maps "package TestName[/sub...]" to the test's outcome and what it started.
	Tests map[string]*Test
	// FailedPackages are packages that failed (including build failures and panics).
	FailedPackages []string
	// pkgOutput is each package's output outside its tests (a panic, a timeout's dump).
	pkgOutput map[string][]string
}

// Test is one test or subtest.
type Test struct {
	Package, Name string
	Action        string              // pass, fail or skip; "" when the stream ended first
	Started       map[started]bool    // what internal/redistest logged that it started
	children      map[string]struct{} // names of direct subtests
	output        []string            // the test's output lines
}

// started is one "redistest: started MODE (SERVER VERSION)" line.
type started struct{ mode, server, version string }

// startedRE matches the line internal/redistest logs for every set-up it starts.
var startedRE = regexp.MustCompile(`redistest: started (standalone|sentinel|cluster|tls) \((\S+) (\S+)\)`)

// ParseTestJSON reads a `go test -json` stream.
func ParseTestJSON(r io.Reader) (*TestRun, error) {
	tr := &TestRun{Tests: map[string]*Test{}, pkgOutput: map[string][]string{}}
	get := func(pkg, name string) *Test {
		k := pkg + " " + name
		t := tr.Tests[k]
		if t == nil {
			t = &Test{Package: pkg, Name: name, Started: map[started]bool{}, children: map[string]struct{}{}}
			tr.Tests[k] = t
			// The nearest test seen before whose name is a prefix up to a slash (a subtest's
			// own name may contain slashes).
			for i := strings.LastIndexByte(name, '/'); i > 0; i = strings.LastIndexByte(name[:i], '/') {
				if parent := tr.Tests[pkg+" "+name[:i]]; parent != nil {
					parent.children[name] = struct{}{}
					break
				}
			}
		}
		return t
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || !strings.HasPrefix(text, "{") {
			continue // go test prints a few plain lines (e.g. "FAIL" summaries) besides JSON
		}
		var ev event
		if err := json.Unmarshal([]byte(text), &ev); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		switch {
		case ev.Action == "build-fail":
			tr.FailedPackages = append(tr.FailedPackages, ev.Package+" (build)")
		case ev.Test == "":
			switch ev.Action {
			case "fail":
				tr.FailedPackages = append(tr.FailedPackages, ev.Package)
			case "output":
				tr.pkgOutput[ev.Package] = append(tr.pkgOutput[ev.Package], strings.TrimRight(ev.Output, "\n"))
			}
		case ev.Action == "run":
			get(ev.Package, ev.Test)
		case ev.Action == "output":
			t := get(ev.Package, ev.Test)
			if m := startedRE.FindStringSubmatch(ev.Output); m != nil {
				t.Started[started{m[1], m[2], m[3]}] = true
			}
			t.output = append(t.output, strings.TrimRight(ev.Output, "\n"))
		case ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip":
			get(ev.Package, ev.Test).Action = ev.Action
		}
	}
	return tr, sc.Err()
}

// modes returns the modes of t and its subtests.
func (tr *TestRun) modes(t *Test) map[string]bool {
	out := map[string]bool{}
	var walk func(t *Test)
	walk = func(t *Test) {
		for s := range t.Started {
			out[s.mode] = true
		}
		for c := range t.children {
			walk(tr.Tests[t.Package+" "+c])
		}
	}
	walk(t)
	if strings.Contains(t.Name, "ACL") {
		out["acl"] = true
	}
	return out
}

// Summary is the outcome of the runs against one server.
type Summary struct {
	Modes    map[string]string // mode -> Pass, Fail or NotRun
	Passed   map[string]int    // mode -> number of passed tests (subtests included) of that mode
	Counts   map[string]int    // action -> number of tests
	Problems []string          // failed tests and packages, tests against another server
}

// Summarize computes the modes that passed against server version.
func Summarize(runs []*TestRun, server, version string) Summary {
	s := Summary{Modes: map[string]string{}, Passed: map[string]int{}, Counts: map[string]int{}}
	for _, m := range Modes {
		s.Modes[m] = NotRun
	}
	fail := func(mode, problem string) {
		s.Modes[mode] = Fail
		s.Problems = append(s.Problems, problem)
	}
	for _, tr := range runs {
		keys := make([]string, 0, len(tr.Tests))
		for k := range tr.Tests {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		failedPkgs := map[string]bool{}
		for _, p := range tr.FailedPackages {
			failedPkgs[p] = true
			s.Problems = append(s.Problems, "package "+p+" failed")
		}
		for _, k := range keys {
			t := tr.Tests[k]
			action := t.Action
			if action == "" {
				action = "fail" // the stream ended (timeout, panic) before the test did
			}
			s.Counts[action]++
			for st := range t.Started {
				if st.server != server || st.version != version {
					fail(st.mode, fmt.Sprintf("%s %s ran against %s %s, want %s %s", t.Package, t.Name, st.server, st.version, server, version))
				}
			}
			modes := tr.modes(t)
			switch action {
			case "pass":
				for m := range modes {
					s.Passed[m]++
					if s.Modes[m] == NotRun {
						s.Modes[m] = Pass
					}
				}
			case "fail":
				if len(modes) == 0 {
					modes["standalone"] = true // a test that started nothing itself: count it as a plain one
				}
				names := make([]string, 0, len(modes))
				for m := range modes {
					names = append(names, m)
				}
				slices.Sort(names)
				for _, m := range names {
					s.Modes[m] = Fail
				}
				s.Problems = append(s.Problems, fmt.Sprintf("%s %s failed (%s)", t.Package, t.Name, strings.Join(names, ", ")))
			}
		}
		// A package that failed without a failing test (a panic outside tests, a build
		// failure) fails every mode its tests touched, or standalone when none. A failing test
		// already failed its own modes.
		for p := range failedPkgs {
			pkg := strings.TrimSuffix(p, " (build)")
			failedTest := false
			for _, t := range tr.Tests {
				failedTest = failedTest || (t.Package == pkg && t.Action != "pass" && t.Action != "skip")
			}
			if failedTest {
				continue
			}
			touched := false
			for _, t := range tr.Tests {
				if t.Package == pkg {
					for m := range tr.modes(t) {
						s.Modes[m], touched = Fail, true
					}
				}
			}
			if !touched {
				s.Modes["standalone"] = Fail
			}
		}
	}
	if s.Counts["pass"] == 0 {
		s.Problems = append(s.Problems, "no test passed")
	}
	return s
}

// Report is the summary as text for the log of hack/compat.sh.
func (s Summary) Report(r Row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s (%s): %d tests passed, %d failed, %d skipped\n",
		r.Server, r.Version, r.Key, s.Counts["pass"], s.Counts["fail"], s.Counts["skip"])
	for _, m := range Modes {
		fmt.Fprintf(&b, "  %-10s %-4s (%d tests)\n", m, s.Modes[m], s.Passed[m])
	}
	for _, p := range s.Problems {
		fmt.Fprintf(&b, "  problem: %s\n", p)
	}
	return b.String()
}

// testFileLineRE matches a line a test wrote with t.Error, t.Fatal or t.Log (go test indents
// it and names the test file and line).
var testFileLineRE = regexp.MustCompile(`^\s+\S+_test\.go:\d+: `)

// Failures writes a digest of what failed, for a CI log of which only the end may be shown: for
// each failed test without a failed subtest, its last perTest lines written by the test
// itself (file_test.go:N:, so not the logs of the code under test, which a failing test may
// print by the thousand) after its "--- FAIL" line, as go test prints them; for a failed package without a failed test
// (a panic, a timeout, a build failure), its last perTest lines of output.
func (tr *TestRun) Failures(w io.Writer, perTest int) {
	keys := make([]string, 0, len(tr.Tests))
	for k, t := range tr.Tests {
		if t.Action == "fail" || t.Action == "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	failedTest := map[string]bool{}
	for _, k := range keys {
		t := tr.Tests[k]
		failedTest[t.Package] = true
		leaf := true
		for c := range t.children {
			if a := tr.Tests[t.Package+" "+c].Action; a == "fail" || a == "" {
				leaf = false
			}
		}
		if !leaf {
			continue
		}
		var lines []string
		for _, l := range t.output {
			if testFileLineRE.MatchString(l) {
				lines = append(lines, l)
			}
		}
		state := "FAIL"
		if t.Action == "" {
			state = "FAIL (unfinished: the package panicked or timed out)"
		}
		fmt.Fprintf(w, "--- %s: %s (%s)\n", state, t.Name, t.Package)
		for _, l := range lines[max(0, len(lines)-perTest):] {
			fmt.Fprintln(w, l)
		}
	}
	for _, p := range tr.FailedPackages {
		if failedTest[strings.TrimSuffix(p, " (build)")] {
			continue
		}
		fmt.Fprintf(w, "FAIL package %s\n", p)
		out := tr.pkgOutput[strings.TrimSuffix(p, " (build)")]
		for _, l := range out[max(0, len(out)-perTest):] {
			fmt.Fprintln(w, l)
		}
	}
}
