"""Replicated streams in a natsbroker cluster (natsbroker.jetstream.cluster.
streamgroup): an R3 stream's Raft group elects a leader, which proposes each
publish and acks it once a quorum has it; every replica stores the same
messages, and a killed leader's place is taken without losing an acked one.
"""

import asyncio
import json
import os
import signal

import nats
import pytest

from tests.support.cluster import js_cluster, start_node
from tests.support.http import get_json
from tests.support.wait import eventually_async
from tests.test_js_cluster import NAMES, _acc_conf, _conf, _until_created

# Three-server clusters run one at a time (one xdist worker for the group):
# several at once on a 2-core machine starve their elections.
pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters")]


def _start(tmp_path, ports, name):
    return start_node("natsbroker", lambda p: _conf(tmp_path, name, p), ports, name)


def _stored(server, stream="R3"):
    """(messages, first_seq, last_seq) of ``stream`` on ``server``'s replica."""
    jsz = get_json(server.http_port, "/jsz?accounts=true&streams=true")
    for acc in jsz.get("account_details") or ():
        for s in acc.get("stream_detail") or ():
            if s["name"] == stream:
                st = s["state"]
                return st["messages"], st["first_seq"], st["last_seq"]
    return None


async def _replicas_agree(servers, want, stream="R3", timeout=30):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = {n: _stored(s, stream) for n, s in servers.items()}
        if all(v == want for v in got.values()):
            return got
        assert asyncio.get_running_loop().time() < deadline, \
            "replicas never all held %r: %r" % (want, got)
        await asyncio.sleep(0.2)


def test_an_r3_stream_replicates_fails_over_and_catches_up(tmp_path):
    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_r3(tmp_path, ports, servers))


async def _info(js, name="R3"):
    async def got():
        try:
            info = await js.stream_info(name)
        except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
            return None
        return info if info.cluster and info.cluster.leader else None
    return await eventually_async(got, timeout=30, what="stream info from a leader")


async def _lead(nc, server, stream="R3"):
    """Make ``server`` the leader of ``stream`` (a stepdown naming it, asked
    again while another leads), and say so."""
    js = nc.jetstream(timeout=5)
    for attempt in range(5):
        if (await _info(js, stream)).cluster.leader == server:
            break
        await nc.request("$JS.API.STREAM.LEADER.STEPDOWN." + stream,
                         json.dumps({"placement": {"preferred": server}}).encode(), timeout=5)
        await asyncio.sleep(1)
    assert (await _info(js, stream)).cluster.leader == server


async def _publish(js, subject, data, **kw):
    async def sent():
        try:
            return await js.publish(subject, data, timeout=2, **kw)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            return None
    return await eventually_async(sent, timeout=30, what="an ack for %s" % subject)


