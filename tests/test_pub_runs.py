"""PUBs that repeat their control line: the parser's runs and their delivery.

A connection's parser hands out consecutive PUBs with the same control line
as one ``OP_PUBS`` op, and a run is routed and framed in one go where that
makes no difference. These tests check that it makes none: the parser's ops,
expanded, are exactly those of a parser without runs, however the stream is
cut; and what clients receive is byte for byte what nats-server sends them.
"""

import pytest
from hypothesis import given, settings, strategies as st

from natsbroker.protocol import parser as P
from natsbroker.protocol.parser import Parser
from tests.support.raw import exchange

C = b'CONNECT {"verbose":false,"pedantic":false}\r\n'


def expand(ops):
    out = []
    for op in ops:
        if op[0] == P.OP_PUBS:
            out += [(P.OP_PUB, op[1], op[2], raw) for raw in op[3]]
        else:
            out.append(op)
    return out


def feed_cuts(parser, stream, cuts):
    ops, prev = [], 0
    for c in sorted(cuts) + [len(stream)]:
        ops += parser.feed(stream[prev:c])
        prev = c
    return ops


# Frames that repeat (the case runs are for), spelled the usual way or not,
# with others and junk in between.
frame = st.sampled_from([
    b"PUB a 3\r\nabc\r\n", b"PUB a 3\r\nxyz\r\n", b"PUB a 3\r\nPUB\r\n", b"PUB a r 3\r\nabc\r\n",
    b"PUB a 03\r\nabc\r\n", b"PUB  a 3\r\nabc\r\n", b"pub a 3\r\nabc\r\n", b"PUB a 2\r\nab\r\n",
    b"PUB b 3\r\nabc\r\n", b"PUB a 0\r\n\r\n", b"PING\r\n", b"SUB a 1\r\n",
    b"HPUB a 12 15\r\nNATS/1.0\r\n\r\nabc\r\n", b"PUB a 3\r\nabcd\r\n", b"PUB a 3\r\nab",
    b"PUB a 99999\r\n", b"\r\n", b"X",
])


@settings(max_examples=400, deadline=None)
@given(st.lists(frame, max_size=40), st.data(), st.sampled_from([16, 64, 4096]))
def test_runs_expand_to_the_same_ops(frames, data, max_control_line):
    stream = b"".join(frames)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8))
    want = feed_cuts(Parser(max_control_line=max_control_line, max_payload=1024), stream, [])
    plain = Parser(max_control_line=max_control_line, max_payload=1024)
    runs = Parser(max_control_line=max_control_line, max_payload=1024, runs=True)
    assert feed_cuts(plain, stream, cuts) == want
    got = feed_cuts(runs, stream, cuts)
    assert expand(got) == want
    assert runs.dead == plain.dead
    for op in got:
        if op[0] == P.OP_PUBS:
            assert len({len(raw) for raw in op[3]}) == 1 and op[3]


def test_a_repeated_line_becomes_one_run():
    frames = b"".join(b"PUB a.b 3\r\n%03d\r\n" % i for i in range(10))
    ops = Parser(runs=True).feed(b"PING\r\n" + frames + b"PING\r\n")
    # The first two are parsed in full (the second shows the line repeats).
    assert ops == [(P.OP_PING,), (P.OP_PUB, b"a.b", None, b"000"), (P.OP_PUB, b"a.b", None, b"001"),
                   (P.OP_PUBS, b"a.b", None, [b"%03d" % i for i in range(2, 10)]), (P.OP_PING,)]


def test_limit_lowered_between_reads_is_applied_to_a_repeated_line():
    # (A JWT user's max_payload can change after CONNECT.)
    p = Parser(runs=True)
    assert len(expand(p.feed(b"PUB a 3\r\nabc\r\n" * 3))) == 3
    p.max_payload = 2
    assert p.feed(b"PUB a 3\r\nabc\r\n") == [(P.OP_ERROR, P.ERR_MAX_PAYLOAD)]


