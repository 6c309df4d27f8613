/*
 * election.pml: one lease, N replicas running election.Elector (pkg/election/elector.go)
 * against one Redis executing the three scripts of internal/lease/scripts atomically.
 * docs/MODEL.md maps every step below to the Go function and Lua script it stands for.
 *
 * Time is discrete (ticks of Redis's clock) and relative: every stored time is a countdown
 * (timers, the key's TTL) or an elapsed-time counter (since a send), saturating, so the state
 * space is finite without a horizon and liveness (cycles) can be checked. The process Clock
 * advances time by one tick when no obligation is due (a timer at the end of its window, a
 * leader at its renew deadline).
 *
 * Drift: a replica's local duration d lasts between d-DRIFT and d+DRIFT ticks of Redis's clock,
 * independently for every timer and every measurement (an over-approximation of a clock whose
 * rate is within +-rho of Redis's).
 *
 * Fencing tokens are small integers re-coded at every new term by their rank among all token
 * values in the state (renorm), which keeps their order and equality and the state space finite.
 *
 * Compile-time switches: N (replicas), LIVE (the liveness configuration: zero network delay,
 * finitely many faults), and the mutants MUTANT_RENEW_FROM_REPLY, MUTANT_LATE_START,
 * MUTANT_SUB_DROP_ACQUIRE, MUTANT_TOKEN_NO_TIME, MUTANT_ONE_SLOT, MUTANT_ERR_FORGETS_KNOWN
 * (see docs/MODEL.md).
 *
 * Released records (termGuard, pkg/election/term.go): a replica retires the token of every
 * record it sends a release for, whatever the outcome (ret[i], the largest), and never starts a
 * term on a won record whose token is not above it: such a release may still run later and
 * delete the key under the term. With RERUNS a returned Run may run again (the same Elector),
 * and with URELS a returned Run may call Elector.Release with an older token of its own, a
 * second release whose outcome is unknown. The rest of the guard (tokens seen in replies) only
 * matters after a rollback, which this model does not have (a restart loses everything).
 * The guard is compiled in with -DGUARD only: without stale requests and Runs again it only
 * refuses resumes that are safe anyway, and its retired tokens multiply the state space of the
 * default runs (election-resign: past 18 million states instead of 3).
 */

#ifndef N
#define N 2
#endif
#define NS (2*N)          /* request slots: two per replica (one abandoned + one current) */

/* Timing in ticks; the same rule as ValidateTiming: LD > RD + DRIFT, RD > 1.2 RP. */
#ifndef RP
#define RP 2		/* RetryPeriod */
#endif
#ifndef RD
#define RD 3		/* RenewDeadline */
#endif
#ifndef LD
#define LD 6		/* LeaseDuration */
#endif
#define DRIFT 1           /* how far one local duration may be off, in ticks */
#define CAP (RD + DRIFT + 1) /* elapsed counters saturate here */
#define MAXTOK 10

#ifndef RESTARTS
#define RESTARTS 1        /* Redis restarts with data loss */
#endif
#ifndef SUBDROPS
#define SUBDROPS 1        /* subscriptions that break without a restart */
#endif
#ifndef GIVEUPS
#ifdef LIVE
#define GIVEUPS 1         /* lost replies / timeouts in the liveness run */
#else
#define GIVEUPS 2         /* calls that time out or lose their reply, at any moment */
#endif
#endif
#ifndef STALE
#define STALE 1           /* abandoned requests that may still be executed later */
#endif
#ifndef CANCELS
#define CANCELS 1         /* Run contexts cancelled */
#endif
#ifndef RESIGNS
#define RESIGNS 0         /* resignations (Elector.Resign, or a renewal that replies 2) */
#endif
#ifndef HOLDT
#define HOLDT 3           /* the hold-off of a resignation's reservation, in ticks */
#endif
#ifndef RERUNS
#define RERUNS 0          /* Runs started again on the same Elector after one returned */
#endif
#ifndef URELS
#define URELS 0           /* Elector.Release of an older token after Run returned */
#endif
/* POISONSCEN: the scenario of two releases of unknown outcome, to keep the search small: only replica
 * 0 is cancelled, runs again and calls Release; only releases time out or lose their reply. */
#ifdef POISONSCEN
#define CALLGU false      /* acquires and renewals never give up */
#define SOLO(i) (i == 0)
#else
#define CALLGU (giveups > 0)
#define SOLO(i) true
#endif

/* replica states (the place in Run/campaign/lead) */
#define CAMP   1          /* campaign: top of the loop, about to attempt */
#define AWAIT  2          /* campaign: AcquireReplicated in flight */
#define FOLLOW 3          /* campaign: the waiting select (timer, events, resubscribe) */
#define LEAD   4          /* lead: the select loop */
#define RELW   5          /* a release in flight (stepDown, late won acquire, cancel) */
#define DONE   6          /* Run returned */

/* what follows a release */
#define A_DONE  1
#define A_RETRY 2