async def _r3(tmp_path, ports, servers):
    ncs = {n: await nats.connect(s.url, max_reconnect_attempts=-1) for n, s in servers.items()}
    try:
        js = {n: nc.jetstream(timeout=5) for n, nc in ncs.items()}
        created = await _until_created(js["js-a"], name="R3", subjects=["r3.>"], num_replicas=3)
        assert created.config.num_replicas == 3 and created.did_create
        info = await _info(js["js-b"])
        assert info.cluster.name == "jsc" and info.cluster.leader in NAMES
        assert {r.name for r in info.cluster.replicas} == set(NAMES) - {info.cluster.leader}
        # Acked only once a quorum stored them: from every server, in order.
        seq = 0
        for i in range(30):
            ack = await js[NAMES[i % 3]].publish("r3.%d" % (i % 4), b"m%d" % i)
            seq += 1
            assert (ack.stream, ack.seq, ack.duplicate) == ("R3", seq, None)
        await _replicas_agree(servers, (30, 1, 30))
        # The publish checks, made alike on every replica.
        dup = await js["js-c"].publish("r3.x", b"d", headers={"Nats-Msg-Id": "m-1"})
        again = await js["js-a"].publish("r3.x", b"d", headers={"Nats-Msg-Id": "m-1"})
        assert (dup.seq, again.seq, again.duplicate) == (31, 31, True)
        with pytest.raises(nats.js.errors.APIError) as e:
            await js["js-b"].publish("r3.x", b"e", headers={"Nats-Expected-Last-Sequence": "7"})
        assert e.value.err_code == 10071
        await _replicas_agree(servers, (31, 1, 31))
        # A message delete and a purge are replicated too.
        assert await js["js-a"].delete_msg("R3", 1)
        await js["js-b"].purge_stream("R3", subject="r3.1")
        await _replicas_agree(servers, (31 - 1 - 8, 3, 31))
        # The leader steps down; the new one goes on from the same sequence.
        old = (await _info(js["js-a"])).cluster.leader
        elected = await ncs["js-a"].subscribe("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.R3")
        await ncs["js-a"].flush()
        r = await ncs["js-c"].request("$JS.API.STREAM.LEADER.STEPDOWN.R3", b"", timeout=5)
        assert json.loads(r.data) == {
            "type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response", "success": True}

        async def moved():
            info = await _info(js["js-c"])
            return info.cluster.leader if info.cluster.leader != old else None
        new = await eventually_async(moved, timeout=30, what="a new stream leader")
        adv = json.loads((await elected.next_msg(timeout=10)).data)
        assert adv["type"] == "io.nats.jetstream.advisory.v1.stream_leader_elected"
        assert (adv["stream"], adv["leader"]) == ("R3", new) and "account" not in adv
        assert sorted(r["name"] for r in adv["replicas"]) == sorted(NAMES)
        ack = await _publish(js["js-a"], "r3.9", b"after stepdown")
        assert ack.seq == 32
        # kill -9 of the leader: the other two elect one and keep the data.
        leader = (await _info(js["js-a"])).cluster.leader
        survivors = [n for n in NAMES if n != leader]
        os.kill(servers[leader].proc.pid, signal.SIGKILL)
        servers[leader].proc.wait()
        ack = await _publish(js[survivors[0]], "r3.9", b"after kill")
        assert ack.seq == 33
        await _replicas_agree({n: servers[n] for n in survivors}, (24, 3, 33))
        # Back on its store: it catches up from the new leader.
        servers[leader] = _start(tmp_path, ports, leader)
        await _replicas_agree(servers, (24, 3, 33))
        # KV with replicas: puts and gets through the leader.
        async def made():
            # (answered by the new group's first leader: on a loaded machine
            # its election may outlast a client's timeout; the same create
            # again is answered with the bucket's info)
            try:
                return await js[survivors[1]].create_key_value(bucket="CFG", replicas=3)
            except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
                return None
        kv = await eventually_async(made, timeout=60, what="the KV bucket created")
        await kv.put("a", b"1")
        kv2 = await js[survivors[0]].key_value("CFG")
        assert (await kv2.get("a")).value == b"1"
        assert (await js[survivors[0]].stream_info("KV_CFG")).config.num_replicas == 3
        # Deleted everywhere, with its Raft group's log.
        assert await js["js-b"].delete_stream("R3")

        async def gone():
            return all(_stored(s) is None for s in servers.values())
        await eventually_async(gone, timeout=30, what="R3 gone from every replica")
        logs = [d for n in NAMES for d in os.listdir(tmp_path / n / "jetstream" / "$SYS" / "_js_")]
        assert sum(d.startswith("S-R3F-") for d in logs) == 3, logs  # KV_CFG's, not R3's
    finally:
        for nc in ncs.values():
            await nc.close()


def test_durable_consumers_of_an_r3_stream_survive_their_leader(tmp_path):
    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_consumers(servers))


async def _fetch(sub, n):
    async def got():
        try:
            return await sub.fetch(n, timeout=2)
        except (nats.errors.TimeoutError, nats.js.errors.NotFoundError):
            return None
    return await eventually_async(got, timeout=30, what="%d messages fetched" % n)


