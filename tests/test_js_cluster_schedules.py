"""Message schedules in a replicated stream: only the stream's leader fires
them, proposing each copy into the group, so every replica stores the same
copies once; the replicas keep the schedules' index, and a new leader goes
on firing them."""

import asyncio
import datetime
import json

import nats
import pytest

from tests.support.cluster import js_cluster
from tests.support.wait import eventually_async
from tests.test_js_cluster import NAMES, _until_created
from tests.test_js_cluster_r3 import _info, _lead, _publish, _replicas_agree, _start, _stored

pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters"), pytest.mark.timeout(300)]


def test_r3_schedules_fire_once_from_the_leader(tmp_path):
    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_schedules(tmp_path, ports, servers))


async def _copies(js, last, subject):
    out = []
    for seq in range(1, last + 1):
        try:
            m = await js.get_msg("SCH", seq)
        except nats.js.errors.NotFoundError:
            continue
        if m.subject == subject:
            out.append(m)
    return out


async def _schedules(tmp_path, ports, servers):
    nc = await nats.connect(servers["js-a"].url, max_reconnect_attempts=-1)
    try:
        js = nc.jetstream(timeout=5)
        await _until_created(js, name="SCH", subjects=["sched.>", "out.>"], num_replicas=3,
                             allow_msg_schedules=True)
        await _lead(nc, "js-b", "SCH")
        at = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=2))
        await _publish(js, "sched.once", b"once", headers={
            "Nats-Schedule": "@at " + at.isoformat().replace("+00:00", "Z"),
            "Nats-Schedule-Target": "out.once"})
        await _publish(js, "sched.tick", b"tick", headers={
            "Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "out.tick"})

        async def ticked(n):
            st = _stored(servers["js-b"], "SCH")
            return st is not None and st[2] >= n
        await eventually_async(lambda: ticked(8), timeout=30, interval=0.2,
                               what="copies of the schedules")

        # The leader moves: the new one keeps firing.
        await _lead(nc, "js-c", "SCH")
        before = (await _info(js, "SCH")).state.last_seq
        await eventually_async(lambda: ticked(before + 3), timeout=30,
                               interval=0.2, what="copies fired by the new leader")
        # The schedule's message purged: no more copies, and every replica
        # holds the same.
        r = json.loads((await nc.request("$JS.API.STREAM.PURGE.SCH", json.dumps(
            {"filter": "sched.tick"}).encode(), timeout=5)).data)
        assert r.get("success"), r
        await asyncio.sleep(2.5)
        want = _stored(servers["js-c"], "SCH")
        await _replicas_agree(servers, want, "SCH")
        await asyncio.sleep(2)
        assert _stored(servers["js-a"], "SCH") == want

        once = await _copies(js, want[2], "out.once")
        assert len(once) == 1 and once[0].data == b"once"
        assert once[0].headers["Nats-Scheduler"] == "sched.once"
        assert once[0].headers["Nats-Schedule-Next"] == "purge"
        # (the one-shot schedule removed itself with its copy)
        assert not await _copies(js, want[2], "sched.once")
        ticks = await _copies(js, want[2], "out.tick")
        assert len(ticks) >= 6 and all(m.headers["Nats-Scheduler"] == "sched.tick"
                                       for m in ticks)
        # One copy a second, never two from two servers at once.
        seconds = [datetime.datetime.fromisoformat(m.headers["Nats-Schedule-Next"][:19])
                   for m in ticks]
        assert len(set(seconds)) == len(seconds), [(m.seq, m.headers['Nats-Schedule-Next']) for m in ticks]
    finally:
        await nc.close()
