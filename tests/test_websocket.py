"""The websocket listener, side by side with nats-server.

Each scenario runs against nats-server and natsbroker started with the same
config file and compares what a raw WebSocket client (wsproto, client side)
sees: handshake answers, frames, close codes. nats-py then uses natsbroker
over ws:// as an application would.
"""

import asyncio
import base64
import json
import os
import socket
import time

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    Pong,
    RejectConnection,
    Request,
)
from wsproto.extensions import PerMessageDeflate
from wsproto.frame_protocol import FrameProtocol
from wsproto.utilities import generate_accept_token

from tests.support.clients import flushed
from tests.support.http import get_json
from tests.support.raw import dial
from tests.support.servers import ServerProcess

DEADLINE = 10.0
KINDS = ["nats-server", "natsbroker"]

PLAIN_CONF = """
http_port: -1
websocket {
  port: -1
  no_tls: true
  compression: true
}
"""

GUARDED_CONF = """
http_port: -1
authorization { user: alice, password: secret, timeout: 5 }
websocket {
  listen: "127.0.0.1:-1"
  no_tls: true
  same_origin: true
  allowed_origins: ["http://127.0.0.1:%(dummy)s"]
  handshake_timeout: "1s"
}
"""


def _start(kind, conf, tmp_dir, extra=()):
    path = os.path.join(tmp_dir, "%s-%d.conf" % (kind, abs(hash(conf))))
    with open(path, "w") as f:
        f.write(conf)
    return ServerProcess(kind, ["-c", path, *extra]).start()


def _both_servers(tmp_path_factory, name, conf):
    """Both servers with ``conf``, stopped when the fixture ends."""
    d = str(tmp_path_factory.mktemp(name))
    servers = {}
    try:
        for k in KINDS:
            servers[k] = _start(k, conf, d)
        yield servers
    finally:
        for s in servers.values():
            s.stop()


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    yield from _both_servers(tmp_path_factory, "ws-plain", PLAIN_CONF)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    yield from _both_servers(tmp_path_factory, "ws-guarded", GUARDED_CONF % {"dummy": 1234})


# -- a raw WebSocket client --------------------------------------------------------


class WSClient:
    """A blocking WebSocket client: wsproto's framing over a socket."""

    def __init__(self, port, headers=(), extensions=()):
        self.sock = dial(port, DEADLINE)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.sock.sendall(self.ws.send(Request(host="127.0.0.1:%d" % port, target="/",
                                               extra_headers=list(headers),
                                               extensions=list(extensions))))
        self.events = []
        self.raw = b""
        self.eof = False
        self.accepted = self.wait(lambda: any(isinstance(e, (AcceptConnection, RejectConnection))
                                              for e in self.events))
        self.accept = next(e for e in self.events if isinstance(e, (AcceptConnection, RejectConnection)))
        self.events = [e for e in self.events if e is not self.accept]

    def _read(self, until):
        self.sock.settimeout(max(0.01, until - time.monotonic()))
        try:
            data = self.sock.recv(65536)
        except (socket.timeout, TimeoutError):
            return
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return
        self.raw += data
        self.ws.receive_data(data)
        self.events.extend(self.ws.events())

    def wait(self, cond, timeout=DEADLINE):
        until = time.monotonic() + timeout
        while not cond():
            if self.eof or time.monotonic() >= until:
                return cond()
            self._read(until)
        return True

    def send(self, data, **kw):
        self.sock.sendall(self.ws.send(Message(data=data, **kw)))

    def send_event(self, event):
        self.sock.sendall(self.ws.send(event))

    def data(self):
        # The server's own keepalive PINGs come when they come: left out (no
        # payload in these tests contains "PING").
        return b"".join(e.data for e in self.events if isinstance(e, BytesMessage)).replace(b"PING\r\n", b"")

    def frames(self):
        return [e.data for e in self.events if isinstance(e, BytesMessage)]

    def closes(self):
        return [(int(e.code), e.reason) for e in self.events if isinstance(e, CloseConnection)]

    def wait_data(self, suffix):
        assert self.wait(lambda: self.data().endswith(suffix)), (self.data(), self.closes())
        return self.data()

    def wait_close(self):
        assert self.wait(lambda: self.closes() or self.eof), self.events
        self.wait(lambda: self.eof, timeout=2)
        return self.closes()

    def info(self):
        self.wait(lambda: self.data().startswith(b"INFO ") and b"\r\n" in self.data())
        line = self.data().split(b"\r\n", 1)[0]
        return json.loads(line[5:])

    def clear(self):
        self.events = []

    def close(self):
        self.sock.close()


