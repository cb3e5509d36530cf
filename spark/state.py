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

import functools
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from natsbroker.spark.fileparse import EVENTS
from natsbroker.spark.stage import dictionary_codes

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
        return EVENTS.empty_table().select(_COLUMNS)
    dset = ds.dataset(path, format="parquet", partitioning=ds.partitioning(
        pa.schema([("stream", pa.string())]), flavor="hive"))
    # the partition directories are Spark-escaped; compare the unescaped value
    scan = dset.scanner(columns=_COLUMNS, filter=pc.starts_with(ds.field("stream"), prefix))
    if scan.count_rows() > MAX_ROWS:
        return None
    return scan.to_table()


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


def _codes(col):
    """A string column -> (int64 numpy codes, the dictionary as a list);
    a null is a value of its own (None in the list)."""
    codes, dictionary = dictionary_codes(col)
    return codes, dictionary.to_pylist()


def _ints(col):
    """An integer column -> (int64 numpy values with 0 for null, validity)."""
    a = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return (pc.fill_null(a, 0).to_numpy(zero_copy_only=False).astype(np.int64),
            a.is_valid().to_numpy(zero_copy_only=False))


def _is(col, value):
    return pc.fill_null(pc.equal(col, value), False).to_numpy(zero_copy_only=False)


def _np(col):
    a = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return a.to_numpy(zero_copy_only=False)


def surviving_puts(t):
    """Indices (ascending) of the ``put`` rows of ``t`` (events) of current
    incarnations whose message still exists. Vectorized but for a loop over
    the purges; each purge's candidates are its stream's surviving puts,
    newest first."""
    n = t.num_rows
    if n == 0:
        return np.zeros(0, np.int64)
    sc, streams = _codes(t["stream"])
    ns = len(streams)
    created, cvalid = _ints(t["stream_created"])
    seq, _ = _ints(t["seq"])  # required: never null
    op = t["op"]
    # a stream's current incarnation: its largest stream_created, unless a
    # stream_delete names that one
    latest = np.full(ns, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(latest, sc[cvalid], created[cvalid])
    at_latest = cvalid & (created == latest[sc])
    gone = np.zeros(ns, bool)
    gone[sc[at_latest & _is(op, "stream_delete")]] = True
    ev = at_latest & ~gone[sc]
    # only the current incarnation of a stream is left: (stream, seq) names a message
    puts = np.flatnonzero(ev & _is(op, "put"))
    dels = ev & _is(op, "delete")
    if dels.any() and len(puts):
        kept = pa.table({"s": sc[puts], "q": seq[puts], "i": puts}).join(
            pa.table({"s": sc[dels], "q": seq[dels]}), ["s", "q"], join_type="left anti",
            use_threads=False)
        puts = np.sort(_np(kept["i"]).astype(np.int64))
    purges = np.flatnonzero(ev & _is(op, "purge"))
    if not len(purges) or not len(puts):
        return puts
    # the surviving puts by stream, newest first, ties in feed order
    by = puts[np.lexsort((puts, ~seq[puts], sc[puts]))]
    by_sc = sc[by]
    subj, subjects = _codes(t["subject"])
    index = {v: i for i, v in enumerate(subjects) if v is not None}
    purge = t["purge"].take(pa.array(purges))
    filters = pc.struct_field(purge, "filter").to_pylist()
    uptos = pc.struct_field(purge, "upto_seq").to_pylist()
    keeps = pc.struct_field(purge, "keep").to_pylist()
    removed = np.zeros(n, bool)
    for p, f, upto, keep in zip(purges.tolist(), filters, uptos, keeps):
        lo, hi = np.searchsorted(by_sc, sc[p]), np.searchsorted(by_sc, sc[p], "right")
        rows = by[lo:hi]
        m = seq[rows] <= seq[p]
        if upto is not None:
            m &= seq[rows] < upto
        if f:
            if "*" not in f and ">" not in f:
                m &= subj[rows] == index.get(f, -1)
            else:
                rows = rows[m]
                codes, inverse = np.unique(subj[rows], return_inverse=True)
                match = _filter_regex(f).match
                m = np.array([subjects[c] is not None and match(subjects[c]) is not None
                              for c in codes.tolist()], bool)[inverse]
        hit = rows[m]
        removed[hit[max(keep or 0, 0):]] = True  # all but the newest ``keep``
    return puts[~removed[puts]]


def _time(ts):
    """timestamp_micros(ts div 1000): div truncates towards zero, as Arrow's."""
    return pc.divide(ts, 1000).cast(pa.int64()).cast(_TIME)


def _newest(table, group, order):
    """Row positions in ``table`` of the first row of each ``group`` (string
    columns) after sorting by ``group`` ascending, then ``order`` (sort keys);
    in ``group`` order."""
    if table.num_rows == 0:
        return np.zeros(0, np.int64)
    t = table.append_column("_i", pa.array(np.arange(table.num_rows)))
    t = t.sort_by([(g, "ascending") for g in group] + list(order))
    first = np.ones(t.num_rows, bool)
    if t.num_rows > 1:
        same = np.ones(t.num_rows - 1, bool)
        for g in group:
            a = t[g].combine_chunks()
            same &= pc.fill_null(pc.equal(a[1:], a[:-1]), False).to_numpy(zero_copy_only=False)
        first[1:] = ~same
    return _np(t["_i"])[first]


def kv_state(events):
    """``events`` rows of KV_ streams -> the kv table."""
    rows = surviving_puts(events)
    t = events.select(["stream", "stream_created", "seq", "ts", "kv", "file", "line", "data"]) \
        .take(pa.array(rows, pa.int64()))
    kv = t["kv"]
    key = pc.struct_field(kv, "key")  # null where kv is
    t = t.filter(pc.is_valid(key))
    kv = t["kv"]
    rev = pc.struct_field(kv, "revision")
    c = pa.table({
        "bucket": pc.coalesce(pc.struct_field(kv, "bucket"),
                              pc.utf8_slice_codeunits(t["stream"], 3)),
        "key": pc.struct_field(kv, "key"), "has_rev": pc.is_valid(rev),
        "rev": pc.fill_null(rev, 0), "file": t["file"], "line": t["line"]})
    # the newest record of a key: by revision (a record without one below
    # those with one), then feed order
    pick = _newest(c, ["bucket", "key"], [("has_rev", "descending"), ("rev", "descending"),
                                          ("file", "descending"), ("line", "descending")])
    c, t = c.take(pa.array(pick)), t.take(pa.array(pick))
    put = pc.fill_null(pc.equal(pc.utf8_upper(pc.struct_field(t["kv"], "operation")), "PUT"),
                       False)
    c, t = c.filter(put), t.filter(put)
    return pa.table([c["bucket"], c["key"], t["data"],
                     pc.coalesce(pc.struct_field(t["kv"], "revision"), t["seq"]), t["ts"],
                     _time(t["ts"]), t["stream"], t["stream_created"], t["seq"]],
                    schema=KV_SCHEMA)


def _text(data):
    """``cast(data AS string)``: invalid UTF-8 replaced (U+FFFD), not refused."""
    try:
        return data.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if d is None else d.decode("utf-8", "replace")
                         for d in data.to_pylist()], pa.string())


