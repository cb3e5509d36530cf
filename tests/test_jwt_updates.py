"""Account JWT updates at run time (issue 14 item 5): what a new account
JWT does to the account's connected clients (revoked users, a removed
signing key, lower limits, an ``exp`` that comes, a deleted account) and
to imports (an importer's JWT gaining or losing an import, an exporter
loaded after its importer, an exporter revoking an activation).

Differential: both servers run the full resolver with the same operator
and account JWTs; updates go through ``$SYS.REQ.CLAIMS.UPDATE`` and
``$SYS.REQ.CLAIMS.DELETE`` from a system account user; raw connections
show what a client sees (the -ERR, whether it is closed).
"""

import asyncio
import json
import re
import time

import nats
import pytest

from natsbroker.auth.jwt import claims as C
from tests.support.clients import flushed
from tests.support.raw import Conversation
from tests.support.servers import ServerProcess
from tests.test_jwt import KINDS, connect_line, creds, sign
from tests.test_jwt_imports import activation

P = C.public_key_of


class Keys:
    def __init__(self):
        self.op = C.new_keypair("O")
        self.sys = C.new_keypair("A")
        self.a = C.new_keypair("A")
        self.sk = C.new_keypair("A")  # a's signing key
        self.e = C.new_keypair("A")  # an exporter
        self.operator_jwt = C.encode(C.OPERATOR, P(self.op), self.op, name="OP",
                                     nats={"system_account": P(self.sys)})
        self.sys_jwt = self.account(self.sys, "SYS")
        self.a_jwt = self.account(self.a, "A", signing_keys=[P(self.sk)])

    def account(self, kp, name, exports=None, imports=None, expires=0, **extra):
        nats_claims = C.account_nats(**extra)
        if exports:
            nats_claims["exports"] = exports
        if imports:
            nats_claims["imports"] = imports
        return C.encode(C.ACCOUNT, P(kp), self.op, name=name, nats=nats_claims, expires=expires)

    def user(self, account, signer=None, **nats_claims):
        u = C.new_keypair("U")
        if signer is not None:
            nats_claims["issuer_account"] = P(account)
        token = C.encode(C.USER, P(u), signer or account, nats=C.user_nats(**nats_claims))
        return token, C.seed_of(u)


@pytest.fixture(scope="module")
def keys():
    return Keys()


def _start(kind, keys, d, preload=()):
    jwts = d / "jwts"
    jwts.mkdir()
    for kp, token in [(keys.sys, keys.sys_jwt)] + list(preload):
        (jwts / ("%s.jwt" % P(kp))).write_text(token)
    (d / "op.jwt").write_text(keys.operator_jwt)
    conf = d / "server.conf"
    conf.write_text("operator: %s\nsystem_account: %s\nresolver { type: full, dir: %s, "
                    "allow_delete: true }\n" % (d / "op.jwt", P(keys.sys), jwts))
    return ServerProcess(kind, ["-c", str(conf), "-D"]).start()


def both(keys, tmp_path_factory, scenario, preload=()):
    """Run ``scenario(server, dir)`` (a coroutine) on each server."""
    got = {}
    for kind in KINDS:
        d = tmp_path_factory.mktemp("jwt-upd-" + kind)
        s = _start(kind, keys, d, preload)
        try:
            got[kind] = asyncio.run(scenario(s, d))
        finally:
            s.stop()
    return got


class Raw:
    """A raw client logged in with a user JWT."""

    def __init__(self, s, token, seed, then=b""):
        self.c = Conversation(s.port, timeout=5)
        nonce = json.loads(self.c.info[5:])["nonce"]
        self.c.send(connect_line(token, sign(seed, nonce)) + then)
        self.login = _clean(self.c.read_until(b"PONG\r\n"))

    def read(self, marker=None, quiet=3.0, limit=8):
        out = _clean(self.c.read_until(marker, quiet=quiet, limit=limit))
        return out, self.c.closed

    def send(self, data):
        self.c.send(data)

    def close(self):
        self.c.close()


def _clean(out):
    # INFO lines (ids) and keepalive PINGs are no part of the comparison.
    out = re.sub(rb"INFO \{[^\r]*\r\n", b"", out)
    return out.replace(b"PING\r\n", b"")


async def _sys(s, d, keys):
    path = creds(d, *keys.user(keys.sys), name="sys.creds")
    return await nats.connect(s.url, user_credentials=path, allow_reconnect=False)


async def _update(sc, token):
    r = await sc.request("$SYS.REQ.CLAIMS.UPDATE", token.encode(), timeout=5)
    body = json.loads(r.data)
    return body.get("data", body.get("error"))


