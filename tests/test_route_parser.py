"""The sans-IO route parser (natsbroker.protocol.route_parser): every form
nats-server 2.15 sends on a no-pool route, its argument errors, and
properties over arbitrary splits of the byte stream."""

import pytest
from hypothesis import given, settings, strategies as st

from natsbroker.protocol import route_parser as R
from natsbroker.protocol.route_parser import RouteParser


def ops(data):
    return RouteParser().feed(data)


def test_info_with_and_without_the_space_before_crlf():
    # Initial INFO has " \r\n", gossip INFO "\r\n": both give the JSON alone.
    assert ops(b'INFO {"server_id":"A"} \r\nINFO {"server_id":"B"}\r\n') == [
        (R.OP_INFO, b'{"server_id":"A"}'), (R.OP_INFO, b'{"server_id":"B"}')]


def test_connect_ping_pong_ok_err_case_insensitive():
    assert ops(b'connect {"name":"x"}\r\nPing\r\npong\r\n+ok\r\n-ERR \'Stale Connection\'\r\n') == [
        (R.OP_CONNECT, b'{"name":"x"}'), (R.OP_PING,), (R.OP_PONG,), (R.OP_OK,),
        (R.OP_ERR, b"'Stale Connection'")]


def test_rs_plus_minus_with_account_and_queue_weight():
    # The wire samples of the reference note.
    assert ops(b"RS+ $G foo\r\nRS+ $G bar q1 1\r\nRS+ $G bar q1 2\r\nRS- $G bar q1\r\nRS- $G foo\r\n") == [
        (R.OP_RSUB, None, b"$G", b"foo", None, 0),
        (R.OP_RSUB, None, b"$G", b"bar", b"q1", 1),
        (R.OP_RSUB, None, b"$G", b"bar", b"q1", 2),
        (R.OP_RUNSUB, None, b"$G", b"bar", b"q1"),
        (R.OP_RUNSUB, None, b"$G", b"foo", None)]


def test_ls_plus_has_an_origin_ls_minus_without_lnocu_has_none():
    assert ops(b"LS+ leafc $G lbar lq 1\r\nLS+ leafc $G lfoo\r\nLS- $G lfoo\r\n") == [
        (R.OP_RSUB, b"leafc", b"$G", b"lbar", b"lq", 1),
        (R.OP_RSUB, b"leafc", b"$G", b"lfoo", None, 0),
        (R.OP_RUNSUB, None, b"$G", b"lfoo", None)]


@pytest.mark.parametrize("line, msg", [
    (b"RMSG $G foo 5\r\nhello\r\n", (None, b"$G", b"foo", None, (), 0, b"hello")),
    (b"RMSG $G foo rep.1 5\r\nhello\r\n", (None, b"$G", b"foo", b"rep.1", (), 0, b"hello")),
    (b"RMSG $G bar + rep.3 q1 2\r\nhi\r\n", (None, b"$G", b"bar", b"rep.3", (b"q1",), 0, b"hi")),
    (b"RMSG $G bar | q1 q2 2\r\nhi\r\n", (None, b"$G", b"bar", None, (b"q1", b"q2"), 0, b"hi")),
    (b"RMSG $G bar + rep 2\r\nhi\r\n", (None, b"$G", b"bar", b"rep", (), 0, b"hi")),
    (b"HMSG $G foo rep.2 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
     (None, b"$G", b"foo", b"rep.2", (), 12, b"NATS/1.0\r\n\r\nhi")),
    (b"HMSG $G foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", (None, b"$G", b"foo", None, (), 12, b"NATS/1.0\r\n\r\nhi")),
    (b"HMSG $G baz.x | q2 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
     (None, b"$G", b"baz.x", None, (b"q2",), 12, b"NATS/1.0\r\n\r\nhi")),
    (b"HMSG $G bar + rep.4 q1 12 13\r\nNATS/1.0\r\n\r\nh\r\n",
     (None, b"$G", b"bar", b"rep.4", (b"q1",), 12, b"NATS/1.0\r\n\r\nh")),
    (b"LMSG leafc $G qq.py | grp 0 3\r\nabc\r\n", (b"leafc", b"$G", b"qq.py", None, (b"grp",), 0, b"abc")),
    (b"LMSG leafc $G foo.py r.1 0 3\r\nabc\r\n", (b"leafc", b"$G", b"foo.py", b"r.1", (), 0, b"abc")),
])
def test_message_forms(line, msg):
    assert ops(line) == [(R.OP_RMSG,) + msg]


@pytest.mark.parametrize("line", [
    b"RS+ $G foo q1\r\n",  # a queue without a weight (nats-server closes, no -ERR)
    b"RS+ $G\r\n",
    b"RS- $G\r\n",
    b"RMSG $G foo x y 2\r\n",  # a bad reply indicator
    b"RMSG $G 2\r\n",
    b"RMSG $G foo abc\r\n",  # not a size
    b"HMSG $G foo 5 3\r\n",  # headers longer than the message
    b"RMSG $G foo 2\r\nabc\r\n",  # the payload is not followed by CRLF
])
def test_argument_errors_close_without_err(line):
    assert ops(line)[-1] == (R.OP_ERROR, None)


def test_unknown_op_gets_err_even_before_the_newline():
    assert ops(b"XYZ") == [(R.OP_ERROR, R.ERR_UNKNOWN_OP)]
    assert ops(b"SUB foo 1\r\n") == [(R.OP_ERROR, R.ERR_UNKNOWN_OP)]


