#!/usr/bin/env bash
# Runs a command while two busy loops keep both cores of the machine busy, as CI's loaded
# runs do: the timing tests must wait for the conditions they test and derive their margins
# from the configured timing, never from how fast an idle machine is.
#
# UNDER_LOAD_LANE=PID (.ci/run sets it to its builds lane): while that lane still runs (a cold
# CI machine, building Kubernetes), the lane is the load instead of the busy loops: its
# autogroup's nice is set to 0 for the command's duration (restored at exit), so it competes
# with the command as the loops would, and its CPU time builds what a later step needs rather
# than spinning. The busy loops start the moment the lane ends (at once when it is not running,
# or when its nice cannot be changed).
# Usage: hack/under-load.sh CMD [ARG...]   (BUSY=N sets the number of loops; default 2)
set -euo pipefail
n=${BUSY:-2}
lane=${UNDER_LOAD_LANE:-}
pids=()
lane_nice=""
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[[ -z $lane_nice ]] || echo "$lane_nice" 2>/dev/null >"/proc/$lane/autogroup" || true
}
trap cleanup EXIT INT TERM
# running: the lane's process exists and has not exited (an exited child of .ci/run stays a
# zombie until .ci/run waits for it).
running() {
	[[ -n $lane ]] || return 1
	local stat
	stat=$(cat "/proc/$lane/stat" 2>/dev/null) || return 1
	[[ ${stat##*) } != Z* ]]
}
if running; then
	old=$(sed -n 's/.* nice \(-*[0-9]*\)$/\1/p' "/proc/$lane/autogroup" 2>/dev/null || true)
	if [[ -n $old ]] && echo 0 >"/proc/$lane/autogroup" 2>/dev/null; then
		lane_nice=$old
		echo "under-load: the builds lane (pid $lane) is the load while it runs (its autogroup's nice 0, was $old); then $n busy loops" >&2
	else
		lane="" # cannot be made load: the busy loops from the start
	fi
fi
for ((i = 0; i < n; i++)); do
	(
		while running; do sleep 1; done
		((i > 0)) || [[ -z $lane_nice ]] || echo "under-load: the builds lane ended: $n busy loops from now" >&2
		while :; do :; done
	) &
	pids+=($!)
done
[[ -n $lane_nice ]] || echo "under-load: $n busy loops (pids ${pids[*]}) while running: $*" >&2
"$@"