def object_catalog(events):
    """``events`` rows of OBJ_ streams -> the objects table."""
    rows = surviving_puts(events)
    t = events.select(["stream", "stream_created", "seq", "ts", "obj", "file", "line", "data"]) \
        .take(pa.array(rows, pa.int64()))
    t = t.filter(pc.is_valid(t["obj"]))  # an object-store record
    obj = t["obj"]
    field = functools.partial(pc.struct_field, obj)
    c = pa.table({
        "bucket": pc.coalesce(field("bucket"), pc.utf8_slice_codeunits(t["stream"], 4)),
        "object": field("object"), "event": field("event"), "nuid": field("nuid"),
        "size": field("size"), "digest": field("digest"), "seq": t["seq"], "file": t["file"],
        "line": t["line"], "ts": t["ts"], "stream": t["stream"],
        "stream_created": t["stream_created"], "data": t["data"]})
    is_meta = pc.and_(pc.is_in(c["event"], value_set=pa.array(["put", "delete"])),
                      pc.is_valid(c["object"]))
    metas = c.filter(pc.fill_null(is_meta, False))
    metas = metas.take(pa.array(_newest(metas, ["bucket", "object"], [
        ("seq", "descending"), ("file", "descending"), ("line", "descending")])))
    chunks = c.filter(pc.fill_null(pc.equal(c["event"], "chunk"), False)) \
        .select(["bucket", "nuid", "size"]) \
        .group_by(["bucket", "nuid"], use_threads=False) \
        .aggregate([("size", "sum"), ([], "count_all")])
    # a meta without nuid has no chunks (a null key joins nothing)
    m = metas.join(chunks, ["bucket", "nuid"], join_type="left outer", use_threads=False) \
        .sort_by([("bucket", "ascending"), ("object", "ascending")])
    return pa.table([
        m["bucket"], m["object"], m["nuid"], m["size"], m["digest"],
        pc.equal(m["event"], "delete"), pc.fill_null(m["count_all"], 0).cast(pa.int64()),
        pc.fill_null(m["size_sum"], 0).cast(pa.int64()), m["seq"], m["ts"], _time(m["ts"]),
        _text(m["data"].combine_chunks()), m["stream"], m["stream_created"]],
        schema=OBJECTS_SCHEMA)
