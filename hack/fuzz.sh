#!/usr/bin/env bash
# fuzz.sh PKG TARGET FUZZTIME: runs the fuzz target TARGET of the package directory PKG (./pkg/lease)
# for FUZZTIME (a count, 30000x), as make fuzz-smoke does for each target.
#
# One failure is not a finding: Go's fuzz coordinator reports "fuzzing process hung or
# terminated unexpectedly" when a worker process stops answering it, which a worker starved of
# CPU on a loaded machine does (golang/go#52569), and writes the input it was working on as a
# "failing input". Such a failure is checked by replaying that input (go test -run TARGET/ID,
# bounded): a real crasher or hang fails again and fails this script; an input that passes is
# removed and the target runs again, up to three runs in all. Any other failure fails at once.
set -euo pipefail
pkg=$1 target=$2 fuzztime=$3
GO=${GO:-go}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
tries=3
for ((try = 1; try <= tries; try++)); do
	if "$GO" test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$out"; then
		exit 0
	fi
	((try < tries)) || break
	grep -q 'fuzzing process hung or terminated unexpectedly' "$out" || break
	input=$(grep -o "Failing input written to testdata/fuzz/$target/[0-9a-f]*" "$out" | head -n 1)
	input=${input#Failing input written to }
	[[ -n $input && -f $pkg/$input ]] || break
	if ! "$GO" test -count=1 -timeout 2m -run "^$target/${input##*/}\$" "$pkg"; then
		echo "fuzz.sh: $target: the input $pkg/$input fails when replayed: a crasher" >&2
		exit 1
	fi
	echo "fuzz.sh: $target: the worker stopped answering, but the input it was given ($pkg/$input) passes when replayed: a worker starved on a loaded machine (golang/go#52569), not a crasher; removing it and fuzzing $target again" >&2
	rm -f "$pkg/$input"
done
exit 1
