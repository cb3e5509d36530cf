"""Bad requests to STREAM.PEER.REMOVE and SERVER.REMOVE get nats-server's
answers: the same requests to a three-server nats-server cluster and a
natsbroker one, the answers compared whole."""

import asyncio
import json

import nats
import pytest

from tests.support.cluster import run_on_cluster
from tests.test_js_cluster import _acc_conf

pytestmark = [pytest.mark.long, pytest.mark.xdist_group("clusters"), pytest.mark.timeout(300)]

PEER_REMOVE = [b"", b"{", b"[]", b"null", b'{"peer": ""}', b'{"peer": "nosuch"}',
               b'{"peer": 7}', b'{"peer": "js-a", "x": ' + b"[" * 2000 + b"]" * 2000 + b"}"]
SERVER_REMOVE = [b"", b"{", b"[]", b'{"peer": ""}', b'{"peer": "nosuch"}',
                 b'{"peer_id": "nosuch"}', b'{"peer": 7}', b'{"peer": "js-a", "peer_id": "x"}']


async def _ask(nc, subject, body):
    try:
        m = await nc.request(subject, body, timeout=5)
    except nats.errors.TimeoutError:
        return "no answer"
    r = json.loads(m.data)
    return r


async def _scenario(servers):
    app = await nats.connect(servers["js-a"].url, user="app", password="pw")
    sys_nc = await nats.connect(servers["js-b"].url, user="sys", password="pw")
    try:
        for _ in range(100):
            r = await _ask(app, "$JS.API.STREAM.CREATE.S", json.dumps(
                {"name": "S", "subjects": ["s.>"], "num_replicas": 3}).encode())
            if isinstance(r, dict) and "error" not in r:
                break
            await asyncio.sleep(0.5)
        out = {}
        for body in PEER_REMOVE:
            out[("peer", body)] = await _ask(app, "$JS.API.STREAM.PEER.REMOVE.S", body)
        out[("peer", b"missing stream")] = await _ask(
            app, "$JS.API.STREAM.PEER.REMOVE.NOPE", b'{"peer": "js-a"}')
        for body in SERVER_REMOVE:
            out[("server", body)] = await _ask(sys_nc, "$JS.API.SERVER.REMOVE", body)
        # Not from the system account: nobody answers.
        out[("server", b"from an account")] = await _ask(app, "$JS.API.SERVER.REMOVE",
                                                          b'{"peer": "js-a"}')
        return out
    finally:
        await app.close()
        await sys_nc.close()


def test_bad_peer_and_server_removals_are_answered_as_nats_server_does(tmp_path):
    reference = run_on_cluster(tmp_path, "nats-server", _acc_conf, _scenario)
    got = run_on_cluster(tmp_path, "natsbroker", _acc_conf, _scenario)
    for key in reference:
        assert got[key] == reference[key], key
