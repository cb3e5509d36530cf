"""A JetStream cluster started the way nats.py's ``nats.server.run_cluster(
jetstream=True)`` starts one: three processes of whatever ``nats-server``
is first on PATH, command-line flags only (no config file, no monitoring
port), each awaited by reading its standard error for "Listening for client
connections on" and "Server is ready" within 10 s. natsbroker, put on PATH
as ``nats-server``, must start and serve such a cluster as nats-server does:
the same scenario runs against both, and what the clients see is compared.

(That package is not on PyPI, only a placeholder is, so its function is
not imported here: its command lines are, flag for flag.)
"""

import asyncio
import os
import re
import signal
import subprocess
import sys
import time

import nats
import nats.js.errors
import pytest

from natsbroker import launch
from tests.support.servers import free_port

pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters")]

READY = re.compile(rb"Server is ready")
LISTENING = re.compile(rb"Listening for client connections on (.+):(\d+)")


def _shim(tmp_path, kind):
    """A directory holding an executable ``nats-server`` that is ``kind``."""
    d = tmp_path / ("bin-" + kind)
    d.mkdir()
    target = launch.nats_server_binary() if kind == "nats-server" else None
    script = d / "nats-server"
    if target:
        script.write_text('#!/bin/sh\nexec "%s" "$@"\n' % target)
    else:
        script.write_text('#!/bin/sh\nexec "%s" -m natsbroker "$@"\n' % sys.executable)
    script.chmod(0o755)
    return str(d)


def _start_node(path, port, cluster_port, routes, name, store_dir):
    """run_cluster's _run_cluster_node: the same flags in the same order."""
    argv = ["nats-server", "--port", str(port), "--jetstream", "--store_dir", store_dir,
            "--cluster", "nats://127.0.0.1:%d" % cluster_port, "--cluster_name", "cluster",
            "--routes", ",".join("nats://127.0.0.1:%d" % r for r in routes), "-n", name]
    env = dict(os.environ, PATH=path + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    host = url_port = None
    deadline = time.monotonic() + 10  # (run_cluster's own timeout)
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = LISTENING.search(line)
        if m:
            host, url_port = m.group(1).decode(), int(m.group(2))
        if READY.search(line):
            break
    else:
        proc.kill()
        raise AssertionError("%s not ready in 10 s:\n%s" % (name, b"".join(lines).decode()))
    assert host is not None and url_port == port, b"".join(lines).decode()
    # The rest of the log is drained so that the server never blocks on a full pipe.
    drain = subprocess.Popen(["cat"], stdin=proc.stderr, stdout=subprocess.DEVNULL)
    return proc, drain, "nats://%s:%d" % (host, url_port)


def _run_cluster(tmp_path, kind, size=3):
    path = _shim(tmp_path, kind)
    ports = [free_port() for _ in range(size)]
    cluster_ports = [free_port() for _ in range(size)]
    nodes = []
    try:
        for i in range(size):
            store = tmp_path / kind / ("node%d" % (i + 1))
            store.mkdir(parents=True)
            nodes.append(_start_node(path, ports[i], cluster_ports[i],
                                     [cluster_ports[j] for j in range(size) if j != i],
                                     "node%d" % (i + 1), str(store)))
    except BaseException:
        _shutdown(nodes)
        raise
    return nodes


def _shutdown(nodes):
    for proc, drain, _url in nodes:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc, drain, _url in nodes:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        drain.wait(10)


async def _retrying(make, timeout=60):
    """What a client of a cluster just started does: retry while there is no
    meta leader yet (a timeout, 503) or it has not heard from every server
    (10005), as against nats-server."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await make()
        except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError,
                nats.js.errors.NoStreamResponseError):
            pass
        except nats.js.errors.BadRequestError as e:
            if e.err_code != 10005:
                raise
        if time.monotonic() > deadline:
            raise AssertionError("no JetStream cluster in %d s" % timeout)
        await asyncio.sleep(0.25)


async def _scenario(nodes):
    urls = [url for _p, _d, url in nodes]
    nc = await nats.connect(urls[0], max_reconnect_attempts=-1)
    seen = {}
    try:
        js = nc.jetstream(timeout=5)
        si = await _retrying(lambda: js.add_stream(name="ORDERS", subjects=["orders.>"],
                                                  num_replicas=3))
        seen["stream"] = (si.config.num_replicas, si.cluster.name, 1 + len(si.cluster.replicas))
        for i in range(10):
            ack = await js.publish("orders.%d" % (i % 3), b"o%d" % i)
            assert ack.seq == i + 1
        kv = await _retrying(lambda: js.create_key_value(bucket="CFG", replicas=3))
        await kv.put("color", b"blue")
        seen["kv"] = (await kv.get("color")).value
        obs = await _retrying(lambda: js.create_object_store("FILES", replicas=3))
        await obs.put("a.bin", b"x" * 300_000)
        seen["obj"] = len((await obs.get("a.bin")).data)
        # Served from another server of the cluster too.
        nc2 = await nats.connect(urls[2])
        try:
            js2 = nc2.jetstream(timeout=5)
            seen["info"] = (await js2.stream_info("ORDERS")).state.messages
            seen["kv2"] = (await (await js2.key_value("CFG")).get("color")).value
            sub = await js2.pull_subscribe("orders.>", durable="D", stream="ORDERS")
            msgs = await sub.fetch(10, timeout=10)
            for m in msgs:
                await m.ack_sync()
            seen["pulled"] = [m.data for m in msgs]
        finally:
            await nc2.close()
    finally:
        await nc.close()
    return seen


def test_run_cluster_jetstream_cluster_of_natsbroker_serves_as_nats_server(tmp_path):
    results = {}
    for kind in ("nats-server", "natsbroker"):
        nodes = _run_cluster(tmp_path, kind)
        try:
            results[kind] = asyncio.run(_scenario(nodes))
        finally:
            _shutdown(nodes)
    want = {"stream": (3, "cluster", 3), "kv": b"blue", "obj": 300_000, "info": 10,
            "kv2": b"blue", "pulled": [b"o%d" % i for i in range(10)]}
    assert results["nats-server"] == want
    assert results["natsbroker"] == results["nats-server"]
