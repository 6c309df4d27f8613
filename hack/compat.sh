#!/usr/bin/env bash
# The server matrix: builds Redis 7.2 and Valkey 8 from the source archives in
# ../shared/servers (relative to the repository root: CI runs in a fresh clone with shared/
# beside it) with TLS, caches the binaries outside the repository keyed by server and version
# (${XDG_CACHE_HOME:-~/.cache}/elector-compat/<server>-<version>/bin, reused while the archive's
# sha256 is the same), and runs the real-server suites against each server: pkg/lease, internal/leasekit,
# pkg/election, pkg/fence, test/reliability (Sentinel, Cluster, TLS, ACL, the clock test),
# test/e2e, internal/testing/redistest, internal/redisclient and internal/leasewire (the function
# library: FCALL against EVAL, FUNCTION LOAD), and the chaos suite's short run.
# What passed is written to hack/compat/results.tsv, from which `go run ./hack/compat readme`
# writes README.md's "Tested with" table; in CI the run fails when either differs from what
# is committed.
#
# Debian's Redis 7.0 is not rerun by default: `make test` runs every package against it with
# the race detector, and three servers would not fit the 12-minute budget. Its row is
# recorded with COMPAT_SERVERS="debian-7.0 redis-7.2.6 valkey-8.0.1" make compat.
#
# Usage: hack/compat.sh              build (or reuse) and run the servers of COMPAT_SERVERS
#        hack/compat.sh build        only build (or reuse) the binaries
#        hack/compat.sh run KEY      run the suites against one server (debian-7.0, redis-7.2.6
#                                    or valkey-8.0.1) without touching the results file
#
# Environment: XDG_CACHE_HOME (cache root; default ~/.cache), COMPAT_SERVERS (default
# "redis-7.2.6 valkey-8.0.1"), GO (default go), CI (compare the results with the committed).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
shared=$(cd "$root/.." && pwd)/shared/servers
cache=${XDG_CACHE_HOME:-$HOME/.cache}/elector-compat
GO=${GO:-go}

log() { echo "compat: $*" >&2; }

