"""Mirrors and sources with replicas in a natsbroker cluster
(natsbroker.jetstream.remote_sourcing): the stream's leader copies through a
consumer on the origin, wherever the origin's leader is, and proposes each
copy into its group; every replica holds the same copies, a new leader goes
on from where the stream stands, and nothing is copied twice."""

import asyncio

import nats
import pytest
from nats.js.api import StreamSource

from tests.support.cluster import js_cluster, start_node
from tests.test_js_cluster import NAMES, _conf, _until_created
from tests.test_js_cluster_r3 import _info, _lead, _publish, _replicas_agree, _start

# Three-server clusters run one at a time (one xdist worker for the group).
pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters"), pytest.mark.timeout(300)]


def test_r3_mirror_and_source_copy_fail_over_and_agree(tmp_path):
    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_sourcing(tmp_path, ports, servers))


async def _msgs(js, stream, n):
    out = []
    for seq in range(1, n + 1):
        try:
            m = await js.get_msg(stream, seq)
        except nats.js.errors.NotFoundError:
            out.append(None)
            continue
        out.append((m.subject, m.data or b"", dict(m.headers or {})))
    return out


async def _sourcing(tmp_path, ports, servers):
    ncs = {n: await nats.connect(s.url, max_reconnect_attempts=-1) for n, s in servers.items()}
    try:
        js = {n: nc.jetstream(timeout=5) for n, nc in ncs.items()}
        await _until_created(js["js-a"], name="ORIG", subjects=["orig.>"], num_replicas=3)
        for i in range(20):
            await _publish(js[NAMES[i % 3]], "orig.%s.%d" % ("ab"[i % 2], i), b"o%d" % i,
                           headers={"Nats-Msg-Id": "id-%d" % i, "X-N": str(i)})
        # A gap at the origin: the mirror keeps the origin's sequences.
        await js["js-a"].delete_msg("ORIG", 5)

        await _until_created(js["js-b"], name="MIR", num_replicas=3, mirror=StreamSource(name="ORIG"))
        await _until_created(js["js-c"], name="SRC", subjects=["src.>"], num_replicas=3,
                             sources=[StreamSource(name="ORIG", filter_subject="orig.a.>")])
        await _replicas_agree(servers, (19, 1, 20), "MIR")
        await _replicas_agree(servers, (9, 1, 9), "SRC")

        mirrored = await _msgs(js["js-a"], "MIR", 20)
        assert mirrored[4] is None  # (seq 5, deleted at the origin)
        assert [m[0] for m in mirrored if m] == ["orig.%s.%d" % ("ab"[i % 2], i)
                                                 for i in range(20) if i != 4]
        assert mirrored[0][2]["X-N"] == "0" and mirrored[0][2]["Nats-Msg-Id"] == "id-0"
        sourced = await _msgs(js["js-a"], "SRC", 9)
        # (o4 was deleted at the origin before the source began)
        assert [m[1] for m in sourced] == [b"o%d" % i for i in range(0, 20, 2) if i != 4]
        # Nats-Stream-Source: <origin> <origin seq> <filter> <transform dest>
        # <subject> <origin instance>
        fields = sourced[1][2]["Nats-Stream-Source"].split(" ")
        assert fields[:5] == ["ORIG", "3", "orig.a.>", ">", "orig.a.2"] and len(fields[5]) == 8

        info = await _info(js["js-b"], "MIR")
        assert info.mirror.name == "ORIG" and info.mirror.lag == 0
        assert info.mirror.active is not None and info.mirror.active >= 0
        sinfo = await _info(js["js-b"], "SRC")
        assert [s.name for s in sinfo.sources] == ["ORIG"]

        # The mirror's and the source's leader go away; their successors go
        # on from where the streams stand, and the old leader catches up
        # when it is back.
        await _lead(ncs["js-a"], "js-c", "MIR")
        await _lead(ncs["js-a"], "js-c", "SRC")
        servers["js-c"].stop()
        live = {n: s for n, s in servers.items() if n != "js-c"}
        for i in range(20, 30):
            await _publish(js["js-a"], "orig.%s.%d" % ("ab"[i % 2], i), b"o%d" % i)
        await _replicas_agree(live, (29, 1, 30), "MIR", timeout=60)
        await _replicas_agree(live, (14, 1, 14), "SRC", timeout=60)
        servers["js-c"] = _start(tmp_path, ports, "js-c")
        await _replicas_agree(servers, (29, 1, 30), "MIR", timeout=60)
        await _replicas_agree(servers, (14, 1, 14), "SRC", timeout=60)
        sourced = await _msgs(js["js-a"], "SRC", 14)
        assert [m[1] for m in sourced] == [b"o%d" % i for i in range(0, 30, 2) if i != 4]

        # A mirror is read-only; a source stream takes its own publishes too.
        ack = await _publish(js["js-b"], "src.own", b"mine")
        assert ack.stream == "SRC" and ack.seq == 15
        await _replicas_agree(servers, (15, 1, 15), "SRC")

        # A source added by an update is copied from then on.
        cfg = (await _info(js["js-a"], "SRC")).config
        cfg.sources = list(cfg.sources) + [StreamSource(name="ORIG", filter_subject="orig.b.>")]
        await js["js-a"].update_stream(cfg)
        await _replicas_agree(servers, (30, 1, 30), "SRC", timeout=60)
    finally:
        for nc in ncs.values():
            await nc.close()


