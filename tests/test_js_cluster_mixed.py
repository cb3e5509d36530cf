"""A JetStream natsbroker server in a cluster whose other JetStream servers
are nats-server servers: it cannot be a member of their meta group yet, so it
says so and leaves the group (it never votes, never leads), and its clients
are served by the nats-server servers as a JetStream-less server's are."""

import asyncio
import json

import nats
import pytest

from tests.support.cluster import start_node
from tests.support.http import get_json
from tests.support.servers import free_port
from tests.support.wait import eventually, eventually_async

# Three-server clusters run one at a time (one xdist worker for the group):
# several at once on a 2-core machine starve their elections.
pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters")]

KINDS = {"ns-1": "nats-server", "ns-2": "nats-server", "nb-1": "natsbroker"}


def _conf(tmp_path, name, ports):
    path = tmp_path / ("%s.conf" % name)
    routes = ["nats://127.0.0.1:%d" % p for n, p in ports.items() if n != name]
    path.write_text("server_name: %s\nlisten: 127.0.0.1:-1\nhttp: 127.0.0.1:-1\n"
                    "jetstream { store_dir: %s }\n"
                    "cluster { name: mixed, listen: 127.0.0.1:%d, routes: %s }\n"
                    % (name, json.dumps(str(tmp_path / name)), ports[name], json.dumps(routes)))
    return ["-c", str(path)]


def test_a_natsbroker_jetstream_server_refuses_a_mixed_meta_group_clearly(tmp_path):
    ports = {n: free_port() for n in KINDS}
    servers = {}
    try:
        for n, kind in KINDS.items():
            servers[n] = start_node(kind, lambda p, n=n: _conf(tmp_path, n, p), ports, n)
        nb = servers["nb-1"]
        eventually(lambda: "cannot be a member of a JetStream cluster with nats-server" in nb.log(),
                   timeout=30, what="natsbroker's refusal in its log")
        assert "server 'ns-" in nb.log() and "Traceback" not in nb.log()

        def leader():
            leaders = {get_json(servers[n].http_port, "/jsz").get("meta_cluster", {}).get("leader")
                       for n in ("ns-1", "ns-2")}
            return leaders.pop() if len(leaders) == 1 and "" not in leaders else None
        assert eventually(leader, timeout=60, what="a meta leader") in ("ns-1", "ns-2")
        asyncio.run(_served(nb))
        # Never a candidate: the nats-server servers keep the leadership.
        assert leader() in ("ns-1", "ns-2")
    finally:
        for s in servers.values():
            s.stop()


async def _served(nb):
    nc = await nats.connect(nb.url)
    try:
        js = nc.jetstream(timeout=5)

        async def created():
            try:
                return await js.add_stream(name="MX", subjects=["mx.>"])
            except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
                return None
        await eventually_async(created, timeout=60, what="MX created by the nats-server servers")
        ack = await js.publish("mx.1", b"x")
        assert (ack.stream, ack.seq) == ("MX", 1)
        info = await js.stream_info("MX")
        assert info.cluster.leader in ("ns-1", "ns-2") and info.state.messages == 1
    finally:
        await nc.close()