# ensure_deps installs what a TLS build needs (a C toolchain, make, pkg-config and Debian's
# libssl-dev; with "build") or what the suites need besides the servers (libfaketime, for the
# clock test of test/reliability; with "test") with apt-get when root; otherwise it says what
# is missing.
ensure_deps() {
	local missing=()
	if [[ $1 == build ]]; then
		command -v cc >/dev/null 2>&1 || missing+=(gcc)
		command -v make >/dev/null 2>&1 || missing+=(make)
		command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
		[[ -e /usr/include/openssl/ssl.h ]] || missing+=(libssl-dev)
	else
		compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null ||
			compgen -G '/usr/lib/faketime/libfaketime.so.1' >/dev/null || missing+=(libfaketime)
	fi
	[[ ${#missing[@]} -eq 0 ]] && return 0
	if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
		log "missing ${missing[*]}: install them (e.g. sudo apt-get install ${missing[*]}) and run again"
		exit 1
	fi
	log "installing ${missing[*]} with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	local i
	for i in 1 2 3 4 5; do # the dpkg lock may be held by another install
		if apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
			return 0
		fi
		sleep 10
	done
	log "apt-get install ${missing[*]} failed"
	exit 1
}

# build NAME VERSION: makes $cache/NAME-VERSION/bin/NAME-{server,sentinel,cli}, unless a
# previous build of the same archive with the same options (their sha256 and the options are
# the stamp) is there already.
build() {
	local name=$1 version=$2
	local archive=$shared/$name-$version.tar.gz
	local dir=$cache/$name-$version
	[[ -r $archive ]] || { log "no archive $archive"; exit 1; }
	# Only the three programs the suites run, with libc's malloc: jemalloc's configure and
	# build, redis-benchmark and the check tools were more than half of the build (Redis 7.2,
	# measured on 2 cores: 236 CPU-seconds and 130 s for the default make, 104 and 56 s for
	# this). The allocator changes no command's behaviour, and libfaketime (the clock test)
	# works with libc's malloc as with the statically linked jemalloc.
	local opts=(BUILD_TLS=yes MALLOC=libc)
	local sum
	sum="$(sha256sum "$archive" | cut -d' ' -f1) ${opts[*]}"
	if [[ -x $dir/bin/$name-server && $(cat "$dir/stamp" 2>/dev/null) == "$sum" ]]; then
		log "$name $version: cached in $dir"
		return 0
	fi
	ensure_deps build
	mkdir -p "$cache"
	local tmp
	tmp=$(mktemp -d "$cache/.build-$name-$version.XXXXXX")
	log "$name $version: building in $tmp (make -j2 ${opts[*]})"
	local start=$SECONDS
	tar -xzf "$archive" -C "$tmp"
	if ! make -C "$tmp/$name-$version/src" -j2 "${opts[@]}" "$name-server" "$name-sentinel" "$name-cli" \
		>"$tmp/build.log" 2>&1; then
		tail -n 40 "$tmp/build.log" >&2
		log "$name $version: build failed (log in $tmp/build.log)"
		exit 1
	fi
	mkdir -p "$tmp/out/bin"
	local b
	for b in server sentinel cli; do
		cp "$tmp/$name-$version/src/$name-$b" "$tmp/out/bin/$name-$b"
	done
	echo "$sum" >"$tmp/out/stamp"
	rm -rf "$dir"
	mv "$tmp/out" "$dir"
	rm -rf "$tmp"
	log "$name $version: built in $((SECONDS - start)) s, binaries in $dir/bin"
}

build_all() {
	build redis 7.2.6
	build valkey 8.0.1
}

# The suites that talk to real servers. Without -race: the race detector's instrumentation
# would make the two servers' runs exceed the 12-minute budget of CI; `make test` runs the same
# packages with -race against Debian's 7.0. The chaos suite runs its short (20 s) schedule.
suites=(./pkg/lease/... ./internal/leasekit/... ./pkg/election/... ./pkg/fence/... ./test/reliability/... ./test/e2e/...
	./internal/testing/redistest/... ./internal/redisclient/... ./internal/leasewire/...)

# run_server KEY SERVER-PROGRAM: runs the suites with the programs beside SERVER-PROGRAM (named
# by ELECTOR_REDIS_SERVER/SENTINEL/CLI) into $workdir/KEY; record_server records what they did.
run_server() {
	local key=$1 server=$2
	local dir family
	dir=$(dirname "$server")
	family=$(basename "$server" -server)
	local out=$workdir/$key
	mkdir -p "$out"
	log "$key: $("$server" --version)"
	local start=$SECONDS rc=0
	(
		export ELECTOR_REDIS_SERVER=$server
		export ELECTOR_REDIS_SENTINEL=$dir/$family-sentinel
		export ELECTOR_REDIS_CLI=$dir/$family-cli
		export ELECTOR_REQUIRE_REDIS=1
		# The clock test (libfaketime in a replica) must run against the servers built here;
		# Debian's redis-server hangs under libfaketime (its shared jemalloc), so it skips there.
		if [[ $key != debian-* ]]; then export ELECTOR_REQUIRE_FAKETIME=1; fi
		cd "$root"
		# make compat leaves the simulator's tests out (SIM_TESTS, from the Makefile): they talk
		# to no server. The suites mostly wait for lease expiries: three test binaries at a
		# time per server, and the short chaos run beside them.
		"$GO" test -count=1 -json -p 3 -timeout 15m ${SIM_TESTS:+-skip "$SIM_TESTS"} "${suites[@]}" >"$out/suites.json" 2>"$out/suites.stderr" &
		suites_pid=$!
		"$GO" test -count=1 -json -short -timeout 10m ./test/chaos/... >"$out/chaos.json" 2>"$out/chaos.stderr" || rc=1
		wait "$suites_pid" || rc=1
		exit $rc
	) || rc=1
	log "$key: suites ran in $((SECONDS - start)) s (go test exit status: $rc)"
	return $rc
}

# record_server KEY SERVER-PROGRAM SOURCE RC: records the row KEY of the results file ($results)
# from run_server's output, RC being its exit status, and prints what failed.
record_server() {
	local key=$1 server=$2 source=$3 rc=$4
	local out=$workdir/$key
	local vline name version
	vline=$("$server" --version)
	name=${vline%% server *}
	version=$(sed -n 's/.* v=\([^ ]*\).*/\1/p' <<<"$vline")
	if ! (cd "$root" && "$GO" run ./hack/compat record -results "$results" -key "$key" -server "$name" \
		-version "$version" -source "$source" "$out/suites.json" "$out/chaos.json"); then
		rc=1
	fi
	if [[ $rc -ne 0 ]]; then
		# What failed, for the CI log: each failed test's own last lines and name (grepping
		# the stream for "panic:" once printed 40 of a soak's intentional callback panics and
		# not the failure).
		(cd "$root" && "$GO" run ./hack/compat failures "$out/suites.json" "$out/chaos.json") >&2 || true
		cat "$out/suites.stderr" "$out/chaos.stderr" >&2 || true
		log "$key: FAILED; the go test -json output is in $out"
	fi
	return $rc
}

usage() {
	echo "usage: hack/compat.sh [build | run KEY]   (KEY: one of ${!servers[*]})" >&2
	exit 2
}

# The matrix: key -> server program and where it comes from. debian-7.0 needs no build.
declare -A servers sources
servers[redis-7.2.6]=$cache/redis-7.2.6/bin/redis-server
sources[redis-7.2.6]="built from source (BUILD_TLS=yes MALLOC=libc)"
servers[valkey-8.0.1]=$cache/valkey-8.0.1/bin/valkey-server
sources[valkey-8.0.1]="built from source (BUILD_TLS=yes MALLOC=libc)"
servers[debian-7.0]=$(command -v redis-server || echo /usr/bin/redis-server)
sources[debian-7.0]="Debian 12 package"
order=(${COMPAT_SERVERS:-redis-7.2.6 valkey-8.0.1})

case ${1:-all} in
build)
	[[ $# -eq 1 ]] || usage
	build_all
	;;
run)
	[[ $# -eq 2 && -n ${servers[$2]:-} ]] || usage
	build_all
	ensure_deps test
	workdir=$(mktemp -d)
	results=$workdir/results.tsv
	rc=0
	run_server "$2" "${servers[$2]}" || rc=$?
	record_server "$2" "${servers[$2]}" "${sources[$2]}" "$rc" || rc=1
	cat "$results"
	exit "$rc"
	;;
all)
	[[ $# -le 1 ]] || usage
	total=$SECONDS
	build_all
	ensure_deps test
	workdir=$(mktemp -d)
	results=$root/hack/compat/results.tsv
	failed=()
	for key in "${order[@]}"; do
		[[ -n ${servers[$key]:-} ]] || { log "unknown server $key in COMPAT_SERVERS"; exit 2; }
	done
	# The servers' suites run side by side: they leave most of the CPU idle (one server's
	# suites kept a 2-core machine 22-31 % busy), and every timing test in them derives its
	# margins from the configured timing and a control measured in the same run, as
	# make test-under-load checks beside two busy loops. The test binaries are compiled once
	# first (two go commands compiling one package at once would each compile it).
	"$GO" test -count=1 -exec true "${suites[@]}" ./test/chaos/... >/dev/null
	declare -A pids
	for key in "${order[@]}"; do
		run_server "$key" "${servers[$key]}" &
		pids[$key]=$!
	done
	for key in "${order[@]}"; do
		rc=0
		wait "${pids[$key]}" || rc=$?
		record_server "$key" "${servers[$key]}" "${sources[$key]}" "$rc" || failed+=("$key")
	done
	(cd "$root" && "$GO" run ./hack/compat readme -results "$results" -readme README.md)
	log "results in hack/compat/results.tsv, README.md's table regenerated; total $((SECONDS - total)) s"
	if [[ ${#failed[@]} -gt 0 ]]; then
		log "FAILED on: ${failed[*]}"
		exit 1
	fi
	rm -rf "$workdir"
	# In CI the committed table must be what this run produced.
	if [[ -n ${CI:-} ]] && ! git -C "$root" diff --exit-code -- README.md hack/compat/results.tsv; then
		log "the committed hack/compat/results.tsv or README.md table differs from this run: run make compat and commit both"
		exit 1
	fi
	;;
*)
	usage
	;;
esac
