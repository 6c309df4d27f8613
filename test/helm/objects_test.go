package helm

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// object is one rendered Kubernetes object, decoded into its typed form.
type object struct {
	apiVersion, kind, name string
	// labels of the object itself.
	labels map[string]string
	// typed is *appsv1.Deployment, *corev1.Service, ... or, for a custom
	// resource, map[string]any.
	typed any
}

// typedKinds maps every kind the chart may render to a constructor of its
// k8s.io/api type. A kind missing here fails the test: a new template needs
// a strict decoder.
var typedKinds = map[string]func() any{
	"apps/v1/Deployment":                       func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                      func() any { return &appsv1.StatefulSet{} },
	"batch/v1/CronJob":                         func() any { return &batchv1.CronJob{} },
	"batch/v1/Job":                             func() any { return &batchv1.Job{} },
	"v1/Service":                               func() any { return &corev1.Service{} },
	"v1/Pod":                                   func() any { return &corev1.Pod{} },
	"v1/ServiceAccount":                        func() any { return &corev1.ServiceAccount{} },
	"policy/v1/PodDisruptionBudget":            func() any { return &policyv1.PodDisruptionBudget{} },
	"v1/ConfigMap":                             func() any { return &corev1.ConfigMap{} },
	"rbac.authorization.k8s.io/v1/Role":        func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding": func() any { return &rbacv1.RoleBinding{} },
	"coordination.k8s.io/v1/Lease":             func() any { return &coordinationv1.Lease{} },
	"networking.k8s.io/v1/NetworkPolicy":       func() any { return &networkingv1.NetworkPolicy{} },
	"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy": func() any {
		return &admissionregistrationv1.ValidatingAdmissionPolicy{}
	},
	"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding": func() any {
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	},
}

// customKinds maps the custom resources the chart may render, which have no
// k8s.io/api type, to a check of their fields; they decode as
// map[string]any. A PrometheusRule's groups are checked by Prometheus's own
// rule parser (monitoring_test.go); here only its envelope.
var customKinds = map[string]func(map[string]any) error{
	"monitoring.coreos.com/v1/ServiceMonitor": checkServiceMonitorFields,
	"monitoring.coreos.com/v1/PrometheusRule": checkPrometheusRuleFields,
}

// decodeManifest decodes every document of a manifest strictly: duplicate
// keys, unknown fields (matched case-sensitively, like the API server) and
// wrong types all fail the test.
func decodeManifest(t *testing.T, manifest string) []object {
	t.Helper()
	var objs []object
	for _, doc := range documents(manifest) {
		o, err := decodeStrict(doc)
		if err != nil {
			t.Fatalf("%v\n--- document:\n%s", err, doc)
		}
		objs = append(objs, o)
	}
	if len(objs) == 0 {
		t.Fatal("the chart rendered no object")
	}
	return objs
}

func decodeStrict(doc string) (object, error) {
	j, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return object{}, fmt.Errorf("YAML: %w", err)
	}
	var meta struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(j, &meta); err != nil {
		return object{}, fmt.Errorf("type and metadata: %w", err)
	}
	o := object{
		apiVersion: meta.APIVersion,
		kind:       meta.Kind,
		name:       meta.Metadata.Name,
		labels:     meta.Metadata.Labels,
	}
	gvk := meta.APIVersion + "/" + meta.Kind
	if check, ok := customKinds[gvk]; ok {
		var m map[string]any
		if err := json.Unmarshal(j, &m); err != nil {
			return object{}, fmt.Errorf("%s: %w", meta.Kind, err)
		}
		if err := check(m); err != nil {
			return object{}, fmt.Errorf("%s %s: %w", meta.Kind, o.name, err)
		}
		o.typed = m
		return o, nil
	}
	newTyped, ok := typedKinds[gvk]
	if !ok {
		return object{}, fmt.Errorf("no strict decoder for %s: add one to typedKinds", gvk)
	}
	typed := newTyped()
	strictErrs, err := kjson.UnmarshalStrict(j, typed, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return object{}, fmt.Errorf("decode %s %s: %w", gvk, o.name, err)
	}
	if len(strictErrs) > 0 {
		return object{}, fmt.Errorf("decode %s %s strictly: %v", gvk, o.name, strictErrs)
	}
	if o.name == "" {
		return object{}, fmt.Errorf("%s without a name", gvk)
	}
	o.typed = typed
	return o, nil
}

