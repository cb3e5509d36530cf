"""Where a JetStream meta leader places a stream
(natsbroker.jetstream.cluster.placement) and what it knows of its peers
(natsbroker.jetstream.cluster.peers): each rule of nats-server's
selectPeerGroup as a table, hypothesis properties, and a live five-node
nats-server cluster whose answers (peer sets, error texts) the placement,
fed that cluster's own STATSZ, must reproduce."""

import asyncio
import json
import os
import random
import time

import attrs
import nats
import pytest
from hypothesis import given, settings, strategies as st

from natsbroker.cluster.raft.wire import peer_id
from natsbroker.jetstream.cluster.peers import (
    JetStreamConfig,
    JetStreamStats,
    NodeInfo,
    PeerTable,
)
from natsbroker.jetstream.cluster.placement import (
    PlacementError,
    PlacementRequest,
    create_group_for_consumer,
    create_group_for_stream,
    select_peer_group,
    select_preferred,
)
from tests.support.servers import ServerProcess, free_port

GB = 1024 ** 3
FIXTURE = os.path.join(os.path.dirname(__file__), "js_cluster_statsz.json")


def node(name, tags=(), cluster="c1", storage=GB, used=0, reserved=0, memory=GB, ha=0,
         offline=False, heard=True, mem_used=0, mem_reserved=0):
    return NodeInfo(name=name, cluster=cluster, id="N" + name.upper(), tags=tuple(tags),
                    cfg=JetStreamConfig(max_memory=memory, max_storage=storage) if heard else None,
                    stats=JetStreamStats(storage=used, reserved_storage=reserved, ha_assets=ha,
                                         memory=mem_used, reserved_memory=mem_reserved)
                    if heard else None,
                    offline=offline, js=True)


def names(ids, nodes):
    by_id = {n.peer: n.name for n in nodes}
    return sorted(by_id[i] for i in ids)


def place(nodes, config, cluster="c1", **kw):
    kw.setdefault("rng", random.Random(1))
    return names(select_peer_group(nodes, cluster, config, **kw), nodes)


def refusal(nodes, config, cluster="c1", **kw):
    kw.setdefault("rng", random.Random(1))
    with pytest.raises(PlacementError) as e:
        select_peer_group(nodes, cluster, config, **kw)
    assert (e.value.code, e.value.err_code) == (400, 10005)
    assert e.value.to_json()["description"] == e.value.description
    return e.value.description


NO = "no suitable peers for placement"
AZ = [node("a1", ["az:1"]), node("a2", ["az:2"]), node("a3", ["az:3"]),
      node("b1", ["az:1", "ssd"]), node("x2", ["az:2", "!jetstream"])]


# -- the rules, one by one ---------------------------------------------------------------

