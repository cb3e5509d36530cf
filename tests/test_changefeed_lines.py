"""The change feed's lines: the fast put line is byte for byte the generic
record's JSON, and a real broker's feed is byte for byte the golden lines.

The feed writer formats a plain stream's puts from a template (the hot path)
and everything else through ``make_record``; both must give the same line for
the same event, or the ingest would see two schemas.
"""

import asyncio
import base64
import glob
import json
import os
import re
import time

import nats
from hypothesis import given, settings, strategies as st

from natsbroker.changefeed.lines import PutLines, make_record
from natsbroker.changefeed.writer import AGE, REPLAY_POS, FeedWriter
from natsbroker.store.base import StoredMsg, StreamEvent
from tests.support.servers import ServerProcess

TOKEN = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=" \t\r\n.*>"),
                min_size=1, max_size=8)
SUBJECT = st.lists(TOKEN, min_size=1, max_size=4).map(".".join)
HEADER_NAME = st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters=":"),
                      min_size=1, max_size=10)
HEADER_VALUE = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12).map(str.strip)
HEADERS = st.lists(st.tuples(HEADER_NAME, HEADER_VALUE), max_size=3).map(
    lambda pairs: b"NATS/1.0\r\n" + b"".join(b"%s: %s\r\n" % (k.encode(), v.encode())
                                             for k, v in pairs) + b"\r\n" if pairs else b"")
STREAM = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF,
                               blacklist_characters=".*>\\/\"", blacklist_categories=("Cs",)),
                 min_size=1, max_size=10).filter(lambda s: not s.startswith(("KV_", "OBJ_")))


def _reference(ev):
    return json.dumps(make_record(ev), separators=(",", ":")).encode() + b"\n"


@settings(max_examples=300, deadline=None)
@given(stream=STREAM, created=st.integers(0, 2**63 - 1), seq=st.integers(1, 2**63 - 1),
       ts=st.integers(0, 2**63 - 1), subject=SUBJECT, hdr=HEADERS, data=st.binary(max_size=64))
def test_template_line_equals_record_json(stream, created, seq, ts, subject, hdr, data):
    msg = StoredMsg(seq, subject.encode(), hdr, data, ts)
    ev = StreamEvent(stream, created, "put", seq, ts, msg=msg)
    assert PutLines().line(ev) == _reference(ev)


def _writer(tmp_path, max_file_size=1 << 40):
    opened = []
    w = FeedWriter(str(tmp_path), max_file_size, 0, {}, {}, opened.append)
    return w, opened


def _completed(tmp_path):
    out = b""
    for name in sorted(glob.glob(os.path.join(str(tmp_path), "feed-*.jsonl"))):
        with open(name, "rb") as f:
            out += f.read()
    return out


def _pipe_batch(records):
    """Records as the broker's feed sends a batch: consecutive puts of one
    stream with consecutive sequences as one run (stream, created, first seq,
    count, then ts, subject, hdr, data each), anything else as it is."""
    out = []
    run = None  # (stream, created, next seq, index of the count)
    for r in records:
        if isinstance(r, tuple) and r[0] == "put":
            _, stream, created, seq, fields = r
            if run is not None and run[:3] == (stream, created, seq):
                out[run[3]] += 1
            else:
                out += [stream, created, seq, 1]
                run = (stream, created, seq, len(out) - 1)
            run = run[:2] + (seq + 1, run[3])
            out += fields
        else:
            out += r
            run = None
    return out


@settings(max_examples=60, deadline=None)
@given(subjects=st.lists(SUBJECT, min_size=1, max_size=6),
       hdrs=st.lists(HEADERS, min_size=6, max_size=6), data=st.binary(max_size=32),
       cut=st.integers(1, 30))
def test_writer_fast_and_slow_paths_agree(tmp_path_factory, subjects, hdrs, data, cut):
    """Whatever path each put takes (first of a stream, repeated subject,
    headers, a recreated stream, a KV stream, lines given formatted, puts
    given as StreamEvents or as runs of the pipe), and
    however the batches are cut, the files hold the reference lines."""
    tmp_path = tmp_path_factory.mktemp("feed")
    w, opened = _writer(tmp_path)
    items, expected, last = [], [], {}
    seq = 0
    for stream, created in (("S", 1), ("S", 2), ("KV_b", 3)):  # S deleted and created again
        for i, subject in enumerate(subjects * 2):
            seq += 1
            msg = StoredMsg(seq, subject.encode(), hdrs[i % 6], data, 1000 + seq)
            ev = StreamEvent(stream, created, "put", seq, 1000 + seq, msg=msg)
            line = _reference(ev)
            if i % 5 == 4:
                items.append([line])  # as other records come: already formatted
            elif i % 5 in (1, 2, 3):
                # As the broker sends puts to the writer process: in runs
                # (made below, per batch).
                items.append(("put", stream, created, seq, [1000 + seq, msg.subject, msg.hdr,
                                                            msg.data]))
                last[stream] = {"created": created, "seq": seq}
            else:
                items.append([ev])
                last[stream] = {"created": created, "seq": seq}
            expected.append(line)
    for i in range(0, len(items), cut):
        w.write(_pipe_batch(items[i:i + cut]))
    w.complete()
    assert _completed(tmp_path) == b"".join(expected)
    assert w.records == len(expected) and opened == [1]
    assert w.checkpoint == last


