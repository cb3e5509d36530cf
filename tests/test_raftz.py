"""/raftz against nats-server: a standalone server has no Raft node (404,
nats-server's words), and a three-server JetStream cluster with an R3
stream lists its meta group and stream group under the system account,
each with the same fields in the same order, one leader per group, and its
two peers by name. Also the ``acc`` and ``group`` filters."""

import asyncio
import json
import re
import urllib.error
import urllib.request

import nats
import pytest

from tests.support.cluster import js_cluster, start_node
from tests.support.servers import ServerProcess
from tests.test_js_cluster import NAMES, _conf, _until_created

pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters")]


def _get(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.parametrize("kind", ["nats-server", "natsbroker"])
def test_a_standalone_server_has_no_raft_nodes(kind):
    with ServerProcess(kind, ["-js", "-m", "-1"]) as s:
        assert _get(s.http_port, "/raftz") == (404, "No Raft nodes registered")


def _shape(kind, tmp_path):
    start = lambda ports, n: start_node(kind, lambda p: _conf(tmp_path / kind, n, p), ports, n)  # noqa: E731
    (tmp_path / kind).mkdir()
    with js_cluster(start, NAMES, formed=kind == "natsbroker") as (_ports, servers):
        asyncio.run(_stream(servers))
        out = {}
        for n, s in servers.items():
            status, body = _get(s.http_port, "/raftz")
            assert status == 200, body
            status, acc = _get(s.http_port, "/raftz?acc=$G")
            assert status == 200, acc
            out[n] = (body, acc)
        filtered = {q: _get(servers["js-a"].http_port, "/raftz" + q)
                    for q in ("?acc=APP", "?group=_meta_", "?group=nope")}
        return out, filtered


async def _stream(servers):
    nc = await nats.connect(servers["js-a"].url)
    try:
        js = nc.jetstream(timeout=5)
        await _until_created(js, name="R3", subjects=["r3.>"], num_replicas=3)
        for i in range(5):
            await js.publish("r3.%d" % i, b"x")
        # (every replica has applied them: the groups' indexes settle)
        await asyncio.sleep(1.5)
    finally:
        await nc.close()


def _normal(bodies):
    """The groups of one server, from /raftz and /raftz?acc=$G (where a
    stream's group is listed: under its stream's account)."""
    sys_doc, acc_doc = (json.loads(b) for b in bodies)
    groups, where = {}, {}
    for doc in (sys_doc, acc_doc):
        for account, gs in doc.items():
            for gname, g in gs.items():
                groups[gname], where[gname] = g, account
    names = sorted(groups)
    assert len(names) == 2 and names[0] == "S-R3F-" + names[0][6:] and names[1] == "_meta_", names
    assert where["_meta_"] == "$SYS"
    stream_home = (where[names[0]], groups[names[0]]["system_account"],
                   groups[names[0]]["traffic_account"])
    out = {"home": stream_home}
    for gname, g in groups.items():
        key = "_meta_" if gname == "_meta_" else "stream"
        always = [k for k in g if k not in ("leader_since", "voted_for", "catching_up",
                                            "observer", "leader")]
        peers = g["peers"]
        assert len(peers) == 2 and all(re.fullmatch(r"[A-Za-z0-9]{8}", p) for p in peers)
        out[key] = {"fields": always, "state": g["state"], "size": g["size"],
                    "quorum": g["quorum_needed"], "wal": list(g["wal"]),
                    "peer_fields": sorted({f for p in peers.values() for f in p}),
                    "peer_names": sorted(p["name"] for p in peers.values()),
                    "known": [p["known"] for p in peers.values()],
                    "leader": g.get("leader") in {_peer_of(n) for n in NAMES},
                    "leader_since": ("leader_since" in g) == (g["state"] == "LEADER"),
                    "ever": g["ever_had_leader"], "applied": g["applied"] > 0}
    return out


def _peer_of(name):
    from natsbroker.cluster.raft.wire import peer_id
    return peer_id(name)


def test_raftz_of_a_jetstream_cluster_is_nats_servers(tmp_path):
    got = {}
    for kind in ("nats-server", "natsbroker"):
        bodies, filtered = _shape(kind, tmp_path)
        shapes = {n: _normal(b) for n, b in bodies.items()}
        homes = {s.pop("home") for s in shapes.values()}
        # (a stream's group is listed under its account, its traffic in $SYS)
        assert homes == {("$G", True, "$SYS")}, (kind, homes)
        # One leader per group, the others following.
        for g in ("_meta_", "stream"):
            assert sorted(s[g]["state"] for s in shapes.values()) == \
                ["FOLLOWER", "FOLLOWER", "LEADER"], (kind, g)
        # Each server names its two peers.
        for n, s in shapes.items():
            assert s["_meta_"]["peer_names"] == sorted(set(NAMES) - {n}), (kind, n)
        assert bodies["js-a"][0].startswith('{\n   "$SYS": {\n      "'), bodies["js-a"][0][:40]
        # The shape of each group as its leader shows it, and as its followers do.
        by_role = {}
        for s in shapes.values():
            for g, shape in s.items():
                by_role.setdefault((g, shape["state"]), set()).add(
                    json.dumps({k: v for k, v in shape.items() if k != "peer_names"},
                               sort_keys=True))
        got[kind] = (by_role,
                     {q: (st, json.loads(b) if st == 200 else b) for q, (st, b) in filtered.items()})
    ns, nb = got["nats-server"], got["natsbroker"]
    assert nb[0] == ns[0]
    # Filters: another account has none, a group filter keeps that group.
    for q in ("?acc=APP", "?group=nope"):
        assert nb[1][q] == ns[1][q] == (200, {}), (q, nb[1][q], ns[1][q])
    assert list(nb[1]["?group=_meta_"][1]["$SYS"]) == list(ns[1]["?group=_meta_"][1]["$SYS"]) \
        == ["_meta_"]


def test_group_status_of_a_lone_node():
    """A node alone, then leading a group of one: every field, in order."""
    import random

    from natsbroker.cluster.raft.node import Node
    from natsbroker.cluster.raft.raftz import group_status
    from natsbroker.cluster.raft.storage import MemoryStorage
    clock = [1_000_000.0]
    node = Node("G", "AAAAAAAA", MemoryStorage(), clock=lambda: clock[0], rng=random.Random(1),
                peers=["AAAAAAAA", "BBBBBBBB", "CCCCCCCC"])
    node.start()
    st = group_status(node, clock[0], name_of=lambda p: "srv-" + p[0])
    assert list(st) == ["id", "state", "size", "quorum_needed", "committed", "applied",
                        "ever_had_leader", "term", "pterm", "pindex", "system_account",
                        "traffic_account", "ipq_proposal_len", "ipq_entry_len", "ipq_resp_len",
                        "ipq_apply_len", "wal", "peers"]
    assert (st["id"], st["state"], st["size"], st["quorum_needed"], st["ever_had_leader"]) == \
        ("AAAAAAAA", "FOLLOWER", 3, 2, False)
    assert st["wal"] == {"messages": 0, "bytes": 0, "first_seq": 1, "first_ts": "0001-01-01T00:00:00Z",
                         "last_seq": 0, "last_ts": "0001-01-01T00:00:00Z", "consumer_count": 0}
    assert st["peers"] == {"BBBBBBBB": {"name": "srv-B", "known": True},
                           "CCCCCCCC": {"name": "srv-C", "known": True}}
    # Alone in its group, it elects itself and leads.
    node = Node("G", "AAAAAAAA", MemoryStorage(), clock=lambda: clock[0], rng=random.Random(1),
                peers=["AAAAAAAA"])
    node.start()
    node.campaign(immediately=True)
    clock[0] += 1
    node.tick()
    st = group_status(node, clock[0])
    assert st["state"] == "LEADER" and st["leader"] == "AAAAAAAA" and st["ever_had_leader"]
    assert st["voted_for"] == "AAAAAAAA" and st["term"] == 1
    assert st["wal"]["messages"] >= 1 and st["wal"]["bytes"] > 0
    assert list(st).index("leader") < list(st).index("leader_since") < list(st).index("ever_had_leader")
