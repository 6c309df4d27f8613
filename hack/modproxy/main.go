// Command modproxy writes a Go module proxy directory (the layout GOPROXY=file://DIR reads)
// that serves modules of this repository's working tree at given versions, so that
// hack/check-adapters.sh can build the adapters as a user would: with the workspace off,
// against the core as a normal, versioned dependency.
//
//	go run . -out DIR MODULE@VERSION=DIR ...
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

func main() {
	out := flag.String("out", "", "proxy `directory` to write")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: modproxy -out DIR MODULE@VERSION=DIR ...")
		os.Exit(2)
	}
	for _, arg := range flag.Args() {
		if err := add(*out, arg); err != nil {
			fmt.Fprintln(os.Stderr, "modproxy:", err)
			os.Exit(1)
		}
	}
}

// add writes MODULE@VERSION, made from the module in DIR, to the proxy at out.
func add(out, arg string) error {
	mv, dir, ok := strings.Cut(arg, "=")
	path, version, ok2 := strings.Cut(mv, "@")
	if !ok || !ok2 {
		return fmt.Errorf("%q: want MODULE@VERSION=DIR", arg)
	}
	m := module.Version{Path: path, Version: version}
	if err := module.Check(path, version); err != nil {
		return err
	}
	escaped, err := module.EscapePath(path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(out, escaped, "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, version+".mod"), gomod, 0o644); err != nil {
		return err
	}
	info := fmt.Sprintf("{\"Version\":%q,\"Time\":%q}\n", version, time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(vdir, version+".info"), []byte(info), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(vdir, version+".zip"))
	if err != nil {
		return err
	}
	if err := zip.CreateFromDir(f, m, dir); err != nil {
		_ = f.Close()
		return fmt.Errorf("zip %s from %s: %w", mv, dir, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return appendList(filepath.Join(vdir, "list"), version)
}

// appendList adds version to the proxy's list of versions of a module.
func appendList(path, version string) error {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	versions := strings.Fields(string(b))
	for _, v := range versions {
		if v == version {
			return nil
		}
	}
	versions = append(versions, version)
	sort.Strings(versions)
	return os.WriteFile(path, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}
