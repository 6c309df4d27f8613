/*
 * schedule.pml: the slot protocol of pkg/schedule (claim.lua, finish.lua, skip.lua, read.lua)
 * for T terms of one lease, in the order they acquired it (tokens 1..T), against one Redis
 * whose clock (TIME) decides which slot is due. docs/MODEL.md maps the steps to the code.
 *
 * What ends a term (Env), before the next one acquires:
 *   - a handover: the term's ctx ends, its job returns (lost, or done if it ignored the ctx),
 *     one finish is sent, and only then the lease moves on (the election's S1/S3: work stops
 *     before the lease can expire);
 *   - a pause (PAUSES): the lease moves on while the term still believes it leads and keeps
 *     acting: its job runs, it claims and finishes, until it notices at any later moment;
 *   - a crash (CRASHES): the process and its job die; its requests in flight may still run;
 *   - a Redis restart without data (LOSSES): lease, state and history are gone, and the term
 *     does not know (as a pause); the next term starts the schedule again.
 * At any moment Redis may restart with its data (RESTARTS, AOF): requests in flight are lost.
 * A request may be given up on (GIVEUPS: timeout, lost reply); a given-up request may still
 * run later (STALE). A job may fail (FAILS). A replica's clock may be ahead of Redis's by one
 * tick (it claims a slot early; Redis refuses it).
 *
 * Abstracted: the overlap and catch-up policies (a term runs one job at a time and decides the
 * slots that came meanwhile after it, oldest first: catch-up all, no starting deadline); the
 * retry delay (a failed slot is retried at once); finish is retried until written or fenced
 * (the code gives up after 5 tries and records the run lost on its next pass, not modelled).
 *
 * Properties (checked where they could first fail):
 *   SC0 no job starts before its slot's time by Redis's clock;
 *   SC1 whenever Redis grants a claim of slot s, every other run of s that may still be live
 *       (claimed, its job not yet returned) belongs to a term the lease no longer holds: of two
 *       runs of one slot at once, the earlier one's token is fenced out, for good (tokens only
 *       grow), so nothing it writes lands. Absent pauses the election stops it first: no two
 *       runs at once;
 *   SC2 a slot recorded done was run by the recorded term and attempt, whose job succeeded
 *       while the lease held that term ("done" = succeeded while leading);
 *   SC3 no slot is recorded done twice (except slots a data loss made unknown);
 *   SC4 in the end (everything blocked: the last term is idle), every slot is done exactly once
 *       or recorded missed, except slots a data loss made unknown.
 *
 * The mutants are patches of this file (test/mutants/model-schedule-*.patch), never switches.
 */

#ifndef T
#define T 3
#endif
#ifndef NS
#define NS 2
#endif
#ifndef MAXATT
#define MAXATT 2
#endif
#ifndef PAUSES
#define PAUSES 1
#endif
#ifndef CRASHES
#define CRASHES 0
#endif
#ifndef LOSSES
#define LOSSES 0
#endif
#ifndef RESTARTS
#define RESTARTS 0
#endif
#ifndef GIVEUPS
#define GIVEUPS 1
#endif
#ifndef STALE
#define STALE 1
#endif
#ifndef FAILS
#define FAILS 1
#endif
#ifndef AHEAD
#define AHEAD 1
#endif

/* phases of the run record */
#define P_NONE 0
#define P_RUN 1
#define P_DONE 2
#define P_FAILED 3
#define P_LOST 4
#define P_MISSED 5

/* requests */
#define Q_CLAIM 1
#define Q_FINISH 2
#define Q_SKIP 3

/* replies */
#define R_NONE 0
#define R_OK 1      /* claim: claimed (attempt in repatt); finish, skip: written */
#define R_FENCED 2  /* the lease does not hold the caller's token */
#define R_OTHER 3   /* early, decided, busy, exhausted (recorded missed), no such run */
#define R_ERR 4     /* given up on, or dropped by a restart */

typedef Req {
	byte kind;
	byte slot;
	byte att;
	byte res;
};

