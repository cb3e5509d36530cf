"""The ingest against a real standalone Spark cluster.

A Master and a Worker from the pyspark distribution (``bin/spark-class``),
started here on loopback with ephemeral ports (port 0: each reports the port
it bound in its log), then ``python -m natsbroker.spark.ingest --master spark://...``
on a small feed; the tables must be exact. Master and Worker are stopped by
their pids.
"""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

pyspark = pytest.importorskip("pyspark")

from natsbroker.spark import feedgen as g  # noqa: E402
from tests.support.wait import eventually  # noqa: E402
from tests.test_spark_ingest import ROOT, SEC, C, Feed  # noqa: E402

pytestmark = [pytest.mark.timeout(300), pytest.mark.long]

SPARK_HOME = os.path.dirname(os.path.abspath(pyspark.__file__))
SPARK_CLASS = os.path.join(SPARK_HOME, "bin", "spark-class")


def cluster_env():
    env = dict(os.environ, SPARK_HOME=SPARK_HOME, SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_NO_DAEMONIZE="1")
    env.pop("SPARK_CONF_DIR", None)
    return env


class Daemon:
    """A spark-class process whose log is scanned for a line."""

    def __init__(self, name, args, log_dir):
        self.log_path = os.path.join(log_dir, name + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([SPARK_CLASS, *args], env=cluster_env(), cwd=log_dir,
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_for(self, pattern, timeout=60):
        def logged():
            m = re.search(pattern, self.text())
            assert m or self.proc.poll() is None, "exited early:\n" + self.text()[-3000:]
            return m
        # An early exit fails at once (nothing retried), a timeout names the log.
        return eventually(logged, timeout=timeout, interval=0.2, ignore=(),
                          what="%r in %s" % (pattern, self.log_path))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        self.log.close()


@pytest.fixture
def cluster(tmp_path):
    master = Daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", "0", "--webui-port", "0"], str(tmp_path))
    worker = None
    try:
        url = master.wait_for(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)").group(1)
        worker = Daemon("worker", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                   "--port", "0", "--webui-port", "0", "--cores", "2",
                                   "--memory", "1g", "--work-dir", str(tmp_path / "work"), url],
                        str(tmp_path))
        worker.wait_for(r"Successfully registered with master")
        yield url, master, worker
    finally:
        if worker is not None:
            worker.stop()
        master.stop()


def test_ingest_on_a_standalone_cluster(cluster, tmp_path):
    url, master, worker = cluster
    feed_dir, out = str(tmp_path / "feed"), str(tmp_path / "out")
    feed = Feed(feed_dir)
    puts = [g.put("ORDERS", C, i, "orders.%d" % (i % 3), b"order-%d" % i, C + i * SEC)
            for i in range(1, 41)]
    feed.write([g.stream_event("ORDERS", C, "stream_create", 0, C, {"name": "ORDERS"})]
               + puts[:25] + [("bad", "{oops", "invalid JSON")])
    feed.write(puts[20:] + [g.kv_put("cfg", C, 1, "a", b"1", C + 1),
                            g.kv_put("cfg", C, 2, "a", b"2", C + 2)])
    t = time.time()
    r = subprocess.run(
        [sys.executable, "-m", "natsbroker.spark.ingest", "--feed", feed_dir, "--out", out, "--once",
         "--master", url, "--conf", "spark.executor.memory=512m",
         "--conf", "spark.driver.host=127.0.0.1"],
        cwd=ROOT, env=cluster_env(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    print("ingest on %s: %.1fs" % (url, time.time() - t))
    # The work ran on the cluster's executor, not in a local master.
    assert re.search(r"CoarseGrainedExecutorBackend.*\"--app-id\" \"app-", worker.text()), \
        worker.text()[-2000:]
    assert "43 new, 5 duplicates dropped, 1 quarantined" in r.stdout

    from natsbroker.spark.session import build_session
    spark = build_session("local[1]", app="test-spark-cluster-check")
    try:
        events = spark.read.parquet(os.path.join(out, "events")).collect()
        ids = [e["id"] for e in events]
        assert sorted(ids) == sorted(feed.ids())
        msgs = spark.read.parquet(os.path.join(out, "messages")).collect()
        assert sorted((m["seq"], bytes(m["data"])) for m in msgs if m["stream"] == "ORDERS") == [
            (i, b"order-%d" % i) for i in range(1, 41)]
        q = spark.read.parquet(os.path.join(out, "quarantine")).collect()
        assert [(x["line"], x["error"]) for x in q] == [(27, "invalid JSON")]
        kv = spark.read.parquet(os.path.join(out, "kv")).collect()
        assert [(x["key"], bytes(x["value"]), x["revision"]) for x in kv] == [("a", b"2", 2)]
    finally:
        spark.stop()
