#!/usr/bin/env bash
# The Kubernetes e2e (make k8s-e2e): builds a real one-node Kubernetes from the Go module
# proxy's k8s.io/kubernetes source and helm (both cached outside the repo, keyed by version,
# so a warm machine skips the build), installs the Debian packages the cluster and its Redis
# need, then runs the test module test/k8s, which brings the cluster up, installs the chart
# with helm and runs the scenarios, tearing everything down by PID at the end, even when a
# test fails.
#
# Usage: hack/k8s-e2e.sh [build [kubernetes|tools]|test|all]   (default all)
#   build  Kubernetes, helm (cached) and the test modules' dependencies (the Go build cache),
#          one after another; needs no root, so CI can start it early, in the background.
#          "build kubernetes" builds only Kubernetes, "build tools" only helm and the test
#          modules: CI builds the tools after make ci-tests, which compiles client-go and
#          helm's packages with the same flags (two builds of one package at once each
#          compile it: Go's build cache does not wait for the other)
#   test   the test module's scenarios on a fresh cluster (root)
#   all    the Debian packages, build, test
#
# Environment (all optional):
#   K8S_VERSION    Kubernetes version to build (default v1.37.2)
#   HELM_VERSION   helm v4 version to build (default the one test/helm's go.mod requires, v4.3.2)
#   E2E_CACHE      cache dir (default ${XDG_CACHE_HOME:-$HOME/.cache}/elector-e2e)
#   E2E_RUN        -run pattern for the test module
#   E2E_DELETIONS  leader-pod deletions per mode in TestPodDeletionOverlap (default 7: 21 in all,
#                  native sidecar, plain sidecar and run mode); more for a longer soak
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
K8S_VERSION=${K8S_VERSION:-v1.37.2}
# helm is built from test/helm's module, where helm.sh/helm/v4/cmd/helm is a tool: the version its
# go.mod requires is the default, so that one module graph serves both.
helm_module_version=$(cd "$repo_root/test/helm" && GOWORK=off go list -m -f '{{.Version}}' helm.sh/helm/v4)
HELM_VERSION=${HELM_VERSION:-$helm_module_version}
cache=${E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/elector-e2e}
k8s_bin=$cache/k8s-$K8S_VERSION/bin
helm_bin=$cache/helm-$HELM_VERSION/bin
mode=${1:-all}
part=${2:-}

