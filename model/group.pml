/*
 * group.pml: the per-lease state machine of election.Group (the spec of the Group rebuild:
 * idle/acquiring/leading/stopping/releasing/draining/notifying) for L leases of one Group
 * replica G, against one Redis running acquire/renew/release atomically, and another replica
 * C for every lease, modelled ideally: C takes a lease whenever Redis has no record for it and
 * trusts it exactly while Redis holds C's record. docs/MODEL.md maps the steps to the code.
 *
 * Abstracted: batching (one request per lease; a batch is its requests sent at one tick),
 * events and fair-share arithmetic (an idle lease may attempt at any moment, which covers
 * every schedule: next attempts, "released" events, shares), the renew period (a leading
 * lease may send a renew whenever none is in flight: covers every schedule), data loss
 * (election.pml covers it).
 *
 * Mutants: MUTANT_ADD_RESUME (Add during releasing acquires again while the release is still
 * queued: the old "Add after Remove" bug), MUTANT_LOOP_BLOCK (OnStoppedLeading runs on the
 * loop: while it runs no lease's deadline is checked), MUTANT_TRUST_STALE_RESUME (an acquire that
 * resumes the record of a release given up on starts a term: docs/MODEL.md finding 1, the fix
 * undone).
 *
 * The fix of finding 1: a release given up on (its outcome unknown: it may still execute) leaves
 * its record poisoned (ptok); an acquire that resumes that record is taken as held by another (no
 * term, no second release); the poison is dropped when a reply shows another record, or when the
 * release's outcome becomes known (its reply read).
 */

#ifndef L
#define L 2
#endif
#ifndef RD
#define RD 3
#endif
#ifndef LD
#define LD 6
#endif
#define DRIFT 1
#define CAP (RD + DRIFT + 1)
#ifndef ADDS
#define ADDS 1
#endif
#ifndef REMOVES
#define REMOVES 1
#endif
#ifndef SHEDS
#define SHEDS 1
#endif
#ifndef GIVEUPS
#define GIVEUPS 1
#endif
#ifndef STALE
#define STALE 0
#endif

#define IDLE 0
#define ACQ 1
#define LEADING 2
#define STOPPING 3
#define RELEASING 4
#define DRAINING 5
#define NOTIFYING 6
#define GONE 7            /* forgotten (removed and idle) */

#define Q_ACQ 1
#define Q_REN 2
#define Q_REL 3
#define R_WON 1
#define R_HELD 2
#define R_OK 3
#define R_ZERO 4
#define R_ERR 5

#define G 1               /* owner ids in records */
#define C 2

/* G's loop, per lease */
byte gs[L];
bit removed[L];
bit notify[L];
bit lostterm[L];          /* the term ended by loss (schedule now) rather than release */
bit trust[L];             /* Held(): G's term is trusted */
bit work[L];              /* OnStartedLeading running on the lease's callback goroutine */
bit cb[L];                /* OnStoppedLeading running */
byte el[L];               /* ticks since the acquire's send (ACQ) / lastOK's send (leading, stopping) */
byte rel[L];              /* ticks since the in-flight renew's send */
byte gtok[L];             /* G's record for the lease (its token), 0 none */
byte ptok[L];             /* G's poisoned record: a release of it was given up on, 0 none */
byte call[L];             /* the call the loop waits for */
byte rpk[L];
byte rpt[L];
/* the network: two request slots per lease */
byte rqk[2*L];
byte rqt[2*L];
bit  rqi[2*L];            /* 1: the call the loop waits for; 0: abandoned */
/* Redis */
byte ktok[L];
byte kown[L];
byte kttl[L];
byte runstop;             /* Run's ctx cancelled */
byte adds = ADDS;
byte removes = REMOVES;
byte sheds = SHEDS;
byte giveups = GIVEUPS;
byte stale = STALE;

#ifdef MUTANT_LOOP_BLOCK
#define BLOCKED (cb[0] || cb[L-1])
#else
#define BLOCKED false
#endif