def connected(port, **kw):
    c = WSClient(port, **kw)
    assert isinstance(c.accept, AcceptConnection), c.accept
    c.info()
    c.clear()
    return c


def http_exchange(port, request, timeout=DEADLINE):
    """Send raw request bytes; the answer up to its body's end (or EOF)."""
    s = dial(port, timeout)
    s.sendall(request)
    until = time.monotonic() + timeout
    out = b""
    while time.monotonic() < until:
        head, sep, body = out.partition(b"\r\n\r\n")
        if sep:
            length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")]
            if length and len(body) >= length[0]:
                break
        s.settimeout(max(0.01, until - time.monotonic()))
        try:
            d = s.recv(65536)
        except (socket.timeout, TimeoutError):
            break
        if not d:
            break
        out += d
    s.close()
    return out


def upgrade_request(port, method="GET", drop=(), **extra):
    h = {"Host": "127.0.0.1:%d" % port, "Upgrade": "websocket", "Connection": "Upgrade",
         "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(), "Sec-WebSocket-Version": "13"}
    h.update({k.replace("_", "-"): v for k, v in extra.items()})
    for name in drop:
        h.pop(name)
    return ("%s / HTTP/1.1\r\n" % method + "".join("%s: %s\r\n" % kv for kv in h.items())
            + "\r\n").encode()


def http_status_and_body(answer):
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower().decode()] = v.strip().decode()
    headers.pop("date", None)
    return lines[0].decode(), headers, body


def both(servers, scenario):
    """Run ``scenario(server)`` against each server; assert same result."""
    results = {k: scenario(s) for k, s in servers.items()}
    assert results["natsbroker"] == results["nats-server"], results
    return results["natsbroker"]


def varz(server):
    return get_json(server, "/varz", timeout=DEADLINE)


def connz(server, query=""):
    return get_json(server, "/connz" + query, timeout=DEADLINE)


CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'


# -- the differential scenarios ----------------------------------------------------


def test_handshake_and_info(plain):
    def scenario(s):
        c = WSClient(s.ws_port)
        assert isinstance(c.accept, AcceptConnection)
        status_line = c.raw.split(b"\r\n", 1)[0]
        head = c.raw.split(b"\r\n\r\n", 1)[0].decode()
        info = c.info()
        plain_info = json.loads(dial(s.port, DEADLINE)
                                .recv(65536).split(b"\r\n")[0][5:])
        c.close()
        assert info["port"] == s.ws_port  # the WebSocket listener's, not the client port's
        assert info["host"] == "0.0.0.0"
        # The ws INFO has the same keys as the client port's.
        return status_line, head.count("\r\n"), info.keys() == plain_info.keys(), info["headers"]

    status_line, n_headers, same_keys, headers = both(plain, scenario)
    assert status_line == b"HTTP/1.1 101 Switching Protocols"
    assert same_keys and headers is True


def test_accept_header_and_server_frames_are_binary(plain):
    def scenario(s):
        key = base64.b64encode(os.urandom(16))
        answer = http_exchange(s.ws_port, upgrade_request(s.ws_port, Sec_WebSocket_Key=key.decode()),
                               timeout=1)
        head, _, rest = answer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        assert (b"Sec-WebSocket-Accept: " + generate_accept_token(key)) in lines
        # The INFO follows as one unmasked binary frame.
        return lines[0], [ln.split(b":")[0] for ln in lines[1:]], rest[:1], rest[1] & 0x80

    assert both(plain, scenario)[1] == [b"Upgrade", b"Connection", b"Sec-WebSocket-Accept"]


