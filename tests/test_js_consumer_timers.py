"""JetStream consumer timers driven by a fake clock (no sleeping).

The broker and the JetStream plugin run in-process on a
``twisted.internet.task.Clock``; streams (and so their consumers) take their
``now`` from the same clock. A test talks to the broker as a client would, with
internal subscriptions and ``broker.publish``: ``$JS.API`` requests, pull
requests, acks.

Every expectation was observed from nats-server 2.15.1 (the spec) in real time,
at the same scale or a smaller one (see each test); test_observed_live.py
runs each scenario again in real time against nats-server and natsbroker. Where nats-server's timers
have slack (its ack timer fires ``ackWaitDelay`` = 1 ms late, its inactivity
check runs on its own schedule) a test asserts "not before X, by X + slack".

The clock hook: ``natsbroker.jetstream.account`` builds ``Stream(cfg, ss, created,
reactor)`` without ``now=``; the harness substitutes the module's ``Stream``
(and ``now_ns``, there and in /jsz's module) with ones bound to the fake clock,
with pytest's monkeypatch.
"""

import json

import pytest
from twisted.internet.task import Clock

import natsbroker.jetstream.account as A
import natsbroker.jetstream.jsz as JSZ
import natsbroker.jetstream.plugin as P
from natsbroker.broker import Broker
from natsbroker.config.model import JetStreamConfig, ServerConfig
from natsbroker.gocompat import times as gotime
from tests.test_js_consumers import raw_seqs

SEC = 1_000_000_000
MS = 1_000_000
# The fake clock starts at 0; JetStream time is T0 + clock time, so timestamps
# (and the ack reply subjects that carry them) have the length of real ones.
T0 = 1_700_000_000 * SEC
ADVISORY = b"$JS.EVENT.ADVISORY."


class Frame:
    __slots__ = ("t", "dest", "subject", "reply", "hdr", "data")

    def __init__(self, t, dest, subject, reply, hdr, data):
        self.t, self.dest, self.subject, self.reply, self.hdr, self.data = (
            t, dest, subject, reply, hdr, data)

    @property
    def tokens(self):
        """The ack reply's delivery count, stream seq, consumer seq, pending."""
        t = self.reply.split(b".")
        assert len(t) == 9 and t[:2] == [b"$JS", b"ACK"], self.reply
        return [int(t[4]), int(t[5]), int(t[6]), int(t[8])]

    def json(self):
        return json.loads(self.data)

    def __repr__(self):
        return "Frame(t=%r, %r, %r, %r, %r, %r)" % (self.t, self.dest, self.subject, self.reply,
                                                     self.hdr, self.data[:80])


class SpinningTimers(AssertionError):
    pass


class GuardedClock(Clock):
    """``Clock`` whose ``advance`` fails, instead of looping forever, when
    timers keep re-arming themselves for the current instant (a busy loop in a
    real reactor)."""

    LIMIT = 10000

    def advance(self, amount):
        self.rightNow += amount
        self._sortCalls()
        n = 0
        while self.calls and self.calls[0].getTime() <= self.seconds():
            n += 1
            if n > self.LIMIT:
                raise SpinningTimers("%d timer calls at %.9f s without time moving: %r" % (
                    n, self.rightNow, self.calls[:3]))
            call = self.calls.pop(0)
            call.called = 1
            call.func(*call.args, **call.kw)
            self._sortCalls()