def test_writer_rolls_by_size_and_age_and_respects_the_replay(tmp_path):
    msg = StoredMsg(1, b"a", b"", b"x" * 60, 5)
    evs = [StreamEvent("S", 1, "put", n, 5, msg=msg._replace(seq=n)) for n in range(1, 8)]
    w, opened = _writer(tmp_path, max_file_size=2 * len(_reference(evs[0])) + 1)
    # The replay of S has written seqs 1 and 2 when live put 6 arrives: the
    # file that fills up with it may move the checkpoint to 2 only.
    w.write([(REPLAY_POS, "S", 3), evs[0], evs[1], evs[5], evs[6]])
    assert opened == [1, 2]
    assert w.checkpoint == {"S": {"created": 1, "seq": 2}}
    w.write([(AGE, 1)])  # file 1 is complete already: nothing to do
    assert glob.glob(str(tmp_path / "*.tmp")) == [str(tmp_path / ("feed-%020d.tmp" % 2))]
    w.write([(REPLAY_POS, "S", None), (AGE, 2)])
    assert not glob.glob(str(tmp_path / "*.tmp"))
    assert [os.path.basename(p) for p in sorted(glob.glob(str(tmp_path / "*.jsonl")))] == [
        "feed-%020d.jsonl" % n for n in (1, 2)]
    assert w.checkpoint == {"S": {"created": 1, "seq": 7}}
    with open(tmp_path / "checkpoint.json") as f:
        assert json.load(f) == w.checkpoint
    assert _completed(tmp_path) == b"".join(_reference(e) for e in (evs[0], evs[1], evs[5], evs[6]))
    w.write([(AGE, 3)])  # no file open: nothing to do
    assert opened == [1, 2]


# -- the feed a real broker writes, against golden lines -----------------------

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "changefeed_golden.jsonl")


async def _golden_traffic(url):
    nc = await nats.connect(url)
    js = nc.jetstream()
    try:
        await js.add_stream(name="ORDERS", subjects=["orders.>"], max_msgs_per_subject=3)
        for i in range(5):
            await js.publish("orders.%d" % (i % 2), b"order %d \x00\xff" % i)
        await js.publish("orders.h", b"with headers", headers={"X-A": "1", "X-B": "two"})
        await js.publish("orders.\u00e9", "caf\u00e9".encode())
        await js.publish("orders.1", b"")
        await js.delete_msg("ORDERS", 2)
        await js.update_stream(name="ORDERS", subjects=["orders.>"], max_msgs_per_subject=2)
        await js.purge_stream("ORDERS", subject="orders.0")
        kv = await js.create_key_value(bucket="prefs")
        await kv.put("color", b"red")
        await kv.put("size", b"L")
        await kv.delete("color")
        await kv.purge("size")
        for i in range(40):
            await js.publish("orders.bulk", b"x" * i)
        await js.delete_stream("ORDERS")
    finally:
        await nc.close()


def _normalised(feed):
    """The lines of the completed files with the times that vary between
    runs (stream_created, ts) replaced by names, and a stream config (JetStream's
    to define, not the feed's) by its stream's name; the rest as written."""
    out = []
    names = {}
    for name in sorted(glob.glob(os.path.join(feed, "feed-*.jsonl"))):
        with open(name, "rb") as f:
            for line in f:
                rec = json.loads(line)
                for key in ("stream_created", "ts"):
                    value = b"%d" % rec[key]
                    names.setdefault(value, b"<%s:%d>" % (key.encode(), len(names)))
                    line = line.replace(value, names[value])
                if rec["config"] is not None:
                    raw = json.dumps(rec["config"]).encode()
                    assert raw in line
                    line = line.replace(raw, b'"<config of %s>"' % json.loads(
                        rec["config"])["name"].encode())
                out.append(line)
    return out


