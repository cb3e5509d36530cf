"""README's three-node cluster example, run as written (ports swapped for
free ones): the three `natsbroker` lines start a full mesh, and a message
published on node a reaches a subscriber on node c (nats-py stands in for
the `nats` CLI lines)."""

import asyncio
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time

import nats
import pytest

from tests.support.clients import flushed
from tests.support.cluster import meta_formed
from tests.support.http import http
from tests.support.servers import ROOT

# (one cluster at a time, with the other cluster tests: see test_js_cluster_r3)
pytestmark = [pytest.mark.timeout(180), pytest.mark.xdist_group("clusters")]


def _example():
    text = open(os.path.join(ROOT, "README.md")).read()
    block = text.split("<!-- three-node example -->", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.startswith("natsbroker ")]


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _routes(http_port):
    try:
        status, _, body = http(http_port, "/routez", timeout=2)
    except OSError:
        return -1
    return json.loads(body)["num_routes"] if status == 200 else -1


def test_readme_three_node_example_works_as_written(tmp_path):
    lines = _example()
    assert len(lines) == 3
    fixed = sorted({int(p) for line in lines for p in re.findall(r"\b(\d{4})\b", line)})
    ports = dict(zip(fixed, _free_ports(len(fixed))))
    procs, http = [], []
    env = dict(os.environ, PYTHONPATH=ROOT)
    try:
        for i, line in enumerate(lines):
            argv = shlex.split(re.sub(r"\b(\d{4})\b", lambda m: str(ports[int(m.group(1))]),
                                      line.rstrip(" &")))
            assert argv[0] == "natsbroker"
            http.append(int(argv[argv.index("-m") + 1]))
            log = open(tmp_path / ("node%d.log" % i), "wb")
            procs.append(subprocess.Popen([sys.executable, "-m", "natsbroker"] + argv[1:],
                                          stdout=log, stderr=subprocess.STDOUT, env=env))
        deadline = time.time() + 60
        while time.time() < deadline and any(_routes(h) != 2 for h in http):
            time.sleep(0.2)
        assert [_routes(h) for h in http] == [2, 2, 2]
        client = [int(shlex.split(re.sub(r"\b(\d{4})\b", lambda m: str(ports[int(m.group(1))]),
                                         line))[4]) for line in lines]

        async def main():
            sub_nc = await nats.connect("nats://127.0.0.1:%d" % client[2])
            pub_nc = await nats.connect("nats://127.0.0.1:%d" % client[0])
            sub = await sub_nc.subscribe("greet")
            await flushed(sub_nc)
            end = time.time() + 30
            while True:  # until the interest has crossed the route
                await pub_nc.publish("greet", b"hello")
                await flushed(pub_nc)
                try:
                    msg = await sub.next_msg(timeout=0.5)
                    break
                except nats.errors.TimeoutError:
                    assert time.time() < end, "the message never reached node c"
            await sub_nc.close()
            await pub_nc.close()
            return msg.data

        assert asyncio.run(main()) == b"hello"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def _jetstream_example():
    text = open(os.path.join(ROOT, "README.md")).read()
    part = text.split("<!-- three-node jetstream example -->", 1)[1]
    block = part.split("```sh\n", 1)[1].split("```", 1)[0]
    script = part.split("```python\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.startswith("natsbroker ")], script


def _launch(lines, tmp_path, attempt):
    """Start the example's three servers on free ports; None when one of them
    exits at once (a port taken by another test in between), to try again."""
    fixed = sorted({int(p) for line in lines for p in re.findall(r"\b(\d{4})\b", line)})
    ports = dict(zip(fixed, _free_ports(len(fixed))))

    def local(text):
        text = re.sub(r"\b(\d{4})\b", lambda m: str(ports[int(m.group(1))]), text)
        return text.replace("/tmp/", "%s/%d-" % (tmp_path, attempt))
    procs, http_ports = [], []
    env = dict(os.environ, PYTHONPATH=ROOT)
    for i, line in enumerate(lines):
        argv = shlex.split(local(line.rstrip(" &")))
        http_ports.append(int(argv[argv.index("-m") + 1]))
        log = open(tmp_path / ("node%d-%d.log" % (i, attempt)), "wb")
        procs.append(subprocess.Popen([sys.executable, "-m", "natsbroker"] + argv[1:],
                                      stdout=log, stderr=subprocess.STDOUT, env=env))
    return procs, http_ports, local


def _stop(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def test_readme_jetstream_cluster_example_works_as_written(tmp_path):
    lines, script = _jetstream_example()
    assert len(lines) == 3
    for attempt in range(3):
        procs, http_ports, local = _launch(lines, tmp_path, attempt)
        try:
            deadline = time.time() + 90
            while time.time() < deadline and not meta_formed(http_ports):
                if any(p.poll() is not None for p in procs):
                    break
                time.sleep(0.3)
            if any(p.poll() is not None for p in procs):
                continue  # a port was taken meanwhile: new ports
            logs = "".join(open(tmp_path / ("node%d-%d.log" % (i, attempt)), errors="replace").read()
                           for i in range(3))
            assert meta_formed(http_ports), "no whole meta group:\n" + logs[-6000:]
            out = subprocess.run([sys.executable, "-c", local(script)], capture_output=True,
                                 text=True, timeout=60, cwd=str(tmp_path))
            logs = "".join("--- node %d\n" % i + open(tmp_path / ("node%d-%d.log" % (i, attempt)),
                                                    errors="replace").read()[-4000:]
                           for i in range(3))
            assert out.returncode == 0 and out.stdout.strip() == "1 b'blue'", \
                out.stdout + out.stderr + logs
            return
        finally:
            _stop(procs)
    raise AssertionError("the example's servers did not stay up in three attempts")
