"""A restart restores a full store as it was: many streams, many consumers.

The streams' databases open together (``LevelDBStore._open_dbs``); these tests
check that every stream and consumer comes back with the state it had and
that a damaged or locked stream among many is still found and left offline.
"""

import asyncio
import json
import os

import nats
import plyvel

from natsbroker.store.leveldb import LevelDBStore
from tests.support.servers import ServerProcess

N_STREAMS = 200
N_CONSUMERS = 200
BIG = "R0"  # the stream with the consumers


def _server(store):
    return ServerProcess("natsbroker", ["-js", "-sd", store]).start()


async def _api(nc, subject, body=b""):
    r = await nc.request(subject, body, timeout=10)
    out = json.loads(r.data)
    assert "error" not in out, (subject, out)
    return out


async def _in_chunks(coros, n=20):
    coros = list(coros)
    out = []
    for i in range(0, len(coros), n):
        out.extend(await asyncio.gather(*coros[i:i + n]))
    return out


async def _fill(url):
    nc = await nats.connect(url, connect_timeout=10)
    js = nc.jetstream()
    await _in_chunks(js.add_stream(name="R%d" % i, subjects=["r.%d.>" % i])
                     for i in range(N_STREAMS))
    # Messages in some streams, on a few subjects, with gaps in some.
    for i in range(0, N_STREAMS, 7):
        await _in_chunks(js.publish("r.%d.%d" % (i, k % (1 + i % 4)), b"m-%d-%d" % (i, k))
                         for k in range(3 + i % 11))
        if i % 2:
            await js.delete_msg("R%d" % i, 2)
    await _in_chunks(js.publish("r.0.%s" % ("a", "b", "c")[k % 3], b"big-%d" % k)
                     for k in range(60))

    def consumer(j):
        cfg = {"durable_name": "C%d" % j, "ack_policy": "explicit"}
        if j % 4 == 1:
            cfg["filter_subject"] = "r.0.%s" % ("a", "b", "c")[j % 3]
        elif j % 4 == 2:
            cfg.update(deliver_policy="by_start_sequence", opt_start_seq=1 + j % 50)
        elif j % 4 == 3:
            cfg["deliver_policy"] = "last"
        return _api(nc, "$JS.API.CONSUMER.DURABLE.CREATE.%s.C%d" % (BIG, j),
                    json.dumps({"stream_name": BIG, "config": cfg}).encode())
    await _in_chunks(consumer(j) for j in range(N_CONSUMERS))
    # Progress on some: delivered, partly acked (acked out of order too).
    for j in range(0, N_CONSUMERS, 3):
        psub = await js.pull_subscribe_bind("C%d" % j, BIG)
        try:
            msgs = await psub.fetch(1 + j % 9, timeout=5)
        except nats.errors.TimeoutError:
            msgs = []
        for n, m in enumerate(msgs):
            if n % 3 != 2 or j % 2:
                await m.ack_sync(timeout=10)
        await psub.unsubscribe()
    await nc.close()


async def _snapshot(url):
    """Every stream's and consumer's info as the API answers it (less the
    time of the answer and the server's name, new in every run)."""
    nc = await nats.connect(url, connect_timeout=10)
    acct = await _api(nc, "$JS.API.INFO")

    async def stream(i):
        out = await _api(nc, "$JS.API.STREAM.INFO.R%d" % i)
        out.pop("ts", None)
        out.pop("cluster", None)
        return out

    async def consumer(j):
        out = await _api(nc, "$JS.API.CONSUMER.INFO.%s.C%d" % (BIG, j))
        out.pop("ts", None)
        out.pop("cluster", None)
        # When it was last active is not stored (nor is it by nats-server).
        for k in ("delivered", "ack_floor"):
            out[k].pop("last_active", None)
        return out
    streams = await _in_chunks(stream(i) for i in range(N_STREAMS))
    consumers = await _in_chunks(consumer(j) for j in range(N_CONSUMERS))
    names = await _api(nc, "$JS.API.CONSUMER.NAMES.%s" % BIG)
    await nc.close()
    return {"streams": acct["streams"], "consumers": acct["consumers"],
            "storage": acct["storage"]}, streams, consumers, sorted(names["consumers"])


def test_restart_restores_every_stream_and_consumer(tmp_path):
    store = str(tmp_path / "store")
    server = _server(store)
    try:
        asyncio.run(_fill(server.url))
        before = asyncio.run(_snapshot(server.url))
    finally:
        server.stop()
    acct, streams, consumers, names = before
    assert acct["streams"] == N_STREAMS and acct["consumers"] == N_CONSUMERS
    assert len(names) == N_CONSUMERS
    # the fill did what it meant to: messages, gaps and consumer progress
    assert streams[0]["state"]["messages"] == 63
    assert any(s["state"].get("num_deleted") for s in streams)
    assert any(c["ack_floor"]["stream_seq"] for c in consumers)
    assert any(c["num_ack_pending"] for c in consumers)

    for _ in range(2):  # and again: a store restored once restores the same
        again = _server(store)
        try:
            after = asyncio.run(_snapshot(again.url))
        finally:
            again.stop()
        assert after[0] == acct
        for b, a in zip(streams, after[1]):
            assert a == b, b["config"]["name"]
        for b, a in zip(consumers, after[2]):
            assert a == b, b["name"]
        assert after[3] == names
        assert "is offline" not in again.log()


def test_store_opens_many_streams_and_keeps_damaged_ones_offline(tmp_path):
    path = str(tmp_path / "st")
    s = LevelDBStore(path)
    want = {}
    for i in range(60):
        name = "S%02d" % i
        st = s.create_stream(name)
        for k in range(i % 9):
            st.append(b"s.%d" % (k % 3), b"", b"x" * k, k + 1)
        if i % 9 > 2:
            st.remove(2)
        st.put_meta(b"cfg", b"config of %s" % name.encode())
        s.commit()
    for name in s.stream_names():
        st = s.stream(name)
        want[name] = (st.state(), st.stored_bytes, st.subject_counts(), st.get_meta(b"cfg"))
    s.close()

    # Two without CURRENT (never opened: a fresh database would delete their
    # tables), one held open elsewhere (its lock).
    for name in ("S07", "S44"):
        os.remove(os.path.join(path, "streams", name, "CURRENT"))
    listing = {name: sorted(os.listdir(os.path.join(path, "streams", name)))
               for name in ("S07", "S44")}
    held = plyvel.DB(os.path.join(path, "streams", "S30"))
    try:
        s = LevelDBStore(path)
        try:
            assert sorted(s.offline) == ["S07", "S30", "S44"]
            assert "CURRENT" in s.offline["S07"] and "CURRENT" in s.offline["S44"]
            assert "lock" in s.offline["S30"].lower()
            assert s.stream_names() == sorted(set(want) - {"S07", "S30", "S44"})
            for name in s.stream_names():
                st = s.stream(name)
                got = (st.state(), st.stored_bytes, st.subject_counts(), st.get_meta(b"cfg"))
                assert got == want[name], name
        finally:
            s.close()
    finally:
        held.close()
    for name, files in listing.items():
        assert sorted(os.listdir(os.path.join(path, "streams", name))) == files

    # Repaired and unlocked, every stream is back as it was.
    for name in ("S07", "S44"):
        plyvel.repair_db(os.path.join(path, "streams", name))
    s = LevelDBStore(path)
    try:
        assert not s.offline
        for name, w in want.items():
            st = s.stream(name)
            assert (st.state(), st.stored_bytes, st.subject_counts(), st.get_meta(b"cfg")) == w
    finally:
        s.close()
