"""The ingest's Python parser (spark/lines.py, spark/fileparse.py) against the
JVM parse it replaced (spark/records.py, run in a real SparkSession): the
same lines give the same records, and bad lines the same reasons.

A differential test: crafted lines for every rule and edge, plus lines made
by mutating good records at random (fixed seed), all run through both.
"""

import base64
import json
import os
import random

import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from natsbroker.spark import (
    feedgen as g,  # noqa: E402
    fileparse,  # noqa: E402
    lines as L,  # noqa: E402
)
from natsbroker.spark.fileparse import _exact, _fast, parse_file  # noqa: E402

pytestmark = pytest.mark.timeout(600)

C = 1_700_000_000_000_000_000
TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
}


def good_records():
    return [
        g.stream_event("ORDERS", C, "stream_create", 0, C, {"name": "ORDERS"}),
        g.put("ORDERS", C, 1, "orders.new", b"one", C + 1, headers={"Nats-Msg-Id": ["m1"]}),
        g.put("ORDERS", C, 2, "orders.x", b"\x00\xffbin", C + 2,
              headers={"A": ["1", "2"], "B": []}),
        g.put("ORDERS", C, 3, "orders.e", b"", C + 3),
        g.delete("ORDERS", C, 2, "orders.new", C + 10),
        g.purge("ORDERS", C, 4, C + 11, filter="orders.x", upto_seq=3, keep=1),
        g.kv_put("cfg", C, 1, "a", b"1", C + 1),
        g.kv_put("cfg", C, 4, "b", b"", C + 4, operation="DEL"),
        g.obj_chunk("files", C, 1, "N1", b"x" * 10, C + 1),
        g.obj_meta("files", C, 2, "file1", "N1", 10, C + 2, digest="SHA-256=abc"),
        g.stream_event("KV_old", C, "stream_delete", 1, C + 5),
    ]


def _rec(**kw):
    base = {"id": "S@1:put:1", "feed": 1, "stream": "S", "stream_created": 1, "seq": 1,
            "op": "put", "ts": C, "subject": "s", "data": "eA=="}
    base.update(kw)
    return {k: v for k, v in base.items() if v is not _DROP}


_DROP = object()


