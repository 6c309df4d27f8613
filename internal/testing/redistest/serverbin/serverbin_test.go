package serverbin

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// programs writes executable files named names into a new directory and returns it.
func programs(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// isolate clears the variables of the package and sets PATH to dirs.
func isolate(t *testing.T, dirs ...string) {
	t.Helper()
	t.Setenv(EnvServer, "")
	t.Setenv(EnvSentinel, "")
	t.Setenv(EnvCLI, "")
	t.Setenv("PATH", strings.Join(dirs, string(os.PathListSeparator)))
}

type found struct {
	server, sentinel, cli string
	sentinelArgs          []string
}

func lookupAll(t *testing.T) found {
	t.Helper()
	var f found
	var err error
	if f.server, err = Server(); err != nil {
		t.Fatalf("Server: %v", err)
	}
	if f.sentinel, f.sentinelArgs, err = Sentinel(); err != nil {
		t.Fatalf("Sentinel: %v", err)
	}
	if f.cli, err = CLI(); err != nil {
		t.Fatalf("CLI: %v", err)
	}
	return f
}

func TestRedisBeforeValkeyOnPath(t *testing.T) {
	valkey := programs(t, "valkey-server", "valkey-sentinel", "valkey-cli")
	redis := programs(t, "redis-server", "redis-sentinel", "redis-cli")
	isolate(t, valkey, redis)
	f := lookupAll(t)
	if f.server != filepath.Join(redis, "redis-server") || f.sentinel != filepath.Join(redis, "redis-sentinel") ||
		f.cli != filepath.Join(redis, "redis-cli") || f.sentinelArgs != nil {
		t.Errorf("with redis-* and valkey-* on PATH: %+v, want redis-* of %s", f, redis)
	}
}

func TestValkeyOnly(t *testing.T) {
	valkey := programs(t, "valkey-server", "valkey-sentinel", "valkey-cli")
	isolate(t, valkey)
	f := lookupAll(t)
	if f.server != filepath.Join(valkey, "valkey-server") || f.sentinel != filepath.Join(valkey, "valkey-sentinel") ||
		f.cli != filepath.Join(valkey, "valkey-cli") {
		t.Errorf("with only valkey-* on PATH: %+v", f)
	}
}

// A server named by the environment takes its sentinel and client from its own directory, never
// from PATH (another release); without a sentinel program there it runs with --sentinel.
func TestNamedServerNeverMixesReleases(t *testing.T) {
	onPath := programs(t, "redis-server", "redis-sentinel", "redis-cli")
	built := programs(t, "valkey-server", "valkey-cli")
	isolate(t, onPath)
	t.Setenv(EnvServer, filepath.Join(built, "valkey-server"))
	f := lookupAll(t)
	if f.server != filepath.Join(built, "valkey-server") || f.cli != filepath.Join(built, "valkey-cli") {
		t.Errorf("server and client = %q, %q; want those of %s", f.server, f.cli, built)
	}
	if f.sentinel != f.server || !slices.Equal(f.sentinelArgs, []string{"--sentinel"}) {
		t.Errorf("sentinel = %q %q, want the named server with --sentinel", f.sentinel, f.sentinelArgs)
	}

	noCLI := programs(t, "redis-server")
	t.Setenv(EnvServer, filepath.Join(noCLI, "redis-server"))
	if p, err := CLI(); err == nil || !errors.Is(err, ErrNotFound) {
		t.Errorf("CLI beside a named server without one = %q, %v; want ErrNotFound, not PATH's", p, err)
	}
	t.Setenv(EnvCLI, filepath.Join(onPath, "redis-cli"))
	if p, err := CLI(); err != nil || p != filepath.Join(onPath, "redis-cli") {
		t.Errorf("CLI with %s set = %q, %v", EnvCLI, p, err)
	}
}

// A variable that names a missing program is a configuration error naming the variable, not
// "not installed" (which tests turn into a skip).
func TestMisnamedProgram(t *testing.T) {
	isolate(t, programs(t, "redis-server", "redis-sentinel", "redis-cli"))
	for _, env := range []string{EnvServer, EnvSentinel, EnvCLI} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "/nonexistent/redis-thing")
			var err error
			switch env {
			case EnvServer:
				_, err = Server()
			case EnvSentinel:
				_, _, err = Sentinel()
			case EnvCLI:
				_, err = CLI()
			}
			if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), env+`="/nonexistent/redis-thing"`) {
				t.Errorf("err = %v; want a configuration error naming %s", err, env)
			}
		})
	}
}

func TestNothingInstalled(t *testing.T) {
	isolate(t, t.TempDir())
	if _, err := Server(); !errors.Is(err, ErrNotFound) {
		t.Errorf("Server with an empty PATH: %v, want ErrNotFound", err)
	}
	if _, _, err := Sentinel(); !errors.Is(err, ErrNotFound) {
		t.Errorf("Sentinel with an empty PATH: %v, want ErrNotFound", err)
	}
	if _, err := CLI(); !errors.Is(err, ErrNotFound) {
		t.Errorf("CLI with an empty PATH: %v, want ErrNotFound", err)
	}
}