/* Redis */
byte now;               /* TIME, in slots: slot s is due once now >= s */
byte holder;            /* the token the lease holds, 0 none */
bit has = 1;            /* the schedule key exists (started at time 0) */
byte cur;               /* the cursor: every slot <= cur is decided */
byte rslot, rph, ratt, rtok;    /* the record of the last claimed run */
Req q[T + 1];           /* the request each term waits for */
Req sq[T + 1];          /* one abandoned request per term that may still run */
byte rep[T + 1];
byte repatt[T + 1];
bit dirty[T + 1];       /* Redis wrote since the term's last read */

/* terms */
bit trust[T + 1];       /* OnStartedLeading's ctx is not done */
bit crashed[T + 1];
bit paused[T + 1];      /* the lease moved on without the term knowing */
byte live[T + 1];       /* the slot of the term's job that runs (0: none) */
byte latt[T + 1];
byte clm[T + 1];        /* ghost: the slot of the term's granted claim until its job returned */

/* ghosts */
byte okslot[T + 1];     /* the term's last run that succeeded while the lease held it */
byte okatt[T + 1];
byte ndone[NS + 1];     /* times each slot was recorded done */
bit missed[NS + 1];
bit exempt[NS + 1];     /* unknown after a data loss: may run again or go unrecorded */
bit lost;               /* data was lost and no term started the schedule since */

byte giveups, stale, fails, restarts;

#define MAX(a, b) (a > b -> a : b)

/* Redis marks every term's view stale after a write. */
inline wrote() {
	dirty[1] = 1;
#if T >= 2
	dirty[2] = 1;
#endif
#if T >= 3
	dirty[3] = 1;
#endif
}

/* SC1, checked when Redis grants slot s: another run of s that may be live is fenced out. */
inline sc1(tok, s) {
	assert(tok == 1 || clm[1] != s || holder != 1);
#if T >= 2
	assert(tok == 2 || clm[2] != s || holder != 2);
#endif
#if T >= 3
	assert(tok == 3 || clm[3] != s || holder != 3);
#endif
}

/* claim.lua */
inline doclaim(tok, s, res, ra) {
	if
	:: holder != tok -> res = R_FENCED
	:: else ->
		if
		:: s > now -> res = R_OTHER                     /* early by Redis's clock */
		:: else ->
			if
			:: has && rph == P_RUN && rtok == tok ->
				if
				:: rslot == s -> res = R_OK; ra = ratt  /* this term's claim again */
				:: else -> res = R_OTHER                /* busy */
				fi
			:: else ->
				if
				:: !has -> cur = 0; rslot = 0; rph = P_NONE; ratt = 0; rtok = 0
				:: has && rph == P_RUN -> rph = P_LOST  /* a run of an ended term */
				:: else -> skip
				fi;
				has = 1;
				ra = 1;
				res = R_NONE;
				if
				:: rslot == s && (rph == P_FAILED || rph == P_LOST) ->
					if
					:: ratt >= MAXATT ->
						rph = P_MISSED; missed[s] = 1; cur = MAX(cur, s); res = R_OTHER
					:: else -> ra = ratt + 1
					fi
				:: else ->
					if
					:: s <= cur -> res = R_OTHER            /* decided */
					:: else -> skip
					fi
				fi;
				if
				:: res == R_NONE ->
					sc1(tok, s);
					cur = MAX(cur, s); rslot = s; rph = P_RUN; ratt = ra; rtok = tok;
					res = R_OK
				:: else -> skip
				fi;
				wrote()
			fi
		fi
	fi
}

/* finish.lua */
inline dofinish(tok, s, a, result, res) {
	if
	:: holder != tok -> res = R_FENCED
	:: else ->
		if
		:: !has || rslot != s || ratt != a || rtok != tok -> res = R_OTHER
		:: else ->
			if
			:: rph != P_RUN ->
				if
				:: rph == result -> res = R_OK      /* written before: a retry */
				:: else -> res = R_OTHER
				fi
			:: else ->
				rph = result;
				if
				:: result == P_DONE ->
					assert(okslot[rtok] == rslot && okatt[rtok] == ratt);  /* SC2 */
					ndone[rslot]++;
					assert(ndone[rslot] <= 1 || exempt[rslot])            /* SC3 */
				:: else -> skip
				fi;
				res = R_OK;
				wrote()
			fi
		fi
	fi
}

