"""The Spark ingest of the change feed (spark/): exact tables, exactly-once.

One local[2] SparkSession for the whole module; synthetic feed files written
the way the broker writes them (spark/feedgen.py). The kill test runs
``python -m natsbroker.spark.ingest`` in continuous mode as a subprocess, SIGKILLs it
mid-run and checks that a second run leaves every table exact.
"""

import copy
import datetime
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("pyspark")

from natsbroker.spark import feedgen as g  # noqa: E402
from natsbroker.spark.commit import Committer  # noqa: E402
from natsbroker.spark.ingest import Ingest  # noqa: E402
from tools.proctree import descendants, stat  # noqa: E402

pytestmark = [pytest.mark.timeout(600), pytest.mark.long]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEC = 10 ** 9
C = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z
MIDNIGHT = 1_700_006_400_000_000_000  # 2023-11-15T00:00:00Z
C2 = C + 500 * SEC
DAY1, DAY2 = datetime.date(2023, 11, 14), datetime.date(2023, 11, 15)

# Small, quiet and quick on two cores; C1-only JIT starts the JVM faster and
# the data here is tiny.
TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
}


@pytest.fixture(scope="module")
def spark():
    from natsbroker.spark.session import build_session
    session = build_session("local[2]", app="test-spark-ingest", conf=TEST_CONF)
    yield session
    session.stop()


def run_ingest(spark, feed, out, **kw):
    log = io.StringIO()
    ingest = Ingest(spark, feed, out, log=log, **kw)
    stats = ingest.run(once=True)
    return stats, log.getvalue()


def rows(spark, out, table):
    return [r.asDict(recursive=True) for r in spark.read.parquet(os.path.join(out, table)).collect()]


# -- the feed and what must come out of it ---------------------------------------------------

