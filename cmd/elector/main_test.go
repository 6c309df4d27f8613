package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// testCLI returns a cli whose output goes to buffers and whose environment is env.
func testCLI(env map[string]string) (*cli, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	return &cli{
		stdin:  nil,
		stdout: &stdout,
		stderr: &stderr,
		lookupEnv: func(name string) (string, bool) {
			v, ok := env[name]
			return v, ok
		},
		environ: func() []string {
			var kvs []string
			for k, v := range env {
				kvs = append(kvs, k+"="+v)
			}
			return kvs
		},
		hostname:   func() (string, error) { return "", errors.New("no host name in tests") },
		executable: os.Executable,
	}, &stdout, &stderr
}

// testRoot returns the command tree main builds for c, with its help command.
func testRoot(c *cli) *cobra.Command {
	root := c.newRoot(c.commands()...)
	root.InitDefaultHelpCmd()
	return root
}

// testCommand returns elector's command called name.
func testCommand(t *testing.T, name string) *cobra.Command {
	t.Helper()
	c, _, _ := testCLI(nil)
	for _, cmd := range testRoot(c).Commands() {
		if cmd.Name() == name {
			return cmd
		}
	}
	t.Fatalf("no command %s", name)
	return nil
}

// visibleFlags returns the long names of the flags a command shows, in its help or its
// documentation: all but the hidden ones and --help.
func visibleFlags(cmd *cobra.Command) []string {
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" {
			names = append(names, f.Name)
		}
	})
	return names
}

// TestDocsListEveryFlag keeps docs/CLI.md and the commands in step: every flag a command
// shows is documented with its environment variable, and every command and exit code has its
// place.
func TestDocsListEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	anchors := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		if title, ok := strings.CutPrefix(line, "## "); ok { // GitHub's anchor of a heading
			slug := strings.Map(func(r rune) rune {
				switch {
				case r == ' ':
					return '-'
				case r == '-' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
					return r
				}
				return -1
			}, strings.ToLower(title))
			anchors[slug] = true
		}
	}
	c, _, _ := testCLI(nil)
	root := testRoot(c)
	for _, cmd := range root.Commands() {
		if cmd.Hidden {
			continue
		}
		if !strings.Contains(doc, "elector "+cmd.Name()) {
			t.Errorf("docs/CLI.md does not mention elector %s", cmd.Name())
		}
		if !strings.Contains(doc, "elector "+cmd.Use) {
			t.Errorf("docs/CLI.md does not show the synopsis of the help, elector %s", cmd.Use)
		}
		if !anchors[docsAnchor(cmd.Name())] {
			t.Errorf("docs/CLI.md has no section #%s, which the help of elector %s links to", docsAnchor(cmd.Name()), cmd.Name())
		}
		for _, name := range visibleFlags(cmd) {
			flag := "`--" + name + "`"
			if name == "v" {
				flag = "`-v`"
			}
			env := "`" + envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "`"
			if !strings.Contains(doc, flag) {
				t.Errorf("docs/CLI.md does not document %s of elector %s", flag, cmd.Name())
			}
			if !strings.Contains(doc, env) {
				t.Errorf("docs/CLI.md does not name %s, the variable of %s", env, flag)
			}
		}
	}
	for _, s := range []string{"elector --version", "`--log-format`", "did you mean"} {
		if !strings.Contains(doc, s) {
			t.Errorf("docs/CLI.md does not mention %s", s)
		}
	}
	for _, code := range []string{"| 0 |", "| 1 |", "| 2 |", "| 3 |", "| N |"} {
		if !strings.Contains(doc, code) {
			t.Errorf("docs/CLI.md has no exit code row %q", code)
		}
	}
	for _, code := range []string{"  0  ", "  1  ", "  2  ", "  3  ", "  N  "} {
		if !strings.Contains(helpText(root), code) {
			t.Errorf("elector help has no exit code line %q", code)
		}
	}
	sidecarHelp := helpText(testCommand(t, "sidecar"))
	for _, endpoint := range []string{"/leader", "/healthz", "/readyz", "/metrics"} {
		if !strings.Contains(doc, "`GET "+endpoint+"`") || !strings.Contains(sidecarHelp, endpoint) {
			t.Errorf("endpoint %s is missing from docs/CLI.md or the help of sidecar", endpoint)
		}
	}
}

