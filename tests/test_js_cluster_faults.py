"""Fault runs for JetStream in a natsbroker cluster (`make chaos`).

The meta leader is killed (SIGKILL, by pid) while clients keep creating
streams through the other servers; the survivors elect a new leader and
carry on, and the killed server, restarted on its store, catches up with
what was decided without it and serves its own streams again.
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

pytestmark = pytest.mark.chaos


def _leader(servers, skip=()):
    seen = set()
    for n, s in servers.items():
        if n in skip:
            continue
        seen.add(get_json(s.http_port, "/jsz")["meta_cluster"]["leader"])
    return seen.pop() if len(seen) == 1 and "" not in seen else None


def test_killing_the_meta_leader_loses_nothing_decided(tmp_path):
    ports = {n: free_port() for n in NAMES}
    servers = {n: ServerProcess("natsbroker", _conf(tmp_path, n, ports)).start(60) for n in NAMES}
    try:
        asyncio.run(_run(tmp_path, ports, servers))
    finally:
        for s in servers.values():
            s.stop()


async def _run(tmp_path, ports, servers):
    ncs = {n: await nats.connect(s.url) for n, s in servers.items()}
    try:
        await _until_created(ncs["js-a"].jetstream(timeout=5), name="S1", subjects=["s1.>"])
        leader = _leader(servers)
        os.kill(servers[leader].proc.pid, signal.SIGKILL)
        servers[leader].proc.wait()
        await ncs.pop(leader).close()
        alive = [n for n in NAMES if n != leader]

        async def new_leader():
            got = _leader(servers, skip=(leader,))
            return got if got not in (None, leader) else None
        await eventually_async(new_leader, timeout=60, what="a new meta leader")
        js = ncs[alive[0]].jetstream(timeout=5)
        for i in range(2, 5):
            await _until_created(js, name="S%d" % i, subjects=["s%d.>" % i])
        # Back on its store: it learns S2..S4 from the new leader.
        servers[leader] = ServerProcess("natsbroker", _conf(tmp_path, leader, ports)).start(60)
        ncs[leader] = await nats.connect(servers[leader].url)

        async def names_everywhere():
            for nc in ncs.values():
                try:
                    r = await nc.request("$JS.API.STREAM.NAMES", b"", timeout=2)
                except nats.errors.TimeoutError:
                    return False
                if json.loads(r.data).get("streams") != ["S1", "S2", "S3", "S4"]:
                    return False
            return _leader(servers) is not None
        await eventually_async(names_everywhere, timeout=60, what="the four streams known everywhere")
        for nc in ncs.values():
            js = nc.jetstream(timeout=5)
            for i in range(1, 5):
                ack = await js.publish("s%d.x" % i, b"x")
                assert ack.stream == "S%d" % i
    finally:
        for nc in ncs.values():
            await nc.close()
