"""Authentication and permissions, byte for byte against nats-server."""

import os
import tempfile

import pytest

from tests.support.raw import exchange
from tests.support.servers import ServerProcess

HASH = "$2b$04$4ONxdxLb4ebY4cBSCyTpTOzdgBVQnMyBX2HEIBRvZOP2kc3ZUT8mG"  # "secret"

USERS_CONF = """
authorization {
  timeout: 0.5
  users = [
    {user: alice, password: "%s"}
    {user: bob, password: plain, permissions: {
        publish: {allow: ["orders.>", "_INBOX.>"], deny: ["orders.secret"]}
        subscribe: {allow: ["orders.*", "_INBOX.>"], deny: ["orders.hidden"]}
    }}
    {user: guest, password: guest, permissions: {publish: "public.>", subscribe: "public.>"}}
    {user: svc, password: svc, permissions: {publish: {deny: ">"}, subscribe: "req.>", allow_responses: true}}
  ]
}
no_auth_user: guest
""" % HASH


def _pair(args_or_conf):
    """Start nats-server and natsbroker with the same flags or config text."""
    servers = []
    args = args_or_conf
    if isinstance(args_or_conf, str):
        fd, path = tempfile.mkstemp(suffix=".conf")
        with os.fdopen(fd, "w") as f:
            f.write(args_or_conf)
        args = ["-c", path]
    for kind in ("nats-server", "natsbroker"):
        servers.append(ServerProcess(kind, args).start())
    return servers


@pytest.fixture(scope="module")
def userpass():
    servers = _pair(["--user", "u", "--pass", "p"])
    yield servers
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def token():
    servers = _pair(["--auth", "s3cr3t"])
    yield servers
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def users():
    servers = _pair(USERS_CONF)
    yield servers
    for s in servers:
        s.stop()


def same(servers, data, **kw):
    want = exchange(servers[0].port, data, **kw)
    got = exchange(servers[1].port, data, **kw)
    assert got == want
    return got


USERPASS = {
    "good": b'CONNECT {"verbose":false,"user":"u","pass":"p"}\r\nPING\r\n',
    "bad-pass": b'CONNECT {"verbose":false,"user":"u","pass":"x"}\r\nPING\r\n',
    "no-creds": b'CONNECT {"verbose":false}\r\nPING\r\n',
    "ping-first": b"PING\r\n",
    "sub-first": b"SUB foo 1\r\n",
    "garbage-first": b"FOO\r\n",
    "verbose-good": b'CONNECT {"verbose":true,"user":"u","pass":"p"}\r\nPING\r\n',
    "token-instead": b'CONNECT {"verbose":false,"auth_token":"p"}\r\nPING\r\n',
}


@pytest.mark.parametrize("name", sorted(USERPASS))
def test_user_pass(userpass, name):
    same(userpass, USERPASS[name])


TOKEN = {
    "good": b'CONNECT {"verbose":false,"auth_token":"s3cr3t"}\r\nPING\r\n',
    "bad": b'CONNECT {"verbose":false,"auth_token":"nope"}\r\nPING\r\n',
    "missing": b'CONNECT {"verbose":false}\r\nPING\r\n',
}


@pytest.mark.parametrize("name", sorted(TOKEN))
def test_token(token, name):
    same(token, TOKEN[name])


ALICE = b'CONNECT {"verbose":false,"user":"alice","pass":"secret"}\r\n'
BOB = b'CONNECT {"verbose":false,"user":"bob","pass":"plain"}\r\n'
USERS = {
    "bcrypt-good": ALICE + b"SUB x 1\r\nPUB x 1\r\na\r\nPING\r\n",
    "bcrypt-bad": b'CONNECT {"verbose":false,"user":"alice","pass":"wrong"}\r\nPING\r\n',
    "bcrypt-hash-as-password": b'CONNECT {"verbose":false,"user":"alice","pass":"%s"}\r\nPING\r\n' % HASH.encode(),
    "unknown-user": b'CONNECT {"verbose":false,"user":"mallory","pass":"x"}\r\nPING\r\n',
    "bob-allowed": BOB + b"SUB orders.new 1\r\nPUB orders.new 1\r\na\r\nPING\r\n",
    "bob-pub-denied": BOB + b"PUB other 1\r\na\r\nPUB orders.secret 1\r\na\r\nPING\r\n",
    "bob-sub-denied": BOB + b"SUB other 1\r\nSUB orders.hidden 2\r\nSUB orders.> 3\r\nPING\r\n",
    "bob-sub-denied-queue": BOB + b"SUB other q 1\r\nPING\r\n",
    "bob-verbose-denied": b'CONNECT {"verbose":true,"user":"bob","pass":"plain"}\r\nPUB other 1\r\na\r\nSUB other 1\r\nPING\r\n',
    "no-auth-user-guest": b'CONNECT {"verbose":false}\r\nSUB public.x 1\r\nPUB public.x 1\r\na\r\nPUB private 1\r\nb\r\nPING\r\n',
}


@pytest.mark.parametrize("name", sorted(USERS))
def test_users_and_permissions(users, name):
    same(users, USERS[name])


def test_auth_timeout(users):
    # No CONNECT within authorization.timeout (0.5 s): -ERR and close.
    out = same(users, b"", quiet=1.5)
    assert out == (b"-ERR 'Authentication Timeout'\r\n", True)


def test_info_says_auth_required(userpass):
    from tests.support.raw import Conversation
    for s in userpass:
        c = Conversation(s.port)
        c.close()
        assert b'"auth_required":true' in c.info


def test_allow_responses_grants_one_reply(users):
    from tests.support.raw import Conversation
    results = []
    for server in users:
        svc = Conversation(server.port)
        svc.send(b'CONNECT {"verbose":false,"user":"svc","pass":"svc"}\r\nSUB req.x 1\r\nPING\r\n')
        svc.read_until()
        asker = Conversation(server.port)
        asker.send(b'CONNECT {"verbose":false,"user":"guest","pass":"guest"}\r\n'
                   b'SUB public.reply 1\r\nPING\r\n')
        asker.read_until()
        # guest may not publish to req.x; alice has no restrictions.
        bob = Conversation(server.port)
        bob.send(b'CONNECT {"verbose":false,"user":"alice","pass":"secret"}\r\n'
                 b'PUB req.x _INBOX.r1 2\r\nhi\r\nPING\r\n')
        bob.read_until()
        got_req = svc.read_until(b"hi\r\n")
        svc.send(b"PUB _INBOX.r1 3\r\none\r\nPUB _INBOX.r1 3\r\ntwo\r\nPUB other 1\r\nx\r\nPING\r\n")
        replies = svc.read_until()
        assert got_req.endswith(b"hi\r\n")
        results.append((got_req, replies))
        for c in (svc, asker, bob):
            c.close()
    assert results[1] == results[0]
    # The first reply is allowed, a second one and anything else are not.
    assert results[0][1] == (b"-ERR 'Permissions Violation for Publish to \"_INBOX.r1\"'\r\n"
                             b"-ERR 'Permissions Violation for Publish to \"other\"'\r\nPONG\r\n")