// TestFlagsFromEnvironment checks the precedence flag > environment > default in process.
func TestFlagsFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string // lease name after parsing
	}{
		{"default", nil, nil, ""},
		{"environment", map[string]string{"ELECTOR_LEASE_NAME": "from-env"}, nil, "from-env"},
		{"flag wins", map[string]string{"ELECTOR_LEASE_NAME": "from-env"}, []string{"--lease-name", "from-flag"}, "from-flag"},
		{"empty variable is unset", map[string]string{"ELECTOR_LEASE_NAME": ""}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, stderr := testCLI(tc.env)
			var co commonOptions
			probe := c.newCommand("probe", "", "", func(context.Context, *cobra.Command, []string) int { return exitOK })
			co.addFlags(probe)
			if code := c.execute(context.Background(), c.newRoot(probe), append([]string{"probe"}, tc.args...)); code != exitOK {
				t.Fatalf("parse: exit code %d, stderr %s", code, stderr)
			}
			if co.lease.name != tc.want {
				t.Errorf("lease name %q, want %q", co.lease.name, tc.want)
			}
		})
	}
}

func TestIdentityDefault(t *testing.T) {
	c, _, _ := testCLI(map[string]string{"POD_NAME": "pod-7"})
	o := leaseOptions{}
	if err := o.complete(c); err != nil || o.identity != "pod-7" {
		t.Errorf("identity %q, %v; want $POD_NAME", o.identity, err)
	}
	c.hostname = func() (string, error) { return "host-1", nil }
	c.lookupEnv = func(string) (string, bool) { return "", false }
	o = leaseOptions{}
	if err := o.complete(c); err != nil || o.identity != "host-1" {
		t.Errorf("identity %q, %v; want the host name", o.identity, err)
	}
	o = leaseOptions{identity: "given"}
	if err := o.complete(c); err != nil || o.identity != "given" {
		t.Errorf("identity %q, %v; want --identity", o.identity, err)
	}
	c.hostname = func() (string, error) { return "", errors.New("boom") }
	o = leaseOptions{}
	if err := o.complete(c); err == nil || !strings.Contains(err.Error(), "--identity") {
		t.Errorf("no identity at all: %v", err)
	}
}

