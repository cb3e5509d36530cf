"""Auth callout decides account users too (issue 29, S10).

With ``authorization { auth_callout { } }`` nats-server sends every CONNECT
to the auth service except those of its ``auth_users``; a user defined in
an account's ``users`` (a name or an nkey) is no exception, however right its
password: only ``allowed_accounts``, when set, leaves the users of the
accounts it does not list to their own login (processClientOrLeafAuthentication's
deferred check: ``c.acc`` not ``$G`` and not in the list). natsbroker let
every user of an account of its own in without asking, so a user the
service refuses logged in.

Differential: both servers run the same config with the same service (the
one of tests/test_auth_callout.py: it refuses the user "refuse" and admits
anyone else to APP); raw CONNECTs, the reply, the close and how many
requests the service saw.
"""

import asyncio
import json

import nkeys
import pytest

from natsbroker.auth.jwt import claims as C
from tests.support.raw import Conversation
from tests.support.servers import ServerProcess
from tests.test_auth_callout import KINDS, Keys, connect, raw, scenario, shape
from tests.test_jwt import sign

P = C.public_key_of


@pytest.fixture(scope="module")
def keys():
    k = Keys()
    k.member = C.new_keypair("U")
    return k


def _config(keys, allowed=""):
    return """
accounts {
  AUTH { users: [ {user: auth, password: pwd} ] }
  APP {}
  TEAM {
    users: [ {user: refuse, password: pwd}, {user: member, password: pwd}, {nkey: %s} ]
  }
  OTHER { users: [ {user: refuse2, password: pwd} ] }
}
authorization {
  timeout: 2s
  auth_callout { issuer: %s, auth_users: [auth], account: AUTH %s }
}
""" % (P(keys.member), P(keys.issuer), allowed)


def _servers(keys, tmp, allowed=""):
    path = tmp / "server.conf"
    path.write_text(_config(keys, allowed))
    started = {}
    try:
        for kind in KINDS:
            started[kind] = ServerProcess(kind, ["-c", str(path), "-D"]).start()
    except Exception:
        for s in started.values():
            s.stop()
        raise
    return started


@pytest.fixture(scope="module")
def servers(keys, tmp_path_factory):
    started = _servers(keys, tmp_path_factory.mktemp("callout-users"))
    yield started
    for s in started.values():
        s.stop()


@pytest.fixture(scope="module")
def allowed_servers(keys, tmp_path_factory):
    started = _servers(keys, tmp_path_factory.mktemp("callout-users-allowed"),
                       ", allowed_accounts: [TEAM]")
    yield started
    for s in started.values():
        s.stop()


def nkey_login(seed):
    """A raw nkey login (the INFO nonce signed): ``(reply, closed)``."""
    async def client(port):
        def talk():
            c = Conversation(port)
            try:
                nonce = json.loads(c.info[5:])["nonce"]
                kp = nkeys.from_seed(bytearray(seed.encode()))
                o = {"verbose": False, "pedantic": False, "protocol": 1, "headers": True,
                     "nkey": kp.public_key.decode(), "sig": sign(seed, nonce)}
                c.send(b"CONNECT " + json.dumps(o).encode() + b"\r\nPING\r\n")
                return c.read_pongs(1, quiet=1.5, info=True), c.closed
            finally:
                c.close()
        return await asyncio.to_thread(talk)
    return client


def _run(servers, keys, client):
    """``{kind: (reply with INFO ids left out, closed, requests seen)}``."""
    out = {}
    for kind, s in servers.items():
        (reply, closed), reqs = scenario(s, keys, client)
        out[kind] = (shape(reply), closed, len(reqs))
    return out


REFUSED = (b"-ERR 'Authorization Violation'\r\n", True, 1)


def test_an_account_user_the_service_refuses_is_refused(servers, keys):
    got = _run(servers, keys, raw(connect("refuse", "pwd") + b"PING\r\n"))
    assert got["natsbroker"] == got["nats-server"] == REFUSED


def test_an_account_user_the_service_admits_goes_where_it_says(servers, keys):
    got = _run(servers, keys, raw(connect("member", "pwd") + b"PING\r\n"))
    assert got["natsbroker"] == got["nats-server"] == (b"PONG\r\nINFO <APP>\r\n", False, 1)


def test_an_account_nkey_user_is_asked_about(servers, keys):
    got = _run(servers, keys, nkey_login(C.seed_of(keys.member)))
    assert got["natsbroker"] == got["nats-server"] == (b"PONG\r\nINFO <APP>\r\n", False, 1)


def test_auth_users_are_not_asked_about(servers, keys):
    got = _run(servers, keys, raw(connect("auth", "pwd") + b"PING\r\n"))
    assert got["natsbroker"] == got["nats-server"] == (b"PONG\r\nINFO <AUTH>\r\n", False, 0)


@pytest.mark.parametrize("data, want", [
    # TEAM is listed: its users are the service's.
    (connect("refuse", "pwd"), REFUSED),
    # OTHER is not: its users log in as configured, the service unasked...
    (connect("refuse2", "pwd"), (b"PONG\r\nINFO <OTHER>\r\n", False, 0)),
    # ...unless their login fails (the client is then in $G: the service's,
    # which admits it to APP).
    (connect("refuse2", "wrong"), (b"PONG\r\nINFO <APP>\r\n", False, 1)),
], ids=["listed account", "account not listed", "account not listed, wrong password"])
def test_allowed_accounts_limit_which_accounts_users_are_asked_about(allowed_servers, keys, data, want):
    got = _run(allowed_servers, keys, raw(data + b"PING\r\n"))
    assert got["natsbroker"] == got["nats-server"] == want
