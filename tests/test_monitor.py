"""The monitoring endpoints against nats-server's own answers.

Both servers run as processes with ``-m -1`` and see the same clients:

* alice: CONNECT with name/lang/version, ``SUB foo 1``, ``SUB bar.* q 2``;
* bob: ``SUB foo 1`` then ``PUB foo`` "hello" (so both receive it);
* carol: connects and hangs up (a closed connection).

For each endpoint the SET OF KEYS must be nats-server's (minus the /varz keys
natsbroker deliberately omits, :data:`natsbroker.monitoring.endpoints.VARZ_OMITTED`, each
with its reason), in nats-server's order, and the values that do not depend on
the implementation must agree: counts, paging, sort order, closed state, error
texts. Connections are matched by their client port, since cids differ
(nats-server numbers its internal clients too).

Deliberate differences, not tested for equality:

* nats-server's own ``$SYS`` subscriptions appear in its /subsz and /varz
  counts; natsbroker has no system account.
* ``rtt`` is "0s" (not measured) in natsbroker; nats-server measures it.
* ``last_activity`` is updated on different events, so "last"/"idle" sorts are
  checked on natsbroker alone.
* The index page (``/``) lists what natsbroker serves, not nats-server's list.

The plugin endpoint and JetStream hook tests run natsbroker alone.
"""

import json
import os
import re
import tempfile
import time

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.web.test.requesthelper import DummyRequest
from zope.interface import implementer

from natsbroker import COMPAT_VERSION
from natsbroker.broker import Broker
from natsbroker.config.model import JetStreamConfig, ServerConfig
from natsbroker.gocompat.gojson import encode_json
from natsbroker.interfaces import IAccountJetStream, IBrokerPlugin, IHealthReport, IVarzSection
from natsbroker.monitoring.endpoints import VARZ_OMITTED, VARZ_OWN
from natsbroker.monitoring.http import make_site
from natsbroker.monitoring.process import uptime_text
from tests.support.http import get_json, http
from tests.support.raw import Conversation, Wire
from tests.support.servers import ServerProcess
from tests.support.wait import eventually
from tests.test_observed_live import rfc3339_ns
from tests.test_system_account import check_values, uptime_seconds

KINDS = ("nats-server", "natsbroker")
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z\Z")
UPTIME = re.compile(r"(\d+y)?(\d+d)?(\d+h)?(\d+m)?\d+s\Z")


# -- helpers --------------------------------------------------------------------

def client(port, connect, *ops):
    """A raw client that has sent CONNECT and ``ops`` and seen its PONG."""
    c = Conversation(port)
    c.send(b"CONNECT " + json.dumps(connect).encode() + b"\r\n" + b"".join(ops) + b"PING\r\n")
    out = c.read_until()
    assert out.endswith(b"PONG\r\n"), out
    return c


def by_port(doc):
    return {c["port"]: c for c in doc["connections"]}


def assert_same_keys(ours, ref, omitted=(), where=""):
    """Same key set as nats-server's (less ``omitted``), in nats-server's order."""
    expected = [k for k in ref if k not in omitted]
    assert set(ours) == set(expected), "%s: extra %s, missing %s" % (
        where, sorted(set(ours) - set(expected)), sorted(set(expected) - set(ours)))
    assert list(ours) == expected, where


class Setup:
    """One server with alice, bob (open) and carol (closed) connected."""

    def __init__(self, server):
        self.server = server
        port = server.port
        self.alice = client(port, {"verbose": False, "name": "alice", "lang": "python",
                                   "version": "1.0"},
                            b"SUB foo 1\r\n", b"SUB bar.* q 2\r\n")
        self.bob = client(port, {"verbose": False}, b"SUB foo 1\r\n", b"PUB foo 5\r\nhello\r\n")
        # alice receives bob's message; read it so the counters have settled.
        assert b"MSG foo 1 5" in self.alice.read_until(b"hello\r\n")
        carol = client(port, {"verbose": False})
        self.carol_port = carol.sock.getsockname()[1]
        carol.close()
        self.alice_port = self.alice.sock.getsockname()[1]
        self.bob_port = self.bob.sock.getsockname()[1]
        eventually(lambda: self.carol_port in by_port(get_json(server, "/connz?state=closed")),
                   what="carol's close to show in /connz?state=closed")

    def cids(self):
        conns = by_port(get_json(self.server, "/connz?state=any"))
        return {name: conns[getattr(self, name + "_port")]["cid"]
                for name in ("alice", "bob", "carol")}

    def close(self):
        self.alice.close()
        self.bob.close()


