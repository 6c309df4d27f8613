import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
import redis


def _required():
    return os.environ.get("CI") or os.environ.get("ELECTOR_REQUIRE_REDIS")


@pytest.fixture
def redis_server():
    """A redis-server of its own on a free loopback port, killed after the test."""
    binary = shutil.which("redis-server")
    if binary is None:
        if _required():
            pytest.fail("redis-server not found, and CI or ELECTOR_REQUIRE_REDIS is set")
        pytest.skip("redis-server not found (Debian: apt-get install redis-server)")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    d = tempfile.mkdtemp()
    p = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", d],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c = redis.Redis(port=port)
    for _ in range(200):
        try:
            c.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.01)
    yield p, port
    p.kill()
    p.wait()
    shutil.rmtree(d, ignore_errors=True)