/* request kinds */
#define Q_ACQ 1
#define Q_REN 2
#define Q_REL 3
#define Q_RSG 4           /* release.lua with the resign key and a request for the term */
/* reply kinds */
#define R_WON  1          /* acquire {1, record, ttl} */
#define R_HELD 2          /* acquire {0, record, pttl} */
#define R_OK   3          /* renew/release 1 */
#define R_ZERO 4          /* renew/release 0 */
#define R_ERR  5          /* connection error (Redis down or restarted) */
/* events */
#define E_ACQ 1
#define E_REN 2
#define E_REL 3
/* subscription */
#define S_DOWN 0
#define S_UP 1
#define S_CLOSED 2        /* broken; the follower has not read the closed channel yet */

#ifdef UNLIMITED_GIVEUPS
#define GIVEUP(i) skip
#else
#define GIVEUP(i) if :: rpk[i] == 0 -> giveups-- :: else fi
#endif

/* ---- replicas (Elector fields and Run's locals) ---- */
byte st[N];
byte aft[N];
bit  lead[N];             /* IsLeader: the term is trusted (ctx of OnStartedLeading live or winding down on purpose) */
bit  stopping[N];         /* Run's ctx cancelled while leading: work winding down, still renewing */
bit  canc[N];             /* Run's ctx cancelled */
byte el[N];               /* ticks since the acquire was sent (AWAIT) / since lastOK's send (LEAD) */
byte rel[N];              /* ticks since the in-flight renew was sent */
bit  ton[N];              /* timer armed: follower wake-up, or leader's renew tick */
byte tlo[N];              /* ticks until the timer may fire */
byte thi[N];              /* ticks until it must have fired */
byte ttok[N];             /* token of the term held or being released */
byte seen[N];             /* Elector.seen */
byte ret[N];              /* termGuard.retired: largest token of a record a release was sent for
                           * (MUTANT_ONE_SLOT: the one poisoned record, the old Elector.poisoned) */
byte rlsd[N];             /* Elector.released */
byte sub[N];
bit  resub[N];            /* the resubscribe timer of campaign is armed */
byte evk[N];              /* event delivered to the subscription, not yet read */
byte evt[N];
byte call[N];             /* kind of the call the replica waits for, 0 none */
byte rpk[N];              /* its reply, 0 while none arrived */
byte rpt[N];
byte rpl[N];
/* ---- the network: requests sent and not yet executed ---- */
byte rqk[NS];
byte rqt[NS];
byte rqi[NS];
/* ---- Redis ---- */
byte ktok;                /* token of the record in P:{NAME}:lease, 0 = absent */
byte kown;                /* owner (replica index) of that record */
byte kttl;                /* its PTTL in ticks */
byte tokkey;              /* P:{NAME}:token */
byte maxtok;              /* largest token ever handed out (stands for TIME in µs) */
bit  rdown;               /* restarting: connections refused until the next tick */
/* ---- fault budgets ---- */
byte restarts = RESTARTS;
byte subdrops = SUBDROPS;
byte giveups = GIVEUPS;
byte stale = STALE;
byte cancels = CANCELS;
byte resigns = RESIGNS;
byte reruns = RERUNS;
byte urels = URELS;
/* ---- resign (internal/lease/scripts/resign.lua; the reservation in P:{NAME}:resign) ---- */
bit  rsg[N];              /* asked to resign: the work is stopping, then release with the reservation */
byte rvown;               /* the reservation keeps out replica rvown-1; 0 = no reservation */
byte rvttl;               /* its PTTL in ticks */
/* ---- ghosts for the properties ---- */
byte losses;              /* data losses so far (the epoch) */
byte epoch[N];            /* epoch in which the replica's term began */
byte lossel = CAP;        /* ticks since the last data loss */
bit  allinf;              /* at the last loss, every live follower knew the current expiry and listened */
bit  knows[N];            /* the follower's timer is the expiry of the latest acquire/renew */
byte kx[N];               /* follower.known (knownExpiry): ticks until the expiry of the holder last
                           * heard of, 0 = none or past; kept apart from the timer, which may be a poll.
                           * Always 0 with ANYWAKE (a follower may attempt at any moment anyway) */
bit  kpoll[N];            /* follower.polling: the timer is a poll, sooner than kx (not listening) */
bit  kfresh[N];           /* ghost: kx is the expiry of the latest acquire/renew */
bit  repfresh[N];         /* the pending HELD reply reflects the latest acquire/renew */
byte lastst;              /* token of the last term started (S2) */
byte lastown;
bit  tickp;               /* flips at every tick (non-Zeno assumption of L1) */
bit  nterms;             /* S4 scenario: a term began before the loss */
bit  relpend;             /* a release was executed while a follower listened: L1b */

#define LEADS (lead[0] || lead[1] NTH2)
#if N == 3
#define NTH2 || lead[2]
#else
#define NTH2
#endif

inline stoptimer(i) { ton[i] = 0; tlo[i] = 0; thi[i] = 0 }

inline settimer(i, w) {
	tlo[i] = (w > DRIFT -> w - DRIFT : 0);
	thi[i] = w + DRIFT;
	ton[i] = 1
}