@pytest.fixture(scope="module")
def both():
    """{kind: Setup} for nats-server and natsbroker, each on its own ports."""
    setups = {}
    servers = []
    try:
        for kind in KINDS:
            launched = time.time_ns()
            s = ServerProcess(kind, ["-m", "-1"]).start()
            servers.append(s)
            setups[kind] = Setup(s)
            setups[kind].launched = launched
            setups[kind].server_id = get_json(s, "/varz")["server_id"]
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


# -- /varz ------------------------------------------------------------------------

def test_varz_keys(ours, ref):
    v, r = get_json(ours.server, "/varz"), get_json(ref.server, "/varz")
    # Every key we leave out is one nats-server really has (so the list stays true).
    assert set(VARZ_OMITTED) <= set(r), sorted(set(VARZ_OMITTED) - set(r))
    # natsbroker's own fields, last: which build runs (tests/test_compiled.py).
    assert list(v)[-len(VARZ_OWN):] == list(VARZ_OWN)
    v = {k: x for k, x in v.items() if k not in VARZ_OWN}
    assert_same_keys(v, r, VARZ_OMITTED, "/varz")
    for block in ("slow_consumer_stats", "stale_connection_stats"):
        assert_same_keys(v[block], r[block], where=block)
    # Not configured (no clustering, gateways, leaf nodes, MQTT, websockets, JetStream).
    for block in ("cluster", "gateway", "leaf", "mqtt", "websocket", "jetstream"):
        assert v[block] == r[block] == {}, block


def test_varz_values(ours, ref):
    sent = time.time_ns()
    v, r = get_json(ours.server, "/varz"), get_json(ref.server, "/varz")
    for setup, doc in ((ours, v), (ref, r)):
        # start/config_load_time after the launch, now within the request,
        # uptime = now - start, server_id this server's.
        check_values(doc, setup, "/varz", (sent, time.time_ns()))
        assert rfc3339_ns(doc["config_load_time"]) >= rfc3339_ns(doc["start"])
    assert v["version"] == COMPAT_VERSION
    assert v["port"] == ours.server.port
    assert v["server_name"] == v["server_id"]
    for key in ("proto", "host", "max_connections", "ping_interval", "ping_max", "http_port",
                "http_base_path", "https_port", "auth_timeout", "max_control_line",
                "max_payload", "max_pending", "tls_timeout", "write_deadline",
                "connections", "total_connections", "routes", "remotes", "leafnodes",
                "in_msgs", "in_bytes", "in_client_msgs", "in_client_bytes",
                "out_msgs", "out_bytes", "out_client_msgs", "out_client_bytes",
                "slow_consumers", "stale_connections", "stalled_clients",
                "config_digest", "slow_consumer_stats", "stale_connection_stats"):
        assert v[key] == r[key], key
    assert v["connections"] == 2
    assert (v["in_msgs"], v["in_bytes"], v["out_msgs"], v["out_bytes"]) == (1, 5, 2, 10)
    # alice's two and bob's one; nats-server adds its $SYS account's own.
    assert v["subscriptions"] == 3 <= r["subscriptions"]
    for key in ("start", "now", "config_load_time"):
        assert RFC3339.match(v[key]), (key, v[key])
    assert UPTIME.match(v["uptime"])
    assert v["mem"] > 0 and v["cores"] >= 1 and v["cpu"] >= 0
    assert v["http_req_stats"]["/varz"] >= 1
    assert list(v["http_req_stats"]) == sorted(v["http_req_stats"])


# -- /connz -----------------------------------------------------------------------

@pytest.mark.parametrize("query", ["", "?subs=1", "?subs=detail", "?auth=1", "?auth=1&subs=1"])
def test_connz_keys(ours, ref, query):
    c, r = get_json(ours.server, "/connz" + query), get_json(ref.server, "/connz" + query)
    assert_same_keys(c, r, where="/connz")
    mine, theirs = by_port(c), by_port(r)
    for name in ("alice", "bob"):
        conn = mine[getattr(ours, name + "_port")]
        expected = theirs[getattr(ref, name + "_port")]
        assert_same_keys(conn, expected, where=name + query)
        for item, ref_item in zip(conn.get("subscriptions_list_detail", []),
                                  expected.get("subscriptions_list_detail", [])):
            if ("qgroup" in item) == ("qgroup" in ref_item):
                assert_same_keys(item, ref_item, where="detail")