class Harness:
    def __init__(self, tmp_path, monkeypatch):
        self.clock = clock = GuardedClock()
        now = self.now = lambda: T0 + round(clock.seconds() * SEC)
        real_stream = A.Stream

        def stream(*args, **kw):
            kw.setdefault("now", now)
            return real_stream(*args, **kw)
        monkeypatch.setattr(A, "Stream", stream)
        monkeypatch.setattr(A, "now_ns", now)
        monkeypatch.setattr(JSZ, "now_ns", now)
        config = ServerConfig(jetstream=JetStreamConfig(enabled=True, store_dir=str(tmp_path)))
        self.broker = Broker(config, clock)
        self.js = P.JetStream(config)
        self.broker.add_plugin(self.js)
        self.js.start(self.broker)
        self.frames = []
        self._subs = {}
        self._api_n = 0
        self.sub(b"_R.api.>")
        self.sub(ADVISORY + b"CONSUMER.>")

    def close(self):
        self.js.stop()

    @property
    def t(self):
        """Clock time in ns since the start."""
        return self.now() - T0

    def sub(self, subject):
        """Record what reaches ``subject`` (frames keep it as ``dest``)."""
        def on_msg(sub, subj, reply, hdr_len, raw):
            self.frames.append(Frame(self.t, sub.subject, subj, reply, raw[:hdr_len],
                                     raw[hdr_len:]))
        sub = self._subs[subject] = self.broker.subscribe(subject, on_msg)
        return sub

    def _ensure_sub(self, subject):
        if subject and not subject.startswith(b"_R.api.") and subject not in self._subs:
            self.sub(subject)

    def unsub(self, sub):
        self.broker.unsubscribe(sub)
        self._subs.pop(sub.subject, None)

    def advance(self, secs=0):
        self.clock.advance(secs)
        self.clock.advance(0)  # the group commit and what it kicks

    def advance_to(self, secs):
        """Advance to ``secs`` after the start, timer by timer, so that each
        timer runs at its own time (``Clock.advance`` runs the calls it passes
        with the clock already at the end)."""
        target = round(secs * SEC)
        assert target >= self.t, (secs, self.t)
        for _ in range(100000):
            due = [c.getTime() for c in self.clock.getDelayedCalls()]
            nxt = min(due) if due else None
            if nxt is None or round(nxt * SEC) > target:
                break
            self.advance(max(nxt - self.clock.seconds(), 0))
        else:
            raise AssertionError("timers keep rescheduling themselves at %d ns" % self.t)
        if target > self.t:
            self.advance((target - self.t) / SEC)

    def wait(self, secs):
        self.advance_to((self.t + round(secs * SEC)) / SEC)

    def pub(self, subject, data=b"", reply=None):
        self._ensure_sub(reply)
        self.broker.request(subject, data, reply=reply)
        self.advance(0)

    def api(self, subject, body=b""):
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        self._api_n += 1
        reply = b"_R.api.%d" % self._api_n
        self.broker.request(subject, body, reply=reply)
        self.advance(0)
        got = [f for f in self.frames if f.dest == b"_R.api.>" and f.subject == reply]
        assert len(got) == 1, (subject, got)
        return got[0].json()

    def stream(self, name, n=0, data=b"m%d", **kw):
        cfg = {"name": name, "subjects": [name.lower() + ".>"]}
        cfg.update(kw)
        resp = self.api(b"$JS.API.STREAM.CREATE." + name.encode(), cfg)
        assert "error" not in resp, resp
        for i in range(n):
            self.pub(name.lower().encode() + b".a", data % (i + 1) if b"%d" in data else data)

    def consumer(self, stream, name, **cfg):
        if name:
            cfg.setdefault("durable_name", name)
        subject = "$JS.API.CONSUMER.CREATE.%s%s" % (stream, "." + name if name else "")
        resp = self.api(subject.encode(), {"stream_name": stream, "config": cfg})
        assert "error" not in resp, resp
        return resp

    def info(self, stream, name):
        return self.api(b"$JS.API.CONSUMER.INFO.%s.%s" % (stream.encode(), name.encode()))

    def pull(self, stream, name, reply, **req):
        body = json.dumps(req).encode() if req else b""
        self._ensure_sub(reply)
        self.broker.request(b"$JS.API.CONSUMER.MSG.NEXT.%s.%s" % (stream.encode(), name.encode()),
                            body, reply=reply)
        self.advance(0)

    def on(self, dest, since=0):
        """Frames that reached the subscription on ``dest``, from ``since`` ns."""
        return [f for f in self.frames if f.dest == dest and f.t >= since]

    def delivered(self, subject_prefix, since=0):
        """Stream messages delivered (frames carrying an ack reply)."""
        return [f for f in self.frames if f.reply and f.reply.startswith(b"$JS.ACK.")
                and f.subject.startswith(subject_prefix) and f.t >= since]

    def advisories(self, kind):
        return [f for f in self.frames if f.subject.startswith(ADVISORY + kind)]


@pytest.fixture
def h(tmp_path, monkeypatch):
    harness = Harness(tmp_path, monkeypatch)
    yield harness
    harness.close()


def advisory_body(frame):
    body = frame.json()
    assert body["timestamp"] == gotime.rfc3339(T0 + frame.t)  # stamped by the (fake) clock
    assert len(body["id"]) == 22
    return {k: v for k, v in body.items() if k not in ("id", "timestamp")}, list(body)


# --------------------------------------------------------------------------
# ack wait, backoff, max deliver


def test_harness_clock_drives_stream_time(h):
    h.wait(1.5)
    h.stream("TS", 1)
    msg = h.api(b"$JS.API.STREAM.MSG.GET.TS", {"seq": 1})["message"]
    assert msg["time"] == gotime.rfc3339(T0 + 1500 * MS)


