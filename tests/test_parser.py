"""The sans-IO parser on its own: bytes in, ops out, no sockets."""

import pytest
from hypothesis import given, settings, strategies as st

from natsbroker.protocol import parser as P
from natsbroker.protocol.parser import Parser


def parse(data, **kw):
    return Parser(**kw).feed(data)


def test_pub_sub_unsub_ping_pong():
    ops = parse(b"SUB foo 1\r\nSUB foo q 2\r\nPUB foo 5\r\nhello\r\nPUB foo r 0\r\n\r\n"
                b"UNSUB 1\r\nUNSUB 2 10\r\nPING\r\nPONG\r\n")
    assert ops == [
        (P.OP_SUB, b"foo", None, b"1"),
        (P.OP_SUB, b"foo", b"q", b"2"),
        (P.OP_PUB, b"foo", None, b"hello"),
        (P.OP_PUB, b"foo", b"r", b""),
        (P.OP_UNSUB, b"1", None),
        (P.OP_UNSUB, b"2", 10),
        (P.OP_PING,),
        (P.OP_PONG,),
    ]


def test_hpub():
    raw = b"NATS/1.0\r\nA: b\r\n\r\nhi"
    ops = parse(b"HPUB foo reply 18 20\r\n" + raw + b"\r\n")
    assert ops == [(P.OP_HPUB, b"foo", b"reply", 18, raw)]


def test_connect_keeps_raw_json():
    assert parse(b'CONNECT {"verbose":false}\r\n') == [(P.OP_CONNECT, b'{"verbose":false}')]


def test_case_insensitive_and_whitespace_runs():
    ops = parse(b"sub \t foo\t\t 1\r\npUb  foo \t 1\r\nx\r\nPiNg\r\n")
    assert ops == [(P.OP_SUB, b"foo", None, b"1"), (P.OP_PUB, b"foo", None, b"x"), (P.OP_PING,)]


def test_bare_ops_ignore_their_tail():
    assert parse(b"PINGX\r\nPONG whatever\r\n+OKAY\n") == [(P.OP_PING,), (P.OP_PONG,), (P.OP_OK,)]


def test_lf_only_line_end():
    assert parse(b"PING\nSUB a 1\n") == [(P.OP_PING,), (P.OP_SUB, b"a", None, b"1")]


@pytest.mark.parametrize("data, message", [
    (b"FOO\r\n", P.ERR_UNKNOWN_OP),
    (b"\r\n", P.ERR_UNKNOWN_OP),
    (b" PING\r\n", P.ERR_UNKNOWN_OP),
    (b"PIN\r\n", P.ERR_UNKNOWN_OP),
    (b"SUB\r\n", P.ERR_UNKNOWN_OP),
    (b"SUBX\r\n", P.ERR_UNKNOWN_OP),
    (b"MSG foo 1 1\r\na\r\n", P.ERR_UNKNOWN_OP),
    (b"CONNECT\r\n", None),
    (b"CONNECTX\r\n", None),
    (b"SUB foo\r\n", None),
    (b"SUB a b c d\r\n", None),
    (b"PUB foo x\r\n", None),
    (b"PUB foo -1\r\n", None),
    (b"HPUB foo 5 3\r\n", None),
    (b"PUB foo 1\r\naXX", P.ERR_UNKNOWN_OP),
    (b"PUB foo 2000000\r\n", P.ERR_MAX_PAYLOAD),
    (b"SUB " + b"a" * 4095 + b" 1\r\n", P.ERR_MAX_CONTROL_LINE),
])
def test_errors(data, message):
    ops = parse(data)
    assert ops[-1] == (P.OP_ERROR, message)


def test_error_is_immediate_without_newline():
    # An impossible op name is refused before its line ends.
    assert parse(b"XY") == [(P.OP_ERROR, P.ERR_UNKNOWN_OP)]
    assert parse(b"SUB " + b"a" * 4097) == [(P.OP_ERROR, P.ERR_MAX_CONTROL_LINE)]
    assert parse(b"SUB " + b"a" * 4096) == []


def test_max_payload_refused_before_payload_arrives():
    p = Parser(max_payload=10)
    assert p.feed(b"PUB foo 11\r\n") == [(P.OP_ERROR, P.ERR_MAX_PAYLOAD)]
    assert p.dead and p.feed(b"x" * 11 + b"\r\n") == []


def test_control_line_limit_is_on_the_argument():
    p = Parser(max_control_line=10)
    assert p.feed(b"SUB 12345678 9\r\n") == [(P.OP_SUB, b"12345678", None, b"9")]
    assert p.feed(b"SUB 12345678 90\r\n") == [(P.OP_ERROR, P.ERR_MAX_CONTROL_LINE)]


def test_long_ping_tail_is_not_buffered():
    p = Parser()
    assert p.feed(b"PING") == []
    for _ in range(100):
        assert p.feed(b" " * 10000) == []
    assert len(p._buf) == 0
    assert p.feed(b"\r\n") == [(P.OP_PING,)]


