"""WebSocket origin checks and no_auth_user logins, side by side with nats-server.

Issue 29, S12: ``same_origin`` must compare the scheme too (``https://`` is
not the origin of a plain ws listener, ``http://`` not of a wss one), with
the scheme's default port (80/443) standing for a missing one; every
``allowed_origins`` entry of a host counts, each with its own scheme and
port. A CONNECT carrying a user, a password or a token is never the
``no_auth_user`` (the websocket block's or the server's): a lone ``pass``
must not log in as the no_auth_user.
"""

import os
import ssl
import subprocess
import time

import pytest

from tests.support.raw import dial
from tests.support.servers import ServerProcess
from tests.test_websocket import DEADLINE, KINDS, connected, upgrade_request

SAME_ORIGIN_CONF = """
authorization { users: [ {user: alice, password: secret}, {user: guest, password: guestpw} ] }
websocket {
  listen: "127.0.0.1:-1"
  no_tls: true
  same_origin: true
  no_auth_user: guest
}
"""

ALLOWED_CONF = """
authorization { users: [ {user: alice, password: secret}, {user: guest, password: guestpw} ] }
no_auth_user: guest
websocket {
  listen: "127.0.0.1:-1"
  no_tls: true
  allowed_origins: ["http://a.example", "https://a.example", "https://B.example:8443",
                    "http://c.example:8080", "http://user@d.example"]
}
"""

WSS_CONF = """
websocket {
  listen: "127.0.0.1:-1"
  same_origin: true
  tls { cert_file: "%(cert)s", key_file: "%(key)s" }
}
"""


def _servers(tmp_path_factory, name, conf):
    d = tmp_path_factory.mktemp(name)
    path = d / "server.conf"
    path.write_text(conf)
    servers = {}
    try:
        for k in KINDS:
            servers[k] = ServerProcess(k, ["-c", str(path)]).start()
        yield servers
    finally:
        for s in servers.values():
            s.stop()


@pytest.fixture(scope="module")
def same_origin(tmp_path_factory):
    yield from _servers(tmp_path_factory, "ws-same", SAME_ORIGIN_CONF)


@pytest.fixture(scope="module")
def allowed(tmp_path_factory):
    yield from _servers(tmp_path_factory, "ws-allowed", ALLOWED_CONF)


@pytest.fixture(scope="module")
def wss(tmp_path_factory):
    trustme = pytest.importorskip("trustme")
    d = tmp_path_factory.mktemp("ws-certs")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    conf = WSS_CONF % {"cert": d / "cert.pem", "key": d / "key.pem"}
    yield from _servers(tmp_path_factory, "ws-wss", conf)


def handshake(port, tls=False, **headers):
    """The server's answer to an upgrade request: status line and body
    (empty for a 101)."""
    sock = dial(port, DEADLINE)
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    sock.sendall(upgrade_request(port, **headers))
    until = time.monotonic() + DEADLINE
    out = b""
    try:
        while time.monotonic() < until:
            head, sep, body = out.partition(b"\r\n\r\n")
            if sep:
                lines = head.split(b"\r\n")
                length = [int(line.split(b":")[1]) for line in lines
                          if line.lower().startswith(b"content-length:")]
                if not length or len(body) >= length[0]:
                    return lines[0].decode(), body[:length[0]] if length else b""
            d = sock.recv(65536)
            if not d:
                break
            out += d
    finally:
        sock.close()
    return out, None


def outcomes(servers, cases, tls=False):
    """``{case: answer}`` from each server; both must agree."""
    results = {}
    for kind, s in servers.items():
        results[kind] = {case: handshake(s.ws_port, tls=tls, **dict(headers(s.ws_port)))
                         for case, headers in cases.items()}
    assert results["natsbroker"] == results["nats-server"]
    return results["natsbroker"]


OK = ("HTTP/1.1 101 Switching Protocols", b"")
FORBIDDEN = ("HTTP/1.1 403 Forbidden", b"Forbidden\n")