@pytest.mark.parametrize("nodes, config, kw, expected", [
    # cluster: only the target cluster's peers count, and without a reason
    ([node("a"), node("b", cluster="c2")], {"num_replicas": 1}, {"cluster": "c2"}, ["b"]),
    ([node("a"), node("b", cluster="c2")], {"num_replicas": 2}, {}, NO),
    # never heard from (no JetStream stats yet)
    ([node("a"), node("b", heard=False)], {"num_replicas": 2}, {}, NO + ", peer offline"),
    # !jetstream
    ([node("a"), node("b", ["!jetstream"])], {"num_replicas": 1}, {}, ["a"]),
    ([node("a"), node("b", ["!jetstream"])], {"num_replicas": 2}, {}, NO + ", exclude tag set"),
    # required and excluded tags; the first failing tag is the one reported
    ([node("a", ["t1"]), node("b", ["t1", "t2"])], {"num_replicas": 1, "placement": {"tags": ["t1", "t2"]}},
     {}, ["b"]),
    ([node("a", ["t1"]), node("b")], {"num_replicas": 2, "placement": {"tags": ["t1", "t2"]}},
     {}, NO + ", tags not matched ['t1', 't2']"),
    ([node("a", ["t1"]), node("b", ["t2"])], {"num_replicas": 1, "placement": {"tags": ["!t1"]}}, {}, ["b"]),
    ([node("a", ["t1"]), node("b", ["t2"])], {"num_replicas": 2, "placement": {"tags": ["!t1", "t2"]}},
     {}, NO + ", tags excluded ['t1']"),
    # free space: max - max(used, reserved), per storage kind
    ([node("a", storage=100, used=60), node("b", storage=100, reserved=50)],
     {"num_replicas": 1, "max_bytes": 50}, {}, ["b"]),
    ([node("a", storage=100, used=60), node("b", storage=100, reserved=50)],
     {"num_replicas": 2, "max_bytes": 50}, {}, NO + ", insufficient storage"),
    ([node("a", storage=100, reserved=60), node("b", storage=100, used=40)],
     {"num_replicas": 1, "max_bytes": 50}, {}, ["b"]),
    ([node("a", storage=100, used=200), node("b", storage=100)],
     {"num_replicas": 1, "max_bytes": 1}, {}, ["b"]),
    ([node("a", memory=100, mem_used=60), node("b", memory=100, mem_reserved=40)],
     {"num_replicas": 1, "max_bytes": 50, "storage": "memory"}, {}, ["b"]),
    ([node("a", memory=100, mem_reserved=60), node("b", memory=100, mem_used=40)],
     {"num_replicas": 1, "max_bytes": 50, "storage": "memory"}, {}, ["b"]),
    ([node("a", memory=10), node("b", memory=100)],
     {"num_replicas": 1, "max_bytes": 50, "storage": "memory"}, {}, ["b"]),
    # HA asset limit: more than the limit refuses (the count includes _meta_)
    ([node("a", ha=3), node("b", ha=2)], {"num_replicas": 1}, {"max_ha_assets": 2}, ["b"]),
    ([node("a", ha=3), node("b", ha=2)], {"num_replicas": 2}, {"max_ha_assets": 2}, NO + ", miscellaneous issue"),
    # unique tag: one per value, none without the prefix; an explicit tag turns it off
    (AZ, {"num_replicas": 2, "max_bytes": 1, "placement": {"tags": ["!az:1"]}}, {"unique_tag": "az:"},
     ["a2", "a3"]),
    (AZ, {"num_replicas": 4}, {"unique_tag": "az:"}, NO + ", exclude tag set, server tag not unique"),
    ([node("a", ["az:1"]), node("b")], {"num_replicas": 2}, {"unique_tag": "az:"},
     NO + ", server tag not unique"),
    (AZ, {"num_replicas": 2, "placement": {"tags": ["az:1"]}}, {"unique_tag": "az:"}, ["a1", "b1"]),
    (AZ, {"num_replicas": 3, "placement": {"tags": ["!az:3"]}}, {"unique_tag": "az:"}, ["a1", "a2", "b1"]),
    # the quorum must be online
    ([node("a", offline=True), node("b", offline=True), node("c")], {"num_replicas": 3}, {},
     NO + ", peer offline"),
    ([node("a", offline=True), node("b"), node("c")], {"num_replicas": 3}, {}, ["a", "b", "c"]),
    # no meta peers at all
    ([], {"num_replicas": 1}, {}, NO + ", jetstream not enabled in cluster"),
    # a meta peer we know nothing about
    ([node("a")], {"num_replicas": 2}, {"meta_peers": [peer_id("a"), peer_id("zz")]},
     NO + ", miscellaneous issue"),
    # no cluster at all
    ([node("a")], {"num_replicas": 1}, {"cluster": ""}, NO + ", miscellaneous issue"),
])
def test_selection_rules(nodes, config, kw, expected):
    if isinstance(expected, str):
        assert refusal(nodes, config, **kw) == expected
    else:
        assert place(nodes, config, **kw) == expected


def test_all_reasons_in_nats_servers_order():
    e = PlacementError(offline=True, exclude_tag=True, no_storage=True, unique_tag=True, misc=True,
                       no_js_cluster=True, no_match_tags=["x", "y"], exclude_tags=["z"])
    assert e.description == (
        "no suitable peers for placement, peer offline, exclude tag set, insufficient storage, "
        "server tag not unique, miscellaneous issue, jetstream not enabled in cluster, "
        "tags not matched ['x', 'y'], tags excluded ['z']")
    assert PlacementError(no_match_tags=["b", "a", "b"]).description == NO + ", tags not matched ['a', 'b']"


