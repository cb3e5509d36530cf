"""Publishing to subjects that are not valid literals, pedantic or not:
nats-server delivers wildcard subjects (and says -ERR to a pedantic client)
but a subject with an empty token reaches no one. Raw bytes compared."""


import pytest

from tests.support.raw import Wire
from tests.support.servers import ServerProcess

SUBJECTS = [b"a..b", b"a.", b".a", b"foo.*", b"foo.>", b"*", b">", b"a.>.b", b"ok.subject"]


def _exchange(port, pedantic, subject):
    s = Wire(port)
    try:
        s.send(b'CONNECT {"verbose":false,"pedantic":%s}\r\nSUB > 1\r\nPUB %s 2\r\nhi\r\nPING\r\n'
               % (b"true" if pedantic else b"false", subject))
        return s.read_until(b"PONG\r\n", strict=False)
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
