#!/usr/bin/env bash
# Runs a command while two busy loops keep both cores of the machine busy, as CI's loaded
# runs do: the timing tests must wait for the conditions they test and derive their margins
# from the configured timing, never from how fast an idle machine is.
# Usage: hack/under-load.sh CMD [ARG...]   (BUSY=N sets the number of loops; default 2)
set -euo pipefail
n=${BUSY:-2}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
for ((i = 0; i < n; i++)); do
	( while :; do :; done ) &
	pids+=($!)
done
echo "under-load: $n busy loops (pids ${pids[*]}) while running: $*" >&2
"$@"