/* lease.Lease.call: a request goes on the wire with a fresh id; its reply is awaited. */
inline send(i, kind, tok) {
	rqi[2*i] = 0; rqi[2*i+1] = 0;      /* whatever is still on the wire was abandoned */
	if
	:: rqk[2*i] == 0 -> rqk[2*i] = kind; rqt[2*i] = tok; rqi[2*i] = 1
	:: else -> rqk[2*i+1] = kind; rqt[2*i+1] = tok; rqi[2*i+1] = 1  /* an abandoned request in slot 1 is lost */
	fi;
	call[i] = kind;
	rpk[i] = 0
}

/* The caller stops waiting (timeout, lost reply, cancel): the request, if not yet executed,
 * is either lost or still executed later; its reply goes nowhere. */
inline abandon(i) {
	if
	:: rqk[2*i] != 0 && rqi[2*i] -> rqk[2*i] = 0; rqt[2*i] = 0
	:: rqk[2*i+1] != 0 && rqi[2*i+1] -> rqk[2*i+1] = 0; rqt[2*i+1] = 0
	:: stale > 0 && ((rqk[2*i] != 0 && rqi[2*i]) || (rqk[2*i+1] != 0 && rqi[2*i+1])) -> stale--
	:: !((rqk[2*i] != 0 && rqi[2*i]) || (rqk[2*i+1] != 0 && rqi[2*i+1]))
	fi;
	rqi[2*i] = 0; rqi[2*i+1] = 0;
	call[i] = 0;
	rpk[i] = 0
}

/* Elector.observe: news ordered by token; sets the local result `cur`. */
inline observe(i, tok, released) {
	if
	:: tok < seen[i] || tok <= rlsd[i] -> cur = 0
	:: else ->
		cur = 1;
		seen[i] = tok;
		if
		:: released -> rlsd[i] = tok
		:: else
		fi
	fi
}

/* termGuard: is the won record rpt[i] one no term may start on? (sets `cur`) */
inline untrusted(i) {
#ifndef GUARD
	cur = 0
#elif defined(MUTANT_ONE_SLOT)
	/* the old rule: only the one poisoned record; a reply showing another forgets it */
	if
	:: ret[i] != 0 && rpt[i] == ret[i] -> cur = 1
	:: else -> cur = 0; ret[i] = 0
	fi
#else
	cur = (rpt[i] <= ret[i])
#endif
}

/* a release of ttok[i] is sent: retire it (MUTANT_ONE_SLOT: poisoned only when it fails) */
inline retire(i) {
#if defined(GUARD) && !defined(MUTANT_ONE_SLOT)
	if :: ttok[i] > ret[i] -> ret[i] = ttok[i] :: else fi
#else
	skip
#endif
}

/* the outcome of the release of ttok[i] (MUTANT_ONE_SLOT: a failure overwrites the slot) */
inline relout(i) {
#if defined(GUARD) && defined(MUTANT_ONE_SLOT)
	if
	:: rpk[i] == 0 || rpk[i] == R_ERR -> ret[i] = ttok[i]
	:: else -> if :: ret[i] == ttok[i] -> ret[i] = 0 :: else fi
	fi
#else
	skip
#endif
}

/* leaseTiming.followerWait (term.go) with the timer of campaign (jitter is inside DRIFT) */
inline followerwait(i, ttl) {
	if
#ifdef ANYWAKE
	:: true -> skip
#else
	:: sub[i] == S_DOWN && ttl > RP -> settimer(i, RP); knows[i] = 0; kpoll[i] = 1
	:: else -> settimer(i, ttl); knows[i] = (repfresh[i] && sub[i] == S_UP); kpoll[i] = 0
#endif
	fi
}

/* follower.retryWait after a failed attempt: the backoff (50ms..RP: 0..RP ticks), and not
 * before the known expiry (knownExpiry.retryAfter); the mutant forgets it */
inline retrywait(i) {
#ifndef MUTANT_ERR_FORGETS_KNOWN
	if
	:: kx[i] > 0 -> tlo[i] = (kx[i] > DRIFT -> kx[i] - DRIFT : 0); thi[i] = (kx[i] > RP -> kx[i] : RP) + DRIFT; ton[i] = 1
	:: else -> settimer(i, RP); tlo[i] = 0
	fi;
#else
	settimer(i, RP); tlo[i] = 0;
#endif
	kpoll[i] = 0
}

/* a term starts or a Run begins: a new campaign knows no holder */
inline forget(i) { kx[i] = 0; kpoll[i] = 0; kfresh[i] = 0 }

/* watch.close / watch.wait */
inline unsubscribe(i) {
	sub[i] = S_DOWN; evk[i] = 0; resub[i] = 0
}

/* ---- token renormalisation: every token value in the state (records, requests, replies,
 * events, Elector.seen/released, TIME, the ghosts) is replaced by its rank among the distinct
 * values present, so that < and == between any two of them are kept ---- */