log() { printf '%s k8s-e2e: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

k8s_binaries=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
k8s_cmds=("${k8s_binaries[@]/#/./cmd/}")

# align_deps SRC raises every module whose packages both the Kubernetes build and test/helm's
# (helm, client-go: the versions of the test modules and adapters/clientgo too) compile to
# test/helm's version where that is higher: patch and minor releases of x/net, x/sys,
# protobuf, go-openapi, Prometheus and the like. A package's build cache key includes its
# dependencies', so only then does the Kubernetes build compile client-go, the API types and
# their dependencies exactly as make ci-tests, helm and the test modules do (CGO off,
# -trimpath): once for all of them.
align_deps() {
	local src=$1 edits
	# The module of every package the builds compile (not the whole module graph: raising a
	# module neither side compiles would only risk the Kubernetes build).
	local f='{{if not .Standard}}{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}{{end}}'
	edits=$(
		{
			(cd "$repo_root/test/helm" && CGO_ENABLED=0 GOWORK=off go list -deps -test -f "$f" ./... helm.sh/helm/v4/cmd/helm |
				sed 's/^/ours /')
			(cd "$src" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod go list -deps -f "$f" "${k8s_cmds[@]}" |
				sed 's/^/theirs /')
		} | sort -u | awk '
			# newer A B: A is a higher semantic version than B (vMAJOR.MINOR.PATCH[-pre]; a
			# pre-release, such as a pseudo-version, is lower than its release).
			function newer(a, b,   x, y, i, pa, pb) {
				pa = index(a, "-") ? substr(a, index(a, "-") + 1) : ""
				pb = index(b, "-") ? substr(b, index(b, "-") + 1) : ""
				split(substr(a, 2), x, /[.-]/); split(substr(b, 2), y, /[.-]/)
				for (i = 1; i <= 3; i++) if (x[i] + 0 != y[i] + 0) return x[i] + 0 > y[i] + 0
				if (pa == pb) return 0
				if (pa == "") return 1
				if (pb == "") return 0
				return pa > pb
			}
			$1 == "ours" { ours[$2] = $3; next }
			$2 in ours && newer(ours[$2], $3) { print "-require=" $2 "@" ours[$2] }
		'
	)
	[[ -z $edits ]] && return
	local list=${edits//-require=/}
	log "kubernetes $K8S_VERSION: dependencies raised to test/helm's versions: ${list//$'\n'/ }"
	(cd "$src" && GOWORK=off go mod edit $edits)
}

build_k8s() {
	local missing=0 b
	for b in "${k8s_binaries[@]}"; do [[ -x $k8s_bin/$b ]] || missing=1; done
	if ((missing == 0)); then
		log "kubernetes $K8S_VERSION: cached in $k8s_bin"
		return
	fi
	log "kubernetes $K8S_VERSION: building into $k8s_bin (cold: several minutes)"
	local t0=$SECONDS dir src
	dir=$(GOFLAGS=-mod=mod GOWORK=off go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -d $dir ]] || { log "go mod download gave no source dir"; exit 1; }
	# The module cache is read-only: build from a patched copy.
	src=$cache/k8s-$K8S_VERSION/src
	rm -rf "$src" && mkdir -p "$src"
	cp -r "$dir"/. "$src"/ && chmod -R u+w "$src"
	# The module zip has no staging/ modules but ships a go.work naming them: drop it, the
	# vendor dir and the replace block, and require the published staging modules instead.
	rm -rf "$src/go.work" "$src/go.work.sum" "$src/vendor"
	local minor=${K8S_VERSION#v1.}
	local staging=v0.$minor
	awk -v staging="$staging" '
		/^replace \($/ { skip = 1; next }
		skip && /^\)$/ { skip = 0; next }
		skip { next }
		/^replace k8s\.io\/.* => \.\/staging/ { next }
		$1 ~ /^k8s\.io\// && $2 == "v0.0.0" { sub(/v0\.0\.0$/, staging) }
		{ print }
	' "$src/go.mod" >"$src/go.mod.new"
	mv "$src/go.mod.new" "$src/go.mod"
	align_deps "$src"
	local major=1 minor_n=${minor%%.*}
	local ld="-s -w"
	local p
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor_n"
		ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	mkdir -p "$k8s_bin.tmp"
	(cd "$src" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" \
		-o "$k8s_bin.tmp/" "${k8s_cmds[@]}")
	rm -rf "$k8s_bin" && mv "$k8s_bin.tmp" "$k8s_bin"
	rm -rf "$src"
	"$k8s_bin/kubectl" version --client
	log "kubernetes $K8S_VERSION: built in $((SECONDS - t0)) s"
}

build_helm() {
	if [[ -x $helm_bin/helm ]]; then
		log "helm $HELM_VERSION: cached in $helm_bin"
		return
	fi
	log "helm $HELM_VERSION: building into $helm_bin"
	local t0=$SECONDS
	# helm v4 stamps its version here (its Makefile does the same). Its default Kubernetes
	# version for `helm template` and lint has no variable any more: helm derives it from the
	# k8s.io/client-go version in the binary's build info (v0.37.x gives v1.37.0).
	local ld="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
	mkdir -p "$helm_bin"
	if [[ $HELM_VERSION == "$helm_module_version" ]]; then
		# From test/helm's module, with the flags of make helm-test and the test modules
		# (-trimpath, CGO off): helm's packages and client-go come from one module graph, so
		# they are compiled once for helm, test/helm, test/k8s and adapters/clientgo.
		(cd "$repo_root/test/helm" && CGO_ENABLED=0 GOWORK=off \
			go build -trimpath -ldflags "$ld" -o "$helm_bin/helm" helm.sh/helm/v4/cmd/helm)
	else
		# Another version: its own module graph, which shares nothing with the tests.
		CGO_ENABLED=0 GOBIN="$helm_bin" GOWORK=off GOFLAGS=-mod=mod \
			go install -trimpath -ldflags "$ld" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
	fi
	"$helm_bin/helm" version
	log "helm $HELM_VERSION: built in $((SECONDS - t0)) s"
}

install_packages() {
	local need=() p
	for p in containerd runc containernetworking-plugins iptables etcd-server iproute2 util-linux redis-server busybox-static; do
		dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
	done
	((${#need[@]} == 0)) && return
	log "installing ${need[*]}"
	local i
	for i in 1 2 3 4 5 6 7 8 9 10; do
		if DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"; then
			return
		fi
		log "apt-get failed (dpkg lock busy?), retry $i"
		sleep 10
	done
	exit 1
}

# backstop: if the test binary died without its teardown (it tears down on failures, signals
# and before its own timeout), stop what its cluster's pid file lists, by PID, and the
# containerd shims of that cluster's socket; remove the bridge.
backstop() {
	local dir pid name
	for dir in /var/lib/elector-e2e-*; do
		[[ -f $dir/pids ]] || continue
		log "leftover cluster in $dir: stopping its processes"
		while read -r pid name; do
			if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' </proc/$pid/cmdline | grep -q -- "$name"; then
				kill -9 "$pid" 2>/dev/null || true
			fi
		done <"$dir/pids"
		for pid in $(grep -l -- "$dir/containerd/containerd.sock" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
			kill -9 "$pid" 2>/dev/null || true
		done
		grep " $dir" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	done
	ip link del elk8s0 2>/dev/null || true
}

run_tests() {
	export E2E_K8S_BIN=$k8s_bin E2E_HELM=$helm_bin/helm E2E_CACHE=$cache E2E_REPO=$repo_root
	export E2E_K8S_VERSION=$K8S_VERSION E2E_HELM_VERSION=$HELM_VERSION
	export E2E_RESULTS=${E2E_RESULTS:-$cache/results.json}
	# CGO off and -trimpath for every build here, as for helm, make helm-test and make
	# adapters-test: the programs built into images are static, and with one setting all of
	# them share the build cache (client-go and the standard library are compiled once).
	export CGO_ENABLED=0
	(cd "$repo_root/hack/image" && go vet -trimpath ./... && go test -trimpath -count=1 ./...)
	cd "$repo_root/test/k8s"
	go vet -trimpath ./...
	trap backstop EXIT
	# 20 minutes, and 20 s more for each leader-pod deletion past the default 7 per mode (3 modes).
	local timeout=$((1200 + 60 * (${E2E_DELETIONS:-7} > 7 ? ${E2E_DELETIONS:-7} - 7 : 0)))
	go test -trimpath -count=1 -v -timeout "${timeout}s" ${E2E_RUN:+-run "$E2E_RUN"} ./...
}

# prebuild_tests compiles what run_tests compiles (the test modules' dependencies, client-go
# among them), with the same settings, so that the tests start from a warm build cache.
prebuild_tests() {
	local t0=$SECONDS
	(cd "$repo_root/hack/image" && CGO_ENABLED=0 go vet -trimpath ./...)
	(cd "$repo_root/test/k8s" && CGO_ENABLED=0 go vet -trimpath ./...)
	# The example the controller-runtime scenarios run in pods (test/k8s builds it as here).
	(cd "$repo_root/examples/controller-runtime" && CGO_ENABLED=0 go build -trimpath "-ldflags=-s -w" -o /dev/null .)
	log "test modules compiled in $((SECONDS - t0)) s"
}

# build_tools builds helm and the test modules. They come after Kubernetes (build_all) and,
# in CI, after make ci-tests: since align_deps all of them share client-go's closure, and two
# builds compiling one package at once each compile it.
build_tools() {
	build_helm
	prebuild_tests
}
build_all() {
	build_k8s
	build_tools
}

start=$(date +%s)
case "$mode" in
build)
	case "$part" in
	"") build_all ;;
	kubernetes) build_k8s ;;
	tools) build_tools ;;
	*) echo "usage: $0 build [kubernetes|tools]" >&2; exit 2 ;;
	esac
	;;
test) run_tests ;;
all) install_packages; build_all; run_tests ;;
*) echo "usage: $0 [build|test|all]" >&2; exit 2 ;;
esac
log "done in $(($(date +%s) - start)) s"
