"""JetStream in a natsbroker cluster (natsbroker.jetstream.cluster): the meta
group elects a leader among natsbroker servers, streams are placed on one
server and served from every other, as in nats-server's R1 streams.
"""

import asyncio
import json
import subprocess
import sys

import nats
import pytest

from tests.support.cluster import js_cluster, start_node
from tests.support.http import get_json
from tests.support.servers import ROOT, ServerProcess, free_port, nats_server_binary
from tests.support.wait import eventually_async

# Three-server clusters run one at a time (one xdist worker for the group):
# several at once on a 2-core machine starve their elections.
pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters")]

NAMES = ("js-a", "js-b", "js-c")


@pytest.mark.parametrize("conf, error", [
    ("listen: 127.0.0.1:-1\njetstream {}\ncluster { listen: 127.0.0.1:-1 }\n",
     "jetstream cluster requires `server_name` to be set"),
    ("server_name: x\nlisten: 127.0.0.1:-1\njetstream {}\ncluster { listen: 127.0.0.1:-1 }\n",
     "jetstream cluster requires `cluster.name` to be set"),
])
def test_a_jetstream_cluster_needs_names_as_nats_server_says(tmp_path, conf, error):
    path = tmp_path / "c.conf"
    path.write_text(conf.replace("jetstream {}", "jetstream { store_dir: %s }" % json.dumps(str(tmp_path / "s"))))
    for cmd in ([nats_server_binary()], [sys.executable, "-m", "natsbroker"]):
        p = subprocess.run(cmd + ["-c", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=60)
        out = p.stdout + p.stderr
        assert p.returncode == 1 and error in out and "Traceback" not in out, (cmd, out)


def _conf(tmp_path, name, ports):
    path = tmp_path / ("%s.conf" % name)
    routes = ["nats://127.0.0.1:%d" % p for n, p in ports.items() if n != name]
    path.write_text("server_name: %s\nlisten: 127.0.0.1:-1\nhttp: 127.0.0.1:-1\n"
                    "jetstream { store_dir: %s }\n"
                    "cluster { name: jsc, listen: 127.0.0.1:%d, routes: %s }\n"
                    % (name, json.dumps(str(tmp_path / name)), ports[name], json.dumps(routes)))
    return ["-c", str(path)]


@pytest.fixture
def cluster(tmp_path):
    start = lambda ports, n: start_node("natsbroker", lambda p: _conf(tmp_path, n, p), ports, n)  # noqa: E731
    with js_cluster(start, NAMES) as (_ports, servers):
        yield servers


async def _until_created(js, **kw):
    async def made():
        try:
            return await js.add_stream(**kw)
        except nats.errors.TimeoutError:
            return None
        except nats.js.errors.ServiceUnavailableError:
            return None
    return await eventually_async(made, timeout=60, what="a stream created (a meta leader elected)")


def test_streams_live_on_one_server_and_are_served_from_all(cluster):
    asyncio.run(_streams(cluster))


async def _streams(cluster):
    ncs = [await nats.connect(s.url) for s in cluster.values()]
    try:
        js = [nc.jetstream(timeout=5) for nc in ncs]
        info = await _until_created(js[0], name="ORDERS", subjects=["orders.>"])
        assert info.config.name == "ORDERS"
        # Published on every server, stored once, acked from where it lives.
        for i, j in enumerate(js):
            ack = await j.publish("orders.%d" % i, b"o%d" % i)
            assert (ack.stream, ack.seq) == ("ORDERS", i + 1)
        for j in js:
            si = await j.stream_info("ORDERS")
            assert si.state.messages == 3
        hosts = [n for n, s in cluster.items() if get_json(s.http_port, "/jsz")["streams"] == 1]
        assert len(hosts) == 1, hosts
        # /jsz's meta_cluster: one leader everybody names, three members.
        metas = [get_json(s.http_port, "/jsz")["meta_cluster"] for s in cluster.values()]
        assert len({m["leader"] for m in metas}) == 1 and metas[0]["leader"] in NAMES, metas
        for m, name in zip(metas, NAMES):
            assert m["name"] == "jsc" and m["cluster_size"] == 3 and m["quorum_needed"] == 2, m
            assert {r["name"] for r in m["replicas"]} == set(NAMES) - {name}, m
        # The account's names, from any server.
        for nc in ncs:
            r = await nc.request("$JS.API.STREAM.NAMES", b"", timeout=5)
            assert json.loads(r.data)["streams"] == ["ORDERS"]
        # A second stream may not take the first one's subjects.
        with pytest.raises(nats.js.errors.BadRequestError) as e:
            await js[1].add_stream(name="DUP", subjects=["orders.x"])
        assert e.value.err_code == 10065
        # Consumers live with their stream; pulled from another server.
        await js[2].add_consumer("ORDERS", durable_name="C", ack_policy="explicit")
        sub = await js[1].pull_subscribe("orders.>", durable="C", stream="ORDERS")
        msgs = await sub.fetch(3, timeout=5)
        assert [m.data for m in msgs] == [b"o0", b"o1", b"o2"]
        # (routed to this server's client under the stored subject)
        assert [m.subject for m in msgs] == ["orders.0", "orders.1", "orders.2"]
        for m in msgs:
            await m.ack_sync()
        ci = await js[0].consumer_info("ORDERS", "C")
        assert ci.ack_floor.stream_seq == 3
        # The list asks the stream's host for its info.
        r = await ncs[2].request("$JS.API.STREAM.LIST", b"", timeout=8)
        listed = json.loads(r.data)
        assert [s["config"]["name"] for s in listed["streams"]] == ["ORDERS"] and "missing" not in listed
        # A push consumer's deliveries, and an ordered consumer's (flow
        # control, heartbeats), cross routes too.
        got = asyncio.get_running_loop().create_future()
        seen = []

        async def on_push(msg):
            seen.append(msg.subject)
            await msg.ack()
            if len(seen) == 3 and not got.done():
                got.set_result(True)
        push = await js[0].subscribe("orders.>", durable="P", cb=on_push, stream="ORDERS", manual_ack=True)
        await asyncio.wait_for(got, 10)
        assert seen == ["orders.0", "orders.1", "orders.2"]
        await push.unsubscribe()
        ordered = await js[1].subscribe("orders.>", ordered_consumer=True, stream="ORDERS")
        assert [(await ordered.next_msg(timeout=5)).data for _ in range(3)] == [b"o0", b"o1", b"o2"]
        await ordered.unsubscribe()
        # The account's usage, for the whole cluster, from any server.
        for j in js:
            ai = await j.account_info()
            assert ai.streams == 1 and ai.consumers >= 2 and ai.storage > 0, ai
        # A KV bucket (direct gets, watches) works the same way.
        kv = await js[0].create_key_value(bucket="CFG")
        await kv.put("a", b"1")
        kv2 = await js[2].key_value("CFG")
        assert (await kv2.get("a")).value == b"1"
        await kv2.put("a", b"2")
        assert (await kv.get("a")).value == b"2"
        # Deleted through the meta group, from yet another server.
        assert await js[1].delete_stream("ORDERS")
        with pytest.raises(nats.js.errors.NotFoundError):
            await js[0].stream_info("ORDERS")
    finally:
        for nc in ncs:
            await nc.close()


def test_without_a_meta_leader_requests_are_refused_as_nats_server_refuses(tmp_path):
    # One server whose route leads nowhere: the meta group (expected size 2)
    # never elects; after 10 s both servers say the system is unavailable.
    dead = free_port()
    servers = []
    try:
        for kind in ("nats-server", "natsbroker"):
            path = tmp_path / ("%s.conf" % kind)
            path.write_text("server_name: lone-%s\nlisten: 127.0.0.1:-1\njetstream { store_dir: %s }\n"
                            "cluster { name: lone, listen: 127.0.0.1:%d, routes: [nats://127.0.0.1:%d] }\n"
                            % (kind, json.dumps(str(tmp_path / kind)), free_port(), dead))
            servers.append(ServerProcess(kind, ["-c", str(path)]).start(60))
        answers = asyncio.run(_leaderless(servers))
        for a in answers:
            assert a["error"]["code"] == 503 and a["error"]["err_code"] == 10008, answers
            assert a["error"]["description"] == "JetStream system temporarily unavailable"
    finally:
        for s in servers:
            s.stop()


async def _leaderless(servers):
    out = []
    for s in servers:
        nc = await nats.connect(s.url)
        try:
            async def answered():
                try:
                    r = await nc.request("$JS.API.STREAM.CREATE.X", b'{"name":"X"}', timeout=1)
                    return json.loads(r.data)
                except nats.errors.TimeoutError:
                    return None
            out.append(await eventually_async(answered, timeout=30, what="an answer while leaderless"))
        finally:
            await nc.close()
    return out


ACCOUNTS = """
accounts {
  SYS { users [ {user: sys, password: pw} ] }
  APP { jetstream: enabled, users [ {user: app, password: pw} ] }
}
system_account: SYS
"""


def _acc_conf(tmp_path, name, ports):
    args = _conf(tmp_path, name, ports)
    path = tmp_path / ("%s.conf" % name)
    path.write_text(path.read_text() + ACCOUNTS)
    return args


def test_meta_leader_steps_down_to_the_preferred_server_and_the_cluster_restarts(tmp_path):
    ports = {n: free_port() for n in NAMES}
    servers = {n: start_node("natsbroker", lambda p, n=n: _acc_conf(tmp_path, n, p), ports, n)
               for n in NAMES}
    try:
        asyncio.run(_stepdown(servers))
        # Every server down and up again, on the same stores: the meta group's
        # log brings the streams back where they were.
        for s in servers.values():
            s.stop()
        for n in NAMES:
            servers[n] = start_node("natsbroker", lambda p, n=n: _acc_conf(tmp_path, n, p), ports, n)
        asyncio.run(_after_restart(servers))
    finally:
        for s in servers.values():
            s.stop()


def _leader(servers):
    metas = {n: get_json(s.http_port, "/jsz")["meta_cluster"]["leader"] for n, s in servers.items()}
    leaders = set(metas.values())
    return leaders.pop() if len(leaders) == 1 and "" not in leaders else None


async def _stepdown(servers):
    app = await nats.connect(servers["js-a"].url, user="app", password="pw")
    sys_nc = await nats.connect(servers["js-b"].url, user="sys", password="pw")
    try:
        js = app.jetstream(timeout=5)
        await _until_created(js, name="KEEP", subjects=["keep.>"])
        for i in range(5):
            await js.publish("keep.%d" % i, b"k")
        old = _leader(servers)
        target = next(n for n in NAMES if n != old)

        async def moved():
            return _leader(servers) == target
        # A leader hands over to the preferred server only when it heard
        # from it in the last 3 s, as nats-server's does, else to another
        # (or nobody): on a loaded machine, ask again.
        for attempt in range(3):
            if _leader(servers) == target:
                break
            r = await sys_nc.request("$JS.API.META.LEADER.STEPDOWN",
                                     json.dumps({"placement": {"preferred": target}}).encode(), timeout=5)
            assert json.loads(r.data) == {
                "type": "io.nats.jetstream.api.v1.meta_leader_stepdown_response", "success": True}
            try:
                await eventually_async(moved, timeout=15, what="the meta leader moved to %s" % target)
                break
            except AssertionError:
                if attempt == 2:
                    raise

                async def led():
                    return _leader(servers) is not None
                await eventually_async(led, timeout=30, what="a meta leader again")
        r = await sys_nc.request("$JS.API.META.LEADER.STEPDOWN",
                                 b'{"placement": {"preferred": "nobody"}}', timeout=5)
        assert json.loads(r.data)["error"] == {"code": 400, "err_code": 10005,
                                               "description": 'preferred server "nobody" not known'}
        # The new leader serves the account as the old one did.
        await _until_created(js, name="MORE", subjects=["more.>"])
    finally:
        await app.close()
        await sys_nc.close()


async def _after_restart(servers):
    app = await nats.connect(servers["js-c"].url, user="app", password="pw")
    try:
        js = app.jetstream(timeout=5)

        async def names():
            try:
                r = await app.request("$JS.API.STREAM.NAMES", b"", timeout=2)
            except nats.errors.TimeoutError:
                return None
            return json.loads(r.data).get("streams")
        assert await eventually_async(names, timeout=60, what="stream names after the restart") == \
            ["KEEP", "MORE"]
        async def kept():
            try:
                return (await js.stream_info("KEEP")).state.messages == 5
            except nats.errors.TimeoutError:
                return False
        await eventually_async(kept, timeout=30, what="KEEP's messages after the restart")
        ack = await js.publish("keep.again", b"k")
        assert ack.seq == 6
    finally:
        await app.close()
