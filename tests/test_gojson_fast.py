"""gojson's fast path (Python's C decoder) answers exactly as its Parser does.

``decode_fields``/``unmarshal_fields``/``is_empty_request`` decode valid JSON
with the C decoder and fall back to the Go-compatible Parser for what only it
gets right (syntax errors with Go's offsets, NaN, lone surrogates, escaped enum
values...).  Each property feeds generated JSON-ish bodies (real field names
and enum values, escapes, duplicate keys, odd numbers, several values,
truncation, stray bytes) to both and wants the same fields or the same error.
"""

import json
import time

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from natsbroker.plugins.jetstream import api_models as AM
from natsbroker.plugins.jetstream import consumer_models as CM
from natsbroker.plugins.jetstream import gojson
from natsbroker.plugins.jetstream import stream_models as SM
from natsbroker.plugins.jetstream.gojson import GoJSONError

CLASSES = [SM.StreamConfig, CM.CreateConsumerRequest, AM.MsgGetRequest, AM.StreamInfoRequest]

KEYS = sorted({f for cls in (SM.StreamConfig, CM.ConsumerConfig, CM.CreateConsumerRequest,
                             AM.MsgGetRequest, AM.StreamInfoRequest, SM.Placement,
                             SM.StreamSource, SM.RePublish)
               for f in gojson.go_fields(cls)} | {"Name", "RETENTION", "bogus", "config"})
WORDS = ["limits", "interest", "workqueue", "old", "new", "NEW", "file", "memory", "none",
         "s2", "all", "explicit", "instant", "original", "default", "async", "undefined",
         "create", "update", "prioritized", "foo.>", "2024-01-02T03:04:05Z", ""]


def _escape_some(word, draw):
    """``word`` as a JSON string, some characters written as escapes."""
    out = []
    for ch in word:
        how = draw(st.sampled_from(["plain"] * 6 + ["u", "U"]))
        if how == "plain":
            out.append(json.dumps(ch)[1:-1])
        else:
            code = "\\u%04x" % ord(ch)
            out.append(code.upper().replace("\\U", "\\u") if how == "U" else code)
    return '"' + "".join(out) + '"'


@st.composite
def strings(draw):
    kind = draw(st.sampled_from(["word", "word", "text", "escape"]))
    if kind == "word":
        return _escape_some(draw(st.sampled_from(WORDS)), draw)
    if kind == "escape":
        return '"' + draw(st.sampled_from([
            "\\ud800", "\\udc00x", "\\ud83d\\ude00", "\\ud800\\ud800\\udc00", "\\u003e",
            "\\n", "\\/", "\\x", "\\u12", "\\u006cimits", "\t", "\\\\u0061"])) + '"'
    return json.dumps(draw(st.text(max_size=6)), ensure_ascii=draw(st.booleans()))


NUMBERS = st.sampled_from(["0", "-0", "1", "-1", "1.0", "1e3", "1E+3", "-1.5e-2",
                           "9223372036854775807", "9223372036854775808", "-9223372036854775809",
                           "18446744073709551615", "01", "1.", "-", ".5", "NaN", "Infinity",
                           "-Infinity", "30000000000"])


def values(depth=3):
    scalars = st.one_of(strings(), NUMBERS,
                        st.sampled_from(["true", "false", "null", "tru", "nul"]))
    if depth == 0:
        return scalars

    inner = values(depth - 1)

    @st.composite
    def array(draw):
        return "[" + ",".join(draw(st.lists(inner, max_size=4))) + "]"

    @st.composite
    def obj(draw):
        members = draw(st.lists(st.tuples(st.sampled_from(KEYS), inner), max_size=5))
        ws = draw(st.sampled_from(["", " ", "\n\t"]))
        return "{" + ws + ("," + ws).join('"%s":%s' % kv for kv in members) + "}"

    return st.one_of(scalars, array(), obj(), obj())


