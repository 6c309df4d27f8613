package helm

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// TestChartReadme keeps the values table of the chart's README (what `helm
// show readme` prints) equal to what values.yaml documents. Run with -update
// to regenerate it after changing values.yaml.
func TestChartReadme(t *testing.T) {
	table, err := ValuesTable([]byte(readFile(t, filepath.Join(chartDir, "values.yaml"))))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(chartDir, "README.md")
	readme := readFile(t, path)
	want, err := ReplaceValuesTable(readme, table)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if readme != want {
		t.Errorf("%s: the values table differs from values.yaml; run `go test -run TestChartReadme -update` in test/helm and review the diff", path)
	}
	shown, err := action.NewShow(action.ShowReadme, quietConfig()).Run(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(shown, "| `redis.addr` |") {
		t.Errorf("helm show readme does not print the values table:\n%s", shown)
	}
}

// TestValuesTable checks the generator on a small values file.
func TestValuesTable(t *testing.T) {
	got, err := ValuesTable([]byte(`# A file header, not a description.

# -- The mode:
#   a or b.
mode: a
image:
  # -- Repository | name.
  repository: x
  # -- Tag.
  tag: ""
# -- Resources, one row.
resources:
  limits:
    memory: 64Mi
# -- A list.
list: [1, 2]
# -- Nothing.
none: null
`))
	if err != nil {
		t.Fatal(err)
	}
	want := "| Key | Type | Default | Description |\n|---|---|---|---|\n" +
		"| `mode` | string | `\"a\"` | The mode: a or b. |\n" +
		"| `image.repository` | string | `\"x\"` | Repository \\| name. |\n" +
		"| `image.tag` | string | `\"\"` | Tag. |\n" +
		"| `resources` | object | `{\"limits\":{\"memory\":\"64Mi\"}}` | Resources, one row. |\n" +
		"| `list` | list | `[1,2]` | A list. |\n" +
		"| `none` | null | `null` | Nothing. |\n"
	if got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	if _, err := ValuesTable([]byte("# -- Documented.\na: 1\nb: 2\n")); err == nil || !strings.Contains(err.Error(), "b has no description") {
		t.Errorf("an undocumented value: %v, want an error naming b", err)
	}
}

// TestChartIcon: Chart.yaml names an icon, the SVG in the chart directory
// that the URL serves from the repository's main branch.
func TestChartIcon(t *testing.T) {
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "https://raw.githubusercontent.com/elector/elector/main/"
	if !strings.HasPrefix(c.Metadata.Icon, prefix) {
		t.Fatalf("icon %q, want a file of the repository under %s", c.Metadata.Icon, prefix)
	}
	svg := readFile(t, filepath.Join(repoRoot, strings.TrimPrefix(c.Metadata.Icon, prefix)))
	var root struct {
		XMLName xml.Name
		ViewBox string `xml:"viewBox,attr"`
	}
	if err := xml.Unmarshal([]byte(svg), &root); err != nil || root.XMLName.Local != "svg" || root.ViewBox == "" {
		t.Errorf("icon %s: root %v, viewBox %q, %v; want an SVG with a viewBox", c.Metadata.Icon, root.XMLName, root.ViewBox, err)
	}
}
