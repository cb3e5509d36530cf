"""Damaged file stores: sequences never go back, nothing is deleted by guesswork,
one damaged stream never stops the others (issue 12, items 2-4).

Real broker processes: publish, stop cleanly, damage the LevelDB files of one
stream, start again and look at what the server serves and logs."""

import asyncio
import glob
import json
import os
import time

import nats
import plyvel

from natsbroker.store.leveldb import HWM_NAME, LevelDBStore
from tests.support.servers import ServerProcess

PAYLOAD = 6600


def _server(store):
    return ServerProcess("natsbroker", ["-js", "-sd", store]).start()


def _stream_dir(store, name):
    return os.path.join(store, "jetstream", "streams", name)


def _listing(path):
    """{relative path: size} of every file under ``path``."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
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
    deadline = time.monotonic() + timeout
    while True:
        text = server.log()
        if all(n in text for n in needles):
            return text
        if time.monotonic() > deadline:
            raise AssertionError("log lacks %r:\n%s" % (needles, text[-4000:]))
        time.sleep(0.05)


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


def test_missing_manifest_quarantines_and_deletes_nothing(tmp_path):
    store = str(tmp_path / "store")
    _filled(store)
    sdir = _stream_dir(store, "S")
    for p in glob.glob(os.path.join(sdir, "MANIFEST-*")) + [os.path.join(sdir, "CURRENT")]:
        os.remove(p)
    before = _listing(sdir)
    assert any(n.endswith((".ldb", ".log")) for n in before)

    again = _server(store)
    try:
        async def check():
            nc = await nats.connect(again.url, connect_timeout=10)
            r = await nc.request("$JS.API.STREAM.INFO.S", b"", timeout=10)
            assert json.loads(r.data)["error"]["err_code"] == 10059  # not found: offline
            await _other_serves(nc)
            await nc.close()
        asyncio.run(check())
        _wait_log(again, "stream S", "no CURRENT", "quarantine", "repair")
    finally:
        again.stop()
    assert not os.path.exists(sdir)
    qdirs = glob.glob(os.path.join(store, "jetstream", "quarantine", "S-*"))
    assert len(qdirs) == 1
    assert _listing(qdirs[0]) == before  # every file kept, byte counts unchanged
    # LevelDB's own repair brings the data back (the repair the log names).
    plyvel.repair_db(qdirs[0])
    db = plyvel.DB(qdirs[0])
    try:
        assert db.get(b"mconfig") is not None
    finally:
        db.close()


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
        dest, why = s.quarantined["A"]
        assert "CURRENT" in why
        assert _listing(dest) == before
        # the name is free again
        assert s.create_stream("A").state().msgs == 0
    finally:
        s.close()
