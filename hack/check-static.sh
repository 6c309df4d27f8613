#!/usr/bin/env bash
# Fails unless BINARY is a statically linked Go binary built with
# CGO_ENABLED=0, as the distroless/static image needs.
#
# Usage: hack/check-static.sh BINARY
#
# Needs only the Go toolchain (no `file`, no binutils), so it works on a fresh
# machine and in CI. Checks:
#   1. `go version -m` reports the build setting CGO_ENABLED=0;
#   2. for an ELF binary: no PT_INTERP program header (no dynamic loader) and
#      no DT_NEEDED entry (no shared library), read with Go's debug/elf.
set -euo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 BINARY" >&2
	exit 2
fi
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
if [[ ! -f "$bin" ]]; then
	echo "check-static: $bin: no such file" >&2
	exit 1
fi

buildinfo=$(go version -m "$bin") || {
	echo "check-static: $bin: not a Go binary (go version -m failed)" >&2
	exit 1
}
if ! grep -Eq '^[[:space:]]+build[[:space:]]+CGO_ENABLED=0$' <<<"$buildinfo"; then
	echo "check-static: $bin was not built with CGO_ENABLED=0:" >&2
	grep -E 'CGO_ENABLED' <<<"$buildinfo" >&2 || echo "  (no CGO_ENABLED build setting recorded)" >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/main.go" <<'GO'
// Command elfcheck exits non-zero unless its argument is an ELF file that
// needs no dynamic loader and no shared library. Non-ELF files (a darwin or
// windows build) pass: the CGO_ENABLED=0 check is what covers them.
package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := check(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "check-static: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func check(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			fmt.Printf("check-static: %s: not ELF, skipped the dynamic-linking check\n", path)
			return nil
		}
		return fmt.Errorf("open: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("has a PT_INTERP program header: it needs a dynamic loader")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("read DT_NEEDED: %w", err)
	}
	if len(libs) > 0 {
		return fmt.Errorf("needs shared libraries %v", libs)
	}
	return nil
}
GO
# Run outside any module, with the host toolchain, whatever GOOS/GOARCH the
# binary was built for.
(cd "$tmp" && GOOS= GOARCH= GOFLAGS= GO111MODULE=on go run ./main.go "$bin")
echo "check-static: $bin: static (built with CGO_ENABLED=0, needs no loader or shared library)"
