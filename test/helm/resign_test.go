package helm

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestResignToken: resign.tokenSecret mounts the Secret's key as a 0440 file in the
// container that runs the elector only (the sidecar, or the app container in run mode) and
// passes it as --resign-token-file; without it there is neither flag nor volume.
func TestResignToken(t *testing.T) {
	for _, mode := range []string{"sidecar", "run"} {
		values := "mode: " + mode + "\napp: {command: [/bin/job]}\n"
		_, objs := mustRender(t, renderOptions{values: values})
		_, spec := podSpec(t, objs)
		c := theElector(t, spec)
		if _, ok := flagValue(c, "resign-token-file"); ok || volume(spec, "resign-token") != nil {
			t.Errorf("%s, no tokenSecret: flags %q, volumes %+v; want no token", mode, electorFlags(c), spec.Volumes)
		}

		_, objs = mustRender(t, renderOptions{values: values + "resign: {tokenSecret: resign-auth, tokenSecretKey: tok}\n"})
		_, spec = podSpec(t, objs)
		c = theElector(t, spec)
		if got := mustFlag(t, c, "resign-token-file"); got != "/etc/elector/resign/token" {
			t.Errorf("%s: --resign-token-file=%s, want /etc/elector/resign/token", mode, got)
		}
		m := volumeMount(c, "resign-token")
		if m == nil || m.MountPath != "/etc/elector/resign" || !m.ReadOnly {
			t.Errorf("%s: mount %+v, want /etc/elector/resign read-only", mode, m)
		}
		v := volume(spec, "resign-token")
		if v == nil || v.Projected == nil || v.Projected.DefaultMode == nil || *v.Projected.DefaultMode != 0o440 ||
			len(v.Projected.Sources) != 1 || v.Projected.Sources[0].Secret == nil {
			t.Fatalf("%s: volume %+v, want a projected Secret with mode 0440", mode, v)
		}
		s := v.Projected.Sources[0].Secret
		if s.Name != "resign-auth" || len(s.Items) != 1 || s.Items[0] != (corev1.KeyToPath{Key: "tok", Path: "token"}) {
			t.Errorf("%s: secret source %+v, want key tok of resign-auth as token", mode, s)
		}
		for _, other := range append(append([]corev1.Container{}, spec.Containers...), spec.InitContainers...) {
			if other.Name != c.Name && volumeMount(&other, "resign-token") != nil {
				t.Errorf("%s: container %s mounts the resign token too", mode, other.Name)
			}
		}
	}
}
