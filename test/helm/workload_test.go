package helm

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// workloadPod returns the kind, selector and pod template of the only
// workload (Deployment or StatefulSet) among objs.
func workloadPod(t *testing.T, objs []object) (string, *metav1.LabelSelector, *corev1.PodTemplateSpec) {
	t.Helper()
	deployments := objectsOf[*appsv1.Deployment](objs)
	statefulSets := objectsOf[*appsv1.StatefulSet](objs)
	switch {
	case len(deployments) == 1 && len(statefulSets) == 0:
		return "Deployment", deployments[0].Spec.Selector, &deployments[0].Spec.Template
	case len(statefulSets) == 1 && len(deployments) == 0:
		return "StatefulSet", statefulSets[0].Spec.Selector, &statefulSets[0].Spec.Template
	}
	t.Fatalf("%d Deployments and %d StatefulSets, want one workload", len(deployments), len(statefulSets))
	return "", nil, nil
}

// TestStatefulSet: workload.kind StatefulSet renders a StatefulSet instead
// of the Deployment, with the same pod (identity = the pod's name, now
// stable), its governing headless Service, parallel pod management, a
// one-at-a-time rolling update, and the same PodDisruptionBudget and Services.
func TestStatefulSet(t *testing.T) {
	for _, mode := range []string{"sidecar", "run"} {
		t.Run(mode, func(t *testing.T) {
			values := "workload: {kind: StatefulSet}\nmode: " + mode
			r, objs := mustRender(t, renderOptions{values: values})
			if len(objectsOf[*appsv1.Deployment](objs)) != 0 {
				t.Fatal("a StatefulSet release rendered a Deployment too")
			}
			sts := only[*appsv1.StatefulSet](t, objs)
			spec := &sts.Spec.Template.Spec
			if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 2 {
				t.Errorf("replicas %v, want 2", sts.Spec.Replicas)
			}
			if !reflect.DeepEqual(sts.Spec.Selector.MatchLabels, selectorLabels()) || !labelsMatch(selectorLabels(), sts.Spec.Template.Labels) {
				t.Errorf("selector %v, template labels %v: want %v on both", sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels, selectorLabels())
			}
			if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Errorf("podManagementPolicy %q, want Parallel", sts.Spec.PodManagementPolicy)
			}
			if sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
				t.Errorf("updateStrategy %+v, want RollingUpdate", sts.Spec.UpdateStrategy)
			}
			// The governing Service: headless, selecting the pods, followers included.
			var headless *corev1.Service
			for _, svc := range objectsOf[*corev1.Service](objs) {
				if svc.Name == sts.Spec.ServiceName {
					headless = svc
				}
				if !reflect.DeepEqual(svc.Spec.Selector, sts.Spec.Selector.MatchLabels) {
					t.Errorf("service %s selects %v, want the pods %v", svc.Name, svc.Spec.Selector, sts.Spec.Selector.MatchLabels)
				}
				for _, p := range svc.Spec.Ports {
					if !podPortNamed(spec, p.TargetPort.StrVal) {
						t.Errorf("service %s port %s targets %s, which no container declares", svc.Name, p.Name, p.TargetPort.String())
					}
				}
			}
			if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
				t.Errorf("serviceName %q: service %+v, want a headless Service publishing not-ready pods", sts.Spec.ServiceName, headless)
			}
			// Identity: the pod's name, which a StatefulSet keeps.
			c := theElector(t, spec)
			if e := envVar(c, "POD_NAME"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("POD_NAME %+v, want metadata.name", e)
			}
			if _, ok := flagValue(c, "identity"); ok {
				t.Error("--identity set: the identity must be $POD_NAME")
			}
			checkSecurity(t, scenario{name: mode, appSecurity: "restricted"}, spec)
			checkMounts(t, "StatefulSet", spec)
			pdb := only[*policyv1.PodDisruptionBudget](t, objs)
			if !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, sts.Spec.Selector.MatchLabels) {
				t.Errorf("PDB selects %v, want the pods", pdb.Spec.Selector.MatchLabels)
			}
			if !strings.Contains(r.notes, "statefulset/test") || strings.Contains(r.notes, "deployment/") {
				t.Errorf("NOTES do not name statefulset/test:\n%s", r.notes)
			}
			if pods := objectsOf[*corev1.Pod](decodeManifest(t, r.hooks)); len(pods) != 1 {
				t.Errorf("%d helm test pods, want 1", len(pods))
			}
		})
	}
	t.Run("settings", func(t *testing.T) {
		_, objs := mustRender(t, renderOptions{values: `workload:
  kind: StatefulSet
  statefulSet:
    podManagementPolicy: OrderedReady
    updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 1}}
    volumeClaimTemplates:
      - metadata: {name: data}
        spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
app: {volumeMounts: [{name: data, mountPath: /data}]}
`})
		sts := only[*appsv1.StatefulSet](t, objs)
		if sts.Spec.PodManagementPolicy != appsv1.OrderedReadyPodManagement || sts.Spec.UpdateStrategy.RollingUpdate == nil ||
			*sts.Spec.UpdateStrategy.RollingUpdate.Partition != 1 || len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Name != "data" {
			t.Errorf("StatefulSet spec %+v, want the settings of the values", sts.Spec)
		}
	})
}

