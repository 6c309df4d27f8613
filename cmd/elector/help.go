package main

import (
	"context"
	"fmt"
	"strings"
)

// exitCodesHelp is the exit code table shared by `elector help` and docs/CLI.md.
const exitCodesHelp = `Exit codes:
  0  success
  1  runtime error (for example Redis unreachable in status, HTTP address in use)
  2  usage error: unknown flag, bad value, missing argument (one line on stderr names it)
  3  status: the lease has no holder; resign: no holder to resign; run: leadership lost
     with --exit-on-lost
  4  run: gave up without leading (--timeout passed, or --try-once found the lease held)
  N  run: the exit code of CMD when it exited by itself, or when it was stopped because
     the elector got SIGTERM/SIGINT (128+S when signal S killed it)
`

// mainHelp is the text of `elector help`.
func mainHelp() string {
	var b strings.Builder
	b.WriteString(`elector: leader election on a Redis lease, for singleton jobs and Kubernetes sidecars.

Usage: elector COMMAND [flags]

Commands:
`)
	width := 0
	for _, cmd := range commands() {
		width = max(width, len(cmd.name))
	}
	for _, cmd := range commands() {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, cmd.name, cmd.short)
	}
	b.WriteString(`
Try it without Redis: elector demo

Every flag can also be set from the environment as ELECTOR_<FLAG> (--redis-addr is
ELECTOR_REDIS_ADDR); flags on the command line win. The Redis password comes only from the
REDIS_PASSWORD environment variable or --redis-password-file, never from a flag.

`)
	b.WriteString(exitCodesHelp)
	b.WriteString(`
Run 'elector help COMMAND' or 'elector COMMAND --help' for the flags of a command.
Documentation: docs/CLI.md.
`)
	return b.String()
}

// commandHelp returns the description of a command, shown between its usage line and flags.
func commandHelp(name string) string {
	switch name {
	case "run":
		return runHelp
	case "sidecar":
		return sidecarHelp
	case "status":
		return statusHelp
	case "resign":
		return resignHelp
	case "demo":
		return demoHelp
	case "version":
		return versionHelp
	case "install":
		return installHelp
	case "help":
		return helpHelp
	case "completion":
		return completionHelp
	}
	return ""
}

// runHelp is the description of `elector run`, shown between its usage line and flags.
const runHelp = `Campaign for the lease and run CMD (directly, no shell) while this replica leads, with
stdin, stdout and stderr passed through and these variables added to its environment:
  ELECTOR_FENCING_TOKEN  the fencing token of the term (larger for every new term)
  ELECTOR_IDENTITY       this replica's identity
  ELECTOR_LEASE_NAME     the lease name

CMD runs under a small shim (this binary) that leads CMD's process group and is a child
subreaper: on Linux every descendant of CMD, even one that called setsid, is killed when CMD
exits, at SIGKILL after --kill-grace, and when the elector dies, even by SIGKILL. Should the
shim itself be killed, the elector, a child subreaper too, kills what it left before it
releases the lease; if it cannot make sure of that, it exits without releasing (the lease
expires). A --kill-grace above its bound is refused; when not set, it is derived from the
lease timing (see the flag). As PID 1 the elector also reaps orphaned zombies. When stdin is a terminal in whose foreground the elector
runs, CMD's group gets the foreground while it runs (Ctrl-C and Ctrl-Z then reach CMD).

  leadership lost    --stop-signal to CMD's group, SIGKILL after --kill-grace; then campaign
                     again and rerun CMD when leading again (with --exit-on-lost: exit 3)
  SIGTERM/SIGINT     forwarded to CMD (also while campaigning), SIGKILL after --kill-grace,
                     lease released; exit with CMD's code (128+S if signal S killed it; 0 if
                     no CMD was running). A second SIGTERM/SIGINT: SIGKILL at once
  SIGHUP/USR1/USR2   forwarded to CMD's group
  CMD exits          lease released; exit with CMD's exit code. With --on-success=hold, an
                     exit 0 keeps the lease (renewed, CMD not rerun) until SIGTERM/SIGINT
  --once-per D       an exit 0 writes a done mark (PREFIX:{NAME}:done) for D from CMD's start;
                     a leader that finds it keeps the lease and runs CMD when it expires
                     (with --exit-if-done: exit 0); elector status shows it
  --timeout D        exit 4 if not leading D after the start
  --try-once         exit 4 as soon as another replica is seen holding the lease
  elector resign     (or POST /resign) --stop-signal to CMD's group, SIGKILL after --kill-grace,
                     lease renewed until CMD exited, then released with a reservation for
                     another replica; campaign again (refused during the hold-off)

With --http-addr the endpoints of 'elector sidecar' are served as well.`