def crafted():
    d = json.dumps
    lines = [
        "this is not json", "{", "{}", "[]", "[1, 2]", '"text"', "5", "null", "true",
        '[{"id": "a", "stream": "S", "op": "put", "seq": 1}]',
        d(_rec()) + " x", d(_rec()) + "}", d(_rec()) + "  ", d(_rec()) + " \t",
        "  " + d(_rec()), "\t" + d(_rec()), d(_rec()) + d(_rec()),
        '{"id": "a", "stream": "S", "op": "put", "seq": 01}',
        "{'id': 'a', 'stream': 'S', 'op': 'put', 'seq': 1}",
        '{"id": "a", "stream": "S", "op": "put", "seq": NaN}',
        '{"id": "a", "stream": "S", "op": "put", "seq": 1, "ts": Infinity}',
        '{"id": "a", "id": "b", "stream": "S", "op": "put", "seq": 1}',
        '{"id": "a\\u00e9\\ud83d\\ude00", "stream": "S", "op": "put", "seq": 1}',
        '{"id": "caf\u00e9 \u2603", "stream": "S", "op": "put", "seq": 1}',
        '{"id": "a\\"b\\\\c\\/d\\n", "stream": "S", "op": "put", "seq": 1}',
    ]
    for field in ("id", "stream", "op", "seq"):
        lines.append(d(_rec(**{field: _DROP})))
        lines.append(d(_rec(**{field: None})))
    for field in ("id", "stream", "op"):
        lines.append(d(_rec(**{field: ""})))
    for text in ("1.0", "1.50", "100000.0", "1e5", "1E2", "-0.0", "0", "-0", "1e400",
                 "12345678901234567890.0", "123456789012345678901234567890123456789",
                 "12345678901234567890123456789012345678", "0.1e1"):
        lines.append('{"id": "a", "stream": "S", "op": "put", "seq": %s}' % text)
        lines.append('{"id": %s, "stream": "S", "op": "put", "seq": 1}' % text)
        lines.append('{"id": "a", "stream": "S", "op": "put", "seq": 1, "kv": {"key": %s}}'
                     % text)
    values = [7, -3, 1.5, 1e5, 1.0, 12345678901234567890, -9223372036854775809,
              9223372036854775807, -9223372036854775808, 10 ** 40, True, False, "5", "x", "",
              [], [1], {}, {"a": 1}]
    for field in ("id", "feed", "stream", "stream_created", "seq", "op", "reason", "ts",
                  "subject", "data", "config", "headers", "purge", "kv", "obj"):
        for v in values:
            lines.append(d(_rec(**{field: v})))
    for obj, members in (("purge", L.PURGE_FIELDS), ("kv", L.KV_FIELDS), ("obj", L.OBJ_FIELDS)):
        for member, _ in members:
            for v in (7, 1.5, True, "x", None, [1, "a"], {"b": 2}):
                lines.append(d(_rec(**{obj: {member: v}})))
        lines.append(d(_rec(**{obj: {"unknown": 1}})))
    for h in ({"A": "x"}, {"A": ["x", None]}, {"A": [1, True, 2.5]}, {"A": None},
              {"A": [["x"]]}, {"A": [{"k": "v"}]}, {"A": []}, {}, {"A": ["a"], "B": ["b"]}):
        lines.append(d(_rec(headers=h)))
    for op in ("zap", "PUT", " put"):
        lines.append(d(_rec(op=op)))
    for feed in (0, 2, 5000000000, None):
        lines.append(d(_rec(feed=feed)))
    for data in ("eA\u00a0==", "YWJ=", "eA  ==", "eA=  =", "eA", "eA=", "eA==", "e A==", " eA== ", "eA==\n", "e\tA==", "eA===", "====",
                 "e!==", "", "AAAA", "A", "eA==eA==", "YWJj", "YWJjZA==", "YW Jj ZA ="):
        lines.append(d(_rec(data=data)))
    lines.append(d(_rec(extra={"x": 1}, v2=[1, 2])))
    # several problems at once: the first in diagnose()'s order wins
    lines.append(d(_rec(id=5, seq="x", op="zap")))
    lines.append(d(_rec(op="zap", data="!!", feed=3)))
    lines.append(d(_rec(kv={"bucket": 5, "revision": "r"}, seq=None)))
    lines.append(d(_rec(headers={"A": "x"}, purge="p")))
    return lines


def mutated(n, seed=20261126):
    rnd = random.Random(seed)
    goods = good_records()
    choices = [None, 0, -1, 2, 1.25, "", "s", " ", True, [], ["a"], {}, {"x": "y"},
               1 << 63, "eA==", "put", "delete", "!"]
    out = []
    for _ in range(n):
        r = json.loads(json.dumps(rnd.choice(goods)))
        for _ in range(rnd.randint(1, 3)):
            k = rnd.choice(list(r) + ["headers", "kv", "feed", "extra"])
            action = rnd.random()
            if action < 0.15:
                r.pop(k, None)
            elif action < 0.3 and isinstance(r.get(k), dict) and r[k]:
                m = rnd.choice(list(r[k]))
                r[k][m] = rnd.choice(choices)
            else:
                r[k] = rnd.choice(choices)
        line = json.dumps(r, separators=rnd.choice([(",", ":"), (", ", ": ")]))
        if rnd.random() < 0.05:
            line = line[:rnd.randint(0, len(line))]
        out.append(line)
    return out


def feed_text(lines):
    return "\n".join(lines) + "\n"