/* skip.lua with count 0: a term starts a schedule that has no state at Redis's now */
inline doskip(tok, res) {
	if
	:: holder != tok -> res = R_FENCED
	:: has -> res = R_OTHER
	:: else ->
		has = 1; cur = now; rslot = 0; rph = P_NONE; ratt = 0; rtok = 0;
		if
		:: lost ->
			x = 1;
			do
			:: x <= now -> exempt[x] = 1; x++
			:: else -> break
			od;
			lost = 0
		:: else -> skip
		fi;
		res = R_OK;
		wrote()
	fi
}

inline exec(r, tok, res, ra) {
	ek = r.kind; es = r.slot; ea = r.att; er = r.res; r.kind = 0;
	if
	:: ek == Q_CLAIM -> doclaim(tok, es, res, ra)
	:: ek == Q_FINISH -> dofinish(tok, es, ea, er, res)
	:: ek == Q_SKIP -> doskip(tok, res)
	fi;
	ek = 0; es = 0; ea = 0; er = 0
}

/* Redis runs one request at a time, in any order; a restart with data drops them all. */
active proctype Redis() {
	byte k, res, ra, x, ek, es, ea, er;
	do
	:: atomic {
		if
		:: q[1].kind != 0 -> k = 1
#if T >= 2
		:: q[2].kind != 0 -> k = 2
#endif
#if T >= 3
		:: q[3].kind != 0 -> k = 3
#endif
		fi;
		res = R_NONE; ra = 0;
		exec(q[k], k, res, ra);
		rep[k] = res; repatt[k] = ra;
		k = 0; res = 0; ra = 0
	}
	:: atomic {
		if
		:: sq[1].kind != 0 -> k = 1
#if T >= 2
		:: sq[2].kind != 0 -> k = 2
#endif
#if T >= 3
		:: sq[3].kind != 0 -> k = 3
#endif
		fi;
		res = R_NONE; ra = 0;
		exec(sq[k], k, res, ra);
		k = 0; res = 0; ra = 0
	}
	:: atomic {
		restarts < RESTARTS -> restarts++;
		k = 1;
		do
		:: k <= T ->
			sq[k].kind = 0;
			if
			:: q[k].kind != 0 -> q[k].kind = 0; rep[k] = R_ERR
			:: else -> skip
			fi;
			k++
		:: else -> break
		od;
		k = 0
	}
	od
}

/* Redis's clock */
active proctype Clock() {
	do
	:: now < NS -> now++
	od
}

/* Send a request and wait for its reply, or give up on it (the request may then be lost
 * before it runs, or still run later); a crash leaves it where it is. */
inline call(k, kind0, s0, a0, r0) {
	atomic {
		q[k].kind = kind0; q[k].slot = s0; q[k].att = a0; q[k].res = r0; rep[k] = R_NONE
	};
	if
	:: rep[k] != R_NONE
	:: crashed[k]
	:: atomic {
		giveups < GIVEUPS -> giveups++;
		if
		:: q[k].kind != 0 && stale < STALE && sq[k].kind == 0 ->
			stale++;
			sq[k].kind = q[k].kind; sq[k].slot = q[k].slot; sq[k].att = q[k].att; sq[k].res = q[k].res
		:: true
		fi;
		q[k].kind = 0; rep[k] = R_ERR
	}
	fi
}

/* The job of term k returns with result r (P_DONE, P_FAILED or P_LOST). */
inline jobend(k, r) {
	atomic {
		if
		:: r == P_DONE && holder == k -> okslot[k] = live[k]; okatt[k] = latt[k]
		:: else -> skip
		fi;
		js = live[k]; ja = latt[k]; live[k] = 0; clm[k] = 0
	}
}

