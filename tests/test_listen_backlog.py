"""Every listener's accept queue is as deep as nats-server's (Go listens with the
kernel's somaxconn): a burst of clients connecting at once is queued, not dropped."""

import shutil
import subprocess

import pytest

from natsbroker.server import listen_backlog
from tests.support.servers import ServerProcess


def _backlog(port):
    # A missing tool fails the test rather than skipping it: a skip would read as
    # green. .ci/run installs iproute2 where ss is absent.
    if shutil.which("ss") is None:
        pytest.fail("needs ss (iproute2): apt-get install iproute2")
    # ss shows a listening socket's backlog as its Send-Q.
    out = subprocess.run(["ss", "-ltnH", "sport = :%d" % port], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out, "nothing listens on %d" % port
    return int(out[2])


def _listeners(kind):
    s = ServerProcess(kind, ["-m", "-1", "--cluster", "nats://127.0.0.1:-1"]).start()
    try:
        return {name: _backlog(p) for name, p in
                [("client", s.port), ("monitoring", s.http_port), ("cluster", s.cluster_port)]}
    finally:
        s.stop()


def test_backlog_matches_nats_server():
    ours, theirs = _listeners("natsbroker"), _listeners("nats-server")
    assert ours == theirs
    assert ours["client"] == listen_backlog() > 50
