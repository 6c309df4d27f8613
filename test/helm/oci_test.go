package helm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	appsv1 "k8s.io/api/apps/v1"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/registry"
	repo "helm.sh/helm/v4/pkg/repo/v1"
)

// packageCharts packages the library and the application chart into dir, as
// `make chart-package` does with the helm CLI, and returns their paths.
func packageCharts(t *testing.T, dir string) (lib, app string) {
	t.Helper()
	p := action.NewPackage()
	p.Destination = dir
	var err error
	if lib, err = p.Run(libraryDir, nil); err != nil {
		t.Fatalf("package %s: %v", libraryDir, err)
	}
	if app, err = p.Run(chartDir, nil); err != nil {
		t.Fatalf("package %s: %v", chartDir, err)
	}
	return lib, app
}

// TestChartPackage: `helm package` stores the library inside the application
// chart's package (the vendored symlink resolved), the package renders like
// the directory, and `helm repo index` indexes both charts.
func TestChartPackage(t *testing.T) {
	dir := t.TempDir()
	lib, app := packageCharts(t, dir)
	files := tarFiles(t, app)
	for _, f := range []string{"elector/Chart.yaml", "elector/values.schema.json", "elector/charts/elector-lib/Chart.yaml", "elector/charts/elector-lib/templates/_sidecar.tpl", "elector/templates/tests/status-test.yaml"} {
		if !files[f] {
			t.Errorf("%s lacks %s", filepath.Base(app), f)
		}
	}
	if libFiles := tarFiles(t, lib); !libFiles["elector-lib/templates/_objects.tpl"] {
		t.Errorf("%s lacks its templates", filepath.Base(lib))
	}
	chrt, err := loader.Load(app)
	if err != nil {
		t.Fatal(err)
	}
	fromPackage, err := renderLoaded(chrt, chartDir, renderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fromDir, err := renderChart(renderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fromPackage.manifest != fromDir.manifest {
		t.Error("the package renders differently from charts/elector")
	}
	index, err := repo.IndexDirectory(dir, "https://elector.github.io/charts")
	if err != nil {
		t.Fatal(err)
	}
	index.SortEntries()
	if err := index.WriteFile(filepath.Join(dir, "index.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	loaded, err := repo.LoadIndexFile(filepath.Join(dir, "index.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	version, _ := chartMetadata(t)
	for name, v := range map[string]string{"elector": version, "elector-lib": "0.1.0"} {
		cv, err := loaded.Get(name, v)
		if err != nil || len(cv.URLs) != 1 || !strings.HasSuffix(cv.URLs[0], name+"-"+v+".tgz") || cv.Digest == "" {
			t.Errorf("index entry %s %s: %+v, %v", name, v, cv, err)
		}
	}
}

// TestChartOCIRoundTrip pushes the packaged charts with Helm's registry client
// to an in-process OCI registry (go-containerregistry's), pulls the
// application chart back as `helm install oci://…` would, and renders it.
func TestChartOCIRoundTrip(t *testing.T) {
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")

	dir := t.TempDir()
	lib, app := packageCharts(t, dir)
	client, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard),
		registry.ClientOptCredentialsFile(filepath.Join(dir, "config.json")))
	if err != nil {
		t.Fatal(err)
	}
	version, _ := chartMetadata(t)
	refs := map[string]string{
		lib: host + "/charts/elector-lib:0.1.0",
		app: host + "/charts/elector:" + version,
	}
	for pkg, ref := range refs {
		data, err := os.ReadFile(pkg)
		if err != nil {
			t.Fatal(err)
		}
		// Strict: the reference's name and tag are the chart's, as `helm push` requires.
		if _, err := client.Push(data, ref, registry.PushOptStrictMode(true)); err != nil {
			t.Fatalf("push %s: %v", ref, err)
		}
	}
	pulled, err := client.Pull(refs[app], registry.PullOptWithChart(true))
	if err != nil {
		t.Fatalf("pull %s: %v", refs[app], err)
	}
	if pulled.Chart == nil || pulled.Chart.Meta == nil || pulled.Chart.Meta.Name != "elector" || pulled.Chart.Meta.Version != version {
		t.Fatalf("pulled %+v, want elector %s", pulled.Chart, version)
	}
	orig, _ := os.ReadFile(app)
	if !bytes.Equal(pulled.Chart.Data, orig) {
		t.Error("the pulled package differs from the pushed one")
	}
	chrt, err := loader.LoadArchive(bytes.NewReader(pulled.Chart.Data))
	if err != nil {
		t.Fatal(err)
	}
	r, err := renderLoaded(chrt, chartDir, renderOptions{values: "workload: {kind: StatefulSet}"})
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeManifest(t, r.manifest)
	only[*appsv1.StatefulSet](t, objs)
	// The library too: a user's chart depends on it from the registry.
	if _, err := client.Pull(refs[lib], registry.PullOptWithChart(true)); err != nil {
		t.Errorf("pull %s: %v", refs[lib], err)
	}
}

// tarFiles lists the files of a .tgz.
func tarFiles(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = true
	}
}