class Feed:
    """Feed files plus the expected result, computed from the records written."""

    def __init__(self, directory):
        self.writer = g.FeedWriter(directory)
        self.records = {}  # id -> record (first written)
        self.lines = 0  # non-blank lines
        self.bad = []  # (file, line, error)

    def write(self, items):
        """items: records (dicts), ("bad", text, error) or "" (a blank line)."""
        lines = []
        name = os.path.basename(self.writer.path(self.writer.no + 1))
        for i, item in enumerate(items, 1):
            if isinstance(item, dict):
                self.records.setdefault(item["id"], item)
                lines.append(item)
                self.lines += 1
            elif item == "":
                lines.append("")
            else:
                _, text, error = item
                self.bad.append((name, i, error))
                lines.append(text)
                self.lines += 1
        self.writer.write(lines)
        return name

    def ids(self):
        return set(self.records)

    def messages(self):
        out = set()
        for r in self.records.values():
            if r["op"] == "put":
                day = datetime.datetime.fromtimestamp(r["ts"] // SEC, datetime.timezone.utc).date()
                out.add((r["id"], r["stream"], r["seq"], r["subject"],
                         g.base64.b64decode(r["data"]), day))
        return out


def main_feed(directory):
    f = Feed(directory)
    orders_put2 = g.put("ORDERS", C, 2, "orders.new", b"two", C + 2 * SEC)
    orders_put3 = g.put("ORDERS", C, 3, "orders.x", b"\x00\xffbin", C + 3 * SEC)
    f.write([
        g.stream_event("ORDERS", C, "stream_create", 0, C, {"name": "ORDERS"}),
        g.put("ORDERS", C, 1, "orders.new", b"one", C + 1 * SEC, headers={"Nats-Msg-Id": ["m1"]}),
        orders_put2,
        orders_put3,
        ("bad", "this is not json", "invalid JSON"),
        g.put("ORDERS", C, 4, "orders.late", b"four", MIDNIGHT + 5 * SEC),
        "",
        g.stream_event("KV_cfg", C, "stream_create", 0, C, {"name": "KV_cfg"}),
        g.kv_put("cfg", C, 1, "a", b"1", C + 1),
        g.kv_put("cfg", C, 2, "b", b"2", C + 2),
        g.kv_put("cfg", C, 3, "a", b"3", C + 3),
    ])
    with_extra = g.put("ORDERS", C, 5, "orders.new", b"five", C + 20 * SEC)
    with_extra.update({"extra": {"x": 1}, "v2": [1, 2]})  # unknown fields: tolerated
    f.write([
        orders_put2, orders_put3,  # repeated after a broker crash
        g.delete("ORDERS", C, 2, "orders.new", C + 10 * SEC),
        g.purge("ORDERS", C, 4, C + 11 * SEC, filter="orders.x"),
        ("bad", json.dumps({"id": "ORDERS@%d:put:99" % C, "stream": "ORDERS", "op": "put",
                            "seq": "five"}), "field 'seq' must be an integer, got string"),
        g.kv_put("cfg", C, 4, "b", b"", C + 4, operation="DEL"),
        g.kv_put("cfg", C, 5, "c", b"5", C + 5),
        g.kv_put("cfg", C, 6, "c", b"", C + 6, operation="PURGE"),
        g.purge("KV_cfg", C, 6, C + 7, filter="$KV.cfg.c", upto_seq=6, reason="rollup"),
        g.kv_put("cfg", C, 7, "d", b"7", C + 8),
        g.delete("KV_cfg", C, 7, "$KV.cfg.d", C + 9, reason="max_age"),
        g.kv_put("cfg", C, 8, "e", b"8", C + 10),
        g.kv_put("cfg", C, 9, "e", b"9", C + 11),
        g.delete("KV_cfg", C, 9, "$KV.cfg.e", C + 12),  # e falls back to revision 8
        with_extra,
        ("bad", '{"id": 7, "stream": "ORDERS", "op": "put", "seq": 1}',
         "field 'id' must be a string, got integer"),
        ("bad", '{"id": "x", "stream": "ORDERS", "op": "put"}', "missing required field 'seq'"),
        ("bad", '{"id": "x", "stream": "ORDERS", "op": "zap", "seq": 1}', 'unknown op "zap"'),
    ])
    f.write([
        g.kv_put("old", C, 1, "x", b"x", C),
        g.stream_event("KV_old", C, "stream_delete", 1, C + SEC),
        g.kv_put("re", C, 1, "k", b"old", C),
        g.stream_event("KV_re", C, "stream_delete", 1, C + SEC),
        g.stream_event("KV_re", C2, "stream_create", 0, C2, {"name": "KV_re"}),
        g.kv_put("re", C2, 1, "j", b"new", C2 + 1),
        g.kv_put("keep", C, 1, "k1", b"v1", C + 1),
        g.kv_put("keep", C, 2, "k2", b"v2", C + 2),
        g.kv_put("keep", C, 3, "k3", b"v3", C + 3),
        g.purge("KV_keep", C, 3, C + 4, filter="$KV.keep.>", keep=2),
        g.obj_chunk("files", C, 1, "N1", b"x" * 10, C + 1),
        g.obj_meta("files", C, 2, "file1", "N1", 10, C + 2),
        g.obj_chunk("files", C, 3, "N2", b"y" * 4, C + 3),
        g.obj_meta("files", C, 4, "file2", "N2", 4, C + 4),
        g.obj_meta("files", C, 5, "file2", "N2", 0, C + 5, deleted=True),
        g.purge("OBJ_files", C, 5, C + 6, filter="$O.files.C.N2"),
        g.obj_chunk("files", C, 6, "N3", b"z" * 3, C + 7),
        g.obj_meta("files", C, 7, "file1", "N3", 3, C + 8),
        g.purge("OBJ_files", C, 7, C + 9, filter=g.obj_meta("files", C, 7, "file1", "N3", 3, 0)
                ["subject"], upto_seq=7, reason="rollup"),
        g.purge("OBJ_files", C, 7, C + 10, filter="$O.files.C.N1"),
    ])
    return f


EXPECTED_KV = {
    ("cfg", "a", b"3", 3), ("cfg", "e", b"8", 8),
    ("keep", "k2", b"v2", 2), ("keep", "k3", b"v3", 3),
    ("re", "j", b"new", 1),
}
EXPECTED_OBJECTS = {
    # bucket, object, nuid, size, deleted, chunks, chunk_bytes, revision
    ("files", "file1", "N3", 3, False, 1, 3, 7),
    ("files", "file2", "N2", 0, True, 0, 0, 5),
}


def check_tables(spark, out, feed):
    events = rows(spark, out, "events")
    ids = [r["id"] for r in events]
    assert len(ids) == len(set(ids)), "duplicate ids in events"
    assert set(ids) == feed.ids()
    msgs = rows(spark, out, "messages")
    assert len(msgs) == len({m["id"] for m in msgs})
    assert {(m["id"], m["stream"], m["seq"], m["subject"], bytes(m["data"]), m["date"])
            for m in msgs} == feed.messages()
    q = rows(spark, out, "quarantine")
    assert sorted((r["file"], r["line"], r["error"]) for r in q) == sorted(feed.bad)
    # Every record is where it first stood in the feed (file, line).
    first = first_positions(feed.writer.dir)
    assert {e["id"]: (e["file"], e["line"]) for e in events} == {i: first[i] for i in feed.ids()}
    return events, msgs


def first_positions(feed_dir):
    """id -> (file, line) of its first occurrence, read from the files."""
    out = {}
    for name in sorted(os.listdir(feed_dir)):
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(feed_dir, name), encoding="utf-8", newline="") as f:
            for no, line in enumerate(f.read().split("\n"), 1):
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("id"), str):
                    out.setdefault(rec["id"], (name, no))
    return out


