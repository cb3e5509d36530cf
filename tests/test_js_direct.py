"""Direct gets where nats-server has no subscriber (issue 13 item 4): a
stream without ``allow_direct``, or no such stream, answers a request with
the same 503 no-responders message, byte for byte."""


import pytest

from tests.support.raw import Wire
from tests.support.servers import ServerProcess


def _exchange(port, subject):
    s = Wire(port)
    try:
        s.send(b'CONNECT {"headers":true,"no_responders":true,"verbose":false}\r\n'
               b'SUB _INBOX.x 1\r\n')
        body = b'{"name":"S","subjects":["s"]}'
        s.send(b"PUB $JS.API.STREAM.CREATE.S _INBOX.x %d\r\n%s\r\nPING\r\n" % (len(body), body))
        # the create reply may come after the PONG: wait for it
        s.read_until(lambda buf: b"PONG\r\n" in buf and b"stream_create_response" in buf,
                     strict=False)
        s.send(b"PUB %s _INBOX.x 9\r\n{\"seq\":1}\r\nPING\r\n" % subject)
        return s.read_until(b"PONG\r\n")
    finally:
        s.close()


@pytest.mark.parametrize("subject", [b"$JS.API.DIRECT.GET.S", b"$JS.API.DIRECT.GET.S.s",
                                     b"$JS.API.DIRECT.GET.NOPE"])
def test_direct_get_without_allow_direct_is_no_responders(subject):
    out = {}
    for kind in ("nats-server", "natsbroker"):
        with ServerProcess(kind, ["-js"]) as srv:
            out[kind] = _exchange(srv.port, subject)
    assert out["natsbroker"] == out["nats-server"]
    assert out["natsbroker"].startswith(b"HMSG _INBOX.x 1 ")
    assert b"NATS/1.0 503\r\nNats-Subject: " + subject + b"\r\n" in out["natsbroker"]
