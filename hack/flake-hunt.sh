#!/usr/bin/env bash
# flake-hunt: runs the timing-sensitive test packages N times under the load of a cold CI
# machine — two busy loops and a CPU-heavy compile loop at nice 19 — against each Redis server found (the Debian one and the
# compat builds cached by hack/compat.sh), prints each failing test's failure count and
# exits non-zero on any failure.
#
# The test binaries are compiled once, before the load starts (the compile is not what is
# measured, and a compile beside the tests would load them unevenly), with the flags make uses:
# -race for the main module and gocron, none for clientgo (see the Makefile's adapters-test).
#
# Usage: hack/flake-hunt.sh            (or make flake-hunt)
#   FLAKE_N=10           rounds
#   FLAKE_PKGS="..."     main-module packages (default below); "none" for none
#   FLAKE_ADAPTERS="adapters/gocron adapters/clientgo"; "none" for none
#   FLAKE_SERVERS="..."  redis-server binaries (default: Debian's and the cached compat builds)
#   FLAKE_LOGS=/tmp/flake-hunt-logs  where the output of a failed run is kept
#   FLAKE_BUSY=2         busy loops; FLAKE_NICE_LOAD=1 (0: no compile loop at nice 19)
#   FLAKE_CLOCK_RATE=5ms the wall clock stepped that much each second, ahead for a minute and
#                        back for the next (hack/clockstep), as on a host whose clock is being
#                        corrected; the default when root, 0 otherwise (it sets the clock)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
GO=${GO:-go}
n=${FLAKE_N:-10}
pkgs=${FLAKE_PKGS:-./pkg/election ./pkg/lease ./internal/lease ./internal/child ./test/e2e ./test/reliability}
adapters=${FLAKE_ADAPTERS:-adapters/gocron adapters/clientgo}
[[ $pkgs == none ]] && pkgs=""
[[ $adapters == none ]] && adapters=""
if [[ -z ${FLAKE_SERVERS:-} ]]; then
	FLAKE_SERVERS=$(command -v redis-server || true)
	cache=${XDG_CACHE_HOME:-$HOME/.cache}/elector-compat
	for s in "$cache"/redis-7.2.6/bin/redis-server "$cache"/valkey-8.0.1/bin/valkey-server; do
		[[ -x $s ]] && FLAKE_SERVERS+=" $s"
	done
fi
logs=${FLAKE_LOGS:-${TMPDIR:-/tmp}/flake-hunt-logs} # the output of each failed run
log() { echo "flake-hunt: $*" >&2; }

