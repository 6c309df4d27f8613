// Package schedule runs a job once per slot of a calendar schedule across the replicas of an
// election: only the leader runs, each slot at most once at a time, and what ran,
// failed or was missed is recorded in Redis beside the lease.
//
//	s, _ := schedule.New(schedule.Config{Client: c, LeaseName: "report", Spec: "30 2 * * *",
//		Location: berlin, Job: func(ctx context.Context) error {
//			slot, _ := schedule.SlotFrom(ctx) // slot.Time, slot.Attempt, slot.Token
//			return report(ctx, slot.Time)
//		}})
//	e, _ := election.New(election.Config{Client: c, LeaseName: "report", Identity: pod,
//		Callbacks: election.Callbacks{OnStartedLeading: func(ctx context.Context) { _ = s.Lead(ctx) }}})
//
// # Slots
//
// A slot is an instant: a time of the spec (robfig/cron/v3's standard parser; five fields or a
// descriptor) in the configured zone, kept as milliseconds since 1970 UTC. Across daylight
// saving changes the slots are robfig's, which are a CronJob's: a 02:30 job does not run on the
// spring-forward day and runs twice, an hour apart, on the fall-back day (dst_test.go). @every D
// counts from 1970-01-01 UTC, not from a process's start, so every replica computes the same
// slots.
//
// # State, claim and finish
//
// Two keys share the lease's hash tag: PREFIX:{NAME}:schedule holds the cursor (every slot at or
// before it is decided) and the record of the last claimed run (slot, phase, attempt, token,
// start, end, exit code, the holder's lease record); PREFIX:{NAME}:runs keeps the last History
// entries, "run ..." and "missed <first> <last> <count> <reason>" lines, newest first. Each step
// is one script (scripts/*.lua, functions of elector's library: internal/leasewire/lualib), fenced: it acts only if the lease key holds
// the caller's token.
//
//   - claim starts a run: it refuses a slot whose time has not come, a slot decided already, and
//     any slot while the same term runs one; a slot past the starting deadline, or out of
//     attempts, is recorded as missed instead. A run found "running" under another token is
//     recorded lost: the lease holds the caller's term, so that term ended, and its work was
//     told to stop before its lease could expire. The same slot then gets the next attempt.
//   - finish records done, failed, lost or cancelled with the end time; only while the lease
//     holds the run's term ("done" means the job succeeded while leading).
//   - skip moves the cursor over slots decided without a run, recording them as missed.
//
// A term (Lead) reads the state and Redis's time and decides one step at a time (plan, a pure
// function): the overlap policy for a slot that comes during a run (skip, wait, cancel), the
// catch-up policy for slots that came while nobody ran them (none, latest, all) with the starting
// deadline, and retries of failed runs (after RetryDelay) and lost runs (at once) up to
// MaxAttempts. The job's ctx is cancelled when the term's is; Lead returns after the job did, and
// records its end.
//
// # The clock
//
// Redis's clock (TIME inside the scripts) decides whether a slot is due or late, and stamps the
// starts and ends: one clock for every replica, so a replica whose clock is ahead cannot run a
// slot early, nor one behind call a slot late that another would run. Scripts that read TIME and
// write are replicated by their effects (the only mode from Redis 7, the default from 5), as the
// lease's acquire already relies on. A replica's own clock only times its sleeps: it estimates
// Redis's now as the last reply's time plus the local time since, reads again at least every
// minute, and a claim that comes early is refused with Redis's time and retried then. No slot runs
// twice whatever the clocks say: a slot is claimed at most once per attempt, by the holder of the
// lease, and the cursor only moves forward.
//
// # Faults
//
//   - The leader crashes mid-run: its run stays "running" under its token; the next leader's
//     claim records it lost and runs the slot as attempt 2 (or missed, past the deadline or out
//     of attempts).
//   - A handover (step-down, rollout): the run's ctx is cancelled; its end is recorded lost if
//     the lease still holds the term, and the next leader runs the slot again.
//   - A term ends while its job finishes: the finish is refused by the fence, the next leader
//     runs the slot again: at least once, as the done mark of --once-per.
//   - A term resumed with the same token (its deadline passed while Redis still held it) whose
//     run's end was not recorded: that run is recorded lost, and the slot gets its next attempt.
//   - Redis down, every replica down, a long handover: no slot runs; when a term can run again,
//     the catch-up policy decides the slots that came, and the others are recorded as missed.
//     There is no limit on how many: a backlog is counted in chunks of 100,000 slots.
//   - Redis restarts without its data (or fails over to a replica that lacked the last writes):
//     the state is lost with the lease. The next term starts again from the latest cursor its
//     process knows of (else from now): slots recorded in the lost state may run again.
//
// The simulator (sim_test.go) checks these under faults: no two runs at once, the runs of a slot
// ordered by term, none before its slot, every slot recorded, none done twice.
//
// # --once-per
//
// OncePer is elector run --once-per D on the same keys, scripts and status: a rolling schedule
// whose every run claims a slot of its own at Redis's time of the claim (after the cursor), so
// a slot is never retried and MaxAttempts never marks a run missed. The period is the done mark
// PREFIX:{NAME}:done (its value as before --once-per used slots), which finish.lua writes in the
// step that records a run done, to expire D after the run's start by Redis's clock; a term
// runs only while no mark holds, so DEL of the mark still resets the period.
package schedule
