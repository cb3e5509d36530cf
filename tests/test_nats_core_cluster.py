"""The next-generation client (nats-core, nats-jetstream; see
tests/test_nats_core.py) against a three-node JetStream cluster of each
kind: an R3 stream's create, acks, info and a pull consumer, in the
client's strict mode, must come out the same from natsbroker as from
nats-server."""

import json

import pytest

from tests.support.cluster import start_node
from tests.support.servers import free_port
from tests.test_nats_core import py313, scenario  # noqa: F401 (a fixture)

# (one cluster at a time, with the other cluster tests: see test_js_cluster_r3)
pytestmark = [pytest.mark.timeout(300), pytest.mark.long, pytest.mark.xdist_group("clusters")]

NAMES = ("n1", "n2", "n3")


def _cluster(tmp_path, kind):
    tmp_path.mkdir(parents=True, exist_ok=True)
    ports = {n: free_port() for n in NAMES}
    servers = []
    try:
        for n in NAMES:
            def args(ports, n=n):
                path = tmp_path / ("%s-%s.conf" % (kind, n))
                routes = ["nats://127.0.0.1:%d" % p for m, p in ports.items() if m != n]
                path.write_text("server_name: %s\nlisten: 127.0.0.1:-1\n"
                                "jetstream { store_dir: %s }\n"
                                "cluster { name: cc, listen: 127.0.0.1:%d, routes: %s }\n"
                                % (n, json.dumps(str(tmp_path / kind / n)), ports[n],
                                   json.dumps(routes)))
                return ["-c", str(path)]
            servers.append(start_node(kind, args, ports, n))
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return servers


@pytest.mark.parametrize("strict", [False, True])
def test_an_r3_stream_through_the_next_generation_client(py313, tmp_path, strict):  # noqa: F811
    results = {}
    for kind in ("nats-server", "natsbroker"):
        servers = _cluster(tmp_path / ("%s-%s" % (kind, strict)), kind)
        try:
            extra = ("--strict",) if strict else ()
            results[kind] = scenario(py313, servers[1], "js_cluster", *extra)
        finally:
            for s in servers:
                s.stop()
    got = results["natsbroker"]
    assert got == results["nats-server"]
    if strict:
        # nats-jetstream 0.3.0's strict mode does not know PeerInfo's "peer"
        # (nats-server sends it since 2.11): the create's answer fails to
        # parse, from either server alike.
        assert got == {"create": {"error": "ValueError",
                                  "text": "PeerInfo.from_response() has unconsumed fields: [...]"}}
        return
    assert got["acks"] == [["R3", i + 1, False] for i in range(5)]
    assert [f[2] for f in got["fetched"]] == [1, 2, 3, 4, 5] and got["ack_floor"] == 5