/* a won acquire reply that resumes the poisoned record (never, in the mutant) */
#ifdef MUTANT_TRUST_STALE_RESUME
#define RESUMES_POISONED(x) false
#else
#define RESUMES_POISONED(x) (ptok[x] != 0 && rpt[x] == ptok[x])
#endif

/* a fresh token for a new record of lease l: the smallest value no variable of l holds
 * (only equality of records matters to the scripts) */
byte nt, j;
#define USED(v) (ktok[l] == v || gtok[l] == v || ptok[l] == v || rpt[l] == v || rqt[2*l] == v || rqt[2*l+1] == v)
inline fresh(l) {
	nt = 1;
	do
	:: USED(nt) -> nt++
	:: else -> break
	od
}

inline send(l, kind, tok) {
	rqi[2*l] = 0; rqi[2*l+1] = 0;
	if
	:: rqk[2*l] == 0 -> rqk[2*l] = kind; rqt[2*l] = tok; rqi[2*l] = 1
	:: else -> rqk[2*l+1] = kind; rqt[2*l+1] = tok; rqi[2*l+1] = 1
	fi;
	call[l] = kind; rpk[l] = 0
}

inline abandon(l) {
	if
	:: rqk[2*l] != 0 && rqi[2*l] -> rqk[2*l] = 0; rqt[2*l] = 0
	:: rqk[2*l+1] != 0 && rqi[2*l+1] -> rqk[2*l+1] = 0; rqt[2*l+1] = 0
	:: stale > 0 && ((rqk[2*l] != 0 && rqi[2*l]) || (rqk[2*l+1] != 0 && rqi[2*l+1])) -> stale--
	:: !((rqk[2*l] != 0 && rqi[2*l]) || (rqk[2*l+1] != 0 && rqi[2*l+1]))
	fi;
	rqi[2*l] = 0; rqi[2*l+1] = 0;
	call[l] = 0; rpk[l] = 0; rpt[l] = 0
}

inline reply(l, id, kind, tok) {
	if
	:: call[l] != 0 && id && rpk[l] == 0 -> rpk[l] = kind; rpt[l] = tok
	:: else
	fi
}

/* Redis: one request of G (lease k/2) atomically */
byte rl, rk, rt;
bit rid;
inline exec(k) {
	rl = k / 2; rk = rqk[k]; rt = rqt[k]; rid = rqi[k];
	rqk[k] = 0; rqt[k] = 0; rqi[k] = 0;
	if
	:: rk == Q_ACQ ->
		if
		:: ktok[rl] != 0 && kown[rl] == G -> kttl[rl] = LD; reply(rl, rid, R_WON, ktok[rl])
		:: ktok[rl] != 0 && kown[rl] != G -> reply(rl, rid, R_HELD, 0)
		:: ktok[rl] == 0 -> l = rl; fresh(l); l = 0;
			ktok[rl] = nt; kown[rl] = G; kttl[rl] = LD; reply(rl, rid, R_WON, nt); nt = 0
		fi
	:: rk == Q_REN ->
		if
		:: ktok[rl] == rt && kown[rl] == G -> kttl[rl] = LD; reply(rl, rid, R_OK, rt)
		:: else -> reply(rl, rid, R_ZERO, rt)
		fi
	:: rk == Q_REL ->
		if
		:: ktok[rl] == rt && kown[rl] == G -> ktok[rl] = 0; kown[rl] = 0; kttl[rl] = 0; reply(rl, rid, R_OK, rt)
		:: else -> reply(rl, rid, R_ZERO, rt)
		fi
	fi;
	rl = 0; rk = 0; rt = 0; rid = 0
}
byte l;

active proctype Redis() {
end:	do
	:: d_step { rqk[0] != 0 -> exec(0) }
	:: d_step { rqk[1] != 0 -> exec(1) }
#if L == 2
	:: d_step { rqk[2] != 0 -> exec(2) }
	:: d_step { rqk[3] != 0 -> exec(3) }
#endif
	/* C takes a lease that Redis holds no record for */
	:: d_step { ktok[0] == 0 -> l = 0; fresh(l); ktok[0] = nt; kown[0] = C; kttl[0] = LD; nt = 0; l = 0 }
#if L == 2
	:: d_step { ktok[1] == 0 -> l = 1; fresh(l); ktok[1] = nt; kown[1] = C; kttl[1] = LD; nt = 0; l = 0 }
#endif
	od
}

