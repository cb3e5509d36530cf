"""Client fail-over in a cluster (issue 29, conformance 4).

A client connected to the first node of a 3- or 5-node cluster, with
``no_randomize`` and no reconnect wait, moves to the next node each time the
node it is on shuts down: with nats-server it reconnects within 10 s every
time, so it must with natsbroker. Both servers, with the next-generation
client (nats-core, run by the 3.13 interpreter as in test_nats_core.py,
through tests/nats_core/failover.py) and with nats-py.

On one host both servers pass these. What differed is what a client is told
to fail over to: listening on every interface (the default), nats-server
lists each interface's global unicast addresses in ``connect_urls``, while
natsbroker listed what the host name resolves to, falling back to
127.0.0.1: a client on another host (or in another container) was sent to
its own loopback and never reconnected. The last test compares the lists.
"""

import asyncio
import json
import queue
import subprocess
import threading
import time

import nats
import pytest

from tests.support.cluster import node_args, start_cluster
from tests.support.raw import Wire
from tests.support.servers import ROOT
from tests.test_nats_core import _interpreter

pytestmark = pytest.mark.timeout(300)

SCRIPT = ROOT + "/tests/nats_core/failover.py"
MOVE_WITHIN = 10.0  # seconds, as with nats-server
KINDS = ["nats-server", "natsbroker"]


@pytest.fixture
def cluster(request):
    kind, n = request.param
    nodes = start_cluster([kind] * n)
    yield nodes
    for node in nodes:
        node.stop()


def _connect_urls_known(nodes, timeout=30):
    """Every node tells its clients every other node's URL (a client that
    connects before the mesh has formed learns them by async INFO anyway)."""
    deadline = time.time() + timeout
    for node in nodes:
        while True:
            with _Info(node.port) as info:
                urls = set(info.get("connect_urls") or ())
            if urls >= {"127.0.0.1:%d" % n.port for n in nodes if n is not node}:
                break
            assert time.time() < deadline, (node.port, urls)
            time.sleep(0.1)


class _Info:
    """The INFO a client gets on connecting to ``port``."""

    def __init__(self, port):
        self.wire = Wire(port)

    def __enter__(self):
        assert self.wire.info_line.startswith(b"INFO "), self.wire.info_line
        return self.wire.info

    def __exit__(self, *exc):
        self.wire.close()


class _Client:
    """failover.py in the 3.13 interpreter; its events arrive on a queue."""

    def __init__(self, py, url):
        self.proc = subprocess.Popen([py, SCRIPT, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=ROOT)
        self.events = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.events.put(json.loads(line))
        self.events.put({"event": "exited"})

    def next(self, kinds, timeout):
        """The next event of ``kinds`` within ``timeout`` s (others skipped)."""
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            try:
                e = self.events.get(timeout=max(left, 0.01))
            except queue.Empty:
                return None
            if e["event"] in kinds or e["event"] in ("closed", "exited"):
                return e

    def stderr_tail(self):
        """What the client logged (it is stopped first: for a failure)."""
        return self.close()[-4000:]

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.stderr.read()


CASES = [(kind, n) for kind in KINDS for n in (3, 5)]


def _on(nodes, port):
    """The running node a client is on, by its client port."""
    node = next(n for n in nodes if n.port == port)
    assert node.proc.poll() is None, port
    return node


@pytest.mark.parametrize("cluster", CASES, indirect=True, ids=["%s-%d" % c for c in CASES])
def test_nats_core_client_moves_to_the_next_node_each_shutdown(cluster):
    # (Which node is next is the client's choice: nats-server's
    # connect_urls come in no set order, so the node to stop is the one the
    # client says it is on.)
    nodes = cluster
    py = _interpreter()
    _connect_urls_known(nodes)
    client = _Client(py, nodes[0].url)
    try:
        e = client.next({"connected"}, 30)
        assert e and e["event"] == "connected" and e["port"] == nodes[0].port, e
        for i in range(len(nodes) - 1):
            _on(nodes, e["port"]).stop()
            started = time.time()
            e = client.next({"reconnected"}, MOVE_WITHIN)
            assert e is not None and e["event"] == "reconnected", (i, e, nodes[0].kind, client.stderr_tail())
            _on(nodes, e["port"])
            assert time.time() - started < MOVE_WITHIN
    finally:
        err = client.close()
    # (the client logs each failed dial with a traceback: only its exit counts)
    assert client.proc.returncode == 0, err[-3000:]


@pytest.mark.parametrize("cluster", CASES, indirect=True, ids=["%s-%d" % c for c in CASES])
def test_nats_py_client_moves_to_the_next_node_each_shutdown(cluster):
    nodes = cluster
    _connect_urls_known(nodes)

    async def main():
        moved = asyncio.Queue()

        async def reconnected():
            moved.put_nowait(nc.connected_url.port)
        nc = await nats.connect(nodes[0].url, dont_randomize=True, reconnect_time_wait=0,
                                max_reconnect_attempts=-1, reconnected_cb=reconnected)
        try:
            port = nodes[0].port
            for _ in range(len(nodes) - 1):
                _on(nodes, port).stop()
                port = await asyncio.wait_for(moved.get(), MOVE_WITHIN)
                _on(nodes, port)
                await nc.flush(timeout=10)
        finally:
            await nc.close()
    asyncio.run(asyncio.wait_for(main(), 120))


# -- what a client is told to fail over to ------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_connect_urls_of_a_server_on_every_interface_match_nats_server(host):
    """Listening on every interface, nats-server gives clients each
    interface's global unicast addresses (private ones included, loopback
    and link-local left out), so a client on another host can reach the
    node it fails over to. natsbroker gave 127.0.0.1 (what the host name
    resolves to here), which sends such a client to its own loopback."""
    seen = {}
    for kind in KINDS:
        nodes = start_cluster([kind] * 2, lambda i, seed: node_args(
            "n%d" % i, [seed.cluster_port] if seed else (), extra=["-a", host]))
        try:
            ports = {n.port: "P%d" % i for i, n in enumerate(nodes)}
            deadline = time.time() + 30
            while True:
                with _Info(nodes[0].port) as info:
                    urls = info.get("connect_urls") or []
                if len({u.rsplit(":", 1)[1] for u in urls}) == 2 or time.time() > deadline:
                    break
                time.sleep(0.1)
            seen[kind] = sorted(u.rsplit(":", 1)[0] + ":" + ports[int(u.rsplit(":", 1)[1])] for u in urls)
        finally:
            for n in nodes:
                n.stop()
    assert seen["natsbroker"] == seen["nats-server"]
    assert not any(u.startswith(("127.", "[::1]")) for u in seen["natsbroker"])