async def _consumers(servers):
    ncs = {n: await nats.connect(s.url, max_reconnect_attempts=-1) for n, s in servers.items()}
    try:
        js = {n: nc.jetstream(timeout=5) for n, nc in ncs.items()}
        await _until_created(js["js-a"], name="R3", subjects=["r3.>"], num_replicas=3)
        for i in range(10):
            await _publish(js["js-b"], "r3.%d" % i, b"m%d" % i)
        await js["js-c"].add_consumer("R3", durable_name="D", ack_policy="explicit")
        sub = await js["js-a"].pull_subscribe("r3.>", durable="D", stream="R3")
        first = await _fetch(sub, 4)
        assert [m.data for m in first] == [b"m0", b"m1", b"m2", b"m3"]
        for m in first:
            await m.ack_sync()

        # Every replica keeps the consumer (/jsz lists it, as nats-server's).
        async def kept():
            got = {}
            for n, s in servers.items():
                jsz = get_json(s.http_port, "/jsz?accounts=true&streams=true&consumers=true")
                for acc in jsz.get("account_details") or ():
                    for st in acc.get("stream_detail") or ():
                        for c in st.get("consumer_detail") or ():
                            got[n] = c["name"]
            return got if got == {n: "D" for n in NAMES} else None
        await eventually_async(kept, timeout=10, what="D on every replica")
        leader = (await _info(js["js-a"])).cluster.leader
        await asyncio.sleep(0.5)  # the acks' replicated state commits
        os.kill(servers[leader].proc.pid, signal.SIGKILL)
        servers[leader].proc.wait()
        other = next(n for n in NAMES if n != leader)
        ci = None

        async def info():
            try:
                return await js[other].consumer_info("R3", "D")
            except (nats.errors.TimeoutError, nats.js.errors.NotFoundError):
                return None
        ci = await eventually_async(info, timeout=30, what="D's info from a new leader")
        assert ci.ack_floor.stream_seq == 4 and ci.config.durable_name == "D"
        sub2 = await js[other].pull_subscribe("r3.>", durable="D", stream="R3")
        rest = await _fetch(sub2, 6)
        assert [m.data for m in rest] == [b"m%d" % i for i in range(4, 10)]
        assert await js[other].delete_consumer("R3", "D")
    finally:
        for nc in ncs.values():
            await nc.close()


def test_a_replica_behind_a_compacted_log_catches_up_from_the_leader(tmp_path):
    # The log is compacted at shutdown (a snapshot, as nats-server's): a
    # replica that was away for what it covers gets the stream's messages
    # from the leader over the sync subject instead.
    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_behind(tmp_path, ports, servers))


async def _behind(tmp_path, ports, servers):
    nc = await nats.connect(servers["js-a"].url, max_reconnect_attempts=-1)
    try:
        js = nc.jetstream(timeout=5)
        await _until_created(js, name="R3", subjects=["r3.>"], num_replicas=3)
        for i in range(10):
            await _publish(js, "r3.%d" % (i % 3), b"m%d" % i)
        await _replicas_agree(servers, (10, 1, 10))
        # js-c goes away; the others go on, delete, purge, and shut down.
        servers["js-c"].stop()
        for i in range(10, 40):
            await _publish(js, "r3.%d" % (i % 3), b"m%d" % i, headers={"Nats-Msg-Id": "id-%d" % i})
        assert await js.delete_msg("R3", 12)
        await js.purge_stream("R3", subject="r3.0")
    finally:
        await nc.close()
    # 40 - 1 deleted (seq 12 is on subject .2) - 14 on subject .0 (0, 3, ..., 39)
    want = (40 - 1 - 14, 2, 40)
    await _replicas_agree({n: servers[n] for n in ("js-a", "js-b")}, want)
    for n in ("js-a", "js-b"):
        servers[n].stop()
    for n in ("js-a", "js-b"):
        logs = [f for f in os.listdir(tmp_path / n / "jetstream" / "$SYS" / "_js_")]
        assert len(logs) == 2, logs  # the meta group's and the stream's
    for n in NAMES:
        servers[n] = _start(tmp_path, ports, n)
    await _replicas_agree(servers, want, timeout=60)
    # (from the leader's store: the log it had was compacted)
    assert "caught up to sequence 40" in servers["js-c"].log()
    nc = await nats.connect(servers["js-c"].url, max_reconnect_attempts=-1)
    try:
        js = nc.jetstream(timeout=5)
        # Caught up so, js-c knows the Nats-Msg-Ids of what it copied: led
        # by it, a publish repeating one is the duplicate its peers see.
        await _lead(nc, "js-c")
        ack = await _publish(js, "r3.1", b"m37", headers={"Nats-Msg-Id": "id-37"})
        assert (ack.seq, ack.duplicate) == (38, True)
        await _replicas_agree(servers, want)
        ack = await _publish(js, "r3.1", b"after")
        assert ack.seq == 41
        msg = await js.get_msg("R3", 14)
        assert msg.data == b"m13"
        # A memory stream's replica restarts empty and is caught up.
        await _until_created(js, name="M3", subjects=["m3.>"], num_replicas=3, storage="memory")
        for i in range(10):
            await _publish(js, "m3.%d" % i, b"m%d" % i)
        await _replicas_agree(servers, (10, 1, 10), stream="M3")
        servers["js-b"].stop()
        servers["js-b"] = _start(tmp_path, ports, "js-b")
        await _replicas_agree(servers, (10, 1, 10), stream="M3", timeout=60)
    finally:
        await nc.close()


