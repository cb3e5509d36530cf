"""The derived tables (KV state, object catalog) computed in the driver with pyarrow.

The same rules and columns as spark/derive.py (read its docstring for what
survives a delete or a purge); tests/test_spark_ingest.py compares the two
on the same ``events``. Spark runs about twenty small jobs for the two
tables, and on a 1M-record backfill those cost 21.6 s of wall time with a
cold JVM, nearly all of it fixed costs (planning, code generation, the JIT);
the KV and object streams are a small part of a feed, so the ingest computes
them here when their events are few (:data:`MAX_ROWS`) and in Spark
otherwise.
"""

import os
import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

# Above this many KV_ (or OBJ_) event rows the table is derived in Spark.
MAX_ROWS = 5_000_000

_TIME = pa.timestamp("us", tz="UTC")
KV_SCHEMA = pa.schema([
    ("bucket", pa.string()), ("key", pa.string()), ("value", pa.binary()),
    ("revision", pa.int64()), ("ts", pa.int64()), ("time", _TIME), ("stream", pa.string()),
    ("stream_created", pa.int64()), ("seq", pa.int64()),
])
OBJECTS_SCHEMA = pa.schema([
    ("bucket", pa.string()), ("object", pa.string()), ("nuid", pa.string()),
    ("size", pa.int64()), ("digest", pa.string()), ("deleted", pa.bool_()),
    ("chunks", pa.int64()), ("chunk_bytes", pa.int64()), ("revision", pa.int64()),
    ("ts", pa.int64()), ("time", _TIME), ("meta", pa.string()), ("stream", pa.string()),
    ("stream_created", pa.int64()),
])
_COLUMNS = ["stream", "stream_created", "seq", "op", "ts", "subject", "data", "purge", "kv",
            "obj", "file", "line"]


def read_events(path, prefix):
    """The ``events`` rows of the streams named ``prefix``*, or None when
    there are more than MAX_ROWS of them."""
    try:
        parts = [n for n in os.listdir(path) if n.startswith("stream=" + prefix)]
    except FileNotFoundError:
        parts = []
    if not parts:
        return pa.table({c: [] for c in _COLUMNS})
    dset = ds.dataset(path, format="parquet", partitioning=ds.partitioning(
        pa.schema([("stream", pa.string())]), flavor="hive"))
    # the partition directories are Spark-escaped; compare the unescaped value
    scan = dset.scanner(columns=_COLUMNS, filter=pc.starts_with(ds.field("stream"), prefix))
    if scan.count_rows() > MAX_ROWS:
        return None
    return scan.to_table()


def _rows(table):
    cols = {c: table[c].to_pylist() for c in table.column_names}
    return [dict(zip(cols, vals)) for vals in zip(*cols.values())]


def _filter_regex(f):
    """A NATS subject filter -> an anchored regex (``*`` one token, ``>`` the rest)."""
    tokens = f.split(".")
    out = []
    for i, t in enumerate(tokens):
        if t == "*":
            out.append("[^.]+")
        elif t == ">" and i == len(tokens) - 1:
            out.append(".+")
        else:
            out.append(re.escape(t))
    return re.compile(r"\.".join(out) + r"\Z", re.S)


