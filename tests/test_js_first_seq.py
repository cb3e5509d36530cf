"""``first_seq`` on stream create (issue 13 item 4): the stream starts there,
on both stores, as on nats-server, and keeps it across a restart."""

import asyncio
import json
import time

import nats

from tests.support.servers import ServerProcess
from tests.test_js_differential import checked

LOADED = time.time_ns()  # before any server of this module started


async def _scenario(url):
    nc = await nats.connect(url, connect_timeout=10)
    out = []
    try:
        for name, storage, first in (("S", "file", 100), ("M", "memory", 5)):
            body = {"name": name, "subjects": [name.lower()], "first_seq": first,
                    "storage": storage}
            r = await nc.request("$JS.API.STREAM.CREATE." + name, json.dumps(body).encode(),
                                 timeout=10)
            out.append(json.loads(checked(r.data, LOADED)).get("state"))
            out.append(json.loads((await nc.request(name.lower(), b"x", timeout=10)).data))
            r = await nc.request("$JS.API.STREAM.PURGE." + name, b"", timeout=10)
            out.append(json.loads(r.data))
            r = await nc.request("$JS.API.STREAM.INFO." + name, b"", timeout=10)
            out.append(json.loads(checked(r.data, LOADED))["state"])
    finally:
        await nc.close()
    return out


def test_first_seq_as_nats_server(tmp_path):
    results = {}
    for kind in ("nats-server", "natsbroker"):
        with ServerProcess(kind, ["-js"]) as srv:
            results[kind] = asyncio.run(_scenario(srv.url))
    assert results["natsbroker"] == results["nats-server"]
    assert results["natsbroker"][1]["seq"] == 100


def test_first_seq_survives_a_restart(tmp_path):
    store = str(tmp_path / "store")

    async def create(url):
        nc = await nats.connect(url, connect_timeout=10)
        await nc.request("$JS.API.STREAM.CREATE.S", json.dumps(
            {"name": "S", "subjects": ["s"], "first_seq": 1000}).encode(), timeout=10)
        await nc.close()

    async def after(url):
        nc = await nats.connect(url, connect_timeout=10)
        st = json.loads((await nc.request("$JS.API.STREAM.INFO.S", b"", timeout=10)).data)
        ack = json.loads((await nc.request("s", b"x", timeout=10)).data)
        await nc.close()
        return st["state"], ack

    with ServerProcess("natsbroker", ["-js", "-sd", store]) as srv:
        asyncio.run(create(srv.url))
    with ServerProcess("natsbroker", ["-js", "-sd", store]) as srv:
        state, ack = asyncio.run(after(srv.url))
    assert (state["first_seq"], state["last_seq"]) == (1000, 999)
    assert ack["seq"] == 1000
