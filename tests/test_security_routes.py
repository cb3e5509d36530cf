"""Cluster permissions and route queue weights, side by side with nats-server.

``cluster { permissions { import, export } }``: a node asks its peers only
for the interest it may import (its RS+ are filtered), takes from them only
the interest it may export (other RS+ are ignored), and a wildcard interest
that overlaps an export deny entry does not receive the denied subjects. A
queue weight of more than 9 digits is no member at all (nats-server's
parseSize). Each scenario runs against a nats-server node and a natsbroker
node with the same config, a raw route peer on the other end, and then in a
mixed cluster.
"""

import time
import uuid

import pytest

from tests.support.cluster import cluster_conf, wait_mesh
from tests.support.raw import Conversation
from tests.support.servers import ServerProcess
from tests.test_cluster import _raw_route

NB, NS = "natsbroker", "nats-server"

PERMS = """
    permissions {
      import: { allow: ["imp.>"] }
      export: { allow: ["exp.>", "big", "ok"], deny: ["exp.secret"] }
    }
"""


def _conf(tmp, name, perms=PERMS, routes=()):
    return cluster_conf(tmp, name, routes, perms)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("route-perms")
    nodes = {k: ServerProcess(k, _conf(tmp, "g-" + k.replace("-", ""))).start(60) for k in (NB, NS)}
    yield nodes
    for n in nodes.values():
        n.stop()


def _client(node, subs=b""):
    c = Conversation(node.port)
    c.send(b'CONNECT {"verbose":false,"headers":true}\r\n' + subs + b"PING\r\n")
    assert c.read_until().endswith(b"PONG\r\n")
    return c


def _lines(data, prefix):
    return sorted(ln for ln in data.split(b"\r\n") if ln.startswith(prefix))


def _scenario(node):
    cli = _client(node, b"SUB imp.a 1\r\nSUB priv.a 2\r\nSUB imp.q grp 3\r\nSUB priv.q grp 4\r\n")
    route = _raw_route(node, "raw-" + uuid.uuid4().hex[:6])
    # (The node's PONG comes after what it sent before reading our PING.)
    route.send(b"PING\r\n")
    sent_interest = _lines(route.read_until(), b"RS")
    # Interest the node may export, may not, a wildcard over a denied
    # subject, and queue weights of 10 digits (no member) and 5.
    route.send(b"PONG\r\nRS+ $G exp.ok\r\nRS+ $G other.x\r\nRS+ $G exp.*\r\n"
               b"RS+ $G big q 1234567890\r\nRS+ $G ok q 5\r\nPING\r\n")
    assert route.read_until().endswith(b"PONG\r\n")
    for subject in (b"exp.ok", b"exp.secret", b"other.x", b"big", b"ok"):
        cli.send(b"PUB %s 2\r\nhi\r\n" % subject)
    # Later interest: the import filter applies to changes too.
    cli.send(b"SUB imp.later 5\r\nSUB priv.later 6\r\nUNSUB 2\r\nUNSUB 1\r\nPING\r\n")
    assert cli.read_until().endswith(b"PONG\r\n")
    route.send(b"PING\r\n")
    got = route.read_until()
    cli.close()
    route.close()
    return sent_interest, _lines(got, b"RMSG"), _lines(got, b"RS")


def test_route_permissions_and_weights_match_nats_server(guarded):
    out = {kind: _scenario(node) for kind, node in guarded.items()}
    assert out[NB] == out[NS]
    interest, msgs, updates = out[NB]
    assert interest == [b"RS+ $G imp.a", b"RS+ $G imp.q grp 1"]
    assert msgs == [b"RMSG $G exp.ok 2", b"RMSG $G ok | q 2"]
    assert updates == [b"RS+ $G imp.later", b"RS- $G imp.a"]


@pytest.mark.parametrize("kind", [NB, NS])
def test_mixed_cluster_honours_permissions(tmp_path, kind):
    """A node of ``kind`` with permissions and a plain node of the other
    kind: what crosses the route either way."""
    other = NS if kind == NB else NB
    a = ServerProcess(kind, _conf(tmp_path, "a")).start(60)
    try:
        b = ServerProcess(other, _conf(tmp_path, "b", perms="", routes=[a.cluster_port])).start(60)
        try:
            wait_mesh([a, b])
            on_a = _client(a, b"SUB imp.x 1\r\nSUB priv.x 2\r\n")
            on_b = _client(b, b"SUB exp.ok 1\r\nSUB exp.* 2\r\nSUB other.y 3\r\n")
            # Let the interest cross the route both ways.
            deadline = time.time() + 10
            while time.time() < deadline and not _delivered(a, b):
                time.sleep(0.2)
            pub_b = _client(b)
            pub_b.send(b"PUB imp.x 1\r\n1\r\nPUB priv.x 1\r\n2\r\nPING\r\n")
            pub_a = _client(a)
            pub_a.send(b"PUB exp.ok 1\r\n3\r\nPUB exp.secret 1\r\n4\r\nPUB other.y 1\r\n5\r\nPING\r\n")
            assert pub_a.read_until().endswith(b"PONG\r\n")
            assert pub_b.read_until().endswith(b"PONG\r\n")
            got_a, got_b = _settled(on_a), _settled(on_b)
            assert _lines(got_a, b"MSG") == [b"MSG imp.x 1 1"]
            assert _lines(got_b, b"MSG") == [b"MSG exp.ok 1 1", b"MSG exp.ok 2 1"]
        finally:
            b.stop()
    finally:
        a.stop()


def _settled(c):
    """What ``c`` received until a PONG after a short quiet spell (messages
    crossing a route come when they come)."""
    time.sleep(0.5)
    c.send(b"PING\r\n")
    return c.read_until()


def _delivered(a, b):
    """A probe across the route on an imported and exported subject."""
    on_a = _client(a, b"SUB imp.probe 1\r\n")
    on_b = _client(b, b"SUB big 1\r\n")
    time.sleep(0.2)
    _client(b).send(b"PUB imp.probe 1\r\nx\r\nPING\r\n")
    _client(a).send(b"PUB big 1\r\nx\r\nPING\r\n")
    ok = b"MSG imp.probe" in _settled(on_a) and b"MSG big" in _settled(on_b)
    on_a.close()
    on_b.close()
    return ok
