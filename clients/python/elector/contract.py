"""The conformance suite's process contract (test/conformance/CONTRACT.md) for this client:
python3 -m elector.contract. Configured by the ELECTOR_* environment variables; reads
commands on stdin, reports on stdout."""

import logging
import os
import sys
import threading
import time

from .core import Elector, NotLeader

_out = threading.Lock()


def say(*words):
    with _out:
        sys.stdout.write(" ".join(str(w) for w in words) + "\n")
        sys.stdout.flush()


def main(elector_class=Elector):
    logging.basicConfig(stream=sys.stderr, level=os.environ.get("ELECTOR_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    env = os.environ
    ms = lambda k: int(env[k]) / 1000  # noqa: E731
    hold = env.get("ELECTOR_RESIGN_HOLD_OFF_MS")
    e = elector_class(
        url="redis://" + env["ELECTOR_REDIS_ADDR"], lease_name=env["ELECTOR_LEASE_NAME"],
        key_prefix=env.get("ELECTOR_KEY_PREFIX", "elector"), identity=env["ELECTOR_IDENTITY"],
        lease_duration=ms("ELECTOR_LEASE_DURATION_MS"), renew_deadline=ms("ELECTOR_RENEW_DEADLINE_MS"),
        retry_period=ms("ELECTOR_RETRY_PERIOD_MS"), resign_hold_off=int(hold) / 1000 if hold else None,
        on_started=lambda tok: say("started", tok, time.time_ns()),
        on_stopped=lambda tok: say("stopped", tok, time.time_ns()))
    say("ready", e.instance)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "campaign":
            if e._thread is None:
                e.start()
        elif cmd == "stop":
            e.stop()
            say("idle", time.time_ns())
        elif cmd == "resign":
            # Off the command loop: resign returns once the release was sent.
            def resign(target=arg):
                try:
                    e.resign(target)
                    say("resign", "ok")
                except NotLeader as err:
                    say("resign", "error", "not leader:", err)
                except Exception as err:  # noqa: BLE001
                    say("resign", "error", repr(err))
            threading.Thread(target=resign, daemon=True).start()
        elif cmd == "exit":
            break
    e.stop()
    say("idle", time.time_ns())


if __name__ == "__main__":
    main()
