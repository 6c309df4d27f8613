package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// updateDocs rewrites README.md's generated tables: go test ./cmd/elector -run TestREADMETables -update
var updateDocs = flag.Bool("update", false, "rewrite README.md's generated tables from the code")

// readmeCommands are the commands whose flags README.md's configuration table lists (the
// rest are in docs/CLI.md).
var readmeCommands = []string{"run", "sidecar", "status", "resign"}

// flagRow is one flag of the table: the commands that accept it and its default in each.
type flagRow struct {
	f        *pflag.Flag
	cmds     []string
	defaults map[string]string // command → default, as the flag set has it
}

// readmeFlagRows returns the visible flags of readmeCommands in their order of first
// appearance, each with the commands that take it.
func readmeFlagRows(t *testing.T) []*flagRow {
	t.Helper()
	var rows []*flagRow
	byName := map[string]*flagRow{}
	for _, name := range readmeCommands {
		testCommand(t, name).Flags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" {
				return
			}
			r := byName[f.Name]
			if r == nil {
				r = &flagRow{f: f, defaults: map[string]string{}}
				byName[f.Name] = r
				rows = append(rows, r)
			}
			r.cmds = append(r.cmds, name)
			r.defaults[name] = f.DefValue
		})
	}
	// The flags of every command first, then those of fewer, each group in the help's order.
	sort.SliceStable(rows, func(i, j int) bool { return len(rows[i].cmds) > len(rows[j].cmds) })
	return rows
}

// flagTable renders the configuration table: flag, commands, environment, default, meaning
// (the help's own text).
func flagTable(rows []*flagRow) string {
	var b strings.Builder
	b.WriteString("| flag | commands | environment | default | meaning |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		name := "`--" + r.f.Name + "`"
		if r.f.Shorthand != "" {
			name = "`-" + r.f.Shorthand + "`, " + name
		}
		if len(r.f.Name) == 1 {
			name = "`-" + r.f.Name + "`"
		}
		cmds := strings.Join(r.cmds, ", ")
		if len(r.cmds) == len(readmeCommands) {
			cmds = "all"
		}
		env := "`" + envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(r.f.Name, "-", "_")) + "`"
		usage := strings.ReplaceAll(r.f.Usage, "`", "")
		usage = strings.ReplaceAll(usage, "|", "\\|")
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", name, cmds, env, defaults(r), usage)
	}
	return b.String()
}

// defaults renders a flag's default: one value, or each command's when they differ.
func defaults(r *flagRow) string {
	show := func(v string) string {
		if v == "" || v == "[]" {
			return ""
		}
		return "`" + v + "`"
	}
	first, same := r.defaults[r.cmds[0]], true
	for _, c := range r.cmds {
		same = same && r.defaults[c] == first
	}
	if same {
		return show(first)
	}
	var parts []string
	for _, c := range r.cmds {
		v := show(r.defaults[c])
		if v == "" {
			v = "none"
		}
		parts = append(parts, c+" "+v)
	}
	return strings.Join(parts, ", ")
}

// exitCodeTable renders the exit codes of `elector help` as a table.
func exitCodeTable() string {
	var b strings.Builder
	b.WriteString("| code | meaning |\n|---|---|\n")
	re := regexp.MustCompile(`^  (\S+)  (.*)$`)
	for _, line := range strings.Split(exitCodesHelp, "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			fmt.Fprintf(&b, "| %s | %s", m[1], m[2])
			b.WriteString(" |\n")
		} else if strings.HasPrefix(line, "     ") { // a continuation line
			s := b.String()
			b.Reset()
			b.WriteString(strings.TrimSuffix(s, " |\n") + " " + strings.TrimSpace(line) + " |\n")
		}
	}
	return b.String()
}

// TestREADMETables keeps README.md's configuration and exit code tables what the code says
// (issue 28 item 9: the README once gave --kill-grace a default the binary did not have).
// Between each pair of markers the text is generated; -update rewrites it.
func TestREADMETables(t *testing.T) {
	const path = "../../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, gen := range []struct{ name, text string }{
		{"flags", flagTable(readmeFlagRows(t))},
		{"exit codes", exitCodeTable()},
	} {
		begin := "<!-- generated: " + gen.name + " (go test ./cmd/elector -run TestREADMETables -update) -->\n"
		end := "<!-- end generated: " + gen.name + " -->"
		i, j := strings.Index(doc, begin), strings.Index(doc, end)
		if i < 0 || j < i {
			t.Fatalf("README.md has no %q … %q markers", begin, end)
		}
		if doc[i+len(begin):j] == gen.text {
			continue
		}
		if !*updateDocs {
			t.Errorf("README.md's %s table differs from the code; run: go test ./cmd/elector -run TestREADMETables -update\nwant:\n%s", gen.name, gen.text)
			continue
		}
		doc = doc[:i+len(begin)] + gen.text + doc[j:]
	}
	if *updateDocs {
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDocsDefaults: every default docs/CLI.md's flag tables give as a plain value (`15s`) is
// the default of that flag in some command's flag set. Defaults computed at run time are
// written as words ("system roots") and not checked.
func TestDocsDefaults(t *testing.T) {
	b, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]map[string]bool{} // flag → defaults in any command
	c, _, _ := testCLI(nil)
	for _, cmd := range testRoot(c).Commands() {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if defaults[f.Name] == nil {
				defaults[f.Name] = map[string]bool{}
			}
			defaults[f.Name][f.DefValue] = true
		})
	}
	row := regexp.MustCompile("^\\| `--([a-z0-9-]+)`[^|]* \\| `[A-Z_]+` \\| `([^`]*)`(?: \\([^)]*\\))? \\|")
	checked := 0
	for _, line := range strings.Split(string(b), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		checked++
		if !defaults[m[1]][m[2]] {
			t.Errorf("docs/CLI.md gives --%s the default %q; the commands have %v", m[1], m[2], defaults[m[1]])
		}
	}
	if checked < 20 {
		t.Errorf("only %d flag rows with a default found in docs/CLI.md; has the table format changed?", checked)
	}
}

// TestDocsChildEnvironment: docs/CLI.md's table of the variables elector run gives its
// command lists those childEnv adds, in its order, and the README names each (issue 28 item
// 9: the environment a user reads of is the code's).
func TestDocsChildEnvironment(t *testing.T) {
	var want []string
	for _, kv := range childEnv(nil, 1, "i", "l") {
		name, _, _ := strings.Cut(kv, "=")
		want = append(want, name)
	}
	b, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "these variables added to its environment")
	if !ok {
		t.Fatal("docs/CLI.md no longer introduces the command's variables with \"these variables added to its environment\"")
	}
	var got []string
	row := regexp.MustCompile("^\\| `([A-Z_]+)` \\|")
	for _, line := range strings.Split(table, "\n")[1:] {
		if line != "" && !strings.HasPrefix(line, "|") {
			break
		}
		if m := row.FindStringSubmatch(line); m != nil {
			got = append(got, m[1])
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("docs/CLI.md lists the command's variables %v; elector run sets %v", got, want)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range want {
		if !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("README.md does not name %s, a variable elector run gives its command", name)
		}
	}
}
