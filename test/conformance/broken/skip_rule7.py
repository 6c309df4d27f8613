"""A deliberately broken client for test/conformance: the Python client without rule 7.

It starts a term on every acquire that replies 1, also when the record is one whose release
it sent, or its token is not above every token it has seen: acquire's "no new token" taken as
"resume", as a client written from the protocol document before issue #49 would.
TestBrokenClientsFail requires the suite to fail it."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "clients", "python"))

from elector import Elector  # noqa: E402
from elector.contract import main  # noqa: E402


class SkipsRule7(Elector):
    _guard_terms = False


if __name__ == "__main__":
    main(SkipsRule7)
