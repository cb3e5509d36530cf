"""A new JetStream meta leader asks every server for its statsz at once
(nats-server's monitorCluster publishes ``$SYS.REQ.SERVER.PING``, no reply,
on a leader change), so that it can place replicated streams as soon as it
leads rather than after the peers' next statsz heartbeats. Run against a
three-server cluster of nats-server and of natsbroker alike."""

import asyncio
import json

import nats
import pytest

from tests.support.cluster import js_cluster, start_node
from tests.support.http import get_json
from tests.support.wait import eventually_async
from tests.test_js_cluster import _acc_conf

# (one cluster at a time, with the other cluster tests: see test_js_cluster_r3)
pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters"), pytest.mark.timeout(240)]

NAMES = ("js-a", "js-b", "js-c")


def _leader(servers):
    leaders = {get_json(s.http_port, "/jsz")["meta_cluster"]["leader"] for s in servers.values()}
    return leaders.pop() if len(leaders) == 1 and "" not in leaders else None


@pytest.mark.parametrize("kind", ["nats-server", "natsbroker"])
def test_a_new_meta_leader_asks_every_server_for_its_statsz(tmp_path, kind):
    start = lambda ports, n: start_node(kind, lambda p: _acc_conf(tmp_path, n, p), ports, n)  # noqa: E731
    with js_cluster(start, NAMES) as (_ports, servers):
        asyncio.run(_ping_on_leader_change(servers))


async def _ping_on_leader_change(servers):
    sys_nc = await nats.connect(servers["js-a"].url, user="sys", password="pw")
    app = await nats.connect(servers["js-b"].url, user="app", password="pw")
    try:
        pings, statsz = [], {}

        async def on_ping(msg):
            pings.append((msg.reply, msg.data, msg.headers,
                          asyncio.get_running_loop().time()))

        async def on_statsz(msg):
            server = json.loads(msg.data)["server"]["name"]
            statsz.setdefault(server, []).append(asyncio.get_running_loop().time())
        await sys_nc.subscribe("$SYS.REQ.SERVER.PING", cb=on_ping)
        await sys_nc.subscribe("$SYS.SERVER.*.STATSZ", cb=on_statsz)
        await sys_nc.flush()

        old = _leader(servers)
        r = await sys_nc.request("$JS.API.META.LEADER.STEPDOWN", b"", timeout=10)
        assert json.loads(r.data)["success"] is True

        async def new_leader():
            leader = _leader(servers)
            return leader is not None and leader != old and pings
        await eventually_async(new_leader, timeout=60, what="a new meta leader and its PING")
        # An empty request with no reply and no headers: "everyone broadcast
        # a statsz now".
        assert pings[-1][:3] == ("", b"", None)
        # (timed where the client received it: polling the servers' /jsz
        # for the new leader may take a while on a loaded machine)
        pinged = pings[-1][3]

        async def answered():
            return all(any(t >= pinged - 0.1 for t in statsz.get(n, ())) for n in NAMES)
        # They follow the PING at once, the new leader's own among them (the
        # servers' heartbeats are 2-8 s apart by now; 2.5 s allow for a
        # loaded machine).
        await eventually_async(answered, timeout=2.5, what="a statsz from every server")

        # The new leader places an R3 stream at once.
        js = app.jetstream(timeout=10)
        info = await js.add_stream(name="AT_ONCE", subjects=["now.>"], num_replicas=3)
        assert info.config.num_replicas == 3
    finally:
        await app.close()
        await sys_nc.close()