SAME_ORIGIN_CASES = {
    # Origin header (and Host, when not the listener's address) -> outcome
    "http same host:port": (lambda p: {"Origin": "http://127.0.0.1:%d" % p}, OK),
    "upper-case scheme and host": (lambda p: {"Origin": "HTTP://127.0.0.1:%d" % p}, OK),
    "https on plain ws": (lambda p: {"Origin": "https://127.0.0.1:%d" % p}, FORBIDDEN),
    "ws scheme": (lambda p: {"Origin": "ws://127.0.0.1:%d" % p}, FORBIDDEN),
    "other host": (lambda p: {"Origin": "http://localhost:%d" % p}, FORBIDDEN),
    "default port 80 vs listener's": (lambda p: {"Origin": "http://127.0.0.1"}, FORBIDDEN),
    "user info ignored": (lambda p: {"Origin": "http://x@127.0.0.1:%d" % p}, OK),
    "null origin": (lambda p: {"Origin": "null"}, FORBIDDEN),
    "bad port": (lambda p: {"Origin": "http://127.0.0.1:x"}, FORBIDDEN),
    "Sec-WebSocket-Origin https": (lambda p: {"Sec-WebSocket-Origin": "https://127.0.0.1:%d" % p},
                                   FORBIDDEN),
    # Host without a port: http's 80 on a plain listener.
    "Host no port, origin no port": (lambda p: {"Host": "127.0.0.1", "Origin": "http://127.0.0.1"}, OK),
    "Host no port, origin :80": (lambda p: {"Host": "127.0.0.1", "Origin": "http://127.0.0.1:80"}, OK),
    "Host :80, origin no port": (lambda p: {"Host": "127.0.0.1:80", "Origin": "http://127.0.0.1"}, OK),
    "Host no port, https origin": (lambda p: {"Host": "127.0.0.1", "Origin": "https://127.0.0.1"},
                                   FORBIDDEN),
    "Host no port, https :80": (lambda p: {"Host": "127.0.0.1", "Origin": "https://127.0.0.1:80"},
                                FORBIDDEN),
    "Host too many colons": (lambda p: {"Host": "127.0.0.1:1:2", "Origin": "http://127.0.0.1:1"},
                             FORBIDDEN),
}

ALLOWED_CASES = {
    "http a, default port": (lambda p: {"Origin": "http://a.example"}, OK),
    "http a :80": (lambda p: {"Origin": "http://a.example:80"}, OK),
    "https a, default port": (lambda p: {"Origin": "https://a.example"}, OK),
    "https a :443": (lambda p: {"Origin": "https://a.example:443"}, OK),
    "https a :80": (lambda p: {"Origin": "https://a.example:80"}, FORBIDDEN),
    "http a :443": (lambda p: {"Origin": "http://a.example:443"}, FORBIDDEN),
    "https b :8443 (host case)": (lambda p: {"Origin": "https://b.EXAMPLE:8443"}, OK),
    "http b :8443": (lambda p: {"Origin": "http://b.example:8443"}, FORBIDDEN),
    "https b default port": (lambda p: {"Origin": "https://b.example"}, FORBIDDEN),
    "http c :8080": (lambda p: {"Origin": "http://c.example:8080"}, OK),
    "https c :8080": (lambda p: {"Origin": "https://c.example:8080"}, FORBIDDEN),
    "d, allowed with user info": (lambda p: {"Origin": "http://d.example"}, OK),
    "no scheme": (lambda p: {"Origin": "a.example"}, FORBIDDEN),
    "ws scheme": (lambda p: {"Origin": "ws://a.example"}, FORBIDDEN),
    "unlisted host": (lambda p: {"Origin": "http://e.example"}, FORBIDDEN),
    "no Origin": (lambda p: {}, OK),
}

