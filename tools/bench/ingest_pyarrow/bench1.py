"""Approach 1: pure pyarrow (+orjson), no Spark. Usage:
   bench1.py --parser pajson|orjson|orjson-noval --b64 numpy|python --procs 1|2 --out DIR
Prints one JSON line with per-step CPU s (process_time, all threads of the process) and wall s."""

import argparse
import glob
import json
import multiprocessing as mp
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The feed: a directory of feed-*.jsonl (python -m tools.bench.ingest keeps one).
FEED = os.environ.get("INGEST_FEED", "/tmp/ingbench/feed1m")


def load(): return open("/proc/loadavg").read().split()[:3]


def work(args):
    files, opt, tag = args
    import pafeed as P
    import pyarrow as pa
    if opt["procs"] > 1:
        pa.set_cpu_count(1)
        pa.set_io_thread_count(1)
        P.USE_THREADS = False
    cpu = {}; wall = {}
    def step(name, c0, w0):
        cpu[name] = cpu.get(name, 0) + time.process_time() - c0
        wall[name] = wall.get(name, 0) + time.time() - w0
    tables, rejects = [], []
    for f in files:
        c0, w0 = time.process_time(), time.time()
        with open(f, "rb") as fh:
            buf = fh.read()
        step("read", c0, w0)
        c0, w0 = time.process_time(), time.time()
        name = "file://" + f
        if opt["parser"] == "pajson":
            ev, rej, tm = P.parse_pajson(buf, name, b64=opt["b64"])
        else:
            ev, rej, tm = P.parse_orjson(buf, name, validate=opt["parser"] == "orjson")
        step("parse_all", c0, w0)
        for k, v in tm.items():
            cpu["  " + k] = cpu.get("  " + k, 0) + v
        tables.append(ev)
        rejects += [(os.path.basename(f), l, e) for l, e in rej]
    c0, w0 = time.process_time(), time.time()
    ev = pa.concat_tables(tables)
    step("concat", c0, w0)
    if opt.get("dedup"):
        c0, w0 = time.process_time(), time.time()
        idx = pa.table({"id": ev["id"], "i": pa.array(range(ev.num_rows), pa.int64())})
        first = idx.group_by("id", use_threads=False).aggregate([("i", "min")])
        step("dedup(group_by id)", c0, w0)
        cpu["dups"] = ev.num_rows - first.num_rows
    c0, w0 = time.process_time(), time.time()
    P.write_table(ev, os.path.join(opt["out"], "events"), ["stream"], tag,
                  dict_cols=opt.get("dict"), threads=opt["procs"] == 1)
    step("write_events", c0, w0)
    c0, w0 = time.process_time(), time.time()
    m = P.messages(ev)
    step("messages_select", c0, w0)
    c0, w0 = time.process_time(), time.time()
    P.write_table(m, os.path.join(opt["out"], "messages"), ["stream", "date"], tag,
                  dict_cols=opt.get("dict"), threads=opt["procs"] == 1)
    step("write_messages", c0, w0)
    return {"rows": ev.num_rows, "puts": m.num_rows, "rejects": rejects, "cpu": cpu, "wall": wall,
            "total_cpu": time.process_time()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parser", default="pajson")
    ap.add_argument("--b64", default="numpy")
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--out", default="/tmp/ingest-pyarrow/out/b1")
    ap.add_argument("--dedup", action="store_true")
    ap.add_argument("--dict", default=None, help="comma list of dictionary-encoded columns")
    a = ap.parse_args()
    shutil.rmtree(a.out, ignore_errors=True)
    files = sorted(glob.glob(FEED + "/feed-*.jsonl"))
    opt = {"parser": a.parser, "b64": a.b64, "procs": a.procs, "out": a.out, "dedup": a.dedup,
           "dict": a.dict.split(",") if a.dict else None}
    l0 = load()
    w0 = time.time()
    c0 = time.process_time()
    if a.procs == 1:
        res = [work((files, opt, "p0"))]
        child = 0.0
    else:
        chunks = [files[i::a.procs] for i in range(a.procs)]
        with mp.get_context("fork").Pool(a.procs) as pool:
            res = pool.map(work, [(c, opt, "p%d" % i) for i, c in enumerate(chunks)])
        child = sum(r["total_cpu"] for r in res)
    wall = time.time() - w0
    cpu_parent = time.process_time() - c0
    out = {"approach": 1, "parser": a.parser, "b64": a.b64, "procs": a.procs, "dict": a.dict,
           "wall": round(wall, 2), "cpu_total": round(cpu_parent + child, 2),
           "rows": sum(r["rows"] for r in res), "puts": sum(r["puts"] for r in res),
           "rec_per_s": round(sum(r["rows"] for r in res) / wall),
           "rejects": [x for r in res for x in r["rejects"]],
           "load_before": l0, "load_after": load(),
           "per_proc": [{"cpu": {k: round(v, 2) for k, v in r["cpu"].items()},
                         "wall": {k: round(v, 2) for k, v in r["wall"].items()}} for r in res]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
