package helm

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"sigs.k8s.io/yaml"
)

// libraryDir is the library chart; exampleChartDir a user's chart that uses it.
const (
	libraryDir      = "../../charts/elector-lib"
	exampleChartDir = "../../examples/chart-with-sidecar"
)

// lintChart runs `helm lint --strict` on a chart with values.
func lintChart(t *testing.T, dir string, vals map[string]any) {
	t.Helper()
	kv, err := parseKubeVersion("")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range lint.RunAll(dir, vals, "default", lint.WithKubeVersion(kv)).Messages {
		if m.Severity > support.InfoSev {
			t.Errorf("lint %s: %s", dir, m)
		}
	}
}

// TestLibraryChart: the library is a library chart of the elector version
// charts/elector deploys, vendored into charts/elector (and the example) as
// the dependency Chart.yaml declares, and both lint strictly.
func TestLibraryChart(t *testing.T) {
	lib, err := loader.Load(libraryDir)
	if err != nil {
		t.Fatal(err)
	}
	if lib.Metadata.Type != "library" {
		t.Errorf("charts/elector-lib type %q, want library", lib.Metadata.Type)
	}
	_, appVersion := chartMetadata(t)
	if lib.Metadata.AppVersion != appVersion {
		t.Errorf("elector-lib appVersion %s, charts/elector's %s: they deploy one elector", lib.Metadata.AppVersion, appVersion)
	}
	tpl := readFile(t, filepath.Join(libraryDir, "templates", "_helpers.tpl"))
	if !strings.Contains(tpl, `{{- define "elector.version" -}}`+appVersion+`{{- end }}`) {
		t.Errorf("elector.version is not the appVersion %s", appVersion)
	}
	for _, dir := range []string{chartDir, exampleChartDir} {
		c, err := loader.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, d := range c.Metadata.Dependencies {
			if d.Name == "elector-lib" {
				found = true
				if d.Version != lib.Metadata.Version || !strings.HasPrefix(d.Repository, "file://") {
					t.Errorf("%s: dependency %+v, want elector-lib %s from a file:// repository", dir, d, lib.Metadata.Version)
				}
			}
		}
		deps := c.Dependencies()
		if !found || len(deps) != 1 || deps[0].Name() != "elector-lib" || deps[0].Metadata.Version != lib.Metadata.Version {
			t.Errorf("%s: vendored dependencies %v, want elector-lib %s in charts/", dir, deps, lib.Metadata.Version)
		}
		// The vendored library is the library itself (a symlink), not a copy that could drift.
		target, err := filepath.EvalSymlinks(filepath.Join(dir, "charts", "elector-lib"))
		want, _ := filepath.Abs(libraryDir)
		if abs, _ := filepath.Abs(target); err != nil || abs != want {
			t.Errorf("%s/charts/elector-lib resolves to %q (%v), want %s", dir, target, err, want)
		}
	}
	lintChart(t, libraryDir, nil)
	lintChart(t, exampleChartDir, nil)
}

var defineRE = regexp.MustCompile(`\{\{-? define "([^"]+)"`)

// TestOneCopyOfEachTemplate: no named template is defined twice across the
// application chart and the library (an override would silently win).
func TestOneCopyOfEachTemplate(t *testing.T) {
	seen := map[string]string{}
	for _, dir := range []string{filepath.Join(chartDir, "templates"), filepath.Join(libraryDir, "templates")} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range defineRE.FindAllStringSubmatch(string(b), -1) {
				if prev, ok := seen[m[1]]; ok {
					t.Errorf("%s is defined in %s and in %s", m[1], prev, path)
				}
				seen[m[1]] = path
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"elector.sidecarContainer", "elector.probes", "elector.volumes", "elector.rbac", "elector.metricsService", "elector.validate"} {
		if !strings.HasPrefix(seen[name], filepath.Join(libraryDir, "templates")) {
			t.Errorf("%s is defined in %q, want the library", name, seen[name])
		}
	}
}

