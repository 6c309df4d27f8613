// Package helm tests the elector Helm chart in charts/elector without a
// cluster: it lints the chart, renders it with the Helm library the way
// `helm template` does, decodes every rendered object strictly into its
// k8s.io/api type, checks what the chart promises, runs every helm command
// the documentation shows, loads and evaluates the chart's alerts with
// Prometheus's rule packages, and keeps the plain manifests in
// examples/kubernetes and the values table of the chart's README equal to
// what the chart renders and what values.yaml documents.
//
// It is a module of its own so that Helm, k8s.io/api and Prometheus stay out
// of the elector module. Run it with `go test ./...` in this directory;
// regenerate the examples and the README's values table with
// `go test -run 'TestExamples|TestChartReadme' -update`.
package helm
