"""Issue 29 S11: the JetStream store and the change feed hold message data,
so only the server's user may read them, whatever the umask (nats-server:
directories 0700, files 0600); and the change feed never writes through a
symlink planted under a temporary file's name."""

import asyncio
import contextlib
import os
import re
import stat

import nats
import pytest

from tests.support.servers import ServerProcess
from tests.support.wait import eventually

# Files LevelDB creates itself, 0644 (plyvel cannot choose their mode): they
# are private only through their 0700 directory, which the walk checks.
LEVELDB_FILE = re.compile(r"^(CURRENT|LOCK|LOG|LOG\.old|\d+\.(log|ldb|sst)|MANIFEST-\d+)$")


@contextlib.contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def start(kind, args):
    # The server inherits the umask of the moment it is started.
    with umask(0o022):
        return ServerProcess(kind, args).start()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def use_jetstream(url):
    """A stream, a durable consumer with an ack, a KV bucket, an object store."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        for i in range(3):
            await js.publish("orders.new", b"secret %d" % i)
        sub = await js.pull_subscribe("orders.>", durable="worker")
        for m in await sub.fetch(2, timeout=5):
            await m.ack_sync()
        kv = await js.create_key_value(bucket="CONFIG")
        await kv.put("password", b"hunter2")
        obs = await js.create_object_store(bucket="FILES")
        await obs.put("report.txt", b"confidential" * 1000)
    finally:
        await nc.close()


def open_to_others(top, leveldb_exempt):
    """Every path under ``top`` (and ``top``) with a group or other bit set;
    with ``leveldb_exempt`` LevelDB's own files are left to their directory."""
    bad = []
    for root, dirs, files in os.walk(top):
        for p in [root] + [os.path.join(root, n) for n in files]:
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and leveldb_exempt and LEVELDB_FILE.match(
                    os.path.basename(p)):
                continue
            if st.st_mode & 0o077:
                bad.append("%s %s" % (stat.filemode(st.st_mode), os.path.relpath(p, top)))
    return bad


def files_under(top):
    return [os.path.join(r, n) for r, _, fs in os.walk(top) for n in fs]


def test_nats_server_store_is_private(tmp_path):
    """The reference: nats-server under umask 022 creates every directory
    (store_dir's missing parents too) 0700 and every file 0600."""
    store = tmp_path / "a" / "b" / "store"
    srv = start("nats-server", ["-js", "-sd", str(store)])
    try:
        run(use_jetstream(srv.url))
    finally:
        srv.stop()
    assert files_under(str(store))
    assert open_to_others(str(tmp_path / "a"), leveldb_exempt=False) == []


def test_store_and_feed_are_private(tmp_path):
    store = tmp_path / "a" / "b" / "store"  # missing parents: created too
    conf = tmp_path / "server.conf"
    conf.write_text('jetstream { store_dir: "%s" }\nchangefeed { max_file_age: "200ms" }\n'
                    % store)
    feed = store / "changefeed"
    srv = start("natsbroker", ["-c", str(conf)])
    try:
        run(use_jetstream(srv.url))
        # A completed feed file and its checkpoint, the HWM side files, the
        # pinned meta (written by the API calls above).
        eventually(lambda: (feed / "checkpoint.json").exists()
                   and any(n.endswith(".jsonl") for n in os.listdir(feed)), timeout=20)
        live = open_to_others(str(tmp_path / "a"), leveldb_exempt=True)
    finally:
        srv.stop()
    names = {os.path.basename(p) for p in files_under(str(store))}
    assert {"NATSBROKER-HWM", "NATSBROKER-META", "checkpoint.json", "writer.lock",
            "CURRENT"} <= names, names
    assert live == []
    assert open_to_others(str(tmp_path / "a"), leveldb_exempt=True) == []
    streams = store / "jetstream" / "streams"  # the global account's
    for name in ("ORDERS", "KV_CONFIG", "OBJ_FILES"):
        assert stat.S_IMODE(os.stat(streams / name).st_mode) == 0o700