def test_bad_crlf_inside_a_run():
    p = Parser(runs=True)
    ops = p.feed(b"PUB a 3\r\nabc\r\n" * 4 + b"PUB a 3\r\nabcX\r\n")
    assert expand(ops) == [(P.OP_PUB, b"a", None, b"abc")] * 4 + [(P.OP_ERROR, P.ERR_UNKNOWN_OP)]
    assert p.dead


# -- delivery, against nats-server ---------------------------------------

def _pubs(subject, n, size=5, reply=b""):
    r = b" " + reply if reply else b""
    return b"".join(b"PUB %s%s %d\r\n%s\r\n" % (subject, r, size, (b"%05d" % i)[-size:].rjust(size, b"x"))
                    for i in range(n))


SCENARIOS = {
    "one-sub": C + b"SUB foo 1\r\n" + _pubs(b"foo", 50) + b"PING\r\n",
    # one connection, two subscriptions: interleaved message by message
    "two-subs-one-connection": C + b"SUB foo 1\r\nSUB foo 2\r\n" + _pubs(b"foo", 30)
    + b"PING\r\n",
    # auto-unsubscribe in the middle of a run
    "max-msgs-mid-run": C + b"SUB foo 1\r\nUNSUB 1 7\r\nSUB foo 2\r\n" + _pubs(b"foo", 20) + b"PING\r\n",
    # (a one-member group: nats-server picks members at random)
    "queue-group": C + b"SUB foo q 1\r\nSUB foo 3\r\n" + _pubs(b"foo", 20) + b"PING\r\n",
    "no-echo": b'CONNECT {"verbose":false,"pedantic":false,"echo":false}\r\nSUB foo 1\r\n'
    + _pubs(b"foo", 20) + b"PING\r\n",
    "verbose": b'CONNECT {"verbose":true,"pedantic":false}\r\nSUB foo 1\r\n' + _pubs(b"foo", 10)
    + b"PING\r\n",
    "pedantic-invalid-subject": b'CONNECT {"verbose":false,"pedantic":true}\r\nSUB foo.* 1\r\n'
    + _pubs(b"foo.*", 6) + b"PING\r\n",
    "reply": C + b"SUB foo 1\r\n" + _pubs(b"foo", 10, reply=b"bar") + b"PING\r\n",
    "reserved-reply": C + b"SUB foo 1\r\n" + _pubs(b"foo", 5, reply=b"_R_.x") + b"PING\r\n",
    "headers-client": b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\nSUB foo 1\r\n'
    + _pubs(b"foo", 10) + b"PING\r\n",
    "run-then-bad-crlf": C + b"SUB foo 1\r\n" + _pubs(b"foo", 10) + b"PUB foo 5\r\nabcdeX\r\n",
    "run-mixed": C + b"SUB > 1\r\n" + _pubs(b"a", 5) + b"PING\r\n" + _pubs(b"a", 5)
    + _pubs(b"b", 4, size=2) + b"UNSUB 1\r\n" + _pubs(b"a", 5) + b"PING\r\n",
}


def _run(server, data):
    out, closed = exchange(server.port, data)
    lines = [line for line in out.split(b"\r\n") if not line.startswith(b"INFO ")]
    # The copies of one message for several subscriptions of the connection
    # come one after the other, but nats-server's order among them varies
    # from run to run: they are sorted (frame = MSG line + payload).
    frames, i = [], 0
    while i < len(lines):
        if lines[i].startswith(b"MSG ") and i + 1 < len(lines):
            frames.append((lines[i + 1], lines[i]))
            i += 2
        else:
            frames.append((None, lines[i]))
            i += 1
    out, group = [], []
    for f in frames + [(None, None)]:
        if group and (f[0] is None or f[0] != group[0][0]):
            out += sorted(group)
            group = []
        if f[0] is not None:
            group.append(f)
        elif f[1] is not None:
            out.append(f)
    return out, closed


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_bytes_as_nats_server(name, nats_server, broker_proc):
    want = _run(nats_server, SCENARIOS[name])
    got = _run(broker_proc, SCENARIOS[name])
    assert got == want
    # (the scenario delivers what it is meant to)
    msgs = sum(1 for payload, _ in want[0] if payload is not None)
    assert msgs >= 3 or name in ("no-echo", "reserved-reply") or any(b"-ERR" in line for _, line in want[0])


