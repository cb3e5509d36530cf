"""A randomised fault run against an R3 stream (`make chaos`, not `make test`).

For ``CHAOS_SECONDS`` (default 600) a client publishes with Nats-Msg-Id
through every server, a durable consumer pulls and acks, and one fault at
a time hits a random server: kill -9 (restarted 1-5 s later), SIGSTOP for
1-12 s (past the election timeout, often), a leader stepdown, or a restart
of every server at once. Faults target this machine's loopback only and
processes by pid. Afterwards, with everything healed:

* every acked message is stored exactly once, at its acked sequence, in ack
  order, on every replica (each is made leader in turn and read whole);
* the replicas agree on counts and sequences;
* the consumer's ack floor never went back while it ran.

The run's numbers (faults by kind, acks, retries) are printed for the
closing note.
"""

import asyncio
import json
import os
import random
import signal
import time

import nats
import pytest

from tests.support.cluster import js_cluster
from tests.support.wait import eventually_async
from tests.test_js_cluster import NAMES, _until_created
from tests.test_js_cluster_r3 import _info, _replicas_agree, _start
from tests.test_js_cluster_r3_faults import Publisher, _check

SECONDS = float(os.environ.get("CHAOS_SECONDS", "600"))

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(SECONDS + 900)]


class Consumer:
    """Pulls and acks through the durable C, tracking its ack floor."""

    def __init__(self, ncs):
        self.ncs = ncs
        self.stop = False
        self.floors = []
        self.acked = 0

    async def run(self):
        names = list(self.ncs)
        i = 0
        while not self.stop:
            i += 1
            nc = self.ncs[names[i % len(names)]]
            js = nc.jetstream(timeout=2)
            try:
                sub = await js.pull_subscribe("r3.>", durable="C", stream="R3")
                msgs = await sub.fetch(20, timeout=1)
                for m in msgs:
                    await m.ack_sync(timeout=2)
                    self.acked += 1
                ci = await js.consumer_info("R3", "C")
                self.floors.append(ci.ack_floor.stream_seq)
                await sub.unsubscribe()
            except (nats.errors.Error, asyncio.TimeoutError):
                await asyncio.sleep(0.2)


def test_randomised_faults_lose_no_acked_message(tmp_path):
    with js_cluster(lambda ports, n: _start(tmp_path, ports, n), NAMES) as (ports, servers):
        asyncio.run(_chaos(tmp_path, ports, servers))


async def _contents(nc):
    """Every message of R3 as its leader serves it, [(seq, data)], read
    through an ordered consumer (a long run stores too many to get one by
    one)."""
    js = nc.jetstream(timeout=5)
    info = await _info(js)
    out = []
    if info.state.messages == 0:
        return out
    sub = await js.subscribe("r3.>", ordered_consumer=True, stream="R3")
    try:
        while len(out) < info.state.messages:
            m = await sub.next_msg(timeout=30)
            out.append((m.metadata.sequence.stream, m.data))
    finally:
        await sub.unsubscribe()
    return out


async def _reconnect(ncs, servers, name):
    """A restarted server listens on a new ephemeral client port: its
    client connects anew (the dict is shared with the client tasks)."""
    old = ncs[name]
    ncs[name] = await _connect(servers[name])
    try:
        await old.close()
    except Exception:
        pass


async def _connect(server):
    return await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)


async def _chaos(tmp_path, ports, servers):
    rng = random.Random(os.environ.get("CHAOS_SEED", str(time.time_ns())))
    ncs = {n: await _connect(s) for n, s in servers.items()}
    counts = {"kill": 0, "pause": 0, "stepdown": 0, "restart_all": 0}
    try:
        js = ncs["js-a"].jetstream(timeout=5)
        await _until_created(js, name="R3", subjects=["r3.>"], num_replicas=3)
        await js.add_consumer("R3", durable_name="C", ack_policy="explicit")
        pub, con = Publisher(ncs), Consumer(ncs)
        tasks = [asyncio.ensure_future(pub.run()), asyncio.ensure_future(con.run())]
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            await asyncio.sleep(rng.uniform(2, 8))
            fault = rng.choice(["kill", "kill", "pause", "pause", "stepdown", "restart_all"])
            victim = rng.choice(NAMES)
            counts[fault] += 1
            if fault == "kill":
                pub.avoid = {victim}
                os.kill(servers[victim].proc.pid, signal.SIGKILL)
                servers[victim].proc.wait()
                await asyncio.sleep(rng.uniform(1, 5))
                servers[victim] = _start(tmp_path, ports, victim)
                await _reconnect(ncs, servers, victim)
                pub.avoid = set()
            elif fault == "pause":
                pub.avoid = {victim}
                os.kill(servers[victim].proc.pid, signal.SIGSTOP)
                await asyncio.sleep(rng.uniform(1, 12))
                os.kill(servers[victim].proc.pid, signal.SIGCONT)
                pub.avoid = set()
            elif fault == "stepdown":
                try:
                    await ncs[victim].request("$JS.API.STREAM.LEADER.STEPDOWN.R3", b"", timeout=2)
                except (nats.errors.Error, asyncio.TimeoutError):
                    pass
            else:
                for n in NAMES:
                    servers[n].stop()
                for n in NAMES:
                    servers[n] = _start(tmp_path, ports, n)
                for n in NAMES:
                    await _reconnect(ncs, servers, n)
            # Progress resumes after every fault.
            before = len(pub.acked)

            async def progress():
                for t in tasks:
                    if t.done():
                        t.result()  # a client task died: say how
                return len(pub.acked) > before
            await eventually_async(progress, timeout=90, what="acks after a %s" % fault)
        pub.stop = con.stop = True
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        last = max(pub.acked.values())
        contents = await _contents(ncs["js-a"])
        _check(pub.acked, contents)
        # Every replica agrees with what the leader serves.
        st = (len(contents), contents[0][0] if contents else last + 1, last)
        await _replicas_agree(servers, st, timeout=90)
        for n in NAMES:
            if (await _info(ncs[n].jetstream(timeout=5))).cluster.leader != n:
                await ncs[n].request("$JS.API.STREAM.LEADER.STEPDOWN.R3",
                                     json.dumps({"placement": {"preferred": n}}).encode(), timeout=5)

            async def leads(n=n):
                info = await _info(ncs[n].jetstream(timeout=5))
                return info.cluster.leader == n
            try:
                await eventually_async(leads, timeout=20, what="%s leading" % n)
            except AssertionError:
                continue
            assert await _contents(ncs[n]) == contents, "replica %s differs" % n
        assert con.floors == sorted(con.floors), "the consumer's ack floor went back"
        print("CHAOS %s: %d s, faults %s, %d acked publishes (%d retries), %d consumer acks, "
              "final ack floor %s" % (os.environ.get("CHAOS_SEED", "-"), SECONDS, counts,
                                      len(pub.acked), pub.retries, con.acked,
                                      con.floors[-1] if con.floors else None))
    finally:
        for nc in ncs.values():
            await nc.close()
