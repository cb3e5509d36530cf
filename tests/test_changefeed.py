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
    with ServerProcess("natsbroker", ["-c", path]) as s:
        got = records(feed)
    puts = [r for r in got if r["stream"] == "FEED" and r["op"] == "put"]
    assert acked <= {r["seq"] for r in puts}
    # Repeats are the same record: same id, same content.
    by_id = {}
    for r in puts:
        assert by_id.setdefault(r["id"], r) == r


def _wait_for(cond):
    """The writer thread is real: wait (bounded) for what it does."""
    deadline = time.monotonic() + 20
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_files_complete_on_the_reactor_clock(tmp_path):
    """In process, timers on a task.Clock: a file is completed max_file_age
    after the writer opened it, not before; records reach the writer only
    after the turn that stored them; stop() completes the open file."""
    from twisted.internet.task import Clock

    import natsbroker.plugins.jetstream.plugin as P
    from natsbroker.broker import Broker
    from natsbroker.config import ChangeFeedConfig, JetStreamConfig, ServerConfig
    from natsbroker.plugins.changefeed import ChangeFeed

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
    try:
        broker.publish(b"$JS.API.STREAM.CREATE.S", b'{"name":"S","subjects":["s"]}', reply=b"_r")
        for i in range(3):
            broker.publish(b"s", b"m%d" % i, reply=b"_r")
        assert feed.records == 0 and len(feed._pending) == 4
        clock.advance(0)
        _wait_for(lambda: feed.records == 4 and from_thread)
        for f, a in from_thread:
            f(*a)
        clock.advance(4.9)
        assert glob.glob(str(feed_dir / "*.tmp")) and not glob.glob(str(feed_dir / "*.jsonl"))
        clock.advance(0.2)
        # The checkpoint moves after the rename (and is saved through
        # checkpoint.json.tmp, which may still be there: not a feed file).
        _wait_for(lambda: "S" in feed.checkpoint)
        assert glob.glob(str(feed_dir / "*.jsonl")) and not glob.glob(str(feed_dir / "feed-*.tmp"))
        assert feed.checkpoint["S"]["seq"] == 3
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
