#!/usr/bin/env bash
# hack/model.sh: check the Promela models of model/ with spin (make model).
#
# Every PASS run must explore its whole state space without an assertion violation; every
# MUTANT run (a known bug put back with a -D flag) must make spin report a violation. A
# violation where none is expected prints the trail (spin -t -p, filtered to the steps).
# Each run prints its states, depth and time. Needs spin and a C compiler (Debian: spin, gcc).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v spin >/dev/null || { echo "model.sh: spin not found (apt-get install -y spin)" >&2; exit 2; }

fail=0
# run KIND NAME MODEL FLAGS...   KIND: pass | mutant
run() {
	local kind=$1 name=$2 model=$3
	shift 3
	local d="$work/$name"
	mkdir -p "$d"
	cp "${MODEL_SRC:-$root/model}/$model" "$d/"
	local start=$SECONDS
	local safety=-DSAFETY panflags=-E depthlimit=${DEPTH:-3000000}
	if [ "$kind" = live ]; then safety=; panflags="-a -f -N L1"; kind=pass; fi
	(cd "$d" && spin -a "$@" "$model" >spin.out 2>&1 && gcc -O1 -w $safety -DCOLLAPSE -o pan pan.c) ||
		{ echo "FAIL $name: spin/gcc:"; cat "$d/spin.out"; fail=1; return; }
	# -E: end states are not errors (the models run forever); -m: depth; -w: hash table 2^24.
	# live: acceptance cycles of the LTL formula L1 under weak fairness (-a -f).
	(cd "$d" && ./pan $panflags -m"$depthlimit" -w24 >pan.out 2>&1) || true
	local secs=$((SECONDS - start))
	local states depth errors
	states=$(awk '/states, stored/ {print $1; exit}' "$d/pan.out")
	depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$d/pan.out" | head -1)
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$d/pan.out" | head -1)
	if [ -z "${DEPTH:-}" ] && grep -q "max search depth too small" "$d/pan.out"; then
		echo "FAIL $name: depth limit reached, search incomplete"; fail=1; return
	fi
	case $kind in
	pass)
		if [ "${errors:-1}" != 0 ]; then
			echo "FAIL $name ($model $*): violation found; trail:"
			grep -E "assertion violated|pan:" "$d/pan.out" | head -5
			(cd "$d" && spin -t -p -k "$model.trail" "$@" "$model" 2>&1 |
				grep -E '^ *[0-9]+:.*proc +[0-9]+ \((Replica|Redis|Clock|Env|Lease|Monitor|Term|Notice)' |
				grep -v -E '\[(\(1\)|goto|\.\(goto\)|DO|IF|else|sub-sequence)\]' | tail -150)
			fail=1
		else
			echo "ok   $name: ${states} states, depth ${depth}, ${secs}s ($model $*)"
		fi ;;
	mutant)
		if [ "${errors:-0}" = 0 ]; then
			echo "FAIL $name ($model $*): spin found no violation: the model lost its teeth"
			fail=1
		else
			local what
			what=$(grep -m1 -o "assertion violated.*" "$d/pan.out" | cut -c1-120)
			echo "ok   $name caught after ${states} states, ${secs}s: ${what} ($model $*)"
		fi ;;
	esac
}

# One lease (Elector + the three scripts). S1-S3 without data loss: followers may try at any
# moment (covers every wake-up); calls may time out or lose their reply.
E_SAFE="-DANYWAKE -DRESTARTS=0 -DSUBDROPS=0 -DGIVEUPS=1 -DSTALE=0 -DCANCELS=0"
# S4 (data loss): the followers' real wake-up logic (timers, events, subscription), one restart;
# the scenario (S4SCEN) has one term before the loss and ends when no old-epoch term is trusted.
E_LOSS="-DS4SCEN -DRESTARTS=1 -DSUBDROPS=0 -DCANCELS=0 -DGIVEUPS=0 -DSTALE=0"

run pass   election-S1-S3             election.pml $E_SAFE
run pass   election-S4                election.pml $E_LOSS
run mutant mutant-renew-from-reply    election.pml $E_SAFE -DMUTANT_RENEW_FROM_REPLY
run mutant mutant-late-start          election.pml $E_SAFE -DMUTANT_LATE_START
run mutant mutant-sub-drop-acquire    election.pml $E_LOSS -DMUTANT_SUB_DROP_ACQUIRE
run mutant mutant-token-no-time       election.pml $E_LOSS -DMUTANT_TOKEN_NO_TIME
run mutant mutant-err-forgets-known   election.pml $E_LOSS -DMUTANT_ERR_FORGETS_KNOWN
# Resign: the leader may resign once (Elector.Resign, or a renewal that replies 2): the work
# stops, then the release creates the reservation that keeps it out for the hold-off (R1).
run pass   election-resign            election.pml $E_SAFE -DRESIGNS=1
run mutant mutant-resign-early-release election.pml $E_SAFE -DRESIGNS=1 -DMUTANT_RESIGN_EARLY_RELEASE
run mutant mutant-resign-no-reservation election.pml $E_SAFE -DRESIGNS=1 -DMUTANT_NO_RESERVATION

