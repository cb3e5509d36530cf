"""Old-format (v1) JWTs mean what jwt v2 migrates them to (issue 29,
conformance 1).

A v1 user JWT (what nsc wrote before NATS 2.2: a top-level ``type``, no
``nats.version``, and, from ``jwt.NewUserClaims``, no limits at all:
``"nats": {"pub": {}, "sub": {}}``) is unlimited to nats-server: jwt v2's
loadUser presets a v1 user's subs, data and payload to -1 before reading
it. natsbroker read the absent limits as v2's zero and refused the first
SUB with ``maximum subscriptions exceeded``. The migration also keeps only
the claims v1 had (``issuer_account`` and ``tags`` from the top level;
anything else under ``nats`` is ignored) and reads a v1 activation's
``nats.type`` as the import's kind; a v1 account's absent limits stay 0
(jwt v2 presets nothing there).

Differential: both servers run the same MEMORY-resolver config
(``resolver_preload``); raw CONNECTs for the cases, and nats-py with every
way it takes credentials (a .creds file, JWT and seed files, credential
strings, callbacks), reconnecting to a server restarted on its port.
"""

import asyncio
import base64
import re

import nats
import nkeys
import pytest
from nats.aio.client import RawCredentials

from natsbroker.auth.jwt import claims as C
from tests.support.clients import flushed
from tests.support.servers import ServerProcess, both_started
from tests.test_jwt import KINDS, creds, login

P = C.public_key_of
OLD_USER = {"pub": {}, "sub": {}}  # jwt v1's NewUserClaims, encoded


class Keys:
    def __init__(self):
        self.op = C.new_keypair("O")
        self.sys = C.new_keypair("A")
        self.a = C.new_keypair("A")  # a v2 account, as nsc makes them now
        self.sk = C.new_keypair("A")  # a's signing key
        self.v1 = C.new_keypair("A")  # a v1 account with v1 limits
        self.v1_bare = C.new_keypair("A")  # a v1 account with no limits at all
        self.e = C.new_keypair("A")  # an exporter, signing v1 activations
        self.operator_jwt = C.encode(C.OPERATOR, P(self.op), self.op, name="OP",
                                     nats={"system_account": P(self.sys)})
        self.sys_jwt = C.encode(C.ACCOUNT, P(self.sys), self.op, name="SYS", nats=C.account_nats())
        self.a_jwt = C.encode(C.ACCOUNT, P(self.a), self.op, name="A",
                              nats=C.account_nats(signing_keys=[P(self.sk)]))
        v1_limits = {"subs": -1, "conn": -1, "leaf": -1, "imports": -1, "exports": -1,
                     "data": -1, "payload": -1, "wildcards": True}
        self.v1_jwt = C.encode_v1(C.ACCOUNT, P(self.v1), self.op, name="V1", nats={
            "limits": dict(v1_limits, subs=3), "signing_keys": [P(self.sk)]})
        self.v1_bare_jwt = C.encode_v1(C.ACCOUNT, P(self.v1_bare), self.op, name="V1BARE", nats={})

    def old_user(self, account, signer=None, nats_claims=None, **top):
        """``(jwt, seed)``: a v1 user JWT of ``account``."""
        u = C.new_keypair("U")
        token = C.encode_v1(C.USER, P(u), signer or account,
                            nats=OLD_USER if nats_claims is None else nats_claims, **top)
        return token, C.seed_of(u)

    def accounts(self):
        return ((self.sys, self.sys_jwt), (self.a, self.a_jwt), (self.v1, self.v1_jwt),
                (self.v1_bare, self.v1_bare_jwt))

    def config(self, d, extra=""):
        (d / "op.jwt").write_text(self.operator_jwt)
        text = ("operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload {\n"
                % (d / "op.jwt", P(self.sys)))
        for kp, token in self.accounts():
            text += "  %s: %s\n" % (P(kp), token)
        path = d / "server.conf"
        path.write_text(text + "}\n" + extra)
        return str(path)