byte m, mnext, mcode;
#define TOKVARS(OP) OP(ktok); OP(tokkey); OP(maxtok); OP(lastst); \
	j = 0; do :: j < N -> OP(ttok[j]); OP(rpt[j]); OP(evt[j]); OP(seen[j]); OP(rlsd[j]); OP(ret[j]); j++ :: else -> break od; \
	j = 0; do :: j < NS -> OP(rqt[j]); j++ :: else -> break od
#define NEXTVAL(v) if :: v > m && v < mnext -> mnext = v :: else fi
#define RECODE(v) if :: v == mnext -> v = mcode :: else fi
inline renorm() {
	m = 0; mcode = 0;
	do
	:: true ->
		mnext = 255;
		TOKVARS(NEXTVAL);
		if
		:: mnext == 255 -> break
		:: else -> mcode++; TOKVARS(RECODE); m = mnext
		fi
	od;
	assert(mcode < MAXTOK);   /* else MAXTOK is too small for the tokens alive at once */
	m = 0; mnext = 0; mcode = 0
}

/* PUBLISH to every live subscription */
inline publish(kind, tok) {
	j = 0;
	do
	:: j < N -> if :: sub[j] == S_UP -> evk[j] = kind; evt[j] = tok :: else fi; j++
	:: else -> break
	od
}

/* a new expiry was written: every follower's knowledge is now old */
inline newexpiry() {
	j = 0;
	do
	:: j < N -> knows[j] = 0; repfresh[j] = 0; kfresh[j] = 0; j++
	:: else -> break
	od
}

inline reply(i, id, kind, tok, ttl) {
	if
	:: call[i] != 0 && id && rpk[i] == 0 -> rpk[i] = kind; rpt[i] = tok; rpl[i] = ttl
	:: else   /* the caller gave up: the connection is gone */
	fi
}

