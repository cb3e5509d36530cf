"""Clustering (issue 15): routes between natsbroker nodes and nats-server nodes.

The same scenarios run on pure natsbroker clusters (2 and 3 nodes) and on
mixed ones (natsbroker + nats-server, 1+1, 2+1, 1+2). The first node is the
seed every other node routes to, so in three-node clusters the other two
meet only through gossip. Raw-socket tests compare what natsbroker says on a
route, and to clients, with what nats-server says.
"""

import asyncio
import json
import socket
import time
import uuid

import nats
import pytest
from nats.errors import NoRespondersError, TimeoutError

from tests.support.clients import flushed
from tests.support.cluster import cluster_conf, node_args, start_cluster, wait_mesh
from tests.support.http import get_json
from tests.support.raw import Conversation
from tests.support.servers import ServerProcess, free_port

NB, NS = "natsbroker", "nats-server"

TOPOLOGIES = {
    "nb+nb": (NB, NB),
    "nb+nb+nb": (NB, NB, NB),
    "ns+nb": (NS, NB),
    "nb+ns": (NB, NS),
    "nb+nb+ns": (NB, NB, NS),
    "nb+ns+ns": (NB, NS, NS),
    "ns+nb+nb": (NS, NB, NB),
}


def run(coro, timeout=90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture(scope="module", params=list(TOPOLOGIES))
def cluster(request):
    nodes = start_cluster(TOPOLOGIES[request.param])
    yield nodes
    for n in nodes:
        n.stop()


async def connect_all(nodes):
    return [await nats.connect(n.url, allow_reconnect=False) for n in nodes]


async def close_all(ncs):
    for nc in ncs:
        await nc.close()


async def until_seen(sub_nc, pub_ncs, timeout=30):
    """Subscribe a probe on ``sub_nc`` (after its other subscriptions) and
    publish to it from each of ``pub_ncs`` until it arrives: then the
    interest sent before it is known there too (one route, in order)."""
    subject = "probe." + uuid.uuid4().hex
    sub = await sub_nc.subscribe(subject)
    await flushed(sub_nc)
    deadline = time.time() + timeout
    for nc in pub_ncs:
        while True:
            await nc.publish(subject, b"")
            await flushed(nc)
            try:
                await sub.next_msg(0.2)
                break
            except TimeoutError:
                if time.time() > deadline:
                    raise AssertionError("interest on %s never reached a peer" % subject)
    await sub.unsubscribe()
    # Probes that were still on their way.
    await asyncio.sleep(0)


def _uid():
    return uuid.uuid4().hex[:8]


# -- in process: the route Protocol and its sink, with a StringTransport and a Clock ----


def _in_process_route():
    from twisted.internet.task import Clock
    from twisted.internet.testing import StringTransport

    from natsbroker.broker import Broker
    from natsbroker.cluster.routes import Cluster
    from natsbroker.config.model import ClusterConfig, ServerConfig
    from natsbroker.connection.route import RouteProtocol

    clock = Clock()
    broker = Broker(ServerConfig(cluster=ClusterConfig(name="c1", port=6222)), clock)
    cluster = Cluster(broker)
    route = RouteProtocol(cluster)
    transport = StringTransport()
    route.makeConnection(transport)
    route.dataReceived(b'CONNECT {"verbose":false,"headers":true,"name":"NPEER","cluster":"c1"}\r\n'
                       b'INFO {"server_id":"NPEER","server_name":"peer","port":1,"headers":true,'
                       b'"cluster":"c1","connect_urls":["10.0.0.9:4222"]}\r\n')
    return clock, broker, cluster, route, transport


def _written(transport):
    out = transport.value()
    transport.clear()
    return out


def test_in_process_registration_interest_and_once_per_route():
    clock, broker, cluster, route, t = _in_process_route()
    assert cluster.routes == {"NPEER": route}
    assert _written(t).startswith(b"INFO {")
    got = []
    broker.subscribe(b"local.x", lambda *a: got.append(a[1]))
    broker.flush()
    assert _written(t) == b"RS+ $G local.x\r\n"
    # The peer's interest: three subscriptions that all match "a.b", and a
    # queue group that only it has.
    route.dataReceived(b"RS+ $G a.b\r\nRS+ $G a.*\r\nRS+ $G >\r\nRS+ $G a.b g 2\r\n")
    assert broker.publish(b"a.b", b"hi", reply=b"r.1") >= 1
    broker.flush()
    # Once, with the group that picked the peer's member listed.
    assert _written(t) == b"RMSG $G a.b + r.1 g 2\r\nhi\r\n"
    route.dataReceived(b"RS- $G a.b g\r\n")
    broker.publish(b"a.b", b"ho", headers={"K": "v"})
    broker.flush()
    assert _written(t) == b"HMSG $G a.b 18 20\r\nNATS/1.0\r\nK: v\r\n\r\nho\r\n"
    # A routed message goes to local subscribers only, never back out.
    route.dataReceived(b"RMSG $G local.x 2\r\nyo\r\nRMSG $G a.b 2\r\nno\r\n")
    broker.flush()
    assert got == [b"local.x"] and _written(t) == b""
    # The client INFO now has the peer's client URL.
    assert broker.info_fields()["connect_urls"][-1] == "10.0.0.9:4222"


def test_in_process_queue_weights_sent_and_remote_weight_copies():
    clock, broker, cluster, route, t = _in_process_route()
    _written(t)
    s1 = broker.subscribe(b"w", lambda *a: None, queue=b"g")
    s2 = broker.subscribe(b"w", lambda *a: None, queue=b"g")
    broker.unsubscribe(s1)
    broker.unsubscribe(s2)
    broker.flush()
    assert _written(t) == b"RS+ $G w g 1\r\nRS+ $G w g 2\r\nRS+ $G w g 1\r\nRS- $G w g\r\n"
    route.dataReceived(b"RS+ $G w g 3\r\n")
    # weight 3: three copies (other subscriptions, such as a $JS.API import, aside)
    assert len(route.remote_subs[("$G", b"w", b"g")]) == 3
    route.dataReceived(b"RS+ $G w g 1\r\n")
    assert route.num_subscriptions() == 1 and len(route.remote_subs[("$G", b"w", b"g")]) == 1


def test_in_process_route_pings_then_stale():
    clock, broker, cluster, route, t = _in_process_route()
    _written(t)
    clock.advance(1.3)
    broker.flush()
    assert _written(t) == b"PING\r\n"
    route.dataReceived(b"PONG\r\n")
    clock.advance(30)
    clock.advance(30)
    broker.flush()
    assert _written(t) == b"PING\r\nPING\r\n"
    clock.advance(30)
    assert _written(t) == b"-ERR 'Stale Connection'\r\n"
    assert route.closed and route.close_reason == "Stale Connection"


def test_in_process_acceptor_needs_connect_first():
    from twisted.internet.task import Clock
    from twisted.internet.testing import StringTransport

    from natsbroker.broker import Broker
    from natsbroker.cluster.routes import Cluster
    from natsbroker.config.model import ClusterConfig, ServerConfig
    from natsbroker.connection.route import RouteProtocol

    broker = Broker(ServerConfig(cluster=ClusterConfig(name="c1", port=6222)), Clock())
    route = RouteProtocol(Cluster(broker))
    t = StringTransport()
    route.makeConnection(t)
    _written(t)
    route.dataReceived(b'INFO {"server_id":"X"}\r\n')
    assert _written(t) == b"-ERR 'Authorization Violation'\r\n" and route.closed


# -- scenarios, on every topology ----------------------------------------------------


def test_pub_sub_across_every_pair_of_nodes(cluster):
    async def main():
        ncs = await connect_all(cluster)
        base = "ps." + _uid()
        subs = []
        for nc in ncs:
            subs.append(await nc.subscribe(base + ".>"))
        # Two subscriptions of one client on one node that both match: two
        # copies, yet the message crosses the route once.
        extra = await ncs[-1].subscribe(base + ".*")
        for i, nc in enumerate(ncs):
            await until_seen(nc, [o for o in ncs if o is not nc])
        for i, nc in enumerate(ncs):
            for k in range(5):
                await nc.publish("%s.from%d" % (base, i), b"%d-%d" % (i, k))
            await flushed(nc)
        want = sorted(b"%d-%d" % (i, k) for i in range(len(ncs)) for k in range(5))
        for sub in subs + [extra]:
            got = [(await sub.next_msg(10)).data for _ in want]
            assert sorted(got) == want
            with pytest.raises(TimeoutError):
                await sub.next_msg(0.5)  # nothing twice, no echo loop
        await close_all(ncs)
    run(main())


def test_queue_group_one_delivery_per_message_cluster_wide(cluster):
    async def main():
        ncs = await connect_all(cluster)
        subject = "q." + _uid()
        got = {}
        for i, nc in enumerate(ncs):
            for m in range(2):
                def cb(i=i, m=m):
                    async def handler(msg):
                        got.setdefault(msg.data, []).append((i, m))
                    return handler
                await nc.subscribe(subject, queue="workers", cb=cb())
        plain = await ncs[-1].subscribe(subject)
        for nc in ncs:
            await until_seen(nc, [o for o in ncs if o is not nc])
        n = 150
        for i, nc in enumerate(ncs):
            for k in range(n):
                await nc.publish(subject, b"%d-%d" % (i, k))
            await flushed(nc)
        total = n * len(ncs)
        deadline = time.time() + 30
        while len(got) < total and time.time() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        assert len(got) == total
        assert all(len(v) == 1 for v in got.values()), [k for k, v in got.items() if len(v) > 1][:5]
        nodes_used = {v[0][0] for v in got.values()}
        assert nodes_used == set(range(len(ncs)))
        # The plain subscriber next to the group gets every message once.
        seen = [(await plain.next_msg(10)).data for _ in range(total)]
        assert len(set(seen)) == total
        await close_all(ncs)
    run(main())


def test_request_reply_and_no_responders_across_nodes(cluster):
    async def main():
        ncs = await connect_all(cluster)
        subject = "svc." + _uid()
        served = []

        async def responder(msg):
            served.append(msg.data)
            headers = {"Echo": msg.headers.get("X", "")} if msg.headers else None
            await ncs[-1].publish(msg.reply, b"re:" + msg.data, headers=headers)
        await ncs[-1].subscribe(subject, cb=responder)
        await ncs[-1].subscribe(subject + ".q", queue="g", cb=responder)
        await ncs[-2].subscribe(subject + ".q", queue="g", cb=responder)
        await until_seen(ncs[-1], ncs[:-1])
        await until_seen(ncs[-2], ncs[:-2] + ncs[-1:])
        r = await ncs[0].request(subject, b"1", timeout=10)
        assert r.data == b"re:1"
        r = await ncs[0].request(subject, b"2", timeout=10, headers={"X": "y"})
        assert (r.data, r.headers.get("Echo")) == (b"re:2", "y")
        for k in range(20):
            r = await ncs[0].request(subject + ".q", b"q%d" % k, timeout=10)
            assert r.data == b"re:q%d" % k
        assert sorted(served) == sorted([b"1", b"2"] + [b"q%d" % k for k in range(20)])
        with pytest.raises(NoRespondersError):
            await ncs[0].request("nobody." + _uid(), b"", timeout=10)
        await close_all(ncs)
    run(main())


def test_unsubscribe_propagates(cluster):
    async def main():
        ncs = await connect_all(cluster)
        subject = "un." + _uid()

        async def responder(msg):
            await msg.respond(b"ok")
        sub = await ncs[-1].subscribe(subject, cb=responder)
        qsub = await ncs[-1].subscribe(subject + ".q", queue="g", cb=responder)
        await until_seen(ncs[-1], ncs[:-1])
        assert (await ncs[0].request(subject, b"", timeout=10)).data == b"ok"
        assert (await ncs[0].request(subject + ".q", b"", timeout=10)).data == b"ok"
        await sub.unsubscribe()
        await qsub.unsubscribe()
        await flushed(ncs[-1])
        for s in (subject, subject + ".q"):
            deadline = time.time() + 20
            while True:
                try:
                    await ncs[0].request(s, b"", timeout=1)
                except NoRespondersError:
                    break
                except TimeoutError:
                    pass  # the RS- still on its way: the request reached no one
                assert time.time() < deadline, "interest in %s never went away" % s
                await asyncio.sleep(0.1)
        await close_all(ncs)
    run(main())


# -- set-up order, restarts, failover -------------------------------------------------


@pytest.mark.parametrize("kinds", [(NB, NB), (NS, NB), (NB, NS)], ids=["nb+nb", "ns+nb", "nb+ns"])
def test_subscriptions_made_before_the_route_forms(kinds):
    a = ServerProcess(kinds[0], node_args("n0")).start(60)
    try:
        async def before():
            nc = await nats.connect(a.url)
            sub = await nc.subscribe("early.x")
            qsub = await nc.subscribe("early.q", queue="g")
            await flushed(nc)
            return nc, sub, qsub

        async def main():
            nc, sub, qsub = await before()
            b = ServerProcess(kinds[1], node_args("n1", [a.cluster_port])).start(60)
            try:
                await asyncio.get_running_loop().run_in_executor(None, wait_mesh, [a, b])
                nb = await nats.connect(b.url)
                # (routez shows the route before the interest it carries is in)
                await until_seen(nc, [nb])
                await nb.publish("early.x", b"1")
                await nb.publish("early.q", b"2")
                await flushed(nb)
                assert (await sub.next_msg(10)).data == b"1"
                assert (await qsub.next_msg(10)).data == b"2"
                await nb.close()
            finally:
                b.stop()
            await nc.close()
        run(main())
    finally:
        a.stop()


@pytest.mark.parametrize("kinds", [(NB, NB), (NS, NB), (NB, NS)], ids=["nb+nb", "ns+nb", "nb+ns"])
def test_seed_killed_and_restarted_route_and_interest_come_back(kinds):
    port = free_port()
    a = ServerProcess(kinds[0], node_args("n0", cluster_port=port)).start(60)
    b = ServerProcess(kinds[1], node_args("n1", [port])).start(60)
    try:
        wait_mesh([a, b])

        async def main():
            nb = await nats.connect(b.url)
            sub = await nb.subscribe("rs.x")
            await flushed(nb)
            a.stop()
            a2 = None
            for _ in range(5):  # the port may be taken meanwhile: retry
                try:
                    a2 = ServerProcess(kinds[0], node_args("n0", cluster_port=port)).start(60)
                    break
                except RuntimeError:
                    time.sleep(0.5)
            assert a2 is not None
            try:
                await asyncio.get_running_loop().run_in_executor(None, wait_mesh, [a2, b])
                na = await nats.connect(a2.url)
                # B's interest is back on A (sent again when the route formed).
                await until_seen(nb, [na])
                await na.publish("rs.x", b"after")
                await flushed(na)
                assert (await sub.next_msg(10)).data == b"after"
                # And A's new interest reaches B.
                asub = await na.subscribe("rs.y")
                await until_seen(na, [nb])
                await nb.publish("rs.y", b"back")
                assert (await asub.next_msg(10)).data == b"back"
                await na.close()
            finally:
                a2.stop()
            await nb.close()
        run(main())
    finally:
        a.stop()
        b.stop()


@pytest.mark.parametrize("kinds", [(NB, NB), (NB, NS), (NS, NB)], ids=["nb+nb", "nb+ns", "ns+nb"])
def test_nats_py_discovers_servers_and_fails_over(kinds):
    nodes = start_cluster(kinds)
    a, b = nodes
    try:
        async def main():
            reconnected = asyncio.Event()

            async def on_reconnect():
                reconnected.set()
            nc = await nats.connect(a.url, reconnect_time_wait=0.2, max_reconnect_attempts=-1,
                                    reconnected_cb=on_reconnect)
            # connect_urls: the other node's client URL.
            deadline = time.time() + 20
            while not any(u.port == b.port for u in nc.discovered_servers):
                assert time.time() < deadline, nc.servers
                await asyncio.sleep(0.1)
            sub = await nc.subscribe("fo.x")
            await flushed(nc)
            a.stop()
            await asyncio.wait_for(reconnected.wait(), 30)
            assert nc.connected_url.port == b.port
            pub = await nats.connect(b.url)
            # Its subscription was made again on B.
            deadline = time.time() + 20
            while True:
                await pub.publish("fo.x", b"hello")
                await flushed(pub)
                try:
                    assert (await sub.next_msg(0.5)).data == b"hello"
                    break
                except TimeoutError:
                    assert time.time() < deadline
            await pub.close()
            await nc.close()
        run(main())
    finally:
        for n in nodes:
            n.stop()


@pytest.mark.parametrize("kinds", [(NB, NB), (NB, NS)], ids=["nb+nb", "nb+ns"])
def test_every_node_lists_every_route_itself_included(kinds):
    """The usual shared config: each node dials the other and itself. The
    route to self is dropped, the duplicate pair resolves to one route, and
    it stays (no reconnect churn)."""
    ports = [free_port(), free_port()]
    nodes = start_cluster(kinds, lambda i, seed: node_args("n%d" % i, ports, ports[i]))
    try:
        nb = nodes[0]

        def rids():
            return [r["rid"] for r in get_json(nb, "/routez")["routes"]]
        deadline = time.time() + 20
        while len(rids()) != 1:
            assert time.time() < deadline, get_json(nb, "/routez")
            time.sleep(0.1)
        first = rids()
        time.sleep(3)  # a churning pair would have replaced the route by now
        assert rids() == first

        async def main():
            ncs = await connect_all(nodes)
            sub = await ncs[0].subscribe("dup.x")
            await until_seen(ncs[0], ncs[1:])
            await ncs[1].publish("dup.x", b"once")
            await flushed(ncs[1])
            assert (await sub.next_msg(10)).data == b"once"
            with pytest.raises(TimeoutError):
                await sub.next_msg(0.5)
            await close_all(ncs)
        run(main())
    finally:
        for n in nodes:
            n.stop()


# -- what natsbroker says on a route, next to nats-server -------------------------------

# Fields nats-server 2.15 puts in its route INFO that natsbroker leaves out on
# purpose (reference note, section 10: no pool, no leaf-origin support; "ln"
# is of unknown meaning).
NS_ONLY_INFO = {"lnoc", "lnocu", "ln", "route_pool_size", "git_commit"}
NS_ONLY_CONNECT = {"lnoc", "ln"}


def _json_line(line, op):
    assert line.startswith(op + b" "), line
    return json.loads(line[len(op) + 1:])


@pytest.fixture(scope="module")
def pair():
    """A lone natsbroker node and a lone nats-server node, clustered alone."""
    nodes = [ServerProcess(k, node_args("solo-" + k)).start(60) for k in (NB, NS)]
    yield dict(zip((NB, NS), nodes))
    for n in nodes:
        n.stop()


def test_route_info_on_accept_has_nats_servers_fields(pair):
    infos = {}
    for kind, node in pair.items():
        c = Conversation(node.cluster_port)
        infos[kind] = _json_line(c.info, b"INFO")
        c.close()
    nb, ns = infos[NB], infos[NS]
    assert set(nb) <= set(ns)
    assert set(ns) - set(nb) <= NS_ONLY_INFO
    assert (nb["proto"], nb["compression"], nb["headers"], nb["cluster"]) == (2, "off", True, "c1")
    assert nb["port"] == pair[NB].cluster_port and "route_pool_size" not in nb
    # Field order follows nats-server's Info struct.
    assert list(nb) == [k for k in ns if k in nb]


def test_route_connect_when_soliciting_has_nats_servers_fields():
    connects = {}
    for kind in (NB, NS):
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(4)
        lsock.settimeout(30)
        node = ServerProcess(kind, node_args("sol", [lsock.getsockname()[1]])).start(60)
        try:
            conn, _ = lsock.accept()
            conn.settimeout(10)
            buf = b""
            while b"\r\n" not in buf:
                buf += conn.recv(4096)
            connects[kind] = _json_line(buf.split(b"\r\n")[0], b"CONNECT")
            conn.close()
        finally:
            node.stop()
            lsock.close()
    nb, ns = connects[NB], connects[NS]
    assert set(nb) <= set(ns) and set(ns) - set(nb) <= NS_ONLY_CONNECT
    assert list(nb) == [k for k in ns if k in nb]
    assert (nb["verbose"], nb["headers"], nb["cluster"]) == (False, True, "c1")


@pytest.mark.parametrize("send", [
    b"PING\r\n",  # anything but CONNECT first
    b'CONNECT {"verbose":false,"name":"X","cluster":"zz"}\r\n',
    b'CONNECT {"verbose":false,"lang":"go","name":"X","cluster":"c1"}\r\n',
], ids=["not-connect-first", "cluster-name-mismatch", "client-on-route-port"])
def test_acceptor_refusals_match_nats_server(pair, send):
    out = {}
    for kind, node in pair.items():
        c = Conversation(node.cluster_port)
        c.send(send)
        out[kind] = (c.read_until(b"\r\n", quiet=3), )
        deadline = time.time() + 5
        while not c.closed and time.time() < deadline:
            c._recv(0.5)
        out[kind] += (c.closed,)
        c.close()
    assert out[NB] == out[NS]
    assert out[NB][0].startswith(b"-ERR ")


def _raw_route(node, name):
    """A raw socket that is a route peer of ``node``: returns it, with the
    interest dump the node sent after our INFO."""
    c = Conversation(node.cluster_port)
    sid = "NRAW" + uuid.uuid4().hex.upper()
    c.send(b'CONNECT {"echo":true,"verbose":false,"pedantic":false,"tls_required":false,'
           b'"headers":true,"name":"%s","cluster":"c1"}\r\n' % sid.encode())
    c.send(b'INFO {"server_id":"%s","server_name":"%s","version":"2.15.1","proto":2,"host":"127.0.0.1",'
           b'"port":1,"headers":true,"max_payload":1048576,"cluster":"c1","compression":"off"}\r\n'
           % (sid.encode(), name.encode()))
    return c


def test_routed_message_delivery_rules_match_nats_server(pair):
    """TestNewRouteProcessRoutedMsgs: plain subs get every RMSG; a queue
    sub gets one only when its group is listed."""
    results = {}
    for kind, node in pair.items():
        cli = Conversation(node.port)
        cli.send(b'CONNECT {"verbose":false,"headers":true}\r\nSUB foo 1\r\nSUB foo bar 2\r\n'
                 b'SUB foo baz 3\r\nPING\r\n')
        assert cli.read_until().endswith(b"PONG\r\n")
        route = _raw_route(node, "raw-" + kind)
        dump = route.read_until(b"RS+ $G foo baz 1\r\n", quiet=3)
        lines = [ln for ln in dump.split(b"\r\n") if ln.startswith(b"RS+ $G foo")]
        route.send(b"RMSG $G foo 2\r\nok\r\nRMSG $G foo | bar 2\r\nq1\r\n"
                   b"RMSG $G foo + rep bar baz 2\r\nq2\r\n"
                   b"HMSG $G foo | baz 12 14\r\nNATS/1.0\r\n\r\nq3\r\n")
        cli.send(b"PING\r\n")
        got = b""
        deadline = time.time() + 10
        while got.count(b"MSG ") < 8 and time.time() < deadline:
            got += cli.read_until(b"\r\n", quiet=0.5)
        results[kind] = (sorted(lines), sorted(m for m in got.split(b"\r\n") if b"MSG" in m))
        route.close()
        cli.close()
    assert results[NB] == results[NS]
    assert results[NB][0] == [b"RS+ $G foo", b"RS+ $G foo bar 1", b"RS+ $G foo baz 1"]


def test_interest_updates_on_a_route_match_nats_server(pair):
    results = {}
    for kind, node in pair.items():
        route = _raw_route(node, "raw2-" + kind)
        route.read_until(b"\r\n", quiet=1)
        cli = Conversation(node.port)
        cli.send(b'CONNECT {"verbose":false}\r\nSUB iu.x 1\r\nSUB iu.x 2\r\nSUB iu.q g 3\r\n'
                 b'SUB iu.q g 4\r\nUNSUB 4\r\nUNSUB 1\r\nUNSUB 2\r\nUNSUB 3\r\nPING\r\n')
        cli.read_until()
        got = b""
        deadline = time.time() + 10
        while got.count(b"RS- ") < 2 and time.time() < deadline:
            got += route.read_until(b"\r\n", quiet=0.5)
        results[kind] = [ln for ln in got.split(b"\r\n") if b" iu." in ln]
        route.close()
        cli.close()
    assert results[NB] == results[NS]
    assert results[NB] == [b"RS+ $G iu.x", b"RS+ $G iu.q g 1", b"RS+ $G iu.q g 2",
                           b"RS+ $G iu.q g 1", b"RS- $G iu.x", b"RS- $G iu.q g"]


def test_clients_get_async_info_with_connect_urls():
    """A protocol-1 client hears of a node joining and leaving (INFO with
    connect_urls), as from nats-server; key sets compared."""
    seen = {}
    for kind in (NB, NS):
        with ServerProcess(kind, node_args("lone")) as node:
            seen[kind] = _join_and_leave(node)
    assert seen[NB] == seen[NS]


def test_a_route_without_connect_urls_sends_clients_no_info():
    """A route whose INFO has no connect_urls (here a raw peer) leaves the
    clients' INFO as it was: no async INFO, no connect_urls (nats-server
    adds URLs only as routes announce them)."""
    seen = {}
    for kind in (NB, NS):
        with ServerProcess(kind, node_args("lone")) as node:
            cli = Conversation(node.port)
            cli.send(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
            got = cli.read_pongs(1, quiet=1, info=True)  # the PONG and its INFO
            assert b"PONG\r\n" in got
            if b"PING\r\n" in got:
                cli.send(b"PONG\r\n")  # (the server's RTT ping)
            route = _raw_route(node, "nourls-" + kind)
            route.send(b"PING\r\n")
            deadline = time.time() + 10
            back = b""
            while b"PONG" not in back and time.time() < deadline:
                back += route.read_until(b"\r\n", quiet=0.5)
            assert b"PONG" in back
            cli.send(b"PING\r\n")
            seen[kind] = cli.read_until()
            later = Conversation(node.port)
            seen[kind] = (seen[kind], "connect_urls" in _json_line(later.info, b"INFO"))
            later.close()
            route.close()
            cli.close()
    assert seen[NB] == seen[NS] == (b"PONG\r\n", False)


def _join_and_leave(node):
    if True:
        cli = Conversation(node.port)
        first = _json_line(cli.info, b"INFO")
        cli.send(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
        cli.read_until(b"\r\n", quiet=2)
        cli.read_until(b"\r\n", quiet=1)  # the INFO after the first PONG
        other = ServerProcess(NS, node_args("joiner", [node.cluster_port])).start(60)
        try:
            joined = b""
            deadline = time.time() + 20
            while b"connect_urls" not in joined and time.time() < deadline:
                joined += cli.read_until(b"\r\n", quiet=0.5)
        finally:
            other.stop()
        left = b""
        deadline = time.time() + 20
        while b"INFO" not in left and time.time() < deadline:
            left += cli.read_until(b"\r\n", quiet=0.5)
        j = _json_line(joined.strip().split(b"\r\n")[-1], b"INFO")
        g = _json_line(left.strip().split(b"\r\n")[-1], b"INFO")
        own = "127.0.0.1:%d" % node.port
        assert "connect_urls" not in first and first["cluster"] == "c1"
        assert j["connect_urls"] == [own, "127.0.0.1:%d" % other.port]
        assert g["connect_urls"] == [own]
        cli.close()
        return set(first), set(j), set(g)


def test_a_peer_in_lame_duck_mode_leaves_connect_urls():
    """A nats-server peer entering lame duck mode (SIGUSR2) sends its route
    INFO with ldm: our clients get INFO without its URL, as nats-server's do."""
    import signal

    a = ServerProcess(NB, node_args("n0")).start(60)
    b = ServerProcess(NS, node_args("n1", [a.cluster_port])).start(60)
    try:
        wait_mesh([a, b])
        keep = Conversation(b.port)  # (a server without clients skips the INFO)
        keep.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
        keep.read_until()
        cli = Conversation(a.port)
        cli.send(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
        first = b""
        deadline = time.time() + 10
        while b"connect_info" not in first and time.time() < deadline:
            first += cli.read_until(b"\r\n", quiet=0.5)
        assert ("127.0.0.1:%d" % b.port).encode() in first
        b.proc.send_signal(signal.SIGUSR2)
        got = b""
        deadline = time.time() + 20
        while b"INFO" not in got and time.time() < deadline:
            got += cli.read_until(b"\r\n", quiet=0.5)
        info = _json_line(got.strip().split(b"\r\n")[-1], b"INFO")
        assert info["connect_urls"] == ["127.0.0.1:%d" % a.port]
        cli.close()
        keep.close()
    finally:
        b.stop(timeout=5)
        a.stop()


@pytest.mark.parametrize("kind", [NB, NS])
def test_a_node_entering_lame_duck_mode_tells_its_clients_the_others_urls(kind):
    """The lame duck INFO a node's own clients get carries ldm and only the
    other servers' URLs (nats-server's sendLDMToClients)."""
    import signal

    a = ServerProcess(kind, node_args("n0")).start(60)
    b = ServerProcess(NS, node_args("n1", [a.cluster_port])).start(60)
    try:
        wait_mesh([a, b])
        cli = Conversation(a.port)
        cli.send(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
        first = b""
        deadline = time.time() + 10
        while b"connect_info" not in first and time.time() < deadline:
            first += cli.read_until(b"\r\n", quiet=0.5)
        a.proc.send_signal(signal.SIGUSR2)
        got = b""
        deadline = time.time() + 20
        while b'"ldm"' not in got and time.time() < deadline:
            got += cli.read_until(b"\r\n", quiet=0.5)
        info = _json_line(got.strip().split(b"\r\n")[-1], b"INFO")
        assert info["ldm"] is True
        assert info["connect_urls"] == ["127.0.0.1:%d" % b.port]
        cli.close()
    finally:
        a.stop(sig=signal.SIGINT, timeout=10)
        b.stop()


def test_in_process_lame_duck_info_to_peers():
    clock, broker, cluster, route, t = _in_process_route()
    _written(t)
    cluster.enter_lame_duck()
    broker.flush()
    line = _written(t)
    assert line.startswith(b"INFO {") and line.endswith(b" \r\n")
    info = json.loads(line[5:])
    assert info["ldm"] is True and "nonce" not in info and info["server_id"] == broker.server_id


def test_routez_and_varz_cluster_keys_match_nats_server():
    nodes = start_cluster((NB, NS))
    try:
        rz = {k: get_json(n, "/routez?subs=1") for k, n in zip((NB, NS), nodes)}
        vz = {k: get_json(n, "/varz") for k, n in zip((NB, NS), nodes)}
    finally:
        for n in nodes:
            n.stop()
    assert set(rz[NB]) == set(rz[NS])
    assert rz[NB]["num_routes"] == 1
    # nats-server's entry for the route from natsbroker (no pool: one connection).
    nb_row = rz[NB]["routes"][0]
    ns_rows = [r for r in rz[NS]["routes"] if r["remote_id"] == vz[NB]["server_id"]]
    assert len(ns_rows) == 1
    assert set(nb_row) == set(ns_rows[0]) - {"account"}
    assert nb_row["remote_id"] == vz[NS]["server_id"] and nb_row["did_solicit"] is False
    # (Only the node with configured routes has "urls": here nats-server.)
    assert set(vz[NB]["cluster"]) == set(vz[NS]["cluster"]) - {"urls"}
    assert vz[NS]["cluster"]["urls"] == ["127.0.0.1:%d" % nodes[0].cluster_port]
    assert vz[NB]["cluster"]["name"] == "c1" and vz[NB]["cluster"]["cluster_port"] == nodes[0].cluster_port
    assert vz[NB]["connect_urls"] == ["127.0.0.1:%d" % nodes[0].port, "127.0.0.1:%d" % nodes[1].port]
    assert vz[NB]["routes"] == 1


# -- bad input on a route (issue 15 item 6), next to nats-server --------------------------


def _quick_conf(tmp, name, routes=()):
    # Route keepalive shortened so that a silent peer is found within seconds.
    return cluster_conf(tmp, name, routes, 'ping_interval: "1s"', "ping_max: 2")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quick")
    nodes = {k: ServerProcess(k, _quick_conf(tmp, "q-" + k.replace("-", ""))).start(60) for k in (NB, NS)}
    yield nodes
    for n in nodes.values():
        n.stop()


def _after(node, send, quiet=2.0):
    """A raw route peer (registered) sends ``send``: what it reads after
    its interest dump (PINGs left out), and whether the node closed."""
    c = _raw_route(node, "bad-" + uuid.uuid4().hex[:6])
    c.read_until(b"\r\n", quiet=1)
    c.send(b"PONG\r\n")
    c.send(send)
    got = c.read_until(b"\r\n", quiet=quiet)
    deadline = time.time() + 5
    while not c.closed and time.time() < deadline:
        got += c.read_until(b"\r\n", quiet=0.5)
    c.close()
    return got.replace(b"PING\r\n", b""), c.closed


@pytest.mark.parametrize("send,expect", [
    (b"RS+ $G foo q1\r\n", b""),  # a queue without a weight
    (b"RMSG $G foo x y 2\r\nhi\r\n", b""),  # a bad reply indicator
    (b"RMSG $G foo abc\r\n", b""),  # a size that is no number
    (b"FOO bar\r\n", b"-ERR 'Unknown Protocol Operation'\r\n"),
    (b"RS+ $G " + b"x" * (70 * 1024) + b"\r\n", b"-ERR 'maximum control line exceeded'\r\n"),
], ids=["queue-without-weight", "bad-reply-indicator", "bad-size", "unknown-op", "oversized-control-line"])
def test_malformed_route_protocol_matches_nats_server(quick, send, expect):
    out = {kind: _after(node, send) for kind, node in quick.items()}
    assert out[NB] == out[NS] == (expect, True)


def test_a_silent_route_is_found_stale_like_nats_server(quick):
    """A registered peer that stops answering PINGs: the node sends PINGs
    every ping_interval and after ping_max of them -ERR 'Stale Connection'."""
    out = {}
    for kind, node in quick.items():
        c = _raw_route(node, "silent-" + uuid.uuid4().hex[:6])
        t0 = time.time()
        got = b""
        while not c.closed and time.time() - t0 < 15:
            got += c.read_until(b"\r\n", quiet=0.5)
        took = time.time() - t0
        c.close()
        keep = [ln for ln in got.split(b"\r\n") if ln in (b"PING", b"-ERR 'Stale Connection'")]
        out[kind] = (keep, c.closed)
        assert 2 < took < 8, (kind, took)
    assert out[NB] == out[NS] == ([b"PING", b"PING", b"-ERR 'Stale Connection'"], True)


def test_a_route_dialing_a_client_port_gets_nats_servers_answer():
    """What a client port says to a server that took it for a route port:
    the route CONNECT and INFO pass, the first RS+ is an unknown op."""
    out = {}
    for kind in (NB, NS):
        with ServerProcess(kind, node_args("cp")) as node:
            c = Conversation(node.port)
            c.send(b'CONNECT {"echo":true,"verbose":false,"pedantic":false,"tls_required":false,"headers":true,'
                   b'"name":"NROUTE","cluster":"c1"}\r\nINFO {"server_id":"NROUTE","cluster":"c1","port":1}\r\n'
                   b"PING\r\n")
            first = c.read_until(b"\r\n", quiet=2)
            c.send(b"RS+ $G foo\r\n")
            got = c.read_until(b"\r\n", quiet=2)
            out[kind] = (first, got, c.closed)
            c.close()
    assert out[NB] == out[NS]
    assert out[NB][0] == b"PONG\r\n" and out[NB][1] == b"-ERR 'Unknown Protocol Operation'\r\n"


def test_a_peer_that_goes_silent_is_redialed_and_others_are_unaffected(tmp_path):
    """A (natsbroker) routes to B (nats-server, stopped with SIGSTOP) and C
    (natsbroker): A finds B stale, closes it and keeps redialing; A and C
    and their clients keep working meanwhile; B comes back into the mesh."""
    import signal

    a = ServerProcess(NB, _quick_conf(tmp_path, "a")).start(60)
    b = ServerProcess(NS, _quick_conf(tmp_path, "b", ["nats-route://127.0.0.1:%d" % a.cluster_port])).start(60)
    c = ServerProcess(NB, _quick_conf(tmp_path, "c", ["nats-route://127.0.0.1:%d" % a.cluster_port])).start(60)
    nodes = [a, b, c]
    try:
        wait_mesh(nodes)
        b.proc.send_signal(signal.SIGSTOP)
        try:
            deadline = time.time() + 30
            while "Stale Connection" not in a.log() and time.time() < deadline:
                time.sleep(0.2)
            assert "Router connection closed: Stale Connection" in a.log(), a.log()[-2000:]

            async def main():
                ncs = [await nats.connect(n.url, allow_reconnect=False) for n in (a, c)]
                sub = await ncs[1].subscribe("alive.x")
                await until_seen(ncs[1], ncs[:1])
                await ncs[0].publish("alive.x", b"still")
                await flushed(ncs[0])
                assert (await sub.next_msg(10)).data == b"still"
                await close_all(ncs)
            run(main())
        finally:
            b.proc.send_signal(signal.SIGCONT)
        wait_mesh(nodes, timeout=60)
    finally:
        for n in nodes:
            n.stop()


# -- pool_size and compression: accepted as nats-server takes them --------------------------


@pytest.mark.parametrize("kinds", [(NB, NS), (NS, NB)], ids=["nb-seed", "ns-seed"])
def test_pool_size_and_compression_settings_still_form_one_cluster(tmp_path, kinds):
    """Both nodes configured with route pools and compression, as operators
    write them for nats-server: natsbroker accepts the keys and its INFO keeps
    one plain connection, so the cluster forms and carries messages."""
    confs = []
    for i, block in enumerate(["pool_size: 3\n  compression: s2_fast",
                               "pool_size: -1\n  compression: {mode: s2_auto, rtt_thresholds: [10ms]}"]):
        path = tmp_path / ("n%d.conf" % i)
        path.write_text("cluster {\n  %s\n}\n" % block)
        confs.append(str(path))
    a = ServerProcess(kinds[0], ["-c", confs[0]] + node_args("n0")).start(60)
    try:
        b = ServerProcess(kinds[1], ["-c", confs[1]] + node_args("n1", [a.cluster_port])).start(60)
        try:
            wait_mesh([a, b])
            for n in (a, b):
                assert "unknown field" not in n.log()

            async def main():
                ncs = await connect_all([a, b])
                try:
                    await until_seen(ncs[1], [ncs[0]])
                finally:
                    await close_all(ncs)
            run(main())
        finally:
            b.stop()
    finally:
        a.stop()


def test_unsupported_compression_mode_is_a_start_error_not_a_t_error(tmp_path):
    path = tmp_path / "c.conf"
    path.write_text("cluster {\n  name: c1\n  port: -1\n  compression: bogus\n}\n")
    import subprocess

    from tests.support.servers import broker_command, nats_server_binary
    got = {}
    for kind, cmd in ((NS, [nats_server_binary()]), (NB, broker_command())):
        t = subprocess.run(cmd + ["-c", str(path), "-t"], capture_output=True, text=True, timeout=60)
        s = subprocess.run(cmd + ["-c", str(path), "-p", "-1", "-a", "127.0.0.1"],
                           capture_output=True, text=True, timeout=60)
        got[kind] = (t.returncode, s.returncode, (s.stdout + s.stderr).strip().split(": ", 1)[1])
    assert got[NB] == got[NS] == (0, 1, 'unsupported compression mode "bogus"')


# -- WebSocket clients are told the cluster's WebSocket URLs -------------------------------


@pytest.mark.parametrize("kind", [NB, NS])
def test_websocket_clients_get_the_clusters_websocket_urls(tmp_path, kind):
    """Route INFO carries ws_connect_urls; a WebSocket client's INFO has the
    cluster's WebSocket URLs as connect_urls (nats-server's
    generateClientInfoJSON), a plain client's the client URLs."""
    conf = tmp_path / "ws.conf"
    conf.write_text("websocket { host: 127.0.0.1, port: -1, no_tls: true }\n")
    a = ServerProcess(kind, ["-c", str(conf)] + node_args("n0")).start(60)
    try:
        # (the peer of the other kind: each learns the other's ws_connect_urls)
        peer = NB if kind == NS else NS
        b = ServerProcess(peer, ["-c", str(conf)] + node_args("n1", [a.cluster_port])).start(60)
        try:
            wait_mesh([a, b])

            async def main():
                ws = await nats.connect("ws://127.0.0.1:%d" % a.ws_port, allow_reconnect=False)
                plain = await nats.connect(a.url, allow_reconnect=False)
                try:
                    deadline = time.time() + 20
                    while time.time() < deadline and not (
                            ws._server_info.get("connect_urls") and plain._server_info.get("connect_urls")):
                        await asyncio.sleep(0.1)
                    return (sorted(ws._server_info.get("connect_urls") or []),
                            sorted(plain._server_info.get("connect_urls") or []))
                finally:
                    await ws.close()
                    await plain.close()
            ws_urls, plain_urls = run(main())
            assert ws_urls == sorted("127.0.0.1:%d" % n.ws_port for n in (a, b))
            assert plain_urls == sorted("127.0.0.1:%d" % n.port for n in (a, b))
        finally:
            b.stop()
    finally:
        a.stop()