def test_ping_pong_and_coalesced_ops(plain):
    def scenario(s):
        c = connected(s.ws_port)
        c.send(CONNECT + b"PING\r\n")
        first = c.wait_data(b"PONG\r\n")
        c.clear()
        # Several ops in one frame.
        # (One subscription: nats-server's order across subscriptions varies.)
        c.send(b"SUB foo 1\r\nPUB foo 5\r\nhello\r\nHPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n")
        out = c.wait_data(b"PONG\r\n")
        c.close()
        return first, out

    first, out = both(plain, scenario)
    assert first.endswith(b"PONG\r\n")
    assert out == b"MSG foo 1 5\r\nhello\r\nHMSG foo 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPONG\r\n"


def test_fragmented_and_split_ops(plain):
    def scenario(s):
        c = connected(s.ws_port)
        c.send(CONNECT + b"SUB bar 7\r\nPING\r\n")
        c.wait_data(b"PONG\r\n")
        c.clear()
        # One message in three frames (continuations), one op cut across two messages.
        c.send(b"PUB bar 11\r\nhel", message_finished=False)
        c.send(b"lo wo", message_finished=False)
        c.send(b"rld\r\nPUB bar 3\r\nab", message_finished=True)
        c.send(b"c\r\nPI")
        c.send(b"NG\r\n")
        # Text frames carry protocol just as binary ones do.
        c.send("PUB bar 2\r\né\r\nPING\r\n")
        out = c.wait_data(b"PONG\r\nMSG bar 7 2\r\n\xc3\xa9\r\nPONG\r\n")
        c.close()
        return out

    assert both(plain, scenario) == (b"MSG bar 7 11\r\nhello world\r\nMSG bar 7 3\r\nabc\r\nPONG\r\n"
                                     b"MSG bar 7 2\r\n\xc3\xa9\r\nPONG\r\n")


def test_ws_ping_answered_and_close_echoed(plain):
    def scenario(s):
        c = connected(s.ws_port)
        c.send_event(Ping(payload=b"are you there"))
        assert c.wait(lambda: any(isinstance(e, Pong) for e in c.events))
        pong = next(e for e in c.events if isinstance(e, Pong)).payload
        c.send_event(CloseConnection(code=1000, reason="bye"))
        closes = c.wait_close()
        c.close()
        return pong, closes[:1]

    assert both(plain, scenario) == (b"are you there", [(1000, "bye")])


def test_compression(plain):
    payload = b"x" * 300

    def scenario(s):
        c = WSClient(s.ws_port, extensions=[PerMessageDeflate()])
        head = c.raw.split(b"\r\n\r\n", 1)[0]
        ext = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"sec-websocket-extensions")]
        c.info()
        c.clear()
        c.send(CONNECT + b"SUB z 1\r\nPING\r\n")
        c.wait_data(b"PONG\r\n")
        c.clear()
        before = len(c.raw)
        c.send(b"PUB z %d\r\n%s\r\nPING\r\n" % (len(payload), payload))
        out = c.wait_data(b"PONG\r\n")
        # The big frame came compressed: far fewer bytes on the wire than in it.
        c.close()
        return ext, out, len(c.raw) - before < len(payload)

    ext, out, compressed = both(plain, scenario)
    assert ext == [b"Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; "
                   b"client_no_context_takeover"]
    assert out == b"MSG z 1 300\r\n" + payload + b"\r\nPONG\r\n"
    assert compressed


def test_unmasked_frame(plain):
    def scenario(s):
        c = connected(s.ws_port)
        # A server-side FrameProtocol writes frames without a mask.
        c.sock.sendall(FrameProtocol(client=False, extensions=[]).send_data(b"PING\r\n"))
        closes = c.wait_close()
        c.close()
        return c.data(), closes

    expected = (b"", [(1002, "mask bit missing")])
    assert scenario(plain["natsbroker"]) == expected
    # nats-server sends the same close frame, unless (a race in it) it closes
    # the socket before flushing it.
    assert scenario(plain["nats-server"]) in (expected, (b"", []))


