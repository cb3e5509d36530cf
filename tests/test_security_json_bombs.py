"""S5 (issue 29): deeply nested JSON from clients.

nats-server decodes with Go's encoding/json: any depth up to 10,000 levels,
"exceeded max depth" beyond.  natsbroker's decoders used to raise
RecursionError a little under 1,000 levels, logged with a traceback per
message.  Observed on nats-server 2.15.1 (and asserted below on both):
CONNECT nested 2,000 deep (under the 4 KB control line) is accepted;
``$SYS.REQ.SERVER.PING.CONNZ`` answers ``{"code":400,"description":"exceeded
max depth"}``; ``$JS.API`` answers 10025 "invalid JSON: exceeded max depth at
offset N".
"""

import asyncio
import json
import os

import nats
import pytest
from hypothesis import given, settings, strategies as st

from natsbroker import jsonbound
from tests.support.raw import Conversation
from tests.support.servers import ServerProcess

CONF = """
accounts { SYS: {users: [{user: sys, password: p}]},
           A: {jetstream: enabled, users: [{user: a, password: p}]} }
system_account: SYS
jetstream { store_dir: "%s" }
"""


def nest(depth, open_="[", close="]", inner=""):
    return open_ * depth + inner + close * depth


# -- the helper ---------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(depth=st.integers(1, 12000), kind=st.sampled_from(["[]", "{}"]),
       prefix=st.sampled_from(["", '{"x":', '["[[[{", ']))
def test_loads_decodes_to_go_depth_and_refuses_beyond(depth, kind, prefix):
    if kind == "{}":
        body = '{"a":' * depth + "1" + "}" * depth
    else:
        body = nest(depth)
    levels = depth + (1 if prefix else 0)
    doc = prefix + body + ("}" if prefix == '{"x":' else "]" if prefix else "")
    if levels <= jsonbound.MAX_DEPTH:
        jsonbound.loads(doc)
    else:
        with pytest.raises(ValueError, match="exceeded max depth"):
            jsonbound.loads(doc)


@settings(max_examples=30, deadline=None)
@given(depth=st.integers(1, 2000))
def test_reencode_depth_is_checked_before_decoding(depth):
    doc = nest(depth)
    if depth <= jsonbound.REENCODE_DEPTH:
        json.dumps(jsonbound.loads(doc, max_depth=jsonbound.REENCODE_DEPTH))
    else:
        with pytest.raises(ValueError):
            jsonbound.loads(doc, max_depth=jsonbound.REENCODE_DEPTH)


# -- the servers ---------------------------------------------------------------------

@pytest.fixture(scope="module", params=["nats-server", "natsbroker"])
def server(request):
    s = ServerProcess(request.param)
    conf = os.path.join(s.dir, "c.conf")
    with open(conf, "w") as f:
        f.write(CONF % os.path.join(s.dir, "js"))
    s.args = ["-c", conf]
    with s:
        yield s


def _no_traceback(server):
    log = server.log()
    assert "Traceback" not in log and "RecursionError" not in log, log[-3000:]


@pytest.mark.parametrize("depth", [900, 1500, 2000])
def test_connect_nested_before_auth_is_accepted(server, depth):
    c = Conversation(server.port)
    c.send(b'CONNECT {"x":%s,"user":"a","pass":"p","verbose":false}\r\nPING\r\n'
           % nest(depth).encode())
    assert c.read_pongs(1).endswith(b"PONG\r\n")
    c.sock.close()
    _no_traceback(server)


async def _request(server, user, subject, body):
    nc = await nats.connect(server.url, user=user, password="p")
    try:
        return json.loads((await nc.request(subject, body, timeout=5)).data)
    finally:
        await nc.close()


@pytest.mark.parametrize("body, error", [
    ('{"x":%s}' % nest(2000), None),
    ('{"x":%s}' % nest(10001), "exceeded max depth"),
    (nest(20000), "exceeded max depth"),
    ('{"x":%s' % nest(2000), "unexpected end of JSON input"),
])
def test_sys_connz_nested_request(server, body, error):
    resp = asyncio.run(_request(server, "a", "$SYS.REQ.SERVER.PING.CONNZ", body.encode()))
    if error is None:
        assert "error" not in resp and "connections" in resp["data"]
    else:
        assert resp["error"] == {"code": 400, "description": error}
    _no_traceback(server)


@pytest.mark.parametrize("body, description", [
    ('{"x":%s}' % nest(2000), 'invalid JSON: json: unknown field "x"'),
    ('{"x":%s}' % nest(10001), "invalid JSON: exceeded max depth at offset 10005"),
    (nest(500000), "invalid JSON: exceeded max depth at offset 10001"),
])
def test_js_api_nested_request(server, body, description):
    resp = asyncio.run(_request(server, "a", "$JS.API.STREAM.CREATE.X", body.encode()))
    assert resp["error"] == {"code": 400, "err_code": 10025, "description": description}
    _no_traceback(server)


def test_server_keeps_serving_after_many_nested_requests(server):
    async def go():
        nc = await nats.connect(server.url, user="a", password="p")
        try:
            for _ in range(20):
                await nc.request("$SYS.REQ.SERVER.PING.CONNZ", nest(20000).encode(), timeout=5)
            await nc.flush(timeout=5)
        finally:
            await nc.close()
    asyncio.run(go())
    _no_traceback(server)
    assert len(server.log()) < 20000
