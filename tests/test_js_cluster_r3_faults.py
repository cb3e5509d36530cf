"""Faults under acked publishes to an R3 stream, checked as Jepsen checks
NATS: every acknowledged message is present exactly once, in ack order, on
every replica, after the stream leader is killed (SIGKILL, by pid) or
stopped (SIGSTOP for longer than an election timeout, then SIGCONT) while a
client keeps publishing. Publishes carry a Nats-Msg-Id, so a publish retried
after an unanswered attempt is stored once (its ack says duplicate).

The short runs are in `make test`; `make chaos` repeats them.
"""

import asyncio
import json
import os
import signal

import nats
import pytest

from tests.support.cluster import js_cluster
from tests.support.wait import eventually_async
from tests.test_js_cluster import NAMES, _until_created
from tests.test_js_cluster_r3 import _info, _lead, _replicas_agree, _start

# Three-server clusters run one at a time (one xdist worker for the group):
# several at once on a 2-core machine starve their elections.
pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters")]


class Publisher:
    """Publishes ``p-<i>`` with Nats-Msg-Id ``<i>`` through every server in
    turn, one at a time, retrying each until acked; records the acks."""

    def __init__(self, ncs):
        self.ncs = ncs
        # Servers not to publish through (the faulted one: a client there
        # waits for its timeout every time, which says nothing of the rest).
        self.avoid = set()
        self.acked = {}  # i -> seq
        self.stop = False
        self.retries = 0

    async def run(self):
        i = 0
        names = list(self.ncs)
        while not self.stop:
            usable = [n for n in names if n not in self.avoid] or names
            nc = self.ncs[usable[i % len(usable)]]
            try:
                ack = await nc.jetstream(timeout=2).publish(
                    "r3.%d" % (i % 7), b"p-%d" % i, headers={"Nats-Msg-Id": str(i)})
            except (nats.errors.Error, asyncio.TimeoutError):
                # Unanswered (the leader is gone, the connection reconnects):
                # the same message again, through the next server.
                self.retries += 1
                names.append(names.pop(0))  # try another server
                await asyncio.sleep(0.05)
                continue
            assert ack.stream == "R3"
            self.acked[i] = ack.seq
            i += 1


async def _contents(nc):
    """Every message of R3 as the leader serves it: [(seq, data)]."""
    js = nc.jetstream(timeout=5)
    info = await _info(js)
    out = []
    seq = info.state.first_seq
    while seq <= info.state.last_seq:
        try:
            m = await js.get_msg("R3", seq, next=True)
        except nats.js.errors.NotFoundError:
            break
        out.append((m.seq, m.data))
        seq = m.seq + 1
    return out


def _check(acked, contents):
    seqs = [s for s, _ in contents]
    assert seqs == sorted(set(seqs)), "a sequence repeats or goes back"
    datas = [d for _, d in contents]
    assert len(datas) == len(set(datas)), "a message is stored twice"
    by_data = {d: s for s, d in contents}
    for i, seq in acked.items():
        assert by_data.get(b"p-%d" % i) == seq, "acked p-%d (seq %d) is missing or moved: %r" % (
            i, seq, [(j, acked.get(j), by_data.get(b"p-%d" % j)) for j in range(i - 5, i + 5)])
    # Ack order is stream order.
    order = [acked[i] for i in sorted(acked)]
    assert order == sorted(order)


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_acked_publishes_survive_a_fault_of_the_stream_leader(tmp_path, fault):
    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_faulted(tmp_path, ports, servers, fault))