def jvm_results(spark, text):
    """line number -> ("ok", record dict) or ("bad", error), by spark/records.py."""
    from pyspark.sql import functions as F

    from natsbroker.spark import records

    df = spark.createDataFrame([("f.jsonl", text)], "file string, value string")
    parsed = records.parse(records.split_lines(df, F.col("file"))).cache()
    out = {}
    for r in parsed.where(~F.col("bad") & ~F.col("blank")).collect():
        d = r.asDict(recursive=True)
        out[d["line"]] = ("ok", _norm({f: d[f] for f in L.FIELDS_BY_NAME}))
    for r in records.diagnose(parsed.where(F.col("bad")).select("file", "line", "raw")) \
            .collect():
        out[r["line"]] = ("bad", r["error"])
    parsed.unpersist()
    return out


def python_results(parsed):
    out = {}
    for d in parsed.events.to_pylist():
        out[d["line"]] = ("ok", _norm({f: d[f] for f in L.FIELDS_BY_NAME}))
    for line, _, error in parsed.bad:
        out[line] = ("bad", error)
    return out


def _norm(rec):
    rec = dict(rec)
    if rec.get("data") is not None:
        rec["data"] = bytes(rec["data"])
    if rec.get("headers") is not None:
        h = rec["headers"]
        rec["headers"] = dict(h) if not isinstance(h, dict) else h
    return rec


@pytest.fixture(scope="module")
def spark():
    from natsbroker.spark.session import build_session
    session = build_session("local[2]", app="test-spark-lines", conf=TEST_CONF)
    yield session
    session.stop()


def _compare(spark, lines):
    text = feed_text(lines)
    jvm = jvm_results(spark, text)
    py = python_results(parse_file(text.encode("utf-8"), "f.jsonl"))
    diffs = [(no, lines[no - 1], jvm.get(no), py.get(no)) for no in sorted(set(jvm) | set(py))
             if jvm.get(no) != py.get(no)]
    assert not diffs, "\n".join("line %d %r:\n  jvm    %r\n  python %r" % d for d in diffs[:20])
    return jvm


def test_crafted_lines_same_as_the_jvm_parse(spark):
    lines = crafted()
    jvm = _compare(spark, lines)
    # the corpus covers both outcomes and many reasons
    reasons = {r[1] for r in jvm.values() if r[0] == "bad"}
    assert len(reasons) > 25 and sum(r[0] == "ok" for r in jvm.values()) > 20


def test_mutated_records_same_as_the_jvm_parse(spark):
    _compare(spark, mutated(600))


def test_good_records_same_as_the_jvm_parse_on_the_fast_path(spark):
    recs = good_records()
    lines = [g.dumps(r) for r in recs]
    buf = feed_text(lines).encode()
    assert _fast(buf, "f.jsonl") is not None
    _compare(spark, lines)


def test_blank_lines_and_crlf(spark):
    recs = [g.dumps(r) for r in good_records()[:4]]
    text = recs[0] + "\r\n\n   \n" + recs[1] + "\r\r\n" + recs[2] + "\n \t \n" + recs[3]
    jvm = jvm_results(spark, text)
    parsed = parse_file(text.encode(), "f.jsonl")
    assert not parsed.fast
    assert python_results(parsed) == jvm
    assert parsed.lines == 5  # lines 1, 4, 5, 6 (a tab is not blank) and 7


def test_fast_and_exact_paths_agree_on_a_generated_feed(tmp_path):
    w = g.FeedWriter(str(tmp_path))
    recs = good_records() * 20
    w.write(recs)
    buf = open(w.path(1), "rb").read()
    fast = _fast(buf, "x")
    exact = _exact(buf, "x")
    assert fast is not None and not exact.fast
    assert fast.events.equals(exact.events)
    assert fast.lines == exact.lines == len(recs) and fast.bad == exact.bad == []


def test_one_bad_line_sends_the_file_to_the_exact_path():
    lines = [g.dumps(r) for r in good_records()]
    lines.insert(3, json.dumps(_rec(seq="five")))
    parsed = parse_file(feed_text(lines).encode(), "f.jsonl")
    assert not parsed.fast
    assert parsed.bad == [(4, lines[3], "field 'seq' must be an integer, got string")]
    assert parsed.events.num_rows == len(lines) - 1