/* ---- one replica: Elector.Run ---- */
active [N] proctype Replica() {
	byte i = _pid;         /* the replicas are the first processes */
	bit cur;
	st[i] = CAMP;
end:
	do
	/* campaign, loop top: w.ensure, then AcquireReplicated */
	:: atomic { st[i] == CAMP ->
		if
		:: canc[i] -> st[i] = DONE; unsubscribe(i)
		:: else ->
			if
#ifndef ANYWAKE
			:: sub[i] == S_DOWN && !rdown -> sub[i] = S_UP; evk[i] = 0; resub[i] = 0
#endif
			:: sub[i] == S_DOWN -> skip       /* subscribe failed: poll */
			:: else
			fi;
			el[i] = 0; send(i, Q_ACQ, 0); st[i] = AWAIT
		fi }
	/* campaign: the acquire returned a win */
	/* campaign: the acquire returned a win; first the guard: a resume of a record no term may
	 * start on is taken as held (no term, no release; the next attempt after its expiry) */
	:: atomic { st[i] == AWAIT && rpk[i] == R_WON ->
		untrusted(i);
		if
		:: cur ->
			call[i] = 0; rpk[i] = 0; rpt[i] = 0; rpl[i] = 0; cur = 0;
			if
			:: canc[i] -> st[i] = DONE; unsubscribe(i)
			:: else -> settimer(i, LD); knows[i] = 0; st[i] = FOLLOW
			fi
		:: else ->
		ttok[i] = rpt[i]; call[i] = 0; rpk[i] = 0; rpt[i] = 0; rpl[i] = 0;
		if
		:: canc[i] -> retire(i); send(i, Q_REL, ttok[i]); aft[i] = A_DONE; st[i] = RELW   /* cancel during a winning acquire */
		:: else ->
			if
#ifndef MUTANT_LATE_START
			:: el[i] >= RD - DRIFT -> cur = 0  /* late: reply at or after sent + RenewDeadline (local clock) */
#endif
#ifdef MUTANT_LATE_START
			:: true -> cur = 1                 /* the old bug: any won reply starts the term */
#else
			:: el[i] < RD + DRIFT -> cur = 1
#endif
			fi;
			if
			:: !cur -> retire(i); send(i, Q_REL, ttok[i]); aft[i] = A_RETRY; st[i] = RELW
			:: cur ->
				/* S3: the work starts inside the trust window */
				assert(el[i] < RD + DRIFT);
				/* S2: tokens of successive terms strictly increase (a resumed term keeps its own) */
				assert(ttok[i] > lastst || (ttok[i] == lastst && lastown == i));
				/* R1: a resigning replica does not begin a term during its hold-off */
				assert(rvown != i + 1);
				lastst = ttok[i]; lastown = i; relpend = 0;
				unsubscribe(i);
#ifndef ANYWAKE
				observe(i, ttok[i], 0);
#endif
				epoch[i] = losses; lead[i] = 1; stopping[i] = 0; forget(i);
				settimer(i, (RP > el[i] -> RP - el[i] : 0));
				st[i] = LEAD
			fi
		fi;
		cur = 0
		fi }
	/* campaign: held by another */
	:: atomic { st[i] == AWAIT && rpk[i] == R_HELD ->
		call[i] = 0; rpk[i] = 0;
#if defined(GUARD) && defined(MUTANT_ONE_SLOT)
		ret[i] = 0;       /* another record: the old rule forgot the poisoned one */
#endif
		if
		:: canc[i] -> st[i] = DONE; unsubscribe(i)
#ifdef ANYWAKE
		:: else -> st[i] = FOLLOW
#else
		:: else -> observe(i, rpt[i], 0);
			/* knownExpiry.heard (the latest of); a reservation (token 0): released */
			if
			:: rpt[i] == 0 -> kx[i] = 0; kfresh[i] = 0
			:: rpt[i] != 0 && rpl[i] >= kx[i] -> kx[i] = rpl[i]; kfresh[i] = repfresh[i]
			:: else
			fi;
			followerwait(i, rpl[i]); st[i] = FOLLOW
#endif
		fi;
		cur = 0; rpt[i] = 0; rpl[i] = 0; repfresh[i] = 0 }
	/* campaign: the acquire failed, timed out or lost its reply */
	:: atomic { st[i] == AWAIT && (rpk[i] == R_ERR || (rpk[i] == 0 && CALLGU)) ->
		GIVEUP(i);
		abandon(i);
		if
		:: canc[i] -> st[i] = DONE; unsubscribe(i)
		:: else -> retrywait(i); knows[i] = 0; st[i] = FOLLOW
		fi }
	/* Run's ctx cancelled while the acquire is in flight, no win seen: return */
	:: atomic { st[i] == AWAIT && canc[i] && rpk[i] != R_WON -> abandon(i); st[i] = DONE; unsubscribe(i) }

#ifdef ANYWAKE
	/* S1-S3 configuration: without data loss, when a follower attempts does not matter to
	 * safety (acquire.lua is the only way in), so it may attempt at any moment: this covers
	 * every timer, event (delayed, duplicated, stale) and subscription state at once. */
	:: atomic { st[i] == FOLLOW -> stoptimer(i); st[i] = CAMP }
#endif
	/* campaign, waiting: the timer (known expiry, or the poll/backoff) */
	:: atomic { st[i] == FOLLOW && ton[i] && tlo[i] == 0 -> stoptimer(i); knows[i] = 0; st[i] = CAMP }
	/* campaign, waiting: an event (read it, or read it and get it again: duplicated) */
	:: atomic { st[i] == FOLLOW && sub[i] != S_DOWN && evk[i] != 0 ->
		if
		:: evk[i] == E_REL -> observe(i, evt[i], 1); stoptimer(i); knows[i] = 0; st[i] = CAMP;
#ifndef ANYWAKE
			if :: cur -> kx[i] = 0; kfresh[i] = 0 :: else fi;
#endif
			skip
		:: else ->
			observe(i, evt[i], 0);
#ifdef ANYWAKE
			if :: cur -> settimer(i, LD); knows[i] = (sub[i] == S_UP) :: else fi
#else
			if :: cur -> settimer(i, LD); knows[i] = (sub[i] == S_UP); kx[i] = LD; kfresh[i] = 1; kpoll[i] = 0 :: else fi
#endif
		fi;
#ifdef DUPS
		if :: true -> evk[i] = 0; evt[i] = 0 :: true fi;
#else
		evk[i] = 0; evt[i] = 0;
#endif
		cur = 0 }
	/* campaign, waiting: the subscription's channel closed (w.lost) */
	:: atomic { st[i] == FOLLOW && sub[i] == S_CLOSED ->
		unsubscribe(i); resub[i] = 1; knows[i] = 0;
#ifdef MUTANT_SUB_DROP_ACQUIRE
		stoptimer(i); st[i] = CAMP      /* the old bug: try at once */
#endif
	}
	/* campaign, waiting: the resubscribe timer */
	:: atomic { st[i] == FOLLOW && resub[i] && sub[i] == S_DOWN ->
		if
		:: !rdown -> sub[i] = S_UP; evk[i] = 0; resub[i] = 0;
#ifndef MUTANT_ERR_FORGETS_KNOWN
			/* follower.listening: a polling follower sleeps until the expiry it knows */
			if :: kpoll[i] && kx[i] > 0 -> settimer(i, kx[i]) :: else fi;
#endif
			kpoll[i] = 0
		:: true -> skip     /* failed: again after RetryPeriod (no obligation: the poll timer runs) */
#ifdef LIVE
			; resub[i] = 0
#endif
		fi }
	:: atomic { st[i] == FOLLOW && canc[i] -> stoptimer(i); st[i] = DONE; unsubscribe(i) }

	/* lead: the deadline timer (lastOK + RenewDeadline on the local clock) */
	:: atomic { st[i] == LEAD && el[i] >= RD - DRIFT ->
		lead[i] = 0; stopping[i] = 0; rsg[i] = 0; stoptimer(i);
		if :: call[i] != 0 -> abandon(i) :: else fi;
		ttok[i] = 0;
		st[i] = ((canc[i] -> DONE : CAMP)); if :: st[i] == DONE -> unsubscribe(i) :: else fi }
	/* lead: the renew tick */
	:: atomic { st[i] == LEAD && ton[i] && tlo[i] == 0 ->
		stoptimer(i);
		if
		:: call[i] == Q_REN -> skip   /* inflight: continue */
		:: else -> rel[i] = 0; send(i, Q_REN, ttok[i])
		fi }
	/* lead: renew said 1 */
	:: atomic { st[i] == LEAD && rpk[i] == R_OK ->
		call[i] = 0; rpk[i] = 0; rpt[i] = 0;
#ifdef MUTANT_RENEW_FROM_REPLY
		el[i] = 0;                     /* lastOK = the reply's arrival */
#else
		el[i] = rel[i];                /* lastOK = r.sent */
#endif
		settimer(i, (RP > rel[i] -> RP - rel[i] : 0)) }
	/* lead: renew said 0 */
	:: atomic { st[i] == LEAD && rpk[i] == R_ZERO ->
		call[i] = 0; rpk[i] = 0; rpt[i] = 0;
		lead[i] = 0; stopping[i] = 0; rsg[i] = 0; stoptimer(i); ttok[i] = 0;
		st[i] = ((canc[i] -> DONE : CAMP)); if :: st[i] == DONE -> unsubscribe(i) :: else fi }
	/* lead: renew failed */
	:: atomic { st[i] == LEAD && call[i] == Q_REN && (rpk[i] == R_ERR || (rpk[i] == 0 && CALLGU)) ->
		GIVEUP(i);
		abandon(i); settimer(i, RP); tlo[i] = 0 }
	/* lead: Run's ctx cancelled: the work is told to stop, renewals go on */
	:: atomic { st[i] == LEAD && canc[i] && !stopping[i] -> stopping[i] = 1 }
#ifndef MUTANT_RESIGN_EARLY_RELEASE
	/* lead: asked to resign: the work is told to stop, renewals go on (as after a cancel) */
	:: atomic { st[i] == LEAD && rsg[i] && !stopping[i] -> stopping[i] = 1 }
#else
	/* the bug: release at once, while the work still runs (trusted until the release returns) */
	:: atomic { st[i] == LEAD && rsg[i] && !stopping[i] ->
		stoptimer(i);
		if :: call[i] != 0 -> abandon(i) :: else fi;
		retire(i); send(i, Q_RSG, ttok[i]); rsg[i] = 0; aft[i] = A_RETRY; st[i] = RELW }
#endif
	/* lead: OnStartedLeading returned after the cancel or resignation: stepDown(stopped or
	 * resigned, release); a resignation releases with the reservation and campaigns again */
	:: atomic { st[i] == LEAD && stopping[i] ->
		lead[i] = 0; stopping[i] = 0; stoptimer(i);
		if :: call[i] != 0 -> abandon(i) :: else fi;
		retire(i);
		if
		:: rsg[i] -> send(i, Q_RSG, ttok[i])
		:: else -> send(i, Q_REL, ttok[i])
		fi;
		aft[i] = ((rsg[i] && !canc[i]) -> A_RETRY : A_DONE); rsg[i] = 0; st[i] = RELW }

	/* the same Elector runs again after Run returned (RERUNS) */
	:: atomic { st[i] == DONE && call[i] == 0 && reruns > 0 && SOLO(i) -> reruns--; canc[i] = 0; forget(i); st[i] = CAMP }
	/* Elector.Release of an older token of this replica after Run returned (URELS): its record
	 * is long gone (token 0 matches no record), and the call fails: its outcome is unknown.
	 * The fixed guard retires nothing above what it retired; the one slot is overwritten. */
	:: atomic { st[i] == DONE && call[i] == 0 && urels > 0 && giveups > 0 && SOLO(i) ->
		urels--; send(i, Q_REL, 0); GIVEUP(i); abandon(i);
#ifdef MUTANT_ONE_SLOT
		ret[i] = 0;
#endif
		skip }
	/* a release returned, failed or was given up */
	:: atomic { st[i] == RELW && (rpk[i] != 0 || giveups > 0) ->
		GIVEUP(i);
		relout(i);
		abandon(i); ttok[i] = 0; rpt[i] = 0;
#ifdef MUTANT_RESIGN_EARLY_RELEASE
		lead[i] = 0;
#endif
		if
		:: aft[i] == A_DONE -> st[i] = DONE; unsubscribe(i)
		:: else -> retrywait(i); knows[i] = 0; st[i] = FOLLOW
		fi;
		aft[i] = 0 }
	od
}

