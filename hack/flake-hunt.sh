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
#   FLAKE_PARALLEL=0     1: each server's rounds in a session of their own, side by side (each
#                        its own autogroup: a third of the CPU each in place of half, a harsher
#                        load, and a round in less than half the time: the suites mostly wait)
#   FLAKE_LEDGER=FILE    a record of every run, kept across hunts: a run is counted for the test
#                        binary's checksum and the committed source (docs and *.md aside), and a
#                        hunt runs only the rounds a binary still lacks against a server to reach
#                        FLAKE_N, so a hunt longer than a session resumes where it stopped. Needs a
#                        clean tree (uncommitted source changes disable it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
GO=${GO:-go}
n=${FLAKE_N:-10}
pkgs=${FLAKE_PKGS:-./pkg/election ./pkg/lease ./internal/leasekit ./cmd/elector/internal/child ./test/e2e ./test/reliability}
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

# The ledger's key for a binary: its checksum and the committed source (test/e2e builds
# cmd/elector from source when it runs, which the checksum does not cover).
ledger=${FLAKE_LEDGER:-} stamp=""
if [[ -n $ledger ]]; then
	source_paths=(. ':(exclude)docs' ':(exclude)*.md')
	if [[ -n $(git status --porcelain -- "${source_paths[@]}") ]]; then
		log "uncommitted source changes: FLAKE_LEDGER ignored"
		ledger=""
	else
		stamp=$(git ls-files -s -- "${source_paths[@]}" | sha256sum | cut -c1-16)
		mkdir -p "$(dirname "$ledger")"
		touch "$ledger"
		log "ledger $ledger, source $stamp"
	fi
fi

# 1. Compile every test binary once: dir<TAB>binary<TAB>ledger key per line in $work/bins.
compile() { # compile MODULE-DIR IMPORT-PATH RACE
	local mod=$1 pkg=$2 race=$3 out dir key=""
	out=$work/bin/$(echo "${pkg#github.com/elector/elector/}" | tr '/.' '__').test
	mkdir -p "$work/bin"
	dir=$(cd "$mod" && "$GO" list -f '{{.Dir}}' "$pkg")
	(cd "$mod" && "$GO" test -c $race -o "$out" "$pkg")
	[[ -x $out ]] || { log "$pkg has no tests"; return 0; }
	[[ -z $stamp ]] || key=$(sha256sum "$out" | cut -c1-16)-$stamp
	printf '%s\t%s\t%s\n' "$dir" "$out" "$key" >>"$work/bins"
}
start=$(date +%s)
for p in $( [[ -n $pkgs ]] && "$GO" list $pkgs); do compile . "$p" -race; done
for a in $adapters; do
	race=-race
	[[ $a == adapters/clientgo ]] && race="" # as make adapters-test: instrumenting client-go takes minutes
	for p in $(cd "$a" && "$GO" list ./...); do compile "$a" "$p" "$race"; done
done
[[ -s $work/bins ]] || { log "no test binaries"; exit 2; }
log "compiled $(wc -l <"$work/bins") test binaries in $(($(date +%s) - start)) s"

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

