package helm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestEveryMountHasItsVolume: in every pod the chart renders, the Deployment's and `helm
// test`'s, each container mounts only volumes the pod declares (the API server rejects a
// pod that does not), over every combination of the switches that add volumes.
func TestEveryMountHasItsVolume(t *testing.T) {
	switches := []string{
		"leaderLabel: {enabled: true}",
		"resign: {tokenSecret: resign-token}",
		"redis: {existingSecret: redis-pass}",
		"redis: {tls: {enabled: true, caSecret: redis-ca}}",
		"mode: run\napp: {command: [sleep, infinity]}",
		"extraVolumes: [{name: extra, emptyDir: {}}]\nextraVolumeMounts: [{name: extra, mountPath: /extra}]",
	}
	for set := 0; set < 1<<len(switches); set++ {
		var vals []string
		for i, s := range switches {
			if set&(1<<i) != 0 {
				vals = append(vals, s)
			}
		}
		name := fmt.Sprintf("set%02d", set)
		t.Run(name, func(t *testing.T) {
			r, objs := mustRender(t, renderOptions{vals: mergeYAML(t, vals)})
			_, spec := podSpec(t, objs)
			checkMounts(t, "Deployment", spec)
			pods := objectsOf[*corev1.Pod](decodeManifest(t, r.hooks))
			if len(pods) != 1 {
				t.Fatalf("%d hook pods, want helm test's one", len(pods))
			}
			checkMounts(t, "helm test pod", &pods[0].Spec)
			if set == 0 {
				return
			}
			// The test pod runs `elector status`: it needs no API token and no resign token.
			for _, c := range pods[0].Spec.Containers {
				for _, m := range c.VolumeMounts {
					if m.Name == "elector-kube-api" || m.Name == "resign-token" {
						t.Errorf("helm test pod mounts %s, which `elector status` never reads", m.Name)
					}
				}
			}
		})
	}
}

// mergeYAML merges YAML documents of values, the later ones over the earlier ones.
func mergeYAML(t *testing.T, docs []string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	for _, d := range docs {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(d), &v); err != nil {
			t.Fatalf("values %q: %v", d, err)
		}
		vals = mergeMaps(vals, v)
	}
	return vals
}

// checkMounts fails the test for each mount of spec's containers that names no volume of
// spec.
func checkMounts(t *testing.T, what string, spec *corev1.PodSpec) {
	t.Helper()
	declared := map[string]bool{}
	for _, v := range spec.Volumes {
		declared[v.Name] = true
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if !declared[m.Name] {
				t.Errorf("%s: container %s mounts volume %q, which the pod does not declare (volumes: %v)",
					what, c.Name, m.Name, strings.Join(slices.Sorted(maps.Keys(declared)), ", "))
			}
		}
	}
}