work=$(mktemp -d)
pids=()
clockstep=""
cleanup() {
	local p
	for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true; done
	# clockstep steps the clock back when told to stop: wait for it.
	[[ -z $clockstep ]] || { kill "$clockstep" 2>/dev/null; wait "$clockstep" || true; }
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

# 1. Compile every test binary once: dir<TAB>binary per line in $work/bins.
compile() { # compile MODULE-DIR IMPORT-PATH RACE
	local mod=$1 pkg=$2 race=$3 out dir
	out=$work/bin/$(echo "${pkg#github.com/elector/elector/}" | tr '/.' '__').test
	mkdir -p "$work/bin"
	dir=$(cd "$mod" && "$GO" list -f '{{.Dir}}' "$pkg")
	(cd "$mod" && "$GO" test -c $race -o "$out" "$pkg")
	[[ -x $out ]] || { log "$pkg has no tests"; return 0; }
	printf '%s\t%s\n' "$dir" "$out" >>"$work/bins"
}
start=$SECONDS
for p in $( [[ -n $pkgs ]] && "$GO" list $pkgs); do compile . "$p" -race; done
for a in $adapters; do
	race=-race
	[[ $a == adapters/clientgo ]] && race="" # as make adapters-test: instrumenting client-go takes minutes
	for p in $(cd "$a" && "$GO" list ./...); do compile "$a" "$p" "$race"; done
done
[[ -s $work/bins ]] || { log "no test binaries"; exit 2; }
log "compiled $(wc -l <"$work/bins") test binaries in $((SECONDS - start)) s"

# 2. The load: busy loops, and a compile loop at nice 19 with a cache of its own (-a: it
# never finishes early). Each in its own process group, killed at exit. Each setsid is also
# its own scheduling autogroup, and autogroups share the CPU fairly whatever the nice value:
# the compile loop gets a full share, as .ci/run's background build did before its lanes set
# their autogroup's nice (docs/CI.md). Harsher than CI now, on purpose: a hunt should
# over-load.
for ((i = 0; i < ${FLAKE_BUSY:-2}; i++)); do
	setsid bash -c 'while :; do :; done' &
	pids+=($!)
done
if [[ ${FLAKE_NICE_LOAD:-1} == 1 ]]; then
	GOCACHE=$work/gocache setsid nice -n 19 bash -c \
		'while :; do "$0" build -a -o /dev/null ./cmd/elector >/dev/null 2>&1 || sleep 1; done' "$GO" &
	pids+=($!)
fi
# The wall clock at another rate than the monotonic one: Redis keeps expiries on the first,
# the tests time on the second (a CI host ran them 5 ms/s apart: hack/clockstep).
clock_rate=${FLAKE_CLOCK_RATE:-$([[ $(id -u) -eq 0 ]] && echo 5ms || echo 0)}
if [[ $clock_rate != 0 ]]; then
	"$GO" build -o "$work/clockstep" ./hack/clockstep
	"$work/clockstep" -rate "$clock_rate" &
	clockstep=$!
fi
log "load: ${FLAKE_BUSY:-2} busy loops, compile loop at nice 19: ${FLAKE_NICE_LOAD:-1}, wall clock stepped by $clock_rate a second; $n rounds; servers: $FLAKE_SERVERS"

# 3. N rounds of every binary against every server; -test.v lines record each test's result.
export ELECTOR_REQUIRE_REDIS=1
runs=0 failed_runs=0
for ((r = 1; r <= n; r++)); do
	for server in $FLAKE_SERVERS; do
		sdir=$(dirname "$server")
		family=$(basename "$server" -server)
		# The server's name and version (redis-7.0.15, valkey-8.0.1): Debian's and the compat
		# build of Redis are both redis-server.
		label=$("$server" --version 2>/dev/null | sed -n 's/^\([A-Za-z]*\) server v=\([^ ]*\).*/\1-\2/p' | tr 'A-Z' 'a-z')
		label=${label:-$(basename "$server")}
		while IFS=$'\t' read -r dir bin; do
			runs=$((runs + 1))
			out=$work/out.$runs
			rc=0 t0=$SECONDS
			(cd "$dir" && ELECTOR_REDIS_SERVER=$server ELECTOR_REDIS_SENTINEL=$sdir/$family-sentinel \
				ELECTOR_REDIS_CLI=$sdir/$family-cli "$bin" -test.count=1 -test.v -test.timeout 20m) >"$out" 2>&1 || rc=$?
			printf '%s %s\t%d\n' "$(basename "$bin" .test)" "$label" $((SECONDS - t0)) >>"$work/times"
			sed -n 's/^ *--- FAIL: \([^ ]*\).*/\1/p' "$out" | sed "s|^|$(basename "$bin" .test) $label\t|" >>"$work/failures"
			if [[ $rc -ne 0 ]]; then
				failed_runs=$((failed_runs + 1))
				mkdir -p "$logs"
				cp "$out" "$logs/$(basename "$bin" .test).$r.$label.log"
				log "round $r, $label, $(basename "$bin" .test): FAILED (exit $rc); output in $logs"
				grep -E -e '--- FAIL|panic:' "$out" | head -n 10 >&2 || true
			fi
		done <"$work/bins"
	done
	log "round $r of $n done ($((SECONDS - start)) s)"
done

# 4. The summary: failures per test (and server); non-zero on any failure.
echo "flake-hunt: seconds per binary and server, all rounds (binary server<TAB>seconds):"
awk -F'\t' '{ t[$1] += $2 } END { for (k in t) printf "  %s\t%d\n", k, t[k] }' "$work/times" | sort
echo "flake-hunt: $runs runs of $(wc -l <"$work/bins") binaries, $n rounds, $failed_runs failed, $((SECONDS - start)) s"
if [[ -s $work/failures ]]; then
	echo "failures per test (binary server<TAB>test):"
	sort "$work/failures" | uniq -c | sort -rn
	exit 1
fi
if [[ $failed_runs -ne 0 ]]; then
	echo "a run failed without a failing test (a build, a panic or a timeout): see the logs named above"
	exit 1
fi
echo "no test failed"
