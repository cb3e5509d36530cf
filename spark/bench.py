"""Throughput check of the ingest (not a test).

    python -m natsbroker.spark.bench --records 1000000 [--master local[2]] [--per-file 10000]

Generates a synthetic change feed -- puts on a few streams (payloads of
32-512 bytes, some with headers), KV puts/deletes, object chunks and metas,
deletes, a purge, crash-style repeats of a file's tail at the start of the
next file, and a few malformed lines -- then runs ``natsbroker.spark.ingest --once`` on it
in-process and reports the rate. The output is checked: every unique id
exactly once in ``events``, every put in ``messages``, the malformed lines in
``quarantine``.
"""

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

from natsbroker.spark import feedgen as g

CREATED = 1_790_000_000_000_000_000
DAY = 86_400 * 10 ** 9


def generate(feed_dir, records, per_file, seed=1):
    """Write the feed; returns (lines written, unique ids, puts, malformed)."""
    rnd = random.Random(seed)
    w = g.FeedWriter(feed_dir)
    seqs = {}
    ts = CREATED
    # Two days of traffic, so messages spans two date partitions.
    step = max(1, (2 * DAY) // max(records, 1))
    payloads = [bytes(rnd.getrandbits(8) for _ in range(n)) for n in (32, 64, 128, 256, 512)]
    unique = puts = malformed = written = 0
    prev_tail = []
    lines = []

    def emit(rec):
        nonlocal unique, written, puts
        lines.append(g.dumps(rec))
        unique += 1
        written += 1
        if rec["op"] == "put":
            puts += 1

    def next_seq(stream):
        seqs[stream] = seqs.get(stream, 0) + 1
        return seqs[stream]

    for stream in ("ORDERS", "EVENTS", "AUDIT", "KV_config", "OBJ_files"):
        emit(g.stream_event(stream, CREATED, "stream_create", 0, ts, {"name": stream}))
    nuid_no = 0
    while written < records:
        ts += step
        r = rnd.random()
        if r < 0.55:
            s = "ORDERS"
            q = next_seq(s)
            emit(g.put(s, CREATED, q, "orders.%d" % (q % 50), rnd.choice(payloads), ts,
                       headers={"Nats-Msg-Id": [str(q)]} if q % 4 == 0 else None))
        elif r < 0.75:
            s = "EVENTS"
            q = next_seq(s)
            emit(g.put(s, CREATED, q, "events.%s" % rnd.choice("abcdef"), rnd.choice(payloads), ts))
        elif r < 0.85:
            s = "AUDIT"
            q = next_seq(s)
            emit(g.put(s, CREATED, q, "audit.log", payloads[0], ts))
            if q > 10 and rnd.random() < 0.2:
                emit(g.delete(s, CREATED, q - 10, "audit.log", ts, reason="max_age"))
        elif r < 0.97:
            q = next_seq("KV_config")
            op = "DEL" if rnd.random() < 0.1 else "PUT"
            emit(g.kv_put("config", CREATED, q, "key%d" % rnd.randrange(1000),
                          b"" if op == "DEL" else payloads[1], ts, operation=op))
        else:
            nuid_no += 1
            nuid = "NUID%06d" % nuid_no
            q = next_seq("OBJ_files")
            emit(g.obj_chunk("files", CREATED, q, nuid, payloads[4], ts))
            q = next_seq("OBJ_files")
            emit(g.obj_meta("files", CREATED, q, "file%d" % rnd.randrange(200), nuid, 512, ts))
        if len(lines) >= per_file:
            if w.no % 50 == 7:
                lines.append("{this is not json")
                malformed += 1
                written += 1
            if prev_tail:
                # As after a broker crash: the previous file's tail again.
                lines[:0] = prev_tail
                written += len(prev_tail)
            prev_tail = lines[-200:] if w.no % 10 == 3 else []
            prev_tail = [x for x in prev_tail if x.startswith("{\"id\"")]
            w.write(lines, sync=False)
            lines = []
    s = "AUDIT"
    emit(g.purge(s, CREATED, seqs.get(s, 0), ts + 1, filter="audit.log", keep=100))
    if lines:
        w.write(lines, sync=False)
    return written, unique, puts, malformed


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m natsbroker.spark.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--per-file", type=int, default=10_000, help="records per feed file")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--max-batch-size", default="1g",
                   help="feed bytes per micro-batch (default: the ingest's, 1g)")
    p.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)

    work = args.dir or tempfile.mkdtemp(prefix="natsbroker-bench-")
    feed, out = os.path.join(work, "feed"), os.path.join(work, "out")
    shutil.rmtree(feed, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    try:
        t = time.time()
        written, unique, puts, malformed = generate(feed, args.records, args.per_file)
        files = len(os.listdir(feed))
        size = sum(os.path.getsize(os.path.join(feed, f)) for f in os.listdir(feed))
        print("generated %s lines (%s unique ids, %s duplicates, %d malformed) in %d files, "
              "%.0f MB, in %.1fs" % (format(written, ","), format(unique, ","),
                                     format(written - unique - malformed, ","), malformed, files,
                                     size / 1e6, time.time() - t), flush=True)

        from natsbroker.spark.ingest import Ingest, parse_size
        from natsbroker.spark.session import build_session
        conf = dict(kv.split("=", 1) for kv in args.conf)
        t = time.time()
        spark = build_session(args.master, app="natsbroker-ingest-bench", conf=conf)
        spark.range(1).count()
        startup = time.time() - t
        t = time.time()
        ingest = Ingest(spark, feed, out, max_bytes_per_batch=parse_size(args.max_batch_size))
        st = ingest.run(once=True)
        elapsed = time.time() - t
        print(ingest.summary())

        ev = spark.read.parquet(os.path.join(out, "events"))
        n_ev, n_ids = ev.count(), ev.select("id").distinct().count()
        n_msg = spark.read.parquet(os.path.join(out, "messages")).count()
        n_q = spark.read.parquet(os.path.join(out, "quarantine")).count()
        ok = n_ev == n_ids == unique and n_msg == puts and n_q == malformed
        print("check: events %s (distinct ids %s, expected %s), messages %s (expected %s), "
              "quarantine %s (expected %s): %s"
              % (n_ev, n_ids, unique, n_msg, puts, n_q, malformed, "OK" if ok else "MISMATCH"))
        print("RESULT: %s feed records ingested in %.1fs on %s = %s records/s "
              "(%.1f MB/s; Spark start-up %.1fs not included)"
              % (format(st.lines, ","), elapsed, args.master,
                 format(int(st.lines / elapsed), ","), size / 1e6 / elapsed, startup))
        spark.stop()
        return 0 if ok else 1
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
