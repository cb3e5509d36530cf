"""End to end: publishes, KV and object changes on a real broker, its change
feed, the Spark ingest, and the Parquet tables read back with Spark SQL --
including a broker killed mid-stream, so the feed repeats records."""

import asyncio
import glob
import os
import signal
import subprocess
import sys
import time

import nats
import pytest

from tests.support.servers import ROOT, ServerProcess

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.timeout(600), pytest.mark.long]


def write_conf(tmp_path):
    path = tmp_path / "server.conf"
    path.write_text('jetstream { store_dir: "%s" }\nchangefeed { dir: "%s", max_file_age: "200ms" }\n'
                    % (tmp_path / "js", tmp_path / "feed"))
    return str(path)


async def traffic(url, kill=None):
    nc = await nats.connect(url, allow_reconnect=False, connect_timeout=10)
    js = nc.jetstream()
    acked = []
    try:
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        kv = await js.create_key_value(bucket="prefs")
        await kv.put("color", b"red")
        await kv.put("size", b"L")
        await kv.put("color", b"blue")
        await kv.delete("size")
        obs = await js.create_object_store("files")
        await obs.put("a.txt", b"hello world")
        for i in range(200):
            ack = await js.publish("orders.%d" % (i % 4), b"order-%d" % i)
            acked.append(ack.seq)
            if kill is not None and i == 120:
                kill()
    except Exception:
        pass
    finally:
        try:
            await nc.close()
        except Exception:
            pass
    return acked


def ingest(feed, out):
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "natsbroker.spark.ingest", "--feed", feed, "--out", out,
                        "--once", "--master", "local[2]"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def spark():
    from natsbroker.spark.session import build_session
    s = build_session("local[2]", app="natsbroker-e2e-test")
    yield s
    s.stop()


def test_feed_to_tables_exactly_once_after_a_broker_kill(tmp_path, spark):
    conf = write_conf(tmp_path)
    first = ServerProcess("natsbroker", ["-c", conf]).start()
    try:
        acked = asyncio.run(traffic(first.url, kill=lambda: first.proc.send_signal(signal.SIGKILL)))
        first.proc.wait(10)
    finally:
        first.stop()
    assert len(acked) >= 100
    # The restarted broker writes again what the lost file held (same ids).
    with ServerProcess("natsbroker", ["-c", conf]):
        time.sleep(2)
        # ...and completes that file (renamed from .tmp) on a loaded machine too.
        deadline = time.time() + 30
        while glob.glob(os.path.join(str(tmp_path / "feed"), "*.tmp")) and time.time() < deadline:
            time.sleep(0.1)
    feed, out = str(tmp_path / "feed"), str(tmp_path / "out")
    ingest(feed, out)
    ingest(feed, out)  # a second run over the same files adds nothing

    messages = spark.read.parquet(os.path.join(out, "messages"))
    orders = messages.where("stream = 'ORDERS'").select("seq", "subject", "data").collect()
    seqs = sorted(r.seq for r in orders)
    assert len(seqs) == len(set(seqs))  # exactly once
    assert set(acked) <= set(seqs)      # nothing acknowledged is missing
    by_seq = {r.seq: r for r in orders}
    assert bytes(by_seq[1].data) == b"order-0" and by_seq[1].subject == "orders.0"
    events = spark.read.parquet(os.path.join(out, "events"))
    assert events.count() == events.select("id").distinct().count()
    spark.read.parquet(os.path.join(out, "kv")).createOrReplaceTempView("kv")
    rows = spark.sql("SELECT bucket, key, value FROM kv ORDER BY key").collect()
    live = [(r.bucket, r.key, bytes(r.value) if r.value is not None else None) for r in rows
            if "deleted" not in r.asDict() or not r["deleted"]]
    assert ("prefs", "color", b"blue") in live
    assert all(k != "size" for _, k, _ in live)
    objects = spark.read.parquet(os.path.join(out, "objects")).collect()
    assert [(o.bucket, o.object) for o in objects if not o.asDict().get("deleted")] == [
        ("files", "a.txt")]
