package k8s

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestEveryCombinationDryRun (issue 48 item 6): every combination of the chart's feature
// switches (leaderLabel with its admission policy and leader Service, events, mirrorLease,
// networkPolicy, the workload kind) in every form of the elector (native or plain sidecar, run
// mode, run mode on a schedule) renders objects the API server accepts: `helm template`,
// `helm test`'s pod included, applied with `kubectl apply --dry-run=server`, which runs the
// server's validation and admission without storing anything. test/helm decodes the same
// renders strictly; this is the server's own word on them.
func TestEveryCombinationDryRun(t *testing.T) {
	sideBySide(t)
	ctx := context.Background()
	const ns = "dryrun"
	if _, err := e.c.Kubectl(ctx, "create", "namespace", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.c.Kubectl(context.Background(), "delete", "namespace", ns, "--wait=false") })
	switches := [][]string{
		{"--set", "leaderLabel.enabled=true", "--set", "leaderLabel.admissionPolicy=true", "--set", "leaderService.enabled=true"},
		{"--set", "events.enabled=true"},
		{"--set", "mirrorLease.enabled=true"},
		{"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.egress.enabled=true",
			"--set", "app.ports[0].name=http", "--set", "app.ports[0].containerPort=8000"},
		{"--set", "workload.kind=StatefulSet"},
	}
	forms := map[string][]string{
		"native": nil,
		"plain":  {"--set", "sidecar.native=false"},
		// run mode's kill grace within the bound of the e2e's short lease (4s - 3s - 42ms).
		"run":      {"--set", "mode=run", "--set", "run.killGrace=500ms", "--set", "app.command[0]=sleep", "--set", "app.args[0]=infinity"},
		"schedule": {"--set", "mode=run", "--set", "run.killGrace=500ms", "--set", "app.command[0]=/bin/true", "--set", "schedule.spec=@hourly"},
	}
	chart := filepath.Join(e.repo, "charts", "elector")
	dir := t.TempDir()
	n := 0
	for form, formArgs := range forms {
		for set := 0; set < 1<<len(switches); set++ {
			args := append([]string{"template", "dry", chart, "--namespace", ns}, e.baseValues()...)
			args = append(args, formArgs...)
			for i, s := range switches {
				if set&(1<<i) != 0 {
					args = append(args, s...)
				}
			}
			name := fmt.Sprintf("%s-set%02d", form, set)
			// stdout only: helm logs to stderr (a symbolic link's INFO line), not YAML.
			cmd := exec.CommandContext(ctx, e.helm, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			manifest, err := cmd.Output()
			if err != nil {
				t.Errorf("%s: helm template: %v: %s", name, err, stderr.String())
				continue
			}
			p := filepath.Join(dir, name+".yaml")
			if err := os.WriteFile(p, manifest, 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := e.c.Kubectl(ctx, "apply", "--dry-run=server", "-n", ns, "-f", p); err != nil {
				t.Errorf("%s: the API server refused the render: %v\n%s", name, err, out)
			}
			n++
		}
	}
	t.Logf("%d combinations rendered and accepted by the API server (dry run)", n)
	e.figure("chart_combinations_dry_run", n)
}
