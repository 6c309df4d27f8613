#!/usr/bin/env bash
# check-adapters.sh: build and vet each adapter as its users get it — with the workspace off
# (GOWORK=off), resolving the core, github.com/elector/elector, as a normal versioned
# dependency at the version the adapter's go.mod requires, from a module proxy directory
# (GOPROXY=file://...) built from this tree. A consumer module then `go get`s each adapter
# from that proxy and builds it, as `go get github.com/elector/elector/adapters/NAME` does.
# Nothing in the tree or in the shared module cache is modified: the adapters are built from
# copies, with a private module cache.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
core=github.com/elector/elector
upstream=$(GOWORK=off go env GOPROXY)
shared=$(go env GOMODCACHE)
# A private module cache: the proxy's versions of the core are snapshots of the tree, which
# must neither land in the shared cache (where a module version is immutable, so that later
# builds would get a stale tree) nor be served from it. Other modules come from the shared
# cache's download directory, which is a proxy directory itself, then from the usual proxy.
# -trimpath keeps the private cache's directories out of the build cache keys, so that the
# packages compiled by make adapters-test (also with -trimpath and CGO off) and by earlier runs
# are reused; CGO off as there (a different CGO setting changes every package's cache key).
export GOMODCACHE="$work/modcache" GOWORK=off GONOSUMDB="$core" GOFLAGS="-mod=mod -modcacherw -trimpath"
export CGO_ENABLED=0
export GOPROXY="file://$work/proxy,file://$shared/cache/download,$upstream"
# The tree as git sees it (tracked and untracked files, not ignored ones: no bin/, no .git).
mkdir "$work/tree"
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$work/tree"

adapters=()
for dir in "$root"/adapters/*/; do
	[ -f "$dir/go.mod" ] && adapters+=("$(basename "$dir")")
done
# The version of the core each adapter requires, and the proxy entries: the core at each
# such version, and each adapter at the version the consumer asks for.
entries=()
for a in "${adapters[@]}"; do
	modjson=$(cd "$root/adapters/$a" && go mod edit -json | tr -d ' \t\n')
	v=$(echo "$modjson" | grep -o "\"Path\":\"$core\",\"Version\":\"[^\"]*\"" | sed 's/.*"Version":"\([^"]*\)"/\1/')
	if [ -z "$v" ]; then
		echo "check-adapters: adapters/$a does not require $core" >&2
		exit 1
	fi
	if echo "$modjson" | grep -q '"Replace":\['; then
		echo "check-adapters: adapters/$a/go.mod has a replace directive: Go ignores it in a dependency, so users cannot build the adapter; use adapters/go.work" >&2
		exit 1
	fi
	case "$v" in
	v0.0.0-*) echo "check-adapters: adapters/$a requires $core $v, a version that does not exist; require a released version" >&2; exit 1 ;;
	esac
	entries+=("$core@$v=$work/tree" "$core/adapters/$a@v0.0.0-check=$work/tree/adapters/$a")
done
(cd "$work/tree/hack/modproxy" && go run . -out "$work/proxy" "${entries[@]}")

for a in "${adapters[@]}"; do
	echo "check-adapters: adapters/$a with GOWORK=off against $core from the proxy"
	cp -r "$work/tree/adapters/$a" "$work/$a"
	(cd "$work/$a" && go build ./... && go vet ./...)
	mkdir "$work/consumer-$a"
	(cd "$work/consumer-$a" &&
		go mod init example.com/consumer >/dev/null 2>&1 &&
		go get "$core/adapters/$a@v0.0.0-check" &&
		go build "$core/adapters/$a/...")
done
# examples/controller-runtime as a user who copies it builds it: its replace directives
# (the tree's core and adapter) dropped, the adapter and the core from the proxy.
echo "check-adapters: examples/controller-runtime with GOWORK=off against adapters/clientgo from the proxy"
cp -r "$work/tree/examples/controller-runtime" "$work/example"
(cd "$work/example" &&
	go mod edit -dropreplace "$core" -dropreplace "$core/adapters/clientgo" \
		-require "$core/adapters/clientgo@v0.0.0-check" &&
	go build ./... && go vet ./...)
echo "check-adapters: ok (${adapters[*]}, examples/controller-runtime)"