@pytest.fixture(scope="module")
def main_run(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("main")
    feed_dir, out = str(base / "feed"), str(base / "out")
    feed = main_feed(feed_dir)
    t = time.time()
    stats, log = run_ingest(spark, feed_dir, out)
    print("main run: %.1fs" % (time.time() - t))
    return feed, feed_dir, out, stats, log


# -- exact tables ------------------------------------------------------------------------------

def test_events_messages_quarantine_exact(spark, main_run):
    feed, feed_dir, out, stats, log = main_run
    events, msgs = check_tables(spark, out, feed)
    assert stats.lines == feed.lines
    assert stats.quarantined == len(feed.bad) == 5
    assert stats.new == len(feed.ids())
    assert stats.duplicates == 2  # the two records repeated after the "crash"
    assert "2 duplicates" in log or "duplicates" in log

    by_id = {e["id"]: e for e in events}
    put1 = by_id["ORDERS@%d:put:1" % C]
    assert put1["headers"] == {"Nats-Msg-Id": ["m1"]}
    assert bytes(put1["data"]) == b"one" and put1["feed"] == 1
    assert (put1["file"], put1["line"]) == ("feed-00000000000000000001.jsonl", 2)
    assert put1["time"] == datetime.datetime(2023, 11, 14, 22, 13, 21)
    dup = by_id["ORDERS@%d:put:3" % C]
    assert dup["file"] == "feed-00000000000000000001.jsonl"  # the first occurrence is kept
    purge = by_id[g.purge("ORDERS", C, 4, C + 11 * SEC, filter="orders.x")["id"]]
    assert purge["purge"] == {"filter": "orders.x", "upto_seq": None, "keep": None}
    assert purge["op"] == "purge" and purge["reason"] == "api"

    dates = {(m["stream"], m["date"]) for m in msgs}
    assert ("ORDERS", DAY1) in dates and ("ORDERS", DAY2) in dates
    assert os.path.isdir(os.path.join(out, "messages", "stream=ORDERS", "date=2023-11-15"))
    binary = [m for m in msgs if m["seq"] == 3 and m["stream"] == "ORDERS"][0]
    assert bytes(binary["data"]) == b"\x00\xffbin"

    q = rows(spark, out, "quarantine")
    assert {r["raw"] for r in q} >= {"this is not json"}


def test_kv_state(spark, main_run):
    _, _, out, _, _ = main_run
    kv = rows(spark, out, "kv")
    assert {(r["bucket"], r["key"], bytes(r["value"]), r["revision"]) for r in kv} == EXPECTED_KV
    assert len(kv) == len(EXPECTED_KV)


def test_object_catalog(spark, main_run):
    _, _, out, _, _ = main_run
    objs = rows(spark, out, "objects")
    assert {(r["bucket"], r["object"], r["nuid"], r["size"], r["deleted"], r["chunks"],
             r["chunk_bytes"], r["revision"]) for r in objs} == EXPECTED_OBJECTS
    file1 = [r for r in objs if r["object"] == "file1"][0]
    assert json.loads(file1["meta"])["nuid"] == "N3"


def test_derived_tables_in_spark_above_max_rows(spark, main_run, tmp_path, monkeypatch):
    """Above state.MAX_ROWS KV/object events the derived tables are Spark's
    (spark/derive.py): the same rows."""
    from natsbroker.spark import state
    feed, feed_dir, out = copy_out(main_run, tmp_path)
    for table in ("kv", "objects"):
        shutil.rmtree(os.path.join(out, table))
    monkeypatch.setattr(state, "MAX_ROWS", 0)
    assert state.read_events(os.path.join(out, "events"), "KV_") is None
    stats, _ = run_ingest(spark, feed_dir, out)
    assert stats.lines == 0
    kv = rows(spark, out, "kv")
    assert {(r["bucket"], r["key"], bytes(r["value"]), r["revision"]) for r in kv} == EXPECTED_KV
    objs = rows(spark, out, "objects")
    assert {(r["bucket"], r["object"], r["nuid"], r["size"], r["deleted"], r["chunks"],
             r["chunk_bytes"], r["revision"]) for r in objs} == EXPECTED_OBJECTS


def random_kv_obj_feed(directory, seed, n=400):
    """KV and object-store traffic with every kind of removal, at random."""
    import random
    rnd = random.Random(seed)
    f = Feed(directory)
    seqs = {}
    items = []

    def nxt(stream, created):
        seqs[(stream, created)] = seqs.get((stream, created), 0) + 1
        return seqs[(stream, created)]

    for i in range(n):
        bucket = rnd.choice(["a", "b"])
        created = C if i < n * 0.6 else rnd.choice([C, C2])
        x = rnd.random()
        if x < 0.45:
            stream = "KV_" + bucket
            seq = nxt(stream, created)
            items.append(g.kv_put(bucket, created, seq, "k%d.%d" % (rnd.randint(0, 7),
                                                                   rnd.randint(0, 1)),
                                  b"v%d" % i, C + i,
                                  operation=rnd.choice(["PUT", "PUT", "PUT", "DEL", "PURGE"])))
        elif x < 0.55:
            stream = "KV_" + bucket
            last = seqs.get((stream, created), 0)
            if last:
                items.append(g.delete(stream, created, rnd.randint(1, last), "$KV.%s.x" % bucket,
                                      C + i, reason=rnd.choice(["api", "max_age"])))
        elif x < 0.59:
            stream = "KV_" + bucket
            last = seqs.get((stream, created), 0)
            flt = rnd.choice([None, "", "$KV.%s.k1.0" % bucket, "$KV.%s.*.1" % bucket,
                              "$KV.%s.>" % bucket, "$KV.%s.k2.*" % bucket,
                              "$KV.%s.k3.1" % bucket, "$KV.%s.k4.0" % bucket])
            items.append(g.purge(stream, created, last, C + i, filter=flt,
                                 upto_seq=rnd.choice([None, None, max(1, last - 2)]),
                                 keep=rnd.choice([None, None, 0, 1, 2])))
        elif x < 0.85:
            stream = "OBJ_" + bucket
            nuid = "N%d" % rnd.randint(0, 4)
            seq = nxt(stream, created)
            if rnd.random() < 0.6:
                items.append(g.obj_chunk(bucket, created, seq, nuid, b"c" * rnd.randint(0, 9),
                                         C + i))
            else:
                items.append(g.obj_meta(bucket, created, seq, "o%d" % rnd.randint(0, 3), nuid,
                                        rnd.randint(0, 30), C + i,
                                        deleted=rnd.random() < 0.2))
        elif x < 0.9:
            stream = "OBJ_" + bucket
            items.append(g.purge(stream, created, seqs.get((stream, created), 0), C + i,
                                 filter="$O.%s.C.N%d" % (bucket, rnd.randint(0, 4))))
        elif x < 0.905:
            stream = rnd.choice(["KV_", "OBJ_"]) + bucket
            items.append(g.stream_event(stream, created, "stream_delete",
                                        seqs.get((stream, created), 0), C + i))
    for start in range(0, len(items), 150):
        f.write(items[start:start + 150])
    return f


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_derived_tables_in_python_equal_sparks(spark, tmp_path, seed):
    """spark/state.py (the driver's pyarrow) against spark/derive.py (Spark)
    on the same events."""
    from pyspark.sql import functions as F

    from natsbroker.spark import derive, state

    feed_dir, out = str(tmp_path / "feed"), str(tmp_path / "out")
    random_kv_obj_feed(feed_dir, seed)
    run_ingest(spark, feed_dir, out)
    events_path = os.path.join(out, "events")
    schema = Ingest(spark, feed_dir, out, log=None).events_schema
    events = spark.read.schema(schema).parquet(events_path)
    for table, prefix, compute, local in (("kv", "KV_", derive.kv_state, state.kv_state),
                                          ("objects", "OBJ_", derive.object_catalog,
                                           state.object_catalog)):
        ours = local(state.read_events(events_path, prefix)).to_pylist()
        theirs = [r.asDict(recursive=True) for r in compute(
            events.where(F.col("stream").startswith(prefix))).collect()]
        for r in ours:
            assert int(r.pop("time").timestamp() * 10 ** 6) == r["ts"] // 1000
        for r in theirs:
            del r["time"]
            if r.get("value") is not None:
                r["value"] = bytes(r["value"])
        key = (lambda r: (r["bucket"], r["key"])) if table == "kv" else \
            (lambda r: (r["bucket"], r["object"]))
        assert sorted(ours, key=key) == sorted(theirs, key=key)
        assert len(ours) > 2
        # and the table the ingest wrote is ours
        written = [r.asDict(recursive=True) for r in spark.read.parquet(
            os.path.join(out, table)).collect()]
        assert len(written) == len(ours)


def test_derived_tables_edge_cases_equal_sparks(spark, tmp_path):
    """spark/state.py against spark/derive.py on crafted events: a purge
    keeping a negative number, a wildcard purge over a null subject, a
    literal ">" inside a filter, no stream_created, a deleted incarnation
    and its successor, operations in mixed case, revisions missing, a meta
    that is not UTF-8, chunks without a size, a meta without a nuid."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from natsbroker.spark import derive, state
    from natsbroker.spark.fileparse import EVENTS

    C = 5
    def row(stream, seq, op, created=C, subject=None, data=b"x", purge=None, kv=None, obj=None, file="f1", line=None, ts=1000):
        return dict(stream=stream, stream_created=created, seq=seq, op=op, ts=ts, subject=subject, data=data, purge=purge, kv=kv, obj=obj, file=file, line=line if line is not None else seq)
    kvr = lambda b, k, op="PUT", rev=None: {"bucket": b, "key": k, "operation": op, "revision": rev}
    rows = [
      row("KV_a", 1, "put", subject="$KV.a.k", kv=kvr("a", "k")),
      row("KV_a", 2, "put", subject="$KV.a.k", kv=kvr("a", "k", rev=2)),
      row("KV_a", 3, "put", subject="$KV.a.j", kv=kvr(None, "j")),
      row("KV_a", 4, "put", subject=None, kv=kvr("a", "n")),
      row("KV_a", 5, "purge", purge={"filter": "$KV.a.*", "upto_seq": None, "keep": -3}),
      row("KV_a", 6, "put", subject="$KV.a.k", kv=kvr("a", "k", op="del")),
      row("KV_a", 7, "put", subject="$KV.a.m", kv=kvr("a", "m", op="pUt", rev=None), ts=-1999),
      row("KV_a", 8, "put", subject="$KV.a.m", kv=kvr("a", "m", op="PUT", rev=None), file="f0"),
      row("KV_b", 1, "put", created=None, subject="x", kv=kvr("b", "z")),
      row("KV_c", 1, "put", subject="$KV.c.>.x", kv=kvr("c", "q")),
      row("KV_c", 2, "purge", purge={"filter": "$KV.c.>.x", "upto_seq": None, "keep": 0}),
      row("KV_c", 3, "put", subject="$KV.c.r", kv=kvr("c", "r"), ts=None),
      row("KV_c", 4, "put", subject="$KV.c.s", kv=None),
      row("KV_d", 1, "put", subject="a", kv=kvr("d", "a")),
      row("KV_d", 2, "stream_delete"),
      row("KV_d", 1, "put", created=C + 1, subject="a", kv=kvr("d", "b")),
    ]
    orow = lambda b, o, ev, nuid, size=None: {"bucket": b, "object": o, "event": ev, "nuid": nuid, "size": size, "digest": None}
    orows = [
      row("OBJ_a", 1, "put", subject="c", obj=orow("a", None, "chunk", "N1", 5)),
      row("OBJ_a", 2, "put", subject="c", obj=orow("a", None, "chunk", "N1", None)),
      row("OBJ_a", 3, "put", subject="m", obj=orow("a", "o1", "put", "N1", 5), data=b"\xff{}"),
      row("OBJ_a", 4, "put", subject="m", obj=orow("a", "o2", "put", None, 1), data=None),
      row("OBJ_a", 5, "put", subject="m", obj=orow(None, "o3", "delete", "N2", 1)),
      row("OBJ_a", 6, "put", subject="c", obj=orow("a", None, "chunk", "N3", None)),
      row("OBJ_a", 7, "put", subject="m", obj=orow("a", "o4", "put", "N3", 0)),
      row("OBJ_a", 8, "put", subject="m", obj=None),
    ]
    schema = pa.schema([EVENTS.field(c) for c in ["id"] + state._COLUMNS])
    for compute, local, rs in ((derive.kv_state, state.kv_state, rows),
                               (derive.object_catalog, state.object_catalog, orows)):
        for i, r in enumerate(rs):
            r["id"] = "%s@%s:%s:%d" % (r["stream"], r["stream_created"], r["op"], i)
        t = pa.Table.from_pylist(rs, schema=schema)
        path = str(tmp_path / ("%s.parquet" % local.__name__))
        pq.write_table(t, path)
        ours = local(t).to_pylist()
        theirs = [r.asDict(recursive=True) for r in compute(spark.read.parquet(path)).collect()]
        for r in ours:
            del r["time"]
        for r in theirs:
            del r["time"]
            if r.get("value") is not None:
                r["value"] = bytes(r["value"])
        key = (lambda r: (r["bucket"], r.get("key") or r.get("object")))
        assert sorted(ours, key=key) == sorted(theirs, key=key)
        assert len(ours) == 4


@pytest.mark.parametrize("hashing", ["real", "colliding"])
def test_duplicates_across_tasks_read_only_shared_hashes(spark, tmp_path, hashing):
    """The driver's repeat check (Ingest._duplicates): ids are compared
    only where a hash is shared, read from those rows' row groups; with
    real hashes and with hashes made to collide (three values for all the
    ids) the rows dropped are every occurrence of an id but the first, in
    feed order (task 0's rows, then task 1's)."""
    import random

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from natsbroker.spark import stage as S
    from natsbroker.spark.ingest import _ids_at
    rnd = random.Random(7)
    files, all_ids = [], []
    for task in (0, 1):
        ids = ["S@1:put:%d" % rnd.randint(0, 60) for _ in range(rnd.randint(40, 70))]
        ids = [i for k, i in enumerate(ids) if i not in ids[:k]]  # a task's own repeats are gone
        # colliding: a function of the id still, with three values
        h = S.id_hashes(pa.array(ids)) if hashing == "real" else \
            np.array([int(i.rsplit(":", 1)[1]) % 3 for i in ids], np.uint64)
        t = pa.table({"hash": h, "task": np.full(len(ids), task, np.int32),
                      "stream": ["S"] * len(ids), "seq": np.arange(len(ids)),
                      "op": ["put"] * len(ids), "file": ["f%d" % task] * len(ids),
                      "line": np.arange(len(ids)), "id": ids})
        path = str(tmp_path / ("part-%05d.parquet" % task))
        S.write_parquet(t, path, row_group_size=5)
        files.append(path)
        all_ids += ids
    keys = pa.concat_tables([pq.read_table(f, columns=[
        "hash", "task", "stream", "seq", "op", "file", "line"]) for f in files])
    seen, expected = set(), []
    for i in all_ids:
        expected.append(i in seen)
        seen.add(i)
    assert any(expected)
    ingest = Ingest(spark, str(tmp_path / "feed"), str(tmp_path / "out"), log=None)
    assert ingest._duplicates(keys, files).tolist() == expected
    # with ids already in events (a batch overlapping earlier ones), those go too
    before = set(rnd.sample(sorted(seen), 10))
    ingest._existing_ids = lambda ranges: pa.chunked_array([sorted(before)], pa.string())
    assert ingest._duplicates(keys, files).tolist() == [
        e or i in before for e, i in zip(expected, all_ids)]
    rows = np.array(sorted(rnd.sample(range(len(all_ids)), 25)))
    assert _ids_at(files, rows).to_pylist() == [all_ids[r] for r in rows]


def test_workers_run_the_installed_pyspark_not_the_zip(spark):
    """spark/daemon.py, in a session of spark/session.py: the Python workers
    are forked by our daemon and import pyspark and py4j from the installed
    packages (compiled bytecode), not from Spark's zips (compiled at every
    start)."""
    def where(it):
        import sys

        import py4j
        import pyspark
        import pyspark.worker
        list(it)
        main = sys.modules["__main__"]
        yield (pyspark.__file__, py4j.__file__, pyspark.worker.__file__,
               [p for p in sys.path if p.endswith(("pyspark.zip", "-src.zip"))],
               main.__spec__.name if main.__spec__ else None)
    import py4j
    import pyspark
    for files in spark.sparkContext.parallelize([1, 2], 2).mapPartitions(where).collect():
        assert files[0] == pyspark.__file__ and files[1] == py4j.__file__
        assert ".zip" not in files[2]
        assert files[3] == []
        assert files[4] == "natsbroker.spark.daemon"


def test_a_feed_file_removed_before_its_batch_reads_it(spark, tmp_path):
    """A file listed for a batch but removed before the tasks read it (by
    hand, or a retention job): the batch is done again without it, with a
    warning naming it; the other files' records are committed once."""
    feed_dir, out = str(tmp_path / "feed"), str(tmp_path / "out")
    w = g.FeedWriter(feed_dir)
    c = 1_790_000_000_000_000_000
    names = [os.path.basename(w.write([g.put("S", c, 10 * f + i, "s.x", b"x", c + i)
                                       for i in range(1, 4)])) for f in range(3)]
    log = io.StringIO()
    ingest = Ingest(spark, feed_dir, out, log=log)
    plan = ingest.plan

    def plan_then_remove(pending):
        batches = plan(pending)
        if os.path.exists(os.path.join(feed_dir, names[1])):
            os.unlink(os.path.join(feed_dir, names[1]))
        return batches
    ingest.plan = plan_then_remove
    ingest.run(once=True)
    text = log.getvalue()
    assert "warning: feed file %s removed before batch 0 read it: not ingested" % names[1] in text
    assert ingest.stats.gone == 1
    assert sorted(r["seq"] for r in rows(spark, out, "events")) == [1, 2, 3, 21, 22, 23]
    commits = list(Committer(out).commits())
    assert [c["files"] for c in commits] == [[names[0], names[2]]]
    assert os.listdir(os.path.join(out, "_ingest", "staging")) == []
    assert "1 feed file(s) removed before they were read" in ingest.summary()


