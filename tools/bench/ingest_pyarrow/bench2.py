"""Approaches 2 and 3: Spark local[2] with the per-record work in Python workers (mapInArrow).

  --mode readback   mapInArrow -> events (Spark writes, partitionBy stream); messages = Spark reads
                    events back, puts only, writes partitionBy stream,date
  --mode twice      as readback, but messages from a second mapInArrow over the feed (parse twice)
  --mode pywrite    mapInArrow parses AND writes events/messages with pyarrow into a staging dir,
                    returns one small row per feed file (file, rows, puts, min/max seq, rejects)
  --mode paths      as pywrite, but Spark passes only the file paths (binaryFile, content pruned);
                    the worker reads the file itself
  --reader text|binary   text = spark.read.text(wholetext=True), binary = binaryFile content
  --repeat N       run the pipeline N times in the same session (1st = cold JVM, later = warm)
Prints one JSON line per repetition."""

import argparse
import glob
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The feed: a directory of feed-*.jsonl (python -m tools.bench.ingest keeps one).
FEED = os.environ.get("INGEST_FEED", "/tmp/ingbench/feed1m")
LOG4J = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "spark", "log4j2.properties")
JIT_OPTIONS = ("-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
               "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000")

EVENTS_DDL = (
    "id string, feed int, stream string, stream_created bigint, seq bigint, op string, "
    "reason string, ts bigint, time timestamp, subject string, "
    "headers map<string, array<string>>, data binary, "
    "purge struct<filter: string, upto_seq: bigint, keep: bigint>, config string, "
    "kv struct<bucket: string, key: string, operation: string, revision: bigint>, "
    "obj struct<bucket: string, object: string, event: string, nuid: string, size: bigint, "
    "digest: string>, file string, line bigint")
MESSAGES_DDL = ("id string, stream_created bigint, seq bigint, subject string, "
                "headers map<string, array<string>>, data binary, ts bigint, time timestamp, "
                "stream string, date date")
META_DDL = ("file string, rows bigint, puts bigint, min_seq bigint, max_seq bigint, "
            "rejects string, cpu_parse double, cpu_write double")


def load(): return " ".join(open("/proc/loadavg").read().split()[:3])


def ticks(pid):
    """utime+stime+cutime+cstime of one process, in seconds."""
    try:
        f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


def descendants(pid):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open("/proc/%s/stat" % d).read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def jvm_threads(pid):
    agg = {}
    tck = os.sysconf("SC_CLK_TCK")
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            s = open("/proc/%d/task/%s/stat" % (pid, t)).read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        f = s.rsplit(")", 1)[1].split()
        cpu = (int(f[11]) + int(f[12])) / tck
        for pre, key in (("C2 ", "C2 JIT"), ("C1 ", "C1 JIT"), ("Executor task", "task threads"),
                         ("GC ", "GC"), ("G1 ", "GC"), ("VM Thread", "GC"),
                         ("Thread-", "driver/py4j"), ("main", "driver/py4j")):
            if name.startswith(pre):
                break
        else:
            key = "other"
        agg[key] = agg.get(key, 0) + cpu
    return {k: round(v, 1) for k, v in sorted(agg.items(), key=lambda x: -x[1])}


class Meter:
    def __init__(self, jvm):
        self.jvm = jvm
        self.rows = []
        self.snap("start")

    def cpu(self):
        py = sum(ticks(p) for p in descendants(self.jvm) if p != self.jvm)
        return ticks(self.jvm), py, time.process_time()

    def snap(self, name):
        j, p, d = self.cpu()
        self.rows.append((name, time.time(), j, p, d))

    def steps(self):
        out = []
        for a, b in zip(self.rows, self.rows[1:]):
            out.append({"step": b[0], "wall": round(b[1] - a[1], 2), "jvm_cpu": round(b[2] - a[2], 1),
                        "py_worker_cpu": round(b[3] - a[3], 1),
                        "driver_py_cpu": round(b[4] - a[4], 2)})
        return out


# ------------------------------------------------------------------ python worker side

def _setup_worker():
    import pafeed as P
    import pyarrow as pa
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    P.USE_THREADS = False
    return P


def _files_of(batch, reader):
    """(file name, memoryview of its bytes) for each row of an Arrow batch."""
    import numpy as np
    names = batch.column("file").to_pylist()
    if reader == "paths":
        for n in names:
            from urllib.parse import unquote, urlparse
            path = unquote(urlparse(n).path) if n.startswith("file:") else n
            with open(path, "rb") as f:
                yield n, memoryview(f.read())
        return
    col = batch.column("value")
    if hasattr(col, "combine_chunks"):
        col = col.combine_chunks()
    width = 8 if col.type in (__import__("pyarrow").large_string(), __import__("pyarrow").large_binary()) else 4
    offs = np.frombuffer(col.buffers()[1], np.int64 if width == 8 else np.int32)[col.offset:col.offset + len(col) + 1]
    data = memoryview(col.buffers()[2])
    for i, n in enumerate(names):
        yield n, data[offs[i]:offs[i + 1]]