def test_sort_online_then_space_then_streams_then_ha():
    nodes = [node("full", storage=100, used=90), node("roomy", storage=100),
             node("off", storage=1000, offline=True), node("busy", storage=100)]
    busy = [peer_id("busy")]
    # R1: the most room, fewest streams; an offline peer comes last whatever its room
    assert place(nodes, {"num_replicas": 1}, assignments=[busy]) == ["roomy"]
    ids = select_peer_group(nodes, "c1", {"num_replicas": 1}, replicas=4, assignments=[busy],
                            rng=random.Random(3))
    assert [names([i], nodes)[0] for i in ids] == ["roomy", "busy", "full", "off"]
    # R>1: fewest HA assets first (stable over the above)
    ha = [[peer_id("roomy"), peer_id("busy")], busy]
    ids = select_peer_group(nodes, "c1", {"num_replicas": 2}, replicas=4, assignments=ha,
                            rng=random.Random(3))
    assert [names([i], nodes)[0] for i in ids] == ["full", "roomy", "busy", "off"]


def test_ha_sort_follows_the_configured_replicas():
    # (an R1 config placed on two peers, as a scale-up asks: no HA re-sort)
    nodes = [node("x"), node("y")]
    x, y = peer_id("x"), peer_id("y")
    assignments = [[x, peer_id("z")], [y], [y]]
    assert select_peer_group(nodes, "c1", {"num_replicas": 1}, replicas=2,
                             assignments=assignments) == [x, y]
    assert select_peer_group(nodes, "c1", {"num_replicas": 2}, replicas=2,
                             assignments=assignments) == [y, x]


def test_existing_and_ignored_peers():
    nodes = [node("a", ["az:1"]), node("b", ["az:1"]), node("c", ["az:2"]), node("d", ["az:3"])]
    a, b, c = peer_id("a"), peer_id("b"), peer_id("c")
    # enough existing: the first R, as given
    assert select_peer_group(nodes, "c1", {"num_replicas": 2}, existing=[c, a, b]) == [c, a]
    # existing first; their unique tag values are taken
    got = select_peer_group(nodes, "c1", {"num_replicas": 3}, existing=[a], unique_tag="az:")
    assert got[0] == a and names(got, nodes) == ["a", "c", "d"]
    # ... unless being replaced
    kw = dict(existing=[a], ignore=[c, peer_id("d")], unique_tag="az:")
    assert refusal(nodes, {"num_replicas": 2}, **kw) == NO + ", server tag not unique"
    got = select_peer_group(nodes, "c1", {"num_replicas": 2}, replace_first_existing=1, **kw)
    assert got == [a, b]


def test_create_group_tries_alternates_and_accumulates():
    nodes = [node("a", ["t"]), node("b", cluster="c2"), node("c", ["x"], cluster="c3")]
    req = {"num_replicas": 1, "placement": {"tags": ["x"]}}
    assert create_group_for_stream(nodes, "c1", req, alternates=["c2", "c3"],
                                   rng=random.Random(0)) == ("c3", [peer_id("c")])
    with pytest.raises(PlacementError) as e:
        create_group_for_stream(nodes, "c1", {"num_replicas": 1, "placement": {"tags": ["y"]}},
                                alternates=["c2", "c3"], rng=random.Random(0))
    assert e.value.description == NO + ", tags not matched ['y']"
    # a placement cluster: no alternates
    with pytest.raises(PlacementError):
        create_group_for_stream(nodes, "c1", {"num_replicas": 1, "placement": {"cluster": "c2", "tags": ["x"]}},
                                alternates=["c3"], rng=random.Random(0))


def test_preferred_and_consumer_groups():
    nodes = [node("a"), node("b", offline=True), node("c")]
    a, b, c = (peer_id(n) for n in "abc")
    assert select_preferred([b], nodes) == b
    assert select_preferred([a, b], nodes, random.Random(0)) == a
    assert {select_preferred([a, b, c], nodes, random.Random(s)) for s in range(20)} == {a, c}
    assert select_preferred([b, peer_id("zz")], nodes, random.Random(0)) in (b, peer_id("zz"))
    assert create_group_for_consumer([a, b, c], 3, nodes) == [a, b, c]
    assert sorted(create_group_for_consumer([a, b, c], 2, nodes, random.Random(0))) == sorted([a, c])
    for reps, group in ((4, [a, b, c]), (3, [b, peer_id("zz"), a]), (1, [])):
        with pytest.raises(Exception) as e:
            create_group_for_consumer(group, reps, nodes)
        assert (e.value.code, e.value.err_code, e.value.description) == (503, 10023, "insufficient resources")