def test_limits_revocations_and_signing_keys_apply_to_connected_clients(keys, tmp_path_factory):
    async def run(s, d):
        out = {}
        sc = await _sys(s, d, keys)
        revoked_token, revoked_seed = keys.user(keys.a)
        revoked = Raw(s, revoked_token, revoked_seed)
        older = Raw(s, *keys.user(keys.a), then=b"SUB x 1\r\nSUB y 2\r\nSUB z 3\r\nPING\r\n")
        newer = Raw(s, *keys.user(keys.a), then=b"SUB x 1\r\nPING\r\n")
        signed = Raw(s, *keys.user(keys.a, signer=keys.sk))
        newest = Raw(s, *keys.user(keys.a))
        clients = (("revoked", revoked), ("older", older), ("signed", signed), ("newest", newest))
        out["logins"] = [r.login for _, r in clients]
        # Four connections at most (the newest goes), two subscriptions,
        # 8-byte payloads, no signing key, one user revoked.
        token = keys.account(keys.a, "A", conn=4, subs=2, payload=8, revocations={
            C.decode_user(revoked_token).subject: int(time.time()) + 100})
        out["update"] = await _update(sc, token)
        for name, r in clients:
            out[name] = r.read()
        newer.send(b"PUB x 9\r\n123456789\r\nPING\r\n")
        out["newer"] = newer.read(b"PONG\r\n")
        for _, r in clients:
            r.close()
        newer.close()
        await sc.close()
        return out

    got = both(keys, tmp_path_factory, run, preload=[(keys.a, keys.a_jwt)])
    assert got["natsbroker"] == got["nats-server"]
    g = got["natsbroker"]
    assert g["update"]["message"] == "jwt updated"
    assert g["revoked"] == (b"-ERR 'User Authentication Revoked'\r\n", True)
    assert g["newest"] == (b"-ERR 'maximum account active connections exceeded'\r\n", True)
    assert g["older"] == (b"-ERR 'maximum subscriptions exceeded'\r\n", True)
    assert g["signed"][1] is True
    assert g["newer"] == (b"-ERR 'Maximum Payload Violation'\r\n", True)


def test_expired_and_deleted_accounts_disconnect_their_clients(keys, tmp_path_factory):
    async def run(s, d):
        out = {}
        sc = await _sys(s, d, keys)
        r = Raw(s, *keys.user(keys.a))
        out["update"] = await _update(sc, keys.account(keys.a, "A", expires=int(time.time()) + 3))
        out["expired"] = r.read(quiet=6, limit=10)
        r.close()
        late = Raw(s, *keys.user(keys.a))
        out["late login"] = (late.login, late.c.closed)
        late.close()
        # Back, then deleted.
        out["back"] = await _update(sc, keys.a_jwt)
        r = Raw(s, *keys.user(keys.a))
        out["login again"] = r.login
        req = C.encode("generic", P(keys.op), keys.op, nats={"accounts": [P(keys.a)]})
        m = await sc.request("$SYS.REQ.CLAIMS.DELETE", req.encode(), timeout=5)
        out["delete"] = json.loads(m.data).get("data")
        out["deleted"] = r.read(quiet=3)
        r.close()
        await sc.close()
        return out

    got = both(keys, tmp_path_factory, run, preload=[(keys.a, keys.a_jwt)])
    assert got["natsbroker"] == got["nats-server"]
    g = got["natsbroker"]
    assert g["expired"] == (b"-ERR 'Account Authentication Expired'\r\n", True)


def test_imports_follow_account_jwt_updates(keys, tmp_path_factory):
    e_jwt = keys.account(keys.e, "E", exports=[
        {"subject": "help", "type": "service"},
        {"subject": "priv", "type": "service", "token_req": True}])
    token = activation(keys.e, keys.a, "priv", "service")
    imports = [{"subject": "help", "account": P(keys.e), "type": "service"},
               {"subject": "priv", "account": P(keys.e), "type": "service", "token": token}]
    a_importing = keys.account(keys.a, "A", imports=imports)
    revoking = keys.account(keys.e, "E", exports=[
        {"subject": "help", "type": "service"},
        {"subject": "priv", "type": "service", "token_req": True,
         "revocations": {P(keys.a): int(time.time()) + 100}}])

    async def ask(nc, subject):
        try:
            return (await nc.request(subject, b"q", timeout=2)).data.decode()
        except nats.errors.NoRespondersError:
            return "no responders"
        except nats.errors.TimeoutError:
            return "timeout"

    async def run(s, d):
        out = {}
        sc = await _sys(s, d, keys)
        ac = await nats.connect(s.url, user_credentials=creds(d, *keys.user(keys.a), name="a.creds"),
                                allow_reconnect=False)
        out["before"] = await ask(ac, "help")
        # A imports from E, which no server has yet.
        out["a update"] = await _update(sc, a_importing)
        out["no exporter"] = await ask(ac, "help")
        out["e stored"] = await _update(sc, e_jwt)
        ec = await nats.connect(s.url, user_credentials=creds(d, *keys.user(keys.e), name="e.creds"),
                                allow_reconnect=False)
        for subject in ("help", "priv"):
            async def on(msg, subject=subject):
                await msg.respond(b"E " + subject.encode())
            await ec.subscribe(subject, cb=on)
        await flushed(ec)
        # nats-server wires the import from another goroutine once the exporter
        # is loaded: under load its first request can still find no responders.
        first, deadline = await ask(ac, "help"), time.time() + 10
        while first == "no responders" and time.time() < deadline:
            await asyncio.sleep(0.1)
            first = await ask(ac, "help")
        out["exporter loaded"] = [first, await ask(ac, "priv")]
        out["e revokes"] = await _update(sc, revoking)
        out["revoked"] = [await ask(ac, "help"), await ask(ac, "priv")]
        out["a drops imports"] = await _update(sc, keys.a_jwt)
        out["dropped"] = await ask(ac, "help")
        for nc in (ac, ec, sc):
            await nc.close()
        return out

    got = both(keys, tmp_path_factory, run, preload=[(keys.a, keys.a_jwt)])
    assert got["natsbroker"] == got["nats-server"]
    g = got["natsbroker"]
    assert g["exporter loaded"] == ["E help", "E priv"]
    assert g["dropped"] == "no responders"