def _parse(P, parser, buf, name):
    if parser == "pajson":
        return P.parse_pajson(buf, name, b64="python")
    return P.parse_orjson(buf, name)


def make_parse_fn(parser, reader, logdir, messages=False):
    def fn(batches):
        import time as _t
        P = _setup_worker()
        log = open(os.path.join(logdir, "w%d.jsonl" % os.getpid()), "a")
        for batch in batches:
            for name, buf in _files_of(batch, reader):
                c0 = _t.process_time()
                ev, rej, tm = _parse(P, parser, buf, name)
                out = P.messages(ev) if messages else ev
                tm["total"] = _t.process_time() - c0
                log.write(json.dumps({"file": name, "rows": ev.num_rows, "rejects": rej,
                                      "cpu": tm, "kind": "messages" if messages else "events"}) + "\n")
                for b in out.to_batches():
                    yield b
        log.close()
    return fn


def make_write_fn(parser, reader, logdir, stage):
    def fn(batches):
        import time as _t

        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext
        P = _setup_worker()
        tc = TaskContext.get()
        tag = "t%05d-a%d" % (tc.partitionId(), tc.attemptNumber())
        log = open(os.path.join(logdir, "w%d.jsonl" % os.getpid()), "a")
        tables, meta = [], []
        c_parse = 0.0
        for batch in batches:
            for name, buf in _files_of(batch, reader):
                c0 = _t.process_time()
                ev, rej, tm = _parse(P, parser, buf, name)
                tm["total"] = _t.process_time() - c0
                c_parse += tm["total"]
                tables.append(ev)
                seq = ev["seq"]
                mm = pc.min_max(seq)
                meta.append([name, ev.num_rows, None, mm["min"].as_py(), mm["max"].as_py(),
                             json.dumps(rej)])
                log.write(json.dumps({"file": name, "rows": ev.num_rows, "rejects": rej,
                                      "cpu": tm, "kind": "pywrite"}) + "\n")
        c0 = _t.process_time()
        ev = pa.concat_tables(tables)
        P.write_table(ev, os.path.join(stage, "events"), ["stream"], tag, threads=False)
        c1 = _t.process_time()
        m = P.messages(ev)
        P.write_table(m, os.path.join(stage, "messages"), ["stream", "date"], tag, threads=False)
        c2 = _t.process_time()
        log.write(json.dumps({"kind": "write", "rows": ev.num_rows, "cpu": {
            "write_events": c1 - c0, "write_messages": c2 - c1}}) + "\n")
        log.close()
        for row in meta:
            row[2] = None
        cols = list(zip(*meta)) if meta else [[]] * 6
        yield pa.RecordBatch.from_arrays(
            [pa.array(cols[0], pa.string()), pa.array(cols[1], pa.int64()),
             pa.array([m.num_rows if i == 0 else 0 for i in range(len(meta))], pa.int64()),
             pa.array(cols[3], pa.int64()), pa.array(cols[4], pa.int64()),
             pa.array(cols[5], pa.string()),
             pa.array([c_parse] + [0.0] * (len(meta) - 1), pa.float64()),
             pa.array([c2 - c0] + [0.0] * (len(meta) - 1), pa.float64())],
            names=["file", "rows", "puts", "min_seq", "max_seq", "rejects", "cpu_parse",
                   "cpu_write"])
    return fn


# ------------------------------------------------------------------ driver

def session(args):
    from pyspark.sql import SparkSession
    b = SparkSession.builder.master("local[2]").appName("sparkpa-%s" % args.mode)
    conf = {
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4", "spark.driver.memory": "2g",
        "spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=file:%s %s" % (LOG4J, JIT_OPTIONS),
        "spark.sql.maxConcurrentOutputFileWriters": "64",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.files.maxPartitionBytes": args.split,
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": "file://" + args.evdir,
        "spark.eventLog.compress": "false",
        "spark.executorEnv.PYTHONPATH": HERE,
        "spark.python.worker.reuse": "true",
    }
    for kv in args.conf:
        k, v = kv.split("=", 1)
        conf[k] = v
    for k, v in conf.items():
        b = b.config(k, v)
    return b.getOrCreate()


def source(spark, reader, feed):
    from pyspark.sql import functions as F
    if reader == "text":
        df = spark.read.option("pathGlobFilter", "feed-*.jsonl").text(FEED, wholetext=True)
        return df.select(F.col("_metadata.file_path").alias("file"), "value")
    df = spark.read.format("binaryFile").option("pathGlobFilter", "feed-*.jsonl").load(feed)
    if reader == "binary":
        return df.select(F.col("path").alias("file"), F.col("content").alias("value"))
    return df.select(F.col("path").alias("file"))  # paths: content pruned


