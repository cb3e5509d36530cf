"""Exports and imports in account JWTs (issue 14 item 5): public and
token-required (activation token) service and stream exports, imports with
``to``/``local_subject``, invalid and expired activation tokens, revoked
activations, and imports wired again when an account JWT changes or an
exporting account is loaded after its importer.

Differential: nats-server and natsbroker run with the same operator config
and JWTs; nats-py clients log in with .creds files and do cross-account
request/reply and stream deliveries on both.
"""

import asyncio
import json
import time

import nats
import pytest

from natsbroker.auth.jwt import claims as C
from tests.support.clients import flushed
from tests.support.servers import both_started
from tests.support.wait import eventually
from tests.test_jwt import creds

P = C.public_key_of
NOW = int(time.time())


def activation(exporter, importer, subject, kind, expires=0, signer=None, issued_at=None):
    """An activation token: ``exporter`` lets ``importer`` import ``subject``."""
    signer = signer or exporter
    nats_claims = {"subject": subject, "kind": kind}
    if signer is not exporter:
        nats_claims["issuer_account"] = P(exporter)
    return C.encode(C.ACTIVATION, P(importer), signer, nats=nats_claims, expires=expires,
                    issued_at=issued_at)


class Keys:
    """An operator, its system account, an exporter E and importers I, J."""

    def __init__(self):
        self.op = C.new_keypair("O")
        self.sys = C.new_keypair("A")
        self.e = C.new_keypair("A")
        self.i = C.new_keypair("A")
        self.j = C.new_keypair("A")
        self.operator_jwt = C.encode(C.OPERATOR, P(self.op), self.op, name="OP",
                                     nats={"system_account": P(self.sys)})
        self.sys_jwt = self.account(self.sys, "SYS")
        self.e_jwt = self.account(self.e, "E", exports=[
            {"name": "help", "subject": "help", "type": "service"},
            {"name": "priv", "subject": "priv.help", "type": "service", "token_req": True},
            {"name": "chunks", "subject": "chunks", "type": "service", "response_type": "Stream"},
            {"name": "news", "subject": "news.>", "type": "stream"},
            {"name": "secret", "subject": "secret.>", "type": "stream", "token_req": True},
            {"name": "per", "subject": "per.*.data", "type": "stream", "account_token_position": 2},
        ])
        ok = activation(self.e, self.i, "priv.help", "service")
        sok = activation(self.e, self.i, "secret.>", "stream")
        self.i_jwt = self.account(self.i, "I", imports=[
            {"name": "help", "subject": "help", "account": P(self.e), "type": "service"},
            {"name": "ask", "subject": "help", "account": P(self.e), "type": "service",
             "local_subject": "ask.e"},
            {"name": "priv", "subject": "priv.help", "account": P(self.e), "type": "service",
             "token": ok},
            {"name": "chunks", "subject": "chunks", "account": P(self.e), "type": "service"},
            {"name": "news", "subject": "news.>", "account": P(self.e), "type": "stream",
             "to": "e"},
            {"name": "secret", "subject": "secret.>", "account": P(self.e), "type": "stream",
             "token": sok, "local_subject": "hidden.>"},
            {"name": "per", "subject": "per.%s.data" % P(self.i), "account": P(self.e),
             "type": "stream"},
        ])
        # J: an expired activation, one for another account's subject, none
        # at all, and the account token position of someone else.
        expired = activation(self.e, self.j, "priv.help", "service", expires=NOW - 10)
        self.j_jwt = self.account(self.j, "J", imports=[
            {"name": "priv", "subject": "priv.help", "account": P(self.e), "type": "service",
             "token": expired},
            {"name": "secret", "subject": "secret.>", "account": P(self.e), "type": "stream"},
            {"name": "per", "subject": "per.%s.data" % P(self.i), "account": P(self.e),
             "type": "stream"},
            {"name": "help", "subject": "help", "account": P(self.e), "type": "service"},
        ])

    def account(self, kp, name, signer=None, exports=None, imports=None, **extra):
        nats_claims = C.account_nats(**extra)
        if exports:
            nats_claims["exports"] = exports
        if imports:
            nats_claims["imports"] = imports
        return C.encode(C.ACCOUNT, P(kp), signer or self.op, name=name, nats=nats_claims)

    def user(self, account, **nats_claims):
        u = C.new_keypair("U")
        token = C.encode(C.USER, P(u), account, nats=C.user_nats(**nats_claims))
        return token, C.seed_of(u)

    def preload(self, pairs):
        return "".join("  %s: %s\n" % (P(kp), token) for kp, token in pairs)


@pytest.fixture(scope="module")
def keys():
    return Keys()