def test_scaling_a_stream_from_one_replica_to_three_and_back(tmp_path):
    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_scale(servers))


async def _scale(servers):
    nc = await nats.connect(servers["js-a"].url, max_reconnect_attempts=-1)
    try:
        js = nc.jetstream(timeout=10)
        await _until_created(js, name="SC", subjects=["sc.>"], num_replicas=1)
        for i in range(20):
            await _publish(js, "sc.%d" % (i % 4), b"m%d" % i)
        await js.add_consumer("SC", durable_name="D", ack_policy="explicit")
        sub = await js.pull_subscribe("sc.>", durable="D", stream="SC")
        for m in await _fetch(sub, 5):
            await m.ack_sync()
        hosts = [n for n, s in servers.items() if _stored(s, "SC")]
        assert len(hosts) == 1
        # 1 -> 3: the new replicas catch up to the host's messages.
        info = await js.update_stream(name="SC", subjects=["sc.>"], num_replicas=3)
        assert info.config.num_replicas == 3
        await _replicas_agree(servers, (20, 1, 20), stream="SC", timeout=60)
        ack = await _publish(js, "sc.x", b"after scale up")
        assert ack.seq == 21
        await _replicas_agree(servers, (21, 1, 21), stream="SC")
        info = await _info(js, "SC")
        assert len(info.cluster.replicas) == 2
        # The consumer made before the scale-up is on every replica now: it
        # survives its leader stepping down.
        old = info.cluster.leader
        r = await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.SC", b"", timeout=5)
        assert json.loads(r.data).get("success")

        async def moved():
            got = await _info(js, "SC")
            return got if got.cluster.leader != old else None
        await eventually_async(moved, timeout=30, what="a new leader of SC")

        async def d_info():
            try:
                return await js.consumer_info("SC", "D")
            except (nats.errors.TimeoutError, nats.js.errors.NotFoundError):
                return None
        ci = await eventually_async(d_info, timeout=30, what="D from the new leader")
        assert ci.ack_floor.stream_seq == 5
        # 3 -> 1: two replicas go; the one kept goes on as an R1 stream with
        # the consumer where it was.
        info = await js.update_stream(name="SC", subjects=["sc.>"], num_replicas=1)
        assert info.config.num_replicas == 1

        async def one_left():
            return [n for n, s in servers.items() if _stored(s, "SC")] if sum(
                1 for s in servers.values() if _stored(s, "SC")) == 1 else None
        (kept,) = await eventually_async(one_left, timeout=30, what="one replica left")
        ack = await _publish(js, "sc.y", b"after scale down")
        assert ack.seq == 22 and _stored(servers[kept], "SC") == (22, 1, 22)

        async def rest():
            try:
                return await sub.fetch(17, timeout=2)
            except (nats.errors.TimeoutError, nats.js.errors.NotFoundError):
                return None
        msgs = await eventually_async(rest, timeout=30, what="the rest through D")
        assert [m.metadata.sequence.stream for m in msgs][:1] == [6]
    finally:
        await nc.close()


