#!/bin/sh
# A periodic singleton job for `elector run`: elector starts it only on the leader, with the
# term's fencing token in its environment, and stops it (SIGTERM, then SIGKILL after
# --kill-grace) when leadership is lost.
#
#   elector run --lease-name nightly-report -- ./examples/singleton-job/job.sh
#
# Exit when done and elector releases the lease and exits with this script's code.
set -eu
every=${JOB_EVERY:-5}
runs=${JOB_RUNS:-0} # 0: forever
trap 'echo "job: stopping (lost leadership or shutdown)"; exit 0' TERM INT
n=0
while :; do
	n=$((n + 1))
	echo "job: run #$n by ${ELECTOR_IDENTITY:?} on lease ${ELECTOR_LEASE_NAME:?} with token ${ELECTOR_FENCING_TOKEN:?}"
	if [ "$runs" -gt 0 ] && [ "$n" -ge "$runs" ]; then
		exit 0
	fi
	sleep "$every" &
	wait $!
done
