// Command compat records what the server matrix (hack/compat.sh) ran and writes README.md's
// "Tested with" table from it.
//
//	go run ./hack/compat record -results FILE -key KEY -server NAME -version V -source TEXT JSON...
//	go run ./hack/compat readme -results FILE -readme README.md [-check]
//
// record reads the `go test -json` output of the suites run against one server and sets that
// server's row of the results file: for each mode (standalone, Sentinel, Cluster, TLS, ACL),
// "pass" when at least one test of the mode ran and passed and none failed, "fail" when one
// failed, "-" when none ran. A test's modes are what it started: internal/redistest logs
// "redistest: started MODE (SERVER VERSION)" for every standalone server, Sentinel set-up,
// Cluster and TLS server; the ACL mode is the tests named *ACL*. record fails (exit 1) when a
// test or package failed, when no test ran, or when a test ran against another server or
// version than the row names: so a row says what really ran.
//
// readme replaces the lines between the markers <!-- tested-with:begin --> and
// <!-- tested-with:end --> with the table of the results file; with -check it changes nothing
// and fails when the table there is not the generated one.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "compat: %v\n", err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a bad command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"want a subcommand: record, failures or readme"}
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	results := fs.String("results", "hack/compat/results.tsv", "the results `file`")
	switch args[0] {
	case "record":
		var r Row
		fs.StringVar(&r.Key, "key", "", "the row's `key` (e.g. redis-7.2.6)")
		fs.StringVar(&r.Server, "server", "", "the server's `name` as the tests report it: Redis or Valkey")
		fs.StringVar(&r.Version, "version", "", "the server's `version`, e.g. 7.2.6")
		fs.StringVar(&r.Source, "source", "", "where the binaries come from, for the table")
		if err := fs.Parse(args[1:]); err != nil {
			return usageError{err.Error()}
		}
		if r.Key == "" || r.Server == "" || r.Version == "" || r.Source == "" || fs.NArg() == 0 {
			return usageError{"record: -key, -server, -version, -source and at least one go test -json file are required"}
		}
		runs, err := parseFiles(fs.Args())
		if err != nil {
			return err
		}
		sum := Summarize(runs, r.Server, r.Version)
		fmt.Fprint(stdout, sum.Report(r))
		r.Modes = sum.Modes
		rows, err := ReadResults(*results)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := WriteResults(*results, SetRow(rows, r)); err != nil {
			return err
		}
		if len(sum.Problems) > 0 {
			return fmt.Errorf("%s %s: %d problem(s), the row says fail where they were", r.Server, r.Version, len(sum.Problems))
		}
		return nil
	case "failures":
		lines := fs.Int("lines", 6, "the most `lines` of each failed test's own output to print")
		if err := fs.Parse(args[1:]); err != nil {
			return usageError{err.Error()}
		}
		if fs.NArg() == 0 || *lines < 1 {
			return usageError{"failures: want -lines of at least 1 and at least one go test -json file"}
		}
		runs, err := parseFiles(fs.Args())
		if err != nil {
			return err
		}
		for _, tr := range runs {
			tr.Failures(stdout, *lines)
		}
		return nil
	case "readme":
		readme := fs.String("readme", "README.md", "the `file` with the table's markers")
		check := fs.Bool("check", false, "only check that the table is the generated one")
		if err := fs.Parse(args[1:]); err != nil {
			return usageError{err.Error()}
		}
		if fs.NArg() != 0 {
			return usageError{fmt.Sprintf("readme: unexpected arguments %q", fs.Args())}
		}
		rows, err := ReadResults(*results)
		if err != nil {
			return err
		}
		doc, err := os.ReadFile(*readme)
		if err != nil {
			return err
		}
		out, err := ReplaceTable(string(doc), Table(rows))
		if err != nil {
			return fmt.Errorf("%s: %w", *readme, err)
		}
		if out == string(doc) {
			return nil
		}
		if *check {
			return fmt.Errorf("%s: the tested-with table is not the one generated from %s; run: go run ./hack/compat readme", *readme, *results)
		}
		return os.WriteFile(*readme, []byte(out), 0o644)
	default:
		return usageError{fmt.Sprintf("unknown subcommand %q: want record, failures or readme", args[0])}
	}
}

// parseFiles reads `go test -json` files.
func parseFiles(names []string) ([]*TestRun, error) {
	var runs []*TestRun
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		tr, err := ParseTestJSON(f)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		runs = append(runs, tr)
	}
	return runs, nil
}