/* ---- Redis: executes one request atomically ---- */
byte ri, rk, rid, rt, nt, j;
inline exec(k) {
	ri = k / 2; rk = rqk[k]; rt = rqt[k]; rid = rqi[k];
	rqk[k] = 0; rqt[k] = 0; rqi[k] = 0;
	if
	:: rdown -> reply(ri, rid, R_ERR, 0, 0)
	:: !rdown && rk == Q_ACQ ->             /* scripts/acquire.lua */
		if
		:: ktok != 0 && kown == ri ->       /* held by this owner: PEXPIRE, same record */
			kttl = LD; newexpiry(); reply(ri, rid, R_WON, ktok, LD)
		:: ktok != 0 && kown != ri ->       /* held by another: {0, record, PTTL} */
#ifdef ANYWAKE
			reply(ri, rid, R_HELD, ktok, 0);   /* the follower ignores the PTTL */
#else
			reply(ri, rid, R_HELD, ktok, kttl);
#endif
			if :: rpk[ri] == R_HELD -> repfresh[ri] = 1 :: else fi
#ifdef S4SCEN
		:: ktok == 0 && losses == 0 && nterms >= 1 -> reply(ri, rid, R_ERR, 0, 0)  /* S4 scenario: one term before the loss */
		:: ktok == 0 && (losses > 0 || nterms < 1) -> nterms = 1;
#else
#ifndef MUTANT_NO_RESERVATION
		:: ktok == 0 && rvown == ri + 1 ->  /* reserved, not for this one: {2, record, pttl, target} */
			reply(ri, rid, R_HELD, 0, rvttl)
		:: ktok == 0 && rvown != ri + 1 ->  /* SET NX: a new term (deletes a reservation that admits it) */
			rvown = 0; rvttl = 0;
#else
		:: ktok == 0 ->                     /* the bug: reservations ignored */
#endif
#endif
#ifdef MUTANT_TOKEN_NO_TIME
			nt = tokkey + 1;                /* token = previous + 1, without TIME */
#else
			nt = (tokkey > maxtok -> tokkey : maxtok) + 1;  /* max(previous + 1, TIME) */
#endif
			if
			:: true -> renorm();     /* canonical token values: always, to keep the state space small */
#ifdef MUTANT_TOKEN_NO_TIME
				nt = tokkey + 1
#else
				nt = (tokkey > maxtok -> tokkey : maxtok) + 1
#endif
			:: else
			fi;
			ktok = nt; kown = ri; kttl = LD; tokkey = nt;
			if :: nt > maxtok -> maxtok = nt :: else fi;
			newexpiry();
			publish(E_ACQ, nt);
			reply(ri, rid, R_WON, nt, LD)
		fi
	:: !rdown && rk == Q_REN ->             /* scripts/renew.lua with the channel */
		if
		:: ktok == rt && kown == ri && ktok != 0 ->
			kttl = LD; newexpiry(); publish(E_REN, rt); reply(ri, rid, R_OK, rt, 0)
		:: else -> reply(ri, rid, R_ZERO, rt, 0)
		fi
	:: !rdown && (rk == Q_REL || rk == Q_RSG) ->  /* scripts/release.lua */
		if
		:: ktok == rt && kown == ri && ktok != 0 ->
			ktok = 0; kttl = 0; kown = 0; publish(E_REL, rt);
			if :: rk == Q_RSG -> rvown = ri + 1; rvttl = HOLDT :: else fi;
			/* L1b: a listening follower must start a term before the next tick */
			j = 0;
			do
			:: j < N -> if :: st[j] == FOLLOW && sub[j] == S_UP && !canc[j] -> relpend = 1 :: else fi; j++
			:: else -> break
			od;
			reply(ri, rid, R_OK, rt, 0)
		:: else -> reply(ri, rid, R_ZERO, rt, 0)
		fi
	fi;
	ri = 0; rk = 0; rt = 0; rid = 0; nt = 0; j = 0
}