@pytest.fixture(scope="module")
def keys():
    return Keys()


@pytest.fixture(scope="module")
def conf(keys, tmp_path_factory):
    return keys.config(tmp_path_factory.mktemp("jwt-v1"))


@pytest.fixture(scope="module")
def servers(conf):
    with both_started(["-c", conf, "-D"]) as started:
        yield started


def _shape(out):
    return re.sub(rb"INFO \{[^\r]*\}\s*\r\n", b"", out)


# -- the codec -------------------------------------------------------------------------------


def test_a_v1_user_without_limits_is_unlimited(keys):
    claims = C.decode_user(keys.old_user(keys.a)[0])
    assert claims.version == 1
    assert {k: claims.nats[k] for k in ("subs", "data", "payload")} == {
        "subs": -1, "data": -1, "payload": -1}
    # (A v2 user that says nothing of them has Go's zero values.)
    v2 = C.decode_user(C.encode(C.USER, P(C.new_keypair("U")), keys.a, nats=OLD_USER))
    assert "subs" not in v2.nats


def test_v1_migration_keeps_only_what_v1_had(keys):
    u = C.new_keypair("U")
    token = C.encode_v1(C.USER, P(u), keys.sk, tags=["t"], issuer_account=P(keys.a), nats=dict(
        OLD_USER, subs=2, allowed_connection_types=["WEBSOCKET"], issuer_account=P(keys.e)))
    claims = C.decode_user(token)
    assert claims.issuer_account == P(keys.a) and claims.tags == ["t"]
    assert claims.nats["subs"] == 2 and claims.nats["payload"] == -1
    assert "allowed_connection_types" not in claims.nats
    acc = C.decode_account(keys.v1_jwt)
    assert acc.limits()["subs"] == 3 and acc.signing_keys() == {P(keys.sk): None}
    assert C.decode_account(keys.v1_bare_jwt).limits() == {}
    act = C.decode_activation(C.encode_v1(C.ACTIVATION, P(keys.a), keys.e,
                                          nats={"subject": "private.a", "type": "stream"}))
    assert (act.import_type, act.import_subject) == ("stream", "private.a")
    with pytest.raises(C.JWTError, match="of type string"):
        C.decode_account(C.encode_v1(C.ACCOUNT, P(keys.v1), keys.op, nats={
            "signing_keys": [{"kind": "user_scope", "key": P(keys.sk)}]}))


# -- raw logins, differential ----------------------------------------------------------------

SUBS = b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\nSUB d 4\r\nPUB a 2\r\nhi\r\nPING\r\n"


def _cases(keys):
    k = keys
    u = C.new_keypair("U")
    v2_bare = C.encode(C.USER, P(u), k.a, nats=OLD_USER), C.seed_of(u)
    return {
        "v1 user, no limits": (k.old_user(k.a), SUBS),
        "v1 user, subs 2": (k.old_user(k.a, nats_claims=dict(OLD_USER, subs=2)), SUBS),
        "v1 user, payload 1": (k.old_user(k.a, nats_claims=dict(OLD_USER, payload=1)),
                               b"SUB a 1\r\nPUB a 2\r\nhi\r\nPING\r\n"),
        "v1 user, permissions": (k.old_user(k.a, nats_claims={"pub": {"allow": ["a"]},
                                                              "sub": {"deny": ["b"]}}),
                                 b"SUB a 1\r\nSUB b 2\r\nPUB a 2\r\nhi\r\nPUB c 1\r\nx\r\nPING\r\n"),
        "v1 user, signing key, issuer_account on top": (
            k.old_user(k.a, signer=k.sk, issuer_account=P(k.a)), SUBS),
        "v1 user, signing key, issuer_account under nats": (
            k.old_user(k.a, signer=k.sk, nats_claims=dict(OLD_USER, issuer_account=P(k.a))), SUBS),
        "v1 user, v1 account with limits": (k.old_user(k.v1), SUBS),
        "v1 user, v1 account without limits": (k.old_user(k.v1_bare), SUBS),
        "v2 user, no limits": (v2_bare, SUBS),
    }