def test_connz_values(ours, ref):
    for setup in (ours, ref):
        sent = time.time_ns()
        c = get_json(setup.server, "/connz")
        assert (c["num_connections"], c["total"], c["offset"], c["limit"]) == (2, 2, 0, 1024)
        conns = by_port(c)
        alice, bob = conns[setup.alice_port], conns[setup.bob_port]
        assert (alice["kind"], alice["type"], alice["ip"]) == ("Client", "nats", "127.0.0.1")
        assert (alice["name"], alice["lang"], alice["version"]) == ("alice", "python", "1.0")
        assert (alice["subscriptions"], alice["in_msgs"], alice["out_msgs"],
                alice["out_bytes"]) == (2, 0, 1, 5)
        assert (bob["subscriptions"], bob["in_msgs"], bob["in_bytes"], bob["out_msgs"]) == (1, 1, 5, 1)
        assert alice["pending_bytes"] == bob["pending_bytes"] == 0
        for key in ("start", "last_activity"):
            assert RFC3339.match(alice[key])
        assert UPTIME.match(alice["uptime"]) and UPTIME.match(alice["idle"])
        check_values(c, setup, "/connz", (sent, time.time_ns()))
        # alice connected before bob; each was last active after it connected.
        now = rfc3339_ns(c["now"])
        assert rfc3339_ns(alice["start"]) <= rfc3339_ns(bob["start"])
        for conn in (alice, bob):
            assert rfc3339_ns(conn["start"]) <= rfc3339_ns(conn["last_activity"]) <= now, conn
        assert uptime_seconds(alice["uptime"]) >= uptime_seconds(bob["uptime"])


def test_connz_subscriptions(ours, ref):
    def subs_of(setup):
        conns = by_port(get_json(setup.server, "/connz?subs=1"))
        details = by_port(get_json(setup.server, "/connz?subs=detail"))
        cids = setup.cids()
        out = {}
        for name in ("alice", "bob"):
            port = getattr(setup, name + "_port")
            detail = details[port]["subscriptions_list_detail"]
            assert {d["cid"] for d in detail} == {cids[name]}
            out[name] = (sorted(conns[port]["subscriptions_list"]),
                         sorted((d["subject"], d.get("qgroup"), d["sid"], d["msgs"])
                                for d in detail))
        return out

    mine = subs_of(ours)
    assert mine == subs_of(ref)
    assert mine["alice"] == (["bar.*", "foo"], [("bar.*", "q", "2", 0), ("foo", None, "1", 1)])


def test_connz_paging(ours, ref):
    for setup in (ours, ref):
        srv = setup.server
        first = get_json(srv, "/connz?limit=1")
        assert (first["num_connections"], first["total"], first["limit"]) == (1, 2, 1)
        assert first["connections"][0]["port"] == setup.alice_port
        second = get_json(srv, "/connz?limit=1&offset=1")
        assert (second["num_connections"], second["offset"]) == (1, 1)
        assert second["connections"][0]["port"] == setup.bob_port
        past = get_json(srv, "/connz?offset=5")
        assert (past["num_connections"], past["total"], past["connections"]) == (0, 2, [])
        # Negative values fall back to the defaults.
        fixed = get_json(srv, "/connz?offset=-2&limit=-3")
        assert (fixed["offset"], fixed["limit"], fixed["num_connections"]) == (0, 1024, 2)


@pytest.mark.parametrize("sort,order", [
    ("", ["alice", "bob"]),
    ("cid", ["alice", "bob"]),
    ("start", ["alice", "bob"]),
    ("subs", ["alice", "bob"]),        # 2 subscriptions before 1
    ("msgs_from", ["bob", "alice"]),   # bob published
    ("bytes_from", ["bob", "alice"]),
    ("uptime", ["bob", "alice"]),      # shortest uptime first
])
def test_connz_sort(ours, ref, sort, order):
    for setup in (ours, ref):
        conns = get_json(setup.server, "/connz?sort=" + sort)["connections"]
        names = {setup.alice_port: "alice", setup.bob_port: "bob"}
        assert [names[c["port"]] for c in conns] == order, (setup.server.kind, sort)