active proctype Redis() {
end:	do
	:: d_step { rqk[0] != 0 -> exec(0) }
	:: d_step { rqk[1] != 0 -> exec(1) }
	:: d_step { rqk[2] != 0 -> exec(2) }
	:: d_step { rqk[3] != 0 -> exec(3) }
#if N == 3
	:: d_step { rqk[4] != 0 -> exec(4) }
	:: d_step { rqk[5] != 0 -> exec(5) }
#endif
	/* restart without persistence: the keys, the connections, the subscriptions are gone */
	:: d_step { restarts > 0 && !rdown ->
		restarts--;
		/* S4's ghost: did every live non-leader listen and know the current expiry? Waiting
		 * (FOLLOW) with the timer or kx at it, or with an acquire in flight (AWAIT), which the
		 * restart fails: it then waits for kx (retrywait). */
		allinf = 1;
		j = 0;
		do
		:: j < N ->
			if
			:: st[j] != DONE && !lead[j] && !((st[j] == FOLLOW || st[j] == AWAIT) && sub[j] == S_UP && (knows[j] || kfresh[j]) && !canc[j]) -> allinf = 0
			:: else
			fi;
			j++
		:: else -> break
		od;
		ktok = 0; kttl = 0; kown = 0; tokkey = 0; rdown = 1; rvown = 0; rvttl = 0;
		j = 0;
		do
		:: j < NS -> rqk[j] = 0; rqt[j] = 0; rqi[j] = 0; j++
		:: else -> break
		od;
		j = 0;
		do
		:: j < N ->
			if :: sub[j] == S_UP -> sub[j] = S_CLOSED :: else fi;
			evk[j] = 0; evt[j] = 0;
			if :: call[j] != 0 && rpk[j] == 0 -> rpk[j] = R_ERR; rpt[j] = 0; rpl[j] = 0 :: else fi;
			j++
		:: else -> break
		od;
		j = 0;
		losses++; lossel = 0; relpend = 0 }
	od
}