def test_client_side_msg_hmsg():
    p = Parser(client=True)
    ops = p.feed(b"INFO {}\r\nMSG foo 1 r 2\r\nhi\r\nHMSG foo 2 12 14\r\nNATS/1.0\r\n\r\nab\r\n+OK\r\n-ERR 'x'\r\n")
    assert ops == [(P.OP_INFO, b"{}"), (P.OP_MSG, b"foo", b"1", b"r", b"hi"),
                   (P.OP_HMSG, b"foo", b"2", None, 12, b"NATS/1.0\r\n\r\nab"),
                   (P.OP_OK,), (P.OP_ERR, b"'x'")]


# -- properties ---------------------------------------------------------------

token = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)
subject = st.lists(token, min_size=1, max_size=4).map(".".join).map(str.encode)
payload = st.binary(max_size=64)
ws = st.sampled_from([b" ", b"\t", b"  ", b" \t "])


@st.composite
def op_bytes(draw):
    kind = draw(st.sampled_from(["pub", "hpub", "sub", "unsub", "ping", "pong", "connect"]))
    s = draw(ws)
    if kind == "pub":
        subj, body = draw(subject), draw(payload)
        reply = draw(st.one_of(st.none(), subject))
        head = b"PUB" + s + subj + s + (reply + s if reply else b"") + b"%d" % len(body)
        return head + b"\r\n" + body + b"\r\n", (P.OP_PUB, subj, reply, body)
    if kind == "hpub":
        subj, body = draw(subject), draw(payload)
        hdr = b"NATS/1.0\r\nK: " + draw(token).encode() + b"\r\n\r\n"
        raw = hdr + body
        return (b"HPUB" + s + subj + s + b"%d %d\r\n" % (len(hdr), len(raw)) + raw + b"\r\n",
                (P.OP_HPUB, subj, None, len(hdr), raw))
    if kind == "sub":
        subj, sid = draw(subject), draw(token).encode()
        queue = draw(st.one_of(st.none(), token.map(str.encode)))
        return (b"SUB" + s + subj + s + (queue + s if queue else b"") + sid + b"\r\n",
                (P.OP_SUB, subj, queue, sid))
    if kind == "unsub":
        sid = draw(token).encode()
        mx = draw(st.one_of(st.none(), st.integers(0, 1000)))
        return (b"UNSUB" + s + sid + (b" %d" % mx if mx is not None else b"") + b"\r\n",
                (P.OP_UNSUB, sid, mx))
    if kind == "ping":
        return b"PING\r\n", (P.OP_PING,)
    if kind == "pong":
        return b"pong\r\n", (P.OP_PONG,)
    return b'CONNECT {"verbose":false}\r\n', (P.OP_CONNECT, b'{"verbose":false}')


@settings(max_examples=300, deadline=None)
@given(st.lists(op_bytes(), min_size=1, max_size=12), st.data())
def test_any_split_yields_the_same_ops(items, data):
    stream = b"".join(b for b, _ in items)
    expected = [op for _, op in items]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    p = Parser()
    ops = []
    prev = 0
    for c in cuts + [len(stream)]:
        ops += p.feed(stream[prev:c])
        prev = c
    assert ops == expected


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_garbage_never_raises(chunks):
    p = Parser(max_control_line=64, max_payload=128)
    for c in chunks:
        ops = p.feed(c)
        for op in ops:
            assert op[0] in P.OP_NAMES
        if ops and ops[-1][0] == P.OP_ERROR:
            assert p.dead
            assert ops[-1][1] in (None, P.ERR_UNKNOWN_OP, P.ERR_MAX_CONTROL_LINE, P.ERR_MAX_PAYLOAD)
    # Buffered input stays bounded by the limits, whatever came in.
    assert len(p._buf) <= 64 + 128 + 64


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_after_valid_ops_keeps_them(junk):
    p = Parser()
    ops = p.feed(b"PING\r\nSUB a 1\r\n" + junk)
    assert ops[:2] == [(P.OP_PING,), (P.OP_SUB, b"a", None, b"1")]


def test_large_payload_in_many_reads():
    """A payload arriving in many reads is collected, then delivered whole
    with what follows it (the pieces are joined once, not on every read)."""
    size = 8 * 1024 * 1024
    payload = bytes(range(256)) * (size // 256)
    data = b"PUB big r %d\r\n" % size + payload + b"\r\nPING\r\nPUB s 2\r\nok\r\n"
    p = Parser(max_payload=16 * 1024 * 1024)
    ops = []
    for i in range(0, len(data), 65536):
        got = p.feed(data[i:i + 65536])
        if i + 65536 < len(b"PUB big r %d\r\n" % size) + size + 2:
            assert got == []
        ops += got
    assert ops == [(P.OP_PUB, b"big", b"r", payload), (P.OP_PING,), (P.OP_PUB, b"s", None, b"ok")]