async def _faulted(tmp_path, ports, servers, fault):
    ncs = {n: await nats.connect(s.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
           for n, s in servers.items()}
    try:
        js = ncs["js-a"].jetstream(timeout=5)
        await _until_created(js, name="R3", subjects=["r3.>"], num_replicas=3)
        await _info(js)
        pub = Publisher(ncs)
        task = asyncio.ensure_future(pub.run())
        await asyncio.sleep(2)
        leader = (await _info(ncs[next(iter(ncs))].jetstream(timeout=5))).cluster.leader
        pid = servers[leader].proc.pid
        before = len(pub.acked)
        pub.avoid = {leader}
        if fault == "kill":
            os.kill(pid, signal.SIGKILL)
            servers[leader].proc.wait()
        else:
            os.kill(pid, signal.SIGSTOP)

        async def progress():
            return len(pub.acked) > before + 50
        await eventually_async(progress, timeout=60, what="acks from a new leader")
        if fault == "kill":
            servers[leader] = _start(tmp_path, ports, leader)
            await ncs[leader].close()
            ncs[leader] = await nats.connect(servers[leader].url)
            pub.ncs = ncs
        else:
            os.kill(pid, signal.SIGCONT)
        await asyncio.sleep(2)
        pub.avoid = set()
        await asyncio.sleep(2)
        pub.stop = True
        await asyncio.wait_for(task, 30)
        assert pub.acked and len(pub.acked) > before + 50
        last = max(pub.acked.values())
        got = await _replicas_agree(servers, (len(pub.acked), 1, last), timeout=60)
        assert len(got) == 3
        contents = await _contents(ncs["js-b"])
        _check(pub.acked, contents)
        # The replica the fault hit, as leader, serves the same messages.
        r = await ncs[leader].request(
            "$JS.API.STREAM.LEADER.STEPDOWN.R3",
            json.dumps({"placement": {"preferred": leader}}).encode(), timeout=5)
        assert json.loads(r.data).get("success"), r.data

        async def led():
            info = await _info(ncs[leader].jetstream(timeout=5))
            return info.cluster.leader == leader
        try:
            await eventually_async(led, timeout=20, what="the faulted replica leading")
        except AssertionError:
            pytest.skip("the faulted replica did not take the leadership")
        assert await _contents(ncs[leader]) == contents
    finally:
        for nc in ncs.values():
            await nc.close()


def test_a_replica_with_a_damaged_log_is_caught_up_never_trusted_never_deleted(tmp_path):
    import plyvel

    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_damaged(tmp_path, ports, servers, plyvel))


def _flip_a_record(plyvel, path):
    """One bit of a Raft log's record flipped (its LevelDB at ``path``, the
    server down): the snapshot record if there is one (a shutdown compacts
    the log), else the first entry. ``(key, value before)``."""
    db = plyvel.DB(str(path))
    try:
        key = b"snap" if db.get(b"snap") is not None else next(db.iterator(prefix=b"log"))[0]
        value = db.get(key)
        db.put(key, value[:-1] + bytes([value[-1] ^ 1]))
    finally:
        db.close()
    return key, value


async def _damaged(tmp_path, ports, servers, plyvel):
    nc = await nats.connect(servers["js-a"].url, max_reconnect_attempts=-1)
    try:
        js = nc.jetstream(timeout=5)
        await _until_created(js, name="R3", subjects=["r3.>"], num_replicas=3)
        for i in range(10):
            await _publish_retry(js, i)
        await _replicas_agree(servers, (10, 1, 10))
        # js-c's log: one entry's bytes flipped while it is down.
        servers["js-c"].stop()
        jsdir = tmp_path / "js-c" / "jetstream" / "$SYS" / "_js_"
        group = next(d for d in os.listdir(jsdir) if d.startswith("S-R3F-"))
        key, value = _flip_a_record(plyvel, jsdir / group)
        for i in range(10, 15):
            await _publish_retry(js, i)
        servers["js-c"] = _start(tmp_path, ports, "js-c")
        await _replicas_agree(servers, (15, 1, 15), timeout=60)
        log = servers["js-c"].log()
        assert "Raft log damaged" in log and "caught up" not in log.split("Raft log damaged")[0]
        aside = [d for d in os.listdir(jsdir) if d.startswith(group + ".damaged-")]
        assert len(aside) == 1 and group in os.listdir(jsdir)  # kept, beside a new log
        db = plyvel.DB(str(jsdir / aside[0]))
        assert db.get(key) == value[:-1] + bytes([value[-1] ^ 1])  # left as it was
        db.close()
        await _publish_retry(js, 15)
        await _replicas_agree(servers, (16, 1, 16), timeout=30)
    finally:
        await nc.close()


async def _publish_retry(js, i):
    async def sent():
        try:
            return await js.publish("r3.%d" % (i % 3), b"p-%d" % i, timeout=2,
                                    headers={"Nats-Msg-Id": str(i)})
        except (nats.errors.Error, asyncio.TimeoutError):
            return None
    return await eventually_async(sent, timeout=30, what="an ack for p-%d" % i)


def test_every_server_killed_at_once_loses_no_acked_message(tmp_path):
    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_all_killed(tmp_path, ports, servers))