/* the loop must check a deadline before time passes it (unless it is blocked: the mutant) */
#define DUE(x) (trust[x] && el[x] >= RD + DRIFT && !BLOCKED)
active proctype Clock() {
	byte c;
end:	do
	:: d_step { !DUE(0) && !DUE(L-1) ->
		c = 0;
		do
		:: c < L ->
			if :: gs[c] == ACQ || trust[c] -> el[c] = (el[c] < CAP -> el[c] + 1 : CAP) :: else -> el[c] = 0 fi;
			if :: call[c] == Q_REN -> rel[c] = (rel[c] < CAP -> rel[c] + 1 : CAP) :: else -> rel[c] = 0 fi;
			if
			:: ktok[c] != 0 -> kttl[c]--; if :: kttl[c] == 0 -> ktok[c] = 0; kown[c] = 0 :: else fi
			:: else
			fi;
			c++
		:: else -> break
		od;
		c = 0 }
	od
}

/* term ends by loss: ctx cancelled, work drains */
inline lose(x) {
	trust[x] = 0; lostterm[x] = 1;
	if :: call[x] != 0 -> abandon(x) :: else fi;
	gtok[x] = 0;
	if :: work[x] -> gs[x] = DRAINING :: else -> gs[x] = NOTIFYING; cb[x] = 1 fi
}
/* Remove, shed or Run stop of a trusted term */
inline stop(x) {
	if
	:: work[x] -> gs[x] = STOPPING                           /* ctx cancelled; renewals go on */
	:: else -> trust[x] = 0; lostterm[x] = 0; notify[x] = 1;
		if :: call[x] != 0 -> abandon(x) :: else fi;
		send(x, Q_REL, gtok[x]); gs[x] = RELEASING
	fi
}
/* reaching idle */
inline toidle(x) {
	gtok[x] = 0; lostterm[x] = 0; notify[x] = 0;
	gs[x] = (removed[x] -> GONE : IDLE)
}