def run_once(spark, args, rep, meter):
    from pyspark.sql import functions as F
    out = os.path.join(args.out, "r%d" % rep)
    logdir = os.path.join(args.out, "logs%d" % rep)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(logdir, ignore_errors=True)
    os.makedirs(logdir)
    feed = os.path.join(FEED, "feed-*.jsonl") if args.reader == "text" else FEED
    reader = "paths" if args.mode == "paths" else args.reader
    res = {"rep": rep}
    meter.snap("rep%d begin" % rep)
    if args.mode in ("readback", "twice"):
        src = source(spark, args.reader, feed)
        ev = src.mapInArrow(make_parse_fn(args.parser, args.reader, logdir), EVENTS_DDL)
        ev.write.mode("overwrite").partitionBy("stream").parquet(os.path.join(out, "events"))
        meter.snap("events (read, parse in python, spark writes)")
        if args.mode == "readback":
            e = spark.read.parquet(os.path.join(out, "events")).where("op = 'put'")
            m = e.select("id", "stream_created", "seq", "subject", "headers", "data", "ts", "time",
                         "stream", F.expr("date_from_unix_date(cast(floor(ts / 86400000000000) AS int))")
                         .alias("date"))
        else:
            m = source(spark, args.reader, feed).mapInArrow(
                make_parse_fn(args.parser, args.reader, logdir, messages=True), MESSAGES_DDL)
        m.write.mode("overwrite").partitionBy("stream", "date").parquet(os.path.join(out, "messages"))
        meter.snap("messages")
    else:
        src = source(spark, args.reader if args.mode == "pywrite" else "paths", feed)
        stage = os.path.join(out, "staging")
        rows = src.mapInArrow(make_write_fn(args.parser, reader, logdir, stage), META_DDL).collect()
        meter.snap("parse+write in python")
        res["files"] = len(rows)
        res["rows"] = sum(r.rows for r in rows)
        res["puts"] = sum(r.puts for r in rows)
        res["task_py_cpu_parse"] = round(sum(r.cpu_parse for r in rows), 1)
        res["task_py_cpu_write"] = round(sum(r.cpu_write for r in rows), 1)
    # worker logs: per-step python CPU, rejects
    agg, rejects, nrows = {}, [], 0
    for f in glob.glob(os.path.join(logdir, "*.jsonl")):
        for line in open(f):
            d = json.loads(line)
            for k, v in d["cpu"].items():
                key = d["kind"] + ":" + k
                agg[key] = agg.get(key, 0) + v
            if d["kind"] in ("events", "pywrite"):
                nrows += d["rows"]
                rejects += [(os.path.basename(d["file"]), l, e) for l, e in d["rejects"]]
    res["worker_cpu_by_step"] = {k: round(v, 2) for k, v in sorted(agg.items())}
    res["rows_parsed"] = nrows
    res["rejects"] = rejects
    if args.check:
        res["check_events"] = spark.read.parquet(os.path.join(out, "events" if args.mode in ("readback", "twice") else "staging/events")).count()
        res["check_messages"] = spark.read.parquet(os.path.join(out, "messages" if args.mode in ("readback", "twice") else "staging/messages")).count()
        meter.snap("check (not counted)")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="readback")
    ap.add_argument("--reader", default="text")
    ap.add_argument("--parser", default="pajson")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--split", default="32m")
    ap.add_argument("--out", default="/tmp/ingest-pyarrow/out/b2")
    ap.add_argument("--evdir", default="/tmp/ingest-pyarrow/ev")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--conf", action="append", default=[])
    args = ap.parse_args()
    os.environ["PYTHONPATH"] = HERE
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.makedirs(args.evdir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    load()
    w0 = time.time()
    spark = session(args)
    jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    meter = Meter(jvm)
    meter.rows[0] = ("start", w0, 0.0, 0.0, 0.0)
    meter.snap("session start")
    spark.sparkContext.setLogLevel("ERROR")
    for rep in range(args.repeat):
        lb = load()
        r0 = len(meter.rows) - 1
        res = run_once(spark, args, rep, meter)
        steps = meter.steps()
        mine = [s for s in steps[r0:] if not s["step"].startswith("check")]
        wall = sum(s["wall"] for s in mine)
        res.update({"approach": 3 if args.mode in ("pywrite", "paths") else 2, "mode": args.mode,
                    "reader": args.reader, "parser": args.parser,
                    "wall_excl_session_start": round(wall, 2),
                    "jvm_cpu": round(sum(s["jvm_cpu"] for s in mine), 1),
                    "py_worker_cpu": round(sum(s["py_worker_cpu"] for s in mine), 1),
                    "rec_per_s": round(999999 / wall), "load_before": lb, "load_after": load(),
                    "steps": steps[r0:]})
        if rep == 0:
            res["session_start"] = steps[0]
        res["jvm_threads_cumulative"] = jvm_threads(jvm)
        res["app_id"] = spark.sparkContext.applicationId
        print(json.dumps(res), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
