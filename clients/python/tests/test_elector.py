import os
import signal
import threading
import time

import pytest
import redis

from elector import Elector, NotLeader, Record, check_timing
from elector.core import _TermGuard

FAST = dict(lease_duration=1.0, renew_deadline=0.6, retry_period=0.15)


def make(port, identity, events, **kw):
    def started(tok):
        events.append(("started", identity, tok, time.monotonic()))

    def stopped(tok):
        try:
            held = redis.Redis(port=port, socket_timeout=0.1).get("elector:{t}:lease")
        except redis.RedisError:
            held = "unknown"
        events.append(("stopped", identity, tok, time.monotonic(), held))

    args = dict(FAST, **kw)
    return Elector(url="redis://127.0.0.1:%d" % port, lease_name="t", identity=identity,
                   on_started=started, on_stopped=stopped, **args)


def wait(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


def test_leads_then_stops_before_release(redis_server):
    _, port = redis_server
    ev = []
    e = make(port, "a", ev)
    e.start()
    assert wait(lambda: e.is_leader and ev)
    tok = e.token
    assert ev[0][:3] == ("started", "a", tok)
    rec = Record(redis.Redis(port=port).get("elector:{t}:lease").decode())
    assert rec.token == tok and rec.identity == "a" and rec.instance == e.instance
    e.stop()
    assert ev[-1][:3] == ("stopped", "a", tok)
    assert ev[-1][4] is not None, "on_stopped must run before the release"
    assert redis.Redis(port=port).get("elector:{t}:lease") is None, "released on stop"


def test_follower_wakes_on_release(redis_server):
    _, port = redis_server
    ev = []
    a, b = make(port, "a", ev), make(port, "b", ev)
    a.start()
    assert wait(lambda: a.is_leader)
    b.start()
    time.sleep(0.3)
    assert not b.is_leader
    t0 = time.monotonic()
    a.stop()
    assert wait(lambda: b.is_leader and ev[-1][1] == "b", 0.5), "b must take over on the released event, not at expiry"
    started = [x for x in ev if x[0] == "started" and x[1] == "b"][0]
    assert started[3] - t0 < 0.2
    assert b.token > [x for x in ev if x[0] == "started" and x[1] == "a"][0][2]
    b.stop()


def test_resign_to_target(redis_server):
    _, port = redis_server
    ev = []
    a, b, c = make(port, "a", ev), make(port, "b", ev), make(port, "c", ev)
    a.start()
    assert wait(lambda: a.is_leader)
    b.start()
    c.start()
    time.sleep(0.3)
    a.resign("c")
    assert wait(lambda: c.is_leader, 1.0)
    assert not b.is_leader
    with pytest.raises(NotLeader):
        a.resign()
    for e in (a, b, c):
        e.stop()


def test_steps_down_at_renew_deadline(redis_server):
    proc, port = redis_server
    ev = []
    a = make(port, "a", ev)
    a.start()
    assert wait(lambda: a.is_leader)
    os.kill(proc.pid, signal.SIGSTOP)  # Redis hangs: renewals get no reply
    try:
        t0 = time.monotonic()
        assert wait(lambda: not a.is_leader, 1.0)
        # At most RenewDeadline after the last successful renew's send time.
        took = time.monotonic() - t0
        assert took <= 0.6 + 0.05, took
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    threading.Thread(target=a.stop, daemon=True).start()


def test_term_guard_resume_rules():
    g = _TermGuard()
    r1 = Record("v1:10:i1:a")
    assert g.reply(r1, True)  # a new term
    assert g.reply(r1, True)  # resuming our own newest record
    g.retire(10)  # release sent, whatever its outcome
    assert not g.reply(r1, True), "never resume a record whose release was sent"
    g2 = _TermGuard()
    g2.reply(Record("v1:20:i2:b"), False)  # saw token 20 held
    assert not g2.reply(Record("v1:15:i1:a"), True), "a token not above every token seen"
    assert g2.reply(Record("v1:21:i1:a"), True)


def test_events_ordered_by_token():
    g = _TermGuard()
    assert g.news(5, False)
    assert g.news(5, True)
    assert not g.news(5, False), "a renewal of a released term is stale"
    assert not g.news(4, True)
    assert g.news(6, False)


def test_retry_not_before_known_expiry():
    e = Elector(url="redis://127.0.0.1:1", lease_name="t", identity="x", **FAST)
    e._heard(7, 100.0, 0.8)
    assert e._retry_after(100.1, 0.05) == pytest.approx(0.7)
    e._heard_released(7)
    assert e._retry_after(100.1, 0.05) == 0.05


def test_timing_rules():
    check_timing(15, 10, 2)
    with pytest.raises(ValueError):
        check_timing(1.0, 0.995, 0.1)  # inside the drift margin (12 ms)
    with pytest.raises(ValueError):
        check_timing(1.0, 0.6, 0.5)  # RenewDeadline <= 1.2 x RetryPeriod
    with pytest.raises(ValueError):
        check_timing(1.0005, 0.6, 0.1)  # not whole milliseconds


def test_record_parse():
    r = Record("v1:1764441600123456:9f86d081884c7d65:pod:with:colons")
    assert (r.token, r.instance, r.identity) == (1764441600123456, "9f86d081884c7d65", "pod:with:colons")
    for bad in ("v2:1:i:a", "v1:01:i:a", "v1:x:i:a", "v1:1:i"):
        with pytest.raises(ValueError):
            Record(bad)
