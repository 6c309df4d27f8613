package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"
)

// repoRoot is the repository, relative to this package.
const repoRoot = "../.."

// documentedFiles are the Markdown files whose helm commands must work.
var documentedFiles = []string{
	"README.md",
	"docs/KUBERNETES.md",
	"charts/elector/README.md",
	"examples/kubernetes/README.md",
}

// docValuesDir holds stand-ins for the values files that the documentation
// names but that are the user's own (my-values.yaml).
const docValuesDir = "testdata/docs"

// docCommand is one helm command line found in a Markdown file.
type docCommand struct {
	file string
	line int
	text string
	args []string // the words after "helm"
}

// helmCommands extracts every helm command from the shell code blocks of a
// Markdown file: continuation lines are joined, comments and redirections
// dropped, and the line split into words as a POSIX shell would.
func helmCommands(t *testing.T, file string) []docCommand {
	t.Helper()
	lines := strings.Split(readFile(t, filepath.Join(repoRoot, file)), "\n")
	var out []docCommand
	inShell := false
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			if inShell {
				inShell = false
			} else {
				lang := strings.TrimPrefix(trimmed, "```")
				inShell = lang == "sh" || lang == "bash" || lang == "shell" || lang == "console"
			}
			continue
		}
		if !inShell {
			continue
		}
		start := i
		full := trimmed
		for strings.HasSuffix(full, `\`) && i+1 < len(lines) {
			i++
			full = strings.TrimSuffix(full, `\`) + " " + strings.TrimSpace(lines[i])
		}
		full = strings.TrimPrefix(full, "$ ")
		words, err := shellWords(full)
		if err != nil {
			t.Errorf("%s:%d: %v: %s", file, start+1, err, full)
			continue
		}
		if len(words) == 0 || words[0] != "helm" {
			continue
		}
		out = append(out, docCommand{file: file, line: start + 1, text: full, args: words[1:]})
	}
	return out
}

// shellWords splits a command line into words: quotes, backslash escapes, a
// trailing "# comment", and a "> file" redirection or "&" at the end.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated single quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated double quote")
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			i = len(s)
		case (c == '>' || c == '|' || c == '&' || c == ';') && !inWord:
			// What follows is a redirection or another command.
			i = len(s)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// helmInvocation is a parsed `helm install|upgrade|template` command line.
type helmInvocation struct {
	sub, release, chart, namespace, kubeVersion string
	version                                     string // --version
	opts                                        values.Options
}

// parseHelmArgs parses the arguments of a documented helm command with the
// flags of helm v4 that the documentation may use. An unknown flag is an
// error: the documentation must not show what helm would reject, nor a flag
// helm v4 deprecates (--atomic, now --rollback-on-failure).
func parseHelmArgs(args []string) (*helmInvocation, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("no helm subcommand")
	}
	inv := &helmInvocation{sub: args[0]}
	var positional []string
	withValue := map[string]func(string){
		"--set":          func(v string) { inv.opts.Values = append(inv.opts.Values, v) },
		"--set-string":   func(v string) { inv.opts.StringValues = append(inv.opts.StringValues, v) },
		"--set-json":     func(v string) { inv.opts.JSONValues = append(inv.opts.JSONValues, v) },
		"-f":             func(v string) { inv.opts.ValueFiles = append(inv.opts.ValueFiles, v) },
		"--values":       func(v string) { inv.opts.ValueFiles = append(inv.opts.ValueFiles, v) },
		"-n":             func(v string) { inv.namespace = v },
		"--namespace":    func(v string) { inv.namespace = v },
		"--kube-version": func(v string) { inv.kubeVersion = v },
		"--timeout":      func(string) {},
		"--version":      func(v string) { inv.version = v },
	}
	boolean := map[string]bool{
		"--wait": true, "--rollback-on-failure": true, "--create-namespace": true, "--install": true, "-i": true,
		"--dry-run": true, "--debug": true, "--strict": true, "--reuse-values": true,
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			positional = append(positional, a)
			continue
		}
		name, value, hasValue := strings.Cut(a, "=")
		if set, ok := withValue[name]; ok {
			if !hasValue {
				if i+1 >= len(args) {
					return nil, fmt.Errorf("%s needs a value", name)
				}
				i++
				value = args[i]
			}
			set(value)
			continue
		}
		if ok := boolean[name]; ok && !hasValue {
			continue
		}
		// helm v4's --wait alone means --wait=watcher; it takes a strategy too.
		if name == "--wait" && (value == "watcher" || value == "hookOnly" || value == "legacy") {
			continue
		}
		return nil, fmt.Errorf("flag %s is not one the test knows of helm %s", a, inv.sub)
	}
	switch inv.sub {
	case "install", "upgrade", "template":
		if len(positional) != 2 {
			return nil, fmt.Errorf("helm %s wants RELEASE CHART, got %q", inv.sub, positional)
		}
		inv.release, inv.chart = positional[0], positional[1]
	case "lint", "show":
		if len(positional) == 0 {
			return nil, fmt.Errorf("helm %s wants a chart", inv.sub)
		}
		inv.chart = positional[len(positional)-1]
		if inv.sub == "show" {
			if len(positional) != 2 {
				return nil, fmt.Errorf("helm show wants WHAT CHART, got %q", positional)
			}
			inv.release = positional[0] // what to show
		}
	case "test", "uninstall", "status", "history", "rollback":
		// They talk to a cluster; the release name is all there is to check.
		if len(positional) == 0 {
			return nil, fmt.Errorf("helm %s wants a release", inv.sub)
		}
	default:
		return nil, fmt.Errorf("helm %s: a subcommand the test does not know", inv.sub)
	}
	return inv, nil
}

// publishedChart is where the release process pushes charts/elector (make
// chart-package with CHART_OCI): a documented install from there renders the
// chart under test, which TestChartOCIRoundTrip shows to be what a pull gives.
const publishedChart = "oci://ghcr.io/elector/charts/elector"

// chartPath maps a documented chart reference to the chart under test.
func chartPath(ref string) (string, error) {
	switch strings.TrimPrefix(strings.TrimSuffix(ref, "/"), "./") {
	case "charts/elector", "../../charts/elector", publishedChart:
		return chartDir, nil
	}
	return "", fmt.Errorf("chart %q is not charts/elector", ref)
}

// valuesFile resolves a documented -f file: a file of the repository, or a
// stand-in in testdata/docs for one the user writes.
func valuesFile(doc, f string) (string, error) {
	for _, p := range []string{filepath.Join(repoRoot, f), filepath.Join(repoRoot, filepath.Dir(doc), f), filepath.Join(docValuesDir, filepath.Base(f))} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("values file %s is neither in the repository nor a stand-in in test/helm/%s", f, docValuesDir)
}

// runDocumented runs one documented command the way helm would, without a
// cluster: install/upgrade/template render with the schema and the chart's
// checks, lint lints, show readme shows the README.
func runDocumented(c docCommand) error {
	inv, err := parseHelmArgs(c.args)
	if err != nil {
		return err
	}
	if inv.chart == "" {
		return nil
	}
	chart, err := chartPath(inv.chart)
	if err != nil {
		return err
	}
	if inv.chart == publishedChart && inv.version != "" {
		c, err := loader.Load(chartDir)
		if err != nil {
			return err
		}
		if inv.version != c.Metadata.Version {
			return fmt.Errorf("--version %s, but charts/elector is %s", inv.version, c.Metadata.Version)
		}
	}
	for i, f := range inv.opts.ValueFiles {
		if inv.opts.ValueFiles[i], err = valuesFile(c.file, f); err != nil {
			return err
		}
	}
	vals, err := inv.opts.MergeValues(getter.Providers{})
	if err != nil {
		return fmt.Errorf("values: %w", err)
	}
	switch inv.sub {
	case "install", "upgrade", "template":
		_, err := renderChart(renderOptions{vals: vals, releaseName: inv.release, namespace: inv.namespace, kubeVersion: inv.kubeVersion})
		return err
	case "lint":
		kv, err := parseKubeVersion(inv.kubeVersion)
		if err != nil {
			return err
		}
		linter := lint.RunAll(chart, vals, "default", lint.WithKubeVersion(kv))
		for _, m := range linter.Messages {
			if m.Severity > support.InfoSev {
				return fmt.Errorf("lint: %s", m)
			}
		}
		return nil
	case "show":
		out, err := action.NewShow(action.ShowOutputFormat(inv.release), quietConfig()).Run(chart)
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) == "" {
			return fmt.Errorf("helm show %s printed nothing", inv.release)
		}
		return nil
	}
	return nil
}

// TestDocumentedHelmCommands runs every helm command of the README, the
// Kubernetes guide, the chart's README and the examples' README: a command
// that helm would reject (a schema error, a failed check, an unknown flag)
// fails here.
func TestDocumentedHelmCommands(t *testing.T) {
	total := 0
	for _, file := range documentedFiles {
		for _, c := range helmCommands(t, file) {
			total++
			t.Run(fmt.Sprintf("%s:%d", file, c.line), func(t *testing.T) {
				if err := runDocumented(c); err != nil {
					t.Errorf("%s:%d: `%s` fails: %v", c.file, c.line, c.text, err)
				}
			})
		}
	}
	if total < 5 {
		t.Errorf("found %d helm commands in %v; the extraction is broken", total, documentedFiles)
	}
}

// TestShellWords checks the splitting the documented commands go through.
func TestShellWords(t *testing.T) {
	for in, want := range map[string]string{
		`helm install a charts/elector --set x=1 # comment`:  `helm|install|a|charts/elector|--set|x=1`,
		`helm template a b -f 'my values.yaml' > out.yaml`:   `helm|template|a|b|-f|my values.yaml`,
		`helm install a b --set-json 'app.command=["x"]'`:    `helm|install|a|b|--set-json|app.command=["x"]`,
		`helm install a b --set "app.env[0].value=a \"b\""`:  `helm|install|a|b|--set|app.env[0].value=a "b"`,
		`kubectl port-forward deployment/x 8080:8080 &`:      `kubectl|port-forward|deployment/x|8080:8080`,
		`helm install a b --set app.image.tag=1.4 | tee log`: `helm|install|a|b|--set|app.image.tag=1.4`,
	} {
		got, err := shellWords(in)
		if err != nil || strings.Join(got, "|") != want {
			t.Errorf("shellWords(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestParseHelmArgs checks the flags the documented commands may use: those of
// helm v4, not the ones it deprecates or rejects.
func TestParseHelmArgs(t *testing.T) {
	for _, ok := range []string{
		"upgrade a charts/elector --wait",
		"upgrade a charts/elector --wait=legacy --timeout 5m",
		"install a charts/elector --rollback-on-failure --wait=watcher",
	} {
		if _, err := parseHelmArgs(strings.Fields(ok)); err != nil {
			t.Errorf("%q: %v, want it accepted", ok, err)
		}
	}
	for _, bad := range []string{
		"upgrade a charts/elector --atomic",      // deprecated in helm v4
		"upgrade a charts/elector --wait=always", // not a wait strategy
		"upgrade a charts/elector --wait=",
		"install a charts/elector --no-such-flag",
	} {
		if _, err := parseHelmArgs(strings.Fields(bad)); err == nil {
			t.Errorf("%q accepted, want an error", bad)
		}
	}
}
