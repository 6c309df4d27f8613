package helm

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "regenerate examples/kubernetes from the chart")

// examplesDir holds the plain manifests for users without Helm.
const examplesDir = "../../examples/kubernetes"

// examples are the manifests in examplesDir and how they are rendered.
var examples = []struct {
	file, release, values string
}{
	{"sidecar.yaml", "my-app", "testdata/example-sidecar-values.yaml"},
	{"run.yaml", "my-job", "testdata/example-run-values.yaml"},
	{"schedule.yaml", "my-report", "testdata/example-schedule-values.yaml"},
}

// TestExamples keeps examples/kubernetes equal to what the chart renders, so
// that the plain manifests cannot drift from the chart. Run with -update to
// regenerate them after changing the chart.
func TestExamples(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.file, func(t *testing.T) {
			values, err := filepath.Abs(ex.values)
			if err != nil {
				t.Fatal(err)
			}
			r, _ := mustRender(t, renderOptions{valuesFiles: []string{values}, releaseName: ex.release})
			header := fmt.Sprintf("# Generated from charts/elector by test/helm (go test ./... -update); do not edit.\n"+
				"# The same as: helm template %s charts/elector -f test/helm/%s --kube-version %s\n",
				ex.release, ex.values, defaultKubeVersion)
			want := header + r.manifest
			path := filepath.Join(examplesDir, ex.file)
			if *update {
				if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run `go test -run TestExamples -update` in test/helm)", err)
			}
			if string(got) != want {
				t.Errorf("%s differs from what the chart renders; run `go test -run TestExamples -update` in test/helm and review the diff", path)
			}
		})
	}
}
