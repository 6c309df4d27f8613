// Package chaos is elector's chaos test: five `elector run` processes (the real binary) campaign
// for one lease on a real redis-server behind a fault proxy (internal/faultproxy), and a
// scheduler injects faults into them, repeatedly and in an order drawn from a printed seed:
// SIGKILL, SIGTERM and SIGSTOP (longer than the lease, then SIGCONT) of the leader, a restart of
// Redis without its data, Redis unreachable for twice the lease, 200ms of added round-trip
// latency, and severed connections.
//
// The command each elector runs while it leads is the worker (./worker): about every 5ms it
// pushes a record onto a Redis list through a fenced write (pkg/fence, with its
// ELECTOR_FENCING_TOKEN), through the same proxy, and logs the outcome with a wall-clock
// timestamp. The checker (Check) reads the worker logs, the list as Redis accepted it and the
// timeline of faults, and reports the terms, the work of two terms that overlapped (and the
// fault that caused it), the writes the fence rejected, the stale writes it accepted, the time
// without a worker after each fault, and whether tokens strictly increased; see Check for the
// rules that fail the test. On failure it prints the timeline around each violation and the seed.
//
// TestChaos runs for two minutes by default (20s with -short). Environment:
//
//	ELECTOR_CHAOS_DURATION  length of the fault phase, e.g. 10m (raise go test's -timeout to match)
//	ELECTOR_CHAOS_SEED      seed of the schedule of faults (default: from the clock; always printed)
//	ELECTOR_CHAOS_DIR       keep the logs of the run (workers, electors, Redis list) in this directory
//
// The seed fixes the kinds, order and parameters of the faults, not the scheduling of the
// processes, so a replay reproduces the schedule rather than every interleaving.
package chaos