def test_connz_sort_by_activity(ours):
    # Checked on natsbroker alone: nats-server updates last_activity on other events.
    srv = ours.server
    time.sleep(0.01)
    ours.alice.send(b"PING\r\n")
    assert ours.alice.read_until().endswith(b"PONG\r\n")
    names = {ours.alice_port: "alice", ours.bob_port: "bob"}
    last = get_json(srv, "/connz?sort=last")["connections"]
    assert [names[c["port"]] for c in last] == ["alice", "bob"]   # most recent first
    idle = get_json(srv, "/connz?sort=idle")["connections"]
    assert [names[c["port"]] for c in idle] == ["bob", "alice"]   # most idle first


def test_connz_closed(ours, ref):
    results = {}
    for setup in (ours, ref):
        srv = setup.server
        closed = get_json(srv, "/connz?state=closed")
        carol = by_port(closed)[setup.carol_port]
        assert carol["reason"] == "Client Closed"
        assert RFC3339.match(carol["stop"])
        anyc = get_json(srv, "/connz?state=any")
        assert anyc["total"] == closed["total"] + 2 == anyc["num_connections"]
        assert [c["cid"] for c in anyc["connections"]] == sorted(c["cid"] for c in anyc["connections"])
        # Sorting by stop and reason needs state=closed.
        by_stop = get_json(srv, "/connz?state=closed&sort=stop")["connections"]
        stops = [c["stop"] for c in by_stop]
        assert stops == sorted(stops, reverse=True)
        reasons = [c["reason"] for c in get_json(srv, "/connz?state=closed&sort=reason")["connections"]]
        assert reasons == sorted(reasons)
        results[srv.kind] = (carol, closed, anyc)
    (carol, closed, anyc), (rcarol, rclosed, ranyc) = results["natsbroker"], results["nats-server"]
    assert_same_keys(carol, rcarol, where="closed carol")
    assert_same_keys(closed, rclosed, where="/connz?state=closed")
    # The same connections were made: the port probe, alice, bob, carol.
    assert (closed["total"], anyc["total"]) == (rclosed["total"], ranyc["total"])


def test_connz_cid(ours, ref):
    for setup in (ours, ref):
        srv = setup.server
        cids = setup.cids()
        one = get_json(srv, "/connz?cid=%d" % cids["bob"])
        assert (one["num_connections"], one["limit"]) == (1, 1)
        assert one["connections"][0]["port"] == setup.bob_port
        # A closed cid is found with state=closed or any, not among the open ones.
        assert get_json(srv, "/connz?cid=%d" % cids["carol"])["connections"] == []
        for state in ("closed", "any"):
            found = get_json(srv, "/connz?state=%s&cid=%d" % (state, cids["carol"]))["connections"]
            assert [c["port"] for c in found] == [setup.carol_port]
        assert get_json(srv, "/connz?cid=999999")["connections"] == []


def test_connz_filters(ours, ref):
    for setup in (ours, ref):
        srv = setup.server
        assert get_json(srv, "/connz?user=nobody")["connections"] == []
        assert get_json(srv, "/connz?mqtt_client=x")["connections"] == []
        assert get_json(srv, "/connz?acc=%24G")["num_connections"] == 2


@pytest.mark.parametrize("kind", ["nats-server", "natsbroker"])
def test_connz_closed_keeps_subscriptions(kind):
    # A fresh server: the shared ones keep their counts for the other tests.
    with ServerProcess(kind, ["-m", "-1"]) as srv:
        dave = client(srv.port, {"verbose": False}, b"SUB dave.x 7\r\n")
        port = dave.sock.getsockname()[1]
        dave.close()
        eventually(lambda: port in by_port(get_json(srv, "/connz?state=closed")))
        entry = by_port(get_json(srv, "/connz?state=closed&subs=1"))[port]
        assert entry["subscriptions"] == 1
        assert entry["subscriptions_list"] == ["dave.x"]


# -- /subsz ------------------------------------------------------------------------

@pytest.mark.parametrize("query", ["", "?subs=1", "?subs=1&test=foo", "?subs=1&test=bar.x",
                                   "?subs=1&test=foo&limit=1", "?subs=1&offset=1000"])
