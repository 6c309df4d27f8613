"""Leader election on an elector lease in Redis, protocol version 1 (docs/PROTOCOL.md).

One Elector campaigns for one lease on a background thread. It follows every rule of the
protocol document's table of client rules (R1 to R14 there); the comments name them.
"""

import hashlib
import logging
import os
import random
import secrets
import threading
import time

import redis

PROTOCOL_VERSION = 1

DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0
JITTER_FACTOR = 1.2
HEALTH_INTERVAL = 3.0
MAX_JITTER = 0.0005  # PROTOCOL.md: uniform 0-0.5 ms on every follower wake-up
RESUBSCRIBE_DELAY = 0.05
BACKOFF_MIN = 0.05

_LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lua")

# SHA1 of each script, as EVALSHA names it: the protocol's normative text (docs/PROTOCOL.md,
# "Scripts"). The copies in lua/ are checked byte for byte against pkg/lease/scripts by
# test/conformance (TestPythonScriptsAreTheGoScripts), and these hashes against both.
SCRIPT_SHA1 = {
    "acquire": "da68cfe2c2ba4aae0e6e0139eaac6c0835668353",
    "renew": "c8a8acedbad53ab69d7775dfda19fbc1a75d5ea6",
    "release": "60bc1582a1e5454a4ad02db1a6c863a83c6b7346",
    "resign": "d19f5ba93a16deac56b56b30deb23a66e56eb7ff",
}

log = logging.getLogger("elector")


def drift_margin(d):
    """The clock-drift allowance of a duration d (seconds): 1 % plus 2 ms."""
    return d / 100 + 0.002


def call_timeout(renew_deadline, retry_period):
    """The bound of one Redis call (R3): max(RetryPeriod, RenewDeadline/2)."""
    return max(retry_period, renew_deadline / 2)


def check_timing(lease_duration, renew_deadline, retry_period):
    """Raises ValueError unless the three durations (seconds) obey R1."""
    ms = lease_duration * 1000
    if retry_period <= 0:
        raise ValueError("retry period must be positive")
    if abs(ms - round(ms)) > 1e-6:
        raise ValueError("lease duration must be a whole number of milliseconds")
    if not renew_deadline < lease_duration - drift_margin(lease_duration):
        raise ValueError(
            "renew deadline (%gs) must be shorter than lease duration minus its drift margin (%gs)"
            % (renew_deadline, lease_duration - drift_margin(lease_duration)))
    if not renew_deadline > JITTER_FACTOR * retry_period:
        raise ValueError("renew deadline (%gs) must exceed 1.2 x retry period (%gs)"
                         % (renew_deadline, JITTER_FACTOR * retry_period))


class Record:
    """A lease record, v1:<token>:<instance>:<identity>."""

    __slots__ = ("raw", "token", "instance", "identity")

    def __init__(self, raw):
        parts = raw.split(":", 3)
        if len(parts) != 4 or parts[0] != "v1":
            raise ValueError("not an elector record: %r" % raw)
        tok = parts[1]
        if not tok.isdigit() or not tok.isascii() or tok.startswith("0"):
            raise ValueError("bad token in record %r" % raw)
        self.raw, self.token, self.instance, self.identity = raw, int(tok), parts[2], parts[3]

    def __eq__(self, other):
        return isinstance(other, Record) and self.raw == other.raw

    def __hash__(self):
        return hash(self.raw)

    def __repr__(self):
        return "Record(%r)" % self.raw


def _s(b):
    return b.decode("utf-8", "surrogateescape") if isinstance(b, bytes) else b


def _b(s):
    return s.encode("utf-8", "surrogateescape")


class NotLeader(Exception):
    """resign() was called while this Elector does not lead."""


