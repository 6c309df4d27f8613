package helm

import (
	"path/filepath"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestJobExamples decodes examples/kubernetes/cronjob.yaml and job.yaml
// strictly and checks what makes one pod of several do the work: every pod
// runs the installed elector as `elector run --once-per D --exit-if-done --
// CMD` under its pod's name, with the volumes it mounts, the elector's
// container restricted, and a grace period that covers --kill-grace.
func TestJobExamples(t *testing.T) {
	for _, tc := range []struct {
		file string
		spec func(t *testing.T, objs []object) (*corev1.PodSpec, int32)
	}{
		{"cronjob.yaml", func(t *testing.T, objs []object) (*corev1.PodSpec, int32) {
			cj := only[*batchv1.CronJob](t, objs)
			if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
				t.Errorf("concurrencyPolicy %q, want Forbid", cj.Spec.ConcurrencyPolicy)
			}
			return &cj.Spec.JobTemplate.Spec.Template.Spec, 1
		}},
		{"job.yaml", func(t *testing.T, objs []object) (*corev1.PodSpec, int32) {
			j := only[*batchv1.Job](t, objs)
			if j.Spec.Parallelism == nil {
				t.Fatal("no parallelism")
			}
			return &j.Spec.Template.Spec, *j.Spec.Parallelism
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			objs := decodeManifest(t, readFile(t, filepath.Join(examplesDir, tc.file)))
			spec, parallelism := tc.spec(t, objs)
			if tc.file == "job.yaml" && parallelism != 2 {
				t.Errorf("parallelism %d, want 2", parallelism)
			}
			checkMounts(t, tc.file, spec)
			if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
				t.Error("enableServiceLinks is not false")
			}
			install := findContainer(t, spec.InitContainers, installInitName)
			if !slices.Equal(install.Args, []string{"install", electorBinary}) {
				t.Errorf("install-elector args %q", install.Args)
			}
			if sc := install.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("install-elector securityContext %+v, want the restricted one", sc)
			}
			c := theElector(t, spec)
			if c.Args[0] != "run" || !hasFlag(c, "--exit-if-done") {
				t.Errorf("args %q, want elector run ... --exit-if-done", c.Args)
			}
			for _, f := range []string{"once-per", "lease-name", "redis-addr", "redis-password-file", "kill-grace"} {
				mustFlag(t, c, f)
			}
			if cmd, ok := wrappedCommand(c); !ok || len(cmd) == 0 {
				t.Errorf("args %q: no command after --", c.Args)
			}
			if e := envVar(c, "POD_NAME"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("POD_NAME %+v, want metadata.name", e)
			}
			if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds < 9 {
				t.Errorf("terminationGracePeriodSeconds %v, want at least --kill-grace (4s) + 5s", spec.TerminationGracePeriodSeconds)
			}
			if spec.RestartPolicy == corev1.RestartPolicyAlways {
				t.Error("a Job's pod with restartPolicy Always")
			}
		})
	}
}
