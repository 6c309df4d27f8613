#!/bin/sh
# apicount.sh: count the exported identifiers of Go packages, as `go doc -all` lists them:
# functions, methods, types, constants, variables, struct fields and interface methods.
# Usage: hack/apicount.sh [-v] [package...]   (default: ./pkg/election ./pkg/lease ./pkg/fence)
# -v lists every identifier counted, one per line, so that two runs can be diffed.
set -eu
verbose=0
if [ "${1:-}" = -v ]; then verbose=1; shift; fi
[ $# -gt 0 ] || set -- ./pkg/election ./pkg/lease ./pkg/fence
for pkg in "$@"; do
	go doc -all "$pkg" | awk -v pkg="$pkg" -v verbose="$verbose" '
	function add(kind, name) { n[kind]++; total++; if (verbose) print pkg, kind, name }
	# names at the start of an indented line: "A, B T" or "A T" or "A" (embedded)
	function names(kind, owner, line,   s, parts, i) {
		if (owner != "") owner = owner "."
		s = line; sub(/^\t/, "", s)
		if (s !~ /^[A-Z]/) return
		sub(/[ \t(=].*$/, "", s)
		if (line ~ /^\t[A-Z][A-Za-z0-9_]*(, [A-Z][A-Za-z0-9_]*)+ /) {
			s = line; sub(/^\t/, "", s); sub(/ [^,]*$/, "", s)
			split(s, parts, ", ")
			for (i in parts) add(kind, owner parts[i])
			return
		}
		add(kind, owner s)
	}
	block != "" && /^[)}]/ { block = ""; next }
	block != "" { if ($0 ~ /^\t[A-Z]/) names(block, (block == "const" || block == "var") ? "" : typ, $0); next }
	/^func \(/ {
		r = $0; sub(/^func \([^ ]* \*?/, "", r); sub(/\).*/, "", r)
		s = $0; sub(/^func \([^)]*\) /, "", s); sub(/\(.*/, "", s); add("method", r "." s); next
	}
	/^func / { s = $2; sub(/\(.*/, "", s); add("func", s); next }
	/^type [A-Z]/ {
		add("type", $2); typ = $2
		if ($0 ~ /struct \{$/) block = "field"
		else if ($0 ~ /interface \{$/) block = "method"
		next
	}
	/^(const|var) \($/ { block = $1; next }
	/^(const|var) [A-Z]/ { add($1, $2); next }
	END {
		printf "%s: %d exported identifiers (func %d, method %d, type %d, const %d, var %d, field %d)\n",
			pkg, total, n["func"], n["method"], n["type"], n["const"], n["var"], n["field"]
	}'
done