def test_subsz_keys(ours, ref, query):
    s, r = get_json(ours.server, "/subsz" + query), get_json(ref.server, "/subsz" + query)
    assert_same_keys(s, r, where="/subsz" + query)
    for item in s.get("subscriptions_list", []):
        # nats-server's entries have the same shape (qgroup only for queue subscribers).
        same = [x for x in r["subscriptions_list"] if ("qgroup" in x) == ("qgroup" in item)]
        assert_same_keys(item, same[0], where="subsz entry")


def test_subsz_values(ours, ref):
    def client_subs(setup, query):
        doc = get_json(setup.server, "/subsz" + query)
        cids = {v: k for k, v in setup.cids().items()}
        subs = sorted((cids[d["cid"]], d["subject"], d.get("qgroup"), d["sid"], d["msgs"],
                       d["account"]) for d in doc.get("subscriptions_list", []) if d["cid"] in cids)
        return doc["total"], doc["offset"], doc["limit"], subs

    for query in ("?subs=1&test=foo", "?subs=1&test=bar.x", "?subs=1&test=nothing.here"):
        assert client_subs(ours, query) == client_subs(ref, query), query
    assert client_subs(ours, "?subs=1&test=foo") == (2, 0, 1024, [
        ("alice", "foo", None, "1", 1, "$G"), ("bob", "foo", None, "1", 1, "$G")])
    assert client_subs(ours, "?subs=1&test=bar.x")[3] == [("alice", "bar.*", "q", "2", 0, "$G")]
    # Paging keeps the total of everything that matched.
    for setup in (ours, ref):
        page = get_json(setup.server, "/subsz?subs=1&test=foo&limit=1")
        assert (page["total"], len(page["subscriptions_list"])) == (2, 1)
        rest = get_json(setup.server, "/subsz?subs=1&test=foo&offset=1")
        assert (rest["total"], len(rest["subscriptions_list"])) == (2, 1)
        if setup is ours:
            # Our order is stable, so pages do not overlap (nats-server's
            # order can change from one request to the next).
            assert rest["subscriptions_list"] != page["subscriptions_list"]
        # Without subs=1 there is no list, and total is 0.
        stats = get_json(setup.server, "/subsz?test=foo")
        assert stats["total"] == 0 and "subscriptions_list" not in stats
    s = get_json(ours.server, "/subsz?subs=1")
    assert s["num_subscriptions"] == s["total"] == 3
    assert s["num_inserts"] == 3 and s["num_removes"] == 0
    assert 0 <= s["cache_hit_rate"] <= 1
    # An account we do not have: nothing, with zero stats.
    for setup in (ours, ref):
        none = get_json(setup.server, "/subsz?subs=1&acc=NOPE")
        assert (none["num_subscriptions"], none["total"]) == (0, 0)
        assert "subscriptions_list" not in none


# -- /routez, /healthz --------------------------------------------------------------

@pytest.mark.parametrize("query", ["", "?subs=1", "?subs=detail"])
def test_routez(ours, ref, query):
    z, r = get_json(ours.server, "/routez" + query), get_json(ref.server, "/routez" + query)
    assert_same_keys(z, r, where="/routez")
    assert (z["num_routes"], z["routes"]) == (r["num_routes"], r["routes"]) == (0, [])
    assert z["server_id"] == get_json(ours.server, "/varz")["server_id"]


@pytest.mark.parametrize("query", [
    "", "?js-enabled-only=true", "?js-enabled-only=1", "?js-server-only=true",
    "?js-meta-only=true", "?js-enabled=true", "?details=true", "?account=a",
    "?account=a&stream=s", "?account=a&stream=s&consumer=c",
    "?stream=s", "?consumer=c", "?account=a&consumer=c", "?details=true&stream=s",
    "?js-enabled-only=bogus", "?details=maybe", "?js-enabled-only=true&js-enabled=bogus",
])
def test_healthz(ours, ref, query):
    status, headers, body = http(ours.server, "/healthz" + query)
    assert (status, body) == http(ref.server, "/healthz" + query)[::2]
    if status != 400 or body.startswith(b"{"):
        assert headers["content-type"] == "application/json"


# -- errors, formats, the index ------------------------------------------------------