def test_base64_that_python_takes_and_spark_refuses(spark):
    # a2b_base64(strict_mode=True) decodes "=" past a complete group; Spark
    # gives null. The fast path must not take such a file as good.
    goods = [g.dumps(r) for r in good_records()]
    for data in ("wzZs=", "AAAA====", "jIxzr5Ng2Mcx0IWw==", "eA===", "AA=A"):
        lines = goods + [json.dumps(_rec(data=data))]
        jvm = _compare(spark, lines)
        assert jvm[len(lines)][0] == "bad", data


def test_header_order_and_null_values_as_the_jvm(spark):
    # read_json's struct has one field per header name in the order first
    # seen in the file; the fast path must not hand on that order, or drop
    # a null value, where the line has another (the JVM's map keeps both)
    from pyspark.sql import functions as F

    from natsbroker.spark import records

    hs = [{"A": ["1"], "B": ["2"]}, {"B": ["3"], "A": ["4"]}, {"C": None, "A": ["5"]},
          {"A": ["6"], "B": None}, None, {}, {"A": []}]
    for sep in ((",", ":"), (", ", ": ")):
        lines = [json.dumps(_rec(seq=i, id="S@1:put:%d" % i, headers=h), separators=sep)
                 for i, h in enumerate(hs * 3, 1)]
        text = feed_text(lines)
        df = spark.createDataFrame([("f.jsonl", text)], "file string, value string")
        # map_keys/map_values: arrays keep the map's order, which collect()'s
        # dict (from a Java HashMap) does not
        rows = records.parse(records.split_lines(df, F.col("file"))) \
            .where(~F.col("bad") & ~F.col("blank")) \
            .select("line", F.map_keys("headers").alias("k"), F.map_values("headers").alias("v")) \
            .collect()
        jvm = {r["line"]: None if r["k"] is None else list(zip(r["k"], r["v"])) for r in rows}
        py = {d["line"]: d["headers"] for d in parse_file(text.encode(), "f.jsonl")
              .events.to_pylist()}
        assert len(jvm) == len(lines) and py == jvm
    # in order and without nulls, the fast path takes the file
    lines = [json.dumps(_rec(seq=i, headers=h), separators=(",", ":"))
             for i, h in enumerate([{"A": ["1"], "B": ["2"]}, {"B": ["3"]}, None], 1)]
    assert parse_file(feed_text(lines).encode(), "f.jsonl").fast


def test_a_bad_line_costs_only_its_piece(monkeypatch):
    lines = [g.dumps(r) for r in good_records()] * 60  # 660 lines
    lines[500] = json.dumps(_rec(seq="five"))
    lines[501] = "{not json"
    lines.insert(100, "")
    buf = feed_text(lines).encode()
    whole = _exact(buf, "f.jsonl")
    monkeypatch.setattr(fileparse, "MIN_PIECE", 16)
    parsed = parse_file(buf, "f.jsonl")
    assert 0 < parsed.exact <= 3 * 16  # the blank line's piece and the bad lines' pieces
    assert parsed.events.equals(whole.events)
    assert parsed.bad == whole.bad and parsed.lines == whole.lines == 660
    assert [b[0] for b in parsed.bad] == [502, 503]


@pytest.mark.parametrize("piece", [1, 3, 40])
def test_pieces_same_as_the_jvm_parse(spark, monkeypatch, piece):
    monkeypatch.setattr(fileparse, "MIN_PIECE", piece)
    _compare(spark, [g.dumps(r) for r in good_records()] * 5 + mutated(200, seed=piece)
             + [g.dumps(r) for r in good_records()] * 5 + crafted())


