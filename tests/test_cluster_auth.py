"""Route credentials (issue 15): ``cluster { authorization { user, password,
timeout } }`` and ``nats-route://user:pass@host:port``.

What a peer sees and what is logged are compared with nats-server given the
same config; mixed clusters (natsbroker <-> nats-server) must form with the
right credentials both ways and stay apart with wrong ones.
"""

import json
import socket
import time

import pytest

from tests.support.clients import flushed
from tests.support.cluster import cluster_conf, peers, server_id, wait_mesh
from tests.support.raw import Conversation
from tests.support.servers import ServerProcess
from tests.support.wait import eventually
from tests.test_cluster import NB, NS, close_all, connect_all, run, until_seen

AUTH_BLOCK = "authorization { user: ruser, password: rpass, timeout: 1 }"


def conf_file(tmp_path, name, routes=(), auth=AUTH_BLOCK, extra=""):
    return cluster_conf(tmp_path, name, routes, auth, extra)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """One node of each kind whose cluster port wants ruser/rpass."""
    tmp = tmp_path_factory.mktemp("auth")
    nodes = {k: ServerProcess(k, conf_file(tmp, "g-" + k.replace("-", ""))).start(60) for k in (NB, NS)}
    yield nodes
    for n in nodes.values():
        n.stop()


def _conversation(node, send, quiet=3):
    """What a raw route peer reads after ``send`` (the INFO aside), whether
    the node then closed, and how long that took."""
    c = Conversation(node.cluster_port)
    info = json.loads(c.info[5:])
    t0 = time.time()
    if send:
        c.send(send)
    got = c.read_until(b"\r\n", quiet=quiet)
    deadline = time.time() + 5
    while not c.closed and time.time() < deadline:
        c._recv(0.5)
    took = time.time() - t0
    c.close()
    return info, got.replace(b"PING\r\n", b""), c.closed, took


@pytest.mark.parametrize("send", [
    b'CONNECT {"verbose":false,"name":"NX1","cluster":"c1","headers":true}\r\n',
    b'CONNECT {"verbose":false,"user":"ruser","pass":"nope","name":"NX2","cluster":"c1"}\r\n',
    b'CONNECT {"verbose":false,"user":"other","pass":"rpass","name":"NX3","cluster":"c1"}\r\n',
    # Credentials are checked before the cluster name and before the client check.
    b'CONNECT {"verbose":false,"user":"ruser","pass":"nope","name":"NX4","cluster":"zz"}\r\n',
    b'CONNECT {"verbose":false,"lang":"go","name":"NX5","cluster":"c1"}\r\n',
], ids=["no-credentials", "bad-password", "bad-user", "bad-password-and-cluster", "client-no-credentials"])
def test_bad_route_credentials_match_nats_server(guarded, send):
    out = {}
    for kind, node in guarded.items():
        info, got, closed, _ = _conversation(node, send)
        assert info["auth_required"] is True
        out[kind] = (got, closed)
    assert out[NB] == out[NS] == (b"-ERR 'Authorization Violation'\r\n", True)
    who = json.loads(send[8:])
    line = "authentication error" + (' - User "%s"' % who["user"] if "user" in who else "")
    for node in guarded.values():
        deadline = time.time() + 5
        while line not in node.log() and time.time() < deadline:
            time.sleep(0.1)
        assert "[ERR]" in node.log() and line in node.log(), node.log()[-2000:]


def test_good_credentials_are_accepted_and_not_logged(guarded):
    out = {}
    for kind, node in guarded.items():
        _, got, closed, _ = _conversation(
            node, b'CONNECT {"verbose":false,"user":"ruser","pass":"rpass","name":"NX6","cluster":"c1"}\r\n',
            quiet=1.5)
        out[kind] = (got, closed)
        assert "rpass" not in node.log()
    assert out[NB] == out[NS] == (b"", False)


def test_silent_peer_gets_the_auth_timeout(guarded):
    out = {}
    for kind, node in guarded.items():
        _, got, closed, took = _conversation(node, b"", quiet=3)
        out[kind] = (got, closed)
        assert 0.8 < took < 3, (kind, took)
    assert out[NB] == out[NS] == (b"-ERR 'Authentication Timeout'\r\n", True)