def test_request_from_stream_config_model():
    from natsbroker.jetstream.stream_models import Placement, StreamConfig
    cfg = StreamConfig(name="S", num_replicas=3, storage="memory", max_bytes=9,
                       placement=Placement(cluster="c", tags=["t"]))
    assert PlacementRequest.of(cfg) == PlacementRequest(3, "memory", 9, "c", ("t",), "")


# -- properties ------------------------------------------------------------------------

NODE = st.builds(
    lambda i, tags, cluster, room, used, ha, off, heard: node(
        "n%d" % i, tags, cluster, storage=room, used=used, ha=ha, offline=off, heard=heard),
    st.integers(0, 0), st.lists(st.sampled_from(["az:1", "az:2", "az:3", "ssd", "!jetstream"]),
                                max_size=3, unique=True),
    st.sampled_from(["c1", "c1", "c2"]), st.integers(0, 100), st.integers(0, 100),
    st.integers(0, 4), st.booleans(), st.booleans())
NODES = st.lists(NODE, max_size=8).map(
    lambda ns: [attrs.evolve(n, name="n%d" % i) for i, n in enumerate(ns)])
CONFIG = st.fixed_dictionaries({
    "num_replicas": st.integers(1, 5), "max_bytes": st.integers(0, 60),
    "storage": st.sampled_from(["file", "memory"]),
    "placement": st.fixed_dictionaries({"tags": st.lists(
        st.sampled_from(["az:1", "!az:2", "ssd", "!ssd"]), max_size=2, unique=True)})})


@settings(max_examples=300, deadline=None)
@given(NODES, CONFIG, st.sampled_from([None, "az:"]), st.integers(0, 3), st.integers(0, 2**32),
       st.data())
def test_placement_properties(nodes, config, unique_tag, max_ha, seed, data):
    ids = [n.peer for n in nodes]
    ignore = data.draw(st.lists(st.sampled_from(ids), unique=True) if ids else st.just([]))
    kw = dict(unique_tag=unique_tag, max_ha_assets=max_ha, ignore=ignore)
    try:
        got = select_peer_group(nodes, "c1", config, rng=random.Random(seed), **kw)
    except PlacementError as e:
        with pytest.raises(PlacementError) as again:
            select_peer_group(nodes, "c1", config, rng=random.Random(seed), **kw)
        assert again.value.description == e.description
        return
    assert got == select_peer_group(nodes, "c1", config, rng=random.Random(seed), **kw)
    by_id = {n.peer: n for n in nodes}
    assert len(got) == config["num_replicas"] == len(set(got))
    for p in got:
        n = by_id[p]
        assert p not in ignore and n.cluster == "c1" and n.cfg is not None
        assert "!jetstream" not in n.tags
        for t in config["placement"]["tags"]:
            assert (t[1:] not in n.tags) if t.startswith("!") else (t in n.tags)
        if config["max_bytes"]:
            assert config["max_bytes"] <= (n.cfg.max_storage - n.stats.storage
                                           if config["storage"] == "file" else n.cfg.max_memory)
        assert not max_ha or n.stats.ha_assets <= max_ha
    if unique_tag and not any(t.startswith("az:") for t in config["placement"]["tags"]):
        azs = [next(t for t in by_id[p].tags if t.startswith("az:")) for p in got]
        assert len(set(azs)) == len(azs)
    assert sum(not by_id[p].offline for p in got) >= config["num_replicas"] // 2 + 1


# -- the peer table --------------------------------------------------------------------

def _statsz():
    with open(FIXTURE, "rb") as f:
        return f.read()