def _feed_of_golden_traffic(tmp_path, env=None):
    feed = tmp_path / "feed"
    conf = tmp_path / "server.conf"
    conf.write_text('jetstream { store_dir: "%s" }\nchangefeed { dir: "%s", max_file_size: 2KB }\n'
                    % (tmp_path / "js", feed))
    with ServerProcess("natsbroker", ["-c", str(conf)], env=env) as s:
        start = time.time_ns()
        asyncio.run(asyncio.wait_for(_golden_traffic(s.url), 60))
        end = time.time_ns()
    # Stopped (SIGTERM): the open file is completed too.
    assert not glob.glob(str(feed / "*.tmp"))
    _check_times(str(feed), start, end)
    return _normalised(str(feed))


def _check_times(feed, start, end):
    """The times ``_normalised`` names: nanoseconds since the epoch within
    the traffic, a stream's events no earlier than its creation, in the
    order they happened (each stream's records come in order)."""
    last = {}
    for name in sorted(glob.glob(os.path.join(feed, "feed-*.jsonl"))):
        with open(name, "rb") as f:
            for line in f:
                rec = json.loads(line)
                created, ts = rec["stream_created"], rec["ts"]
                assert start <= created <= ts <= end, (start, line, end)
                if rec["op"] == "stream_create":
                    assert ts == created, line
                assert ts >= last.get(rec["stream"], 0), line
                last[rec["stream"]] = ts


def test_feed_bytes_match_the_golden_lines(tmp_path):
    """Byte for byte what the feed held before its writer moved to a thread,
    and record by record what the hand-written expectation below says.

    ``NATSBROKER_WRITE_GOLDEN=1`` writes the golden file anew from this tree
    (to review with ``git diff``) and fails, so that a run with the flag can
    never pass; the file is always checked against ``_expected_records`` as
    well, which does not come from the writer."""
    got = _feed_of_golden_traffic(tmp_path)
    assert _records(got) == _expected_records()
    if os.environ.get("NATSBROKER_WRITE_GOLDEN"):
        with open(GOLDEN, "wb") as f:
            f.writelines(got)
        raise AssertionError("%s rewritten from this tree: review the diff, then run "
                             "again without NATSBROKER_WRITE_GOLDEN" % GOLDEN)
    with open(GOLDEN, "rb") as f:
        want = f.readlines()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g == w


def test_golden_lines_match_the_documented_records():
    """The golden file itself says what natsbroker-changefeed(5) and the
    traffic of ``_golden_traffic`` say, so that a regression in the writer
    cannot be written into it unnoticed."""
    with open(GOLDEN, "rb") as f:
        assert _records(f.readlines()) == _expected_records()


# natsbroker-changefeed(5), RECORDS: every record has all of these keys.
KEYS = ["id", "feed", "stream", "stream_created", "seq", "op", "reason", "ts", "subject",
        "headers", "data", "purge", "config", "kv", "obj"]
PLACEHOLDER = re.compile(rb'(?<=":)<(stream_created|ts):(\d+)>')  # a value, not inside the id


def _records(lines):
    """Normalised lines (see ``_normalised``) as dicts, each checked for the
    documented keys in the documented order and compact JSON, with its
    stream's creation time named ``C`` and its own time ``T`` (also inside
    its id)."""
    out = []
    for line in lines:
        assert line.endswith(b"\n") and line.count(b"\n") == 1, line
        rec = json.loads(PLACEHOLDER.sub(rb'"\1:\2"', line))
        assert list(rec) == KEYS, line
        again = json.dumps(rec, separators=(",", ":")).encode() + b"\n"
        assert PLACEHOLDER.sub(rb'"\1:\2"', line) == again, line  # compact, ASCII
        created, ts = rec["stream_created"], rec["ts"]
        assert created.startswith("stream_created:") and ts.startswith(("ts:", "stream_created:"))
        rec["id"] = rec["id"].replace("<%s>" % created, "C").replace("<%s>" % ts, "T")
        rec["stream_created"] = "C"
        rec["ts"] = "T" if ts != created else "C"
        out.append(rec)
    return out


def _rec(stream, op, seq, **fields):
    """One record as natsbroker-changefeed(5) defines it: every key, unused
    ones null; id ``stream@created:op:seq`` (``:ts`` appended for other ops
    than put and delete)."""
    rec = dict.fromkeys(KEYS)
    ident = "%s@C:%s:%d" % (stream, op, seq)
    ts = "C" if op == "stream_create" else "T"
    rec.update(id=ident if op in ("put", "delete") else ident + ":" + ts, feed=1, stream=stream,
               stream_created="C", seq=seq, op=op, ts=ts)
    rec.update(fields)
    return rec


