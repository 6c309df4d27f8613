#!/usr/bin/env bash
# The long chaos run of `elector run --schedule` (the proof of the slot promise): 3 replicas of the built
# binary, a redis-server with AOF, ≥ 300 slots of '@every 2s' through SIGKILLs of the leader,
# rollouts, Redis restarts, steps of Redis's clock and outages (test/chaos/schedule_test.go).
# It prints the figures and keeps the logs.
#
# Usage: hack/schedule-chaos.sh [SLOTS]   (default 300; about 2.2 s per slot)
#   ELECTOR_SCHEDULE_CHAOS_DIR  where the logs go (default a new directory under /tmp)
set -euo pipefail
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
slots=${1:-300}
dir=${ELECTOR_SCHEDULE_CHAOS_DIR:-$(mktemp -d /tmp/elector-schedule-chaos-XXXXXX)}
# Two and a half seconds a slot for the faults, plus the build.
timeout=$(( slots * 5 / 2 + 300 ))s
echo "schedule-chaos: $slots slots, logs in $dir, timeout $timeout" >&2
cd "$repo_root"
ELECTOR_REQUIRE_REDIS=1 ELECTOR_SCHEDULE_CHAOS=1 ELECTOR_SCHEDULE_CHAOS_SLOTS=$slots ELECTOR_SCHEDULE_CHAOS_DIR=$dir \
	go test -count=1 -timeout "$timeout" -run 'TestScheduleChaos$' -v ./test/chaos
echo "schedule-chaos: summary in $dir/summary.txt" >&2
