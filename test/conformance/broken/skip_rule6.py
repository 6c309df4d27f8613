"""A deliberately broken client for test/conformance: the Python client without rule 6.

After a failed attempt or a lost subscription it tries again after the backoff, not at the
expiry of the holder it last heard of, as a client written from the protocol document before
issue #49 would. TestBrokenClientsFail requires the suite to fail it."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "clients", "python"))

from elector import Elector  # noqa: E402
from elector.contract import main  # noqa: E402


class SkipsRule6(Elector):
    _respect_known_expiry = False


if __name__ == "__main__":
    main(SkipsRule6)
