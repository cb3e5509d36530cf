"""Atomic batch publishes to a replicated stream: the leader stages the
batch and proposes it whole at its commit; every replica checks it and
stores all of it or none. The same steps against a three-server nats-server
cluster and a natsbroker one: the same PubAcks and errors, the same stream."""

import asyncio
import json

import nats
import pytest

from tests.support.cluster import run_on_cluster
from tests.test_js_cluster import _conf
from tests.test_js_cluster_r3 import _replicas_agree

pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters"), pytest.mark.timeout(300)]


async def _create(nc, cfg):
    for _ in range(100):
        try:
            r = json.loads((await nc.request("$JS.API.STREAM.CREATE." + cfg["name"],
                                             json.dumps(cfg).encode(), timeout=5)).data)
        except nats.errors.TimeoutError:
            continue
        if "error" not in r:
            return r
        assert r["error"]["err_code"] in (10008, 10005, 10023), r  # (no leader yet)
        await asyncio.sleep(0.5)
    raise AssertionError("stream never created")


async def _batch(nc, batch_id, msgs, ask_each=False):
    """Publish ``msgs`` ([(subject, data, extra headers)]) as one batch; the
    commit's answer (and the intermediate ones when ``ask_each``)."""
    out = []
    n = len(msgs)
    for i, (subject, data, extra) in enumerate(msgs, 1):
        h = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(i)}
        if i == n:
            h["Nats-Batch-Commit"] = "1"
        h.update(extra)
        if i == n or ask_each:
            m = await nc.request(subject, data, timeout=10, headers=h)
            out.append(json.loads(m.data) if m.data else None)
        else:
            await nc.publish(subject, data, headers=h)
    return out


def _normal(ack):
    if ack and "error" in ack:
        return {"error": {k: ack["error"][k] for k in ("code", "err_code", "description")}}
    return ack


async def _scenario(servers):
    nc = await nats.connect(servers["js-a"].url)
    try:
        await _create(nc, {"name": "B", "subjects": ["b.>"], "num_replicas": 3,
                           "allow_atomic": True})
        seen = []
        # A whole batch, flow-controlled replies on the way.
        seen.append(await _batch(nc, "one", [("b.%d" % i, b"m%d" % i, {}) for i in range(5)],
                                 ask_each=True))
        # A first message expecting the wrong last sequence: none stored.
        seen.append(await _batch(nc, "two", [
            ("b.x", b"x", {"Nats-Expected-Last-Sequence": "4"}), ("b.y", b"y", {})]))
        # The same message id twice in one batch: refused whole.
        seen.append(await _batch(nc, "three", [
            ("b.x", b"x", {"Nats-Msg-Id": "dup"}), ("b.y", b"y", {"Nats-Msg-Id": "dup"})]))
        # A right expectation, then a batch reusing an id already stored.
        seen.append(await _batch(nc, "four", [
            ("b.z", b"z", {"Nats-Expected-Last-Sequence": "5", "Nats-Msg-Id": "z1"}),
            ("b.z", b"zz", {})]))
        seen.append(await _batch(nc, "five", [("b.w", b"w", {"Nats-Msg-Id": "z1"})]))
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.B", b"", timeout=5)).data)
        msgs = []
        for seq in range(1, info["state"]["last_seq"] + 1):
            r = json.loads((await nc.request("$JS.API.STREAM.MSG.GET.B", json.dumps(
                {"seq": seq}).encode(), timeout=5)).data)
            msgs.append(r["message"]["subject"] if "message" in r else None)
        state = (info["state"]["messages"], info["state"]["first_seq"], info["state"]["last_seq"])
        return [[_normal(a) for a in acks] for acks in seen], msgs, state
    finally:
        await nc.close()


async def _and_replicas(servers):
    """The scenario, then every replica holding the same (natsbroker's,
    whose /jsz shows each replica's state)."""
    acks, msgs, state = await _scenario(servers)
    await _replicas_agree(servers, state, "B")
    return acks, msgs, state


def test_atomic_batches_in_a_replicated_stream(tmp_path):
    reference = run_on_cluster(tmp_path, "nats-server", _conf, _scenario)
    got = run_on_cluster(tmp_path, "natsbroker", _conf, _and_replicas)
    acks, msgs, state = got
    assert state == (7, 1, 7)
    assert acks[0][:4] == [None] * 4 and acks[0][4]["batch"] == "one"
    assert acks[0][4]["count"] == 5
    assert got == reference
