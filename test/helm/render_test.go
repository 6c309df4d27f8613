package helm

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test, relative to this package.
const chartDir = "../../charts/elector"

// defaultKubeVersion is the cluster version the tests render for unless a
// test says otherwise. The Helm library's own default (v1.20) predates native
// sidecars.
const defaultKubeVersion = "v1.33.0"

// renderOptions says how to render the chart.
type renderOptions struct {
	// chart is the chart directory; empty: chartDir.
	chart string
	// valuesFiles are merged in order, like `helm template -f a -f b`; a
	// relative path is relative to the chart directory.
	valuesFiles []string
	// values is YAML merged last, like --set.
	values string
	// kubeVersion defaults to defaultKubeVersion.
	kubeVersion string
	// releaseName defaults to "test".
	releaseName string
	// namespace defaults to "default".
	namespace string
	// vals are merged after valuesFiles and before values, like the values
	// that `helm` itself merged from its -f and --set flags.
	vals map[string]any
}

// rendered is the output of one render.
type rendered struct {
	// manifest is the concatenated manifest, exactly as `helm template`
	// prints it.
	manifest string
	// notes is the rendered NOTES.txt.
	notes string
	// hooks is the manifests of the chart's hooks (`helm test`'s pod), which
	// `helm template` prints after the manifest.
	hooks string
}

// renderChart renders the chart client-side as `helm template` does: schema
// validation, the chart's kubeVersion constraint, templates and NOTES.
func renderChart(opts renderOptions) (*rendered, error) {
	dir := opts.chart
	if dir == "" {
		dir = chartDir
	}
	chrt, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	return renderLoaded(chrt, dir, opts)
}

// renderLoaded renders a loaded chart (from dir, or a package) as renderChart does.
func renderLoaded(chrt *chart.Chart, dir string, opts renderOptions) (*rendered, error) {
	vals := map[string]any{}
	for _, f := range opts.valuesFiles {
		if !filepath.IsAbs(f) {
			f = filepath.Join(dir, f)
		}
		v, err := common.ReadValuesFile(f)
		if err != nil {
			return nil, fmt.Errorf("read values %s: %w", f, err)
		}
		vals = mergeMaps(vals, v)
	}
	if opts.vals != nil {
		vals = mergeMaps(vals, opts.vals)
	}
	if opts.values != "" {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(opts.values), &v); err != nil {
			return nil, fmt.Errorf("parse values %q: %w", opts.values, err)
		}
		vals = mergeMaps(vals, v)
	}
	kv, err := parseKubeVersion(opts.kubeVersion)
	if err != nil {
		return nil, err
	}

	install := action.NewInstall(quietConfig())
	// A client-side dry run is what `helm template` does: the install action
	// puts a fake cluster and in-memory release storage in the configuration.
	install.DryRunStrategy = action.DryRunClient
	install.Replace = true
	install.ReleaseName = opts.releaseName
	if install.ReleaseName == "" {
		install.ReleaseName = "test"
	}
	install.Namespace = opts.namespace
	if install.Namespace == "" {
		install.Namespace = "default"
	}
	install.KubeVersion = kv
	released, err := install.Run(chrt, vals)
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	// Helm 4's actions return an interface that holds a release of the
	// chart's API version: a v2 chart gives a v1 release.
	rel, ok := released.(*release.Release)
	if !ok {
		return nil, fmt.Errorf("render: helm returned a %T, want a *release.Release (v1)", released)
	}
	// `helm template` prints the manifest trimmed, then a newline: Helm 4 ends
	// every document of the release's manifest with a blank line, the last
	// one too.
	var hooks strings.Builder
	for _, h := range rel.Hooks {
		fmt.Fprintf(&hooks, "---\n# Source: %s\n%s\n", h.Path, strings.TrimSpace(h.Manifest))
	}
	return &rendered{manifest: strings.TrimSpace(rel.Manifest) + "\n", notes: rel.Info.Notes, hooks: hooks.String()}, nil
}

// quietConfig is the configuration of an action that talks to no cluster, with
// Helm's log discarded (Helm 4 logs through slog, by default to stderr).
func quietConfig() *action.Configuration {
	return action.NewConfiguration(action.ConfigurationSetLogger(slog.DiscardHandler))
}

func parseKubeVersion(v string) (*common.KubeVersion, error) {
	if v == "" {
		v = defaultKubeVersion
	}
	kv, err := common.ParseKubeVersion(v)
	if err != nil {
		return nil, fmt.Errorf("parse kube version %q: %w", v, err)
	}
	return kv, nil
}

// mustRender renders the chart and fails the test on error.
func mustRender(t *testing.T, opts renderOptions) (*rendered, []object) {
	t.Helper()
	r, err := renderChart(opts)
	if err != nil {
		t.Fatalf("render with %+v: %v", opts, err)
	}
	return r, decodeManifest(t, r.manifest)
}

// documents splits a manifest into its YAML documents, in the order of the
// manifest.
func documents(manifest string) []string {
	split := releaseutil.SplitManifests(manifest)
	keys := make([]string, 0, len(split))
	for k := range split {
		keys = append(keys, k)
	}
	index := func(k string) int {
		n, _ := strconv.Atoi(strings.TrimPrefix(k, "manifest-"))
		return n
	}
	sort.Slice(keys, func(i, j int) bool { return index(keys[i]) < index(keys[j]) })
	docs := make([]string, 0, len(keys))
	for _, k := range keys {
		if strings.TrimSpace(stripComments(split[k])) == "" {
			continue
		}
		docs = append(docs, split[k])
	}
	return docs
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// mergeMaps merges b into a, recursing into nested maps, like Helm's own
// merging of -f files.
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bv, ok := v.(map[string]any); ok {
			if av, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(av, bv)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// ciValuesFiles lists the chart's ci/*-values.yaml files.
func ciValuesFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for _, f := range files {
		rel = append(rel, filepath.Join("ci", filepath.Base(f)))
	}
	return rel
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