// sidecarHelp is the description of `elector sidecar`, shown between its usage line and flags.
const sidecarHelp = `Campaign for the lease and tell a neighbouring container whether this replica leads:

  GET /leader    200 JSON {"name": current leader ("" if none), "identity", "isLeader", "lease",
                 "token"}; "name" as in the classic Kubernetes leader-elector sidecar; while
                 Redis calls fail also "redisError" {"op", "reason", "error", "fix", "since"}
  GET /healthz   liveness: 200 unless the elector is wedged (never tied to leadership or to
                 Redis: restarting cannot fix Redis, and would restart every replica at once)
  GET /readyz    200 while this replica leads, else 503
  GET /metrics   Prometheus metrics, including leader_election_master_status{name}
  POST /resign   step down (as elector resign does) and answer once the lease is released;
                 ?to=IDENTITY names the successor. Needs the header X-Elector-Resign: 1
                 (and the token of --resign-token-file); 409 on a follower. Loopback peers
                 only by default (kubectl exec, kubectl port-forward): see --resign-endpoint

--status-file is rewritten atomically with "leader" and the term's deadline (until_unix=,
until=), or "follower"; a reader trusts "leader" only before that deadline.
SIGTERM or SIGINT releases the lease and exits 0.`

// statusHelp is the description of `elector status`, shown between its usage line and flags.
const statusHelp = `Print the holder of the lease, its fencing token, remaining time, when its term began and
how many terms the lease had (JSON and YAML fields lease, key, holder, instance, token, ttlMs,
acquiredAt, transitions, done: the mark of run --once-per). Exit 0 when the lease is held, 3 when it has no holder, 1 when Redis
cannot be read (the message names the address, the cause and its fix: for example a Sentinel
master name that no Sentinel knows, or the ACL permission to add).

With --watch (-w), print the state and then a line per change as it happens — acquired,
released, expired — from the lease's events channel (no polling), until SIGINT or SIGTERM
(exit 0). With -o json or yaml each change is one object (fields time, event and the above).`

// resignHelp is the description of `elector resign`, shown between its usage line and flags.
const resignHelp = `Ask the holder of the lease to step down, for a planned switchover (draining a node), and
wait until a new term begins; print the new holder as elector status does. The request is a
Redis key that the leader picks up at its next renewal (within its --retry-period, 2s by
default): it stops its work (elector run: the command gets its stop signal and kill grace),
releases the lease, and for --hold-off only --to (or, without --to, any replica but the old
holder) may acquire it, so that the old holder does not take it straight back.

Exit 0 when a new term began (with --to: the one of --to); 3 when nobody holds the lease
(nothing written); 1 when --timeout passed, saying what did not happen: the holder did not
step down (an election.Group member or an older elector ignores requests; or its work did
not stop), or --to did not take over (nobody leads until the hold-off ends, then anyone may);
2 for a bad flag. Needs the Redis user of run and sidecar (it runs a script), not the
observer's.`

// demoHelp is the description of `elector demo`, shown between its usage line and flags.
const demoHelp = `Start an embedded Redis-compatible server on loopback (or use --redis-addr) and --replicas
electors in this process, each leading with a toy singleton job that makes fenced writes.
Every few seconds the leader crashes (stops renewing, never releases) or stops gracefully
(releases), and comes back later. Prints a timeline and a summary; exits 1 if a safety check
failed (two leaders at once, a token that did not increase, a crash takeover before expiry).
Uses lease duration 2s, renew deadline 1.2s, retry period 300ms.`

// versionHelp is the description of `elector version`, shown between its usage line and flags.
const versionHelp = `Print the version, commit, build date, Go version and platform of this binary; a
field the build did not record (e.g. -buildvcs=false) prints as unknown.`

// installHelp is the description of `elector install`, shown between its usage line and flags.
const installHelp = `Copy this executable to PATH (into PATH/elector if PATH is a directory) with mode 0755,
atomically (a temporary file renamed over PATH). For init containers of images without cp.`

// helpHelp is the description of `elector help`, shown between its usage line and flags.
const helpHelp = `Show the help of elector, or of COMMAND.`

// completionHelp is the description of `elector completion`, shown between its usage line and flags.
const completionHelp = `Print a script that completes elector's commands, flags and flag values in bash, zsh or fish:
  bash   source <(elector completion bash)      or save it in /etc/bash_completion.d/elector
  zsh    source <(elector completion zsh)       (uses zsh's bashcompinit)
  fish   elector completion fish > ~/.config/fish/completions/elector.fish`

// helpCmd is `elector help [COMMAND]`.
func (c *cli) helpCmd(_ context.Context, args []string) int {
	switch {
	case len(args) == 0 || len(args) == 1 && (args[0] == "-h" || args[0] == "--help"):
		fmt.Fprint(c.stdout, mainHelp())
		return exitOK
	case len(args) > 1:
		return c.usageError("elector help", fmt.Errorf("unexpected argument %q: want elector help [COMMAND]", args[1]))
	}
	cmd, ok := findCommand(args[0])
	if !ok {
		return c.usageError("elector help", errUnknownCommand(args[0]))
	}
	if cmd.name == "help" {
		fmt.Fprint(c.stdout, mainHelp())
		return exitOK
	}
	return cmd.run(c, context.Background(), []string{"--help"})
}