def test_peer_remove_moves_a_replica_to_a_spare_server(tmp_path):
    names = NAMES + ("js-d",)
    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), names) as (ports, servers):
        asyncio.run(_peer_remove(servers))


async def _peer_remove(servers):
    nc = await nats.connect(servers["js-a"].url, max_reconnect_attempts=-1)
    try:
        js = nc.jetstream(timeout=10)
        await _until_created(js, name="PR", subjects=["pr.>"], num_replicas=3)
        for i in range(20):
            await _publish(js, "pr.%d" % (i % 4), b"m%d" % i)
        await js.add_consumer("PR", durable_name="D", ack_policy="explicit")
        sub = await js.pull_subscribe("pr.>", durable="D", stream="PR")
        for m in await _fetch(sub, 5):
            await m.ack_sync()
        info = await _info(js, "PR")
        members = {info.cluster.leader} | {r.name for r in info.cluster.replicas}
        (spare,) = set(servers) - members
        gone = info.cluster.leader

        async def remove(body):
            r = await nc.request("$JS.API.STREAM.PEER.REMOVE.PR", body, timeout=5)
            return json.loads(r.data)
        # nats-server's refusals, in its words.
        assert (await remove(b""))["error"] == {
            "code": 400, "err_code": 10003, "description": "bad request"}
        assert (await remove(b'{"peer": ""}'))["error"]["err_code"] == 10003
        assert (await remove(b'{"peer": "%s"}' % spare.encode()))["error"] == {
            "code": 400, "err_code": 10040, "description": "peer not a member"}
        r = await nc.request("$JS.API.STREAM.PEER.REMOVE.NOPE", b'{"peer": "js-a"}', timeout=5)
        assert json.loads(r.data)["error"]["err_code"] == 10059
        # The leader leaves; the spare server takes its place and is caught up.
        assert await remove(json.dumps({"peer": gone}).encode()) == {
            "type": "io.nats.jetstream.api.v1.stream_remove_peer_response", "success": True}

        async def moved():
            got = await _info(js, "PR")
            now = {got.cluster.leader} | {r.name for r in got.cluster.replicas}
            return got if now == (members - {gone}) | {spare} else None
        await eventually_async(moved, timeout=60, what="the spare server in PR's group")
        kept = {n: s for n, s in servers.items() if n != gone}
        await _replicas_agree(kept, (20, 1, 20), stream="PR", timeout=60)
        assert _stored(servers[gone], "PR") is None
        ack = await _publish(js, "pr.x", b"after the move")
        assert ack.seq == 21
        await _replicas_agree(kept, (21, 1, 21), stream="PR")
        # The durable consumer moved with it, where it was.
        msgs = await _fetch(sub, 16)
        assert [m.metadata.sequence.stream for m in msgs] == list(range(6, 22))
        # A running group grows (3 -> 4) and shrinks (4 -> 3) by update.
        info = await js.update_stream(name="PR", subjects=["pr.>"], num_replicas=4)
        assert info.config.num_replicas == 4
        await _replicas_agree(servers, (21, 1, 21), stream="PR", timeout=60)
        ack = await _publish(js, "pr.y", b"four")
        assert ack.seq == 22
        await _replicas_agree(servers, (22, 1, 22), stream="PR")
        info = await js.update_stream(name="PR", subjects=["pr.>"], num_replicas=3)
        assert info.config.num_replicas == 3

        async def three():
            return sum(1 for s in servers.values() if _stored(s, "PR")) == 3
        await eventually_async(three, timeout=30, what="three replicas left")
        ack = await _publish(js, "pr.z", b"three")
        assert ack.seq == 23
        info = await _info(js, "PR")
        assert len(info.cluster.replicas) == 2
    finally:
        await nc.close()


