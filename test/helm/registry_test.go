package helm

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestImageRegistry: image.registry and app.image.registry move an image to
// another registry, global.imageRegistry moves every image (the elector's,
// the app's, the demo's, helm test's) and wins over both; an empty registry
// leaves the repository as it is, so `image.repository:
// ghcr.io/elector/elector` keeps rendering what it always did.
func TestImageRegistry(t *testing.T) {
	_, appVersion := chartMetadata(t)
	const app = "app: {image: {repository: ghcr.io/acme/billing, tag: '1.4'}}\n"
	for _, tc := range []struct {
		name, values      string
		elector, appImage string
	}{
		{"unset", "",
			"ghcr.io/elector/elector:" + appVersion, "busybox:1.37"},
		{"unset with an app", app,
			"ghcr.io/elector/elector:" + appVersion, "ghcr.io/acme/billing:1.4"},
		// The repository's own registry is replaced, its path kept.
		{"image.registry", "image: {registry: registry.example.com}",
			"registry.example.com/elector/elector:" + appVersion, "busybox:1.37"},
		// A repository without a registry is a path under the registry.
		{"a repository without a registry", "image: {registry: 'localhost:5000/mirror', repository: elector/elector, digest: 'sha256:" + strings.Repeat("ab", 32) + "'}",
			"localhost:5000/mirror/elector/elector@sha256:" + strings.Repeat("ab", 32), "busybox:1.37"},
		{"app.image.registry", app + "app: {image: {registry: mirror.local:5000}}",
			"ghcr.io/elector/elector:" + appVersion, "mirror.local:5000/acme/billing:1.4"},
		{"a Docker Hub app", "app: {image: {registry: mirror.local, repository: nginx, tag: '1.27'}}",
			"ghcr.io/elector/elector:" + appVersion, "mirror.local/library/nginx:1.27"},
		{"localhost is a registry", "image: {registry: mirror.local, repository: 'localhost/elector'}",
			"mirror.local/elector:" + appVersion, "busybox:1.37"},
		// global.imageRegistry wins over image.registry and app.image.registry.
		{"global.imageRegistry", app + "global: {imageRegistry: airgap.example.com}\nimage: {registry: ignored.example.com}\napp: {image: {registry: ignored.example.com}}",
			"airgap.example.com/elector/elector:" + appVersion, "airgap.example.com/acme/billing:1.4"},
		{"global.imageRegistry and the demo", "global: {imageRegistry: airgap.example.com}",
			"airgap.example.com/elector/elector:" + appVersion, "airgap.example.com/library/busybox:1.37"},
		{"global.imageRegistry in run mode", "mode: run\nglobal: {imageRegistry: airgap.example.com}",
			"airgap.example.com/elector/elector:" + appVersion, "airgap.example.com/library/busybox:1.37"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, objs := mustRender(t, renderOptions{vals: mergeYAML(t, strings.Split(tc.values, "\n"))})
			_, spec := podSpec(t, objs)
			for _, c := range allContainers(spec) {
				want := tc.elector
				if c.Name == spec.Containers[0].Name {
					want = tc.appImage // in run mode too: the app's image runs the copied elector
				}
				if c.Image != want {
					t.Errorf("container %s: image %q, want %q", c.Name, c.Image, want)
				}
			}
			pods := objectsOf[*corev1.Pod](decodeManifest(t, r.hooks))
			if len(pods) != 1 || pods[0].Spec.Containers[0].Image != tc.elector {
				t.Errorf("helm test pod: %d pods, want one running %s", len(pods), tc.elector)
			}
		})
	}
}

// TestImageRegistrySchema: a registry is host[:port][/path], without a scheme
// or a trailing slash; global takes a parent chart's other globals.
func TestImageRegistrySchema(t *testing.T) {
	for _, v := range []string{
		"image: {registry: 'https://registry.example.com'}",
		"image: {registry: 'registry.example.com/'}",
		"app: {image: {registry: 'a b'}}",
		"global: {imageRegistry: 'oci://x'}",
		"image: {registri: x}",
	} {
		if _, err := renderChart(renderOptions{vals: mergeYAML(t, []string{v})}); err == nil {
			t.Errorf("%s: rendered, want a schema error", v)
		}
	}
	if _, err := renderChart(renderOptions{vals: mergeYAML(t, []string{"global: {imageRegistry: '', storageClass: fast, parentOnly: {a: 1}}"})}); err != nil {
		t.Errorf("a parent's globals: %v", err)
	}
	if _, err := renderChart(renderOptions{vals: mergeYAML(t, []string{"app: {image: {registry: mirror.local}}"})}); err == nil || !strings.Contains(err.Error(), "need app.image.repository") {
		t.Errorf("app.image.registry without a repository: %v, want the chart's error", err)
	}
}