def test_ack_wait_redelivery_and_delivery_count(h):
    """nats-server (ack_wait 0.5 s): a redelivery every ack wait, the delivery
    count in the 5th token, a new consumer sequence each time; acking the last
    delivery moves both floors to the delivered pair."""
    h.stream("AW", 1)
    h.consumer("AW", "C", ack_policy="explicit", ack_wait=SEC)
    h.pull("AW", "C", b"_R.p", batch=5, expires=30 * SEC)
    first = h.delivered(b"aw.")
    assert [(f.t, f.data, f.tokens) for f in first] == [(0, b"m1", [1, 1, 1, 0])]
    assert first[0].reply == b"$JS.ACK.AW.C.1.1.1.%d.0" % T0
    prev = 0
    for n in (2, 3):
        h.advance_to((prev + 999 * MS) / SEC)
        assert len(h.delivered(b"aw.")) == n - 1
        h.advance_to((prev + SEC + MS) / SEC)  # nats-server: ack wait + 1 ms at most
        got = h.delivered(b"aw.")
        assert len(got) == n
        assert (got[-1].data, got[-1].tokens) == (b"m1", [n, 1, n, 0])
        assert got[-1].reply.split(b".")[7] == b"%d" % T0  # the stored timestamp, unchanged
        prev = got[-1].t
    mid = raw_seqs(h.info("AW", "C"))
    assert mid == {"delivered": (3, 1), "ack_floor": (0, 0), "num_ack_pending": 1,
                   "num_redelivered": 1, "num_waiting": 1, "num_pending": 0}
    h.pub(h.delivered(b"aw.")[-1].reply, b"+ACK", reply=b"_R.ack")
    assert [f.data for f in h.on(b"_R.ack")] == [b""]
    assert raw_seqs(h.info("AW", "C")) == {"delivered": (3, 1), "ack_floor": (3, 1), "num_ack_pending": 0,
                                       "num_redelivered": 0, "num_waiting": 1, "num_pending": 0}
    h.wait(60)
    assert len(h.delivered(b"aw.")) == 3


def test_backoff_schedule_then_max_deliveries_advisory(h):
    """nats-server (backoff 0.3/0.6/0.9 s, max_deliver 5, push): redeliveries at
    0.3, 0.9, 1.8, 2.7 (the last backoff repeats), the MAX_DELIVERIES advisory at
    3.6 with deliveries 5; ack_wait reported as backoff[0]."""
    h.stream("BO", 1)
    h.sub(b"dlv.bo")
    c = h.consumer("BO", "C", ack_policy="explicit", deliver_subject="dlv.bo",
                   backoff=[SEC, 3 * SEC, 5 * SEC], max_deliver=5)
    assert c["config"]["ack_wait"] == SEC
    assert c["config"]["backoff"] == [SEC, 3 * SEC, 5 * SEC]
    expect = [0, 1, 4, 9, 14]
    for n, at in enumerate(expect, 1):
        if at:
            h.advance_to((at * SEC - MS) / SEC)
            assert len(h.delivered(b"bo.")) == n - 1, at
            h.advance_to((at * SEC + MS) / SEC)
        got = h.delivered(b"bo.")
        assert len(got) == n, at
        assert got[-1].tokens == [n, 1, n, 0]
    assert h.advisories(b"CONSUMER.MAX_DELIVERIES") == []
    h.advance_to(19 - 0.002)
    assert h.advisories(b"CONSUMER.MAX_DELIVERIES") == []
    h.advance_to(19.001)
    (adv,) = h.advisories(b"CONSUMER.MAX_DELIVERIES")
    assert adv.subject == b"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.BO.C"
    body, keys = advisory_body(adv)
    assert keys == ["type", "id", "timestamp", "stream", "consumer", "stream_seq", "deliveries"]
    assert body == {"type": "io.nats.jetstream.advisory.v1.max_deliver", "stream": "BO",
                    "consumer": "C", "stream_seq": 1, "deliveries": 5}
    assert len(h.delivered(b"bo.")) == 5
    assert raw_seqs(h.info("BO", "C")) == {"delivered": (5, 1), "ack_floor": (0, 0),
                                       "num_ack_pending": 0, "num_redelivered": 1,
                                       "num_waiting": 0, "num_pending": 0}
    h.wait(100)
    assert len(h.delivered(b"bo.")) == 5
    assert len(h.advisories(b"CONSUMER.MAX_DELIVERIES")) == 1


