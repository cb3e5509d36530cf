"""S3 (issue 29): a forged ``Nats-Request-Info`` must not reach a service.

A request crossing a service import gets a ``Nats-Request-Info`` header naming
the requester; the responder trusts it (nats-server's own services do). A
client that sends its own copies of the header, claiming to be the system
account's admin, must not get any of them past the server: nats-server
removes every line whose key is exactly ``Nats-Request-Info`` (its
``removeHeaderIfPresent`` loops) before adding the real one. It matches the
key case-sensitively, so ``nats-request-info:`` and ``NATS-REQUEST-INFO:``
lines (and a key with a space before the colon) pass through unchanged, on
both servers: they are other headers to it, and so to us.
"""

import json
import os

import pytest

from tests.support.raw import Conversation
from tests.support.servers import ServerProcess

CONF = """
accounts {
  SVC: { users: [{user: svc, password: p}], exports: [{service: "svc"}] }
  CLI: { users: [{user: cli, password: p}], imports: [{service: {account: SVC, subject: "svc"}}] }
}
"""

FORGED = b'{"acc":"SYS","user":"admin","server":"forged"}'


@pytest.fixture(scope="module", params=["nats-server", "natsbroker"])
def server(request):
    s = ServerProcess(request.param)
    conf = os.path.join(s.dir, "svc.conf")
    with open(conf, "w") as f:
        f.write(CONF)
    s.args = ["-c", conf]
    with s:
        yield s


def _login(port, user):
    c = Conversation(port)
    c.send(b'CONNECT {"user":"%s","pass":"p","headers":true,"protocol":1,"verbose":false}\r\n'
           b"PING\r\n" % user.encode())
    assert b"PONG" in c.read_pongs(1)
    return c


def _received_headers(server, header_lines):
    """The header lines the service in SVC sees for a request from CLI that
    carried ``header_lines``."""
    svc = _login(server.port, "svc")
    svc.send(b"SUB svc 1\r\nPING\r\n")
    assert b"PONG" in svc.read_pongs(1)
    cli = _login(server.port, "cli")
    block = b"NATS/1.0\r\n" + b"".join(line + b"\r\n" for line in header_lines) + b"\r\n"
    cli.send(b"HPUB svc _INBOX.r %d %d\r\n%s\r\nPING\r\n" % (len(block), len(block), block))
    assert b"PONG" in cli.read_pongs(1)
    got = svc.read_until(b"\r\n\r\n")
    svc.sock.close()
    cli.sock.close()
    # (nats-server may PING a new client first, to measure its RTT.)
    assert b"HMSG svc 1 " in got, got
    got = got[got.index(b"HMSG svc 1 "):]
    head = got.split(b"\r\n", 1)[1].split(b"\r\n\r\n", 1)[0]
    return head.split(b"\r\n")[1:]


def _shape(lines):
    """Header lines with the server's own Nats-Request-Info reduced to what
    identifies it (the account), so both servers compare equal."""
    out = []
    for line in lines:
        key, _, value = line.partition(b":")
        if key == b"Nats-Request-Info" and value.strip() != FORGED:
            info = json.loads(value)
            out.append((key, "real", info.get("acc")))
        else:
            out.append((key, value.strip()))
    return out


def test_every_forged_copy_is_removed(server):
    lines = _received_headers(server, [
        b"Nats-Request-Info: " + FORGED,
        b"X-Keep: 1",
        b"Nats-Request-Info: " + FORGED,
        b"Nats-Request-Info:" + FORGED,
    ])
    assert _shape(lines) == [(b"X-Keep", b"1"), (b"Nats-Request-Info", "real", "CLI")]


def test_forged_copy_after_key_inside_a_value_is_removed(server):
    # The key appearing first inside another header's value must not stop the
    # search (nats-server's getHeaderKeyIndex keeps looking).
    lines = _received_headers(server, [
        b"X-Note: see Nats-Request-Info: here",
        b"Nats-Request-Info: " + FORGED,
    ])
    assert _shape(lines) == [(b"X-Note", b"see Nats-Request-Info: here"),
                             (b"Nats-Request-Info", "real", "CLI")]


def test_case_and_space_variants_pass_as_other_headers(server):
    variants = [b"nats-request-info: " + FORGED, b"NATS-REQUEST-INFO: " + FORGED,
                b"Nats-Request-Info : " + FORGED]
    lines = _received_headers(server, variants + [b"Nats-Request-Info: " + FORGED])
    assert _shape(lines) == [
        (b"nats-request-info", FORGED), (b"NATS-REQUEST-INFO", FORGED),
        (b"Nats-Request-Info ", FORGED), (b"Nats-Request-Info", "real", "CLI")]