// customResourceSpec checks the envelope of a custom resource the chart
// renders (apiVersion, kind, metadata with a name, labels and annotations,
// spec) and returns its spec.
func customResourceSpec(m map[string]any) (map[string]any, error) {
	if err := onlyKeys("", m, "apiVersion", "kind", "metadata", "spec"); err != nil {
		return nil, err
	}
	meta, err := asMap("metadata", m["metadata"])
	if err != nil {
		return nil, err
	}
	if err := onlyKeys("metadata", meta, "name", "labels", "annotations"); err != nil {
		return nil, err
	}
	if _, ok := meta["name"].(string); !ok {
		return nil, fmt.Errorf("metadata.name is %T, want a string", meta["name"])
	}
	return asMap("spec", m["spec"])
}

// checkServiceMonitorFields accepts only the ServiceMonitor fields the chart
// is meant to render (a subset of monitoring.coreos.com/v1), with their
// types, so that a typo cannot slip through the untyped decode.
func checkServiceMonitorFields(m map[string]any) error {
	spec, err := customResourceSpec(m)
	if err != nil {
		return err
	}
	if err := onlyKeys("spec", spec, "selector", "endpoints", "namespaceSelector", "jobLabel"); err != nil {
		return err
	}
	selector, err := asMap("spec.selector", spec["selector"])
	if err != nil {
		return err
	}
	if err := onlyKeys("spec.selector", selector, "matchLabels"); err != nil {
		return err
	}
	if _, err := asStringMap("spec.selector.matchLabels", selector["matchLabels"]); err != nil {
		return err
	}
	endpoints, ok := spec["endpoints"].([]any)
	if !ok || len(endpoints) == 0 {
		return fmt.Errorf("spec.endpoints is %T (%v), want a non-empty list", spec["endpoints"], spec["endpoints"])
	}
	for i, e := range endpoints {
		path := fmt.Sprintf("spec.endpoints[%d]", i)
		ep, err := asMap(path, e)
		if err != nil {
			return err
		}
		if err := onlyKeys(path, ep, "port", "path", "scheme", "interval", "scrapeTimeout", "honorLabels", "relabelings", "metricRelabelings"); err != nil {
			return err
		}
		for _, k := range []string{"port", "path", "interval", "scrapeTimeout", "scheme"} {
			if v, ok := ep[k]; ok {
				if _, ok := v.(string); !ok {
					return fmt.Errorf("%s.%s is %T, want a string", path, k, v)
				}
			}
		}
		for _, k := range []string{"relabelings", "metricRelabelings"} {
			if v, ok := ep[k]; ok {
				if _, ok := v.([]any); !ok {
					return fmt.Errorf("%s.%s is %T, want a list", path, k, v)
				}
			}
		}
	}
	return nil
}

// checkPrometheusRuleFields accepts a PrometheusRule of
// monitoring.coreos.com/v1 with a name and a list of rule groups.
func checkPrometheusRuleFields(m map[string]any) error {
	spec, err := customResourceSpec(m)
	if err != nil {
		return err
	}
	if err := onlyKeys("spec", spec, "groups"); err != nil {
		return err
	}
	if groups, ok := spec["groups"].([]any); !ok || len(groups) == 0 {
		return fmt.Errorf("spec.groups is %T (%v), want a non-empty list", spec["groups"], spec["groups"])
	}
	return nil
}

func onlyKeys(path string, m map[string]any, allowed ...string) error {
	ok := map[string]bool{}
	for _, k := range allowed {
		ok[k] = true
	}
	var unknown []string
	for k := range m {
		if !ok[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("unknown field(s) %s in %q", strings.Join(unknown, ", "), path)
	}
	return nil
}

func asMap(path string, v any) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is %T, want an object", path, v)
	}
	return m, nil
}

func asStringMap(path string, v any) (map[string]string, error) {
	m, err := asMap(path, v)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, val := range m {
		s, ok := val.(string)
		if !ok {
			return nil, fmt.Errorf("%s.%s is %T, want a string", path, k, val)
		}
		out[k] = s
	}
	return out, nil
}

// objectsOf returns the rendered objects of one kind.
func objectsOf[T any](objs []object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.typed.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// only returns the single rendered object of one kind, failing otherwise.
func only[T any](t *testing.T, objs []object) T {
	t.Helper()
	all := objectsOf[T](objs)
	if len(all) != 1 {
		var zero T
		t.Fatalf("rendered %d objects of type %T, want 1", len(all), zero)
	}
	return all[0]
}

// serviceMonitors returns the rendered ServiceMonitors.
func serviceMonitors(objs []object) []map[string]any {
	var out []map[string]any
	for _, o := range objs {
		if o.kind == "ServiceMonitor" {
			out = append(out, o.typed.(map[string]any))
		}
	}
	return out
}
