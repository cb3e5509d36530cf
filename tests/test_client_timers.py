"""Keepalive, auth timeout and limits, driven by task.Clock instead of sleeps."""

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from zope.interface.verify import verifyObject

from natsbroker.auth.users import Authenticator
from natsbroker.broker import Broker
from natsbroker.config.model import Authorization, ServerConfig
from natsbroker.connection.client import ClientProtocol
from natsbroker.discovery import plugins_for
from natsbroker.interfaces import IBroker, IClient


class Setup:
    def __init__(self, **kw):
        self.clock = Clock()
        self.config = ServerConfig(**kw)
        self.broker = Broker(self.config, self.clock)
        for p in plugins_for(self.config):
            self.broker.add_plugin(p)
            p.start(self.broker)
        self.auth = Authenticator(self.config)

    def connect(self):
        proto = ClientProtocol(self.broker, self.auth)
        t = StringTransport()
        proto.makeConnection(t)
        proto.transport = t
        t.protocol = proto
        return proto, t


def lines(t):
    out = t.value()
    t.clear()
    return [line for line in out.split(b"\r\n") if line and not line.startswith(b"INFO ")]


def test_interfaces():
    s = Setup()
    proto, _ = s.connect()
    verifyObject(IBroker, s.broker)
    verifyObject(IClient, proto)


def test_first_ping_early_then_stale_connection():
    s = Setup(ping_interval=10, ping_max=2)
    proto, t = s.connect()
    proto.dataReceived(b'CONNECT {"verbose":false}\r\n')
    lines(t)
    s.clock.advance(1.9)
    assert lines(t) == []
    s.clock.advance(0.1)  # the first PING comes after 2 s, to measure RTT
    assert lines(t) == [b"PING"]
    s.clock.advance(10)
    assert lines(t) == [b"PING"]
    s.clock.advance(10)
    assert lines(t) == [b"-ERR 'Stale Connection'"]
    assert t.disconnecting
    assert s.broker.stats.stale_connections == 1


def test_rtt_measured_and_traffic_delays_pings():
    s = Setup(ping_interval=10, ping_max=2)
    proto, t = s.connect()
    proto.dataReceived(b'CONNECT {"verbose":false}\r\n')
    s.clock.advance(2)
    assert lines(t) == [b"PING"]
    s.clock.advance(0.25)
    proto.dataReceived(b"PONG\r\n")
    assert proto.rtt == 0.25
    # Traffic within each interval means no PING is needed.
    for _ in range(3):
        s.clock.advance(9)
        proto.dataReceived(b"PUB x 0\r\n\r\n")
        s.clock.advance(1)
        assert lines(t) == []
    # Silence: PINGs resume.
    s.clock.advance(10)
    assert lines(t) == [b"PING"]


def test_pong_resets_pings_out():
    s = Setup(ping_interval=10, ping_max=1)
    proto, t = s.connect()
    proto.dataReceived(b'CONNECT {"verbose":false}\r\n')
    for _ in range(5):
        s.clock.advance(10)
        proto.dataReceived(b"PONG\r\n")
        s.clock.advance(10)
        proto.dataReceived(b"PONG\r\n")
    assert not t.disconnecting


def test_auth_timeout():
    s = Setup(authorization=Authorization(user="u", password="p", timeout=1.5))
    proto, t = s.connect()
    s.clock.advance(1.4)
    assert lines(t) == []
    s.clock.advance(0.2)
    assert lines(t) == [b"-ERR 'Authentication Timeout'"]
    assert t.disconnecting


def test_auth_timer_cancelled_by_connect():
    s = Setup(authorization=Authorization(user="u", password="p", timeout=1))
    proto, t = s.connect()
    proto.dataReceived(b'CONNECT {"verbose":false,"user":"u","pass":"p"}\r\n')
    s.clock.advance(5)
    assert not t.disconnecting


def test_max_connections():
    s = Setup(max_connections=1)
    a, ta = s.connect()
    b, tb = s.connect()
    assert lines(tb) == [b"-ERR 'maximum connections exceeded'"]
    assert tb.disconnecting and not ta.disconnecting
    assert b.cid not in s.broker._clients


def test_closed_connection_drops_its_subscriptions():
    s = Setup()
    proto, t = s.connect()
    before = s.broker.sublist.count  # (plugins' own subscriptions)
    proto.dataReceived(b'CONNECT {"verbose":false}\r\nSUB a 1\r\nSUB b q 2\r\n')
    assert s.broker.sublist.count == before + 2
    proto.connectionLost(None)
    assert s.broker.sublist.count == before
    assert s.broker.closed_clients[-1]["cid"] == proto.cid


def test_slow_consumer_when_paused_past_max_pending():
    s = Setup(max_pending=10000)
    sub, ts = s.connect()
    pub, tp = s.connect()
    sub.dataReceived(b'CONNECT {"verbose":false}\r\nSUB x 1\r\n')
    pub.dataReceived(b'CONNECT {"verbose":false}\r\n')
    sub.pauseProducing()  # what the transport does when the socket stops draining
    body = b"x" * 1000
    for _ in range(9):
        pub.dataReceived(b"PUB x 1000\r\n" + body + b"\r\n")
    assert not ts.disconnecting
    pub.dataReceived(b"PUB x 1000\r\n" + body + b"\r\n")
    assert ts.value().endswith(b"-ERR 'Slow Consumer'\r\n")
    assert sub.closed and sub.close_reason.startswith("Slow Consumer")
    assert s.broker.stats.slow_consumers == 1
    assert not tp.disconnecting


def test_write_deadline_cuts_a_stalled_reader():
    s = Setup(write_deadline=2)
    sub, ts = s.connect()
    sub.dataReceived(b'CONNECT {"verbose":false}\r\n')
    sub.pauseProducing()
    s.clock.advance(1.9)
    assert not sub.closed
    s.clock.advance(0.2)
    assert sub.closed and sub.close_reason == "Slow Consumer (Write Deadline)"


def test_resume_clears_pending():
    s = Setup(write_deadline=2)
    sub, ts = s.connect()
    sub.pauseProducing()
    s.clock.advance(1)
    sub.resumeProducing()
    s.clock.advance(5)
    assert not sub.closed