def test_work_queue_and_interest_retention_replicate_their_removals(tmp_path):
    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_retention(servers))


async def _retention(servers):
    nc = await nats.connect(servers["js-b"].url, max_reconnect_attempts=-1)
    try:
        js = nc.jetstream(timeout=10)
        await _until_created(js, name="WQ", subjects=["wq.>"], num_replicas=3,
                             retention="workqueue")
        await _until_created(js, name="IN", subjects=["in.>"], num_replicas=3,
                             retention="interest")
        # Interest, nobody interested: numbered, not kept, on every replica.
        for i in range(5):
            ack = await _publish(js, "in.%d" % i, b"i%d" % i)
            assert ack.seq == i + 1
        await _replicas_agree(servers, (0, 6, 5), stream="IN")
        # With a consumer, kept until it acks.
        await js.add_consumer("IN", durable_name="I", ack_policy="explicit")
        isub = await js.pull_subscribe("in.>", durable="I", stream="IN")
        for i in range(5, 9):
            await _publish(js, "in.%d" % i, b"i%d" % i)
        await _replicas_agree(servers, (4, 6, 9), stream="IN")
        for m in await _fetch(isub, 2):
            await m.ack_sync()
        await _replicas_agree(servers, (2, 8, 9), stream="IN")
        # A work queue: each acked message leaves every replica.
        for i in range(10):
            await _publish(js, "wq.%d" % i, b"w%d" % i)
        await js.add_consumer("WQ", durable_name="W", ack_policy="explicit")
        wsub = await js.pull_subscribe("wq.>", durable="W", stream="WQ")
        for m in await _fetch(wsub, 6):
            await m.ack_sync()
        await _replicas_agree(servers, (4, 7, 10), stream="WQ")
        # A new leader has the same queue and goes on from it.
        old = (await _info(js, "WQ")).cluster.leader
        r = await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.WQ", b"", timeout=5)
        assert json.loads(r.data).get("success")

        async def moved():
            got = await _info(js, "WQ")
            return got if got.cluster.leader != old else None
        await eventually_async(moved, timeout=30, what="a new leader of WQ")
        wsub2 = await js.pull_subscribe("wq.>", durable="W", stream="WQ")
        rest = await _fetch(wsub2, 4)
        assert [m.data for m in rest] == [b"w6", b"w7", b"w8", b"w9"]
        for m in rest:
            await m.ack_sync()
        await _replicas_agree(servers, (0, 11, 10), stream="WQ")
    finally:
        await nc.close()


def test_server_remove_takes_a_server_out_and_moves_its_streams(tmp_path):
    names = NAMES + ("js-d",)
    start = lambda ports, n: start_node("natsbroker", lambda p: _acc_conf(tmp_path, n, p), ports, n)  # noqa: E731
    with js_cluster(start, names) as (ports, servers):
        asyncio.run(_server_remove(servers))


