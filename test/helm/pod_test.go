package helm

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Paths and names the chart promises to users (docs/KUBERNETES.md) and to
// the elector CLI.
const (
	electorBinary   = "/elector-bin/elector"
	statusFile      = "/var/run/elector/status"
	redisDir        = "/etc/elector/redis"
	httpPortName    = "http-elector"
	sidecarName     = "elector"
	installInitName = "install-elector"
)

// allContainers returns the init containers followed by the containers.
func allContainers(spec *corev1.PodSpec) []corev1.Container {
	return append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
}

func findContainer(t *testing.T, list []corev1.Container, name string) *corev1.Container {
	t.Helper()
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	t.Fatalf("no container %q in %v", name, containerNames(list))
	return nil
}

func containerNames(list []corev1.Container) []string {
	var names []string
	for _, c := range list {
		names = append(names, c.Name)
	}
	return names
}

// electorContainers returns the containers that campaign: the sidecar
// (`elector sidecar`) or, in run mode, the app container whose command is
// the installed elector binary (`elector run`).
func electorContainers(spec *corev1.PodSpec) []*corev1.Container {
	var out []*corev1.Container
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			c := &list[i]
			if isSidecar(c) || (len(c.Command) > 0 && c.Command[0] == electorBinary) {
				out = append(out, c)
			}
		}
	}
	return out
}

func isSidecar(c *corev1.Container) bool {
	return len(c.Args) > 0 && c.Args[0] == "sidecar" && strings.Contains(c.Image, "/elector:")
}

// electorFlags returns the elector's own arguments: in run mode, those before
// the "--" that starts the wrapped command.
func electorFlags(c *corev1.Container) []string {
	for i, a := range c.Args {
		if a == "--" {
			return c.Args[:i]
		}
	}
	return c.Args
}

// wrappedCommand returns what follows "--" in the arguments (run mode).
func wrappedCommand(c *corev1.Container) ([]string, bool) {
	for i, a := range c.Args {
		if a == "--" {
			return c.Args[i+1:], true
		}
	}
	return nil, false
}

// flagValue returns the value of --name=value among the elector's flags.
func flagValue(c *corev1.Container, name string) (string, bool) {
	prefix := "--" + name + "="
	var (
		value string
		found bool
	)
	for _, a := range electorFlags(c) {
		if strings.HasPrefix(a, prefix) {
			value, found = strings.TrimPrefix(a, prefix), true // the last one wins, as in pflag
		}
	}
	return value, found
}

func mustFlag(t *testing.T, c *corev1.Container, name string) string {
	t.Helper()
	v, ok := flagValue(c, name)
	if !ok {
		t.Fatalf("container %q: no --%s in %q", c.Name, name, c.Args)
	}
	return v
}

func hasFlag(c *corev1.Container, arg string) bool {
	for _, a := range electorFlags(c) {
		if a == arg {
			return true
		}
	}
	return false
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func containerPort(c *corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

func volumeMount(c *corev1.Container, volume string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == volume {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func volume(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// checkHTTPProbe checks that probe is an HTTP GET of path on a port of c that
// is named portName and numbered wantPort.
func checkHTTPProbe(t *testing.T, c *corev1.Container, kind string, probe *corev1.Probe, path string, wantPort int32) {
	t.Helper()
	if probe == nil || probe.HTTPGet == nil {
		t.Fatalf("container %q: %s probe %+v, want an HTTP GET of %s", c.Name, kind, probe, path)
	}
	if probe.HTTPGet.Path != path {
		t.Errorf("container %q: %s probe path %q, want %q", c.Name, kind, probe.HTTPGet.Path, path)
	}
	port := resolvePort(t, c, probe.HTTPGet.Port)
	if port != wantPort {
		t.Errorf("container %q: %s probe port %v = %d, want %d", c.Name, kind, probe.HTTPGet.Port.String(), port, wantPort)
	}
}

// resolvePort resolves a named or numbered port of a container, as the
// kubelet does.
func resolvePort(t *testing.T, c *corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntVal
	}
	n, ok := containerPort(c, p.StrVal)
	if !ok {
		t.Fatalf("container %q has no port named %q (ports %+v)", c.Name, p.StrVal, c.Ports)
	}
	return n
}

// podPortNamed reports whether some container of the pod declares the port.
func podPortNamed(spec *corev1.PodSpec, name string) bool {
	for _, c := range allContainers(spec) {
		if _, ok := containerPort(&c, name); ok {
			return true
		}
	}
	return false
}

// podSpec returns the pod template of the only Deployment.
func podSpec(t *testing.T, objs []object) (*appsv1.Deployment, *corev1.PodSpec) {
	t.Helper()
	d := only[*appsv1.Deployment](t, objs)
	return d, &d.Spec.Template.Spec
}

// theElector returns the one container that campaigns.
func theElector(t *testing.T, spec *corev1.PodSpec) *corev1.Container {
	t.Helper()
	cs := electorContainers(spec)
	if len(cs) != 1 {
		t.Fatalf("%d containers run the elector, want 1 (containers: %v)", len(cs), containerNames(allContainers(spec)))
	}
	return cs[0]
}