def _put(stream, seq, subject, data, headers=None, kv=None):
    return _rec(stream, "put", seq, subject=subject, headers=headers,
                data=base64.b64encode(data).decode(), kv=kv)


def _expected_records():
    """Written by hand from ``_golden_traffic`` and the man page: what a
    client did, in the order it did it, with what JetStream's limits remove
    (KV history 1, max_msgs_per_subject 2 once the bulk puts start)."""
    cfg = "<config of %s>"
    out = [_rec("ORDERS", "stream_create", 0, config=cfg % "ORDERS")]
    out += [_put("ORDERS", i + 1, "orders.%d" % (i % 2), b"order %d \x00\xff" % i)
            for i in range(5)]
    out += [
        _put("ORDERS", 6, "orders.h", b"with headers", headers={"X-A": ["1"], "X-B": ["two"]}),
        _put("ORDERS", 7, "orders.\u00e9", "caf\u00e9".encode()),
        _put("ORDERS", 8, "orders.1", b""),
        _rec("ORDERS", "delete", 2, reason="api", subject="orders.1"),
        _rec("ORDERS", "stream_update", 8, config=cfg % "ORDERS"),
        _rec("ORDERS", "purge", 8, reason="api",
             purge={"filter": "orders.0", "upto_seq": None, "keep": None}),
        _rec("KV_prefs", "stream_create", 0, config=cfg % "KV_prefs"),
    ]

    def kv(key, op, rev):
        return {"bucket": "prefs", "key": key, "operation": op, "revision": rev}
    out += [
        _put("KV_prefs", 1, "$KV.prefs.color", b"red", kv=kv("color", "PUT", 1)),
        _put("KV_prefs", 2, "$KV.prefs.size", b"L", kv=kv("size", "PUT", 2)),
        _put("KV_prefs", 3, "$KV.prefs.color", b"", headers={"KV-Operation": ["DEL"]},
             kv=kv("color", "DEL", 3)),
        _rec("KV_prefs", "delete", 1, reason="limit", subject="$KV.prefs.color"),
        _put("KV_prefs", 4, "$KV.prefs.size", b"",
             headers={"KV-Operation": ["PURGE"], "Nats-Rollup": ["sub"]},
             kv=kv("size", "PURGE", 4)),
        _rec("KV_prefs", "purge", 4, reason="rollup",
             purge={"filter": "$KV.prefs.size", "upto_seq": 4, "keep": None}),
    ]
    for i in range(40):
        seq = 9 + i
        out.append(_put("ORDERS", seq, "orders.bulk", b"x" * i))
        if i >= 2:  # the third message on the subject pushes out the first
            out.append(_rec("ORDERS", "delete", seq - 2, reason="limit", subject="orders.bulk"))
    out.append(_rec("ORDERS", "stream_delete", 48))
    return out


def _future(path, ms=50):
    """The file's mtime set ahead, as when the next one completes within the
    same millisecond (or the clock steps back)."""
    t = time.time_ns() + ms * 1_000_000
    os.utime(path, ns=(t, t))
    return t // 1_000_000


def test_a_completed_file_is_newer_than_the_one_before(tmp_path):
    # Spark's file source orders by modification time in ms (ties in
    # directory order): each file must be newer than the one before it.
    w, _ = _writer(tmp_path)
    names = []
    for i in range(3):
        ev = StreamEvent("S", 1, "put", i + 1, 1000 + i,
                         msg=StoredMsg(i + 1, b"s", b"", b"x", 1000 + i))
        w.write([ev])
        w.complete()
        names = sorted(glob.glob(os.path.join(str(tmp_path), "feed-*.jsonl")))
        if i == 0:
            prev = _future(names[0])
    assert len(names) == 3
    ms = [os.stat(n).st_mtime_ns // 1_000_000 for n in names]
    assert ms[0] == prev and ms[0] < ms[1] < ms[2], ms


def test_feedgen_files_are_newer_than_the_one_before(tmp_path):
    from natsbroker.spark.feedgen import FeedWriter as Gen
    g = Gen(str(tmp_path))
    first = g.write(['{"x":0}'], sync=False)
    prev = _future(first)
    names = [first] + [g.write(['{"x":%d}' % i], sync=False) for i in (1, 2)]
    ms = [os.stat(n).st_mtime_ns // 1_000_000 for n in names]
    assert ms[0] == prev and ms[0] < ms[1] < ms[2], ms