# -- exactly once across runs ----------------------------------------------------------------

def copy_out(main_run, tmp_path):
    feed, feed_dir, out, _, _ = main_run
    new_out = str(tmp_path / "out")
    shutil.copytree(out, new_out)
    return feed, feed_dir, new_out


def test_rerun_without_new_files_changes_nothing(spark, main_run, tmp_path):
    feed, feed_dir, out = copy_out(main_run, tmp_path)
    stats, _ = run_ingest(spark, feed_dir, out)
    assert (stats.lines, stats.new, stats.quarantined) == (0, 0, 0)
    check_tables(spark, out, feed)


def test_lost_commit_log_reads_all_again_and_drops_everything(spark, main_run, tmp_path):
    feed, feed_dir, out = copy_out(main_run, tmp_path)
    os.unlink(os.path.join(out, "_ingest", "commits.jsonl"))
    stats, _ = run_ingest(spark, feed_dir, out)
    assert stats.lines == feed.lines
    assert stats.new == 0 and stats.quarantined == 0
    assert stats.duplicates == stats.valid == feed.lines - len(feed.bad)
    check_tables(spark, out, feed)
    kv = rows(spark, out, "kv")
    assert {(r["bucket"], r["key"], bytes(r["value"]), r["revision"]) for r in kv} == EXPECTED_KV