@pytest.mark.parametrize("path", [
    "/nope", "/varz/", "/connz/", "/healthz/x",
    "/connz?sort=bogus", "/connz?sort=stop", "/connz?sort=reason&state=any",
    "/connz?state=bogus", "/connz?subs=bogus", "/connz?auth=maybe", "/connz?offset=abc",
    "/connz?limit=1.5", "/connz?limit=99999999999999999999", "/connz?cid=abc",
    "/connz?cid=-1", "/subsz?subs=bogus", "/subsz?offset=x", "/subsz?subs=1&test=foo.*",
    "/subsz?test=foo.>", "/routez?subs=bogus",
])
def test_errors_match(ours, ref, path):
    status, headers, body = http(ours.server, path)
    rstatus, rheaders, rbody = http(ref.server, path)
    assert (status, body) == (rstatus, rbody)
    assert headers["content-type"] == rheaders["content-type"]


@pytest.mark.parametrize("path", ["/varz", "/connz", "/subsz", "/routez", "/subscriptionsz"])
def test_json_format(ours, ref, path):
    for setup in (ours, ref):
        status, headers, body = http(setup.server, path)
        assert status == 200
        assert headers["content-type"] == "application/json"
        assert headers["access-control-allow-origin"] == "*"
        # MarshalIndent with two spaces, no trailing newline.
        assert body.startswith(b'{\n  "server_id": "'), body[:40]
        assert body.endswith(b"\n}")
    # /healthz is compact.
    assert http(ours.server, "/healthz")[2] == b'{"status":"ok"}'


def test_callback_is_ignored_like_nats_server(ours, ref):
    # nats-server no longer answers JSONP: ?callback= gets the same plain JSON.
    for setup in (ours, ref):
        status, headers, body = http(setup.server, "/varz?callback=cb")
        assert status == 200 and headers["content-type"] == "application/json"
        assert json.loads(body)["server_id"]


def test_index(ours):
    status, headers, body = http(ours.server, "/")
    assert status == 200
    assert headers["content-type"] == "text/html; charset=utf-8"
    for name in ("varz", "connz", "subsz", "routez", "healthz"):
        assert b"href=./" + name.encode() in body
    assert COMPAT_VERSION.encode() in body


def test_http_req_stats_count_requests(ours):
    before = get_json(ours.server, "/varz")["http_req_stats"]
    get_json(ours.server, "/subscriptionsz")
    http(ours.server, "/healthz")
    after = get_json(ours.server, "/varz")["http_req_stats"]
    assert after["/varz"] == before["/varz"] + 1
    assert after["/subsz"] == before.get("/subsz", 0) + 1
    assert after["/healthz"] == before.get("/healthz", 0) + 1


# -- plugin endpoints (natsbroker as a process, with a plugin) ---------------------------

@implementer(IBrokerPlugin)
class EndpointPlugin:
    """Loaded by the natsbroker process below: registers a few monitor endpoints."""

    name = "monitor-test"

    def __init__(self, config):
        self.config = config

    def start(self, broker):
        broker.add_monitor_endpoint("/testz", lambda request: {
            "server_id": broker.server_id, "path": request.path.decode(), "items": [1, 2.5]})

        def later(request):
            d = defer.Deferred()
            broker.reactor.callLater(0.05, d.callback, {"late": True})
            return d
        broker.add_monitor_endpoint("latez", later)

        def bad(request):
            raise ValueError("bad thing: " + request.uri.decode())
        broker.add_monitor_endpoint("badz", bad)

    def stop(self):
        pass


@pytest.fixture(scope="module")
def with_plugin():
    conf = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    with conf:
        conf.write('plugins: ["tests.test_monitor:EndpointPlugin"]\n')
    try:
        with ServerProcess("natsbroker", ["-m", "-1", "-c", conf.name]) as s:
            yield s
    finally:
        os.unlink(conf.name)


def test_plugin_endpoint(with_plugin):
    status, headers, body = http(with_plugin, "/testz")
    assert (status, headers["content-type"]) == (200, "application/json")
    doc = json.loads(body)
    assert doc == {"server_id": get_json(with_plugin, "/varz")["server_id"], "path": "/testz",
                   "items": [1, 2.5]}
    assert body.startswith(b'{\n  "server_id"')
    assert get_json(with_plugin, "/latez") == {"late": True}
    assert http(with_plugin, "/badz?x=1")[::2] == (400, b"bad thing: /badz?x=1")
    assert http(with_plugin, "/testz/")[0] == 404
    assert b"href=./testz" in http(with_plugin, "/")[2]
    assert get_json(with_plugin, "/varz")["http_req_stats"]["/testz"] == 1