def test_statsz_fills_the_table_as_nats_server_does():
    table = PeerTable(server_id="NLOCAL")
    ni = table.update_from_statsz(_statsz(), now=1.0)
    assert ni.peer == peer_id("p4") and table.get(peer_id("p4")) == ni
    assert (ni.name, ni.cluster, ni.version, ni.tags) == ("p4", "pc", "2.15.1", ("az:1", "ssd"))
    assert ni.id.startswith("NP4") and ni.js and ni.binary_stream_snapshot and ni.account_nrg
    assert (ni.cfg.max_storage, ni.cfg.max_memory, ni.cfg.unique_tag) == (1048576, 67108864, "az:")
    assert ni.stats.api.level >= 1 and ni.stats.ha_assets >= 1 and not ni.offline
    assert table.active_peers() == [ni.peer] and list(table) == [ni]
    assert table.jetstream_cluster_peers([ni.peer]) == ["p4"]


def test_statsz_without_jetstream_is_kept_but_not_placeable():
    d = json.loads(_statsz())
    del d["statsz"]["jetstream"]
    d["server"].update(flags=0, jetstream=False)
    table = PeerTable()
    ni = table.update_from_statsz(d)
    assert ni.cfg is None and ni.stats is None and not ni.js and table.active_peers() == [ni.peer]
    assert table.tracked_jetstream_servers() == (0, 1)
    assert refusal(table, {"num_replicas": 1}, cluster="pc") == NO + ", peer offline"
    # the deprecated bool alone still means JetStream
    d["server"]["jetstream"] = True
    assert table.update_from_statsz(d).js


def test_statsz_of_another_domain_or_garbage_is_ignored():
    d = json.loads(_statsz())
    d["server"]["domain"] = "elsewhere"
    assert PeerTable(domain="here").update_from_statsz(d) is None
    assert PeerTable().update_from_statsz(d) is not None  # (no own domain: any)
    for junk in (b"", b"{", b"[1]", b"null"):
        assert PeerTable().update_from_statsz(junk) is None


def test_route_info_then_statsz_then_shutdown():
    table = PeerTable(server_id="NLOCAL")
    ni = table.update_from_route_info({"server_id": "NP4", "server_name": "p4", "jetstream": True,
                                       "domain": ""},
                                      local_cluster="pc", local_version="9.9.9")
    assert (ni.cluster, ni.version, ni.tags, ni.cfg, ni.js) == ("pc", "9.9.9", (), None, True)
    assert refusal(table, {"num_replicas": 1}, cluster="pc") == NO + ", peer offline"
    d = json.loads(_statsz())
    d["server"]["id"] = "NP4"
    table.update_from_statsz(d, now=5.0)
    assert table.get(ni.peer).cfg is not None and table.known_servers() == {"NP4": d["server"]["seq"]}
    assert names(select_peer_group(table, "pc", {"num_replicas": 1}), list(table)) == ["p4"]
    # a route INFO again (a new first connection) replaces it: stats gone
    table.update_from_route_info({"server_id": "NP4", "server_name": "p4"}, "pc")
    assert table.get(ni.peer).cfg is None
    table.update_from_statsz(d, now=6.0)
    # SHUTDOWN: offline by name, and the id forgotten
    assert table.server_shutdown(json.dumps({"name": "p4", "id": "NP4"}).encode(), "$SYS.SERVER.NP4.SHUTDOWN")
    assert table.get(ni.peer).offline and table.active_peers() == [] and table.known_servers() == {}
    assert not table.server_shutdown(b"", "$SYS.SERVER.NP4.SHUTDOWN")
    # the next statsz brings it back
    table.update_from_statsz(d, now=7.0)
    assert not table.get(ni.peer).offline
    # an orphan
    assert table.orphans(now=20.0, orphan_max=10.0) == ["NP4"]
    table.mark_offline("NP4")
    assert table.get(ni.peer).offline


def test_shutdown_of_a_server_known_only_by_route():
    table = PeerTable()
    table.update_from_route_info({"server_id": "NQ", "server_name": "q", "jetstream": True},
                                 "pc")
    # (no statsz yet: matched by the ServerInfo's name)
    assert table.server_shutdown(b'{"name": "q", "id": "NQ"}', "$SYS.SERVER.NQ.LAMEDUCK")
    assert table.get(peer_id("q")).offline
    assert not table.server_shutdown(b'{"name": "q"}', "$SYS.SERVER")


