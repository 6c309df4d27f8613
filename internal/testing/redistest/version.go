package redistest

import (
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"sync"
	"testing"
)

// versions caches what `SERVER --version` said, by program path: each program is asked once per
// test binary.
var versions sync.Map // path -> serverVersion

type serverVersion struct {
	name, version string
	err           error
}

// versionRE matches `redis-server --version` ("Redis server v=7.2.6 sha=...") and
// `valkey-server --version` ("Valkey server v=8.0.1 sha=...").
var versionRE = regexp.MustCompile(`^(\w+) server v=(\S+)`)

// ServerVersion returns the name ("Redis" or "Valkey") and version (e.g. "7.2.6") of the server
// program that Start runs (ServerPath), as its --version reports them. It skips or fails like
// ServerPath when no server is installed.
func ServerVersion(t testing.TB) (name, version string) {
	t.Helper()
	v := programVersion(ServerPath(t))
	if v.err != nil {
		t.Fatal(v.err)
	}
	return v.name, v.version
}

func programVersion(path string) serverVersion {
	if v, ok := versions.Load(path); ok {
		return v.(serverVersion)
	}
	var v serverVersion
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		v.err = fmt.Errorf("%s --version: %w", path, err)
	} else if m := versionRE.FindSubmatch(out); m == nil {
		v.err = fmt.Errorf("%s --version: unexpected output %q", path, out)
	} else {
		v.name, v.version = string(m[1]), string(m[2])
	}
	versions.Store(path, v)
	return v
}

// logStarted writes the line from which hack/compat tells which modes a test exercised against
// which server: "redistest: started MODE (SERVER VERSION)". Benchmarks print every log line, so
// they get none.
func logStarted(t testing.TB, mode, bin, addr string) {
	t.Helper()
	if _, ok := t.(*testing.B); ok {
		return
	}
	v := programVersion(bin)
	if v.err != nil {
		t.Logf("redistest: started %s (unknown unknown) on %s: %v", mode, addr, v.err)
		return
	}
	t.Logf("redistest: started %s (%s %s) on %s", mode, v.name, v.version, addr)
}

// standaloneMode is "tls" for a server started with a TLS port, else "standalone".
func standaloneMode(args []string) string {
	if slices.Contains(args, "--tls-port") {
		return "tls"
	}
	return "standalone"
}