def test_control_line_limit_is_checked_before_the_newline():
    p = RouteParser(max_control_line=100)
    assert p.feed(b"RS+ $G " + b"a" * 200) == [(R.OP_ERROR, R.ERR_MAX_CONTROL_LINE)]
    # Dead after an error.
    assert p.feed(b"PING\r\n") == []


def test_no_payload_limit_on_a_route():
    big = b"x" * (3 * 1024 * 1024)
    assert ops(b"RMSG $G big %d\r\n%s\r\n" % (len(big), big))[0][-1] == big


def test_pingx_is_a_ping():
    # nats-server's state machine skips what follows PING up to the newline.
    assert ops(b"PINGX\r\n") == [(R.OP_PING,)]


# -- properties --------------------------------------------------------------------------

_token = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8).map(str.encode)
_subject = st.lists(_token, min_size=1, max_size=4).map(b".".join)


@st.composite
def _route_op(draw):
    """(bytes on the wire, the op the parser must give)."""
    kind = draw(st.sampled_from(["rs+", "rsq", "rs-", "rmsg", "hmsg", "ping", "info"]))
    acc = draw(st.sampled_from([b"$G", b"$SYS", b"ACC"]))
    subj = draw(_subject)
    if kind == "rs+":
        return b"RS+ %s %s\r\n" % (acc, subj), (R.OP_RSUB, None, acc, subj, None, 0)
    if kind == "rsq":
        q, w = draw(_token), draw(st.integers(1, 1000))
        return b"RS+ %s %s %s %d\r\n" % (acc, subj, q, w), (R.OP_RSUB, None, acc, subj, q, w)
    if kind == "rs-":
        return b"RS- %s %s\r\n" % (acc, subj), (R.OP_RUNSUB, None, acc, subj, None)
    if kind == "ping":
        return b"PING\r\n", (R.OP_PING,)
    if kind == "info":
        return b'INFO {"server_id":"%s"}\r\n' % subj, (R.OP_INFO, b'{"server_id":"%s"}' % subj)
    payload = draw(st.binary(max_size=64))
    reply = draw(st.one_of(st.none(), _subject))
    queues = tuple(draw(st.lists(_token, max_size=3)))
    if queues:
        mid = (b"+ " + reply + b" " if reply else b"| ") + b" ".join(queues) + b" "
    else:
        mid = reply + b" " if reply else b""
    if kind == "rmsg":
        wire = b"RMSG %s %s %s%d\r\n%s\r\n" % (acc, subj, mid, len(payload), payload)
        return wire, (R.OP_RMSG, None, acc, subj, reply, queues, 0, payload)
    hdr = b"NATS/1.0\r\nK: v\r\n\r\n"
    raw = hdr + payload
    wire = b"HMSG %s %s %s%d %d\r\n%s\r\n" % (acc, subj, mid, len(hdr), len(raw), raw)
    return wire, (R.OP_RMSG, None, acc, subj, reply, queues, len(hdr), raw)


@settings(max_examples=200, deadline=None)
@given(st.lists(_route_op(), min_size=1, max_size=12), st.data())
def test_any_split_of_the_stream_gives_the_same_ops(pairs, data):
    stream = b"".join(w for w, _ in pairs)
    expected = [op for _, op in pairs]
    assert ops(stream) == expected
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    p = RouteParser()
    got = []
    last = 0
    for c in cuts + [len(stream)]:
        got += p.feed(stream[last:c])
        last = c
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_junk_never_raises_and_error_is_last(junk):
    out = RouteParser().feed(junk)
    for op in out[:-1]:
        assert op[0] != R.OP_ERROR
    assert all(isinstance(op, tuple) and op[0] in R.OP_NAMES for op in out)


def _general_only(stream):
    """The ops of the general line parser alone (the RMSG fast path off)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(R, "_RMSG_FAST", lambda buf, pos: None)
        return RouteParser().feed(stream)


_field = st.binary(min_size=0, max_size=6).filter(lambda b: b"\n" not in b)


@settings(max_examples=300, deadline=None)
@given(st.lists(_route_op(), min_size=1, max_size=12))
def test_the_rmsg_fast_path_gives_what_the_general_parser_gives(pairs):
    stream = b"".join(w for w, _ in pairs)
    assert RouteParser().feed(stream) == _general_only(stream)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_field, st.sampled_from([b" ", b"  ", b"\t", b"+", b"|", b"5",
                                                   b"12", b"\r", b"\r\n"])),
                min_size=1, max_size=6),
       st.binary(max_size=20))
def test_rmsg_like_junk_gets_the_same_answer_from_both_paths(fields, tail):
    # Lines that look like the fast path's RMSG but may not be one (odd
    # spacing, missing fields, signs, sizes that lie about the payload).
    stream = b"RMSG " + b" ".join(fields) + b"\r\n" + tail
    assert RouteParser().feed(stream) == _general_only(stream)


def test_a_long_rmsg_line_is_held_to_the_control_line_limit():
    p = RouteParser(max_control_line=100)
    line = b"RMSG $G " + b"s" * 200 + b" 2\r\nhi\r\n"
    assert p.feed(line) == [(R.OP_ERROR, R.ERR_MAX_CONTROL_LINE)]


def test_many_messages_in_one_read():
    msgs = [b"RMSG $G s.%d r.%d %d\r\n%s\r\n" % (i, i, i % 7, b"x" * (i % 7)) for i in range(500)]
    got = RouteParser().feed(b"".join(msgs))
    assert [(o[3], o[4], o[-1]) for o in got] == [
        (b"s.%d" % i, b"r.%d" % i, b"x" * (i % 7)) for i in range(500)]
