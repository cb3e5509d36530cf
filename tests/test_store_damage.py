"""Damaged file stores: sequences never go back, nothing is deleted by guesswork,
one damaged stream never stops the others, damaged records are never served
(issue 12, items 1-4).

Real broker processes: publish, stop cleanly, damage the LevelDB files of one
stream, start again and look at what the server serves and logs."""

import asyncio
import base64
import glob
import json
import os
import random
import struct

import nats
import plyvel
import pytest

from natsbroker.store.leveldb import LevelDBStore
from natsbroker.store.leveldb.records import unpack_record
from natsbroker.store.leveldb.sidefiles import HWM_NAME
from tests.support.http import get_json, http
from tests.support.servers import ServerProcess
from tests.support.wait import eventually

PAYLOAD = 6600


def _server(store):
    return ServerProcess("natsbroker", ["-js", "-sd", store]).start()


def _stream_dir(store, name):
    return os.path.join(store, "jetstream", "streams", name)


def _listing(path):
    """{relative path: size} of every file under ``path`` (but LevelDB's text
    log, LOG and LOG.old, which it rotates on every open attempt)."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            if f in ("LOG", "LOG.old"):
                continue
            p = os.path.join(root, f)
            out[os.path.relpath(p, path)] = os.path.getsize(p)
    return out


def _tear_newest_log(path):
    logs = sorted(glob.glob(os.path.join(path, "*.log")),
                  key=lambda p: int(os.path.basename(p).split(".")[0]))
    assert logs, os.listdir(path)
    newest = logs[-1]
    size = os.path.getsize(newest)
    assert size > 0
    with open(newest, "r+b") as f:
        f.truncate(size // 2)
    return newest


async def _info(nc, name):
    r = await nc.request("$JS.API.STREAM.INFO." + name, b"", timeout=10)
    return json.loads(r.data)


async def _publish(js, subject, n, size=PAYLOAD, window=100):
    acked = {}

    async def one(k):
        ack = await js.publish(subject, os.urandom(size), timeout=10)
        acked[ack.seq] = k

    k = 0
    while k < n:
        batch = [one(i) for i in range(k, min(n, k + window))]
        await asyncio.gather(*batch)
        k += len(batch)
    return acked


def _wait_log(server, *needles, timeout=10):
    """The log, once it has all of ``needles``."""
    def logged():
        text = server.log()
        return all(n in text for n in needles) and text
    try:
        return eventually(logged, timeout=timeout, interval=0.05, what="log lines %r" % (needles,))
    except AssertionError:
        raise AssertionError("log lacks %r:\n%s" % (needles, server.log()[-4000:])) from None


def _filled(store, consumer_acks=0):
    """A store filled by :func:`_fill` on a broker that is stopped again."""
    server = _server(store)
    try:
        return asyncio.run(_fill(server, consumer_acks))
    finally:
        server.stop()


async def _fill(server, consumer_acks=0):
    nc = await nats.connect(server.url, connect_timeout=10)
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    await js.add_stream(name="OTHER", subjects=["o.>"])
    acked = await _publish(js, "s.x", 1000)
    await _publish(js, "o.x", 10, size=100)
    if consumer_acks:
        sub = await js.pull_subscribe("s.>", durable="C", stream="S")
        done = 0
        while done < consumer_acks:
            msgs = await sub.fetch(min(100, consumer_acks - done), timeout=10)
            for m in msgs:
                await m.ack_sync(timeout=10)
            done += len(msgs)
    info = await _info(nc, "S")
    cinfo = None
    if consumer_acks:
        r = await nc.request("$JS.API.CONSUMER.INFO.S.C", b"", timeout=10)
        cinfo = json.loads(r.data)
    await nc.close()
    return acked, info, cinfo


async def _other_serves(nc):
    js = nc.jetstream()
    m = await js.get_msg("OTHER", 1)
    assert m.subject == "o.x"
    ack = await js.publish("o.y", b"after", timeout=10)
    assert ack.seq == 11
    # core NATS too
    sub = await nc.subscribe("core.ping")
    await nc.publish("core.ping", b"hi")
    msg = await sub.next_msg(timeout=5)
    assert msg.data == b"hi"


def test_torn_log_never_reuses_a_sequence(tmp_path):
    store = str(tmp_path / "store")
    acked, info, cinfo = _filled(store, consumer_acks=950)
    assert len(acked) == 1000
    old_last = info["state"]["last_seq"]
    assert old_last == 1000
    assert cinfo["ack_floor"]["stream_seq"] == 950
    sdir = _stream_dir(store, "S")
    _tear_newest_log(sdir)

    again = _server(store)
    try:
        async def check():
            nc = await nats.connect(again.url, connect_timeout=10)
            info = await _info(nc, "S")
            st = info["state"]
            assert st["last_seq"] == old_last, st
            assert st["messages"] < 1000, "the damage lost nothing: test needs a bigger tear"
            lost = 1000 - st["messages"]
            assert st["num_deleted"] == lost
            assert st["lost"]["msgs"] == list(range(old_last - lost + 1, old_last + 1))
            assert st["lost"]["bytes"] > 0
            # what is left is served as acked
            js = nc.jetstream()
            m = await js.get_msg("S", st["first_seq"])
            assert m.subject == "s.x" and len(m.data) == PAYLOAD
            # the next publish is above every sequence ever acked
            ack = await js.publish("s.x", b"new", timeout=10)
            assert ack.seq == old_last + 1
            # the consumer's floors did not go back
            r = await nc.request("$JS.API.CONSUMER.INFO.S.C", b"", timeout=10)
            ci = json.loads(r.data)
            assert ci["ack_floor"]["stream_seq"] >= 950, ci
            assert ci["delivered"]["stream_seq"] >= 950, ci
            assert ci["delivered"]["consumer_seq"] >= 950, ci
            await _other_serves(nc)
            await nc.close()
            return lost

        lost = asyncio.run(check())
        text = _wait_log(again, "stream S", "%d acked message(s) lost" % lost)
        assert "[WRN]" in text or "WRN" in text
    finally:
        again.stop()

    # A third start: the raised state record is in the store itself now.
    third = _server(store)
    try:
        async def check3():
            nc = await nats.connect(third.url, connect_timeout=10)
            st = (await _info(nc, "S"))["state"]
            assert st["last_seq"] == old_last + 1
            ack = await nc.jetstream().publish("s.x", b"newer", timeout=10)
            assert ack.seq == old_last + 2
            await nc.close()
        asyncio.run(check3())
    finally:
        third.stop()


def test_missing_manifest_takes_the_stream_offline_and_touches_nothing(tmp_path):
    store = str(tmp_path / "store")
    _filled(store)
    sdir = _stream_dir(store, "S")
    for p in glob.glob(os.path.join(sdir, "MANIFEST-*")) + [os.path.join(sdir, "CURRENT")]:
        os.remove(p)
    before = _listing(sdir)
    assert any(n.endswith((".ldb", ".log")) for n in before)

    again = ServerProcess("natsbroker", ["-js", "-sd", store, "-m", "-1"]).start()
    try:
        jsz = get_json(again, "/jsz")
        assert jsz["streams"] == 1 and "CURRENT" in jsz["offline_streams"]["S"], jsz
        status, _, body = http(again, "/healthz?account=$G&stream=S")
        assert status == 503, "healthz said %d for an offline stream" % status
        assert "is offline" in json.loads(body)["error"]

        async def check():
            nc = await nats.connect(again.url, connect_timeout=10)
            r = await nc.request("$JS.API.STREAM.INFO.S", b"", timeout=10)
            err = json.loads(r.data)["error"]
            assert (err["code"], err["err_code"]) == (500, 10194), err
            assert err["description"].startswith("stream is offline: ")
            assert "CURRENT" in err["description"]
            r = await nc.request("$JS.API.STREAM.LIST", b"", timeout=10)
            lst = json.loads(r.data)
            assert [s["config"]["name"] for s in lst["streams"]] == ["OTHER"]
            assert "CURRENT" in lst["offline"]["S"]
            r = await nc.request("$JS.API.STREAM.NAMES", b"", timeout=10)
            assert json.loads(r.data)["streams"] == ["OTHER", "S"]
            # the name stays taken: nothing is created over the damaged files
            r = await nc.request("$JS.API.STREAM.CREATE.S",
                                 json.dumps({"name": "S", "subjects": ["s.>"]}).encode(),
                                 timeout=10)
            assert json.loads(r.data)["error"]["err_code"] == 10194
            await _other_serves(nc)
            await nc.close()
        asyncio.run(check())
        _wait_log(again, "stream S is offline", "no CURRENT", "natsbroker-admin repair")
    finally:
        again.stop()
    assert _listing(sdir) == before  # every file kept where it was, byte counts unchanged
    assert not os.path.exists(os.path.join(store, "jetstream", "quarantine"))
    # LevelDB's own repair brings the stream back.
    plyvel.repair_db(sdir)
    third = _server(store)
    try:
        async def check3():
            nc = await nats.connect(third.url, connect_timeout=10)
            st = (await _info(nc, "S"))["state"]
            assert (st["messages"], st["last_seq"]) == (1000, 1000)
            await nc.close()
        asyncio.run(check3())
    finally:
        third.stop()


def test_missing_config_quarantines_instead_of_deleting(tmp_path):
    store = str(tmp_path / "store")
    _filled(store)
    sdir = _stream_dir(store, "S")
    db = plyvel.DB(sdir)
    db.delete(b"mconfig", sync=True)
    db.close()
    before = {n for n in _listing(sdir) if n.endswith(".ldb")}

    again = _server(store)
    try:
        async def check():
            nc = await nats.connect(again.url, connect_timeout=10)
            r = await nc.request("$JS.API.STREAM.INFO.S", b"", timeout=10)
            assert "error" in json.loads(r.data)
            await _other_serves(nc)
            await nc.close()
        asyncio.run(check())
        _wait_log(again, "stream S", "no stream config", "1000 message(s)", "quarantine")
    finally:
        again.stop()
    qdirs = glob.glob(os.path.join(store, "jetstream", "quarantine", "S-*"))
    assert len(qdirs) == 1
    # Opening it let LevelDB rotate its log and manifest (its own housekeeping);
    # the tables and every record are still there.
    assert before <= set(_listing(qdirs[0]))
    db = plyvel.DB(qdirs[0])
    try:
        assert sum(1 for _ in db.iterator(prefix=b"d")) == 1000
    finally:
        db.close()


# -- the store alone (no server) ---------------------------------------------------


def test_store_high_water_mark_survives_a_torn_log(tmp_path):
    path = str(tmp_path / "st")
    s = LevelDBStore(path)
    st = s.create_stream("T")
    for i in range(1000):
        st.append(b"t", b"", os.urandom(PAYLOAD), i + 1)
        if i % 10 == 9:
            s.commit()
    st.set_floor(b"C", (900, 910, 880, 890))
    s.commit()
    s.close()
    sdir = os.path.join(path, "streams", "T")
    assert os.path.exists(os.path.join(sdir, HWM_NAME))
    _tear_newest_log(sdir)

    s = LevelDBStore(path)
    st = s.stream("T")
    state = st.state()
    assert state.last_seq == 1000
    assert state.msgs < 1000
    lost = 1000 - state.msgs
    assert state.num_deleted == lost
    assert state.lost[0] == list(range(1001 - lost, 1001))
    assert st.floor(b"C") == (900, 910, 880, 890)
    assert st.load(1000) is None
    assert st.append(b"t", b"", b"x", 2000) == 1001
    s.commit()
    s.close()

    s = LevelDBStore(path)
    st = s.stream("T")
    assert st.state().last_seq == 1001
    assert st.state().lost is None
    assert st.load(1001).data == b"x"
    s.close()


def test_store_no_fresh_database_over_table_files(tmp_path):
    path = str(tmp_path / "st")
    s = LevelDBStore(path)
    for name in ("A", "B"):
        st = s.create_stream(name)
        for i in range(800):
            st.append(b"a", b"", os.urandom(PAYLOAD), i + 1)
        s.commit()
    s.close()
    adir = os.path.join(path, "streams", "A")
    os.remove(os.path.join(adir, "CURRENT"))
    before = _listing(adir)

    s = LevelDBStore(path)
    try:
        assert s.stream_names() == ["B"]
        assert s.stream("B").state().msgs == 800
        assert "CURRENT" in s.offline["A"]
        assert _listing(adir) == before
        # the name stays taken while its files are there
        with pytest.raises(ValueError):
            s.create_stream("A")
    finally:
        s.close()
    assert _listing(adir) == before


# -- damaged records (item 1) --------------------------------------------------------


def _known(seq, compressible):
    """The payload published as ``seq``: random, or compressible (LevelDB
    compresses those blocks, so damage shows up as bad compressed data)."""
    if compressible:
        return (b"%08d-compressible-" % seq) * 400
    return random.Random(seq).randbytes(PAYLOAD)


def _flip(path, at=None, n=4):
    size = os.path.getsize(path)
    at = size // 2 if at is None else at
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(n)
        f.seek(at)
        f.write(bytes(x ^ 0xFF for x in b))


@pytest.mark.parametrize("compressible", [False, True], ids=["random", "compressible"])
def test_flipped_table_bytes_are_never_served(tmp_path, compressible):
    store = str(tmp_path / "store")
    server = _server(store)
    try:
        async def fill():
            nc = await nats.connect(server.url, connect_timeout=10)
            js = nc.jetstream()
            await js.add_stream(name="S", subjects=["s.>"], allow_direct=True)
            await js.add_stream(name="OTHER", subjects=["o.>"])
            for k in range(1, 1001):
                await js.publish("s.%d" % (k % 10), _known(k, compressible), timeout=10)
            for _ in range(10):
                await js.publish("o.x", b"o", timeout=10)
            await nc.request("$JS.API.CONSUMER.DURABLE.CREATE.S.C", json.dumps(
                {"stream_name": "S", "config": {"durable_name": "C", "ack_policy": "explicit"}}
            ).encode(), timeout=10)
            await nc.close()
        asyncio.run(fill())
    finally:
        server.stop()
    sdir = _stream_dir(store, "S")
    table = max(glob.glob(os.path.join(sdir, "*.ldb")), key=os.path.getsize)
    _flip(table)

    again = _server(store)
    try:
        async def check():
            nc = await nats.connect(again.url, connect_timeout=10)
            damaged = []
            for k in range(1, 1001):
                r = await nc.request("$JS.API.STREAM.MSG.GET.S",
                                     json.dumps({"seq": k}).encode(), timeout=10)
                d = json.loads(r.data)
                if "error" in d:
                    err = d["error"]
                    assert (err["code"], err["err_code"]) == (503, 10077), err
                    assert "message %d in stream S is damaged" % k in err["description"]
                    damaged.append(k)
                    continue
                m = d["message"]
                assert m["subject"] == "s.%d" % (k % 10)
                assert base64.b64decode(m["data"]) == _known(k, compressible), k
            assert damaged, "the flipped bytes hit no message: test needs another spot"
            # a direct get of a damaged message says so too (not 404, not 503)
            r = await nc.request("$JS.API.DIRECT.GET.S", json.dumps({"seq": damaged[0]}).encode(),
                                 timeout=10)
            assert r.headers and r.headers.get("Status") == "500", r.headers
            st = (await _info(nc, "S"))["state"]
            assert st["lost"]["msgs"] == damaged
            assert st["messages"] == 1000 - len(damaged)
            assert st["last_seq"] == 1000
            # a consumer passes the damaged messages and gets every other one right
            js = nc.jetstream()
            sub = await js.pull_subscribe_bind("C", "S")
            got = []
            while len(got) < 1000 - len(damaged):
                for m in await sub.fetch(100, timeout=10):
                    seq = m.metadata.sequence.stream
                    assert m.data == _known(seq, compressible), seq
                    got.append(seq)
                    await m.ack()
            assert sorted(set(got) | set(damaged)) == list(range(1, 1001))
            ack = await js.publish("s.new", b"new", timeout=10)
            assert ack.seq == 1001
            await _other_serves(nc)
            await nc.close()
            return damaged

        damaged = asyncio.run(check())
        _wait_log(again, "stream S: message sequence %d is damaged" % damaged[0],
                  os.path.basename(table))
    finally:
        again.stop()
    assert os.path.exists(table)


@pytest.mark.parametrize("compressible", [False, True], ids=["random", "compressible"])
def test_flipped_log_bytes_take_the_stream_offline(tmp_path, compressible):
    """Damage in LevelDB's write-ahead log fails its recovery (paranoid
    checks): the stream is offline with what LevelDB found, its files are
    untouched, the other stream and core NATS serve."""
    store = str(tmp_path / "store")
    server = _server(store)
    try:
        async def fill():
            nc = await nats.connect(server.url, connect_timeout=10)
            js = nc.jetstream()
            await js.add_stream(name="S", subjects=["s.>"])
            await js.add_stream(name="OTHER", subjects=["o.>"])
            for k in range(1, 301):
                await js.publish("s.x", _known(k, compressible), timeout=10)
            for _ in range(10):
                await js.publish("o.x", b"o", timeout=10)
            await nc.close()
        asyncio.run(fill())
    finally:
        server.stop()
    sdir = _stream_dir(store, "S")
    wal = max(glob.glob(os.path.join(sdir, "*.log")), key=os.path.getsize)
    _flip(wal)
    before = _listing(sdir)

    again = _server(store)
    try:
        async def check():
            nc = await nats.connect(again.url, connect_timeout=10)
            r = await nc.request("$JS.API.STREAM.INFO.S", b"", timeout=10)
            err = json.loads(r.data)["error"]
            assert err["err_code"] == 10194 and "Corruption" in err["description"], err
            await _other_serves(nc)
            await nc.close()
        asyncio.run(check())
        _wait_log(again, "stream S is offline", "Corruption", "natsbroker-admin repair")
    finally:
        again.stop()
    assert _listing(sdir) == before


def test_damage_in_one_stream_leaves_the_other_alone(tmp_path):
    store = str(tmp_path / "store")
    _filled(store)
    for table in glob.glob(os.path.join(_stream_dir(store, "S"), "*.ldb")):
        _flip(table, n=64)
    again = _server(store)
    try:
        async def check():
            nc = await nats.connect(again.url, connect_timeout=10)
            js = nc.jetstream()
            for seq in range(1, 11):
                m = await js.get_msg("OTHER", seq)
                assert m.subject == "o.x" and len(m.data) == 100
            await _other_serves(nc)
            await nc.close()
        asyncio.run(check())
    finally:
        again.stop()


# -- the record checksum in the store alone -------------------------------------------


def _raw_store(tmp_path, n=20):
    path = str(tmp_path / "st")
    s = LevelDBStore(path)
    st = s.create_stream("T")
    for i in range(1, n + 1):
        st.append(b"t.%d" % (i % 3), b"NATS/1.0\r\nK: %d\r\n\r\n" % i, b"payload-%d" % i, i)
    s.commit()
    s.close()
    return path, os.path.join(path, "streams", "T")


def test_store_checksum_catches_what_leveldb_does_not(tmp_path):
    """Records that LevelDB stores intact but that are not what was written
    (changed payload, changed subject, a record under another key): the
    record's own checksum catches each, none is served."""
    path, sdir = _raw_store(tmp_path)
    db = plyvel.DB(sdir)
    q = lambda n: b"d" + n.to_bytes(8, "big")  # noqa: E731
    v5 = bytearray(db.get(q(5)))
    v5[-1] ^= 1
    db.put(q(5), bytes(v5))
    v7 = bytearray(db.get(q(7)))
    v7[20] ^= 4  # first byte of the subject
    db.put(q(7), bytes(v7))
    db.put(q(9), db.get(q(10)))
    v11 = bytearray(db.get(q(11)))
    v11[12] ^= 1  # header length: bytes move between headers and payload
    db.put(q(11), bytes(v11))
    db.close()

    s = LevelDBStore(path)
    try:
        st = s.stream("T")
        assert st.load(5) is None and st.damage_of(5) == "checksum mismatch"
        assert st.load_next(5).seq == 6
        assert st.load_next(7, b"t.1").seq == 10  # 7 is damaged: never served as t.1 or else
        seen = []
        m = st.load_next(1)
        while m is not None:
            assert m.data == b"payload-%d" % m.seq and m.subject == b"t.%d" % (m.seq % 3)
            seen.append(m.seq)
            m = st.load_next(m.seq + 1)
        assert seen == [s_ for s_ in range(1, 21) if s_ not in (5, 7, 9, 11)]
        state = st.state()
        assert state.lost[0] == [5, 7, 9, 11]
        assert state.msgs == 16
        assert state.num_deleted == 4
        assert sum(n for n in st.subject_counts().values()) == 16
        # a newer revision that is damaged is reported, never passed over
        assert st.damaged_since(4, b"t.2") == (5, "checksum mismatch")
        assert st.append(b"t.0", b"", b"after", 21) == 21
        s.commit()
    finally:
        s.close()
    # nothing was removed from the database: the records are there for repair
    db = plyvel.DB(sdir)
    try:
        assert db.get(q(5)) == bytes(v5)
    finally:
        db.close()


