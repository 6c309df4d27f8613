// Package serverbin finds the Redis-compatible server programs that tests and benchmarks start:
// the server, Sentinel and the command-line client, of Redis (redis-*) or Valkey (valkey-*).
//
// An environment variable names each program (a path, or a name looked up on PATH):
// ELECTOR_REDIS_SERVER, ELECTOR_REDIS_SENTINEL and ELECTOR_REDIS_CLI. Without them the server
// is redis-server on PATH, else valkey-server; Sentinel and the client are the programs of the
// same family in the server's directory (redis-server beside redis-sentinel and redis-cli,
// valkey-server beside valkey-sentinel and valkey-cli) or, when the server was found on PATH,
// those of its family on PATH: naming only the server never mixes two releases. Sentinel may also be absent: then the server
// runs as a sentinel with --sentinel (Lookup returns that argument).
//
// The package does not import testing, so that programs (the benchmark) use it too.
package serverbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Environment variables that name the programs.
const (
	EnvServer   = "ELECTOR_REDIS_SERVER"
	EnvSentinel = "ELECTOR_REDIS_SENTINEL"
	EnvCLI      = "ELECTOR_REDIS_CLI"
)

// families are the program name prefixes, in the order they are looked for on PATH.
var families = []string{"redis", "valkey"}

// ErrNotFound is wrapped by the errors of a program that is not installed (as opposed to one
// that an environment variable names wrongly, which is a configuration error).
var ErrNotFound = errors.New("not found")

// Server returns the path of the server program (see the package comment).
func Server() (string, error) {
	p, _, err := server()
	return p, err
}

// server is Server, and whether the environment named it.
func server() (path string, named bool, err error) {
	if p, set, err := fromEnv(EnvServer); set {
		return p, true, err
	}
	for _, f := range families {
		if p, err := exec.LookPath(f + "-server"); err == nil {
			return p, false, nil
		}
	}
	return "", false, fmt.Errorf("redis-server (or valkey-server) %w on PATH and %s is not set", ErrNotFound, EnvServer)
}

// Sentinel returns the program that runs Sentinel and the arguments that make it one: the
// sentinel program of the server's family with no arguments, or the server with --sentinel.
func Sentinel() (path string, args []string, err error) {
	if p, set, err := fromEnv(EnvSentinel); set {
		return p, nil, err
	}
	srv, named, err := server()
	if err != nil {
		return "", nil, err
	}
	if p, ok := sibling(srv, named, "sentinel"); ok {
		return p, nil, nil
	}
	return srv, []string{"--sentinel"}, nil
}

// CLI returns the path of the command-line client of the server's family.
func CLI() (string, error) {
	if p, set, err := fromEnv(EnvCLI); set {
		return p, err
	}
	srv, named, err := server()
	if err != nil {
		return "", err
	}
	if p, ok := sibling(srv, named, "cli"); ok {
		return p, nil
	}
	where := "beside it or on PATH"
	if named {
		where = "beside it"
	}
	return "", fmt.Errorf("the client of %s (%s-cli) %w %s and %s is not set",
		srv, family(srv), ErrNotFound, where, EnvCLI)
}

// fromEnv resolves the program named by the environment variable env. set reports whether the
// variable is set; a name that does not resolve to an executable is an error naming env.
func fromEnv(env string) (path string, set bool, err error) {
	v := os.Getenv(env)
	if v == "" {
		return "", false, nil
	}
	p, err := exec.LookPath(v)
	if err != nil {
		return "", true, fmt.Errorf("%s=%q: not an executable program: %w", env, v, err)
	}
	return p, true, nil
}

// family returns "redis" or "valkey" for a server program named <family>-server, else "redis".
func family(server string) string {
	base := filepath.Base(server)
	for _, f := range families {
		if strings.HasPrefix(base, f+"-") {
			return f
		}
	}
	return "redis"
}

// sibling finds the program <family>-<role> of server's family in server's directory, else,
// unless the environment named the server, on PATH.
func sibling(server string, named bool, role string) (string, bool) {
	name := family(server) + "-" + role
	p := filepath.Join(filepath.Dir(server), name)
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return p, true
	}
	if named {
		return "", false
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	return "", false
}