def test_v1_logins_match_nats_server(servers, keys):
    cases = _cases(keys)
    got = {}
    for kind, s in servers.items():
        got[kind] = {}
        for name, ((token, seed), then) in cases.items():
            v2 = name == "v2 user, no limits"
            _, out, closed = login(s.port, token, seed, then=then, quiet=1.5 if v2 else 0.5)
            out = _shape(out)
            if v2:
                # (No subscription at all: nats-server says so from a
                # goroutine of its own, before or after the PONG, and on a
                # loaded machine some of its answers come late: the lines
                # said, not how often or in which order.)
                out = b"".join(sorted(set(out.splitlines(keepends=True))))
            got[kind][name] = (out, closed)
    assert got["natsbroker"] == got["nats-server"]
    g = got["natsbroker"]
    assert g["v1 user, no limits"] == (b"PONG\r\nMSG a 1 2\r\nhi\r\nPONG\r\n", False)
    assert b"maximum subscriptions exceeded" in g["v1 user, subs 2"][0]
    assert b"Maximum Payload Violation" in g["v1 user, payload 1"][0]
    assert g["v1 user, signing key, issuer_account on top"][1] is False
    assert g["v1 user, signing key, issuer_account under nats"] == (
        b"-ERR 'Authorization Violation'\r\n", True)


# -- nats-py, every way it takes credentials -------------------------------------------------


def _credential_ways(tmp, token, seed):
    """name: nats.connect keyword arguments."""
    (tmp / "user.jwt").write_text(token)
    (tmp / "user.nk").write_text(seed)
    kp = nkeys.from_seed(bytearray(seed.encode()))
    return {
        ".creds file": {"user_credentials": creds(tmp, token, seed)},
        "jwt and seed files": {"user_credentials": (str(tmp / "user.jwt"), str(tmp / "user.nk"))},
        "credential string": {"user_credentials": RawCredentials(C.format_user_config(token, seed))},
        "callbacks": {"user_jwt_cb": lambda: token.encode(),
                      "signature_cb": lambda nonce: base64.b64encode(kp.sign(nonce.encode()))},
    }


async def _round_trip(nc, subject):
    sub = await nc.subscribe(subject)
    more = [await nc.subscribe("%s.%d" % (subject, i)) for i in range(3)]
    await nc.publish(subject, b"hello")
    msg = await sub.next_msg(timeout=5)
    for s in [sub] + more:
        await s.unsubscribe()
    return msg.data


def test_nats_py_logs_in_with_a_v1_user_every_way(servers, keys, tmp_path):
    token, seed = keys.old_user(keys.a)
    ways = _credential_ways(tmp_path, token, seed)

    async def run(s):
        out = {}
        for name, kw in ways.items():
            errors = []

            async def on_error(e):
                errors.append(str(e))
            nc = await nats.connect(s.url, allow_reconnect=False, error_cb=on_error, **kw)
            try:
                out[name] = (await _round_trip(nc, "old.format"), errors)
            finally:
                await nc.close()
        return out

    for kind, s in servers.items():
        assert asyncio.run(run(s)) == {name: (b"hello", []) for name in ways}, kind