async def _server_remove(servers):
    app = await nats.connect(servers["js-a"].url, user="app", password="pw",
                             max_reconnect_attempts=-1)
    sys_nc = await nats.connect(servers["js-a"].url, user="sys", password="pw")
    try:
        js = app.jetstream(timeout=10)
        await _until_created(js, name="SR", subjects=["sr.>"], num_replicas=3)
        for i in range(10):
            await _publish(js, "sr.%d" % i, b"m%d" % i)
        info = await _info(js, "SR")
        members = {info.cluster.leader} | {r.name for r in info.cluster.replicas}
        meta_leader = get_json(servers["js-a"].http_port, "/jsz")["meta_cluster"]["leader"]
        gone = next(n for n in sorted(members) if n != meta_leader)

        async def remove(body):
            r = await sys_nc.request("$JS.API.SERVER.REMOVE", body, timeout=10)
            return json.loads(r.data)
        kind = "io.nats.jetstream.api.v1.meta_server_remove_response"
        assert await remove(b"") == {"type": kind, "error": {
            "code": 400, "err_code": 10003, "description": "bad request"}}
        assert await remove(b'{"peer": "nobody"}') == {"type": kind, "error": {
            "code": 400, "err_code": 10044, "description": "server is not a member of the cluster"}}
        # An account's user cannot ask (nobody answers it there).
        with pytest.raises(nats.errors.Error):
            await app.request("$JS.API.SERVER.REMOVE", json.dumps({"peer": gone}).encode(),
                              timeout=2)
        # Answered once the meta group has committed it.
        assert await remove(json.dumps({"peer": gone}).encode()) == {"type": kind, "success": True}
        assert "JetStream being DISABLED, our server was removed from the cluster" in \
            await eventually_async(lambda: servers[gone].log() if "DISABLED" in servers[gone].log()
                                   else None, timeout=30, what="the removed server's log")
        rest = {n: s for n, s in servers.items() if n != gone}

        def meta_of_rest():
            metas = [get_json(s.http_port, "/jsz")["meta_cluster"] for s in rest.values()]
            return all(m.get("cluster_size") == 3 for m in metas)
        await eventually_async(meta_of_rest, timeout=30, what="a meta group of three")

        async def moved():
            got = await _info(js, "SR")
            now = {got.cluster.leader} | {r.name for r in got.cluster.replicas}
            return gone not in now and len(now) == 3
        await eventually_async(moved, timeout=60, what="SR off the removed server")
        await _replicas_agree({n: s for n, s in rest.items()}, (10, 1, 10), stream="SR",
                              timeout=60)
        ack = await _publish(js, "sr.x", b"after")
        assert ack.seq == 11
    finally:
        await app.close()
        await sys_nc.close()


def test_server_remove_of_the_meta_leader_itself(tmp_path):
    start = lambda ports, n: start_node("natsbroker", lambda p: _acc_conf(tmp_path, n, p), ports, n)  # noqa: E731
    with js_cluster(start, NAMES) as (ports, servers):
        asyncio.run(_remove_meta_leader(servers))


async def _remove_meta_leader(servers):
    """The meta leader asked to remove itself: it answers once that is
    committed, hands the meta group over and stops JetStream; its successor
    moves the streams off it (with no third server to move to, an R3 stream
    goes on with two replicas: nats-server's 10075 case)."""
    leader = get_json(servers["js-a"].http_port, "/jsz")["meta_cluster"]["leader"]
    rest = {n: s for n, s in servers.items() if n != leader}
    other = next(iter(rest))
    app = await nats.connect(servers[other].url, user="app", password="pw",
                             max_reconnect_attempts=-1)
    sys_nc = await nats.connect(servers[leader].url, user="sys", password="pw")
    try:
        js = app.jetstream(timeout=10)
        await _until_created(js, name="ML", subjects=["ml.>"], num_replicas=3)
        for i in range(5):
            await _publish(js, "ml.%d" % i, b"m%d" % i)
        r = await sys_nc.request("$JS.API.SERVER.REMOVE", json.dumps({"peer": leader}).encode(),
                                 timeout=10)
        assert json.loads(r.data) == {
            "type": "io.nats.jetstream.api.v1.meta_server_remove_response", "success": True}
        await eventually_async(lambda: "DISABLED" in servers[leader].log(), timeout=30,
                               what="the removed leader's log")

        def new_leader():
            metas = [get_json(s.http_port, "/jsz")["meta_cluster"] for s in rest.values()]
            names = {m.get("leader") for m in metas}
            return len(names) == 1 and names.pop() in rest
        await eventually_async(new_leader, timeout=60, what="a meta leader among the others")

        async def served():
            try:
                info = await js.stream_info("ML")
            except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
                return None
            members = {info.cluster.leader} | {p.name for p in info.cluster.replicas}
            return info if members == set(rest) and info.state.messages == 5 else None
        await eventually_async(served, timeout=60, what="ML moved off the removed leader")
        ack = await _publish(js, "ml.x", b"after")
        assert ack.seq == 6
    finally:
        await app.close()
        await sys_nc.close()
