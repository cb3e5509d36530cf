"""A network partition of an R3 stream's leader, checked as Jepsen checks
NATS: the servers' routes run through links the test cuts
(tests/support/netproxy: no byte moves either way, connections stay open,
as behind an iptables DROP), so the leader is cut off from both peers while
it keeps running and keeps its clients. Publishes through it may time out
but are never acked unless kept; the majority elects a leader and acks on;
after the heal the old leader catches up, and every acked message is
present exactly once, in ack order, on every replica.
"""

import asyncio
import json

import nats
import pytest

from tests.support.cluster import start_node, wait_meta_formed
from tests.support.netproxy import Link, unused_port
from tests.support.servers import free_port
from tests.support.wait import eventually_async
from tests.test_js_cluster import NAMES, _until_created
from tests.test_js_cluster_r3 import _info, _replicas_agree
from tests.test_js_cluster_r3_faults import Publisher, _check, _contents

pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters")]


def _conf(tmp_path, name, ports, links):
    """Routes to the others only through this server's links to them; its
    route URL advertised nowhere, so that gossip dials no way around them."""
    path = tmp_path / ("%s.conf" % name)
    routes = ["nats://127.0.0.1:%d" % links[name, other].port for other in NAMES if other != name]
    path.write_text("server_name: %s\nlisten: 127.0.0.1:-1\nhttp: 127.0.0.1:-1\n"
                    "jetstream { store_dir: %s }\n"
                    "cluster { name: jsc, listen: 127.0.0.1:%d, advertise: \"127.0.0.1:%d\", "
                    "routes: %s }\n"
                    % (name, json.dumps(str(tmp_path / name)), ports[name], unused_port(),
                       json.dumps(routes)))
    return ["-c", str(path)]


class Minority:
    """Publishes ``q-<i>`` through one server only (the cut-off leader):
    each attempt once, the acks recorded."""

    def __init__(self, nc):
        self.nc = nc
        self.acked = {}
        self.tried = 0
        self.stop = False

    async def run(self):
        i = 0
        while not self.stop:
            i += 1
            self.tried += 1
            try:
                ack = await self.nc.jetstream(timeout=1).publish(
                    "r3.q", b"q-%d" % i, headers={"Nats-Msg-Id": "q-%d" % i})
            except (nats.errors.Error, asyncio.TimeoutError):
                continue
            self.acked[i] = ack.seq


def test_a_partitioned_stream_leader_acks_nothing_it_loses(tmp_path):
    asyncio.run(_partition(tmp_path))


async def _partition(tmp_path):
    loop = asyncio.get_running_loop()
    ports = {n: free_port() for n in NAMES}
    links = {}
    for a in NAMES:
        for b in NAMES:
            if a != b:
                links[a, b] = await Link(ports[b]).start()
    servers, ncs = {}, {}
    try:
        for n in NAMES:
            # (started off the loop: the links must forward meanwhile)
            servers[n] = await loop.run_in_executor(None, lambda n=n: start_node(
                "natsbroker", lambda p: _conf(tmp_path, n, p, links), ports, n))
        await loop.run_in_executor(None, wait_meta_formed, [s.http_port for s in servers.values()])
        for n, s in servers.items():
            ncs[n] = await nats.connect(s.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        js = ncs["js-a"].jetstream(timeout=5)
        await _until_created(js, name="R3", subjects=["r3.>"], num_replicas=3)
        await _info(js)
        pub = Publisher(ncs)
        task = asyncio.ensure_future(pub.run())
        await asyncio.sleep(2)
        leader = (await _info(js)).cluster.leader
        pub.avoid = {leader}
        before = len(pub.acked)
        minority = Minority(ncs[leader])
        for (a, b), link in links.items():
            if leader in (a, b):
                link.cut()
        mtask = asyncio.ensure_future(minority.run())

        async def progress():
            return len(pub.acked) > before + 50
        await eventually_async(progress, timeout=60, what="acks from the majority's new leader")
        others = [n for n in NAMES if n != leader]
        info = await _info(ncs[others[0]].jetstream(timeout=5))
        assert info.cluster.leader in others
        # The cut-off server leads nothing it can commit: still cut off, it acks nothing new.
        await asyncio.sleep(3)
        acked_while_cut = dict(minority.acked)
        # Cut off from both peers, it can have committed nothing since.
        assert minority.tried > 0 and acked_while_cut == {}, acked_while_cut
        for link in links.values():
            link.heal()
        await asyncio.sleep(3)
        pub.avoid = set()
        await asyncio.sleep(2)
        pub.stop = minority.stop = True
        await asyncio.wait_for(asyncio.gather(task, mtask), 30)
        assert minority.tried > 0 and len(pub.acked) > before + 50
        contents = await _contents(ncs[others[0]])
        assert contents and contents[0][0] == 1
        # Every replica, the healed one too, holds them all.
        await _replicas_agree(servers, (len(contents), 1, contents[-1][0]), timeout=60)
        _check(pub.acked, [(s, d) for s, d in contents if d.startswith(b"p-")])
        by_data = {d: s for s, d in contents}
        for i, seq in minority.acked.items():
            assert by_data.get(b"q-%d" % i) == seq, "acked q-%d lost: %r" % (i, acked_while_cut)
    finally:
        for nc in ncs.values():
            await nc.close()
        for s in servers.values():
            s.stop()
        for link in links.values():
            await link.close()

