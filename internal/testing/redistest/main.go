package redistest

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Main runs the tests, benchmarks and examples of m with one redis-server started for the
// whole test binary, for Example functions, which get no testing.TB to start one: *addr is
// the server's address while m runs, and the server is killed (and its directory removed)
// when m is done. Call it from TestMain: os.Exit(redistest.Main(m, &redisAddr)).
//
// When redis-server is not on PATH, the examples are skipped (Main adds ^Example to
// -test.skip and says so on stderr) and the tests run as usual, skipping themselves; when CI
// or ELECTOR_REQUIRE_REDIS is set, Main fails instead, so that the examples run in CI or
// nothing passes. A -test.skip pattern with a slash cannot be extended this way: then the
// examples fail without redis-server.
func Main(m *testing.M, addr *string) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if env := requiredBy(); env != "" {
			fmt.Fprintf(os.Stderr, "redistest: redis-server not found on PATH, and %s is set: the examples cannot run\n", env)
			return 1
		}
		return skipExamples(m)
	}
	dir, err := os.MkdirTemp("", "redistest-main-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "redistest: %v\n", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	conf := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(conf, nil, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "redistest: write %s: %v\n", conf, err)
		return 1
	}
	s := &Server{name: "redis-server", bin: bin, dir: dir, logPath: filepath.Join(dir, "redis-server.log")}
	s.args = redisArgs(conf, dir, nil)
	if err := s.startFreshErr(); err != nil {
		fmt.Fprintf(os.Stderr, "redistest: start redis-server for the examples: %v\n", err)
		return 1
	}
	defer s.Stop()
	*addr = s.Addr()
	return m.Run()
}

// skipExamples runs m without its Example functions.
func skipExamples(m *testing.M) int {
	skip := "^Example"
	if f := flag.Lookup("test.skip"); f != nil {
		if old := f.Value.String(); old != "" {
			skip += "|" + old
		}
		if err := f.Value.Set(skip); err != nil {
			fmt.Fprintf(os.Stderr, "redistest: -test.skip=%s: %v\n", skip, err)
			return 1
		}
	}
	fmt.Fprintln(os.Stderr, "redistest: redis-server not found on PATH: skipping the examples (install redis-server, or set CI to fail instead)")
	return m.Run()
}