def test_varz_config_digest(with_plugin):
    assert re.match(r"sha256:[0-9a-f]{64}\Z", get_json(with_plugin, "/varz")["config_digest"])


# -- in-process: JetStream hooks, closed snapshots, encoding ----------------------------------

def render(site, path):
    """(status, headers, body) of ``path`` rendered by ``site`` without a network."""
    request = DummyRequest([])
    request.uri = path.encode()
    request.path = path.partition("?")[0].encode()
    body = site.resource.render(request)
    return request.responseCode or 200, request.responseHeaders, body


@implementer(IBrokerPlugin)
@implementer(IBrokerPlugin, IAccountJetStream, IVarzSection, IHealthReport)
class FakeJetStream:
    """Runs JetStream as far as the monitor sees: found by interface, not name."""

    name = "fake-jetstream"
    varz_field = "jetstream"

    def __init__(self, health):
        self.health = health
        self.asked = []

    def start(self, broker):
        pass

    def stop(self):
        pass

    def varz(self):
        return {"config": {"max_memory": 1024, "store_dir": "/x"}, "stats": {"memory": 0}}

    def healthz(self, opts):
        self.asked.append(opts)
        return self.health

    def enabled_for(self, name):
        return name == "$G"

    def enable_account(self, account, limits):
        pass

    def update_account(self, account, limits):
        pass

    def disable_account(self, account, answer=True):
        pass


@implementer(IBrokerPlugin, IVarzSection, IHealthReport)
class FakeHealthCheck:
    """A third party's plugin: a health check and a /varz field of its own."""

    name = "fake-health"
    varz_field = "fake"

    def __init__(self, health):
        self.health = health

    def start(self, broker):
        pass

    def stop(self):
        pass

    def varz(self):
        return {"answered": 1}

    def healthz(self, opts):
        return self.health


def make_broker(**config):
    return Broker(ServerConfig(**config), Clock())


def test_jetstream_hooks():
    broker = make_broker(jetstream=JetStreamConfig(enabled=True))
    site = make_site(broker)
    # Configured but no JetStream plugin running: unavailable.
    status, _, body = render(site, "/healthz")
    assert (status, json.loads(body)["status"]) == (503, "unavailable")
    js = FakeJetStream({"status": "ok"})
    broker.add_plugin(js)
    status, _, body = render(site, "/healthz?js-enabled-only=true")
    assert (status, body) == (200, b'{"status":"ok"}')
    assert js.asked[-1]["js-enabled-only"] is True
    js.health = {"status": "unavailable", "status_code": 503, "error": "not current"}
    status, _, body = render(site, "/healthz")
    assert (status, json.loads(body)) == (503, {"status": "unavailable", "error": "not current"})
    varz = json.loads(render(site, "/varz")[2])
    assert varz["jetstream"] == {"config": {"max_memory": 1024, "store_dir": "/x"},
                                 "stats": {"memory": 0}}


def test_healthz_without_jetstream_is_ok():
    assert render(make_site(make_broker()), "/healthz")[::2] == (200, b'{"status":"ok"}')


def test_any_plugin_has_a_say_in_healthz_and_varz():
    # Found by interface: the first health check not ok decides /healthz; a
    # plugin's own /varz field comes after nats-server's.
    broker = make_broker(jetstream=JetStreamConfig(enabled=True))
    js, other = FakeJetStream({"status": "ok"}), FakeHealthCheck({"status": "ok"})
    broker.add_plugin(js)
    broker.add_plugin(other)
    site = make_site(broker)
    assert render(site, "/healthz")[::2] == (200, b'{"status":"ok"}')
    other.health = {"status": "error", "status_code": 500, "error": "disk full"}
    assert render(site, "/healthz")[::2] == (500, b'{"status":"error","error":"disk full"}')
    js.health = {"status": "unavailable", "status_code": 503, "error": "not current"}
    assert render(site, "/healthz")[0] == 503
    varz = json.loads(render(site, "/varz")[2])
    keys = list(varz)
    assert varz["fake"] == {"answered": 1} and keys.index("fake") > keys.index("jetstream")
    assert keys[-2:] == ["fake", "natsbroker_build"]