def test_feed_never_writes_through_planted_checkpoint_symlink(tmp_path):
    """A symlink planted as ``checkpoint.json.tmp`` (the name the feed used
    for its temporary checkpoint) is never followed: its target is not
    written and checkpoint.json is a regular file of the broker's."""
    feed = tmp_path / "feed"
    feed.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    os.symlink(victim, feed / "checkpoint.json.tmp")
    conf = tmp_path / "server.conf"
    conf.write_text('jetstream { store_dir: "%s" }\nchangefeed { dir: "%s", max_file_age: '
                    '"200ms" }\n' % (tmp_path / "js", feed))

    async def publish(url):
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="ORDERS", subjects=["orders.>"])
            await js.publish("orders.new", b"secret")
        finally:
            await nc.close()

    srv = start("natsbroker", ["-c", str(conf)])
    try:
        run(publish(srv.url))
        eventually(lambda: os.path.lexists(feed / "checkpoint.json")
                   and any(n.endswith(".jsonl") for n in os.listdir(feed)), timeout=20)
    finally:
        srv.stop()
    assert victim.read_text() == "untouched"
    st = os.lstat(feed / "checkpoint.json")
    assert stat.S_ISREG(st.st_mode) and not st.st_mode & 0o077


def test_private_write_atomic_ignores_planted_temp_names(tmp_path):
    """The helper every side file goes through: a new 0600 file under a
    unique name, even under a umask that would allow more."""
    from natsbroker import private
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    target = tmp_path / "NATSBROKER-META"
    os.symlink(victim, str(target) + ".tmp")
    with umask(0o000):
        private.write_atomic(str(target), b"data")
        private.make_dirs(str(tmp_path / "x" / "y"))
    assert victim.read_text() == "untouched"
    assert target.read_bytes() == b"data"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    for d in ("x", "x/y"):
        assert stat.S_IMODE(os.stat(tmp_path / d).st_mode) == 0o700


def test_feed_writer_refuses_planted_feed_file(tmp_path):
    """The feed's data file is created O_EXCL | O_NOFOLLOW: a symlink at its
    name fails the open rather than being written through."""
    from natsbroker.changefeed.writer import FeedWriter
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    os.symlink(victim, tmp_path / ("feed-%020d.tmp" % 1))
    w = FeedWriter(str(tmp_path), 1 << 20, 0, {}, {}, lambda no: None)
    with pytest.raises(OSError):
        w._open()
    assert victim.read_text() == "untouched"


def test_repaired_stream_and_backup_copy_stay_private(tmp_path):
    """natsbroker-admin repair puts a new database in the stream's place and
    keeps a copy of the old one: both directories 0700 (LevelDB would create
    the new one 0755), its own files 0600, under umask 022."""
    import plyvel

    from natsbroker.store.leveldb import LevelDBStore
    from natsbroker.store.leveldb.records import pack_record
    from natsbroker.store.meta_keys import pinned_meta
    from tests.test_admin_store import admin, payload

    store = tmp_path / "store"
    root = str(store / "jetstream")
    with umask(0o022):
        s = LevelDBStore(root, pin_meta=pinned_meta)
        st = s.create_stream("T")
        st.put_meta(b"config", b'{"name":"T"}')
        for k in range(20):
            st.append(b"t", b"", payload(k), k + 1)
        s.commit()
        s.close()
        db = plyvel.DB(os.path.join(root, "streams", "T"))
        rec = bytearray(pack_record(5, 6, b"t", b"", payload(4)))
        rec[-1] ^= 1  # damaged: LevelDB's checks pass, the record's own does not
        db.put(b"d" + (5).to_bytes(8, "big"), bytes(rec), sync=True)
        db.close()
        out = admin("repair", str(store), "--stream", "T", "--yes", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "NATSBROKER-REPAIRS" in os.listdir(os.path.join(root, "streams", "T"))
    assert os.listdir(os.path.join(root, "quarantine"))  # the pre-repair copy
    assert open_to_others(str(store), leveldb_exempt=True) == []
