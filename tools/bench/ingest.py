"""Change-feed ingest benchmark: records/s of the Spark ingest, and its lag.

    python -m tools.bench.ingest [--records 1000000] [--master local[2]] [--json]

Three measurements, on one synthetic feed made by spark/feedgen.py (the
generator of ``python -m natsbroker.spark.bench``: puts on three streams, KV and object
store traffic, deletes, a purge, crash-style repeats, malformed lines):

* **cold start**: ``python -m natsbroker.spark.ingest --once`` as a fresh process on a
  4-record feed, wall time from exec to exit (JVM start, Spark session,
  stream set-up, first batch, derived tables).
* **backfill**: ``--once`` over the whole feed in this process's
  SparkSession (started beforehand; its start-up is reported apart), with
  the tables checked afterwards (every unique id once in ``events``, every
  put in ``messages``, the malformed lines in ``quarantine``). Reported:
  records/s over wall time, the JVM's CPU seconds and those of its Python
  workers, where the per-record work runs (user + system, from /proc) -- on
  a shared machine CPU time moves much less with other load than wall time
  does. The driver's own CPU (this process) is not counted.
* **lag** (follow mode, ``--trigger-seconds``): after the backfill the ingest
  keeps following the feed; ``--lag-files`` new files of ``--per-file``
  records are completed one by one (``--lag-interval`` apart), and the lag of
  a file is the time from its rename to ``feed-*.jsonl`` until the commit
  that contains it (the ``time`` of its line in ``_ingest/commits.jsonl``).

Nothing here is asserted by the tests; the numbers go to the report only.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from tools.proctree import descendants, stat

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def jvm_cpu(spark):
    """CPU seconds (user + system) of the session's JVM so far."""
    fields = stat(spark._jvm.java.lang.ProcessHandle.current().pid())
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker_cpu(spark):
    """CPU seconds of the JVM's descendants: Spark's Python workers (the
    per-record work of the ingest), living ones and reaped ones."""
    root = spark._jvm.java.lang.ProcessHandle.current().pid()
    total = sum(int(f[11]) + int(f[12]) for _, f in descendants(root))
    f = stat(root)
    total += int(f[13]) + int(f[14])  # reaped children
    return total / os.sysconf("SC_CLK_TCK")


def cold_start(work, master):
    from natsbroker.spark import feedgen as g
    feed, out = os.path.join(work, "tiny-feed"), os.path.join(work, "tiny-out")
    c = 1_790_000_000_000_000_000
    g.FeedWriter(feed).write([g.stream_event("T", c, "stream_create", 0, c, {"name": "T"})]
                             + [g.put("T", c, i, "t", b"x", c + i) for i in range(1, 4)])
    t = time.time()
    r = subprocess.run([sys.executable, "-m", "natsbroker.spark.ingest", "--feed", feed, "--out", out,
                        "--once", "--master", master], cwd=ROOT, capture_output=True, text=True)
    took = time.time() - t
    if r.returncode != 0:
        raise RuntimeError("cold-start ingest failed: " + r.stderr[-2000:])
    return took


def check(spark, out, unique, puts, malformed):
    ev = spark.read.parquet(os.path.join(out, "events"))
    n_ev, n_ids = ev.count(), ev.select("id").distinct().count()
    n_msg = spark.read.parquet(os.path.join(out, "messages")).count()
    n_q = spark.read.parquet(os.path.join(out, "quarantine")).count()
    return n_ev == n_ids == unique and n_msg == puts and n_q == malformed


