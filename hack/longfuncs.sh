#!/bin/sh
# longfuncs.sh: the longest functions and methods of the non-test Go files under the given
# directories, in lines from `func` to its closing brace (function literals count towards the
# declaration that contains them). Usage: hack/longfuncs.sh [-n N] [dir...]
# (default: the top ten in ./pkg and ./cmd).
set -eu
n=10
if [ "${1:-}" = -n ]; then n=$2; shift 2; fi
[ $# -gt 0 ] || set -- ./pkg ./cmd
find "$@" -name '*.go' ! -name '*_test.go' | sort | xargs awk '
	# a declaration starts with "func" in column 0 and ends at the first "}" in column 0
	/^func / {
		name = $0
		sub(/^func /, "", name)
		if (name ~ /^\(/) { r = name; sub(/^\([^ ]* \*?/, "", r); sub(/\).*/, "", r); sub(/^\([^)]*\) /, "", name); name = r "." name }
		sub(/[\[(].*/, "", name)
		start = FNR; file = FILENAME
		if ($0 ~ /}$/) { print 1, file ":" start, name; start = 0 }
		next
	}
	start && /^}/ { print FNR - start + 1, file ":" start, name; start = 0 }
' | sort -k1,1nr -k2 | head -n "$n"