// TestWorkloadRejects: the combinations that would not work.
func TestWorkloadRejects(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{"workload: {kind: StatefulSet}\ngateReadiness: true", "the rollout would stop"},
		{"workload: {kind: StatefulSet}\nstrategy: {type: Recreate}", "workload.statefulSet.updateStrategy"},
		{"workload: {statefulSet: {volumeClaimTemplates: [{metadata: {name: data}}]}}", "need workload.kind StatefulSet"},
		{"workload: {kind: DaemonSet}", "/workload/kind"},
		{"workload: {kind: StatefulSet, statefulSet: {podManagementPolicy: Ordered}}", "podManagementPolicy"},
		{"workload: {kind: StatefulSet, statefulSet: {replicas: 3}}", "replicas"},
		{"initContainers: [{image: busybox}]", "name"},
		{"app: {lifecycle: {preStopp: {}}}", "preStopp"},
		{"sidecar: {lifecycle: {preStop: {sleep: {seconds: -1}}}}", "seconds"},
	} {
		if _, err := renderChart(renderOptions{values: tc.values}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.values, err, tc.want)
		}
	}
}

// TestPodExtras: initContainers run before the elector (theirs first, so a
// native sidecar of the user's, a mesh proxy, is up when the elector dials
// Redis), extraContainers next to the app, and the lifecycle hooks land on
// the app and on the elector container.
func TestPodExtras(t *testing.T) {
	const extras = `initContainers: [{name: wait-for-db, image: busybox, command: [sh, -c, 'true']}]
extraContainers: [{name: exporter, image: busybox, command: [sleep, infinity]}]
app: {lifecycle: {preStop: {sleep: {seconds: 5}}}}
`
	for _, tc := range []struct {
		name, values     string
		init, containers []string
		sidecarLifecycle bool
	}{
		{"native", "", []string{"wait-for-db", "elector"}, []string{"app", "exporter"}, false},
		{"plain", "sidecar: {native: false, lifecycle: {preStop: {sleep: {seconds: 10}}}}", []string{"wait-for-db"}, []string{"app", "elector", "exporter"}, true},
		{"run", "mode: run", []string{"wait-for-db", "install-elector"}, []string{"app", "exporter"}, false},
	} {
		for _, kind := range []string{"Deployment", "StatefulSet"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				_, objs := mustRender(t, renderOptions{vals: mergeYAML(t, []string{extras, tc.values, "workload: {kind: " + kind + "}"})})
				_, _, tmpl := workloadPod(t, objs)
				spec := &tmpl.Spec
				if got := containerNames(spec.InitContainers); !slices.Equal(got, tc.init) {
					t.Errorf("initContainers %v, want %v", got, tc.init)
				}
				if got := containerNames(spec.Containers); !slices.Equal(got, tc.containers) {
					t.Errorf("containers %v, want %v", got, tc.containers)
				}
				app := findContainer(t, spec.Containers, "app")
				if app.Lifecycle == nil || app.Lifecycle.PreStop == nil || app.Lifecycle.PreStop.Sleep == nil || app.Lifecycle.PreStop.Sleep.Seconds != 5 {
					t.Errorf("app lifecycle %+v, want the preStop sleep of 5 s", app.Lifecycle)
				}
				if tc.name != "run" {
					sc := findContainer(t, allContainers(spec), "elector")
					if (sc.Lifecycle != nil) != tc.sidecarLifecycle {
						t.Errorf("elector lifecycle %+v, want one: %v", sc.Lifecycle, tc.sidecarLifecycle)
					}
				}
				if tmpl.Annotations["kubectl.kubernetes.io/default-container"] != "app" {
					t.Errorf("default container %q, want app", tmpl.Annotations["kubectl.kubernetes.io/default-container"])
				}
			})
		}
	}
}

// TestTerminationGrace: the pod's grace must cover the preStop sleeps, the
// app's stop (run.killGrace in run mode) and the elector's release (5 s):
// one rule, for both modes, with the parts named in the error.
func TestTerminationGrace(t *testing.T) {
	for _, tc := range []struct {
		values string
		need   int // the least grace; 0: the values render at any grace the schema takes
		parts  string
	}{
		{"", 5, "5s for the release"},
		{"app: {lifecycle: {preStop: {sleep: {seconds: 30}}}}", 35, "app.lifecycle's preStop sleep (30s) + 5s for the release"},
		{"sidecar: {native: false, lifecycle: {preStop: {sleep: {seconds: 20}}}}\napp: {lifecycle: {preStop: {sleep: {seconds: 6}}}}", 31,
			"app.lifecycle's preStop sleep (6s) + sidecar.lifecycle's preStop sleep (20s) + 5s for the release"},
		{"mode: run", 9, "run.killGrace (4s) + 5s for the release"},
		{"mode: run\napp: {lifecycle: {preStop: {sleep: {seconds: 10}}}}\nrun: {killGrace: 2500ms}", 18, "app.lifecycle's preStop sleep (10s) + run.killGrace (2500ms) + 5s for the release"},
		// An exec hook's time is unknown: not counted.
		{"app: {lifecycle: {preStop: {exec: {command: [sleep, '60']}}}}", 5, "5s for the release"},
	} {
		for _, grace := range []int{tc.need - 1, tc.need} {
			values := tc.values + "\nterminationGracePeriodSeconds: " + itoa(grace)
			_, err := renderChart(renderOptions{values: values})
			if grace < tc.need {
				want := "must be at least " + tc.parts + ": " + itoa(tc.need)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%q: %v, want an error with %q", values, err, want)
				}
			} else if err != nil {
				t.Errorf("%q: %v", values, err)
			}
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