# hunt SERVER: the rounds against one server. Each run appends binary, server, round, exit code
# and seconds to $work/results (and the ledger), and its failing tests to $work/failures.
hunt() {
	local server=$1 sdir family label r dir bin key name out rc t0 done ran
	sdir=$(dirname "$server")
	family=$(basename "$server" -server)
	# The server's name and version (redis-7.0.15, valkey-8.0.1): Debian's and the compat
	# build of Redis are both redis-server.
	label=$("$server" --version 2>/dev/null | sed -n 's/^\([A-Za-z]*\) server v=\([^ ]*\).*/\1-\2/p' | tr 'A-Z' 'a-z' || true)
	label=${label:-$(basename "$server")}
	for ((r = 1; r <= n; r++)); do
		ran=0
		while IFS=$'\t' read -r dir bin key; do
			name=$(basename "$bin" .test)
			if [[ -n $key ]]; then
				done=$(awk -F'\t' -v k="$key" -v l="$label" '$1 == k && $3 == l' "$ledger" | wc -l)
				((done < r)) || continue # this round is on record
			fi
			out=$work/out.$name.$label.$r
			rc=0 t0=$SECONDS ran=1
			(cd "$dir" && ELECTOR_REDIS_SERVER=$server ELECTOR_REDIS_SENTINEL=$sdir/$family-sentinel \
				ELECTOR_REDIS_CLI=$sdir/$family-cli "$bin" -test.count=1 -test.v -test.timeout 20m) </dev/null >"$out" 2>&1 || rc=$?
			printf '%s\t%s\t%d\t%d\t%d\n' "$name" "$label" "$r" "$rc" $((SECONDS - t0)) >>"$work/results"
			[[ -z $key ]] || printf '%s\t%s\t%s\t%d\t%d\t%s\n' "$key" "$name" "$label" "$rc" \
				$((SECONDS - t0)) "$(date -u +%FT%TZ)" >>"$ledger"
			sed -n 's/^ *--- FAIL: \([^ ]*\).*/\1/p' "$out" | sed "s|^|$name $label\t|" >>"$work/failures"
			if [[ $rc -ne 0 ]]; then
				mkdir -p "$logs"
				cp "$out" "$logs/$name.$r.$label.log"
				log "round $r, $label, $name: FAILED (exit $rc); output in $logs"
				grep -E -e '--- FAIL|panic:' "$out" | head -n 10 >&2 || true
			fi
			rm -f "$out"
		done <"$work/bins"
		((ran == 0)) || log "$label: round $r of $n done ($(($(date +%s) - start)) s)"
	done
}
touch "$work/results" "$work/failures"
if [[ ${FLAKE_PARALLEL:-0} == 1 ]]; then
	streams=()
	for server in $FLAKE_SERVERS; do
		setsid bash -c "set -euo pipefail; $(declare -f hunt log); $(declare -p n work logs ledger start)
			hunt \"\$1\"" _ "$server" &
		pids+=($!) streams+=($!)
	done
	for p in "${streams[@]}"; do wait "$p" || { log "a server's stream failed (exit $?)"; stream_failed=1; }; done
else
	for server in $FLAKE_SERVERS; do hunt "$server"; done
fi

# 4. The summary: seconds and failures per binary and server, this hunt's runs and, with a
# ledger, every run on record for these binaries; non-zero on any failure.
echo "flake-hunt: seconds per binary and server, this hunt's runs (binary server<TAB>seconds):"
awk -F'\t' '{ t[$1 " " $2] += $5 } END { for (k in t) printf "  %s\t%d\n", k, t[k] }' "$work/results" | sort
runs=$(wc -l <"$work/results")
failed_runs=$(($(awk -F'\t' '$4 != 0' "$work/results" | wc -l) + ${stream_failed:-0}))
echo "flake-hunt: $runs runs of $(wc -l <"$work/bins") binaries, $n rounds, $failed_runs failed, $(($(date +%s) - start)) s"
recorded_failures=0
if [[ -n $ledger ]]; then
	echo "flake-hunt: on record in $ledger for these binaries (binary server<TAB>runs<TAB>failed):"
	awk -F'\t' 'NR == FNR { want[$3] = 1; next } want[$1] { k = $2 " " $3; runs[k]++; if ($4 != 0) bad[k]++ }
		END { for (k in runs) printf "  %s\t%d\t%d\n", k, runs[k], bad[k] }' "$work/bins" "$ledger" | sort >"$work/record"
	cat "$work/record"
	recorded_failures=$(awk -F'\t' '{ s += $3 } END { print s + 0 }' "$work/record")
fi
if [[ -s $work/failures ]]; then
	echo "failures per test (binary server<TAB>test):"
	sort "$work/failures" | uniq -c | sort -rn
	exit 1
fi
if [[ $failed_runs -ne 0 ]]; then
	echo "a run failed without a failing test (a build, a panic or a timeout): see the logs named above"
	exit 1
fi
if [[ $recorded_failures -ne 0 ]]; then
	echo "$recorded_failures run(s) of these binaries on record failed, in an earlier hunt: see the ledger and $logs"
	exit 1
fi
echo "no test failed"
