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


def _columns(table, struct_fields=()):
    """Python lists of the columns the rules need (``data`` is left in Arrow
    until the few rows that are kept), struct members flattened as
    ``struct.member``."""
    cols = {c: table[c].to_pylist()
            for c in ("stream", "stream_created", "seq", "op", "ts", "subject", "file", "line")}
    for struct, members in struct_fields:
        arr = table[struct].combine_chunks()
        cols[struct] = arr.is_valid().to_pylist()
        for m in members:
            cols["%s.%s" % (struct, m)] = pc.struct_field(arr, m).to_pylist() \
                if len(arr) else []
    return cols


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


def surviving_puts(c):
    """Indices of the ``put`` rows of current incarnations whose message
    still exists (``c``: the columns of :func:`_columns`)."""
    stream, created, seq, op, subject = (c["stream"], c["stream_created"], c["seq"], c["op"],
                                         c["subject"])
    n = len(stream)
    latest, dropped = {}, set()
    for i in range(n):
        s, cr = stream[i], created[i]
        if cr is not None and (s not in latest or cr > latest[s]):
            latest[s] = cr
        if op[i] == "stream_delete":
            dropped.add((s, cr))
    current = {(s, cr) for s, cr in latest.items() if (s, cr) not in dropped}
    ev = [i for i in range(n) if (stream[i], created[i]) in current]
    deleted = {(stream[i], created[i], seq[i]) for i in ev if op[i] == "delete"}
    alive = [i for i in ev if op[i] == "put" and (stream[i], created[i], seq[i]) not in deleted]
    # per incarnation, newest first (a purge's keep counts from the newest)
    by_inc, by_subject = {}, {}
    for i in sorted(alive, key=seq.__getitem__, reverse=True):
        inc = (stream[i], created[i])
        by_inc.setdefault(inc, []).append(i)
        by_subject.setdefault(inc + (subject[i],), []).append(i)
    removed = set()
    for p in ev:
        if op[p] != "purge":
            continue
        inc = (stream[p], created[p])
        f, upto = c["purge.filter"][p], c["purge.upto_seq"][p]
        keep = c["purge.keep"][p] or 0
        if f and "*" not in f and ">" not in f:
            cands = by_subject.get(inc + (f,), ())
            match = None
        else:
            cands = by_inc.get(inc, ())
            match = _filter_regex(f).match if f else None
        rank = 0
        for m in cands:
            if seq[m] > seq[p] or (upto is not None and seq[m] >= upto):
                continue
            if match is not None and (subject[m] is None or not match(subject[m])):
                continue
            rank += 1
            if rank > keep:
                removed.add(m)
    return [i for i in alive if i not in removed]


def _time(ts):
    """Microseconds for timestamp_micros(ts div 1000): div truncates towards zero."""
    if ts is None:
        return None
    return ts // 1000 if ts >= 0 else -(-ts // 1000)


_PURGE = ("purge", ("filter", "upto_seq", "keep"))


def kv_state(events):
    """``events`` rows of KV_ streams -> the kv table."""
    c = _columns(events, [_PURGE, ("kv", ("bucket", "key", "operation", "revision"))])
    stream, key, bucket, rev = c["stream"], c["kv.key"], c["kv.bucket"], c["kv.revision"]
    newest = {}
    for i in surviving_puts(c):
        if key[i] is None:  # also: no kv object at all
            continue
        b = bucket[i] if bucket[i] is not None else stream[i][3:]
        rank = (rev[i] is not None, rev[i] if rev[i] is not None else 0, c["file"][i], c["line"][i])
        k = (b, key[i])
        if k not in newest or rank > newest[k][0]:
            newest[k] = (rank, i)
    out, rows = [], []
    for (b, k), (_, i) in sorted(newest.items()):
        op = c["kv.operation"][i]
        if op is None or op.upper() != "PUT":
            continue
        rows.append(i)
        out.append({"bucket": b, "key": k,
                    "revision": rev[i] if rev[i] is not None else c["seq"][i], "ts": c["ts"][i],
                    "time": _time(c["ts"][i]), "stream": stream[i],
                    "stream_created": c["stream_created"][i], "seq": c["seq"][i]})
    values = events["data"].take(pa.array(rows, pa.int64())).to_pylist() if rows else []
    for row, v in zip(out, values):
        row["value"] = v
    return _table(out, KV_SCHEMA)


def object_catalog(events):
    """``events`` rows of OBJ_ streams -> the objects table."""
    c = _columns(events, [_PURGE, ("obj", ("bucket", "object", "event", "nuid", "size",
                                           "digest"))])
    stream, bucket, event, name = c["stream"], c["obj.bucket"], c["obj.event"], c["obj.object"]
    nuid, size = c["obj.nuid"], c["obj.size"]
    newest, chunks = {}, {}
    for i in surviving_puts(c):
        if not c["obj"][i]:
            continue  # not an object-store record
        b = bucket[i] if bucket[i] is not None else stream[i][4:]
        if event[i] in ("put", "delete") and name[i] is not None:
            k = (b, name[i])
            rank = (c["seq"][i], c["file"][i], c["line"][i])
            if k not in newest or rank > newest[k][0]:
                newest[k] = (rank, i)
        elif event[i] == "chunk":
            count, total = chunks.get((b, nuid[i]), (0, None))
            if size[i] is not None:
                total = size[i] if total is None else total + size[i]
            chunks[(b, nuid[i])] = (count + 1, total)
    out, rows = [], []
    for (b, obj), (_, i) in sorted(newest.items()):
        count, total = chunks.get((b, nuid[i]), (0, None)) if nuid[i] is not None else (0, None)
        rows.append(i)
        out.append({"bucket": b, "object": obj, "nuid": nuid[i], "size": size[i],
                    "digest": c["obj.digest"][i], "deleted": event[i] == "delete",
                    "chunks": count, "chunk_bytes": total or 0, "revision": c["seq"][i],
                    "ts": c["ts"][i], "time": _time(c["ts"][i]), "stream": stream[i],
                    "stream_created": c["stream_created"][i]})
    metas = events["data"].take(pa.array(rows, pa.int64())).to_pylist() if rows else []
    for row, data in zip(out, metas):
        row["meta"] = None if data is None else data.decode("utf-8", "replace")
    return _table(out, OBJECTS_SCHEMA)


def _table(rows, schema):
    return pa.Table.from_pylist(rows, schema=schema)
