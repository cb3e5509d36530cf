"""``natsbroker-admin verify/repair`` on a stopped server's store (issue 12 item 3).

Real broker processes and real LevelDB files: a stream is filled through the
broker with known payloads, the broker stops, the stream's files are damaged
the ways disks and crashes damage them, the admin tool runs as a subprocess,
and the broker serving the repaired store is checked message by message."""

import asyncio
import glob
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys

import nats
import plyvel
import pytest

from natsbroker.store.leveldb import LevelDBStore
from natsbroker.store.leveldb.records import pack_record
from natsbroker.store.meta_keys import pinned_meta
from tests.support.servers import ROOT, ServerProcess

pytestmark = pytest.mark.timeout(300)

N = 1000
PAYLOAD = 6600  # about one LevelDB block per record: damage hits one record
LOG_BLOCK = 32768  # LevelDB's write-ahead log block


def payload(k):
    """The k-th published payload: known, and incompressible (as stored)."""
    return random.Random(k).randbytes(PAYLOAD)


def admin(*args, input=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "natsbroker.admin", *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=240,
                          stdin=subprocess.DEVNULL if input is None else None, input=input)


def _server(store):
    return ServerProcess("natsbroker", ["-js", "-sd", store]).start()


def _stream_dir(store, name="S"):
    return os.path.join(store, "jetstream", "streams", name)


def _quarantine(store):
    q = os.path.join(store, "jetstream", "quarantine")
    return sorted(glob.glob(os.path.join(q, "*")))


def _digest_tree(path):
    """{relative path: SHA-256} of every file under ``path``."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = hashlib.sha256(fh.read()).hexdigest()
    return out


async def _fill(url):
    nc = await nats.connect(url, connect_timeout=10)
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    await js.add_stream(name="OTHER", subjects=["o.>"])
    acked = {}

    async def one(k):
        ack = await js.publish("s.x", payload(k), timeout=10)
        acked[ack.seq] = k

    for lo in range(0, N, 100):
        await asyncio.gather(*(one(k) for k in range(lo, min(N, lo + 100))))
    for i in range(10):
        await js.publish("o.x", b"other %d" % i, timeout=10)
    await js.delete_msg("OTHER", 3)  # a gap is not damage
    # A durable consumer with some acks: its records must survive a repair.
    sub = await js.pull_subscribe("s.>", durable="C", stream="S")
    for m in await sub.fetch(10, timeout=10):
        await m.ack_sync(timeout=10)
    await nc.close()
    return acked


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A store filled once by a real broker, stopped: ``(path, {seq: k})``.
    Each test works on its own copy."""
    store = str(tmp_path_factory.mktemp("template") / "store")
    server = _server(store)
    try:
        acked = asyncio.run(_fill(server.url))
    finally:
        server.stop()
    assert sorted(acked) == list(range(1, N + 1))
    return store, acked


@pytest.fixture
def store(filled, tmp_path):
    path = str(tmp_path / "store")
    shutil.copytree(filled[0], path)
    return path


# -- damage -------------------------------------------------------------------------------


def _flip(path, at, n=4):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(n)
        f.seek(at)
        f.write(bytes(x ^ 0xFF for x in b))


def _files(sdir, suffix):
    return sorted(glob.glob(os.path.join(sdir, "*" + suffix)),
                  key=lambda p: int(os.path.basename(p).split(".")[0]))