/* One term: Lead's loop (lead.go), plan (scheduler.go) and the job's end (finish). */
proctype Term(byte k) {
	byte h, c, sl, ph, n0, js, ja, jr, want;
	(trust[k] || crashed[k]);
	do
	:: crashed[k] -> break
	:: !crashed[k] && !trust[k] ->
		/* the term's ctx ended: the job returns (lost, or done when it ignores its ctx),
		 * then one try to record its end */
		if
		:: live[k] != 0 ->
			if
			:: jr = P_LOST
			:: jr = P_DONE
			fi;
			jobend(k, jr);
			call(k, Q_FINISH, js, ja, jr)
		:: else -> skip
		fi;
		break
	:: !crashed[k] && trust[k] && live[k] != 0 ->
		/* the job returns by itself */
		if
		:: jr = P_DONE
		:: atomic { fails < FAILS -> fails++; jr = P_FAILED }
		fi;
		jobend(k, jr);
		do
		:: call(k, Q_FINISH, js, ja, jr);
			if
			:: rep[k] == R_ERR && trust[k] && !crashed[k] -> skip     /* retried */
			:: else -> break
			fi
		od
	:: !crashed[k] && trust[k] && live[k] == 0 ->
		/* read.lua, then plan */
		atomic {
			dirty[k] = 0; h = has; c = cur; sl = rslot; ph = rph; n0 = now; want = 0
		};
		if
		:: !h -> call(k, Q_SKIP, 0, 0, 0)
		:: h && (ph == P_RUN || ph == P_FAILED || ph == P_LOST) ->
			/* this term's claim whose reply was lost, or an unfinished run: claim it again */
			want = sl;
			call(k, Q_CLAIM, sl, 0, 0)
		:: h && !(ph == P_RUN || ph == P_FAILED || ph == P_LOST) && c < NS && c < n0 + AHEAD ->
			/* the next slot is due by this replica's clock (Redis's, or one tick ahead) */
			want = c + 1;
			call(k, Q_CLAIM, want, 0, 0)
		:: else ->
			/* nothing due: wait for Redis's clock or a change */
			(dirty[k] || now != n0 || !trust[k] || crashed[k])
		fi;
		if
		:: atomic {
			rep[k] == R_OK && want != 0 && !crashed[k] && trust[k] ->
			/* a claim granted: the job starts */
			live[k] = want; latt[k] = repatt[k]; clm[k] = want;
			assert(now >= want)                                        /* SC0 */
		}
		:: rep[k] == R_OTHER -> (dirty[k] || now != n0 || !trust[k] || crashed[k])
		:: rep[k] == R_FENCED -> (!trust[k] || crashed[k])    /* the Elector ends the term */
		:: else -> skip
		fi;
		rep[k] = R_NONE
	od;
	atomic { trust[k] = 0; live[k] = 0 }
}

/* The terms, one after the other, and what ends each but the last. */
active proctype Env() {
	byte k = 1;
	byte pauses, crashes, losses, x;
	do
	:: atomic { holder = k; trust[k] = 1; run Term(k) };
		if
		:: k == T -> break
		:: else -> skip
		fi;
		if
		:: /* handover */
			trust[k] = 0;
			(live[k] == 0)
		:: atomic { pauses < PAUSES -> pauses++; paused[k] = 1 }
		:: atomic {
			crashes < CRASHES -> crashes++;
			crashed[k] = 1; trust[k] = 0; live[k] = 0; clm[k] = 0
		}
		:: atomic {
			losses < LOSSES -> losses++;
			holder = 0; has = 0; cur = 0; rslot = 0; rph = P_NONE; ratt = 0; rtok = 0;
			lost = 1; paused[k] = 1;
			x = 1;
			do
			:: x <= T ->
				sq[x].kind = 0;
				if
				:: q[x].kind != 0 -> q[x].kind = 0; rep[x] = R_ERR
				:: else -> skip
				fi;
				x++
			:: else -> break
			od;
			wrote()
		}
		fi;
		k++
	od
}

/* A paused term notices at some later moment that it no longer leads. */
active proctype Notice() {
	byte k;
	do
	:: atomic {
		if
		:: paused[1] && trust[1] -> k = 1
#if T >= 2
		:: paused[2] && trust[2] -> k = 2
#endif
#if T >= 3
		:: paused[3] && trust[3] -> k = 3
#endif
		fi;
		trust[k] = 0; k = 0
	}
	od
}

/* SC4: once nothing can move (the last term idle, every request run), every slot is done
 * once or recorded missed, unless a data loss made it unknown. */
active proctype Monitor() {
	byte s;
	timeout ->
	atomic {
		s = 1;
		do
		:: s <= NS ->
			assert(exempt[s] || missed[s] || ndone[s] == 1);
			s++
		:: else -> break
		od
	}
}
