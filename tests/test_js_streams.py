"""JetStream streams through nats-py's JetStream API, against both servers."""

import asyncio

import nats
import pytest
from nats.js.api import StreamConfig
from nats.js.errors import APIError, NotFoundError

from tests.support.clients import flushed
from tests.support.servers import ServerProcess


@pytest.fixture(scope="module", params=["nats-server", "natsbroker"])
def js_server(request):
    with ServerProcess(request.param, ["-js"]) as s:
        s.kind_name = request.param
        yield s


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def _conn(server):
    nc = await nats.connect(server.url)
    return nc, nc.jetstream()


def test_add_publish_info_get_delete(js_server):
    async def main():
        nc, js = await _conn(js_server)
        try:
            await js.add_stream(name="ORDERS", subjects=["orders.>"])
            acks = [await js.publish("orders.new", b"o%d" % i) for i in range(5)]
            info = await js.stream_info("ORDERS")
            m = await js.get_msg("ORDERS", 3)
            last = await js.get_last_msg("ORDERS", "orders.new")
            await js.delete_msg("ORDERS", 2)
            info2 = await js.stream_info("ORDERS")
            purged = await js.purge_stream("ORDERS")
            info3 = await js.stream_info("ORDERS")
            await js.delete_stream("ORDERS")
            try:
                await js.stream_info("ORDERS")
                missing = False
            except NotFoundError:
                missing = True
            return acks, info, m, last, info2, purged, info3, missing
        finally:
            await nc.close()
    acks, info, m, last, info2, purged, info3, missing = run(main())
    assert [a.seq for a in acks] == [1, 2, 3, 4, 5]
    assert all(a.stream == "ORDERS" for a in acks)
    assert info.state.messages == 5 and info.state.first_seq == 1 and info.state.last_seq == 5
    assert info.config.subjects == ["orders.>"] and info.config.duplicate_window == 120.0
    assert m.data == b"o2" and m.seq == 3 and m.subject == "orders.new"
    assert last.seq == 5
    assert info2.state.messages == 4 and info2.state.num_deleted == 1
    assert purged
    assert info3.state.messages == 0 and info3.state.first_seq == 6
    assert missing


def test_dedupe_and_expectations(js_server):
    async def main():
        nc, js = await _conn(js_server)
        try:
            await js.add_stream(name="DD", subjects=["dd.*"])
            a1 = await js.publish("dd.a", b"1", headers={"Nats-Msg-Id": "x"})
            a2 = await js.publish("dd.a", b"1", headers={"Nats-Msg-Id": "x"})
            errs = []
            for hdrs in ({"Nats-Expected-Stream": "OTHER"},
                         {"Nats-Expected-Last-Sequence": "9"},
                         {"Nats-Expected-Last-Subject-Sequence": "9"},
                         {"Nats-Expected-Last-Msg-Id": "nope"}):
                try:
                    await js.publish("dd.a", b"2", headers=hdrs)
                    errs.append(None)
                except APIError as e:
                    errs.append((e.code, e.err_code, e.description))
            ok = await js.publish("dd.b", b"3", headers={"Nats-Expected-Last-Sequence": "1"})
            await js.delete_stream("DD")
            return a1, a2, errs, ok
        finally:
            await nc.close()
    a1, a2, errs, ok = run(main())
    assert (a1.seq, a1.duplicate) == (1, None)
    assert (a2.seq, a2.duplicate) == (1, True)
    assert errs == [(400, 10060, "expected stream does not match"),
                    (400, 10071, "wrong last sequence: 1"),
                    (400, 10071, "wrong last sequence: 1"),
                    (400, 10070, "wrong last msg ID: x")]
    assert ok.seq == 2


def test_limits_discard_old_and_new(js_server):
    async def main():
        nc, js = await _conn(js_server)
        try:
            await js.add_stream(name="LIM", subjects=["lim.>"], max_msgs=3, max_msgs_per_subject=2)
            for i in range(6):
                await js.publish("lim.%d" % (i % 2), b"%d" % i)
            info = await js.stream_info("LIM", subjects_filter=">")
            await js.add_stream(name="NEW", subjects=["new.>"], max_msgs=2, discard="new")
            await js.publish("new.a", b"1")
            await js.publish("new.a", b"2")
            try:
                await js.publish("new.a", b"3")
                err = None
            except APIError as e:
                err = (e.code, e.err_code, e.description)
            for n in ("LIM", "NEW"):
                await js.delete_stream(n)
            return info, err
        finally:
            await nc.close()
    info, err = run(main())
    assert info.state.messages == 3 and info.state.first_seq == 4 and info.state.last_seq == 6
    assert info.state.subjects == {"lim.0": 1, "lim.1": 2}
    assert err == (503, 10077, "maximum messages exceeded")


