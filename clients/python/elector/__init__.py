"""elector: leader election on an elector lease in Redis (docs/PROTOCOL.md, version 1)."""

from .core import (DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD,
                   PROTOCOL_VERSION, SCRIPT_SHA1, Elector, NotLeader, Record, call_timeout,
                   check_timing, drift_margin)

__all__ = ["Elector", "NotLeader", "Record", "PROTOCOL_VERSION", "SCRIPT_SHA1",
           "DEFAULT_LEASE_DURATION", "DEFAULT_RENEW_DEADLINE", "DEFAULT_RETRY_PERIOD",
           "call_timeout", "check_timing", "drift_margin"]
