"""Parse-only benchmark of the change-feed ingest: task CPU of split_lines + parse.

    python -m tools.bench.ingest_parse --feed DIR [--master local[2]]
        [--module LABEL=PATH ...] [--order LABEL,LABEL,...]

Runs ``records.parse(records.split_lines(...))`` over the feed files, read as
the ingest reads them (the text source in ``wholetext`` mode, the file name
from ``_metadata``), into Spark's ``noop`` sink, so nothing is written and
only the parse is measured. ``--module`` names a copy of spark/records.py to
compare (default: the working tree's, labelled ``cur``); ``--order`` is the
sequence of runs in this one session, e.g. ``old,new,old,new`` (the first run
is cold: JIT warm-up included). Reported per run: wall seconds, the tasks'
CPU and run time (Spark's task metrics from the event log, grouped by job
group), and the CPU of the JIT compiler threads and of the whole JVM (/proc).

Nothing here is asserted by the tests; the numbers go to spark/README.md.
"""

import argparse
import collections
import glob
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def thread_cpu(pid):
    """CPU seconds of the JVM's JIT compiler threads and of the whole JVM."""
    tick = os.sysconf("SC_CLK_TCK")
    jit = 0.0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                name = f.read()
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                st = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if name.startswith(("C1 ", "C2 ")):
            jit += (int(st[11]) + int(st[12])) / tick
    with open("/proc/%d/stat" % pid) as f:
        st = f.read().rsplit(")", 1)[1].split()
    return jit, (int(st[11]) + int(st[12])) / tick


def task_metrics(eventlog_dir):
    """job group -> [task CPU s, task run s, tasks] from the event log."""
    stage_group, out = {}, collections.defaultdict(lambda: [0.0, 0.0, 0])
    paths = [p for p in glob.glob(os.path.join(eventlog_dir, "**"), recursive=True)
             if os.path.isfile(p) and not os.path.basename(p).startswith(("appstatus", "."))]
    for path in sorted(paths):
        with open(path) as f:
            for line in f:
                e = json.loads(line)
                if e["Event"] == "SparkListenerJobStart":
                    group = (e.get("Properties") or {}).get("spark.jobGroup.id")
                    for s in e["Stage IDs"]:
                        stage_group[s] = group
                elif e["Event"] == "SparkListenerTaskEnd":
                    m = e.get("Task Metrics") or {}
                    g = out[stage_group.get(e["Stage ID"])]
                    g[0] += m.get("Executor CPU Time", 0) / 1e9
                    g[1] += m.get("Executor Run Time", 0) / 1e3
                    g[2] += 1
    return out


def load_module(label, path):
    spec = importlib.util.spec_from_file_location("records_" + label, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tools.bench.ingest_parse",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--feed", required=True, help="a feed directory (feed-*.jsonl)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--module", action="append", default=[], metavar="LABEL=PATH",
                   help="a records.py to measure (repeatable; default cur=spark/records.py)")
    p.add_argument("--order", help="comma-separated labels, one run each (default: each once)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args(argv)
    sys.path.insert(0, ROOT)
    from pyspark.sql import functions as F

    from natsbroker.spark.session import build_session

    mods = dict(m.split("=", 1) for m in args.module) or {
        "cur": os.path.join(ROOT, "spark", "records.py")}
    mods = {label: load_module(label, path) for label, path in mods.items()}
    order = args.order.split(",") if args.order else list(mods)
    evdir = tempfile.mkdtemp(prefix="ingest-parse-eventlog-")
    conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": "file://" + evdir,
            "spark.eventLog.compress": "false"}
    conf.update(kv.split("=", 1) for kv in args.conf)
    spark = build_session(args.master, app="natsbroker-bench-ingest-parse", conf=conf)
    spark.range(1).count()
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    feed = os.path.abspath(args.feed)
    runs = []
    try:
        for i, label in enumerate(order):
            mod = mods[label]
            group = "run%d" % i
            spark.sparkContext.setJobGroup(group, label)
            load0 = os.getloadavg()[0]
            jit0, cpu0 = thread_cpu(pid)
            t = time.time()
            files = spark.read.format("text").option("wholetext", "true") \
                .option("pathGlobFilter", "feed-*.jsonl").load(feed) \
                .select(F.col("_metadata.file_name").alias("file"), F.col("value"))
            mod.parse(mod.split_lines(files, F.col("file"))) \
                .write.format("noop").mode("overwrite").save()
            wall = time.time() - t
            jit1, cpu1 = thread_cpu(pid)
            runs.append(dict(run=i, label=label, group=group, wall=round(wall, 2),
                             jit_cpu=round(jit1 - jit0, 1), jvm_cpu=round(cpu1 - cpu0, 1),
                             load_before=round(load0, 2), load_after=round(os.getloadavg()[0], 2)))
            print("run %d %-8s wall %6.1fs  JVM CPU %6.1fs  JIT CPU %5.1fs  load %.2f -> %.2f"
                  % (i, label, wall, cpu1 - cpu0, jit1 - jit0, load0, runs[-1]["load_after"]),
                  flush=True)
    finally:
        spark.stop()
    metrics = task_metrics(evdir)
    shutil.rmtree(evdir, ignore_errors=True)
    print("%-4s %-8s %8s %10s %10s %8s %8s %6s" % ("run", "module", "wall s", "task CPU s",
                                                   "task run s", "JIT s", "JVM s", "tasks"))
    for r in runs:
        cpu, run, n = metrics.get(r["group"], (0.0, 0.0, 0))
        r.update(task_cpu=round(cpu, 1), task_run=round(run, 1), tasks=n)
        print("%-4d %-8s %8.1f %10.1f %10.1f %8.1f %8.1f %6d"
              % (r["run"], r["label"], r["wall"], cpu, run, r["jit_cpu"], r["jvm_cpu"], n))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
