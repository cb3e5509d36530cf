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

from tests.support.http import get_json
from tests.support.servers import ServerProcess, free_port
from tests.support.wait import eventually_async
from tests.test_js_cluster import NAMES, _conf, _until_created

pytestmark = pytest.mark.long


def _start(tmp_path, ports, name):
    return ServerProcess("natsbroker", _conf(tmp_path, name, ports)).start(60)


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
    ports = {n: free_port() for n in NAMES}
    servers = {}
    try:
        for n in NAMES:
            servers[n] = _start(tmp_path, ports, n)
        asyncio.run(_r3(tmp_path, ports, servers))
    finally:
        for s in servers.values():
            s.stop()


async def _info(js, name="R3"):
    async def got():
        try:
            info = await js.stream_info(name)
        except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
            return None
        return info if info.cluster and info.cluster.leader else None
    return await eventually_async(got, timeout=30, what="stream info from a leader")


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
        r = await ncs["js-c"].request("$JS.API.STREAM.LEADER.STEPDOWN.R3", b"", timeout=5)
        assert json.loads(r.data) == {
            "type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response", "success": True}

        async def moved():
            info = await _info(js["js-c"])
            return info.cluster.leader if info.cluster.leader != old else None
        await eventually_async(moved, timeout=30, what="a new stream leader")
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
        kv = await js[survivors[1]].create_key_value(bucket="CFG", replicas=3)
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