def test_new_file_with_repeats_and_kv_update(spark, main_run, tmp_path):
    feed, feed_dir, out = copy_out(main_run, tmp_path)
    feed = copy.deepcopy(feed)
    new_feed = str(tmp_path / "feed")
    shutil.copytree(feed_dir, new_feed)
    feed.writer.dir = new_feed
    old = list(feed.records.values())[:6]
    feed.write(old + [
        g.put("ORDERS", C, 6, "orders.new", b"six", C + 30 * SEC),
        g.kv_put("cfg", C, 10, "a", b"10", C + 30),
        g.kv_put("cfg", C, 11, "e", b"", C + 31, operation="DEL"),
        g.stream_event("KV_keep", C, "stream_delete", 3, C + 32),
    ])
    stats, _ = run_ingest(spark, new_feed, out)
    # Another feed directory: every file is read again (the commit log names
    # the old one's), all but the 4 new records are dropped.
    assert stats.lines == feed.lines and stats.quarantined == 0
    assert (stats.new, stats.duplicates) == (4, feed.lines - len(feed.bad) - 4)
    check_tables(spark, out, feed)
    kv = rows(spark, out, "kv")
    assert {(r["bucket"], r["key"], bytes(r["value"]), r["revision"]) for r in kv} == {
        ("cfg", "a", b"10", 10), ("re", "j", b"new", 1)}