def test_a_mirror_of_a_stream_on_another_server(tmp_path):
    """An R1 origin on one server, an R3 mirror led by another: copied over
    the routes, and on when the mirror's leader moves."""
    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_remote_origin(servers))


async def _remote_origin(servers):
    nc = await nats.connect(servers["js-a"].url)
    try:
        js = nc.jetstream(timeout=5)
        await _until_created(js, name="ONE", subjects=["one.>"], num_replicas=1)
        for i in range(10):
            await _publish(js, "one.%d" % i, b"x" * i)
        home = (await _info(js, "ONE")).cluster.leader
        await _until_created(js, name="COPY", num_replicas=3, mirror=StreamSource(name="ONE"))
        for leader in [n for n in NAMES if n != home]:
            await _lead(nc, leader, "COPY")
            await _publish(js, "one.%s" % leader, b"y")
        await _replicas_agree(servers, (12, 1, 12), "COPY")
        got = await _msgs(js, "COPY", 12)
        assert [m[1] for m in got] == [b"x" * i for i in range(10)] + [b"y", b"y"]
    finally:
        await nc.close()


def _tagged_conf(tmp_path, name, ports):
    args = _conf(tmp_path, name, ports)
    path = tmp_path / ("%s.conf" % name)
    path.write_text("server_tags: [\"node:%s\"]\n" % name + path.read_text())
    return args


def test_streams_of_one_replica_copy_from_other_servers(tmp_path):
    """In a cluster, a mirror or source of one replica copies through origin
    consumers too: its origins may live on other servers."""
    start = lambda ports, n: start_node(  # noqa: E731
        "natsbroker", lambda p: _tagged_conf(tmp_path, n, p), ports, n)
    with js_cluster(start, NAMES) as (ports, servers):
        asyncio.run(_r1_links(servers))


async def _r1_links(servers):
    nc = await nats.connect(servers["js-a"].url)
    try:
        js = nc.jetstream(timeout=5)

        def on(node):
            return nats.js.api.Placement(tags=["node:" + node])
        await _until_created(js, name="OA", subjects=["oa.>"], placement=on("js-a"))
        await _until_created(js, name="OB", subjects=["ob.>"], placement=on("js-b"))
        for i in range(6):
            await _publish(js, "oa.%d" % i, b"a%d" % i)
            await _publish(js, "ob.%d" % i, b"b%d" % i)
        await _until_created(js, name="MC", mirror=StreamSource(name="OA"), placement=on("js-c"))
        await _until_created(js, name="SC", placement=on("js-c"), sources=[
            StreamSource(name="OA"), StreamSource(name="OB", filter_subject="ob.1")])
        await _replicas_agree({"js-c": servers["js-c"]}, (6, 1, 6), "MC")
        await _replicas_agree({"js-c": servers["js-c"]}, (7, 1, 7), "SC")
        got = await _msgs(js, "SC", 7)
        assert sorted(m[1] for m in got) == sorted([b"a%d" % i for i in range(6)] + [b"b1"])
        info = await _info(js, "MC")
        assert info.mirror.name == "OA" and info.mirror.error is None
        # More at the origin: followed.
        await _publish(js, "oa.more", b"more")
        await _replicas_agree({"js-c": servers["js-c"]}, (7, 1, 7), "MC")
        await _replicas_agree({"js-c": servers["js-c"]}, (8, 1, 8), "SC")
    finally:
        await nc.close()


def test_a_full_source_stream_asks_again_once_it_has_room(tmp_path):
    """``discard: new`` at ``max_msgs``: the leader proposes no copy the
    limit would refuse and asks the origin again later (nats-server's
    leader-side check), so none is lost."""
    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_full(servers))


async def _full(servers):
    nc = await nats.connect(servers["js-a"].url)
    try:
        js = nc.jetstream(timeout=5)
        await _until_created(js, name="FROM", subjects=["from.>"], num_replicas=3)
        for i in range(10):
            await _publish(js, "from.%d" % i, b"f%d" % i)
        await _until_created(js, name="CAP", num_replicas=3, max_msgs=4, discard="new",
                             sources=[StreamSource(name="FROM")])
        await _replicas_agree(servers, (4, 1, 4), "CAP")
        await asyncio.sleep(3)
        await _replicas_agree(servers, (4, 1, 4), "CAP")
        await js.purge_stream("CAP")
        await _replicas_agree(servers, (4, 5, 8), "CAP", timeout=60)
        await js.purge_stream("CAP")
        await _replicas_agree(servers, (2, 9, 10), "CAP", timeout=60)
        got = await _msgs(js, "CAP", 10)
        assert [m[1] for m in got if m] == [b"f8", b"f9"]
    finally:
        await nc.close()