def test_max_payload_closes_with_1009(plain):
    def scenario(s):
        c = connected(s.ws_port)
        c.send(CONNECT + b"PUB foo 2000000\r\n")
        closes = c.wait_close()
        c.close()
        return c.data(), closes

    assert both(plain, scenario) == (b"-ERR 'Maximum Payload Violation'\r\n",
                                     [(1009, "Maximum Message Payload Exceeded")])


def test_bad_client_protocol_closes_with_1002(plain):
    def scenario(s):
        c = connected(s.ws_port)
        c.send(b'CONNECT {"protocol":5}\r\n')
        closes = c.wait_close()
        c.close()
        return c.data(), closes

    assert both(plain, scenario) == (b"-ERR 'invalid client protocol'\r\n",
                                     [(1002, "Bad Client Protocol Version")])


@pytest.mark.parametrize("method,drop,extra,status", [
    ("POST", (), {}, "HTTP/1.1 405 Method Not Allowed"),
    ("GET", ("Upgrade",), {}, "HTTP/1.1 400 Bad Request"),
    ("GET", ("Connection",), {}, "HTTP/1.1 400 Bad Request"),
    ("GET", ("Sec-WebSocket-Key",), {}, "HTTP/1.1 400 Bad Request"),
    ("GET", (), {"Sec_WebSocket_Version": "12"}, "HTTP/1.1 400 Bad Request"),
])
def test_bad_upgrade_requests(plain, method, drop, extra, status):
    def scenario(s):
        return http_status_and_body(http_exchange(
            s.ws_port, upgrade_request(s.ws_port, method=method, drop=drop, **extra)))

    line, headers, body = both(plain, scenario)
    assert line == status
    assert headers["sec-websocket-version"] == "13"
    assert body == line.split(" ", 2)[2].encode() + b"\n"


def test_unreadable_http_request(plain):
    def scenario(s):
        return http_exchange(s.ws_port, b"HELLO\r\n\r\n")

    assert both(plain, scenario).startswith(b"HTTP/1.1 400 Bad Request\r\n")


def test_origin_checks(guarded):
    def scenario(s):
        bad = http_status_and_body(http_exchange(
            s.ws_port, upgrade_request(s.ws_port, Origin="http://evil.example.com")))
        # Same origin passes that check, but is not in the allowed list.
        same = http_status_and_body(http_exchange(
            s.ws_port, upgrade_request(s.ws_port, Origin="http://127.0.0.1:%d" % s.ws_port)))
        c = WSClient(s.ws_port)  # no Origin header: allowed
        ok = isinstance(c.accept, AcceptConnection)
        c.close()
        return bad, same, ok

    bad, same, ok = both(guarded, scenario)
    assert bad[0] == "HTTP/1.1 403 Forbidden" and bad[2] == b"Forbidden\n"
    assert same[0] == "HTTP/1.1 403 Forbidden"
    assert ok


def test_auth_failure_err_and_close(guarded):
    def scenario(s):
        c = connected(s.ws_port)
        c.send(b'CONNECT {"verbose":false,"user":"alice","pass":"wrong"}\r\nPING\r\n')
        closes = c.wait_close()
        c.close()
        good = connected(s.ws_port)
        good.send(b'CONNECT {"verbose":false,"user":"alice","pass":"secret"}\r\nPING\r\n')
        pong = good.wait_data(b"PONG\r\n")
        good.close()
        return c.data(), closes, pong

    assert both(guarded, scenario) == (b"-ERR 'Authorization Violation'\r\n",
                                       [(1008, "Authentication Failure")], b"PONG\r\n")


def test_handshake_timeout(guarded):
    def scenario(s):
        sock = dial(s.ws_port, DEADLINE)
        sock.sendall(b"GET / HTTP/1.1\r\n")
        start = time.monotonic()
        data = sock.recv(1000)  # EOF once the 1s handshake_timeout is over
        sock.close()
        return data, time.monotonic() - start < DEADLINE

    assert both(guarded, scenario) == (b"", True)