/* ---- obligations that stop time ---- */
#define DUE(i) ((lead[i] && el[i] >= RD + DRIFT) || (ton[i] && thi[i] == 0 && (st[i] == FOLLOW || st[i] == LEAD)))
#ifdef LIVE
/* Redis reachable: every request, reply, event and resubscription is handled within the tick */
#define BUSY(i) (rqk[2*i] != 0 || rqk[2*i+1] != 0 || (call[i] != 0 && rpk[i] != 0) || \
	(st[i] == FOLLOW && ((sub[i] != S_DOWN && evk[i] != 0) || sub[i] == S_CLOSED || resub[i])))
#else
#define BUSY(i) false
#endif
#define HOLD(i) (DUE(i) || BUSY(i))
#if N == 3
#define ANYHOLD (HOLD(0) || HOLD(1) || HOLD(2))
#else
#define ANYHOLD (HOLD(0) || HOLD(1))
#endif

#if N == 3
#define PRELEAD ((lead[0] && epoch[0] == 0) || (lead[1] && epoch[1] == 0) || (lead[2] && epoch[2] == 0))
#else
#define PRELEAD ((lead[0] && epoch[0] == 0) || (lead[1] && epoch[1] == 0))
#endif
inline sat(v) { v = (v < CAP -> v + 1 : CAP) }
inline down(v) { v = (v > 0 -> v - 1 : 0) }

active proctype Clock() {
	byte c;
end:	do
#ifdef S4SCEN
	/* S4 scenario: the run ends when no term of the old epoch is trusted any more */
	:: d_step { !ANYHOLD && !(losses > 0 && !PRELEAD) ->
#else
	:: d_step { !ANYHOLD ->
#endif
#ifdef LIVE
		assert(!relpend);   /* L1b */
#endif
		c = 0;
		do
		:: c < N ->
			if :: st[c] == AWAIT || st[c] == LEAD -> sat(el[c]) :: else -> el[c] = 0 fi;
			if :: call[c] == Q_REN -> sat(rel[c]) :: else -> rel[c] = 0 fi;
			if :: ton[c] -> down(tlo[c]); down(thi[c]) :: else -> tlo[c] = 0; thi[c] = 0 fi;
			down(kx[c]);
			c++
		:: else -> break
		od;
		c = 0;
		if :: rvttl > 0 -> rvttl--; if :: rvttl == 0 -> rvown = 0 :: else fi :: else fi;
		if
		:: ktok != 0 -> kttl--; if :: kttl == 0 -> ktok = 0; kown = 0 :: else fi
		:: else
		fi;
		if :: losses > 0 -> sat(lossel) :: else fi;
		rdown = 0;
		tickp = !tickp }
	od
}

/* Faults and the user: Run's ctx cancelled; a subscription breaks. */
active proctype Env() {
	byte e;
end:	do
	:: atomic { cancels > 0 -> select(e : 0 .. N-1);
#ifdef POISONSCEN
		e = 0;
#endif
#ifdef LIVE
		if :: e == N-1 -> e = 0 :: else fi;    /* the last replica stays up */
#endif
		if :: !canc[e] && st[e] != DONE -> canc[e] = 1; cancels--; relpend = 0 :: else fi; e = 0 }
	:: atomic { resigns > 0 -> select(e : 0 .. N-1);
		if :: st[e] == LEAD && lead[e] && !rsg[e] && !stopping[e] -> rsg[e] = 1; resigns-- :: else fi; e = 0 }
	:: atomic { subdrops > 0 -> select(e : 0 .. N-1);
		if :: sub[e] == S_UP -> sub[e] = S_CLOSED; subdrops--; relpend = 0 :: else fi; e = 0 }
	od
}

/* ---- the properties checked at every step ---- */
#define S1_PAIR(a,b) (!(lead[a] && lead[b] && epoch[a] == epoch[b]))
#define S4_PAIR(a,b) (!(lead[a] && lead[b] && epoch[a] != epoch[b]) || (lossel <= RD + DRIFT && !allinf))
#if N == 3
#define S1 (S1_PAIR(0,1) && S1_PAIR(0,2) && S1_PAIR(1,2))
#define S4 (S4_PAIR(0,1) && S4_PAIR(0,2) && S4_PAIR(1,2))
#else
#define S1 (S1_PAIR(0,1))
#define S4 (S4_PAIR(0,1))
#endif

#ifndef LIVE
active proctype Monitor() {
	atomic { !(S1 && S4) -> assert(S1); assert(S4) }
}
#endif

#ifdef LIVE
/* L1: if time goes on (non-Zeno), someone leads again and again. */
ltl L1 { ([]<> tickp && []<> !tickp) -> []<> (LEADS) }
#endif