/* one lease's steps in G's loop (and its callback goroutine) */
proctype Lease(byte x) {
end:	do
	/* idle + due -> acquiring (any moment: covers next attempts, events, shares) */
	:: atomic { !BLOCKED && gs[x] == IDLE && !runstop -> el[x] = 0; send(x, Q_ACQ, 0); gs[x] = ACQ }
	/* acquiring + won, resuming the poisoned record: as held by another (the fix of finding 1) */
	:: atomic { !BLOCKED && gs[x] == ACQ && rpk[x] == R_WON && RESUMES_POISONED(x) ->
		call[x] = 0; rpk[x] = 0; rpt[x] = 0; toidle(x) }
	/* acquiring + won */
	:: atomic { !BLOCKED && gs[x] == ACQ && rpk[x] == R_WON && !RESUMES_POISONED(x) ->
		ptok[x] = 0;                           /* another record: the poisoned one is gone */
		gtok[x] = rpt[x]; call[x] = 0; rpk[x] = 0; rpt[x] = 0;
		if
		:: removed[x] || runstop -> notify[x] = 0; send(x, Q_REL, gtok[x]); gs[x] = RELEASING
		:: el[x] >= RD - DRIFT -> notify[x] = 0; send(x, Q_REL, gtok[x]); gs[x] = RELEASING  /* late */
		:: !removed[x] && !runstop && el[x] < RD + DRIFT ->
			assert(el[x] < RD + DRIFT);        /* S3 */
			assert(!work[x] && !cb[x]);        /* callbacks of one lease never overlap */
			trust[x] = 1; work[x] = 1; gs[x] = LEADING
		fi }
	:: atomic { !BLOCKED && gs[x] == ACQ && rpk[x] == R_HELD -> call[x] = 0; rpk[x] = 0; ptok[x] = 0; toidle(x) }
	:: atomic { !BLOCKED && gs[x] == ACQ && (rpk[x] == R_ERR || (rpk[x] == 0 && giveups > 0)) ->
		if :: rpk[x] == 0 -> giveups-- :: else fi; abandon(x); toidle(x) }
	/* leading|stopping: a renew goes out (in a batch) */
	:: atomic { !BLOCKED && trust[x] && call[x] == 0 -> rel[x] = 0; send(x, Q_REN, gtok[x]) }
	:: atomic { !BLOCKED && trust[x] && rpk[x] == R_OK -> call[x] = 0; rpk[x] = 0; rpt[x] = 0; el[x] = rel[x] }
	:: atomic { !BLOCKED && trust[x] && rpk[x] == R_ZERO -> call[x] = 0; rpk[x] = 0; rpt[x] = 0; lose(x) }
	:: atomic { !BLOCKED && trust[x] && call[x] == Q_REN && (rpk[x] == R_ERR || (rpk[x] == 0 && giveups > 0)) ->
		if :: rpk[x] == 0 -> giveups-- :: else fi; abandon(x) }
	/* leading|stopping + deadline */
	:: atomic { !BLOCKED && trust[x] && el[x] >= RD - DRIFT -> lose(x) }
	/* leading + Remove / shed / Run stop */
	:: atomic { !BLOCKED && gs[x] == LEADING && (removed[x] || runstop) -> stop(x) }
	:: atomic { !BLOCKED && gs[x] == LEADING && sheds > 0 -> sheds--; stop(x) }
	/* stopping + work returned -> releasing */
	:: atomic { !BLOCKED && gs[x] == STOPPING && !work[x] -> stop(x) }
	/* releasing + reply (released, not owner, error, or given up) */
	:: atomic { !BLOCKED && gs[x] == RELEASING && (rpk[x] != 0 || giveups > 0) ->
		if
		:: rpk[x] == 0 -> giveups--; ptok[x] = gtok[x]   /* outcome unknown: poisoned */
		:: else -> if :: ptok[x] == gtok[x] -> ptok[x] = 0 :: else fi
		fi;
		abandon(x);
		if :: notify[x] -> gs[x] = NOTIFYING; cb[x] = 1 :: else -> toidle(x) fi }
	/* draining + work returned */
	:: atomic { !BLOCKED && gs[x] == DRAINING && !work[x] -> gs[x] = NOTIFYING; cb[x] = 1 }
	/* notifying + OnStoppedLeading returned (runs on the callback goroutine: any time) */
	:: atomic { gs[x] == NOTIFYING && cb[x] -> cb[x] = 0; toidle(x) }
	/* the callback goroutine: OnStartedLeading returns (by itself, or after its ctx was cancelled) */
	:: atomic { work[x] -> work[x] = 0 }
	/* Add: clears removed; a forgotten lease becomes idle; never resumes a term */
	:: atomic { !BLOCKED && adds > 0 -> adds--; removed[x] = 0;
		if
		:: gs[x] == GONE -> gs[x] = IDLE
#ifdef MUTANT_ADD_RESUME
		:: gs[x] == RELEASING -> rqi[2*x] = 0; rqi[2*x+1] = 0;   /* the queued release stays queued */
			el[x] = 0; send(x, Q_ACQ, 0); gs[x] = ACQ; notify[x] = 0
#endif
		:: else
		fi }
	/* Remove */
	:: atomic { !BLOCKED && removes > 0 && !removed[x] -> removes--; removed[x] = 1;
		if :: gs[x] == IDLE -> gs[x] = GONE :: else fi }
	od
}

active proctype Env() {
end:	do
	:: atomic { !runstop -> runstop = 1 }
	od
}

init {
	atomic { run Lease(0);
#if L == 2
	run Lease(1)
#endif
	}
}

/* S1 for a Group lease: G and C never both trust it */
#define GS1(x) (!(trust[x] && ktok[x] != 0 && kown[x] == C))
active proctype Monitor() {
	atomic { !(GS1(0) && GS1(L-1)) -> assert(GS1(0) && GS1(L-1)) }
}