def surviving_puts(rows):
    """``put`` rows of current incarnations whose message still exists."""
    latest, dropped = {}, set()
    for r in rows:
        s, c = r["stream"], r["stream_created"]
        if c is not None and (s not in latest or c > latest[s]):
            latest[s] = c
        if r["op"] == "stream_delete":
            dropped.add((s, c))
    current = {(s, c) for s, c in latest.items() if (s, c) not in dropped}
    ev = [r for r in rows if (r["stream"], r["stream_created"]) in current]
    deleted = {(r["stream"], r["stream_created"], r["seq"]) for r in ev if r["op"] == "delete"}
    alive = [r for r in ev if r["op"] == "put"
             and (r["stream"], r["stream_created"], r["seq"]) not in deleted]
    # per incarnation, newest first (a purge's keep counts from the newest)
    by_inc, by_subject = {}, {}
    for r in sorted(alive, key=lambda r: r["seq"], reverse=True):
        inc = (r["stream"], r["stream_created"])
        by_inc.setdefault(inc, []).append(r)
        by_subject.setdefault(inc + (r["subject"],), []).append(r)
    removed = set()
    for p in ev:
        if p["op"] != "purge":
            continue
        inc = (p["stream"], p["stream_created"])
        spec = p["purge"] or {}
        f, upto, keep = spec.get("filter"), spec.get("upto_seq"), spec.get("keep") or 0
        if f and "*" not in f and ">" not in f:
            cands = by_subject.get(inc + (f,), ())
            match = None
        else:
            cands = by_inc.get(inc, ())
            match = _filter_regex(f).match if f else None
        rank = 0
        for m in cands:
            if m["seq"] > p["seq"] or (upto is not None and m["seq"] >= upto):
                continue
            if match is not None and (m["subject"] is None or not match(m["subject"])):
                continue
            rank += 1
            if rank > keep:
                removed.add((m["stream"], m["stream_created"], m["seq"]))
    return [r for r in alive if (r["stream"], r["stream_created"], r["seq"]) not in removed]


def _time(ts):
    """Microseconds for timestamp_micros(ts div 1000): div truncates towards zero."""
    if ts is None:
        return None
    return ts // 1000 if ts >= 0 else -(-ts // 1000)


def kv_state(events):
    """``events`` rows of KV_ streams -> the kv table."""
    newest = {}
    for r in surviving_puts(_rows(events)):
        kv = r["kv"]
        if kv is None or kv["key"] is None:
            continue
        bucket = kv["bucket"] if kv["bucket"] is not None else r["stream"][3:]
        rev = kv["revision"]
        rank = (rev is not None, rev if rev is not None else 0, r["file"], r["line"])
        k = (bucket, kv["key"])
        if k not in newest or rank > newest[k][0]:
            newest[k] = (rank, bucket, r)
    out = []
    for (bucket, key), (_, _, r) in sorted(newest.items()):
        op = r["kv"]["operation"]
        if op is None or op.upper() != "PUT":
            continue
        rev = r["kv"]["revision"]
        out.append({"bucket": bucket, "key": key, "value": r["data"],
                    "revision": rev if rev is not None else r["seq"], "ts": r["ts"],
                    "time": _time(r["ts"]), "stream": r["stream"],
                    "stream_created": r["stream_created"], "seq": r["seq"]})
    return _table(out, KV_SCHEMA)


def object_catalog(events):
    """``events`` rows of OBJ_ streams -> the objects table."""
    newest, chunks = {}, {}
    for r in surviving_puts(_rows(events)):
        o = r["obj"]
        if o is None:
            continue
        bucket = o["bucket"] if o["bucket"] is not None else r["stream"][4:]
        if o["event"] in ("put", "delete") and o["object"] is not None:
            k = (bucket, o["object"])
            rank = (r["seq"], r["file"], r["line"])
            if k not in newest or rank > newest[k][0]:
                newest[k] = (rank, r)
        elif o["event"] == "chunk":
            n, size = chunks.get((bucket, o["nuid"]), (0, None))
            if o["size"] is not None:
                size = o["size"] if size is None else size + o["size"]
            chunks[(bucket, o["nuid"])] = (n + 1, size)
    out = []
    for (bucket, name), (_, r) in sorted(newest.items()):
        o = r["obj"]
        n, size = chunks.get((bucket, o["nuid"]), (0, None)) if o["nuid"] is not None \
            else (0, None)
        data = r["data"]
        out.append({"bucket": bucket, "object": name, "nuid": o["nuid"], "size": o["size"],
                    "digest": o["digest"], "deleted": o["event"] == "delete", "chunks": n,
                    "chunk_bytes": size or 0, "revision": r["seq"], "ts": r["ts"],
                    "time": _time(r["ts"]),
                    "meta": None if data is None else data.decode("utf-8", "replace"),
                    "stream": r["stream"], "stream_created": r["stream_created"]})
    return _table(out, OBJECTS_SCHEMA)


def _table(rows, schema):
    return pa.Table.from_pylist(rows, schema=schema)