WSS_CASES = {
    "https same host:port": (lambda p: {"Origin": "https://127.0.0.1:%d" % p}, OK),
    "http on wss": (lambda p: {"Origin": "http://127.0.0.1:%d" % p}, FORBIDDEN),
    "Host no port, https no port": (lambda p: {"Host": "127.0.0.1", "Origin": "https://127.0.0.1"}, OK),
    "Host no port, https :443": (lambda p: {"Host": "127.0.0.1", "Origin": "https://127.0.0.1:443"}, OK),
    "Host no port, http no port": (lambda p: {"Host": "127.0.0.1", "Origin": "http://127.0.0.1"},
                                   FORBIDDEN),
    "Host no port, https :80": (lambda p: {"Host": "127.0.0.1", "Origin": "https://127.0.0.1:80"},
                                FORBIDDEN),
}


def _check(servers, cases, tls=False):
    got = outcomes(servers, {name: h for name, (h, _) in cases.items()}, tls=tls)
    assert got == {name: want for name, (_, want) in cases.items()}


def test_same_origin_compares_scheme_host_and_port(same_origin):
    _check(same_origin, SAME_ORIGIN_CASES)


def test_allowed_origins_scheme_and_default_ports(allowed):
    _check(allowed, ALLOWED_CASES)


def test_same_origin_on_wss_wants_https(wss):
    _check(wss, WSS_CASES, tls=True)


@pytest.mark.parametrize("origin", [
    "a.example", "ftp://a.example", "http://", "http://a:b", "*", "http://a:1:2", "ws://a.example",
])
def test_bad_allowed_origins_refused_at_start(tmp_path, origin):
    path = tmp_path / "bad.conf"
    path.write_text('websocket { port: -1\n no_tls: true\n allowed_origins: ["%s"] }\n' % origin)
    lines = {}
    for kind in KINDS:
        cmd = ServerProcess(kind, ["-c", str(path)]).command()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                           env={**os.environ, "PYTHONPATH": os.getcwd()})
        out = (p.stdout + p.stderr).strip().splitlines()
        assert p.returncode != 0, (kind, out)
        lines[kind] = out[-1].split(": ", 1)[1]
    assert lines["natsbroker"] == lines["nats-server"]


# -- no_auth_user: what a CONNECT must lack ---------------------------------------

CONNECTS = {
    "nothing": b"{}",
    "empty user and pass": b'{"user":"","pass":""}',
    "user only": b'{"user":"guest"}',
    "pass only (no_auth_user's)": b'{"pass":"guestpw"}',
    "pass only (other's)": b'{"pass":"secret"}',
    "pass only (wrong)": b'{"pass":"nope"}',
    "token only": b'{"auth_token":"guestpw"}',
    "user and pass": b'{"user":"alice","pass":"secret"}',
}


def login(port, connect):
    c = connected(port)
    c.send(b"CONNECT " + connect + b"\r\nPING\r\n")
    c.wait(lambda: b"PONG\r\n" in c.data() or b"-ERR" in c.data() or c.eof)
    closes = c.wait_close() if b"-ERR" in c.data() else []
    c.close()
    return c.data(), closes


def _logins(servers):
    results = {k: {name: login(s.ws_port, connect) for name, connect in CONNECTS.items()}
               for k, s in servers.items()}
    assert results["natsbroker"] == results["nats-server"]
    return results["natsbroker"]


REFUSED = (b"-ERR 'Authorization Violation'\r\n", [(1008, "Authentication Failure")])
PONG = (b"+OK\r\nPONG\r\n", [])  # (CONNECT is verbose by default)
EXPECTED = {"nothing": PONG, "empty user and pass": PONG, "user only": REFUSED,
            "pass only (no_auth_user's)": REFUSED, "pass only (other's)": REFUSED,
            "pass only (wrong)": REFUSED, "token only": REFUSED, "user and pass": PONG}


def test_websocket_no_auth_user_needs_no_credentials(same_origin):
    assert _logins(same_origin) == EXPECTED


def test_server_no_auth_user_over_websocket_needs_no_credentials(allowed):
    assert _logins(allowed) == EXPECTED
