"""The change-feed plugin against a real broker process: records, files, crashes."""

import asyncio
import base64
import glob
import json
import os
import signal
import time

import nats
import pytest

from tests.support.servers import ServerProcess
from tests.support.wait import eventually


def conf(tmp_path, **extra):
    feed = tmp_path / "feed"
    opts = {"dir": str(feed), "max_file_age": '"300ms"'}
    opts.update(extra)
    body = ", ".join("%s: %s" % kv for kv in opts.items())
    path = tmp_path / "server.conf"
    path.write_text("jetstream { store_dir: %s }\nchangefeed { %s }\n" % (tmp_path / "js", body))
    return str(path), str(feed)


def records(feed, settle=1.5):
    """Every record of the completed files, in feed order."""
    time.sleep(settle)
    # A file completes max_file_age after it was opened, and is renamed once
    # fsynced: on a loaded machine that can take longer than ``settle``.
    deadline = time.time() + 20
    while glob.glob(os.path.join(feed, "*.tmp")) and time.time() < deadline:
        time.sleep(0.1)
    out = []
    names = sorted(glob.glob(os.path.join(feed, "feed-*.jsonl")))
    for name in names:
        with open(name, "rb") as f:
            for line in f:
                out.append(json.loads(line))
    return out


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_records_for_streams_kv_and_objects(tmp_path):
    path, feed = conf(tmp_path)

    async def main(url):
        nc = await nats.connect(url)
        js = nc.jetstream()
        try:
            await js.add_stream(name="ORDERS", subjects=["orders.>"], max_msgs_per_subject=2)
            for i in range(3):
                await js.publish("orders.a", b"o%d" % i, headers={"X": "y"})
            await js.publish("orders.b", b"b")
            await js.delete_msg("ORDERS", 4)
            await js.purge_stream("ORDERS", subject="orders.a")
            kv = await js.create_key_value(bucket="prefs")
            await kv.put("color", b"red")
            await kv.delete("color")
            obs = await js.create_object_store("files")
            await obs.put("a.txt", b"hello")
            await js.delete_stream("ORDERS")
        finally:
            await nc.close()
    with ServerProcess("natsbroker", ["-c", path]) as s:
        run(main(s.url))
        got = records(feed)
    assert [os.path.basename(p) for p in sorted(glob.glob(feed + "/*.jsonl"))] == sorted(
        os.path.basename(p) for p in glob.glob(feed + "/*.jsonl"))
    assert not glob.glob(feed + "/*.tmp")
    orders = [r for r in got if r["stream"] == "ORDERS"]
    ops = [(r["op"], r["seq"], r["reason"]) for r in orders]
    assert ops == [("stream_create", 0, None), ("put", 1, None), ("put", 2, None), ("put", 3, None),
                   ("delete", 1, "limit"), ("put", 4, None), ("delete", 4, "api"),
                   ("purge", 4, "api"), ("stream_delete", 4, None)]
    put = orders[1]
    assert (put["subject"], base64.b64decode(put["data"]), put["headers"]) == (
        "orders.a", b"o0", {"X": ["y"]})
    assert put["id"] == "ORDERS@%d:put:1" % put["stream_created"]
    assert orders[7]["purge"] == {"filter": "orders.a", "upto_seq": None, "keep": None}
    assert json.loads(orders[0]["config"])["name"] == "ORDERS"
    kv = [r["kv"] for r in got if r["stream"] == "KV_prefs" and r["op"] == "put"]
    assert kv == [{"bucket": "prefs", "key": "color", "operation": "PUT", "revision": 1},
                  {"bucket": "prefs", "key": "color", "operation": "DEL", "revision": 2}]
    objs = [r["obj"] for r in got if r["stream"] == "OBJ_files" and r["op"] == "put"]
    assert [o["event"] for o in objs] == ["chunk", "put"]
    assert (objs[1]["object"], objs[1]["size"]) == ("a.txt", 5)
    assert len({r["id"] for r in got}) == len(got)


async def _publish_until_killed(server, n):
    nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=10)
    js = nc.jetstream()
    await js.add_stream(name="FEED", subjects=["feed.>"])
    acked = set()
    try:
        for i in range(n):
            ack = await js.publish("feed.%d" % (i % 3), b"m%d" % i, timeout=5)
            acked.add(ack.seq)
            if len(acked) == n // 2:
                server.proc.send_signal(signal.SIGKILL)
    except Exception:
        pass
    try:
        await nc.close()
    except Exception:
        pass
    return acked