async def _all_killed(tmp_path, ports, servers):
    """kill -9 of all three at one moment under acked publishes and acks
    (Jepsen's lost writes from lazy fsync): an ack is only sent once the
    write is synced, so after a restart of the whole cluster every acked
    message is there, in order, and the consumer's ack floor has not gone
    back."""
    ncs = {n: await nats.connect(s.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
           for n, s in servers.items()}
    try:
        js = ncs["js-a"].jetstream(timeout=5)
        await _until_created(js, name="R3", subjects=["r3.>"], num_replicas=3)
        await js.add_consumer("R3", durable_name="C", ack_policy="explicit")
        await _info(js)
        pub = Publisher(ncs)
        task = asyncio.ensure_future(pub.run())
        sub = await ncs["js-b"].jetstream(timeout=5).pull_subscribe("r3.>", durable="C",
                                                                       stream="R3")
        acked_seqs = []
        while len(pub.acked) < 100 or len(acked_seqs) < 20:
            try:
                for m in await sub.fetch(5, timeout=1):
                    await m.ack_sync(timeout=2)
                    acked_seqs.append(m.metadata.sequence.stream)
            except (nats.errors.Error, asyncio.TimeoutError):
                pass
        for s in servers.values():
            os.kill(s.proc.pid, signal.SIGKILL)
        for s in servers.values():
            s.proc.wait()
        pub.stop = True
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        acked = dict(pub.acked)
        for n in NAMES:
            servers[n] = _start(tmp_path, ports, n)
        for n in NAMES:
            await ncs[n].close()
            ncs[n] = await nats.connect(servers[n].url, max_reconnect_attempts=-1)
        info = await _info(ncs["js-a"].jetstream(timeout=5))
        contents = await _contents(ncs["js-a"])
        assert len(contents) == info.state.messages >= len(acked)
        _check(acked, contents)
        await _replicas_agree(servers, (info.state.messages, 1, info.state.last_seq), timeout=60)

        async def floor():
            try:
                return await ncs["js-c"].jetstream(timeout=5).consumer_info("R3", "C")
            except (nats.errors.Error, asyncio.TimeoutError):
                return None
        ci = await eventually_async(floor, timeout=30, what="consumer C after the restart")
        # Every sequence up to this one had its ack acknowledged: the floor
        # may not be below it.
        done, prefix = set(acked_seqs), 0
        while prefix + 1 in done:
            prefix += 1
        assert prefix >= 1 and ci.ack_floor.stream_seq >= prefix, (ci.ack_floor, prefix)
    finally:
        for nc in ncs.values():
            await nc.close()


def test_a_damaged_meta_log_deletes_no_stream(tmp_path):
    import plyvel

    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_damaged_meta(tmp_path, ports, servers, plyvel))


async def _damaged_meta(tmp_path, ports, servers, plyvel):
    """Jepsen's NATS 2.12.1 report: a damaged meta snapshot on one server
    made it delete its streams as orphans. Here the meta log of one server
    is damaged while it is down: the log is moved aside and kept, the server
    rejoins with an empty one that the meta leader fills, and its replica
    of the stream, with every message, is still there and in use."""
    nc = await nats.connect(servers["js-a"].url, max_reconnect_attempts=-1)
    try:
        js = nc.jetstream(timeout=5)
        await _until_created(js, name="R3", subjects=["r3.>"], num_replicas=3)
        for i in range(10):
            await _publish_retry(js, i)
        await _replicas_agree(servers, (10, 1, 10))
        servers["js-c"].stop()
        meta = tmp_path / "js-c" / "jetstream" / "$SYS" / "_js_" / "_meta_"
        _flip_a_record(plyvel, meta)
        servers["js-c"] = _start(tmp_path, ports, "js-c")
        log = servers["js-c"].log()
        assert "damaged" in log, log[-3000:]
        aside = [d for d in os.listdir(meta.parent) if d.startswith("_meta_.damaged-")]
        assert len(aside) == 1 and "_meta_" in os.listdir(meta.parent)
        await _replicas_agree(servers, (10, 1, 10), timeout=60)
        for i in range(10, 15):
            await _publish_retry(js, i)
        await _replicas_agree(servers, (15, 1, 15), timeout=60)
        # And it leads the stream with every message.
        await _lead(nc, "js-c")
        assert [d for _s, d in await _contents(nc)] == [b"p-%d" % i for i in range(15)]
    finally:
        await nc.close()