def test_create_errors(js_server):
    async def main():
        nc, js = await _conn(js_server)
        out = []
        try:
            await js.add_stream(name="A1", subjects=["a1.>"])
            for kw in ({"name": "A2", "subjects": ["a1.x"]},
                       {"name": "A1", "subjects": ["other"]},
                       {"name": "A3", "subjects": ["z"], "num_replicas": 3}):
                try:
                    await js.add_stream(StreamConfig(**kw))
                    out.append(None)
                except APIError as e:
                    out.append((e.code, e.err_code, e.description))
            try:
                await js.update_stream(StreamConfig(name="A1", subjects=["a1.>"], storage="memory"))
                out.append(None)
            except APIError as e:
                out.append((e.code, e.err_code, e.description))
            await js.delete_stream("A1")
            return out
        finally:
            await nc.close()
    assert run(main()) == [
        (400, 10065, "subjects overlap with an existing stream"),
        (400, 10058, "stream name already in use with a different configuration"),
        (500, 10074, "replicas > 1 not supported in non-clustered mode"),
        (500, 10052, "stream configuration update can not change storage type"),
    ]


def test_streams_info_and_names(js_server):
    async def main():
        nc, js = await _conn(js_server)
        try:
            for n in ("S1", "S2"):
                await js.add_stream(name=n, subjects=[n.lower() + ".>"], storage="memory")
            infos = await js.streams_info()
            names = sorted(i.config.name for i in infos)
            await js.publish("s2.x", b"m")
            upd = await js.update_stream(StreamConfig(name="S2", subjects=["s2.>"], storage="memory",
                                                      max_msgs=10))
            for n in ("S1", "S2"):
                await js.delete_stream(n)
            return names, upd
        finally:
            await nc.close()
    names, upd = run(main())
    assert names == ["S1", "S2"]
    assert upd.config.max_msgs == 10 and upd.state.messages == 1


def test_direct_get(js_server):
    async def main():
        nc, js = await _conn(js_server)
        try:
            await js.add_stream(name="DG", subjects=["dg.>"], allow_direct=True)
            await js.publish("dg.a", b"x1", headers={"H1": "v"})
            await js.publish("dg.b", b"x2")
            m1 = await js.get_msg("DG", 1, direct=True)
            m2 = await js.get_last_msg("DG", "dg.b", direct=True)
            raw = await nc.request("$JS.API.DIRECT.GET.DG.dg.a", b"", timeout=10)
            missing = await nc.request("$JS.API.DIRECT.GET.DG", b'{"seq":9}', timeout=10)
            bad = await nc.request("$JS.API.DIRECT.GET.DG", b"{bad", timeout=10)
            await js.delete_stream("DG")
            return m1, m2, raw, missing, bad
        finally:
            await nc.close()
    m1, m2, raw, missing, bad = run(main())
    assert (m1.seq, m1.subject, m1.data, m1.headers.get("H1")) == (1, "dg.a", b"x1", "v")
    assert (m2.seq, m2.data) == (2, b"x2")
    assert raw.data == b"x1" and raw.headers["Nats-Sequence"] == "1"
    assert set(raw.headers) == {"H1", "Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp"}
    assert missing.headers["Status"] == "404" and bad.headers["Status"] == "408"


def test_advisories(js_server):
    async def main():
        nc, js = await _conn(js_server)
        try:
            sub = await nc.subscribe("$JS.EVENT.ADVISORY.>")
            await flushed(nc)
            await js.add_stream(name="ADV", subjects=["adv"])
            await js.update_stream(StreamConfig(name="ADV", subjects=["adv"], max_msgs=5))
            await js.delete_stream("ADV")
            got = []
            while True:
                try:
                    m = await sub.next_msg(2)
                except Exception:
                    break
                got.append((m.subject, json_loads(m.data)))
            return got
        finally:
            await nc.close()
    got = run(main())
    actions = [(s, d["action"]) for s, d in got if d["type"].endswith("stream_action")]
    assert actions == [("$JS.EVENT.ADVISORY.STREAM.CREATED.ADV", "create"),
                       ("$JS.EVENT.ADVISORY.STREAM.UPDATED.ADV", "modify"),
                       ("$JS.EVENT.ADVISORY.STREAM.DELETED.ADV", "delete")]
    audits = [d for s, d in got if s == "$JS.EVENT.ADVISORY.API"]
    # (in any order: nats-server serves JetStream API requests on a pool of
    # goroutines, so under load its three audits can arrive reordered, as one
    # CI run saw)
    assert sorted(a["subject"] for a in audits) == ["$JS.API.STREAM.CREATE.ADV", "$JS.API.STREAM.DELETE.ADV",
                                                    "$JS.API.STREAM.UPDATE.ADV"]
    for a in audits:
        assert set(a) >= {"type", "id", "timestamp", "server", "client", "subject", "response"}
        assert a["client"]["lang"] == "python3" and a["client"]["kind"] == "Client"
        assert len(a["id"]) == 22