@pytest.mark.parametrize("file_age", ['"300ms"', '"1h"'])
def test_sigkill_loses_no_acked_message(tmp_path, file_age):
    path, feed = conf(tmp_path, max_file_age=file_age, max_file_size="4KB")
    server = ServerProcess("natsbroker", ["-c", path]).start()
    try:
        acked = run(_publish_until_killed(server, 600))
        server.proc.wait(10)
    finally:
        server.stop()
    assert len(acked) >= 300
    # Restart with short-lived files, so the replayed tail completes soon.
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace('"1h"', '"300ms"'))
    with ServerProcess("natsbroker", ["-c", path]):
        got = records(feed)
    puts = [r for r in got if r["stream"] == "FEED" and r["op"] == "put"]
    assert acked <= {r["seq"] for r in puts}
    # Repeats are the same record: same id, same content.
    by_id = {}
    for r in puts:
        assert by_id.setdefault(r["id"], r) == r


def _wait_for(cond):
    """The writer process is real: wait (bounded) for what it does."""
    eventually(cond, timeout=20, interval=0.005)


def test_files_complete_on_the_reactor_clock(tmp_path):
    """The broker in process, timers on a task.Clock (the writer process is
    real): a file is completed max_file_age after the writer opened it, not
    before; records reach the writer only with the group commit that made
    them durable, all of its records at once; stop() completes the open file."""
    from twisted.internet.task import Clock

    import natsbroker.jetstream.plugin as P
    from natsbroker.broker import Broker
    from natsbroker.changefeed.plugin import ChangeFeed
    from natsbroker.config.model import ChangeFeedConfig, JetStreamConfig, ServerConfig

    feed_dir = tmp_path / "feed"
    config = ServerConfig(jetstream=JetStreamConfig(enabled=True, store_dir=str(tmp_path / "js")),
                          changefeed=ChangeFeedConfig(enabled=True, dir=str(feed_dir),
                                                      max_file_age=5.0))
    clock = Clock()
    from_thread = []
    clock.callFromThread = lambda f, *a: from_thread.append((f, a))
    broker = Broker(config, clock)
    js = P.JetStream(config)
    broker.add_plugin(js)
    js.start(broker)
    feed = ChangeFeed(config)
    broker.add_plugin(feed)
    feed.start(broker)
    submitted = []
    submit = feed.writer.submit

    def records(batch):  # puts come in runs: stream, created, seq, count, 4 items each
        n = i = 0
        while i < len(batch):
            if isinstance(batch[i], str):
                count = batch[i + 3]
                n += count
                i += 4 + 4 * count
            else:
                n += 1
                i += 1
        return n
    feed.writer.submit = lambda batch: (submitted.append(records(batch)), submit(batch))
    try:
        broker.request(b"$JS.API.STREAM.CREATE.S", b'{"name":"S","subjects":["s"]}', reply=b"_r")
        for i in range(3):
            broker.publish(b"s", b"m%d" % i, reply=b"_r")
        # The turn's group commit has not run: nothing goes to the writer yet.
        assert submitted == [] and not glob.glob(str(feed_dir / "feed-*"))
        clock.advance(0)
        assert submitted == [4]
        _wait_for(lambda: from_thread)
        tmp = glob.glob(str(feed_dir / "feed-*.tmp"))
        _wait_for(lambda: os.path.getsize(tmp[0]) > 0 and open(tmp[0], "rb").read().count(b"\n") == 4)
        for f, a in from_thread:
            f(*a)
        clock.advance(4.9)
        time.sleep(0.2)  # nothing may complete the file before its age
        assert glob.glob(str(feed_dir / "*.tmp")) and not glob.glob(str(feed_dir / "*.jsonl"))
        assert feed.records == 0
        clock.advance(0.2)
        # The checkpoint moves after the rename (it is saved through
        # checkpoint.json.tmp, which may still be there: not a feed file).
        _wait_for(lambda: feed.records == 4)
        assert glob.glob(str(feed_dir / "*.jsonl")) and not glob.glob(str(feed_dir / "feed-*.tmp"))
        with open(feed_dir / "checkpoint.json") as f:
            assert json.load(f)["S"]["seq"] == 3
        broker.publish(b"s", b"last", reply=b"_r")
    finally:
        feed.stop()
        js.stop()
    names = sorted(glob.glob(str(feed_dir / "*.jsonl")))
    assert len(names) == 2 and not glob.glob(str(feed_dir / "*.tmp"))
    with open(names[1], "rb") as f:
        last = json.loads(f.read())
    assert (last["seq"], base64.b64decode(last["data"])) == (4, b"last")
    with open(feed_dir / "checkpoint.json") as f:
        assert json.load(f)["S"]["seq"] == 4