# -- crash inside the commit --------------------------------------------------------------------

class Crash(Exception):
    pass


def test_crash_during_commit_then_rerun_is_exact(spark, tmp_path):
    """A crash before the commit point (the batch is discarded and redone), then
    one after it, halfway through the file moves (rolled forward)."""
    feed_dir, out = str(tmp_path / "feed"), str(tmp_path / "out")
    feed = Feed(feed_dir)
    feed.write([g.put("S", C, i, "s.%d" % i, b"%d" % i, C + i) for i in range(1, 6)]
               + [("bad", "{", "invalid JSON")])
    feed.write([g.put("S", C, i, "s.%d" % i, b"%d" % i, C + i) for i in range(4, 9)])
    staging = os.path.join(out, "_ingest", "staging")

    def crash_at(step):
        def fault(at):
            if at == step:
                raise Crash(at)
        return fault

    with pytest.raises(Crash):
        run_ingest(spark, feed_dir, out, fault=crash_at("staged"))
    assert os.listdir(staging)  # the interrupted batch's files
    assert not os.path.exists(os.path.join(out, "events"))
    with pytest.raises(Crash):
        run_ingest(spark, feed_dir, out, fault=crash_at("move:1"))
    assert len(Committer(out).commits()) == 0
    assert os.path.isdir(os.path.join(out, "events"))  # partly moved in

    stats, log = run_ingest(spark, feed_dir, out)
    assert "1 batch(es) completed, 0 discarded" in log
    # The rolled-forward commit names its files: they are not read again.
    assert stats.lines == 0 and stats.new == 0
    check_tables(spark, out, feed)
    assert os.listdir(staging) == []
    assert [c["new"] for c in Committer(out).commits()] == [8]