def test_b64decode_is_sparks():
    # try_to_binary(s, 'base64') in Spark 4, observed
    cases = {"eA": b"x", "eA=": None, "eA==": b"x", "e A==": b"x", " eA==": b"x",
             "eA== ": None, "e\tA==": b"x", "eA==\t": None, "e\nA==": b"x", "eA===": None,
             "====": None, "=": None, "e!==": None, "": b"", " ": b"", "A": None, "AA": b"\0",
             "AAA": b"\0\0", "eA==eA==": None, "YWJjZA": b"abcd", "YWJjZ": None, "Y=Jj": None,
             "YWJ=": b"ab", "eA=x": None, "e\u00e9A==": None, "e-A_": None, "YQ=": None,
             "eA\u00a0==": None, "eA  ==": b"x", "eA=  =": None, "YWJjZA= =": None}
    assert {k: L.b64decode(k) for k in cases} == cases
    assert L.b64decode(base64.b64encode(bytes(range(256))).decode()) == bytes(range(256))


_B64_TEXT = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
                            "= \t\n-_\u00e9", max_size=16)


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.one_of(st.none(), _B64_TEXT,
                          st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode())),
                max_size=6),
       st.integers(0, 2))
def test_fast_base64_is_the_exact_decode_or_refuses(values, skip):
    """fileparse._b64 (the whole column in one decode) either gives each
    value exactly what the exact path's b64decode (Spark's rules) gives, or
    refuses the column; a column of well-formed base64 is never refused."""
    import pyarrow as pa
    col = pa.array(values, pa.string()).slice(min(skip, len(values)))
    expect = [None if v is None else L.b64decode(v) for v in col.to_pylist()]
    got = fileparse._b64(col)
    if got is not None:
        assert got.to_pylist() == expect
        assert got.null_count == sum(v is None for v in col.to_pylist())
    if all(v is None or _canonical_base64(v) for v in col.to_pylist()):
        assert got is not None


def _canonical_base64(v):
    try:
        return base64.b64encode(base64.b64decode(v, validate=True)).decode() == v
    except ValueError:
        return False


def test_a_task_drops_repeats_among_its_files_before_writing(tmp_path):
    """spark/stage.py: the first occurrence of an id in feed order is staged,
    its repeats (in the same file or a later one of the task) are not."""
    import pyarrow.parquet as pq

    from natsbroker.spark import stage as S

    recs = good_records()
    one = feed_text([g.dumps(r) for r in recs[:6]] + [g.dumps(recs[1])]).encode()
    two = feed_text([g.dumps(r) for r in recs[2:5] + recs[6:]]).encode()
    rows = S.stage_files([("f-2.jsonl", two), ("f-1.jsonl", one)], str(tmp_path), "tok", 3)
    assert sorted(r[:2] for r in rows) == [("f-1.jsonl", 7), ("f-2.jsonl", 8)]
    keys = pq.read_table(str(tmp_path / "_keys")).to_pylist()
    assert [(k["file"], k["line"]) for k in keys] == (
        [("f-1.jsonl", i) for i in range(1, 7)] + [("f-2.jsonl", i) for i in range(4, 9)])
    assert {k["task"] for k in keys} == {3}
    assert len({k["id"] for k in keys}) == len(keys) == len(recs)
    staged = pq.read_table(str(tmp_path / "events")).num_rows
    assert staged == len(recs)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f"]), max_size=60),
       st.data())
def test_repeats_are_all_but_the_first_occurrence(ids, data):
    """stage.repeats on one array and on chunks (one dictionary across
    them): True exactly where the id occurred before."""
    import pyarrow as pa

    from natsbroker.spark.stage import repeats
    seen, expected = set(), []
    for i in ids:
        expected.append(i in seen)
        seen.add(i)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(ids)), max_size=3)))
    chunks = [ids[a:b] for a, b in zip([0] + cuts, cuts + [len(ids)])]
    assert repeats(pa.array(ids, pa.string())).tolist() == expected
    assert repeats(pa.chunked_array(chunks, pa.string())).tolist() == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=30), min_size=1, max_size=12), st.integers(0, 3))