def flip_table(sdir):
    """4 bytes in the middle of the largest table file."""
    p = max(_files(sdir, ".ldb"), key=os.path.getsize)
    _flip(p, os.path.getsize(p) // 2)


def flip_log(sdir):
    """4 bytes inside a record of the newest log (away from a block's padding)."""
    p = _files(sdir, ".log")[-1]
    size = os.path.getsize(p)
    assert size > 2 * LOG_BLOCK
    _flip(p, (size // 2) // LOG_BLOCK * LOG_BLOCK + 1000)


def flip_table_index(sdir):
    """4 bytes in the index block of the largest table (just before its 48-byte
    footer): LevelDB, with paranoid checks, can open that table no more."""
    p = max(_files(sdir, ".ldb"), key=os.path.getsize)
    _flip(p, os.path.getsize(p) - 48 - 200)


def tear_log(sdir):
    p = _files(sdir, ".log")[-1]
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) // 2)


def drop_manifest(sdir):
    for p in glob.glob(os.path.join(sdir, "MANIFEST-*")) + [os.path.join(sdir, "CURRENT")]:
        os.remove(p)


# -- what the tool and the broker say ---------------------------------------------------------


def _verify_json(path, *args):
    out = admin("verify", path, "--json", *args)
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, json.loads(out.stdout)


def _seqs(ranges):
    return {s for a, b in ranges for s in range(a, b + 1)}


def _stream(report, name="S"):
    return next(s for s in report["streams"] if s["name"] == name)


async def _served(url):
    """``(stream info, {seq: (subject, data)})`` of stream S as the broker serves it."""
    nc = await nats.connect(url, connect_timeout=10)
    js = nc.jetstream()
    r = await nc.request("$JS.API.STREAM.INFO.S", b"", timeout=10)
    info = json.loads(r.data)
    out = {}
    for seq in range(1, info["state"]["last_seq"] + 1):
        try:
            m = await js.get_msg("S", seq)
        except nats.js.errors.NotFoundError:
            continue
        out[seq] = (m.subject, m.data)
    await nc.close()
    return info, out


async def _after_repair(url, old_last):
    nc = await nats.connect(url, connect_timeout=10)
    js = nc.jetstream()
    ack = await js.publish("s.x", b"after repair", timeout=10)
    assert ack.seq == old_last + 1  # a new, higher sequence: none is reused
    r = await nc.request("$JS.API.CONSUMER.INFO.S.C", b"", timeout=10)
    ci = json.loads(r.data)
    assert "error" not in ci, ci
    assert ci["ack_floor"]["stream_seq"] >= 10, ci
    m = await js.get_msg("OTHER", 10)
    assert m.data == b"other 9"
    await nc.close()


def _repair_and_check(store, acked, named, exact=True):
    """Repair stream S, verify again, serve it: every message served is the
    one published under its sequence, the lost ones are exactly those named
    (``named``: the sequences verify reported; some of them when not
    ``exact``), none went back."""
    sdir = _stream_dir(store)
    before = _digest_tree(sdir)
    out = admin("repair", store, "--stream", "S", "--yes", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    rep = json.loads(out.stdout)["streams"][0]
    assert rep["repaired"] and rep["ok"], rep
    lost = _seqs(rep["lost"])
    assert lost == named if exact else lost <= named, (sorted(lost), sorted(named))
    assert rep["lost_count"] == len(lost)
    assert rep["last_seq"] == N
    # The files as they were before the repair, kept byte for byte.
    assert rep["copy"] and os.path.isdir(rep["copy"])
    assert os.path.dirname(rep["copy"]) == os.path.join(store, "jetstream", "quarantine")
    assert os.path.basename(rep["copy"]).startswith("S-")
    assert rep["copy"].endswith("-before-repair")
    assert _digest_tree(rep["copy"]) == before

    code, report = _verify_json(store)
    assert code == 0, report
    s = _stream(report)
    assert s["ok"] and s["records"] == N - len(lost) and s["last_seq"] == N

    # Idempotent: a second run finds nothing to do and keeps no second copy.
    out = admin("repair", store, "--stream", "S", "--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "nothing to repair" in out.stdout
    assert _quarantine(store) == [rep["copy"]]

    server = _server(store)
    try:
        info, served = asyncio.run(_served(server.url))
        st = info["state"]
        assert st["last_seq"] == N, st
        assert st["messages"] == N - len(lost), st
        assert set(served) == set(range(1, N + 1)) - lost
        for seq, (subject, data) in served.items():
            assert subject == "s.x" and data == payload(acked[seq]), seq
        asyncio.run(_after_repair(server.url, N))
        # A repaired store opens clean: nothing lost on open, no damaged read,
        # no config record to put back.
        text = server.log()
        for needle in ("lost to damage", "config record(s)", "is damaged", "quarantine"):
            assert needle not in text, text
    finally:
        server.stop()
    return rep


# -- the tests ----------------------------------------------------------------------------------


def test_verify_undamaged_store(store):
    out = admin("verify", store)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "stream S:" in out.stdout and "stream OTHER:" in out.stdout
    assert "1000 records verified" in out.stdout and "2 stream(s) verified: OK" in out.stdout
    # Every way of naming the store, and one stream.
    for path in (store, os.path.join(store, "jetstream"), _stream_dir(store)):
        code, report = _verify_json(path)
        assert code == 0 and report["ok"], report
        s = _stream(report)
        assert s["records"] == N and s["msgs"] == N and s["last_seq"] == N and s["lost"] == []
        assert s["high_water"]["last_seq"] == N and s["high_water"]["msgs"] == N
    code, report = _verify_json(store, "--stream", "OTHER")
    assert code == 0 and [s["name"] for s in report["streams"]] == ["OTHER"]
    other = _stream(report, "OTHER")
    assert other["records"] == 9 and other["last_seq"] == 10 and other["lost"] == []
    assert not other["findings"], other
    out = admin("repair", store, "--stream", "S", "--yes")
    assert out.returncode == 0 and "nothing to repair" in out.stdout, out.stdout + out.stderr
    assert _quarantine(store) == []


def test_flipped_table_block(store, filled):
    sdir = _stream_dir(store)
    flip_table(sdir)
    out = admin("verify", store)
    assert out.returncode == 1, out.stdout + out.stderr
    code, report = _verify_json(store)
    s = _stream(report)
    damaged = [f for f in s["findings"] if f["kind"] == "damaged"]
    assert damaged, s
    named = {f["seq"] for f in damaged}
    assert all(1 <= q <= N for q in named)
    assert all(f["file"].endswith(".ldb") for f in damaged)
    assert _seqs(s["lost"]) == named
    for q in named:
        assert "seq %d: damaged: " % q in out.stdout
    assert _stream(report, "OTHER")["ok"]  # the other stream verifies
    _repair_and_check(store, filled[1], named)


def test_flipped_log(store, filled):
    sdir = _stream_dir(store)
    flip_log(sdir)
    out = admin("verify", store)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "unopenable: LevelDB cannot open it: Corruption" in out.stdout
    code, report = _verify_json(store)
    s = _stream(report)
    named = _seqs(s["lost"])
    assert named and all(1 <= q <= N for q in named), s
    assert s["lost_count"] == len(named)
    assert "lost %d: " % len(named) in out.stdout
    # verify examined a copy: the damaged directory is as it was.
    assert not glob.glob(os.path.join(store, "jetstream", ".natsbroker-verify-*"))
    _repair_and_check(store, filled[1], named)


def test_damaged_table_index(store, filled):
    """A table LevelDB cannot open hides every key in its range from a scan:
    verify reads the sequences one by one (the records other tables hold are
    found), repair reads the table without LevelDB's paranoid checks and keeps
    every record whose own checksum verifies."""
    flip_table_index(_stream_dir(store))
    code, report = _verify_json(store)
    assert code == 1
    s = _stream(report)
    assert any(f["kind"] == "unreadable" for f in s["findings"]), s
    named = {f["seq"] for f in s["findings"] if f["kind"] == "damaged"}
    assert named and s["records"] == N - len(named) and s["records"] > 0, s
    rep = _repair_and_check(store, filled[1], named, exact=False)
    assert rep["kept"] > s["records"]  # repair got back what verify could not read


def test_torn_log(store, filled):
    sdir = _stream_dir(store)
    tear_log(sdir)
    code, report = _verify_json(store)
    assert code == 1
    s = _stream(report)
    tail = [f for f in s["findings"] if f["kind"] == "lost-tail"]
    assert len(tail) == 1 and tail[0]["last"] == N, s
    named = set(range(tail[0]["seq"], N + 1))
    assert _seqs(s["lost"]) == named and s["last_seq"] == N
    out = admin("verify", store, "--stream", "S")
    assert out.returncode == 1
    assert "seqs %d-%d: lost-tail" % (min(named), N) in out.stdout
    _repair_and_check(store, filled[1], named)


def test_lost_manifest(store, filled):
    sdir = _stream_dir(store)
    drop_manifest(sdir)
    out = admin("verify", store)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "no CURRENT file" in out.stdout
    code, report = _verify_json(store)
    s = _stream(report)
    assert s["records"] == N and s["lost"] == [], s  # LevelDB's repair finds everything
    _repair_and_check(store, filled[1], set())


def test_quarantined_directory(store):
    """A directory the server moved aside is verified and repaired where it is."""
    sdir = _stream_dir(store)
    flip_table(sdir)
    qdir = os.path.join(store, "jetstream", "quarantine", "S-20260101T000000Z")
    os.makedirs(os.path.dirname(qdir))
    os.rename(sdir, qdir)
    code, report = _verify_json(qdir)
    assert code == 1 and [s["name"] for s in report["streams"]] == ["S"]
    out = admin("repair", qdir, "--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "S-20260101T000000Z" in out.stdout
    code, report = _verify_json(qdir)
    assert code == 0, report
    assert len(_quarantine(store)) == 2  # the directory and its pre-repair copy


def test_store_in_use(store):
    server = _server(store)
    try:
        for args in (("verify", store), ("verify", _stream_dir(store)),
                     ("repair", store, "--stream", "S", "--yes")):
            out = admin(*args)
            assert out.returncode == 2, out.stdout + out.stderr
            assert "store is in use (is the server running?): " in out.stderr
            assert _stream_dir(store, "") in out.stderr
        assert _quarantine(store) == []  # nothing copied, nothing changed
    finally:
        server.stop()
    assert admin("verify", store).returncode == 0


def test_usage_errors(store, tmp_path):
    out = admin("repair", store, "--yes")
    assert out.returncode == 2 and "--stream NAME, or use --all" in out.stderr
    out = admin("verify", store, "--stream", "NOPE")
    assert out.returncode == 2 and "no stream NOPE (streams: OTHER, S)" in out.stderr
    out = admin("repair", store, "--stream", "S")  # stdin is not a terminal
    assert out.returncode == 2 and "--yes" in out.stderr
    out = admin("verify", str(tmp_path))
    assert out.returncode == 2 and "not a store" in out.stderr
    out = admin("repair", store, "--stream", "S", "--all")
    assert out.returncode == 2
    assert _quarantine(store) == []


def test_repair_keeps_a_deleted_consumer_deleted(tmp_path):
    """The database lost the commit that deleted a consumer (its config is back
    in the database, NATSBROKER-META is newer and lacks it) and a record is
    damaged: repair removes the consumer as the server would, keeps the other
    one, and leaves nothing for the server to put back on open."""
    root = str(tmp_path / "store" / "jetstream")
    s = LevelDBStore(root, pin_meta=pinned_meta)
    st = s.create_stream("T")
    st.put_meta(b"config", b'{"name":"T"}')
    for c in (b"A", b"B"):
        st.put_meta(b"c.%s.config" % c, b'{"durable_name":"%s"}' % c)
    for k in range(300):
        st.append(b"t", b"", payload(k), k + 1)
    s.commit()
    s.close()
    sdir = os.path.join(root, "streams", "T")
    db = plyvel.DB(sdir)
    before = {k: v for k, v in db.iterator(prefix=b"m")}
    gen = db.get(b"G")
    db.close()
    s = LevelDBStore(root, pin_meta=pinned_meta)
    s.stream("T").del_meta(b"c.A.config")
    s.commit()
    s.close()
    db = plyvel.DB(sdir)
    for k, v in before.items():  # the deletion's commit lost
        db.put(k, v)
    db.put(b"G", gen)
    rec = bytearray(pack_record(5, 6, b"t", b"", payload(4)))
    rec[-1] ^= 1  # a record LevelDB's checks pass but its own checksum does not
    db.put(b"d" + (5).to_bytes(8, "big"), bytes(rec), sync=True)
    db.close()

    code, report = _verify_json(str(tmp_path / "store"))
    assert code == 1
    s_ = _stream(report, "T")
    kinds = {(f["kind"], f.get("seq"), f["damage"]) for f in s_["findings"]}
    assert ("damaged", 5, True) in kinds, s_
    assert any(f["kind"] == "pinned-meta" and "c.A.config" in f["why"] and not f["damage"]
               for f in s_["findings"]), s_
    out = admin("repair", str(tmp_path / "store"), "--stream", "T", "--yes", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    rep = json.loads(out.stdout)["streams"][0]
    assert rep["lost"] == [[5, 5]] and rep["restored_meta"] == ["-c.A.config"], rep
    assert admin("verify", str(tmp_path / "store")).returncode == 0

    s = LevelDBStore(root, pin_meta=pinned_meta)
    try:
        st = s.stream("T")
        assert not st.repaired  # nothing left for the open to put back
        assert st.get_meta(b"c.A.config") is None
        assert st.get_meta(b"c.B.config") == b'{"durable_name":"B"}'
        assert st.load(5) is None and st.load(4).data == payload(3)
        assert st.state().msgs == 299 and st.state().last_seq == 300
    finally:
        s.close()