# -- in process: counters, and internal subscribers see every message --------

class _Setup:
    def __init__(self):
        from twisted.internet.task import Clock

        from natsbroker.auth.users import Authenticator
        from natsbroker.broker import Broker
        from natsbroker.config.model import ServerConfig
        from natsbroker.discovery import plugins_for
        self.config = ServerConfig()
        self.broker = Broker(self.config, Clock())
        for p in plugins_for(self.config):
            self.broker.add_plugin(p)
            p.start(self.broker)
        self.auth = Authenticator(self.config)

    def connect(self):
        from twisted.internet.testing import StringTransport

        from natsbroker.connection.client import ClientProtocol
        proto = ClientProtocol(self.broker, self.auth)
        t = StringTransport()
        proto.makeConnection(t)
        proto.dataReceived(C)
        t.clear()
        return proto, t


def test_counters_count_every_message_of_a_run():
    s = _Setup()
    pub, _ = s.connect()
    sub, t = s.connect()
    sub.dataReceived(b"SUB foo 1\r\n")
    pub.dataReceived(_pubs(b"foo", 200))
    assert pub.parser.runs
    assert pub.in_msgs == 200 and pub.in_bytes == 1000
    assert sub.out_msgs == 200 and sub.out_bytes == 1000
    assert sub.subs[b"1"].delivered == 200
    assert t.value() == b"".join(b"MSG foo 1 5\r\n%05d\r\n" % i for i in range(200))


def test_internal_subscriber_sees_every_message_of_a_run():
    # A plugin's subscription (an internal sink) next to a client's: the run
    # goes message by message, and both see all of it, in order.
    s = _Setup()
    seen = []
    s.broker.subscribe("foo", lambda sub, subject, reply, hdr_len, raw: seen.append(raw))
    pub, _ = s.connect()
    sub, t = s.connect()
    sub.dataReceived(b"SUB foo 1\r\n")
    pub.dataReceived(_pubs(b"foo", 100))
    assert seen == [b"%05d" % i for i in range(100)]
    assert t.value().count(b"MSG foo 1 5\r\n") == 100
    assert pub.in_msgs == 100


def test_a_pub_filter_without_runs_sees_every_pub():
    # A plugin that filters PUBs but knows nothing of runs gets every PUB as
    # an op of its own; pubsub still delivers them all.
    from zope.interface import implementer

    from natsbroker.interfaces import IBrokerPlugin, IClientOpFilter

    @implementer(IBrokerPlugin, IClientOpFilter)
    class Counter:
        name = "counter"
        got = []

        def start(self, broker):
            pass

        def stop(self):
            pass

        def client_op_filters(self, client):
            def count(op):
                self.got.append(op)
                return op
            return {P.OP_PUB: count}

    s = _Setup()
    s.broker.add_plugin(Counter())
    pub, _ = s.connect()
    sub, t = s.connect()
    assert not pub.parser.runs
    sub.dataReceived(b"SUB foo 1\r\n")
    pub.dataReceived(_pubs(b"foo", 50))
    assert [op[3] for op in Counter.got] == [b"%05d" % i for i in range(50)]
    assert t.value().count(b"MSG foo 1 5\r\n") == 50


def test_a_second_pub_handler_does_not_replace_pubsub():
    # Before, the op tables were merged with dict.update: a plugin's OP_PUB
    # silently replaced pubsub's and every PUB was dropped.
    from zope.interface import implementer

    from natsbroker.interfaces import IBrokerPlugin, IClientOps

    @implementer(IBrokerPlugin, IClientOps)
    class Thief:
        name = "thief"

        def start(self, broker):
            pass

        def stop(self):
            pass

        def client_ops(self, client):
            return {P.OP_PUB: lambda op: None}

    s = _Setup()
    s.broker.add_plugin(Thief())
    pub, _ = s.connect()
    sub, t = s.connect()
    assert pub.parser.runs
    sub.dataReceived(b"SUB foo 1\r\n")
    pub.dataReceived(_pubs(b"foo", 20))
    assert t.value().count(b"MSG foo 1 5\r\n") == 20