@st.composite
def bodies(draw):
    parts = draw(st.lists(values(), min_size=0, max_size=3))
    text = draw(st.sampled_from(["", " ", "\n"])).join(parts)
    data = text.encode("utf-8")
    mangle = draw(st.sampled_from(["none"] * 5 + ["truncate", "insert", "ws"]))
    if mangle == "truncate" and data:
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif mangle == "insert":
        at = draw(st.integers(0, len(data)))
        stray = draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b",", b"}", b"]", b"\xe2\x80\xa8",
                                      b"\xef\xbb\xbf", b"x", b'"', b"\\"]))
        data = data[:at] + stray + data[at:]
    elif mangle == "ws":
        data = b" \t" + data + b"\r\n"
    return data


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except GoJSONError as e:
        return ("error", str(e))


def exact_decode(data, cls):
    return gojson._decode_fields(data, cls, fast=False)


def exact_unmarshal(data, cls):
    return gojson._unmarshal_fields(data, cls, fast=False)


def exact_is_empty(data):
    if not data or data == b"{}":
        return True
    try:
        nodes = list(gojson.parse_json_values(data, fast=False))
    except GoJSONError:
        return False
    if len(nodes) != 1:
        return False
    return nodes[0].kind != "object" or not nodes[0].value


SETTINGS = settings(max_examples=1500, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(bodies(), st.sampled_from(CLASSES))
@example(b'{"retention":"\\u006cimits"}', SM.StreamConfig)
@example(b'{"retention":"lim\\u0069ts","subjects":["a.\\u003e"]}', SM.StreamConfig)
@example(b'{"discard":"NEW","subjects":["a.\\u003e"]}', SM.StreamConfig)
@example(b'{"retention":"bogus","subjects":["a.\\u003e"]}', SM.StreamConfig)
@example(b'{"name":"\\ud800"}', SM.StreamConfig)
@example(b'{"max_msgs":NaN}', SM.StreamConfig)
@example(b'{"max_msgs":1.0}', SM.StreamConfig)
@example(b'{"metadata":{"a":"1","a":"2","b":null}}', SM.StreamConfig)
@example(b'{"name":"a"} {"name":"b"} x', SM.StreamConfig)
@example(b'{"config":{"ack_policy":"explicit","filter_subject":"\\u003e"}}', CM.CreateConsumerRequest)
def test_decode_fields_fast_equals_exact(data, cls):
    assert outcome(gojson.decode_fields, data, cls) == outcome(exact_decode, data, cls)


@SETTINGS
@given(bodies(), st.sampled_from(CLASSES))
@example(b'{"seq":1} ', AM.MsgGetRequest)
@example(b'{"seq":1}{', AM.MsgGetRequest)
def test_unmarshal_fields_fast_equals_exact(data, cls):
    assert outcome(gojson.unmarshal_fields, data, cls) == outcome(exact_unmarshal, data, cls)


@SETTINGS
@given(bodies())
def test_is_empty_request_fast_equals_exact(data):
    assert gojson.is_empty_request(data) == exact_is_empty(data)


def test_deep_nesting_goes_to_the_exact_parser():
    # Deeper than the C decoder's recursion allows, shallower than Go's limit:
    # decoded (Go's type error), then one level past Go's limit.
    for depth in (3000, gojson.jsonbound.MAX_DEPTH + 1):
        data = b'{"subjects":' + b"[" * depth + b"]" * depth + b"}"
        assert outcome(gojson.decode_fields, data, SM.StreamConfig) == \
            outcome(exact_decode, data, SM.StreamConfig)


def test_large_valid_request_is_fast():
    """A 1 MB-class STREAM.CREATE decodes in a small multiple of json.loads,
    not the ~0.25 s the Parser needs (measured in tools/bench/gojson.py)."""
    subjects = ["orders.%d.\\u003e" % i for i in range(50_000)]
    body = ('{"name":"BIG","retention":"limits","storage":"file","subjects":["%s"]}'
            % '","'.join(subjects)).encode()
    fields = gojson.decode_fields(body, SM.StreamConfig)
    assert fields["subjects"][-1] == "orders.49999.>"
    assert fields == exact_decode(body, SM.StreamConfig)
    t0 = time.perf_counter()
    json.loads(body)
    base = time.perf_counter() - t0
    t0 = time.perf_counter()
    gojson.decode_fields(body, SM.StreamConfig)
    took = time.perf_counter() - t0
    assert took < max(10 * base, 0.05), (took, base)
