"""The change feed's fast put line is byte for byte the generic record's JSON.

``ChangeFeed.on_event`` formats a plain stream's puts from a template (the hot
path) and everything else through ``make_record``; both must give the same
line for the same event, or the ingest would see two schemas.
"""

import io
import json
import types

from hypothesis import given, settings
from hypothesis import strategies as st

from natsbroker.store.base import StoredMsg, StreamEvent
from plugins.changefeed import ChangeFeed, PutLines, make_record

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


def _feed():
    cfg = types.SimpleNamespace(changefeed=types.SimpleNamespace(
        streams=[], max_file_size=1 << 40, max_file_age=1e9, dir=None, retention=0))
    feed = ChangeFeed(cfg)
    feed._file = io.BytesIO()
    return feed


@settings(max_examples=100, deadline=None)
@given(subjects=st.lists(SUBJECT, min_size=1, max_size=6),
       hdrs=st.lists(HEADERS, min_size=6, max_size=6), data=st.binary(max_size=32))
def test_on_event_fast_and_slow_paths_agree(subjects, hdrs, data):
    """Whatever path each put takes (first of a stream, repeated subject,
    headers, a recreated stream), the file holds the reference lines."""
    feed = _feed()
    expected = []
    seq = 0
    for created in (1, 2):  # the stream deleted and created again
        for i, subject in enumerate(subjects * 2):
            seq += 1
            msg = StoredMsg(seq, subject.encode(), hdrs[i % 6], data, 1000 + seq)
            ev = StreamEvent("S", created, "put", seq, 1000 + seq, msg=msg)
            feed.on_event(ev)
            expected.append(_reference(ev))
    assert feed._file.getvalue() == b"".join(expected)
    assert feed.records == len(expected)
    assert feed._file_puts == {"S": (2, seq)}
