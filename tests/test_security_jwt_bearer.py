"""``disallow_bearer`` holds whatever signs the user JWT (issue 29, S2).

An account whose JWT sets ``limits.disallow_bearer`` forbids user JWTs that
log in without signing the INFO nonce. A scoped signing key's template may
say ``"bearer_token": true`` (its users' JWTs carry no permissions or
limits of their own): natsbroker read the bearer flag of the user JWT for
the account's check but the template's for skipping the signature, so a
user JWT of that key logged in with no signature at all, and a leaked JWT
was enough. nats-server checks the template's flag (``juc`` after
processUserPermissionsTemplate) and refuses: "Account does not allow
bearer tokens".

Differential: both servers run the same MEMORY-resolver operator config
with -D; each login is a raw CONNECT, with and without a nonce signature,
for the account's own key, a plain signing key and scoped keys with and
without a bearer template, in an account that forbids bearer tokens and
one that does not. Same reply, same close, same debug reason. A scoped
key's template's ``allowed_connection_types`` had the same flaw (only the
user JWT's own, always empty, were checked) and is covered here too.
"""

import re
import time

import pytest

from natsbroker.auth.jwt import claims as C
from tests.support.servers import both_started
from tests.test_jwt import login
from tests.test_jwt_updates import Raw, _sys, _update, both

P = C.public_key_of

_REASON = re.compile(r"\[(?:DBG|ERR)\] 127\.0\.0\.1:\d+ - cid:\d+ - ((?!Client connection|authentication "
                     r"error|\"|Authenticated JWT|Slow)[^\n]*)")


def _scope(kp, bearer, types=None):
    template = {"pub": {"allow": [">"]}, "sub": {"allow": [">"]}, "subs": -1, "data": -1,
                "payload": -1}
    if bearer:
        template["bearer_token"] = True
    if types:
        template["allowed_connection_types"] = types
    return {"kind": "user_scope", "key": P(kp), "role": "r", "template": template}


class Keys:
    """NB forbids bearer tokens: its own key, a plain signing key ``sk``,
    a scoped key whose template grants bearer (``scoped_bearer``) and one
    whose template does not (``scoped_plain``). OK allows them, with the
    same kind of bearer scope (``ok_bearer``)."""

    def __init__(self):
        self.op = C.new_keypair("O")
        self.sys = C.new_keypair("A")
        self.nb = C.new_keypair("A")
        self.ok = C.new_keypair("A")
        self.sk = C.new_keypair("A")
        self.scoped_bearer = C.new_keypair("A")
        self.scoped_plain = C.new_keypair("A")
        self.ok_bearer = C.new_keypair("A")
        self.ws_only = C.new_keypair("A")  # OK's scoped key for WEBSOCKET only
        self.tcp_only = C.new_keypair("A")  # and one for STANDARD only
        self.operator_jwt = C.encode(C.OPERATOR, P(self.op), self.op, name="OP",
                                     nats={"system_account": P(self.sys)})
        self.sys_jwt = self.account(self.sys, "SYS")
        self.nb_jwt = self.nb_account()
        self.ok_jwt = self.account(self.ok, "OK", signing_keys=[
            _scope(self.ok_bearer, True), _scope(self.ws_only, False, ["WEBSOCKET"]),
            _scope(self.tcp_only, False, ["STANDARD"])])

    def account(self, kp, name, **extra):
        return C.encode(C.ACCOUNT, P(kp), self.op, name=name, nats=C.account_nats(**extra))

    def nb_account(self, disallow=True):
        return self.account(self.nb, "NB", limits={"disallow_bearer": disallow}, signing_keys=[
            P(self.sk), _scope(self.scoped_bearer, True), _scope(self.scoped_plain, False)])

    def user(self, account, signer=None, scoped=False, **nats_claims):
        """``(jwt, seed)``: a user of ``account`` signed by ``signer`` (a
        scoped key's users carry none of the limits a plain user JWT has)."""
        u = C.new_keypair("U")
        if signer is not None:
            nats_claims["issuer_account"] = P(account)
        claims = dict(nats_claims) if scoped else C.user_nats(**nats_claims)
        token = C.encode(C.USER, P(u), signer or account, nats=claims)
        return token, C.seed_of(u)

    def memory_config(self, d):
        (d / "op.jwt").write_text(self.operator_jwt)
        text = ("operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload {\n"
                % (d / "op.jwt", P(self.sys)))
        for kp, token in ((self.sys, self.sys_jwt), (self.nb, self.nb_jwt), (self.ok, self.ok_jwt)):
            text += "  %s: %s\n" % (P(kp), token)
        path = d / "server.conf"
        path.write_text(text + "}\n")
        return str(path)


@pytest.fixture(scope="module")
def keys():
    return Keys()


@pytest.fixture(scope="module")
def servers(keys, tmp_path_factory):
    conf = keys.memory_config(tmp_path_factory.mktemp("bearer"))
    with both_started(["-c", conf, "-D"]) as started:
        yield started