def lag_run(spark, feed, out, files, per_file, interval, trigger):
    """Follow the feed; complete ``files`` new files; lag of each, in seconds."""
    from natsbroker.spark import feedgen as g
    from natsbroker.spark.commit import Committer
    from natsbroker.spark.ingest import Ingest, feed_files

    ingest = Ingest(spark, feed, out, log=None)
    stop = threading.Event()
    errors = []

    def follow():
        try:
            ingest.run(once=False, trigger_seconds=trigger, stop=stop)
        except BaseException as e:  # reported below
            errors.append(e)
    runner = threading.Thread(target=follow, daemon=True)
    runner.start()
    committer = Committer(out)
    last = max(int(n[5:25]) for n in feed_files(feed))
    w = g.FeedWriter(feed, start=last + 1)
    c = 1_790_000_000_000_000_000
    done, seq = {}, 0
    try:
        while ingest.started is None and not errors:
            time.sleep(0.05)  # the ingest is starting
        time.sleep(2 * trigger)
        for _ in range(files):
            recs = []
            for _ in range(per_file):
                seq += 1
                recs.append(g.put("LAG", c, seq, "lag.x", b"y" * 128, c + seq))
            done[os.path.basename(w.write(recs))] = time.time()
            time.sleep(interval)
        deadline = time.time() + 300
        lags = {}
        while len(lags) < len(done) and time.time() < deadline and not errors:
            for commit in committer.commits():
                for name in commit.get("files", ()):
                    if name in done:
                        lags[name] = commit["time"] - done[name]
            time.sleep(0.1)
    finally:
        stop.set()
        runner.join(120)
    if errors:
        raise errors[0]
    return [lags[n] for n in sorted(lags)], len(done)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tools.bench.ingest",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--per-file", type=int, default=10_000, help="records per feed file")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--max-batch-size", default="1g",
                   help="feed bytes per micro-batch (default: the ingest's, 1g)")
    p.add_argument("--trigger-seconds", type=float, default=1.0)
    p.add_argument("--lag-files", type=int, default=5)
    p.add_argument("--lag-interval", type=float, default=3.0, help="seconds between lag files")
    p.add_argument("--no-cold-start", action="store_true")
    p.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", action="store_true", help="results as JSON on stdout")
    args = p.parse_args(argv)
    sys.path.insert(0, ROOT)
    from natsbroker.spark.bench import generate
    from natsbroker.spark.ingest import Ingest, parse_size
    from natsbroker.spark.session import build_session

    log = sys.stderr if args.json else sys.stdout
    work = args.dir or tempfile.mkdtemp(prefix="natsbroker-bench-ingest-")
    os.makedirs(work, exist_ok=True)
    feed, out = os.path.join(work, "feed"), os.path.join(work, "out")
    for d in (feed, out, os.path.join(work, "tiny-feed"), os.path.join(work, "tiny-out")):
        shutil.rmtree(d, ignore_errors=True)
    res = {"master": args.master, "records": args.records, "per_file": args.per_file,
           "max_batch_size": args.max_batch_size, "loadavg_before": os.getloadavg()[0]}
    try:
        if not args.no_cold_start:
            res["cold_start_s"] = round(cold_start(work, args.master), 1)
            print("cold start (4-record feed, fresh process): %.1fs" % res["cold_start_s"],
                  file=log, flush=True)
        t = time.time()
        written, unique, puts, malformed = generate(feed, args.records, args.per_file)
        size = sum(os.path.getsize(os.path.join(feed, f)) for f in os.listdir(feed))
        res.update(lines=written, feed_mb=round(size / 1e6, 1))
        print("feed: %s lines, %.0f MB, generated in %.1fs" % (format(written, ","), size / 1e6,
                                                               time.time() - t), file=log, flush=True)
        conf = dict(kv.split("=", 1) for kv in args.conf)
        t = time.time()
        spark = build_session(args.master, app="natsbroker-bench-ingest", conf=conf)
        spark.range(1).count()
        res["session_start_s"] = round(time.time() - t, 1)
        cpu, wcpu, t = jvm_cpu(spark), worker_cpu(spark), time.time()
        ingest = Ingest(spark, feed, out, max_bytes_per_batch=parse_size(args.max_batch_size),
                        log=log)
        st = ingest.run(once=True)
        wall, cpu = time.time() - t, jvm_cpu(spark) - cpu
        wcpu = worker_cpu(spark) - wcpu
        res.update(backfill_s=round(wall, 2), backfill_jvm_cpu_s=round(cpu, 1),
                   backfill_python_cpu_s=round(wcpu, 1),
                   backfill_records_per_s=int(st.lines / wall),
                   backfill_records_per_jvm_cpu_s=int(st.lines / max(cpu, 1e-3)),
                   batches=st.batches, loadavg_after=os.getloadavg()[0])
        res["check"] = "OK" if check(spark, out, unique, puts, malformed) else "MISMATCH"
        print("backfill: %s records in %.1fs = %s records/s (JVM CPU %.1fs, Python workers' "
              "CPU %.1fs; check %s)"
              % (format(st.lines, ","), wall, format(res["backfill_records_per_s"], ","), cpu,
                 wcpu, res["check"]), file=log, flush=True)
        if args.lag_files:
            lags, n = lag_run(spark, feed, out, args.lag_files, args.per_file, args.lag_interval,
                              args.trigger_seconds)
            res.update(lag_files=n, lag_committed=len(lags),
                       lag_median_s=round(statistics.median(lags), 2) if lags else None,
                       lag_max_s=round(max(lags), 2) if lags else None)
        spark.stop()
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        rows = [("cold start, 4-record feed", "s", res.get("cold_start_s")),
                ("Spark session start-up", "s", res["session_start_s"]),
                ("backfill %s records" % format(res["lines"], ","), "records/s",
                 res["backfill_records_per_s"]),
                ("", "wall s", res["backfill_s"]), ("", "JVM CPU s", res["backfill_jvm_cpu_s"]),
                ("", "Python workers' CPU s", res["backfill_python_cpu_s"]),
                ("", "records per JVM CPU s", res["backfill_records_per_jvm_cpu_s"]),
                ("follow: file completed -> committed", "median s", res.get("lag_median_s")),
                ("", "max s", res.get("lag_max_s"))]
        print("master %s, %s MB feed, load average %.1f before / %.1f after the backfill"
              % (args.master, res["feed_mb"], res["loadavg_before"], res["loadavg_after"]))
        for name, metric, value in rows:
            shown = "-" if value is None else (format(value, ",") if isinstance(value, int)
                                               else value)
            print("  %-38s %-22s %12s" % (name, metric, shown))
    return 0 if res.get("check") == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