def test_expired_delivery_without_a_pull_does_not_spin(h):
    """nats-server (ack_wait 1 s, one fetch, no ack, no further pulls): the
    message stays pending and the server idles (about 0.01 s of CPU in 2 s;
    natsbroker used 1.3 s)."""
    h.stream("SP", 1)
    h.consumer("SP", "C", ack_policy="explicit", ack_wait=SEC)
    h.pull("SP", "C", b"_R.p", batch=1)
    assert len(h.delivered(b"sp.")) == 1
    h.advance_to(1.5)  # the ack wait ran out; nothing asks for the redelivery
    h.advance_to(10)
    assert len(h.delivered(b"sp.")) == 1
    assert len(h.clock.getDelayedCalls()) <= 2
    assert raw_seqs(h.info("SP", "C")) == {"delivered": (1, 1), "ack_floor": (0, 0), "num_ack_pending": 1,
                                       "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}
    h.pull("SP", "C", b"_R.p2", batch=1)
    assert [(f.dest, f.tokens) for f in h.delivered(b"sp.")][1:] == [(b"_R.p2", [2, 1, 2, 0])]


def test_max_deliver_advisory_waits_for_a_pull(h):
    """nats-server (ack_wait 0.5 s, max_deliver 2, pull): past the second ack
    wait the message stays pending and no advisory goes out until a pull
    request makes the consumer look for the next message."""
    h.stream("MD", 1, data=b"one")
    h.consumer("MD", "C", ack_policy="explicit", ack_wait=SEC, max_deliver=2)
    h.pull("MD", "C", b"_R.p1", batch=1, expires=10 * SEC)
    h.pull("MD", "C", b"_R.p2", batch=1, expires=10 * SEC)
    h.advance_to(1.001)
    assert [(f.dest, f.t, f.tokens) for f in h.delivered(b"md.")] == [
        (b"_R.p1", 0, [1, 1, 1, 0]), (b"_R.p2", SEC, [2, 1, 2, 0])]
    h.advance_to(5)
    assert h.advisories(b"CONSUMER.MAX_DELIVERIES") == []
    assert raw_seqs(h.info("MD", "C")) == {"delivered": (2, 1), "ack_floor": (0, 0), "num_ack_pending": 1,
                                       "num_redelivered": 1, "num_waiting": 0, "num_pending": 0}
    h.pull("MD", "C", b"_R.p3", batch=1, expires=SEC)
    (adv,) = h.advisories(b"CONSUMER.MAX_DELIVERIES")
    assert adv.t == 5 * SEC
    body, _ = advisory_body(adv)
    assert body == {"type": "io.nats.jetstream.advisory.v1.max_deliver", "stream": "MD",
                    "consumer": "C", "stream_seq": 1, "deliveries": 2}
    h.advance_to(6)
    assert [(f.t, f.hdr) for f in h.on(b"_R.p3")] == [
        (6 * SEC, b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 1\r\n"
                  b"Nats-Pending-Bytes: 0\r\n\r\n")]
    assert raw_seqs(h.info("MD", "C")) == {"delivered": (2, 1), "ack_floor": (0, 0), "num_ack_pending": 0,
                                       "num_redelivered": 1, "num_waiting": 0, "num_pending": 0}


# --------------------------------------------------------------------------
# nak, progress


def test_nak_delays(h):
    """nats-server: ``-NAK {"delay":600000000}`` at 0.1 s redelivers at 0.7,
    ``-NAK 300ms`` at 0.4, a plain ``-NAK`` at once; one MSG_NAKED advisory each."""
    h.stream("NK", 3)
    h.consumer("NK", "C", ack_policy="explicit", ack_wait=5 * SEC)
    h.pull("NK", "C", b"_R.p", batch=10, expires=3 * SEC)
    m = h.delivered(b"nk.")
    assert [(f.data, f.tokens) for f in m] == [
        (b"m1", [1, 1, 1, 2]), (b"m2", [1, 2, 2, 1]), (b"m3", [1, 3, 3, 0])]
    h.advance_to(0.1)
    h.pub(m[0].reply, b'-NAK {"delay": 600000000}')
    h.pub(m[1].reply, b"-NAK 300ms")
    h.pub(m[2].reply, b"-NAK")
    later = lambda: [(f.t, f.data, f.tokens) for f in h.delivered(b"nk.", since=1)]
    assert later() == [(100 * MS, b"m3", [2, 3, 4, 0])]
    h.advance_to(0.399)
    assert len(later()) == 1
    h.advance_to(0.401)
    assert later()[1][1:] == (b"m2", [2, 2, 5, 0])
    h.advance_to(0.699)
    assert len(later()) == 2
    h.advance_to(0.701)
    assert later()[2][1:] == (b"m1", [2, 1, 6, 0])
    naks = h.advisories(b"CONSUMER.MSG_NAKED")
    assert [advisory_body(a) for a in naks] == [
        ({"type": "io.nats.jetstream.advisory.v1.nak", "stream": "NK", "consumer": "C",
          "consumer_seq": i, "stream_seq": i, "deliveries": 1},
         ["type", "id", "timestamp", "stream", "consumer", "consumer_seq", "stream_seq", "deliveries"])
        for i in (1, 2, 3)]
    assert raw_seqs(h.info("NK", "C")) == {"delivered": (6, 3), "ack_floor": (0, 0), "num_ack_pending": 3,
                                       "num_redelivered": 3, "num_waiting": 1, "num_pending": 0}


def test_progress_extends_the_deadline(h):
    """nats-server (ack_wait 0.5 s): ``+WPI`` at 0.4 s is confirmed (empty
    reply) and moves the redelivery to 0.9 s."""
    h.stream("WP", 1)
    h.consumer("WP", "C", ack_policy="explicit", ack_wait=SEC)
    h.pull("WP", "C", b"_R.p", batch=5, expires=30 * SEC)
    (m,) = h.delivered(b"wp.")
    for at in (0.8, 1.6, 2.4):
        h.advance_to(at)
        h.pub(m.reply, b"+WPI", reply=b"_R.wpi")
    assert [(f.t, f.data) for f in h.on(b"_R.wpi")] == [
        (800 * MS, b""), (1600 * MS, b""), (2400 * MS, b"")]
    h.advance_to(3.399)
    assert len(h.delivered(b"wp.")) == 1
    h.advance_to(3.401)
    assert [f.tokens for f in h.delivered(b"wp.")] == [[1, 1, 1, 0], [2, 1, 2, 0]]


# --------------------------------------------------------------------------
# max ack pending


def test_max_ack_pending_stalls_and_resumes_push(h):
    """nats-server (push, max_ack_pending 2): two delivered, the third on the
    first ack (of m2), the fourth on the next; ack floor (2, 2) after both."""
    h.stream("MP", 4)
    h.sub(b"dlv.mp")
    h.consumer("MP", "C", ack_policy="explicit", deliver_subject="dlv.mp", max_ack_pending=2)
    m = h.delivered(b"mp.")
    assert [(f.data, f.tokens) for f in m] == [(b"m1", [1, 1, 1, 3]), (b"m2", [1, 2, 2, 2])]
    h.wait(10)
    assert len(h.delivered(b"mp.")) == 2
    h.pub(m[1].reply, b"+ACK")
    m = h.delivered(b"mp.")
    assert [(f.t, f.data, f.tokens) for f in m[2:]] == [(10 * SEC, b"m3", [1, 3, 3, 1])]
    h.wait(1)
    h.pub(m[0].reply, b"+ACK")
    m = h.delivered(b"mp.")
    assert [(f.t, f.data, f.tokens) for f in m[3:]] == [(11 * SEC, b"m4", [1, 4, 4, 0])]
    assert raw_seqs(h.info("MP", "C")) == {"delivered": (4, 4), "ack_floor": (2, 2), "num_ack_pending": 2,
                                       "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}


def test_max_ack_pending_stalls_and_resumes_pull(h):
    h.stream("MQ", 4)
    h.consumer("MQ", "C", ack_policy="explicit", max_ack_pending=2)
    h.pull("MQ", "C", b"_R.p", batch=4, expires=60 * SEC)
    m = h.delivered(b"mq.")
    assert [f.data for f in m] == [b"m1", b"m2"]
    h.wait(10)
    assert len(h.delivered(b"mq.")) == 2
    assert h.on(b"_R.p") == m  # no status: the request still waits
    assert raw_seqs(h.info("MQ", "C"))["num_waiting"] == 1
    h.pub(m[0].reply, b"+ACK")
    assert [f.data for f in h.delivered(b"mq.")] == [b"m1", b"m2", b"m3"]
    h.pub(m[1].reply, b"+ACK")
    assert [f.data for f in h.delivered(b"mq.")] == [b"m1", b"m2", b"m3", b"m4"]
    assert raw_seqs(h.info("MQ", "C")) == {"delivered": (4, 4), "ack_floor": (2, 2), "num_ack_pending": 2,
                                       "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}


# --------------------------------------------------------------------------
# pull requests: expiry, heartbeats


def test_pull_request_expiry_408_with_pending_counts(h):
    """nats-server: a request's 408 carries what it still wanted: messages left
    of its batch and bytes left of its max_bytes (0 when it set none)."""
    h.stream("EX", 1)
    h.consumer("EX", "C", ack_policy="explicit")
    h.pull("EX", "C", b"_R.e1", batch=5, expires=500 * MS, max_bytes=1000)
    h.pull("EX", "C", b"_R.e2", batch=5, expires=600 * MS)
    (m,) = h.on(b"_R.e1")
    size = len(m.subject) + len(m.reply) + len(m.hdr) + len(m.data)
    assert size == 46  # "ex.a" + the 40-byte ack reply + "m1", as nats-server counts it
    h.advance_to(0.499)
    assert len(h.on(b"_R.e1")) == 1 and h.on(b"_R.e2") == []
    h.advance_to(0.5)
    assert [(f.t, f.hdr, f.data) for f in h.on(b"_R.e1")[1:]] == [
        (500 * MS, b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 4\r\n"
                   b"Nats-Pending-Bytes: %d\r\n\r\n" % (1000 - size), b"")]
    h.advance_to(0.6)
    assert [(f.t, f.hdr) for f in h.on(b"_R.e2")] == [
        (600 * MS, b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 5\r\n"
                   b"Nats-Pending-Bytes: 0\r\n\r\n")]
    h.wait(10)
    assert len(h.on(b"_R.e1")) == 2 and len(h.on(b"_R.e2")) == 1
    assert raw_seqs(h.info("EX", "C"))["num_waiting"] == 0


def test_pull_idle_heartbeat(h):
    """nats-server (hb 0.3 s, expires 1 s): a 100 at 0.3 s, the message at 0.45
    restarts the heartbeat (next at 0.75), the 408 at 1 s; Last-Stream counts
    the non-matching message the consumer skipped."""
    h.stream("PH", 1)
    h.consumer("PH", "C", ack_policy="explicit", filter_subject="ph.b")
    h.pull("PH", "C", b"_R.h", batch=2, expires=SEC, idle_heartbeat=300 * MS)
    h.advance_to(0.299)
    assert h.on(b"_R.h") == []
    h.advance_to(0.3)
    h.advance_to(0.45)
    h.pub(b"ph.b", b"x")
    h.advance_to(1.0)
    assert [(f.t, f.reply is not None, f.hdr, f.data) for f in h.on(b"_R.h")] == [
        (300 * MS, False, b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 0\r\n"
                          b"Nats-Last-Stream: 1\r\n\r\n", b""),
        (450 * MS, True, b"", b"x"),
        (750 * MS, False, b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1\r\n"
                          b"Nats-Last-Stream: 2\r\n\r\n", b""),
        (1000 * MS, False, b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 1\r\n"
                           b"Nats-Pending-Bytes: 0\r\n\r\n", b""),
    ]
    h.wait(5)
    assert len(h.on(b"_R.h")) == 4


def test_pull_heartbeats_of_a_request_that_gets_nothing(h):
    """nats-server (hb 0.2 s, expires 0.7 s, an earlier request took the only
    message): 100s at 0.2, 0.4, 0.6 then the 408 at 0.7."""
    h.stream("PG", 1)
    h.consumer("PG", "C", ack_policy="explicit")
    h.pull("PG", "C", b"_R.first", batch=1)
    h.pull("PG", "C", b"_R.h", batch=2, expires=700 * MS, idle_heartbeat=200 * MS)
    h.advance_to(2)
    beat = b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1\r\nNats-Last-Stream: 1\r\n\r\n"
    assert [(f.t, f.hdr) for f in h.on(b"_R.h")] == [
        (200 * MS, beat), (400 * MS, beat), (600 * MS, beat),
        (700 * MS, b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 2\r\n"
                   b"Nats-Pending-Bytes: 0\r\n\r\n")]


# --------------------------------------------------------------------------
# push heartbeats


def test_push_idle_heartbeat(h):
    """nats-server (hb 0.4 s): a heartbeat 0.4 s after the last delivery or
    heartbeat, Last-Consumer/Last-Stream the delivered pair, no reply subject."""
    h.stream("HB", 1)
    h.sub(b"dlv.hb")
    h.consumer("HB", "C", ack_policy="explicit", deliver_subject="dlv.hb", idle_heartbeat=400 * MS)
    h.advance_to(0.5)
    h.pub(b"hb.a", b"four")
    h.advance_to(1.35)
    beat = b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: %d\r\nNats-Last-Stream: %d\r\n\r\n"
    assert [(f.t, f.subject, f.reply, f.hdr, f.data) for f in h.on(b"dlv.hb")] == [
        (0, b"hb.a", b"$JS.ACK.HB.C.1.1.1.%d.0" % T0, b"", b"m1"),
        (400 * MS, b"dlv.hb", None, beat % (1, 1), b""),
        (500 * MS, b"hb.a", b"$JS.ACK.HB.C.1.2.2.%d.0" % (T0 + 500 * MS), b"", b"four"),
        (900 * MS, b"dlv.hb", None, beat % (2, 2), b""),
        (1300 * MS, b"dlv.hb", None, beat % (2, 2), b""),
    ]


# --------------------------------------------------------------------------
# inactivity


def _deleted_advisory(h, stream, name):
    advs = [a for a in h.advisories(b"CONSUMER.DELETED")
            if a.subject == b"$JS.EVENT.ADVISORY.CONSUMER.DELETED.%s.%s" % (stream.encode(), name.encode())]
    return advs


def _check_deleted(h, stream, name):
    (adv,) = _deleted_advisory(h, stream, name)
    body, keys = advisory_body(adv)
    assert keys == ["type", "id", "timestamp", "stream", "consumer", "action"]
    assert body == {"type": "io.nats.jetstream.advisory.v1.consumer_action", "stream": stream,
                    "consumer": name, "action": "delete"}
    assert h.info(stream, name)["error"] == {"code": 404, "err_code": 10014,
                                             "description": "consumer not found"}
    assert h.api(b"$JS.API.CONSUMER.NAMES." + stream.encode())["consumers"] == []
    return adv


def test_ephemeral_inactive_threshold_deletes(h):
    """nats-server (threshold 0.5 s, no pull requests): gone 0.1 s to 1 s
    after the threshold (a pull consumer's jitter, consumer.go
    updateInactiveThreshold; checked live in test_observed_live), with a
    CONSUMER.DELETED advisory; the stream is untouched."""
    h.stream("IN", 2)
    name = h.consumer("IN", None, ack_policy="explicit", inactive_threshold=500 * MS)["name"]
    h.advance_to(0.599)
    assert "error" not in h.info("IN", name)
    assert _deleted_advisory(h, "IN", name) == []
    h.advance_to(1.5)
    adv = _check_deleted(h, "IN", name)
    assert 600 * MS <= adv.t <= 1500 * MS
    st = h.api(b"$JS.API.STREAM.INFO.IN")["state"]
    assert (st["messages"], st["consumer_count"]) == (2, 0)


def test_ephemeral_pull_kept_alive_by_a_waiting_request(h):
    """nats-server (threshold 0.5 s, one request expiring at 1.5 s): no
    deletion while the request waits, nor within a threshold and 0.1 s
    after it ended; deleted within 1 s more (the jitter; observed 2.24 and
    2.44 s; threshold 1 s, expiry 1.5 s: 3.31 s; threshold 0.3 s, expiry
    2 s: 2.95 s)."""
    h.stream("IP", 1)
    name = h.consumer("IP", None, ack_policy="explicit", inactive_threshold=500 * MS,
                      filter_subject="ip.zz")["name"]
    h.pull("IP", name, b"_R.ip", batch=1, expires=1500 * MS)
    h.advance_to(1.5)
    assert [f.hdr[:16] for f in h.on(b"_R.ip")] == [b"NATS/1.0 408 Req"]
    assert _deleted_advisory(h, "IP", name) == []
    h.advance_to(2.099)
    assert _deleted_advisory(h, "IP", name) == []
    h.advance_to(3.0)
    _check_deleted(h, "IP", name)


def test_ephemeral_push_deleted_after_interest_goes(h):
    """nats-server (threshold 0.5 s): a push ephemeral lives while its deliver
    subject has interest; deleted 0.5 s after the subscriber left (observed
    unsubscribe at 0.8 s, deleted at 1.31 s)."""
    h.stream("IQ", 1)
    sub = h.sub(b"dlv.iq")
    name = h.consumer("IQ", None, ack_policy="none", inactive_threshold=500 * MS,
                      deliver_subject="dlv.iq", filter_subject="iq.zz")["name"]
    h.advance_to(0.8)
    assert _deleted_advisory(h, "IQ", name) == []
    h.unsub(sub)
    h.advance(0)
    h.advance_to(1.25)
    assert _deleted_advisory(h, "IQ", name) == [], "deleted before the threshold after interest left"
    h.advance_to(1.8)
    _check_deleted(h, "IQ", name)


# --------------------------------------------------------------------------
# pause


def test_pause_until_then_resume(h):
    """nats-server: while paused a waiting pull gets nothing; at pause_until
    the message goes out and a PAUSE advisory says paused false."""
    h.stream("PZ", 1)
    h.consumer("PZ", "C", ack_policy="explicit")
    until = gotime.rfc3339(T0 + 2 * SEC)
    resp = h.api(b"$JS.API.CONSUMER.PAUSE.PZ.C", {"pause_until": until})
    assert resp == {"type": "io.nats.jetstream.api.v1.consumer_pause_response", "paused": True,
                    "pause_until": until, "pause_remaining": 2 * SEC}
    h.pull("PZ", "C", b"_R.nw", batch=1, no_wait=True)
    assert [f.hdr for f in h.on(b"_R.nw")] == [b"NATS/1.0 404 No Messages\r\n\r\n"]
    h.pull("PZ", "C", b"_R.p", batch=1, expires=10 * SEC)
    h.advance_to(0.5)
    info = h.info("PZ", "C")
    assert (info["paused"], info["pause_remaining"], info["num_pending"]) == (True, 1500 * MS, 1)
    h.advance_to(1.999)
    assert h.on(b"_R.p") == []
    h.advance_to(2.0)
    assert [(f.t, f.data, f.tokens) for f in h.on(b"_R.p")] == [(2 * SEC, b"m1", [1, 1, 1, 0])]
    advs = [advisory_body(a)[0] for a in h.advisories(b"CONSUMER.PAUSE")]
    assert advs == [
        {"type": "io.nats.jetstream.advisory.v1.consumer_pause", "stream": "PZ", "consumer": "C",
         "paused": True, "pause_until": until},
        {"type": "io.nats.jetstream.advisory.v1.consumer_pause", "stream": "PZ", "consumer": "C",
         "paused": False, "pause_until": until}]
    assert [a.t for a in h.advisories(b"CONSUMER.PAUSE")] == [0, 2 * SEC]
    info = h.info("PZ", "C")
    assert "paused" not in info and "pause_remaining" not in info


def test_pause_in_config_at_create(h):
    """nats-server: a consumer created paused says so in its create response,
    announces the pause (a PAUSE advisory, paused true) and the resume."""
    h.stream("PC", 1)
    h.sub(b"dlv.pc")
    until = gotime.rfc3339(T0 + 3 * SEC)
    c = h.consumer("PC", "C", ack_policy="explicit", deliver_subject="dlv.pc", pause_until=until)
    assert (c["paused"], c["pause_remaining"], c["config"]["pause_until"]) == (True, 3 * SEC, until)
    h.advance_to(2.999)
    assert h.delivered(b"pc.") == []
    h.advance_to(3)
    assert [(f.t, f.data) for f in h.delivered(b"pc.")] == [(3 * SEC, b"m1")]
    advs = h.advisories(b"CONSUMER.PAUSE")
    assert [(a.t, advisory_body(a)[0]["paused"]) for a in advs][-1:] == [(3 * SEC, False)]


def test_pause_in_config_at_create_advisories(h):
    """nats-server: created paused -> PAUSE advisory paused true at once
    (right after CONSUMER.CREATED), paused false at the resume."""
    h.stream("PD", 1)
    h.sub(b"dlv.pd")
    until = gotime.rfc3339(T0 + 3 * SEC)
    h.consumer("PD", "C", ack_policy="explicit", deliver_subject="dlv.pd", pause_until=until)
    h.advance_to(3)
    advs = h.advisories(b"CONSUMER.")
    assert [(a.subject, a.t, advisory_body(a)[0].get("paused"), advisory_body(a)[0].get("pause_until"))
            for a in advs] == [
        (b"$JS.EVENT.ADVISORY.CONSUMER.CREATED.PD.C", 0, None, None),
        (b"$JS.EVENT.ADVISORY.CONSUMER.PAUSE.PD.C", 0, True, until),
        (b"$JS.EVENT.ADVISORY.CONSUMER.PAUSE.PD.C", 3 * SEC, False, until)]


# --------------------------------------------------------------------------
# replay original, rate limit


def _replay_stream(h):
    h.stream("RP")
    for at, data in ((0, b"m1"), (0.3, b"m2"), (0.9, b"m3"), (0.9, b"m4")):
        h.advance_to(at)
        h.pub(b"rp.a", data)
    h.advance_to(10)


def test_replay_original_push(h):
    """nats-server: a replay_policy original consumer created later delivers
    with the stored spacing (0, +0.3, +0.9, +0.9)."""
    _replay_stream(h)
    h.sub(b"dlv.rp")
    h.consumer("RP", "C", ack_policy="none", deliver_subject="dlv.rp", replay_policy="original")
    h.advance_to(12)
    assert [(f.t - 10 * SEC, f.data, f.tokens) for f in h.delivered(b"rp.")] == [
        (0, b"m1", [1, 1, 1, 3]), (300 * MS, b"m2", [1, 2, 2, 2]),
        (900 * MS, b"m3", [1, 3, 3, 1]), (900 * MS, b"m4", [1, 4, 4, 0])]
    assert raw_seqs(h.info("RP", "C"))["delivered"] == (4, 4)


def test_replay_original_pull(h):
    """nats-server: the same spacing to a waiting pull request, whose 408 then
    says 6 of its batch of 10 are left."""
    _replay_stream(h)
    h.consumer("RP", "P", ack_policy="none", replay_policy="original")
    h.pull("RP", "P", b"_R.p", batch=10, expires=2 * SEC)
    h.advance_to(13)
    assert [(f.t - 10 * SEC, f.data, f.hdr) for f in h.on(b"_R.p")] == [
        (0, b"m1", b""), (300 * MS, b"m2", b""), (900 * MS, b"m3", b""), (900 * MS, b"m4", b""),
        (2 * SEC, b"", b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 6\r\n"
                       b"Nats-Pending-Bytes: 0\r\n\r\n")]


def test_rate_limit_bps_paces_after_a_burst(h):
    """nats-server (rate 8000 bps = 1000 B/s, stream max_msg_size 1000, 444-byte
    deliveries: subject + ack reply + data): its token bucket
    (golang.org/x/time/rate) holds max_msg_size bytes and starts full, so two go
    at once, the third after (3*444-1000)/1000 =
    0.332 s, then one every 0.444 s (observed 0, 0, 0.333, 0.786, 1.230, 1.664
    after the create)."""
    h.stream("RL", 6, data=b"%d" + b"x" * 399, max_msg_size=1000)
    h.sub(b"dlv.rl")
    h.consumer("RL", "C", ack_policy="none", deliver_subject="dlv.rl", rate_limit_bps=8000)
    first = h.delivered(b"rl.")
    size = len(first[0].subject) + len(first[0].reply) + len(first[0].data)
    assert size == 444
    h.advance_to(3)
    assert [f.t for f in h.delivered(b"rl.")] == [0, 0, 332 * MS, 776 * MS, 1220 * MS, 1664 * MS]


def test_rate_limit_bps_without_max_msg_size_bursts(h):
    """nats-server (no max_msg_size: the burst is max_payload, 1 MiB): six
    444-byte messages all go at once at 8000 bps."""
    h.stream("RM", 6, data=b"%d" + b"x" * 399)
    h.sub(b"dlv.rm")
    h.consumer("RM", "C", ack_policy="none", deliver_subject="dlv.rm", rate_limit_bps=8000)
    assert [f.t for f in h.delivered(b"rm.")] == [0] * 6