def test_own_statsz_is_not_tracked_and_local_entry():
    table = PeerTable(server_id="NP4P4P4P4P4P4P4P4P4P4P4P4P4P4P4P4P4P4P4P4P4P4P4P4P4P4P4X")
    table.update_from_statsz(_statsz())
    assert table.known_servers() == {}
    table.set_local("me", "NME", cluster="pc", tags=["az:2"], cfg=JetStreamConfig(1, 1))
    assert table.get(peer_id("me")).account_nrg and table.server_id == "NME"


# -- live: a five-node nats-server cluster -----------------------------------------------

LIVE = [("p1", ["az:1"], "1GB"), ("p2", ["az:2"], "1GB"), ("p3", ["az:3"], "1GB"),
        ("p4", ["az:1", "ssd"], "1MB"), ("p5", ["az:2", "!jetstream"], "1GB")]

# (every answer here is forced: it does not depend on the shuffle or on stats)
CASES = [
    ("UNIQ", {"num_replicas": 3, "max_bytes": 10 << 20}, ["p1", "p2", "p3"]),
    ("SSD1", {"num_replicas": 1, "placement": {"tags": ["ssd"]}}, ["p4"]),
    ("AZ1", {"num_replicas": 2, "placement": {"tags": ["az:1"]}}, ["p1", "p4"]),
    ("NOTAZ1", {"num_replicas": 2, "placement": {"tags": ["!az:1"]}}, ["p2", "p3"]),
    ("SSD3", {"num_replicas": 3, "placement": {"tags": ["ssd"]}},
     NO + ", exclude tag set, tags not matched ['ssd']"),
    ("R4", {"num_replicas": 4}, NO + ", exclude tag set, server tag not unique"),
    ("R5", {"num_replicas": 5}, NO + ", exclude tag set, server tag not unique"),
    # (a "!az:3" has the unique prefix too: it turns uniqueness off)
    ("NOTAZ3", {"num_replicas": 3, "placement": {"tags": ["!az:3"]}}, ["p1", "p2", "p4"]),
    ("NOTAZ3SSD", {"num_replicas": 2, "placement": {"tags": ["!az:3", "!ssd"]}}, ["p1", "p2"]),
    ("NOTAZ1SSD", {"num_replicas": 3, "placement": {"tags": ["!az:1", "!ssd"]}},
     NO + ", exclude tag set, tags excluded ['az:1']"),
    ("BIG", {"num_replicas": 1, "max_bytes": 2 * GB}, NO + ", exclude tag set, insufficient storage"),
    ("MEMBIG", {"num_replicas": 1, "storage": "memory", "max_bytes": 100 << 20},
     NO + ", exclude tag set, insufficient storage"),
    ("SSDBIG", {"num_replicas": 1, "max_bytes": 10 << 20, "placement": {"tags": ["ssd"]}},
     NO + ", exclude tag set, insufficient storage, tags not matched ['ssd']"),
    ("OTHER", {"num_replicas": 1, "placement": {"cluster": "other"}}, NO),
]


def _live_conf(tmp_path, name, tags, max_file, port, ports):
    path = tmp_path / ("%s.conf" % name)
    path.write_text("""server_name: %s
listen: 127.0.0.1:-1
server_tags: %s
jetstream { store_dir: %s, unique_tag: "az:", max_file_store: %s, max_memory_store: 64MB }
cluster { name: pc, listen: 127.0.0.1:%d, routes: %s }
accounts {
  SYS { users [ {user: sys, password: pw} ] }
  APP { jetstream: enabled, users [ {user: app, password: pw} ] }
}
system_account: SYS
""" % (name, json.dumps(tags), json.dumps(str(tmp_path / name)), max_file, port,
       json.dumps(["nats://127.0.0.1:%d" % p for p in ports])))
    return ["-c", str(path)]