def _cases(keys):
    """name: ``(jwt, seed or None: no signature sent)``."""
    k = keys

    def unsigned(pair):
        return pair[0], None

    return {
        "scoped bearer template, no signature": unsigned(k.user(k.nb, k.scoped_bearer, scoped=True)),
        "scoped bearer template, signed": k.user(k.nb, k.scoped_bearer, scoped=True),
        "plain signing key, bearer JWT": unsigned(k.user(k.nb, k.sk, bearer_token=True)),
        "plain signing key, bearer JWT, signed": k.user(k.nb, k.sk, bearer_token=True),
        "account key, bearer JWT": unsigned(k.user(k.nb, bearer_token=True)),
        "scoped plain template, bearer JWT": unsigned(
            k.user(k.nb, k.scoped_plain, scoped=True, bearer_token=True)),
        "scoped plain template, no signature": unsigned(k.user(k.nb, k.scoped_plain, scoped=True)),
        "scoped plain template, signed": k.user(k.nb, k.scoped_plain, scoped=True),
        "bearer allowed, scoped bearer template": unsigned(k.user(k.ok, k.ok_bearer, scoped=True)),
        "bearer allowed, scoped bearer template, bearer JWT": unsigned(
            k.user(k.ok, k.ok_bearer, scoped=True, bearer_token=True)),
        # The template's connection types hold as its bearer flag does.
        "scoped websocket-only template over TCP": k.user(k.ok, k.ws_only, scoped=True),
        "scoped standard-only template over TCP": k.user(k.ok, k.tcp_only, scoped=True),
    }


def _reasons(s, start, want):
    """The debug reasons logged after ``start``, once ``want`` refusals
    are in (polled: the log is written after the reply)."""
    deadline = time.monotonic() + 5
    while True:
        text = s.log()[start:]
        if text.count("authentication error") >= want or time.monotonic() > deadline:
            return [r for r in _REASON.findall(text) if not r.startswith("Account [")]
        time.sleep(0.05)


def test_bearer_logins_match_nats_server(servers, keys):
    cases = _cases(keys)
    got = {}
    reasons = {}
    for kind, s in servers.items():
        start = len(s.log())
        got[kind] = {}
        for name, (token, seed) in cases.items():
            _, out, closed = login(s.port, token, seed, quiet=0.3)
            got[kind][name] = (out.split(b"\r\n")[0], closed)
        refused = sum(1 for _, closed in got[kind].values() if closed)
        reasons[kind] = _reasons(s, start, refused)
    assert got["natsbroker"] == got["nats-server"]
    assert reasons["natsbroker"] == reasons["nats-server"]
    g = got["natsbroker"]
    refused = (b"-ERR 'Authorization Violation'", True)
    for name in ("scoped bearer template, no signature", "scoped bearer template, signed",
                 "plain signing key, bearer JWT", "plain signing key, bearer JWT, signed",
                 "account key, bearer JWT", "scoped plain template, bearer JWT",
                 "scoped plain template, no signature", "scoped websocket-only template over TCP"):
        assert g[name] == refused, name
    for name in ("scoped plain template, signed", "bearer allowed, scoped bearer template",
                 "scoped standard-only template over TCP"):
        assert g[name] == (b"PONG", False), name
    assert reasons["natsbroker"].count("Account does not allow bearer tokens") == 5
    assert "Signature missing" in reasons["natsbroker"]
    assert "Connection type not allowed" in reasons["natsbroker"]
    assert ("User JWT is not valid: scoped users require no permissions or limits set"
            in reasons["natsbroker"])


def test_account_update_disallowing_bearer_drops_scoped_bearer_users(keys, tmp_path_factory):
    """An account JWT update that turns ``disallow_bearer`` on drops the
    users that logged in as bearers. nats-server re-reads only the user
    JWT's own flag there (so keeps a scoped key's bearer user, a hole);
    natsbroker goes by how the user logged in and drops both."""

    async def run(s, d):
        sc = await _sys(s, d, keys)
        await _update(sc, keys.nb_account(disallow=False))
        own = Raw(s, *keys.user(keys.nb, keys.sk, bearer_token=True))
        scoped = Raw(s, *keys.user(keys.nb, keys.scoped_bearer, scoped=True))
        signed = Raw(s, *keys.user(keys.nb, keys.scoped_plain, scoped=True))
        logins = [own.login, scoped.login, signed.login]
        update = await _update(sc, keys.nb_account(disallow=True))
        out = {"logins": logins, "update": update["message"], "own": own.read(quiet=1.0),
               "scoped": scoped.read(quiet=1.0), "signed": signed.read(quiet=1.0)}
        for r in (own, scoped, signed):
            r.close()
        await sc.close()
        return out

    got = both(keys, tmp_path_factory, run, preload=[(keys.ok, keys.ok_jwt)])
    ns, nb = got["nats-server"], got["natsbroker"]
    violation = (b"-ERR 'Authorization Violation'\r\n", True)
    for g in (ns, nb):
        assert g["logins"] == [b"PONG\r\n"] * 3 and g["update"] == "jwt updated"
        assert g["own"] == violation and g["signed"] == (b"", False)
    assert ns["scoped"] == (b"", False)
    assert nb["scoped"] == violation