def test_id_hashes_depend_on_the_id_only(ids, skip):
    """stage.id_hashes: an id's hash is the same alone, among other ids of
    any length, and at any offset of the array (the tasks hash their own
    ids; the driver compares hashes across tasks)."""
    import pyarrow as pa

    from natsbroker.spark.stage import id_hashes
    col = pa.array(["x" * 40] * skip + ids, pa.string()).slice(skip)
    together = id_hashes(col).tolist()
    assert together == [id_hashes(pa.array([i], pa.string()))[0] for i in ids]
    assert len(set(together)) == len(set(ids))  # no collision among a few


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["s1", "s2", "s3"]), st.integers(0, 2), st.booleans()),
                max_size=40), st.integers(0, 3))
def test_partitions_are_a_stable_group_by(rows, cut):
    """stage.partitions on one or two columns, with and without ``keep``,
    on one array or chunks: each distinct key once, its rows in their
    order, the partition columns left out."""
    import numpy as np
    import pyarrow as pa

    from natsbroker.spark.stage import partitions
    n = len(rows)
    cut = min(cut, n)
    col = lambda vals, t: pa.chunked_array([vals[:cut], vals[cut:]], t)  # noqa: E731
    table = pa.table({"stream": col([r[0] for r in rows], pa.string()),
                      "day": col([r[1] for r in rows], pa.int32()),
                      "row": col(list(range(n)), pa.int64())})
    keep = np.array([r[2] for r in rows], bool)
    for parts in (["stream"], ["stream", "day"]):
        for kept in (None, keep):
            expected = {}
            for i, r in enumerate(rows):
                if kept is None or kept[i]:
                    expected.setdefault(tuple(r[:len(parts)]), []).append(i)
            got = partitions(table, parts, kept)
            assert len(got) == len(expected)  # each key once
            rest = [c for c in table.column_names if c not in parts]
            for key, part in got:
                assert part.column_names == rest
                assert part["row"].to_pylist() == expected[key]


def test_a_task_writes_nothing_when_its_staging_is_gone(tmp_path):
    """A worker of a killed ingest, still running after the next run's
    recovery removed its staging directory, must not make it again."""
    from natsbroker.spark import stage as S
    gone = tmp_path / "staging" / "0000000001-abc"
    with pytest.raises(RuntimeError, match="staging directory .* is gone"):
        S.stage_files([("f.jsonl", feed_text([g.dumps(r) for r in good_records()]).encode())],
                      str(gone), "tok", 0)
    assert not (tmp_path / "staging").exists()


def test_balance_cuts_the_feed_into_consecutive_runs(tmp_path):
    from natsbroker.spark.stage import balance
    names = []
    for i, size in enumerate([5, 1, 1, 1, 1, 1, 5, 5]):
        name = "feed-%02d.jsonl" % i
        (tmp_path / name).write_bytes(b"x" * size)
        names.append(name)
    groups = balance(str(tmp_path), names, 4)
    assert [n for g in groups for n in g] == names
    assert len(groups) == 4
    assert balance(str(tmp_path), names[:2], 4) == [[names[0]], [names[1]]]


def test_messages_partitioned_by_day_and_a_put_without_ts(spark, tmp_path):
    """Staged messages go under date=<UTC day of ts>, a put without ts under
    date=__HIVE_DEFAULT_PARTITION__, as Spark lays them out; Spark reads the
    date back (null for the latter)."""
    import datetime

    from natsbroker.spark import stage as S

    day = 86400 * 10 ** 9
    recs = [g.put("S", C, 1, "s.a", b"a", C), g.put("S", C, 2, "s.b", b"b", C + day),
            g.put("S", C, 3, "s.c", b"c", C)]
    recs[2].pop("ts")
    S.stage_files([("f.jsonl", feed_text([g.dumps(r) for r in recs]).encode())],
                  str(tmp_path), "tok", 0)
    root = tmp_path / "messages" / "stream=S"
    assert sorted(os.listdir(root)) == ["date=2023-11-14", "date=2023-11-15",
                                        "date=__HIVE_DEFAULT_PARTITION__"]
    rows = spark.read.parquet(str(tmp_path / "messages")).collect()
    assert sorted((r["seq"], r["date"]) for r in rows) == [
        (1, datetime.date(2023, 11, 14)), (2, datetime.date(2023, 11, 15)), (3, None)]