def test_nats_py_reconnects_with_a_v1_user(conf, keys, tmp_path):
    token, seed = keys.old_user(keys.a)
    ways = _credential_ways(tmp_path, token, seed)

    async def run(kind):
        s = ServerProcess(kind, ["-c", conf]).start()
        port = s.port
        clients, reconnected, errors = {}, asyncio.Event(), []
        count = {"n": 0}

        async def on_reconnect():
            count["n"] += 1
            if count["n"] == len(ways):
                reconnected.set()

        async def on_error(e):
            errors.append(str(e))
        try:
            for name, kw in ways.items():
                clients[name] = await nats.connect(
                    s.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1,
                    reconnected_cb=on_reconnect, error_cb=on_error, **kw)
            subs = {name: await nc.subscribe("again") for name, nc in clients.items()}
            for nc in clients.values():
                await flushed(nc)
            s.stop()
            s = ServerProcess(kind, ["-c", conf, "-p", str(port)]).start()
            await asyncio.wait_for(reconnected.wait(), 20)
            out = {}
            for name, nc in clients.items():
                await nc.flush()
                await nc.publish("again", name.encode())
                out[name] = (await subs[name].next_msg(timeout=5)).data
                out[name] += b"/" + await _round_trip(nc, "after." + name.replace(" ", "_").replace(".", ""))
            return out, [e for e in errors if "subscriptions" in e or "Authorization" in e]
        finally:
            for nc in clients.values():
                await nc.close()
            s.stop()

    for kind in KINDS:
        out, errors = asyncio.run(run(kind))
        assert errors == [], kind
        # (Every client hears every publish on "again": its own came first
        # or not, the subscription's first message is one of them.)
        assert set(out) == set(ways), kind
        assert all(v.endswith(b"/hello") for v in out.values()), (kind, out)


# -- absent claims of v2 account JWTs: Go's zero values -------------------------------------


def test_absent_account_limits_mean_go_s_zero(keys, tmp_path):
    """An account JWT whose limits leave out ``imports`` or ``exports`` may
    have none (jwt.Account.Validate: the zero value is a limit of 0, only -1
    is none), and one that limits exports checks ``wildcards``; nats-server
    refuses the accounts that break that ("account validation failed").
    natsbroker read an absent import/export limit as unlimited."""
    op = keys.op
    unlimited = C.account_nats()["limits"]
    export, wild = {"subject": "x", "type": "stream"}, {"subject": "x.*", "type": "stream"}
    imp = {"subject": "y", "type": "stream", "account": P(keys.sys)}
    cases = {
        "no export limit": {"limits": {k: v for k, v in unlimited.items() if k != "exports"},
                            "exports": [export]},
        "no limits, an export": {"exports": [export]},
        "no import limit": {"limits": {k: v for k, v in unlimited.items() if k != "imports"},
                            "imports": [imp]},
        "wildcard export, exports limited, no wildcards": {
            "limits": dict(unlimited, exports=5, wildcards=False), "exports": [wild]},
        "wildcard export, exports unlimited, no wildcards": {
            "limits": dict(unlimited, wildcards=False), "exports": [wild]},
        "all limits": {"limits": unlimited, "exports": [wild], "imports": [imp]},
    }
    accounts = {name: C.new_keypair("A") for name in cases}
    (tmp_path / "op.jwt").write_text(keys.operator_jwt)
    text = ("operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload {\n  %s: %s\n"
            % (tmp_path / "op.jwt", P(keys.sys), P(keys.sys), keys.sys_jwt))
    for name, nats_claims in cases.items():
        kp = accounts[name]
        text += "  %s: %s\n" % (P(kp), C.encode(C.ACCOUNT, P(kp), op, name="X", nats=nats_claims))
    (tmp_path / "server.conf").write_text(text + "}\n")
    got = {}
    for kind in KINDS:
        s = ServerProcess(kind, ["-c", str(tmp_path / "server.conf")]).start()
        try:
            got[kind] = {}
            for name, kp in accounts.items():
                u = C.new_keypair("U")
                token = C.encode(C.USER, P(u), kp, nats=C.user_nats())
                _, out, closed = login(s.port, token, C.seed_of(u), quiet=0.3)
                got[kind][name] = (_shape(out), closed)
        finally:
            s.stop()
    assert got["natsbroker"] == got["nats-server"]
    refused = (b"-ERR 'Authorization Violation'\r\n", True)
    assert [n for n, v in got["natsbroker"].items() if v == refused] == [
        "no export limit", "no limits, an export", "no import limit",
        "wildcard export, exports limited, no wildcards"]