def test_closed_snapshot_with_details():
    # The snapshot shape /connz understands for closed connections, details included.
    broker = make_broker()
    broker.closed_clients.append({
        "cid": 7, "ip": "10.0.0.1", "port": 5555, "start": 1000.0, "last_activity": 1061.5,
        "stop": 1062.0, "reason": "Stale Connection", "pending_bytes": 0, "in_msgs": 1,
        "out_msgs": 2, "in_bytes": 3, "out_bytes": 4, "subscriptions": 1, "name": "n",
        "lang": "", "version": "", "user": "u", "subjects": ["a.b"],
        "subs_detail": [{"subject": "a.b", "sid": "1", "msgs": 2, "cid": 7}],
    })
    site = make_site(broker)
    doc = json.loads(render(site, "/connz?state=closed&subs=detail&auth=1")[2])
    conn = doc["connections"][0]
    assert conn["subscriptions_list_detail"] == [{"subject": "a.b", "sid": "1", "msgs": 2, "cid": 7}]
    assert (conn["start"], conn["stop"]) == ("1970-01-01T00:16:40Z", "1970-01-01T00:17:42Z")
    assert (conn["uptime"], conn["idle"], conn["reason"]) == ("1m2s", "0s", "Stale Connection")
    assert conn["authorized_user"] == "u" and "lang" not in conn and "name_tag" not in conn
    conn = json.loads(render(site, "/connz?state=closed&subs=1")[2])["connections"][0]
    assert conn["subscriptions_list"] == ["a.b"] and "authorized_user" not in conn


def test_encode_json_like_go():
    assert encode_json({"a": [1, 2.0, 0.5, 1e-7, 1e21, 1e16], "b": {}, "c": [], "d": None,
                        "e": True, "f": "<x>&\u2028µ"}) == (
        '{\n  "a": [\n    1,\n    2,\n    0.5,\n    1e-7,\n    1e+21,\n    10000000000000000\n'
        '  ],\n  "b": {},\n  "c": [],\n  "d": null,\n  "e": true,\n'
        '  "f": "\\u003cx\\u003e\\u0026\\u2028µ"\n}')
    assert encode_json({"status": "ok", "n": 0.0}, indent=False) == '{"status":"ok","n":0}'
    assert encode_json(1 / 3) == "0.3333333333333333"


@pytest.mark.parametrize("seconds,text", [
    (0, "0s"), (59.9, "59s"), (62, "1m2s"), (3600, "1h0m0s"), (90061, "1d1h1m1s"),
    (365 * 86400 + 1, "1y0d0h0m1s"),
])
def test_uptime_format(seconds, text):
    assert uptime_text(seconds) == text


def test_rfc3339_trims_fraction():
    from natsbroker.gocompat.times import rfc3339  # (the monitor's times)
    assert rfc3339(1_700_000_000_123_400_000) == "2023-11-14T22:13:20.1234Z"
    assert rfc3339(1_700_000_000_000_000_000) == "2023-11-14T22:13:20Z"


@pytest.mark.parametrize("key", ["disable_sublist_cache", "no_sublist_cache"])
def test_disabled_sublist_cache_caches_nothing(key, tmp_path):
    # nats-server's option, under either name: matches are not cached, so
    # /subsz counts no cache entries after publishes that would have made some.
    conf = tmp_path / "server.conf"
    conf.write_text("%s: true\n" % key)
    plain = tmp_path / "plain.conf"
    plain.write_text("port: -1\n")
    caches = {}
    for kind in ("nats-server", "natsbroker"):
        for name, path in (("off", conf), ("on", plain)):
            with ServerProcess(kind, ["-m", "-1", "-c", str(path)]) as s:
                c = Wire(s.port)
                try:
                    c.send(b"CONNECT {}\r\nSUB foo 1\r\n" + b"PUB foo 2\r\nhi\r\n" * 3
                           + b"PUB bar 0\r\n\r\nPING\r\n")
                    buf = c.read_until(b"PONG")
                    assert buf.count(b"MSG foo 1 2") == 3
                    caches[kind, name] = get_json(s, "/subsz")["num_cache"]
                finally:
                    c.close()
    assert caches["nats-server", "off"] == caches["natsbroker", "off"] == 0, caches
    assert caches["nats-server", "on"] > 0 and caches["natsbroker", "on"] > 0, caches