// Flags before the command are the command's flags, as kubectl and etcdctl accept them; a
// flag's value that names a command is still a value.
func TestCommandFirst(t *testing.T) {
	c, _, _ := testCLI(nil)
	for _, tt := range []struct {
		args []string
		want []string // nil: not accepted
	}{
		{[]string{"--redis-addr=h:1", "status", "-o", "json"}, []string{"status", "--redis-addr=h:1", "-o", "json"}},
		{[]string{"--redis-addr", "h:1", "status"}, []string{"status", "--redis-addr", "h:1"}},
		{[]string{"--lease-name", "run", "status"}, []string{"status", "--lease-name", "run"}},
		{[]string{"--exit-on-lost", "run", "--", "true"}, []string{"run", "--exit-on-lost", "--", "true"}},
		{[]string{"-o", "yaml", "status", "--all"}, []string{"status", "-o", "yaml", "--all"}},
		{[]string{"--bogus", "status"}, nil},
		{[]string{"--lease-name", "x"}, nil},
		{[]string{"--", "status"}, nil},
	} {
		got, ok := c.commandFirst(tt.args)
		if !ok {
			got = nil
		}
		if strings.Join(got, " ") != strings.Join(tt.want, " ") || (got == nil) != (tt.want == nil) {
			t.Errorf("commandFirst(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

// An argument to a command that takes only flags is a usage error; a lease name gets
// --lease-name suggested where the command has it.
func TestOnlyFlagsSuggestsLeaseName(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "nightly"}, `unexpected argument "nightly": elector status takes only flags; did you mean --lease-name=nightly?`},
		{[]string{"resign", "nightly"}, `did you mean --lease-name=nightly?`},
		{[]string{"sidecar", "nightly"}, `did you mean --lease-name=nightly?`},
		{[]string{"status", "a b"}, `unexpected argument "a b": elector status takes only flags (see`},
		{[]string{"demo", "x"}, `unexpected argument "x": elector demo takes only flags (see`},
	} {
		c, _, stderr := testCLI(nil)
		if code := c.main(context.Background(), tt.args); code != exitUsage || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("elector %q: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr, exitUsage, tt.want)
		}
	}
}

// The rows of status --watch stand under its header whatever comes later: each row is
// printed alone, as its change comes (issue 28 item 13: a tabwriter flushed per row sized
// each row's columns on that row only).
func TestWatchRowsAligned(t *testing.T) {
	c, stdout, _ := testCLI(nil)
	w := &statusWatcher{c: c, text: true, holderWidth: 20}
	rows := [][6]string{
		{"TIME", "EVENT", "HOLDER", "TOKEN", "TTL", "ACQUIRED"},
		{"18:41:02.626", "held", "billing-7d9f8-x2x4q", "1764441600123456", "13.744s", "2025-11-29T18:40:00.123456Z"},
		{"18:41:02.700", "held", "c", "1764441600123457", "1h2m3.456s", "2025-11-29T18:40:00.123457Z"},
		{"18:41:09.101", "released", "a", "7", "0s", "-"},
		{"18:41:09.102", "acquired", "b", "1764441669102001", "15s", "2025-11-29T18:41:09.102001Z"},
	}
	for _, r := range rows {
		if err := w.row(r[0], r[1], r[2], r[3], r[4], r[5]); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	header := lines[0]
	for i, l := range lines[1:] {
		for j, col := range rows[0][1:] {
			at := strings.Index(header, col)
			if l[at-2:at] != "  " || l[at] == ' ' {
				t.Errorf("row %d: column %d (%s) does not start at offset %d:\n%s\n%s", i+1, j+1, col, at, header, l)
			}
		}
	}
}

// An ELECTOR_* variable that no flag reads is a usage error naming it and the closest known
// one (ELECTOR_LEASE_NAMEE=x was once ignored in silence); the variables run gives its
// command, the tests' ELECTOR_REQUIRE_REDIS and Kubernetes' service links are not settings
// and pass.
func TestUnknownEnvironment(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string // "" for no usage error
	}{
		{map[string]string{"ELECTOR_LEASE_NAMEE": "x"}, "elector status: unknown environment variable ELECTOR_LEASE_NAMEE: no flag reads it; did you mean ELECTOR_LEASE_NAME? (see 'elector status --help')"},
		{map[string]string{"ELECTOR_REDIS_ADR": "h:1"}, "did you mean ELECTOR_REDIS_ADDR?"},
		{map[string]string{"ELECTOR_NOTHING_LIKE_IT": "1"}, "unknown environment variable ELECTOR_NOTHING_LIKE_IT: no flag reads it (see"},
		{map[string]string{"ELECTOR_HTTP_PORT": "8080"}, "unknown environment variable ELECTOR_HTTP_PORT"},
		{map[string]string{"ELECTOR_FENCING_TOKEN": "7", "ELECTOR_IDENTITY": "a"}, ""},
		{map[string]string{"ELECTOR_REQUIRE_REDIS": "1"}, ""}, // CI's test switch, in every test's environment
		{map[string]string{"ELECTOR_STOP_SIGNAL": "TERM", "ELECTOR_HTTP_ADDR": ":1", "ELECTOR_LOGTOSTDERR": "true"}, ""},
		{map[string]string{"ELECTOR_SERVICE_HOST": "10.0.0.1", "ELECTOR_SERVICE_PORT_HTTP": "8080", "ELECTOR_PORT": "tcp://10.0.0.1:8080",
			"ELECTOR_PORT_8080_TCP": "tcp://10.0.0.1:8080", "ELECTOR_PORT_8080_TCP_ADDR": "10.0.0.1", "ELECTOR_REDIS_PORT_6379_TCP_PROTO": "tcp"}, ""},
	} {
		c, _, stderr := testCLI(tt.env)
		code := c.main(context.Background(), []string{"status", "--lease-name", "a b"}) // a usage error of its own after the environment
		if tt.want == "" {
			if !strings.Contains(stderr.String(), "--lease-name") {
				t.Errorf("%v: refused: %s", tt.env, stderr)
			}
			continue
		}
		if code != exitUsage || !strings.Contains(stderr.String(), tt.want) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tt.env, code, stderr, tt.want)
		}
	}
}
