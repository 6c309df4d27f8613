// Package helm tests the elector Helm chart in charts/elector without a
// cluster: it lints the chart, renders it with the Helm library the way
// `helm template` does, decodes every rendered object strictly into its
// k8s.io/api type, checks what the chart promises, and keeps the plain
// manifests in examples/kubernetes equal to what the chart renders.
//
// It is a module of its own so that Helm and k8s.io/api stay out of the
// elector module. Run it with `go test ./...` in this directory; regenerate
// the examples with `go test -run TestExamples -update`.
package helm