def test_live_placement_matches_nats_server(tmp_path):
    """nats-server places each stream (or refuses it); select_peer_group,
    fed the STATSZ of the same five servers, gives the same peer set or the
    same error text."""
    start = time.monotonic()
    ports = [free_port() for _ in LIVE]
    nodes = []
    try:
        for (name, tags, max_file), port in zip(LIVE, ports):
            nodes.append(ServerProcess("nats-server", _live_conf(tmp_path, name, tags, max_file,
                                                                 port, ports)).start(60))
        statsz, answers = asyncio.run(_live(nodes))
    finally:
        for n in nodes:
            n.stop()
    table = PeerTable()
    for payload in statsz:
        table.update_from_statsz(payload)
    assert sorted(n.name for n in table) == [n for n, _, _ in LIVE]
    for (stream, config, expected), answer in zip(CASES, answers):
        assert answer == expected, (stream, answer)  # (the case is forced in nats-server too)
        try:
            cluster, ids = create_group_for_stream(table, "pc", config, unique_tag="az:",
                                                   rng=random.Random(stream))
            ours = names(ids, list(table))
        except PlacementError as e:
            ours = e.description
        assert ours == answer, (stream, ours, answer)
    assert time.monotonic() - start < 30


async def _live(nodes):
    sys_nc = await nats.connect(nodes[0].url, user="sys", password="pw")
    app = await nats.connect(nodes[1].url, user="app", password="pw")

    async def api(subject, body):
        try:
            msg = await app.request(subject, json.dumps(body).encode(), timeout=1)
        except nats.errors.TimeoutError:
            return {"error": {"description": "timeout"}}
        return json.loads(msg.data)
    deadline = time.monotonic() + 20
    while "error" in await api("$JS.API.STREAM.CREATE.BOOT", {"name": "BOOT", "subjects": ["boot"]}):
        assert time.monotonic() < deadline, "the cluster elected no meta leader"
        await asyncio.sleep(0.1)
    # every server's statsz, as the meta leader hears them on $SYS.SERVER.<id>.STATSZ
    statsz = {}
    inbox = sys_nc.new_inbox()

    async def on(msg):
        statsz[json.loads(msg.data)["server"]["name"]] = msg.data
    await sys_nc.subscribe(inbox, cb=on)
    while len(statsz) < len(nodes):
        await sys_nc.publish("$SYS.REQ.SERVER.PING.STATSZ", b"", reply=inbox)
        await sys_nc.flush()
        await asyncio.sleep(0.1)
        assert time.monotonic() < deadline
    answers = []
    for stream, config, _ in CASES:
        body = dict(config, name=stream, subjects=[stream.lower()])
        r = await api("$JS.API.STREAM.CREATE." + stream, body)
        if "error" in r:
            answers.append(r["error"]["description"] if r["error"].get("err_code") == 10005
                           else r["error"])
            continue
        while True:  # wait until the group's members all show up
            c = r.get("cluster", {})
            members = [c.get("leader")] + [p["name"] for p in c.get("replicas", [])]
            if c.get("leader") and len(members) == config["num_replicas"]:
                break
            assert time.monotonic() < deadline + 10
            await asyncio.sleep(0.05)
            r = await api("$JS.API.STREAM.INFO." + stream, {})
        answers.append(sorted(members))
    await app.close()
    await sys_nc.close()
    return list(statsz.values()), answers


def test_route_members_counts_every_server_once():
    from natsbroker.config.model import ClusterConfig
    from natsbroker.jetstream.cluster.metagroup import expected_size, route_members
    others = ["nats://127.0.0.1:7002", "nats://127.0.0.1:7003", "nats://127.0.0.1:7004"]
    # Four servers, each listing the other three: four (nats-server would
    # expect three, and two pairs could each elect a leader in one term).
    assert route_members(ClusterConfig(host="127.0.0.1", port=7001, routes=others)) == 4
    # The usual config lists every server, itself too: still four.
    every = ["nats://127.0.0.1:7001"] + others
    assert route_members(ClusterConfig(host="127.0.0.1", port=7001, routes=every)) == 4
    assert route_members(ClusterConfig(host="0.0.0.0", port=7001,
                                       routes=["nats://localhost:7001"] + others)) == 4
    assert route_members(ClusterConfig(host="127.0.0.1", port=7001, routes=[])) == 1
    assert route_members(ClusterConfig(port=-1, routes=["nats://u:p@h1:1", "h2:2"])) == 3
    assert expected_size(["a"], route_members(ClusterConfig(port=7001, routes=others))) == 4
    assert expected_size(["a"], 1) == 2
