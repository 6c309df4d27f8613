#!/usr/bin/env bash
# hack/housestats.sh [COMMIT]: the size of the house at COMMIT (default: the work tree's HEAD),
# as the renovation measures it: lines of product code (Go outside _test.go files, and Lua;
# no tests, testdata, docs or examples) per top-level folder, the packages under internal/,
# mutation switches left in product code, the files of one Elector term, the docs' lines and
# each command's --help length.
#
#   hack/housestats.sh 000558e; hack/housestats.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-HEAD}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git archive "$rev" | tar -x -C "$work"
cd "$work"
product() { find "$@" -type f \( -name '*.go' ! -name '*_test.go' -o -name '*.lua' \) ! -path '*/testdata/*' 2>/dev/null; }
echo "== $rev: product lines per top-level folder (Go without tests, Lua)"
total=0
for d in */; do
	d=${d%/}
	case $d in docs | examples | test) continue ;; esac
	n=$(product "$d" | xargs -r cat | wc -l)
	((n > 0)) || continue
	printf '%-10s %6d\n' "$d" "$n"
	total=$((total + n))
done
printf '%-10s %6d\n' total "$total"
pkgs() { product "$1" | grep '\.go$' | xargs -r -n1 dirname | sort -u; }
echo "== packages under internal/: $(pkgs internal | grep -vc '^internal/testing' || true) shared, $(pkgs internal | grep -c '^internal/testing' || true) test support"
echo "== mutation switch sites in product code: $(product . | grep -v mutant_o | xargs -r grep -hoE '\bmutant[A-Za-z]*\(' | wc -l)"
echo "== cmd/elector: $(product cmd/elector -maxdepth 1 | xargs -r cat | wc -l) lines in package main, $(product cmd/elector/internal | xargs -r cat | wc -l) in cmd/elector/internal"
# The files one Elector term is read in (Run, campaign, acquire, lead, renew, release): a fixed
# list, each checked to exist at $rev.
term=(pkg/election/elector.go pkg/election/term.go internal/leasekit/lease.go pkg/lease/lease.go)
echo "== files to follow one Elector term: ${#term[@]}: ${term[*]}$(for f in "${term[@]}"; do [[ -f $f ]] || printf ' (%s missing)' "$f"; done)"
echo "== docs/*.md: $(cat docs/*.md | wc -l) lines; README.md: $(wc -l <README.md)"
echo "== --help lines per command"
go build -o "$work/elector" ./cmd/elector 2>/dev/null || { echo "(does not build here)"; exit 0; }
for c in run sidecar status resign demo; do
	printf '%-8s %4d\n' "$c" "$("$work/elector" "$c" --help 2>&1 | wc -l)"
done
