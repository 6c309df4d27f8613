#!/usr/bin/env bash
# hack/mutants.sh [NAME...]: every mutant of test/mutants (or the ones named) must be caught.
#
# A mutant is a known bug kept as a patch, test/mutants/NAME.patch, never as a switch in the
# product: its header says what it re-introduces and which tests catch it:
#
#   Mutant: the one-line bug it puts back
#   Caught-by: PACKAGE TEST-REGEX [ENV=VALUE ...]
#   (free text)
#   diff --git a/... b/...
#
# For each one this script copies the work tree (tracked and untracked files, not ignored
# ones) to a temporary folder, applies the patch there with git apply, and runs
# `go test -trimpath -count=1 -run TEST-REGEX PACKAGE` in the copy with the ENV given (with
# -trimpath the copy's path is not in the build cache's keys, so the packages a patch leaves
# alone are compiled once for all the mutants, not once per copy): the mutant is
# caught when that test fails. A patch that no longer applies fails the run, as does a
# mutant that survives, and so does one whose copy does not build (a test must fail: a
# '--- FAIL' line). The tree itself is never touched.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
GO=${GO:-go}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ $# -gt 0 ]]; then
	patches=()
	for n in "$@"; do patches+=("test/mutants/${n%.patch}.patch"); done
else
	mapfile -t patches < <(ls test/mutants/*.patch)
fi

fail=0
for p in "${patches[@]}"; do
	name=$(basename "$p" .patch)
	[[ -f $p ]] || { echo "FAIL $name: no such mutant ($p)"; fail=1; continue; }
	what=$(sed -n 's/^Mutant: //p' "$p" | head -1)
	caught=$(sed -n 's/^Caught-by: //p' "$p" | head -1)
	read -r pkg regex envs <<<"$caught"
	if [[ -z $pkg || -z $regex ]]; then
		echo "FAIL $name: no 'Caught-by: PACKAGE TEST-REGEX' line"; fail=1; continue
	fi
	copy="$work/$name"
	mkdir -p "$copy"
	git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$copy"
	if ! (cd "$copy" && git apply --unidiff-zero "$root/$p") 2>"$copy.apply"; then
		echo "FAIL $name: the patch does not apply:"; cat "$copy.apply"; fail=1; continue
	fi
	start=$SECONDS
	# shellcheck disable=SC2086 # envs is a list of VAR=value words
	if (cd "$copy" && env ${envs:-} "$GO" test -trimpath -count=1 -timeout 30m -run "$regex" "$pkg") >"$copy.log" 2>&1; then
		echo "FAIL $name ($what): survived: $pkg -run '$regex' passed with the bug in ($((SECONDS - start)) s)"
		tail -n 20 "$copy.log"
		fail=1
	elif ! grep -q -e '^\s*--- FAIL: ' "$copy.log"; then
		echo "FAIL $name ($what): no test failed (the copy did not build or the test did not run):"
		tail -n 20 "$copy.log"
		fail=1
	else
		echo "ok   $name ($what): caught by $pkg -run '$regex' ($((SECONDS - start)) s)"
		grep -E -m 3 -e '^\s+\S+_test\.go:[0-9]+: ' "$copy.log" | sed 's/^/       /' || true
	fi
	rm -rf "$copy"
done
exit $fail