class _TermGuard:
    """R7: which won acquire may start a term; R12: which event is news."""

    def __init__(self):
        self.seen = 0      # newest token heard of (replies and events): news order
        self.released = 0  # newest token heard released: news order
        self.floor = 0     # newest token an acquire reply showed
        self.retired = 0   # newest token of ours whose release was sent (any outcome)
        self.last = None   # our newest record that started a term: the one resume allowed

    def news(self, token, released):
        if token < self.seen or token <= self.released:
            return False
        self.seen = token
        if released:
            self.released = token
        return True

    def reply(self, rec, won, enforce=True):
        trusted = won and rec.token > self.retired and (
            rec.token > self.floor or (rec == self.last and rec.token == self.floor))
        if won and not enforce:
            trusted = True
        self.floor = max(self.floor, rec.token)
        self.seen = max(self.seen, rec.token)
        if trusted:
            self.last = rec
        return trusted

    def retire(self, token):
        self.retired = max(self.retired, min(token, self.floor))


class Elector:
    """Campaigns for the lease lease_name under identity; see README.md.

    on_started(token) and on_stopped(token) run on the elector's thread; on_stopped must
    return once the work has stopped: the release waits for it (R9). on_new_leader(identity)
    is told of the holder when it changes ('' when released).
    """

    # The two safety rules, as switches only for test/conformance's deliberately broken
    # clients (a subclass sets them False); a real client never turns them off.
    _respect_known_expiry = True  # R6
    _guard_terms = True           # R7

    def __init__(self, client=None, *, lease_name, identity, url=None, key_prefix="elector",
                 lease_duration=DEFAULT_LEASE_DURATION, renew_deadline=DEFAULT_RENEW_DEADLINE,
                 retry_period=DEFAULT_RETRY_PERIOD, resign_hold_off=None,
                 on_started=None, on_stopped=None, on_new_leader=None, release_on_stop=True):
        check_timing(lease_duration, renew_deadline, retry_period)
        for what, v in (("lease_name", lease_name), ("key_prefix", key_prefix)):
            if not v or len(v.encode()) > 200 or any(c in v for c in "{} \t\r\n") or \
                    any(ord(c) < 32 or ord(c) == 127 for c in v):
                raise ValueError("%s %r: 1 to 200 bytes without braces, whitespace or control characters" % (what, v))
        if len(identity.encode()) > 256 or any(ord(c) < 32 or ord(c) == 127 for c in identity):
            raise ValueError("identity %r: at most 256 bytes, no control characters" % identity)
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self.resign_hold_off = lease_duration if resign_hold_off is None else resign_hold_off
        self.identity = identity
        self.instance = secrets.token_hex(8)  # R13: new at every process start
        self.owner = self.instance + ":" + identity
        self.lease_name = lease_name
        tag = "%s:{%s}:" % (key_prefix, lease_name)
        self.k_lease, self.k_token, self.k_terms, self.k_resign = (
            tag + "lease", tag + "token", tag + "terms", tag + "resign")
        self.channel = tag + "events"
        self.call_timeout = call_timeout(renew_deadline, retry_period)
        if client is None:
            client = redis.Redis.from_url(url or "redis://127.0.0.1:6379",
                                          socket_timeout=self.call_timeout,
                                          socket_connect_timeout=self.call_timeout)
        self.client = client
        self.on_started, self.on_stopped, self.on_new_leader = on_started, on_stopped, on_new_leader
        self.release_on_stop = release_on_stop
        self._src = {}
        for name in SCRIPT_SHA1:
            with open(os.path.join(_LUA, name + ".lua"), "rb") as f:
                src = f.read()
            if hashlib.sha1(src).hexdigest() != SCRIPT_SHA1[name]:
                raise RuntimeError("lua/%s.lua is not protocol version %d's script" % (name, PROTOCOL_VERSION))
            self._src[name] = src

        self._cond = threading.Condition(threading.RLock())
        self._guard = _TermGuard()
        self._known_at = None   # R6: expiry of the holder last heard of (monotonic), None: none
        self._known_token = 0
        self._leading = False
        self._record = None
        self._term_over = True  # on_stopped ran (or no term)
        self._stopping = False
        self._resign_asked = False
        self._woken = False     # a release of the current term was heard
        self._rearm_at = None   # an acquired/renewed event moved the expiry
        self._sub = None        # the pubsub while following
        self._sub_gen = 0
        self._sub_lost = False
        self._sub_failed_at = None
        self._leader_seen = None
        self._deadline = 0.0
        self._lead_done = None
        self._stopped_done = threading.Event()
        self._twin_warned = None
        self._thread = None

    # ----- public API -------------------------------------------------------------------

    @property
    def is_leader(self):
        with self._cond:
            return self._leading

    @property
    def token(self):
        """The current term's fencing token, None when not leading."""
        with self._cond:
            return self._record.token if self._leading else None

    def start(self):
        """Starts campaigning on a background thread."""
        with self._cond:
            if self._thread is not None:
                raise RuntimeError("already started")
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="elector-" + self.lease_name, daemon=True)
            self._thread.start()

    def stop(self, timeout=None):
        """Stops campaigning: a leader stops calling itself leader (on_stopped), then releases."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            t = self._thread
        if t is not None:
            t.join(timeout)
        with self._cond:
            self._thread = None

    def resign(self, target="", timeout=None):
        """Hands the lease over: the request names our record, then we step down and release;
        the reservation keeps us (or all but target) out for resign_hold_off. Returns once the
        release was sent. Raises NotLeader when not leading."""
        if target == self.identity:
            raise ValueError("resign target %r is this elector" % target)
        with self._cond:
            if not self._leading:
                raise NotLeader(self.lease_name)
            rec = self._record
        reply = self._script("resign", [self.k_lease, self.k_resign],
                             [int(self.resign_hold_off * 1000), target, int(self.lease_duration * 1000),
                              self.channel, rec.raw])
        if int(reply[0]) != 1:
            raise NotLeader("another term holds the lease: %s" % _s(reply[1]))
        with self._cond:
            if self._record is rec and self._leading:
                self._resign_asked = True
                self._cond.notify_all()
            self._cond.wait_for(lambda: self._lead_done is rec, timeout)

    # ----- Redis calls ------------------------------------------------------------------

    def _script(self, name, keys, args):
        """EVALSHA, and EVAL on NOSCRIPT (R3: the caller's send time is before the EVALSHA)."""
        try:
            return self.client.evalsha(SCRIPT_SHA1[name], len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return self.client.eval(self._src[name], len(keys), *keys, *args)

    # ----- timing helpers ---------------------------------------------------------------

    def _until_expiry(self, ttl):
        """R10: min(ttl, LeaseDuration); RetryPeriod for a key without expiry."""
        if ttl < 0:
            return self.retry_period
        return min(ttl, self.lease_duration)

    def _follower_wait(self, ttl, listening):
        if not listening and ttl > self.retry_period:
            return self.retry_period
        return self._until_expiry(ttl)

    def _heard(self, token, now, ttl):
        if ttl < 0 or ttl > self.lease_duration:
            ttl = self.lease_duration
        at = now + ttl
        if self._known_at is None or at > self._known_at:
            self._known_at = at
        self._known_token = max(self._known_token, token)

    def _heard_released(self, token):
        if token >= self._known_token:
            self._known_at, self._known_token = None, 0

    def _retry_after(self, now, d):
        """R6: after a failed attempt, never before the expiry of the holder last heard of."""
        if self._respect_known_expiry and self._known_at is not None and self._known_at > now:
            return max(d, self._known_at - now)
        return d

    # ----- subscription (R11, R12) ---------------------------------------------------

    def _subscribed(self):
        return self._sub is not None

    def _ensure_subscription(self):
        with self._cond:
            if self._sub is not None:
                return
            if self._sub_failed_at is not None and time.monotonic() - self._sub_failed_at < self.retry_period:
                return
        ps = self.client.pubsub()
        try:
            ps.subscribe(self.channel)
            deadline = time.monotonic() + self.call_timeout
            while True:  # wait for Redis to confirm, so that no release after it is missed
                left = deadline - time.monotonic()
                if left <= 0:
                    raise redis.exceptions.TimeoutError("subscribe not confirmed")
                m = ps.get_message(timeout=left)
                if m and m.get("type") == "subscribe":
                    break
        except (redis.RedisError, OSError) as e:
            try:
                ps.close()
            except Exception:
                pass
            with self._cond:
                if self._sub_failed_at is None:
                    log.warning("cannot subscribe to lease events; polling every retry period: %s", e)
                self._sub_failed_at = time.monotonic()
            return
        with self._cond:
            self._sub_failed_at = None
            self._sub_gen += 1
            self._sub, gen = ps, self._sub_gen
        threading.Thread(target=self._listen, args=(ps, gen), daemon=True).start()

    def _close_subscription(self):
        """Ends the subscription; its listener closes the connection (redis-py's PubSub is
        not safe to close from another thread)."""
        with self._cond:
            self._sub = None
            self._sub_gen += 1

    def _listen(self, ps, gen):
        last, pinged = time.monotonic(), False
        while True:
            with self._cond:
                if self._sub_gen != gen:
                    break
            try:
                m = ps.get_message(timeout=0.1)
                now = time.monotonic()
                if m is not None:
                    last, pinged = now, False
                    if m.get("type") == "message":
                        self._event(_s(m["data"]), now)
                elif now - last > 2 * HEALTH_INTERVAL:
                    raise redis.exceptions.ConnectionError("no answer to the subscription's ping")
                elif now - last > HEALTH_INTERVAL and not pinged:
                    ps.ping()
                    pinged = True
            except (redis.RedisError, OSError, ValueError, AttributeError) as e:
                with self._cond:
                    if self._sub_gen == gen:
                        log.info("lease event subscription lost: %s", e)
                        self._sub, self._sub_lost = None, True
                        self._sub_gen += 1
                        self._cond.notify_all()
                break
        try:
            ps.close()
        except Exception:
            pass

    def _event(self, payload, now):
        kind, _, rest = payload.partition(" ")
        ttl_s, _, raw = rest.partition(" ")
        if kind not in ("acquired", "renewed", "released"):
            return  # resign, probe, a kind of a later version: ignored
        try:
            ttl = int(ttl_s) / 1000
            rec = Record(raw)
        except ValueError:
            log.warning("unparsable event on %s: %r", self.channel, payload)
            return
        with self._cond:
            if self._leading:
                return
            if kind == "released":
                if not self._guard.news(rec.token, True):
                    return
                self._heard_released(rec.token)
                self._woken = True
                self._new_leader("")
            else:
                if not self._guard.news(rec.token, False):
                    return
                self._heard(rec.token, now, ttl)
                self._rearm_at = now + self._until_expiry(ttl)
                self._new_leader(rec.identity)
                if rec.identity == self.identity and rec.instance != self.instance and self._twin_warned != rec:
                    self._twin_warned = rec
                    log.error("another process campaigns under this identity %r (instance %s): give "
                              "every replica its own identity, or a resign of either shuts both out (R13)",
                              self.identity, rec.instance)
            self._cond.notify_all()

    def _new_leader(self, identity):
        if identity != self._leader_seen:
            self._leader_seen = identity
            if self.on_new_leader:
                try:
                    self.on_new_leader(identity)
                except Exception:
                    log.exception("on_new_leader failed")

    # ----- campaign ---------------------------------------------------------------------

    def _run(self):
        backoff = 0.0
        while True:
            with self._cond:
                if self._stopping:
                    break
            self._ensure_subscription()
            sent = time.monotonic()
            err = reply = None
            try:
                reply = self._script("acquire", [self.k_lease, self.k_token, self.k_terms, self.k_resign],
                                     [self.owner, int(self.lease_duration * 1000), self.channel])
            except (redis.RedisError, OSError) as e:
                err = e
            now = time.monotonic()
            wait, polling = self._decide(sent, now, reply, err, backoff)
            if wait is None:  # a term started and ended
                backoff = 0.0
                continue
            if err is not None:
                backoff = BACKOFF_MIN if backoff == 0 else min(2 * backoff, self.retry_period)
                wait = self._retry_after(now, backoff)
            elif wait > 0:
                backoff = 0.0
            self._sleep(now + wait + random.uniform(0, MAX_JITTER), polling)
        self._close_subscription()

    def _decide(self, sent, now, reply, err, backoff):
        """Acts on one acquire reply; returns (wait, polling), or (None, _) after a term."""
        if err is not None:
            log.info("acquire failed: %s", err)
            return 0, False
        code = int(reply[0])
        if code == 2:  # reserved after a resignation (R10)
            rec = Record(_s(reply[1]))
            with self._cond:
                self._heard_released(rec.token)
                return self._follower_wait(int(reply[2]) / 1000, self._subscribed()), False
        try:
            rec = Record(_s(reply[1]))
        except ValueError:
            log.error("the lease key holds no elector record: %r; waiting a retry period", reply[1])
            return self.retry_period, True
        ttl = int(reply[2]) / 1000
        won = code == 1
        with self._cond:
            trusted = self._guard.reply(rec, won, self._guard_terms)
            late = now >= sent + self.renew_deadline  # R2
            giving_up = self._stopping
            if won and not trusted:  # R7: not ours to start or release
                log.warning("acquire resumed record with token %d that this elector released or saw "
                            "replaced: not trusted, waiting for it to expire", rec.token)
                d = self._until_expiry(ttl)
                return d + drift_margin(d), False
            if not won:
                self._heard(rec.token, now, ttl)
                self._new_leader(rec.identity)
                listening = self._subscribed()
                d = self._follower_wait(ttl, listening)
                return d, d != self._follower_wait(ttl, True)
        if giving_up or late:  # won, but not started: release it (R8), retry (R2, R6)
            self._release(rec)
            wait = 0 if giving_up else self._retry_after(now, max(backoff, BACKOFF_MIN))
            return wait, False
        with self._cond:
            self._known_at, self._known_token = None, 0
        self._lead(rec, sent)
        return None, False

    def _sleep(self, until, polling):
        resub_at = None
        while True:
            with self._cond:
                if self._stopping:
                    return
                if self._woken:
                    self._woken = False
                    return
                if self._rearm_at is not None:
                    until, polling, self._rearm_at = self._rearm_at + random.uniform(0, MAX_JITTER), False, None
                if self._sub_lost:
                    self._sub_lost = False
                    if not self._respect_known_expiry:
                        return  # the broken client of test/conformance: tries at once
                    resub_at = time.monotonic() + RESUBSCRIBE_DELAY  # R6: keep sleeping
                now = time.monotonic()
                if now >= until:
                    return
                if resub_at is None or now < resub_at:
                    t = until - now if resub_at is None else min(until, resub_at) - now
                    self._cond.wait(t)
                    continue
            self._ensure_subscription()
            with self._cond:
                if self._sub is None:
                    resub_at = time.monotonic() + self.retry_period
                    continue
                resub_at = None
                if polling and self._known_at is not None and self._known_at > time.monotonic():
                    until, polling = self._known_at + random.uniform(0, MAX_JITTER), False

    # ----- leading ----------------------------------------------------------------------

    def _lead(self, rec, sent):
        self._close_subscription()
        now = time.monotonic()
        if now >= sent + self.renew_deadline:  # R2: held up after the reply
            self._release(rec)
            return
        with self._cond:
            self._leading, self._record, self._term_over, self._resign_asked = True, rec, False, False
            self._stopped_done = threading.Event()
            self._woken, self._rearm_at = False, None
            self._new_leader(self.identity)
            self._deadline = sent + self.renew_deadline
        deadline = [self._deadline]
        timer = [None]

        def arm():
            if timer[0] is not None:
                timer[0].cancel()
            timer[0] = threading.Timer(max(0.0, deadline[0] - time.monotonic()), self._deadline_passed, (rec,))
            timer[0].daemon = True
            timer[0].start()

        arm()
        if self.on_started:
            try:
                self.on_started(rec.token)
            except Exception:
                log.exception("on_started failed")
        log.info("became leader, token %d", rec.token)
        next_renew, backoff = sent + self.retry_period, 0.0
        reason, release = None, False
        while reason is None:
            with self._cond:
                while True:
                    now = time.monotonic()
                    if now >= deadline[0] or not self._leading:
                        reason = "renew deadline passed"
                    elif self._stopping:
                        reason, release = "stopped", self.release_on_stop
                    elif self._resign_asked:
                        reason, release = "resigned", True
                    elif now >= next_renew:
                        break
                    if reason:
                        break
                    self._cond.wait(min(next_renew, deadline[0]) - now)
            if reason:
                break
            sent2 = time.monotonic()
            try:
                r, err = int(self._script("renew", [self.k_lease, self.k_resign],
                                          [rec.raw, int(self.lease_duration * 1000), self.channel])), None
            except (redis.RedisError, OSError) as e:
                r, err = None, e
            now = time.monotonic()
            if now >= deadline[0]:  # R4: the deadline is checked before a reply is used
                reason = "renew deadline passed"
            elif err is not None:
                log.info("renew failed: %s", err)
                backoff = BACKOFF_MIN if backoff == 0 else min(2 * backoff, self.retry_period)
                next_renew = now + backoff
            elif r == 0:
                reason = "lease lost"  # R4: never retried, not released
            else:
                backoff = 0.0
                with self._cond:
                    if self._term_over:  # the deadline timer ended the term meanwhile
                        reason = "renew deadline passed"
                        break
                    self._deadline = deadline[0] = sent2 + self.renew_deadline
                arm()
                next_renew = sent2 + self.retry_period
                if r == 2:
                    reason, release = "asked to resign", True
        timer[0].cancel()
        self._step_down(rec, reason)
        if release:
            self._release(rec)
        with self._cond:
            self._lead_done = rec
            self._cond.notify_all()

    def _deadline_passed(self, rec):
        """R4: a timer at lastOK + RenewDeadline, independent of a hanging call."""
        self._step_down(rec, "renew deadline passed", deadline_only=True)

    def _step_down(self, rec, reason, deadline_only=False):
        """R9: stop calling ourselves leader and run on_stopped, before any release. Returns
        once on_stopped returned, whichever thread (the deadline timer's) runs it."""
        with self._cond:
            if self._record is not rec:
                return
            done = self._stopped_done
            if deadline_only and not self._term_over and time.monotonic() < self._deadline:
                return  # extended meanwhile
            if self._term_over:
                run = False
            else:
                run = True
                self._leading = False
                self._term_over = True
                self._new_leader("")
                self._cond.notify_all()
        if not run:
            done.wait()
            return
        log.info("stopped leading, token %d: %s", rec.token, reason)
        try:
            if self.on_stopped:
                self.on_stopped(rec.token)
        except Exception:
            log.exception("on_stopped failed")
        finally:
            done.set()

    def _release(self, rec):
        with self._cond:
            self._guard.retire(rec.token)  # R7: whatever the outcome
        try:
            self._script("release", [self.k_lease, self.k_resign], [rec.raw, self.channel])
        except (redis.RedisError, OSError) as e:
            log.warning("release of token %d failed; followers take over at expiry: %s", rec.token, e)