def json_loads(b):
    import json
    return json.loads(b)


@pytest.mark.parametrize("kind", ["nats-server", "natsbroker"])
def test_domain(kind, tmp_path):
    """With a JetStream domain, $JS.<domain>.API serves everything, direct
    gets included, and PubAcks name the domain."""
    conf = tmp_path / "js.conf"
    conf.write_text("jetstream { store_dir: %s, domain: hub }\n" % tmp_path)

    async def main(url):
        nc = await nats.connect(url)
        js = nc.jetstream(domain="hub")
        try:
            await js.add_stream(name="DOM", subjects=["dom.>"], allow_direct=True)
            ack = await js.publish("dom.a", b"x1")
            m1 = await js.get_msg("DOM", 1, direct=True)
            raw = await nc.request("$JS.hub.API.DIRECT.GET.DOM.dom.a", b"", timeout=10)
            info = await js.stream_info("DOM")
            return ack, m1, raw, info
        finally:
            await nc.close()
    with ServerProcess(kind, ["-c", str(conf)]) as s:
        ack, m1, raw, info = run(main(s.url))
    assert (ack.stream, ack.seq, ack.domain) == ("DOM", 1, "hub")
    assert (m1.seq, m1.data) == (1, b"x1")
    assert raw.data == b"x1" and raw.headers["Nats-Subject"] == "dom.a"
    assert info.state.messages == 1


def test_republish_and_subject_transform(js_server):
    """Stored messages are republished with nats-server's headers (Nats-Last-Sequence
    is the subject's previous sequence); the stream's subject transform applies
    on ingest."""
    async def main():
        nc, js = await _conn(js_server)
        try:
            await nc.request("$JS.API.STREAM.CREATE.RP", b'{"name":"RP","subjects":["rp.>"],'
                             b'"republish":{"src":"rp.*","dest":"rout.{{wildcard(1)}}"},'
                             b'"subject_transform":{"src":"rp.b.*","dest":"rp.$1"}}', timeout=10)
            await nc.request("$JS.API.STREAM.CREATE.RH", b'{"name":"RH","subjects":["rh.>"],'
                             b'"republish":{"src":">","dest":"rhout.>","headers_only":true}}', timeout=10)
            sub = await nc.subscribe("rout.>")
            sub2 = await nc.subscribe("rhout.>")
            await js.publish("rp.a", b"one", headers={"A": "1"})
            await js.publish("rp.x", b"x")
            await js.publish("rp.a", b"two")
            await js.publish("rp.b.c", b"three")
            await js.publish("rh.z", b"four")
            got = []
            for s, n in ((sub, 4), (sub2, 1)):
                for _ in range(n):
                    m = await s.next_msg(10)
                    h = dict(m.headers or {})
                    h.pop("Nats-Time-Stamp")
                    got.append((m.subject, m.data, h))
            last = await js.get_last_msg("RP", "rp.c")
            await js.delete_stream("RP")
            await js.delete_stream("RH")
            return got, last
        finally:
            await nc.close()
    got, last = run(main())
    assert got == [
        ("rout.a", b"one", {"A": "1", "Nats-Stream": "RP", "Nats-Subject": "rp.a",
                            "Nats-Sequence": "1", "Nats-Last-Sequence": "0"}),
        ("rout.x", b"x", {"Nats-Stream": "RP", "Nats-Subject": "rp.x", "Nats-Sequence": "2",
                          "Nats-Last-Sequence": "0"}),
        ("rout.a", b"two", {"Nats-Stream": "RP", "Nats-Subject": "rp.a", "Nats-Sequence": "3",
                            "Nats-Last-Sequence": "1"}),
        ("rout.c", b"three", {"Nats-Stream": "RP", "Nats-Subject": "rp.c", "Nats-Sequence": "4",
                              "Nats-Last-Sequence": "0"}),
        ("rhout.rh.z", b"", {"Nats-Stream": "RH", "Nats-Subject": "rh.z", "Nats-Sequence": "1",
                             "Nats-Last-Sequence": "0", "Nats-Msg-Size": "4"}),
    ]
    assert (last.seq, last.data) == (4, b"three")