def _writer_pid(server_pid):
    """The feed writer: the broker's child process running changefeed_writer."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for task in os.listdir("/proc/%d/task" % server_pid):
            try:
                with open("/proc/%d/task/%s/children" % (server_pid, task)) as f:
                    kids = [int(p) for p in f.read().split()]
            except OSError:
                continue
            for pid in kids:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    if b"natsbroker.changefeed.writer" in f.read():
                        return pid
        time.sleep(0.05)
    raise AssertionError("no feed writer process")


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open("/proc/%d/stat" % pid) as f:  # a zombie of an exited child
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_writer_process_holds_the_directory_and_outlives_no_broker(tmp_path):
    """The writer is a process of its own holding writer.lock: a SIGKILLed
    broker's writer exits (its pipe ends) and frees the directory, and the
    restarted broker writes the feed again."""
    from natsbroker.changefeed.process import FeedDirBusy, lock_dir

    path, feed = conf(tmp_path)
    server = ServerProcess("natsbroker", ["-c", path]).start()
    try:
        async def publish(url, n):
            nc = await nats.connect(url)
            js = nc.jetstream()
            await js.add_stream(name="L", subjects=["l"])
            for i in range(n):
                await js.publish("l", b"%d" % i)
            await nc.close()
        run(publish(server.url, 5))
        writer = _writer_pid(server.proc.pid)
        with pytest.raises(FeedDirBusy, match="change feed directory %s is in use by another "
                           "writer" % feed):
            lock_dir(feed, 0.2)
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(10)
    finally:
        server.stop()
    _wait_for(lambda: _gone(writer))
    os.close(lock_dir(feed, 10))
    with ServerProcess("natsbroker", ["-c", path]):
        got = records(feed)
    assert [r["seq"] for r in got if r["stream"] == "L" and r["op"] == "put"][-5:] == [1, 2, 3, 4, 5]


def test_broker_refuses_a_feed_directory_another_writer_holds(tmp_path, monkeypatch):
    from twisted.internet.task import Clock

    import natsbroker.changefeed.plugin as CF
    import natsbroker.jetstream.plugin as P
    from natsbroker.broker import Broker
    from natsbroker.changefeed.process import lock_dir
    from natsbroker.config.model import ChangeFeedConfig, JetStreamConfig, ServerConfig
    from natsbroker.fatal import StartupError

    feed_dir = tmp_path / "feed"
    feed_dir.mkdir()
    held = lock_dir(str(feed_dir), 1)
    monkeypatch.setattr(CF, "LOCK_WAIT", 0.2)
    config = ServerConfig(jetstream=JetStreamConfig(enabled=True, store_dir=str(tmp_path / "js")),
                          changefeed=ChangeFeedConfig(enabled=True, dir=str(feed_dir)))
    broker = Broker(config, Clock())
    js = P.JetStream(config)
    broker.add_plugin(js)
    js.start(broker)
    try:
        with pytest.raises(StartupError) as e:
            CF.ChangeFeed(config).start(broker)
        assert str(e.value) == "change feed directory %s is in use by another writer" % feed_dir
    finally:
        js.stop()
        os.close(held)


def test_a_killed_writer_is_replaced(tmp_path):
    """The writer process dies: the broker says so, keeps serving, starts
    another writer, which writes the puts since the checkpoint again:
    nothing acknowledged is missing from the feed, without a restart."""
    path, feed = conf(tmp_path)

    async def publish(url, first, n):
        nc = await nats.connect(url)
        js = nc.jetstream()
        await js.add_stream(name="K", subjects=["k"])
        seqs = [(await js.publish("k", b"%d" % i)).seq for i in range(first, first + n)]
        await nc.close()
        return seqs

    with ServerProcess("natsbroker", ["-c", path]) as server:
        acked = run(publish(server.url, 0, 5))
        first = _writer_pid(server.proc.pid)
        os.kill(first, signal.SIGKILL)
        acked += run(publish(server.url, 5, 5))
        _wait_for(lambda: "[ERR] change feed: the writer process exited (status -9)"
                  in server.log())
        _wait_for(lambda: _writer_pid(server.proc.pid) != first)
        acked += run(publish(server.url, 10, 5))
        got = records(feed)
        assert _gone(first)
    puts = [r for r in got if r["stream"] == "K" and r["op"] == "put"]
    assert set(acked) == {r["seq"] for r in puts} and len(acked) == 15