def test_info_auth_required(guarded):
    def scenario(s):
        c = WSClient(s.ws_port)
        info = c.info()
        c.close()
        return info.get("auth_required"), info["port"] == s.ws_port

    assert both(guarded, scenario) == (True, True)


def test_varz_websocket_section(plain, guarded):
    for servers in (plain, guarded):
        sections = {k: varz(s)["websocket"] for k, s in servers.items()}
        assert list(sections["natsbroker"]) == list(sections["nats-server"]), sections
        for k, s in servers.items():
            assert sections[k]["port"] == s.ws_port
        ns, nb = sections["nats-server"], sections["natsbroker"]
        assert {k: v for k, v in nb.items() if k != "port"} == {k: v for k, v in ns.items() if k != "port"}


def test_connz_shows_websocket_type(plain):
    def scenario(s):
        c = connected(s.ws_port)
        c.send(b'CONNECT {"verbose":false,"name":"wsclient"}\r\nPING\r\n')
        c.wait_data(b"PONG\r\n")
        rows = [r for r in connz(s)["connections"] if r.get("name") == "wsclient"]
        c.send_event(CloseConnection(code=1000))
        c.wait_close()
        c.close()
        deadline = time.monotonic() + DEADLINE
        closed = []
        while not closed and time.monotonic() < deadline:
            closed = [r for r in connz(s, "?state=closed")["connections"] if r.get("name") == "wsclient"]
            if not closed:
                time.sleep(0.05)  # polling the monitor, not synchronising on time
        return [(r["kind"], r["type"]) for r in rows], [(r["type"], r["reason"]) for r in closed[:1]]

    assert both(plain, scenario) == ([("Client", "websocket")], [("websocket", "Client Closed")])


# -- start-up errors and the ports file -----------------------------------------------