def test_store_reads_records_written_before_checksums(tmp_path):
    path, sdir = _raw_store(tmp_path, n=3)
    db = plyvel.DB(sdir)
    db.delete(b"F")
    for seq in (1, 2, 3):
        k = b"d" + seq.to_bytes(8, "big")
        v = db.get(k)
        m = unpack_record(seq, v)
        db.put(k, struct.pack(">QII", m.ts, len(m.subject), len(m.hdr))
               + m.subject + m.hdr + m.data)
    db.close()
    s = LevelDBStore(path)
    try:
        st = s.stream("T")
        assert [st.load(i).data for i in (1, 2, 3)] == [b"payload-1", b"payload-2", b"payload-3"]
        st.append(b"t.x", b"", b"new", 4)
        s.commit()
    finally:
        s.close()
    db = plyvel.DB(sdir)
    try:
        assert db.get(b"F") is None  # still a store with records of both kinds
        unpack_record(4, db.get(b"d" + (4).to_bytes(8, "big")))  # the new one has a checksum
    finally:
        db.close()


def test_store_deleted_consumer_stays_deleted_after_a_torn_log(tmp_path):
    """The database lost the commit that deleted a pinned record (a consumer's
    config): the pinned copy, newer, says it is gone, so it stays gone."""
    path = str(tmp_path / "st")
    pin = lambda k: k.endswith(b".config")  # noqa: E731
    s = LevelDBStore(path, pin_meta=pin)
    st = s.create_stream("T")
    st.put_meta(b"config", b"{}")
    st.put_meta(b"c.A.config", b"a")
    st.put_meta(b"c.B.config", b"b")
    s.commit()
    s.close()
    sdir = os.path.join(path, "streams", "T")
    db = plyvel.DB(sdir)
    before = {k: v for k, v in db.iterator(prefix=b"m")}
    gen = db.get(b"G")
    db.close()

    s = LevelDBStore(path, pin_meta=pin)
    s.stream("T").del_meta(b"c.A.config")
    s.commit()
    s.close()
    # The database as it was before that commit (its log entry lost).
    db = plyvel.DB(sdir)
    for k, v in before.items():
        db.put(k, v)
    db.put(b"G", gen, sync=True)
    db.close()

    s = LevelDBStore(path, pin_meta=pin)
    try:
        st = s.stream("T")
        assert st.get_meta(b"c.A.config") is None
        assert st.get_meta(b"c.B.config") == b"b"
        assert st.repaired
        s.commit()
    finally:
        s.close()
    db = plyvel.DB(sdir)
    try:
        assert db.get(b"mc.A.config") is None
    finally:
        db.close()


def test_store_lost_state_record_collects_nothing(tmp_path):
    """Without its state record (and without the high-water mark) a stream's
    range comes from its records: none of them is taken for garbage."""
    path, sdir = _raw_store(tmp_path, n=30)
    os.remove(os.path.join(sdir, HWM_NAME))
    db = plyvel.DB(sdir)
    db.delete(b"S", sync=True)
    db.close()
    s = LevelDBStore(path)
    try:
        st = s.stream("T")
        state = st.state()
        assert (state.msgs, state.first_seq, state.last_seq, state.last_ts) == (30, 1, 30, 30)
        assert st.collect() is True
        assert st.load(1).data == b"payload-1"
        assert st.append(b"t.x", b"", b"next", 31) == 31
        s.commit()
    finally:
        s.close()
    db = plyvel.DB(sdir)
    try:
        assert sum(1 for _ in db.iterator(prefix=b"d")) == 31
    finally:
        db.close()