def test_solicitor_sends_only_the_url_credentials(tmp_path):
    """nats-server puts a route URL's user/pass in its CONNECT, and nothing
    from its own authorization block when the URL has none."""
    connects = {}
    for kind in (NB, NS):
        for creds in ("", "u1:p%401@"):
            lsock = socket.socket()
            lsock.bind(("127.0.0.1", 0))
            lsock.listen(4)
            lsock.settimeout(30)
            url = "nats-route://%s127.0.0.1:%d" % (creds, lsock.getsockname()[1])
            node = ServerProcess(kind, conf_file(tmp_path, "sol", [url])).start(60)
            try:
                conn, _ = lsock.accept()
                conn.settimeout(10)
                buf = b""
                while b"\r\n" not in buf:
                    buf += conn.recv(4096)
                c = json.loads(buf.split(b"\r\n")[0][8:])
                connects[kind, creds] = (c.get("user"), c.get("pass"))
                conn.close()
            finally:
                node.stop()
                lsock.close()
    assert connects[NB, ""] == connects[NS, ""] == (None, None)
    assert connects[NB, "u1:p%401@"] == connects[NS, "u1:p%401@"] == ("u1", "p@1")


MIXED = [(NB, NS), (NS, NB), (NB, NB)]


@pytest.mark.parametrize("kinds", MIXED, ids=["nb-seed", "ns-seed", "nb-only"])
def test_cluster_forms_with_credentials_and_gossip_carries_them(tmp_path, kinds):
    """Seed + one node with the URL's credentials; a third node that knows
    only the seed is dialed by the second through gossip with the cluster's
    own credentials (auth_required in the gossiped INFO)."""
    seed = ServerProcess(kinds[0], conf_file(tmp_path, "s0")).start(60)
    nodes = [seed]
    try:
        url = "nats-route://ruser:rpass@127.0.0.1:%d" % seed.cluster_port
        for i, kind in enumerate((kinds[1], NS if kinds[1] == NB else NB)):
            nodes.append(ServerProcess(kind, conf_file(tmp_path, "s%d" % (i + 1), [url])).start(60))
        wait_mesh(nodes)

        async def main():
            ncs = await connect_all(nodes)
            sub = await ncs[2].subscribe("auth.x")
            await until_seen(ncs[2], ncs[:2])
            await ncs[1].publish("auth.x", b"hi")
            await flushed(ncs[1])
            assert (await sub.next_msg(10)).data == b"hi"
            await close_all(ncs)
        run(main())
    finally:
        for n in nodes:
            n.stop()


@pytest.mark.parametrize("kinds", [(NB, NS), (NS, NB)], ids=["nb-accepts", "ns-accepts"])
def test_wrong_credentials_keep_nodes_apart_and_are_retried(tmp_path, kinds):
    acceptor = ServerProcess(kinds[0], conf_file(tmp_path, "a")).start(60)
    url = "nats-route://ruser:wrong@127.0.0.1:%d" % acceptor.cluster_port
    dialer = ServerProcess(kinds[1], conf_file(tmp_path, "d", [url])).start(60)
    try:
        # Refused at least twice: the dialer retries an explicit route.
        deadline = time.time() + 20
        while acceptor.log().count('authentication error - User "ruser"') < 2 and time.time() < deadline:
            time.sleep(0.2)
        assert acceptor.log().count('authentication error - User "ruser"') >= 2, acceptor.log()[-2000:]
        assert "Authorization Violation" in dialer.log()
        # A dialer lists the acceptor as a route for the instant between the
        # acceptor's INFO and its -ERR (nats-server does so too, on every
        # retry), so "apart" is a sample with neither side listing the other.
        eventually(lambda: not peers(acceptor) and not peers(dialer), timeout=10,
                   what="both nodes without routes")
        assert server_id(dialer) not in peers(acceptor)
    finally:
        dialer.stop()
        acceptor.stop()


@pytest.mark.parametrize("block", ["authorization { token: x }",
                                   "authorization { users: [{user: a, password: b}] }"],
                         ids=["token", "users"])
def test_refused_cluster_authorization_blocks_match_nats_server(tmp_path, block):
    import subprocess
    import sys

    from tests.support.servers import ROOT, nats_server_binary
    path = tmp_path / "bad.conf"
    path.write_text("cluster {\n  port: -1\n  %s\n}\n" % block)
    out = {}
    for kind, cmd in ((NS, [nats_server_binary()]), (NB, [sys.executable, "-m", "natsbroker"])):
        p = subprocess.run(cmd + ["-t", "-c", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=60)
        out[kind] = (p.returncode != 0, (p.stdout + p.stderr).strip().splitlines()[0].split(": ", 1)[1])
    assert out[NB] == out[NS]