@pytest.fixture(scope="module")
def servers(keys, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jwt-imports")
    (tmp / "op.jwt").write_text(keys.operator_jwt)
    conf = tmp / "server.conf"
    conf.write_text("operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload {\n%s}\n"
                    % (tmp / "op.jwt", P(keys.sys), keys.preload(
                        [(keys.sys, keys.sys_jwt), (keys.e, keys.e_jwt), (keys.i, keys.i_jwt),
                         (keys.j, keys.j_jwt)])))
    with both_started(["-c", str(conf), "-D"]) as started:
        yield started


async def _connect(s, path):
    return await nats.connect(s.url, user_credentials=path, allow_reconnect=False,
                              max_reconnect_attempts=0)


async def _request(nc, subject, data=b"q", timeout=2):
    try:
        m = await nc.request(subject, data, timeout=timeout)
        return m.data.decode()
    except nats.errors.NoRespondersError:
        return "no responders"
    except nats.errors.TimeoutError:
        return "timeout"


async def _responder(nc, subject, answer, count=1):
    async def on(msg):
        info = msg.header.get("Nats-Request-Info") if msg.header else None
        acc = json.loads(info)["acc"] if info else "-"
        for n in range(count):
            await msg.respond(("%s %s %s" % (answer, msg.subject, acc[:1])).encode()
                              if n < count - 1 or count == 1 else b"")
    return await nc.subscribe(subject, cb=on)


def test_service_and_stream_imports_from_account_jwts(servers, keys, tmp_path):
    e_path = creds(tmp_path, *keys.user(keys.e), name="e.creds")
    i_path = creds(tmp_path, *keys.user(keys.i), name="i.creds")
    j_path = creds(tmp_path, *keys.user(keys.j), name="j.creds")

    async def run(s):
        out = {}
        ec = await _connect(s, e_path)
        for subject in ("help", "priv.help"):
            await _responder(ec, subject, "E")
        await _responder(ec, "chunks", "C", count=3)
        ic = await _connect(s, i_path)
        jc = await _connect(s, j_path)
        await ec.flush()
        for name, nc in (("I", ic), ("J", jc)):
            for subject in ("help", "ask.e", "priv.help", "nope"):
                out["%s request %s" % (name, subject)] = await _request(nc, subject)
        # A streamed response: every message until the empty one.
        inbox = ic.new_inbox()
        sub = await ic.subscribe(inbox)
        await ic.publish("chunks", b"q", reply=inbox)
        got = []
        for _ in range(3):
            try:
                m = await sub.next_msg(timeout=2)
            except nats.errors.TimeoutError:
                break
            got.append(m.data.decode())
        out["chunks"] = got
        # Streams.
        subs = {}
        for name, nc in (("I", ic), ("J", jc)):
            for subject in ("e.news.>", "news.>", "hidden.>", "secret.>", "per.*.data"):
                subs[name, subject] = await nc.subscribe(subject)
            await flushed(nc)
        for subject in ("news.a", "secret.b", "per.%s.data" % P(keys.i), "per.%s.data" % P(keys.j)):
            await ec.publish(subject, subject.encode())
        await flushed(ec)
        for (name, subject), sub in subs.items():
            got = []
            while True:
                try:
                    m = await sub.next_msg(timeout=0.5)
                except nats.errors.TimeoutError:
                    break
                got.append(m.subject)
            out["%s sub %s" % (name, subject)] = sorted(got)
        for nc in (ec, ic, jc):
            await nc.close()
        return out

    got = {kind: asyncio.run(run(s)) for kind, s in servers.items()}
    assert got["natsbroker"] == got["nats-server"]
    g = got["natsbroker"]
    assert g["I request help"] == "E help " + P(keys.i)[:1]
    assert g["I request ask.e"] == "E help " + P(keys.i)[:1]
    assert g["I request priv.help"].startswith("E priv.help")
    assert g["J request priv.help"] == "no responders"
    assert g["J request help"].startswith("E help")
    assert g["I sub e.news.>"] == ["e.news.a"]
    assert g["I sub hidden.>"] == ["hidden.b"]
    assert g["I sub per.*.data"] == ["per.%s.data" % P(keys.i)]
    assert g["J sub secret.>"] == [] and g["J sub per.*.data"] == []


def test_bad_activation_tokens_in_nats_server_s_words(servers, keys, tmp_path):
    """The import with an expired token is left out with nats-server's
    debug line; J's other imports still work."""
    # J's account is loaded (and its imports wired) at its first login: this
    # test logs in itself, as make test's workers may run it alone.
    j_path = creds(tmp_path, *keys.user(keys.j), name="j.creds")

    async def login(s):
        nc = await _connect(s, j_path)
        await nc.close()

    def lines(kind):
        text = servers[kind].log()
        return sorted(set(line.split("[DBG] ", 1)[-1] for line in text.splitlines()
                          if "Error adding" in line and P(keys.j) in line))

    for s in servers.values():
        asyncio.run(login(s))
    def both_kinds(kind):
        found = lines(kind)
        # (a server logs the service and the stream import's error together)
        return found if {"service import", "stream import"} <= {
            w for w in ("service import", "stream import") if any(w in x for x in found)} else None

    logs = {kind: eventually(lambda k=kind: both_kinds(k), what="%s's import errors" % kind)
            for kind in servers}
    assert logs["natsbroker"] == logs["nats-server"]
    assert any("service import not authorized" in line for line in logs["natsbroker"])
    assert any("stream import not authorized" in line for line in logs["natsbroker"])
