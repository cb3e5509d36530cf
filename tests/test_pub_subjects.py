"""Publishing to subjects that are not valid literals, pedantic or not:
nats-server delivers wildcard subjects (and says -ERR to a pedantic client)
but a subject with an empty token reaches no one. Raw bytes compared."""

import socket
import time

import pytest

from tests.support.servers import ServerProcess

SUBJECTS = [b"a..b", b"a.", b".a", b"foo.*", b"foo.>", b"*", b">", b"a.>.b", b"ok.subject"]


def _exchange(port, pedantic, subject):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.recv(4096)
        s.sendall(b'CONNECT {"verbose":false,"pedantic":%s}\r\nSUB > 1\r\nPUB %s 2\r\nhi\r\nPING\r\n'
                  % (b"true" if pedantic else b"false", subject))
        buf = b""
        deadline = time.monotonic() + 10
        while b"PONG\r\n" not in buf and time.monotonic() < deadline:
            data = s.recv(4096)
            if not data:
                break
            buf += data
        return buf
    finally:
        s.close()


@pytest.fixture(scope="module")
def servers():
    with ServerProcess("nats-server") as ref, ServerProcess("natsbroker") as nb:
        yield ref, nb


@pytest.mark.parametrize("pedantic", [False, True], ids=["lax", "pedantic"])
@pytest.mark.parametrize("subject", SUBJECTS, ids=[s.decode() for s in SUBJECTS])
def test_publish_subject_as_nats_server(servers, subject, pedantic):
    ref, nb = servers
    theirs = _exchange(ref.port, pedantic, subject)
    ours = _exchange(nb.port, pedantic, subject)
    assert ours == theirs
    assert ours.endswith(b"PONG\r\n")