// TestLibraryValuesMatchApp: every default of the library is charts/elector's
// default of the same key (serviceAccount aside: the library creates none),
// so a value means one thing in both.
func TestLibraryValuesMatchApp(t *testing.T) {
	lib, err := common.ReadValuesFile(filepath.Join(libraryDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	app, err := common.ReadValuesFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(prefix string, l, a map[string]any)
	walk = func(prefix string, l, a map[string]any) {
		for k, lv := range l {
			key := prefix + k
			if key == "serviceAccount" {
				continue
			}
			av, ok := a[k]
			if !ok {
				t.Errorf("library value %s is not a value of charts/elector", key)
				continue
			}
			if lm, ok := lv.(map[string]any); ok && len(lm) > 0 {
				am, ok := av.(map[string]any)
				if !ok {
					t.Errorf("%s: a map in the library, %T in charts/elector", key, av)
					continue
				}
				walk(key+".", lm, am)
				continue
			}
			if !reflect.DeepEqual(lv, av) {
				t.Errorf("%s: %v in the library, %v in charts/elector", key, lv, av)
			}
		}
	}
	walk("", lib, app)
	if _, err := ValuesTable([]byte(readFile(t, filepath.Join(libraryDir, "values.yaml")))); err != nil {
		t.Errorf("library values: %v", err)
	}
}

// TestChartWithSidecar renders the example chart (a user's chart with the
// library as its dependency) in each sidecar form and with the features that
// need RBAC, decodes every object strictly, and checks that the library's
// objects fit the user's pods: the Services select them, the RoleBinding
// names their ServiceAccount, every mount has its volume.
func TestChartWithSidecar(t *testing.T) {
	for _, tc := range []struct{ name, values string }{
		{"defaults", ""},
		{"plain", "elector: {sidecar: {native: false, lifecycle: {preStop: {sleep: {seconds: 5}}}}}"},
		{"kube features", "elector: {events: {enabled: true}, mirrorLease: {enabled: true}, resign: {tokenSecret: resign}, redis: {tls: {enabled: true, caSecret: ca}}}"},
		{"no features", "elector: {leaderLabel: {enabled: false}, metrics: {service: {enabled: false}}}"},
		{"registry", "global: {imageRegistry: registry.example.com}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, objs := mustRender(t, renderOptions{chart: exampleChartDir, values: tc.values, releaseName: "billing"})
			d := only[*appsv1.Deployment](t, objs)
			spec := &d.Spec.Template.Spec
			checkMounts(t, "example", spec)
			c := theElector(t, spec)
			native := slices.ContainsFunc(spec.InitContainers, func(ic corev1.Container) bool { return ic.Name == c.Name })
			if native == strings.Contains(tc.values, "native: false") {
				t.Errorf("sidecar in initContainers: %v, values %q", native, tc.values)
			}
			wantImage := "ghcr.io/elector/elector:0.1.0"
			if strings.Contains(tc.values, "imageRegistry") {
				wantImage = "registry.example.com/elector/elector:0.1.0"
			}
			if c.Image != wantImage {
				t.Errorf("sidecar image %q, want %q", c.Image, wantImage)
			}
			if got := mustFlag(t, c, "lease-name"); got != "billing" {
				t.Errorf("--lease-name=%s, want the release's name", got)
			}
			app := findContainer(t, spec.Containers, "app")
			if e := envVar(app, "ELECTOR_STATUS_FILE"); e == nil || e.Value != statusFile {
				t.Errorf("app: ELECTOR_STATUS_FILE %+v", e)
			}
			for _, svc := range objectsOf[*corev1.Service](objs) {
				if !reflect.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) {
					t.Errorf("service %s selects %v, want the example's pods %v", svc.Name, svc.Spec.Selector, d.Spec.Selector.MatchLabels)
				}
			}
			bindings := objectsOf[*rbacv1.RoleBinding](objs)
			if want := boolInt(tc.name != "no features"); len(bindings) != want {
				t.Errorf("%d RoleBindings, want %d", len(bindings), want)
			}
			for _, b := range bindings {
				if len(b.Subjects) != 1 || b.Subjects[0].Name != spec.ServiceAccountName {
					t.Errorf("RoleBinding subjects %+v, want the pods' ServiceAccount %s", b.Subjects, spec.ServiceAccountName)
				}
			}
			if r.manifest == "" {
				t.Fatal("empty manifest")
			}
		})
	}
	// The library's checks run in the user's chart too.
	if _, err := renderChart(renderOptions{chart: exampleChartDir, values: "elector: {lease: {duration: 5s, renewDeadline: 10s}}"}); err == nil || !strings.Contains(err.Error(), "must be longer than lease.renewDeadline") {
		t.Errorf("a lease shorter than its renew deadline: %v, want the library's error", err)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte("elector: {events: {enabled: true}}"), &vals); err != nil {
		t.Fatal(err)
	}
	lintChart(t, exampleChartDir, vals)
}

// TestLibrarySchema keeps the library's values.schema.json equal to
// charts/elector's schema of the same values (serviceAccount: the library's
// two keys), so that a typo under `elector:` in a user's chart fails as it
// does in charts/elector. Run with -update to regenerate it.
func TestLibrarySchema(t *testing.T) {
	var app map[string]any
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(chartDir, "values.schema.json"))), &app); err != nil {
		t.Fatal(err)
	}
	lib, err := common.ReadValuesFile(filepath.Join(libraryDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	appProps := app["properties"].(map[string]any)
	props := map[string]any{}
	var required []string
	for k := range lib {
		p, ok := appProps[k].(map[string]any)
		if !ok {
			t.Fatalf("library value %s has no schema in charts/elector", k)
		}
		if k == "serviceAccount" {
			p = map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
				"create": map[string]any{"const": false, "description": "The library creates no ServiceAccount."},
				"name":   map[string]any{"type": "string"},
			}}
		}
		if k == "metrics" {
			p = map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
				"service": p["properties"].(map[string]any)["service"],
			}}
		}
		props[k] = p
		if k != "global" {
			required = append(required, k)
		}
	}
	slices.Sort(required)
	schema := map[string]any{
		"$schema":              app["$schema"],
		"title":                "Values of the elector library (generated from charts/elector's schema by test/helm)",
		"type":                 "object",
		"additionalProperties": false,
		"required":             required,
		"properties":           props,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(schema); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(libraryDir, "values.schema.json")
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if got, _ := os.ReadFile(path); string(got) != b.String() {
		t.Errorf("%s differs from charts/elector's schema; run `go test -run TestLibrarySchema -update` in test/helm", path)
	}
	if _, err := renderChart(renderOptions{chart: exampleChartDir, values: "elector: {lease: {durration: 5s}}"}); err == nil || !strings.Contains(err.Error(), "durration") {
		t.Errorf("a typo under elector: %v, want a schema error", err)
	}
}