def test_websocket_requires_tls(tmp_path):
    import subprocess
    import sys
    conf = tmp_path / "ws.conf"
    conf.write_text("websocket { port: -1 }\n")
    r = subprocess.run([sys.executable, "-m", "natsbroker", "-c", str(conf)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip() == "natsbroker: websocket requires TLS configuration"
    assert "Traceback" not in r.stderr


def test_ports_file_and_log(plain):
    s = plain["natsbroker"]
    assert "Listening for websocket clients on ws://0.0.0.0:%d" % s.ws_port in s.log()


# -- nats-py over ws:// -------------------------------------------------------------


@pytest.fixture(scope="module")
def js_broker(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("ws-js"))
    s = _start("natsbroker", "websocket { port: -1, no_tls: true }\n", d, extra=["-js"])
    yield s
    s.stop()


def test_nats_py_over_websocket(js_broker):
    import nats  # ws:// needs aiohttp (test extra): without it the connect fails

    async def main():
        url = "ws://127.0.0.1:%d" % js_broker.ws_port
        nc = await nats.connect(url, connect_timeout=DEADLINE)
        got = asyncio.get_running_loop().create_future()

        async def on_msg(msg):
            if not got.done():
                got.set_result(msg)

        await nc.subscribe("greet.*", cb=on_msg)

        async def on_req(msg):
            await msg.respond(b"re:" + msg.data)

        await nc.subscribe("svc", cb=on_req)
        await flushed(nc)
        await nc.publish("greet.joe", b"hi", headers={"X-Test": "1"})
        msg = await asyncio.wait_for(got, DEADLINE)
        assert msg.data == b"hi" and msg.headers == {"X-Test": "1"}
        reply = await nc.request("svc", b"ping", timeout=DEADLINE)
        assert reply.data == b"re:ping"

        js = nc.jetstream()
        kv = await js.create_key_value(bucket="wsprefs")
        rev = await kv.put("color", b"blue")
        entry = await kv.get("color")
        assert entry.value == b"blue" and entry.revision == rev
        await nc.close()

    asyncio.run(asyncio.wait_for(main(), 60))


# -- the websocket block's own authorization ------------------------------------------

OVERRIDE_CONF = """
websocket {
  port: -1
  no_tls: true
  authorization { user: wsuser, password: wspass, timeout: 1 }
}
"""


@pytest.fixture(scope="module")
def override(tmp_path_factory):
    yield from _both_servers(tmp_path_factory, "ws-override", OVERRIDE_CONF)


def test_websocket_authorization_block(override):
    def scenario(s):
        plain_info = json.loads(dial(s.port, DEADLINE)
                                .recv(65536).split(b"\r\n")[0][5:])
        c = WSClient(s.ws_port)
        info = c.info()
        c.clear()
        c.send(b'CONNECT {"verbose":false,"user":"wsuser","pass":"wspass"}\r\nPING\r\n')
        pong = c.wait_data(b"PONG\r\n")
        c.close()
        bad = connected(s.ws_port)
        bad.send(b'CONNECT {"verbose":false,"user":"other","pass":"wspass"}\r\nPING\r\n')
        bad_close = bad.wait_close()
        bad.close()
        # The block's timeout (1s) replaces the server's 2s.
        idle = connected(s.ws_port)
        start = time.monotonic()
        idle_close = idle.wait_close()
        took = time.monotonic() - start
        idle.close()
        return (plain_info.get("auth_required"), info.get("auth_required"), pong, bad.data(), bad_close,
                idle.data(), idle_close, took < 1.9)

    assert both(override, scenario) == (
        None, True, b"PONG\r\n", b"-ERR 'Authorization Violation'\r\n", [(1008, "Authentication Failure")],
        b"-ERR 'Authentication Timeout'\r\n", [(1008, "Authentication Timeout")], True)


# -- config file ------------------------------------------------------------------------


def _load(tmp_path, text):
    from natsbroker.config import load as configfile
    path = tmp_path / "ws.conf"
    path.write_text(text)
    return configfile.load_config(str(path))


def test_config_block(tmp_path):
    cfg, warnings = _load(tmp_path, """
ws {
  listen: "127.0.0.1:8080"
  no_tls: true
  advertise: "ws.example.com:443"
  compress: true
  same_origin: true
  origins: "https://app.example.com"
  handshake_timeout: "3s"
  authentication { username: u, password: p, timeout: 4 }
}
""")
    ws = cfg.websocket
    assert (ws.host, ws.port, ws.advertise, ws.compression, ws.same_origin) == (
        "127.0.0.1", 8080, "ws.example.com:443", True, True)
    assert ws.allowed_origins == ["https://app.example.com"]
    assert (ws.handshake_timeout, ws.username, ws.password, ws.auth_timeout) == (3.0, "u", "p", 4.0)
    assert warnings == []
    # As nats-server: an unknown key is an error (tests/test_config_unknown_keys.py).
    from natsbroker.config.load import ConfigError
    with pytest.raises(ConfigError, match=r'ws.conf:3:3: unknown field "bogus"$'):
        _load(tmp_path, 'ws {\n  no_tls: true\n  bogus: 1\n}\n')


@pytest.mark.parametrize("text,message", [
    ("websocket { port: 8080 }", "websocket requires TLS configuration"),
    ('websocket { port: 8080, no_tls: true, allowed_origins: ["%zz"] }',
     'unable to parse allowed origin: parse "%zz": invalid URI for request'),
    ('websocket { port: 8080, no_tls: true, no_auth_user: bob }',
     'no_auth_user: "bob" present, but users/nkeys are not defined'),
    ('authorization { users: [{user: bob, password: x}] }\n'
     'websocket { port: 8080, no_tls: true, authorization { token: t } }',
     "websocket authentication token not compatible with presence of users/nkeys"),
    ('websocket { port: 8080, no_tls: true, jwt_cookie: jwt }',
     'trusted operators or trusted keys configuration is required for JWT authentication via cookie "jwt"'),
])
def test_config_refused_as_nats_server(tmp_path, text, message):
    from natsbroker.config.load import ConfigError
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text)
    assert str(e.value) == message


def test_config_bad_value(tmp_path):
    from natsbroker.config.load import ConfigError
    with pytest.raises(ConfigError, match=r'ws.conf:1:13: invalid value for "port"'):
        _load(tmp_path, 'websocket { port: "abc", no_tls: true }')
