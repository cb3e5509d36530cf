"""The README's "Replicating a plugin's state" example, run as written: its
code block becomes replcounter.py, loaded by name on three clustered
natsbroker servers. Adds on any server are answered once committed, every
server's /counterz agrees, the plugin's group survives its leader's restart,
and the restarted server replays its log to the same value."""

import asyncio
import json
import os
import re

import nats
import pytest

from tests.support.cluster import start_node
from tests.support.http import get_json
from tests.support.servers import ROOT, free_port
from tests.support.wait import eventually, eventually_async

pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters")]
NAMES = ("rc-a", "rc-b", "rc-c")


def _example():
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"```python\n(# replcounter\.py.*?)```", text, re.S)
    assert len(blocks) == 1, "the README's replcounter.py block"
    return blocks[0]


def _conf(tmp_path, name, ports):
    path = tmp_path / ("%s.conf" % name)
    routes = ["nats://127.0.0.1:%d" % p for n, p in ports.items() if n != name]
    path.write_text(
        "server_name: %s\nlisten: 127.0.0.1:-1\nhttp: 127.0.0.1:-1\n"
        "cluster { name: rc, listen: 127.0.0.1:%d, routes: %s }\n"
        "plugins: [\"replcounter:counter\"]\n"
        "counter { servers: %s }\n"
        % (name, ports[name], json.dumps(routes), json.dumps(list(NAMES))))
    return ["-c", str(path), "-sd", str(tmp_path / name)]


def test_the_readme_raft_plugin_replicates_its_counter(tmp_path, monkeypatch):
    (tmp_path / "replcounter.py").write_text(_example())
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # (child_env puts the source first)
    ports = {n: free_port() for n in NAMES}
    servers = {}
    try:
        for n in NAMES:
            servers[n] = start_node("natsbroker", lambda p, n=n: _conf(tmp_path, n, p), ports, n)
        asyncio.run(_counting(tmp_path, ports, servers))
    finally:
        for s in servers.values():
            s.stop()


def _values(servers):
    return {n: get_json(s.http_port, "/counterz")["value"] for n, s in servers.items()}


async def _add(nc):
    async def added():
        try:
            return int((await nc.request("counter.add", b"", timeout=2)).data)
        except nats.errors.Error:
            return None  # no leader yet (or it just changed)
    return await eventually_async(added, timeout=60, what="an add answered")


async def _counting(tmp_path, ports, servers):
    ncs = {n: await nats.connect(s.url, max_reconnect_attempts=-1) for n, s in servers.items()}
    try:
        got = [await _add(ncs[NAMES[i % 3]]) for i in range(9)]
        assert got == list(range(1, 10))
        eventually(lambda: set(_values(servers).values()) == {9}, timeout=30,
                   what="every server at 9")
        # The leader restarts: the others elect one and go on; it replays.
        leader = eventually(lambda: next((n for n, s in servers.items()
                                          if get_json(s.http_port, "/counterz")["leader"]), None),
                            timeout=30, what="the counter's leader")
        servers[leader].stop()
        rest = {n: s for n, s in servers.items() if n != leader}
        other = next(iter(rest))
        for want in (10, 11):
            assert await _add(ncs[other]) == want
        servers[leader] = start_node("natsbroker", lambda p: _conf(tmp_path, leader, p), ports,
                                     leader)
        eventually(lambda: set(_values(servers).values()) == {11}, timeout=60,
                   what="every server at 11, the restarted one too")
    finally:
        for nc in ncs.values():
            await nc.close()