# Group's per-lease state machine.
run pass   group-1-lease              group.pml -DL=1
run mutant mutant-group-add-resume    group.pml -DL=1 -DMUTANT_ADD_RESUME
run mutant mutant-group-loop-block    group.pml -DL=2 -DMUTANT_LOOP_BLOCK
# Finding 1 (docs/MODEL.md), fixed: a release whose reply is an error (timeout) may still
# execute later; an acquire that resumes its record must not start a term. With one abandoned
# request that may execute late (STALE=1); the mutant undoes the fix.
run pass   finding-group-stale-release group.pml -DL=1 -DSTALE=1
run mutant mutant-group-trust-stale-resume group.pml -DL=1 -DSTALE=1 -DMUTANT_TRUST_STALE_RESUME

# The slot protocol of pkg/schedule: terms by token against Redis's clock and the
# claim, finish and skip scripts. SC0-SC4 in model/schedule.pml's header. Its mutants are
# patches of the model (test/mutants/model-schedule-*.patch, header line "Model: FLAGS"),
# applied to a copy; hack/mutants.sh runs them through TestScheduleModel as well.
S_PAUSE="-DT=2 -DPAUSES=1 -DSTALE=1 -DGIVEUPS=1 -DFAILS=1"
S_CRASH="-DT=2 -DPAUSES=0 -DCRASHES=1 -DRESTARTS=1 -DSTALE=1 -DGIVEUPS=1 -DFAILS=0"
S_LOSS="-DT=2 -DPAUSES=0 -DLOSSES=1 -DSTALE=1 -DGIVEUPS=1 -DFAILS=0"
S_THREE="-DT=3 -DNS=1 -DPAUSES=1 -DLOSSES=1 -DSTALE=0 -DGIVEUPS=0 -DFAILS=0"
run pass   schedule-pause-stale       schedule.pml $S_PAUSE
run pass   schedule-crash-restart     schedule.pml $S_CRASH
run pass   schedule-data-loss         schedule.pml $S_LOSS
run pass   schedule-three-terms       schedule.pml $S_THREE
for p in "$root"/test/mutants/model-schedule-*.patch; do
	name=$(basename "$p" .patch)
	mkdir -p "$work/src-$name/model"
	cp "$root/model/schedule.pml" "$work/src-$name/model/"
	(cd "$work/src-$name" && git apply "$p") || { echo "FAIL $name: the patch does not apply"; fail=1; continue; }
	# shellcheck disable=SC2046 # the header's flags are words
	MODEL_SRC="$work/src-$name/model" run mutant "$name" schedule.pml $(sed -n 's/^Model: //p' "$p" | head -1)
done

# Two releases whose outcome is unknown (the ReleaseOnCancel release of R, left
# on the wire, and Elector.Release of an older token), then the same Elector runs again and
# resumes R. The fix (termGuard: no term at or below a retired token) must hold; the mutant
# (the old single poisoned slot, overwritten by the second failure) must break S1. The full
# state space is too large for this script's budget, so both are bounded searches (DEPTH=120
# steps: the mutant's violation is found at depth <= 120); opt in with MODEL_POISON=1.
if [ "${MODEL_POISON:-0}" = 1 ]; then
	E_POISON="-DGUARD -DANYWAKE -DPOISONSCEN -DRESTARTS=0 -DSUBDROPS=0 -DGIVEUPS=2 -DSTALE=1 -DCANCELS=1 -DRERUNS=1 -DURELS=1"
	DEPTH=120 run pass   election-poison-bounded election.pml $E_POISON
	DEPTH=120 run mutant mutant-one-poison-slot  election.pml $E_POISON -DMUTANT_ONE_SLOT
fi

# L1 (liveness) in the LIVE configuration: zero network delay, one failed call, no restart,
# drop or cancel. About a minute more; opt in with MODEL_LIVE=1.
if [ "${MODEL_LIVE:-0}" = 1 ]; then
	run live election-L1 election.pml -DLIVE -DRESTARTS=0 -DSUBDROPS=0 -DCANCELS=0 -DSTALE=0
fi

echo "model.sh: total ${SECONDS}s"
exit $fail