# -- the command line ---------------------------------------------------------------------------

def cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "natsbroker.spark.ingest", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_missing_feed_dir(tmp_path):
    r = cli("--feed", str(tmp_path / "nope"), "--out", str(tmp_path / "out"), "--once")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "natsbroker-ingest: error: feed directory %s does not exist" % (tmp_path / "nope")]


def test_cli_feed_not_a_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    r = cli("--feed", str(tmp_path / "file"), "--out", str(tmp_path / "out"), "--once")
    assert r.returncode == 2
    assert r.stderr.strip() == "natsbroker-ingest: error: feed path %s is not a directory" % (tmp_path / "file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
def test_cli_unreadable_feed_dir(tmp_path):
    d = tmp_path / "feed"
    d.mkdir()
    d.chmod(0)
    try:
        r = cli("--feed", str(d), "--out", str(tmp_path / "out"), "--once")
    finally:
        d.chmod(0o755)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1
    assert "is not readable" in r.stderr


def test_cli_unreadable_feed_dir_simulated(tmp_path, monkeypatch, capsys):
    """The same as root (who reads any directory): listing fails with EACCES."""
    import natsbroker.spark.ingest as ingest_mod
    d = tmp_path / "feed"
    d.mkdir()
    real_listdir = os.listdir

    def listdir(path):
        if os.path.abspath(path) == str(d):
            raise PermissionError(13, "Permission denied")
        return real_listdir(path)
    monkeypatch.setattr(ingest_mod.os, "listdir", listdir)
    assert ingest_mod.main(["--feed", str(d), "--out", str(tmp_path / "out"), "--once"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "natsbroker-ingest: error: feed directory %s is not readable: Permission denied" % d]


def test_cli_output_locked_by_another_ingest(tmp_path):
    (tmp_path / "feed").mkdir()
    holder = Committer(str(tmp_path / "out"))
    holder.lock()
    try:
        r = cli("--feed", str(tmp_path / "feed"), "--out", str(tmp_path / "out"), "--once")
    finally:
        holder.unlock()
    assert r.returncode == 2
    assert r.stderr.strip() == "natsbroker-ingest: error: another ingest is writing to %s" % (tmp_path / "out")


def test_cli_usage_error():
    r = cli("--once")
    assert r.returncode == 2 and "--feed" in r.stderr


# -- kill -9 mid-run ------------------------------------------------------------------------------

def kill_feed(directory, files, per_file):
    """Puts on two streams plus KV, with the tail of every 4th file repeated at
    the start of the next (as after a broker crash)."""
    f = Feed(directory)
    seq = {"A": 0, "B": 0, "KV_k": 0}
    tail = []
    for n in range(files):
        recs = list(tail)
        for i in range(per_file):
            s = ("A", "B", "KV_k")[i % 3]
            seq[s] += 1
            ts = C + (n * per_file + i) * SEC
            if s == "KV_k":
                recs.append(g.kv_put("k", C, seq[s], "key%d" % (seq[s] % 7), b"v%d" % seq[s], ts))
            else:
                recs.append(g.put(s, C, seq[s], "%s.x" % s.lower(), b"%d" % seq[s], ts))
        f.write(recs)
        tail = recs[-5:] if n % 4 == 3 else []
    return f


def kv_expected(feed):
    latest = {}
    for r in feed.records.values():
        if r["kv"]:
            key = r["kv"]["key"]
            if key not in latest or r["seq"] > latest[key]["seq"]:
                latest[key] = r
    return {("k", k, g.base64.b64decode(r["data"]), r["seq"]) for k, r in latest.items()}


def kill_run(proc):
    """SIGKILL an ingest process, its JVM and the JVM's Python workers, and
    wait until all are gone. PySpark's daemon puts itself (and the workers
    it forks) in a process group of its own, so killing the ingest's group
    leaves them to die when the daemon sees its JVM go; a worker of the
    killed run could otherwise still write into a staging directory that
    the next run's recovery has just removed."""
    tree = [proc.pid] + [pid for pid, _ in descendants(proc.pid)]
    os.killpg(proc.pid, signal.SIGKILL)  # the whole group: python and its JVM
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.wait(30)
    deadline = time.time() + 30
    while not all(_gone(p) for p in tree) and time.time() < deadline:
        time.sleep(0.05)


def _gone(pid):
    """No such process, or a zombie (dead, not yet reaped)."""
    fields = stat(pid)
    return fields is None or fields[0] == "Z"


def test_kill_9_mid_run_then_catch_up(spark, tmp_path):
    feed_dir, out = str(tmp_path / "feed"), str(tmp_path / "out")
    feed = kill_feed(feed_dir, files=24, per_file=30)  # 12 batches of 2 files
    log = open(tmp_path / "ingest.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "natsbroker.spark.ingest", "--feed", feed_dir, "--out", out,
         "--master", "local[2]", "--max-files-per-batch", "2", "--trigger-seconds", "0.5",
         *[x for k, v in TEST_CONF.items() for x in ("--conf", "%s=%s" % (k, v))]],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    committer = Committer(out)
    try:
        deadline = time.time() + 240
        while not committer.commits():
            assert proc.poll() is None, "ingest exited early:\n" + open(log.name).read()
            assert time.time() < deadline, "no progress:\n" + open(log.name).read()
            time.sleep(0.2)
        # The broker goes on writing while the ingest runs...
        extra = [g.put("A", C, 10_000 + i, "a.x", b"late", C + i) for i in range(3)]
        feed.write(extra + list(feed.records.values())[:4])
        time.sleep(0.3)
    finally:
        kill_run(proc)
    done_before = len(committer.commits())
    assert done_before < 13, "the run finished before it could be killed"

    stats, text = run_ingest(spark, feed_dir, out)
    commits = committer.commits()
    files = [name for c in commits for name in c["files"]]
    assert sorted(set(files)) == sorted(n for n in os.listdir(feed_dir) if n.endswith(".jsonl"))
    events, msgs = check_tables(spark, out, feed)
    assert len(events) == len(feed.ids())
    assert len(msgs) == len(feed.messages())
    kv = rows(spark, out, "kv")
    assert {(r["bucket"], r["key"], bytes(r["value"]), r["revision"]) for r in kv} == kv_expected(feed)
    assert not [n for n in os.listdir(os.path.join(out, "_ingest", "staging"))
                if not n.startswith("old-")]
    print("killed after %d committed batches; second run: %s" % (done_before, text.strip()))


def test_kill_9_during_once_then_restarted_process_finishes(spark, tmp_path):
    """A ``--once`` backfill SIGKILLed after its first commit; a second
    ``--once`` process finishes the job: every id exactly once."""
    feed_dir, out = str(tmp_path / "feed"), str(tmp_path / "out")
    feed = kill_feed(feed_dir, files=16, per_file=40)
    cmd = [sys.executable, "-m", "natsbroker.spark.ingest", "--feed", feed_dir, "--out", out, "--once",
           "--master", "local[2]", "--max-files-per-batch", "2",
           *[x for k, v in TEST_CONF.items() for x in ("--conf", "%s=%s" % (k, v))]]
    log = open(tmp_path / "first.log", "w+")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    committer = Committer(out)
    try:
        deadline = time.time() + 240
        while not committer.commits():
            assert proc.poll() is None, "ingest exited early:\n" + open(log.name).read()
            assert time.time() < deadline, "no progress:\n" + open(log.name).read()
            time.sleep(0.1)
    finally:
        kill_run(proc)
    killed_after = len(committer.commits())
    assert killed_after < 8, "the run finished before it could be killed"

    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert second.returncode == 0, second.stderr[-3000:]
    events, msgs = check_tables(spark, out, feed)
    assert len(events) == len(feed.ids()) and len(msgs) == len(feed.messages())
    summary = second.stdout.strip().splitlines()[0]
    print("killed after %d batches; restart: %s" % (killed_after, summary))
