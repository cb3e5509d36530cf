"""The fake-clock expectations, checked live on nats-server and natsbroker.

test_js_consumer_timers.py and the ``task.Clock`` tests of test_js_priority.py
pin timer behaviour to the nanosecond on a fake clock, with expectations
"observed from nats-server 2.15.1". Each scenario here runs the same thing in
real time against nats-server (the spec) and natsbroker, with short timers,
so that an expectation nats-server does not meet is caught here and not
written into the fake-clock tests.

Timing is checked loosely (a timer may fire up to ``LATE`` s late on a busy
machine; never more than ``EARLY`` s early, a scheduling margin), order and
content strictly. Waits are deadlines on what should arrive; fixed waits only
where the point is that nothing arrives (or to place an event in time).
"""

import base64
import calendar
import json
import os
import re
import time
from collections import namedtuple

import pytest

from tests.support.raw import Raw
from tests.support.servers import ServerProcess

KINDS = ["nats-server", "natsbroker"]
SEC = 1_000_000_000
MS = 1_000_000
EARLY = 0.03  # a timer seen this much before its time is early
LATE = 0.45  # ... and this much after it, too late (a loaded machine)
ADVISORY = "$JS.EVENT.ADVISORY."
NEXT = "$JS.API.CONSUMER.MSG.NEXT.%s.%s"
BEAT = b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: %d\r\nNats-Last-Stream: %d\r\n\r\n"
TIMEOUT = (b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: %d\r\n"
           b"Nats-Pending-Bytes: %d\r\n\r\n")
PIN_HDR = re.compile(rb"Nats-Pin-Id: ([A-Za-z0-9]*)")
RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z")

pytestmark = pytest.mark.timeout(120)


def rfc3339_ns(text):
    """Nanoseconds since the epoch of a UTC RFC 3339 time as Go writes it
    (RFC3339Nano: up to nine fraction digits, trailing zeros dropped)."""
    m = RFC3339.fullmatch(text)
    assert m, "not an RFC 3339 UTC time: %r" % (text,)
    y, mo, d, h, mi, s, frac = m.groups()
    assert frac is None or not frac.endswith("0"), text  # Go trims trailing zeros
    secs = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s)))
    return secs * SEC + int((frac or "").ljust(9, "0"))


def rfc3339(ns):
    """``ns`` as Go's RFC3339Nano (for a pause_until we send)."""
    secs, frac = divmod(ns, SEC)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    frac = ("%09d" % frac).rstrip("0")
    return text + ("." + frac if frac else "") + "Z"


# --------------------------------------------------------------------------
# a raw client that timestamps what it receives


Got = namedtuple("Got", "t wall dest subject reply hdr data")


def tokens(reply):
    """An ack reply's delivery count, stream seq, consumer seq, pending."""
    t = reply.split(".")
    assert len(t) == 9 and t[:2] == ["$JS", "ACK"], reply
    return [int(t[4]), int(t[5]), int(t[6]), int(t[8])]


class Live:
    """One raw connection. Its inboxes (``_R.*``) are its own: a pull
    request a previous test left waiting on the module's server must not
    deliver to this one's subscription of the same name."""

    connections = 0

    def __init__(self, port):
        Live.connections += 1
        self.prefix = "_R%d." % Live.connections
        self.r = Raw(port)
        self.t0 = time.monotonic()
        self.got = []
        self.sids = {}
        self.n = 0
        self.sub("_R.api.>")
        self.sub(ADVISORY + "CONSUMER.>")

    def close(self):
        self.r.close()

    def now(self):
        return time.monotonic() - self.t0

    def _record(self, frames):
        t, wall = self.now(), time.time_ns()
        self.got += [Got(t, wall, self.sids.get(f.sid), f.subject, f.reply, f.header, f.payload)
                     for f in frames]

    def sync(self):
        """A PING round trip: the server has read everything sent so far."""
        self._record(self.r.wait_pong())

    def _own(self, subject):
        return self.prefix + subject[3:] if subject.startswith("_R.") else subject

    def sub(self, subject):
        sid = len(self.sids) + 1
        self.sids[sid] = subject
        # No PING round trip: the server takes the SUB before what follows
        # it, and a frame read during a round trip would get a late time.
        self.r.sub(self._own(subject), sid)
        return sid

    def unsub(self, subject):
        """Unsubscribe; the time just before (the server acts after it)."""
        sid = {v: k for k, v in self.sids.items()}[subject]
        before = self.now()
        self.r.send(b"UNSUB %d\r\n" % sid)
        self.sync()
        return before

    def pump(self, until, limit):
        """Read (timestamping each frame) until ``until()`` or ``limit`` s."""
        deadline = time.monotonic() + limit
        while not until():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._record(self.r.frames(until=lambda fs: len(fs) >= 1, limit=left))
        return True

    def wait_for(self, until, limit=5.0, what=""):
        assert self.pump(until, limit), "waited %.1f s for %s: %r" % (limit, what, self.got[-5:])

    def quiet(self, secs):
        """Let ``secs`` pass, reading what comes meanwhile."""
        self.pump(lambda: False, secs)

    def pub(self, subject, data=b"", reply=None):
        if reply and reply not in self.sids.values():
            self.sub(reply)
        self.r.pub(subject, data, reply and self._own(reply))
        return self.now()

    def api(self, subject, body=b""):
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        self.n += 1
        reply = self._own("_R.api.%d" % self.n)
        self.r.pub(subject, body, reply)
        self.wait_for(lambda: any(g.subject == reply for g in self.got), what=subject)
        (g,) = [g for g in self.got if g.subject == reply]
        return json.loads(g.data)

    def stream(self, name, n=0, data=b"m%d", **cfg):
        body = {"name": name, "subjects": [name.lower() + ".>"]}
        body.update(cfg)
        resp = self.api("$JS.API.STREAM.CREATE." + name, body)
        assert "error" not in resp, resp
        for i in range(n):
            ack = self.api(name.lower() + ".a", data % (i + 1) if b"%d" in data else data)
            assert ack["seq"] == i + 1, ack

    def consumer(self, stream, name, **cfg):
        if name:
            cfg.setdefault("durable_name", name)
        subject = "$JS.API.CONSUMER.CREATE.%s%s" % (stream, "." + name if name else "")
        resp = self.api(subject, {"stream_name": stream, "config": cfg})
        assert "error" not in resp, resp
        return resp

    def info(self, stream, name):
        return self.api("$JS.API.CONSUMER.INFO.%s.%s" % (stream, name))

    def pull(self, stream, name, inbox, **req):
        if inbox not in self.sids.values():
            self.sub(inbox)
        self.r.pub(NEXT % (stream, name), json.dumps(req).encode() if req else b"",
                   self._own(inbox))
        return self.now()

    def waiting(self, stream, name, n, limit=5.0):
        """Poll until the consumer has ``n`` waiting pull requests."""
        deadline = time.monotonic() + limit
        while self.info(stream, name)["num_waiting"] != n:
            assert time.monotonic() < deadline, "never %d waiting requests" % n
            self.quiet(0.02)

    def on(self, dest):
        return [g for g in self.got if g.dest == dest]

    def delivered(self, prefix):
        return [g for g in self.got if g.reply and g.reply.startswith("$JS.ACK.")
                and g.subject.startswith(prefix)]

    def advisories(self, kind, stream):
        return [g for g in self.got if g.subject.startswith(ADVISORY + kind + "." + stream + ".")]


def raw_seqs(info):
    return {
        "delivered": (info["delivered"]["consumer_seq"], info["delivered"]["stream_seq"]),
        "ack_floor": (info["ack_floor"]["consumer_seq"], info["ack_floor"]["stream_seq"]),
        "num_ack_pending": info["num_ack_pending"],
        "num_redelivered": info["num_redelivered"],
        "num_waiting": info["num_waiting"],
        "num_pending": info["num_pending"],
    }


def advisory_body(g, before=None):
    """An advisory's body without id and timestamp (both checked), and its keys."""
    body = json.loads(g.data)
    assert re.fullmatch(r"[A-Za-z0-9]{22}", body["id"]), body["id"]
    stamp = rfc3339_ns(body["timestamp"])
    assert stamp <= g.wall, (body["timestamp"], g.wall)
    return {k: v for k, v in body.items() if k not in ("id", "timestamp")}, list(body)


def at(actual, expected, late=LATE):
    """``actual`` s is ``expected`` s, give or take the scheduling margins."""
    assert expected - EARLY <= actual <= expected + late, (actual, expected)


@pytest.fixture(scope="module", params=KINDS)
def server(request):
    with ServerProcess(request.param, ["-js"]) as s:
        yield s


@pytest.fixture
def w(server):
    live = Live(server.port)
    yield live
    live.close()


# --------------------------------------------------------------------------
# ack wait, backoff, max deliver


def test_stream_time_is_the_publish_time(w):
    """test_harness_clock_drives_stream_time: a stored message's time is
    when the server took the publish."""
    w.stream("TS")
    before = time.time_ns()
    w.api("ts.a", b"x")
    after = time.time_ns()
    msg = w.api("$JS.API.STREAM.MSG.GET.TS", {"seq": 1})["message"]
    assert before <= rfc3339_ns(msg["time"]) <= after


def test_ack_wait_redelivery_and_delivery_count(w):
    """test_ack_wait_redelivery_and_delivery_count (ack_wait 0.6 s)."""
    w.stream("AW", 1)
    w.consumer("AW", "C", ack_policy="explicit", ack_wait=600 * MS)
    w.pull("AW", "C", "_R.p", batch=5, expires=30 * SEC)
    w.wait_for(lambda: len(w.delivered("aw.")) == 3, what="two redeliveries")
    got = w.delivered("aw.")
    mid = raw_seqs(w.info("AW", "C"))
    assert [(g.data, tokens(g.reply)) for g in got] == [
        (b"m1", [1, 1, 1, 0]), (b"m1", [2, 1, 2, 0]), (b"m1", [3, 1, 3, 0])]
    assert len({g.reply.split(".")[7] for g in got}) == 1  # the stored timestamp, unchanged
    at(got[1].t - got[0].t, 0.6)
    at(got[2].t - got[1].t, 0.6)
    assert mid == {"delivered": (3, 1), "ack_floor": (0, 0), "num_ack_pending": 1,
                   "num_redelivered": 1, "num_waiting": 1, "num_pending": 0}
    w.pub(got[-1].reply, b"+ACK", reply="_R.ack")
    w.wait_for(lambda: w.on("_R.ack"), what="the ack's confirmation")
    assert [g.data for g in w.on("_R.ack")] == [b""]
    assert raw_seqs(w.info("AW", "C")) == {"delivered": (3, 1), "ack_floor": (3, 1),
                                           "num_ack_pending": 0, "num_redelivered": 0,
                                           "num_waiting": 1, "num_pending": 0}
    w.quiet(1.0)
    assert len(w.delivered("aw.")) == 3


def test_backoff_schedule_then_max_deliveries_advisory(w):
    """test_backoff_schedule_then_max_deliveries_advisory (backoff 0.25, 0.5,
    0.75 s): redeliveries after each backoff, the last repeated, and the
    MAX_DELIVERIES advisory one more backoff after the fifth delivery."""
    w.stream("BO", 1)
    w.sub("dlv.bo")
    c = w.consumer("BO", "C", ack_policy="explicit", deliver_subject="dlv.bo",
                   backoff=[250 * MS, 500 * MS, 750 * MS], max_deliver=5)
    assert c["config"]["ack_wait"] == 250 * MS
    assert c["config"]["backoff"] == [250 * MS, 500 * MS, 750 * MS]
    w.wait_for(lambda: w.advisories("CONSUMER.MAX_DELIVERIES", "BO"), limit=8,
               what="the MAX_DELIVERIES advisory")
    got = w.delivered("bo.")
    assert [tokens(g.reply) for g in got] == [[n, 1, n, 0] for n in range(1, 6)]
    for prev, g, gap in zip(got, got[1:], (0.25, 0.5, 0.75, 0.75)):
        at(g.t - prev.t, gap)
    (adv,) = w.advisories("CONSUMER.MAX_DELIVERIES", "BO")
    at(adv.t - got[-1].t, 0.75)
    assert adv.subject == "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.BO.C"
    body, keys = advisory_body(adv)
    assert keys == ["type", "id", "timestamp", "stream", "consumer", "stream_seq", "deliveries"]
    assert body == {"type": "io.nats.jetstream.advisory.v1.max_deliver", "stream": "BO",
                    "consumer": "C", "stream_seq": 1, "deliveries": 5}
    assert raw_seqs(w.info("BO", "C")) == {"delivered": (5, 1), "ack_floor": (0, 0),
                                           "num_ack_pending": 0, "num_redelivered": 1,
                                           "num_waiting": 0, "num_pending": 0}
    w.quiet(1.0)
    assert len(w.delivered("bo.")) == 5
    assert len(w.advisories("CONSUMER.MAX_DELIVERIES", "BO")) == 1


def _cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_expired_delivery_without_a_pull_does_not_spin(w, server):
    """test_expired_delivery_without_a_pull_does_not_spin (ack_wait 0.5 s):
    past the ack wait with no pull waiting, the message stays pending and the
    server idles; the next pull gets the redelivery."""
    w.stream("SP", 1)
    w.consumer("SP", "C", ack_policy="explicit", ack_wait=500 * MS)
    w.pull("SP", "C", "_R.p", batch=1)
    w.wait_for(lambda: w.delivered("sp."), what="the delivery")
    w.quiet(0.7)  # the ack wait ran out; nothing asks for the redelivery
    cpu = _cpu_seconds(server.proc.pid)
    w.quiet(1.5)
    used = _cpu_seconds(server.proc.pid) - cpu
    assert used < 0.5, "%s used %.2f s of CPU in 1.5 s idle" % (server.kind, used)
    assert len(w.delivered("sp.")) == 1
    assert raw_seqs(w.info("SP", "C")) == {"delivered": (1, 1), "ack_floor": (0, 0),
                                           "num_ack_pending": 1, "num_redelivered": 0,
                                           "num_waiting": 0, "num_pending": 0}
    w.pull("SP", "C", "_R.p2", batch=1)
    w.wait_for(lambda: w.on("_R.p2"), what="the redelivery")
    assert [(g.dest, tokens(g.reply)) for g in w.delivered("sp.")][1:] == [("_R.p2", [2, 1, 2, 0])]


def test_max_deliver_advisory_waits_for_a_pull(w):
    """test_max_deliver_advisory_waits_for_a_pull (ack_wait 0.5 s, max_deliver 2)."""
    w.stream("MD", 1, data=b"one")
    w.consumer("MD", "C", ack_policy="explicit", ack_wait=500 * MS, max_deliver=2)
    w.pull("MD", "C", "_R.p1", batch=1, expires=10 * SEC)
    w.pull("MD", "C", "_R.p2", batch=1, expires=10 * SEC)
    w.wait_for(lambda: len(w.delivered("md.")) == 2, what="the redelivery")
    got = w.delivered("md.")
    assert [(g.dest, tokens(g.reply)) for g in got] == [
        ("_R.p1", [1, 1, 1, 0]), ("_R.p2", [2, 1, 2, 0])]
    at(got[1].t - got[0].t, 0.5)
    w.quiet(1.2)  # the second ack wait is long over
    assert w.advisories("CONSUMER.MAX_DELIVERIES", "MD") == []
    assert raw_seqs(w.info("MD", "C")) == {"delivered": (2, 1), "ack_floor": (0, 0),
                                           "num_ack_pending": 1, "num_redelivered": 1,
                                           "num_waiting": 0, "num_pending": 0}
    sent = w.pull("MD", "C", "_R.p3", batch=1, expires=600 * MS)
    w.wait_for(lambda: w.on("_R.p3"), what="the 408")
    (adv,) = w.advisories("CONSUMER.MAX_DELIVERIES", "MD")
    at(adv.t - sent, 0)
    body, _ = advisory_body(adv)
    assert body == {"type": "io.nats.jetstream.advisory.v1.max_deliver", "stream": "MD",
                    "consumer": "C", "stream_seq": 1, "deliveries": 2}
    (end,) = w.on("_R.p3")
    assert end.hdr == TIMEOUT % (1, 0)
    at(end.t - sent, 0.6)
    assert raw_seqs(w.info("MD", "C")) == {"delivered": (2, 1), "ack_floor": (0, 0),
                                           "num_ack_pending": 0, "num_redelivered": 1,
                                           "num_waiting": 0, "num_pending": 0}


# --------------------------------------------------------------------------
# nak, progress


def test_nak_delays(w):
    """test_nak_delays: a NAK with a JSON delay, one with a Go duration, a
    plain one (redelivered at once); one MSG_NAKED advisory each."""
    w.stream("NK", 3)
    w.consumer("NK", "C", ack_policy="explicit", ack_wait=5 * SEC)
    w.pull("NK", "C", "_R.p", batch=10, expires=3 * SEC)
    w.wait_for(lambda: len(w.delivered("nk.")) == 3, what="three deliveries")
    m = w.delivered("nk.")
    assert [(g.data, tokens(g.reply)) for g in m] == [
        (b"m1", [1, 1, 1, 2]), (b"m2", [1, 2, 2, 1]), (b"m3", [1, 3, 3, 0])]
    w.pub(m[0].reply, b'-NAK {"delay": 600000000}')
    w.pub(m[1].reply, b"-NAK 300ms")
    sent = w.pub(m[2].reply, b"-NAK")
    w.wait_for(lambda: len(w.delivered("nk.")) == 6, what="three redeliveries")
    later = w.delivered("nk.")[3:]
    assert [(g.data, tokens(g.reply)) for g in later] == [
        (b"m3", [2, 3, 4, 0]), (b"m2", [2, 2, 5, 0]), (b"m1", [2, 1, 6, 0])]
    for g, delay in zip(later, (0, 0.3, 0.6)):
        at(g.t - sent, delay)
    assert raw_seqs(w.info("NK", "C")) == {"delivered": (6, 3), "ack_floor": (0, 0),
                                           "num_ack_pending": 3, "num_redelivered": 3,
                                           "num_waiting": 1, "num_pending": 0}
    naks = w.advisories("CONSUMER.MSG_NAKED", "NK")
    assert [advisory_body(a) for a in naks] == [
        ({"type": "io.nats.jetstream.advisory.v1.nak", "stream": "NK", "consumer": "C",
          "consumer_seq": i, "stream_seq": i, "deliveries": 1},
         ["type", "id", "timestamp", "stream", "consumer", "consumer_seq", "stream_seq",
          "deliveries"])
        for i in (1, 2, 3)]


def test_progress_extends_the_deadline(w):
    """test_progress_extends_the_deadline (ack_wait 1 s, +WPI every 0.5 s):
    each +WPI is confirmed with an empty reply and restarts the ack wait."""
    w.stream("WP", 1)
    w.consumer("WP", "C", ack_policy="explicit", ack_wait=SEC)
    w.pull("WP", "C", "_R.p", batch=5, expires=30 * SEC)
    w.wait_for(lambda: w.delivered("wp."), what="the delivery")
    (m,) = w.delivered("wp.")
    for _ in range(3):
        w.quiet(0.5)
        last = w.pub(m.reply, b"+WPI", reply="_R.wpi")
    w.wait_for(lambda: len(w.delivered("wp.")) == 2, what="the redelivery")
    assert [g.data for g in w.on("_R.wpi")] == [b"", b"", b""]
    redo = w.delivered("wp.")[1]
    assert tokens(redo.reply) == [2, 1, 2, 0]
    at(redo.t - last, 1.0)


# --------------------------------------------------------------------------
# max ack pending


def test_max_ack_pending_stalls_and_resumes_push(w):
    """test_max_ack_pending_stalls_and_resumes_push (max_ack_pending 2)."""
    w.stream("MP", 4)
    w.sub("dlv.mp")
    w.consumer("MP", "C", ack_policy="explicit", deliver_subject="dlv.mp", max_ack_pending=2)
    w.wait_for(lambda: len(w.delivered("mp.")) == 2, what="two deliveries")
    w.quiet(0.5)
    m = w.delivered("mp.")
    assert [(g.data, tokens(g.reply)) for g in m] == [(b"m1", [1, 1, 1, 3]), (b"m2", [1, 2, 2, 2])]
    w.pub(m[1].reply, b"+ACK")
    w.wait_for(lambda: len(w.delivered("mp.")) == 3, what="the third")
    w.pub(m[0].reply, b"+ACK")
    w.wait_for(lambda: len(w.delivered("mp.")) == 4, what="the fourth")
    assert [(g.data, tokens(g.reply)) for g in w.delivered("mp.")[2:]] == [
        (b"m3", [1, 3, 3, 1]), (b"m4", [1, 4, 4, 0])]
    assert raw_seqs(w.info("MP", "C")) == {"delivered": (4, 4), "ack_floor": (2, 2),
                                           "num_ack_pending": 2, "num_redelivered": 0,
                                           "num_waiting": 0, "num_pending": 0}


def test_max_ack_pending_stalls_and_resumes_pull(w):
    """test_max_ack_pending_stalls_and_resumes_pull: the request waits, no status."""
    w.stream("MQ", 4)
    w.consumer("MQ", "C", ack_policy="explicit", max_ack_pending=2)
    w.pull("MQ", "C", "_R.p", batch=4, expires=60 * SEC)
    w.wait_for(lambda: len(w.delivered("mq.")) == 2, what="two deliveries")
    w.quiet(0.5)
    m = w.delivered("mq.")
    assert [g.data for g in m] == [b"m1", b"m2"]
    assert w.on("_R.p") == m  # no status: the request still waits
    assert raw_seqs(w.info("MQ", "C"))["num_waiting"] == 1
    w.pub(m[0].reply, b"+ACK")
    w.wait_for(lambda: len(w.delivered("mq.")) == 3, what="the third")
    w.pub(m[1].reply, b"+ACK")
    w.wait_for(lambda: len(w.delivered("mq.")) == 4, what="the fourth")
    assert [g.data for g in w.delivered("mq.")] == [b"m1", b"m2", b"m3", b"m4"]
    assert raw_seqs(w.info("MQ", "C")) == {"delivered": (4, 4), "ack_floor": (2, 2),
                                           "num_ack_pending": 2, "num_redelivered": 0,
                                           "num_waiting": 0, "num_pending": 0}


# --------------------------------------------------------------------------
# pull requests: expiry, heartbeats


def test_pull_request_expiry_408_with_pending_counts(w):
    """test_pull_request_expiry_408_with_pending_counts: the 408 carries the
    messages left of the batch and the bytes left of max_bytes (0 if none)."""
    w.stream("EX", 1)
    w.consumer("EX", "C", ack_policy="explicit")
    sent = w.pull("EX", "C", "_R.e1", batch=5, expires=500 * MS, max_bytes=1000)
    w.pull("EX", "C", "_R.e2", batch=5, expires=600 * MS)
    w.wait_for(lambda: len(w.on("_R.e1")) == 2 and w.on("_R.e2"), what="both 408s")
    m, end1 = w.on("_R.e1")
    (end2,) = w.on("_R.e2")
    size = len(m.subject) + len(m.reply) + len(m.hdr) + len(m.data)
    assert size == 46  # "ex.a" + the 40-byte ack reply + "m1"
    assert (end1.hdr, end1.data) == (TIMEOUT % (4, 1000 - size), b"")
    assert (end2.hdr, end2.data) == (TIMEOUT % (5, 0), b"")
    at(end1.t - sent, 0.5)
    at(end2.t - sent, 0.6)
    assert end1.t <= end2.t
    w.quiet(0.5)
    assert len(w.on("_R.e1")) == 2 and len(w.on("_R.e2")) == 1
    assert raw_seqs(w.info("EX", "C"))["num_waiting"] == 0


def test_pull_idle_heartbeat(w):
    """test_pull_idle_heartbeat (hb 0.4 s, expires 1.2 s): a 100 after 0.4 s,
    a message restarts the heartbeat, the 408 at the expiry; Last-Stream
    counts the message the filter skipped."""
    w.stream("PH", 1)
    w.consumer("PH", "C", ack_policy="explicit", filter_subject="ph.b")
    sent = w.pull("PH", "C", "_R.h", batch=2, expires=1200 * MS, idle_heartbeat=400 * MS)
    w.wait_for(lambda: w.on("_R.h"), what="the first heartbeat")
    w.quiet(0.2)
    w.pub("ph.b", b"x")
    w.wait_for(lambda: len(w.on("_R.h")) == 4, what="heartbeat, message, heartbeat, 408")
    got = w.on("_R.h")
    assert [(g.reply is not None, g.hdr, g.data) for g in got] == [
        (False, BEAT % (0, 1), b""),
        (True, b"", b"x"),
        (False, BEAT % (1, 2), b""),
        (False, TIMEOUT % (1, 0), b"")]
    at(got[0].t - sent, 0.4)
    at(got[2].t - got[1].t, 0.4)
    at(got[3].t - sent, 1.2)
    w.quiet(0.5)
    assert len(w.on("_R.h")) == 4


def test_pull_heartbeats_of_a_request_that_gets_nothing(w):
    """test_pull_heartbeats_of_a_request_that_gets_nothing (hb 0.25 s,
    expires 0.9 s): 100s at 0.25, 0.5, 0.75, then the 408 at 0.9."""
    w.stream("PG", 1)
    w.consumer("PG", "C", ack_policy="explicit")
    w.pull("PG", "C", "_R.first", batch=1)
    w.wait_for(lambda: w.on("_R.first"), what="the message")
    sent = w.pull("PG", "C", "_R.h", batch=2, expires=900 * MS, idle_heartbeat=250 * MS)
    w.wait_for(lambda: len(w.on("_R.h")) == 4, what="three heartbeats and the 408")
    got = w.on("_R.h")
    assert [g.hdr for g in got] == [BEAT % (1, 1)] * 3 + [TIMEOUT % (2, 0)]
    for g, when in zip(got, (0.25, 0.5, 0.75, 0.9)):
        at(g.t - sent, when, late=0.15)  # closer: four events in 0.9 s


# --------------------------------------------------------------------------
# push heartbeats


def test_push_idle_heartbeat(w):
    """test_push_idle_heartbeat (hb 0.4 s): a heartbeat 0.4 s after the last
    delivery or heartbeat, Last-Consumer/Last-Stream the delivered pair, no
    reply subject."""
    w.stream("HB", 1)
    w.sub("dlv.hb")
    w.consumer("HB", "C", ack_policy="explicit", deliver_subject="dlv.hb",
               idle_heartbeat=400 * MS)
    w.wait_for(lambda: len(w.on("dlv.hb")) == 2, what="message, heartbeat")
    w.quiet(0.1)
    w.pub("hb.a", b"four")
    w.wait_for(lambda: len(w.on("dlv.hb")) == 5, what="message and two heartbeats")
    got = w.on("dlv.hb")[:5]
    assert [(g.subject, g.reply and g.reply.split(".")[:7], g.hdr, g.data) for g in got] == [
        ("hb.a", ["$JS", "ACK", "HB", "C", "1", "1", "1"], b"", b"m1"),
        ("dlv.hb", None, BEAT % (1, 1), b""),
        ("hb.a", ["$JS", "ACK", "HB", "C", "1", "2", "2"], b"", b"four"),
        ("dlv.hb", None, BEAT % (2, 2), b""),
        ("dlv.hb", None, BEAT % (2, 2), b"")]
    for prev, g in ((got[0], got[1]), (got[2], got[3]), (got[3], got[4])):
        at(g.t - prev.t, 0.4)


# --------------------------------------------------------------------------
# inactivity


# The deletion is a background timer on both servers: the late bound is
# doubled, the early one (which tells the behaviours apart) is not.


def _check_deleted(w, stream, name):
    (adv,) = [a for a in w.advisories("CONSUMER.DELETED", stream)
              if a.subject == "$JS.EVENT.ADVISORY.CONSUMER.DELETED.%s.%s" % (stream, name)]
    body, keys = advisory_body(adv)
    assert keys == ["type", "id", "timestamp", "stream", "consumer", "action"]
    assert body == {"type": "io.nats.jetstream.advisory.v1.consumer_action", "stream": stream,
                    "consumer": name, "action": "delete"}
    # (nats-server may send the advisory a moment before its API stops
    # listing the consumer, on a loaded machine)
    w.wait_for(lambda: w.api("$JS.API.CONSUMER.NAMES." + stream)["consumers"] == [],
               what="the consumer gone from the names")
    assert w.info(stream, name)["error"] == {"code": 404, "err_code": 10014,
                                             "description": "consumer not found"}
    return adv


def test_ephemeral_inactive_threshold_deletes(w):
    """test_ephemeral_inactive_threshold_deletes (threshold 0.5 s)."""
    w.stream("IN", 2)
    created = w.now()
    name = w.consumer("IN", None, ack_policy="explicit", inactive_threshold=500 * MS)["name"]
    w.wait_for(lambda: w.advisories("CONSUMER.DELETED", "IN"), what="the deletion")
    adv = _check_deleted(w, "IN", name)
    # nats-server waits 0.1 s to 1 s more than the threshold for a pull
    # consumer (consumer.go, updateInactiveThreshold: jitter).
    assert 0.5 + 0.1 - EARLY <= adv.t - created <= 0.5 + 1.0 + 2 * LATE, adv.t - created
    # (nats-server may send the advisory just before the stream lets the
    # consumer go: CI once saw it still counted right after.)
    w.wait_for(lambda: w.api("$JS.API.STREAM.INFO.IN")["state"]["consumer_count"] == 0,
               what="the stream without the consumer")
    st = w.api("$JS.API.STREAM.INFO.IN")["state"]
    assert (st["messages"], st["consumer_count"]) == (2, 0)


def test_ephemeral_pull_kept_alive_by_a_waiting_request(w):
    """test_ephemeral_pull_kept_alive_by_a_waiting_request (threshold 0.5 s,
    a request expiring after 1.5 s): not deleted while it waits nor within a
    threshold after; deleted within two (observed 2.24 and 2.44 s)."""
    w.stream("IP", 1)
    name = w.consumer("IP", None, ack_policy="explicit", inactive_threshold=500 * MS,
                      filter_subject="ip.zz")["name"]
    sent = w.pull("IP", name, "_R.ip", batch=1, expires=1500 * MS)
    w.wait_for(lambda: w.advisories("CONSUMER.DELETED", "IP"), what="the deletion")
    assert [g.hdr for g in w.on("_R.ip")] == [TIMEOUT % (1, 0)]
    adv = _check_deleted(w, "IP", name)
    assert 1.5 + 0.5 + 0.1 - EARLY <= adv.t - sent <= 1.5 + 0.5 + 1.0 + 2 * LATE, adv.t - sent


def test_ephemeral_push_deleted_after_interest_goes(w):
    """test_ephemeral_push_deleted_after_interest_goes (threshold 0.5 s)."""
    w.stream("IQ", 1)
    w.sub("dlv.iq")
    name = w.consumer("IQ", None, ack_policy="none", inactive_threshold=500 * MS,
                      deliver_subject="dlv.iq", filter_subject="iq.zz")["name"]
    w.quiet(0.8)
    assert w.advisories("CONSUMER.DELETED", "IQ") == []
    left = w.unsub("dlv.iq")
    w.wait_for(lambda: w.advisories("CONSUMER.DELETED", "IQ"), what="the deletion")
    adv = _check_deleted(w, "IQ", name)
    assert 0.5 - EARLY <= adv.t - left <= 1.0 + 2 * LATE, adv.t - left


# --------------------------------------------------------------------------
# pause


def test_pause_until_then_resume(w):
    """test_pause_until_then_resume: a waiting pull gets nothing until
    pause_until; PAUSE advisories say paused true, then false."""
    w.stream("PZ", 1)
    w.consumer("PZ", "C", ack_policy="explicit")
    until_ns = time.time_ns() + SEC
    until = rfc3339(until_ns)
    resp = w.api("$JS.API.CONSUMER.PAUSE.PZ.C", {"pause_until": until})
    remaining = resp.pop("pause_remaining")
    assert resp == {"type": "io.nats.jetstream.api.v1.consumer_pause_response", "paused": True,
                    "pause_until": until}
    assert 0 < remaining <= until_ns - time.time_ns() + 1.2 * SEC
    w.pull("PZ", "C", "_R.nw", batch=1, no_wait=True)
    w.wait_for(lambda: w.on("_R.nw"), what="the 404")
    assert [g.hdr for g in w.on("_R.nw")] == [b"NATS/1.0 404 No Messages\r\n\r\n"]
    w.pull("PZ", "C", "_R.p", batch=1, expires=10 * SEC)
    info = w.info("PZ", "C")
    assert (info["paused"], info["num_pending"]) == (True, 1)
    assert 0 < info["pause_remaining"] <= remaining
    w.wait_for(lambda: w.on("_R.p"), what="the message at pause_until")
    (m,) = w.on("_R.p")
    assert (m.data, tokens(m.reply)) == (b"m1", [1, 1, 1, 0])
    assert until_ns - EARLY * SEC <= m.wall <= until_ns + LATE * SEC, m.wall - until_ns
    w.wait_for(lambda: len(w.advisories("CONSUMER.PAUSE", "PZ")) == 2, what="the resume advisory")
    advs = [advisory_body(a)[0] for a in w.advisories("CONSUMER.PAUSE", "PZ")]
    assert advs == [
        {"type": "io.nats.jetstream.advisory.v1.consumer_pause", "stream": "PZ", "consumer": "C",
         "paused": True, "pause_until": until},
        {"type": "io.nats.jetstream.advisory.v1.consumer_pause", "stream": "PZ", "consumer": "C",
         "paused": False, "pause_until": until}]
    info = w.info("PZ", "C")
    assert "paused" not in info and "pause_remaining" not in info


def test_pause_in_config_at_create(w):
    """test_pause_in_config_at_create and ..._advisories: created paused, the
    create response says so; CONSUMER.CREATED, PAUSE (true) at once, PAUSE
    (false) at the resume, and the first delivery then."""
    w.stream("PC", 1)
    w.sub("dlv.pc")
    until_ns = time.time_ns() + SEC
    until = rfc3339(until_ns)
    c = w.consumer("PC", "C", ack_policy="explicit", deliver_subject="dlv.pc", pause_until=until)
    assert (c["paused"], c["config"]["pause_until"]) == (True, until)
    assert 0 < c["pause_remaining"] <= SEC
    w.wait_for(lambda: w.delivered("pc."), what="the delivery at the resume")
    (m,) = w.delivered("pc.")
    assert until_ns - EARLY * SEC <= m.wall <= until_ns + LATE * SEC, m.wall - until_ns
    w.wait_for(lambda: len(w.advisories("CONSUMER.PAUSE", "PC")) == 2, what="the resume advisory")
    advs = [a for a in w.got if a.subject.startswith(ADVISORY + "CONSUMER.")
            and a.subject.endswith(".PC.C")]
    assert [(a.subject, advisory_body(a)[0].get("paused"), advisory_body(a)[0].get("pause_until"))
            for a in advs] == [
        ("$JS.EVENT.ADVISORY.CONSUMER.CREATED.PC.C", None, None),
        ("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.PC.C", True, until),
        ("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.PC.C", False, until)]
    assert advs[1].wall < until_ns
    assert until_ns - EARLY * SEC <= advs[2].wall <= until_ns + LATE * SEC


# --------------------------------------------------------------------------
# replay original, rate limit


def _replay_stream(w, name):
    """Four messages 0.3 s and 0.6 s apart, the last two together; their
    stored times (from the ack reply subjects' timestamps, later)."""
    w.stream(name)
    for pause, data in ((0, b"m1"), (0.3, b"m2"), (0.6, b"m3"), (0, b"m4")):
        w.quiet(pause)
        w.pub(name.lower() + ".a", data)
    w.sync()


def _stored_gaps(frames):
    ts = [int(g.reply.split(".")[7]) for g in frames]
    return [(b - a) / SEC for a, b in zip(ts, ts[1:])]


def test_replay_original_push(w):
    """test_replay_original_push: deliveries spaced as the messages were stored."""
    _replay_stream(w, "RP")
    w.sub("dlv.rp")
    w.consumer("RP", "C", ack_policy="none", deliver_subject="dlv.rp", replay_policy="original")
    w.wait_for(lambda: len(w.delivered("rp.")) == 4, what="four deliveries")
    got = w.delivered("rp.")
    assert [(g.data, tokens(g.reply)) for g in got] == [
        (b"m1", [1, 1, 1, 3]), (b"m2", [1, 2, 2, 2]), (b"m3", [1, 3, 3, 1]), (b"m4", [1, 4, 4, 0])]
    gaps = _stored_gaps(got)
    # (the pauses were 0.3 s and 0.6 s on the publisher's side; a loaded
    # server may store the earlier message of a pair a little late)
    assert gaps[0] >= 0.25 and gaps[1] >= 0.5, gaps
    for prev, g, gap in zip(got, got[1:], gaps):
        at(g.t - prev.t, gap)
    assert raw_seqs(w.info("RP", "C"))["delivered"] == (4, 4)


def test_replay_original_pull(w):
    """test_replay_original_pull: the same spacing to a waiting pull request,
    whose 408 then says 6 of its batch of 10 are left."""
    _replay_stream(w, "RQ")
    w.consumer("RQ", "P", ack_policy="none", replay_policy="original")
    sent = w.pull("RQ", "P", "_R.p", batch=10, expires=2 * SEC)
    w.wait_for(lambda: len(w.on("_R.p")) == 5, what="four messages and the 408")
    got = w.on("_R.p")
    assert [(g.data, g.hdr) for g in got] == [
        (b"m1", b""), (b"m2", b""), (b"m3", b""), (b"m4", b""), (b"", TIMEOUT % (6, 0))]
    for prev, g, gap in zip(got, got[1:4], _stored_gaps(got[:4])):
        at(g.t - prev.t, gap)
    at(got[4].t - sent, 2.0)


def test_rate_limit_bps_paces_after_a_burst(w):
    """test_rate_limit_bps_paces_after_a_burst (8000 bps, max_msg_size 1000,
    444-byte deliveries): two at once, then at 0.332 s and every 0.444 s
    (observed 0, 0, 0.333, 0.786, 1.230, 1.664)."""
    w.stream("RL", 6, data=b"%d" + b"x" * 399, max_msg_size=1000)
    w.sub("dlv.rl")
    w.consumer("RL", "C", ack_policy="none", deliver_subject="dlv.rl", rate_limit_bps=8000)
    w.wait_for(lambda: len(w.delivered("rl.")) == 6, what="six deliveries")
    got = w.delivered("rl.")
    assert len(got[0].subject) + len(got[0].reply) + len(got[0].data) == 444
    assert [g.data[:1] for g in got] == [b"1", b"2", b"3", b"4", b"5", b"6"]
    for g, when in zip(got, (0, 0, 0.332, 0.776, 1.220, 1.664)):
        at(g.t - got[0].t, when, late=0.3)


def test_rate_limit_bps_without_max_msg_size_bursts(w):
    """test_rate_limit_bps_without_max_msg_size_bursts: the burst is
    max_payload (1 MiB), so six 444-byte messages go at once."""
    w.stream("RM", 6, data=b"%d" + b"x" * 399)
    w.sub("dlv.rm")
    w.consumer("RM", "C", ack_policy="none", deliver_subject="dlv.rm", rate_limit_bps=8000)
    w.wait_for(lambda: len(w.delivered("rm.")) == 6, what="six deliveries")
    got = w.delivered("rm.")
    assert got[-1].t - got[0].t < 0.2


# --------------------------------------------------------------------------
# priority groups: priority_timeout (test_js_priority's fake-clock tests)


def _pin_of(g):
    return PIN_HDR.search(g.hdr).group(1).decode()


def test_pin_timeout_exact(w):
    """test_pin_timeout_exact (priority_timeout 1.5 s): the pin ends
    priority_timeout after the pinned client's last request; deliveries do
    not extend it; the old pin's requests then end with 423s in queue order."""
    w.stream("PT")
    w.consumer("PT", "P", ack_policy="explicit", deliver_policy="new",
               priority_policy="pinned_client", priority_groups=["g"],
               priority_timeout=1500 * MS)
    w.pull("PT", "P", "_R.a", batch=10, group="g", expires=60 * SEC)
    w.waiting("PT", "P", 1)
    before = time.time_ns()
    w.pub("pt.x", b"one")
    w.wait_for(lambda: w.delivered("pt.") and w.advisories("CONSUMER.PINNED", "PT"),
               what="the pinned delivery and advisory")
    first = w.delivered("pt.")[-1]
    pin = _pin_of(first)
    (pinned,) = w.advisories("CONSUMER.PINNED", "PT")
    body, keys = advisory_body(pinned)
    assert keys == ["type", "id", "timestamp", "account", "stream", "consumer", "group",
                    "pinned_id"]
    assert body == {"type": "io.nats.jetstream.advisory.v1.consumer_group_pinned",
                    "account": "$G", "stream": "PT", "consumer": "P", "group": "g",
                    "pinned_id": pin}
    (group,) = w.info("PT", "P")["priority_groups"]
    assert before <= rfc3339_ns(group.pop("pinned_ts")) <= time.time_ns()
    assert group == {"group": "g", "pinned_client_id": pin}
    w.quiet(first.t + 0.7 - w.now())  # the renewal 0.7 s after the pin, well inside 1.5 s
    renewed = w.pull("PT", "P", "_R.b", batch=1, group="g", id=pin, expires=60 * SEC)
    assert renewed - first.t < 1.2, "the renewal came too late to tell anything"
    w.quiet(renewed + 0.5 - w.now())
    w.pub("pt.x", b"two")  # a delivery extends nothing
    w.wait_for(lambda: len(w.delivered("pt.")) == 2, what="the second delivery")
    assert _pin_of(w.delivered("pt.")[-1]) == pin
    w.wait_for(lambda: w.advisories("CONSUMER.UNPINNED", "PT"), what="the unpin")
    (gone,) = w.advisories("CONSUMER.UNPINNED", "PT")
    # 1.5 s after the renewing request: not 1.5 s after the pin (0.7 s
    # earlier), nor after the delivery (0.5 s later).
    at(gone.t - renewed, 1.5, late=0.45)
    assert advisory_body(gone)[0] == {
        "type": "io.nats.jetstream.advisory.v1.consumer_group_unpinned", "account": "$G",
        "stream": "PT", "consumer": "P", "group": "g", "reason": "timeout"}
    assert w.info("PT", "P")["priority_groups"] == [{"group": "g",
                                                     "pinned_ts": "0001-01-01T00:00:00Z"}]
    w.pull("PT", "P", "_R.c", batch=1, group="g", expires=60 * SEC)
    w.waiting("PT", "P", 3)
    w.pub("pt.x", b"three")
    w.wait_for(lambda: w.on("_R.c") and len([g for g in w.got if g.hdr.startswith(
        b"NATS/1.0 423")]) == 2, what="two 423s and the new pin's delivery")
    ends = [g for g in w.got if g.hdr.startswith(b"NATS/1.0 423")]
    assert [(g.dest, g.hdr) for g in ends] == [
        ("_R.b", b"NATS/1.0 423 Nats-Wrong-Pin-Id\r\nNats-Pending-Messages: 1\r\n"
                 b"Nats-Pending-Bytes: 0\r\n\r\n"),
        ("_R.a", b"NATS/1.0 423 Nats-Wrong-Pin-Id\r\nNats-Pending-Messages: 8\r\n"
                 b"Nats-Pending-Bytes: 0\r\n\r\n")]
    (last,) = w.on("_R.c")
    assert last.data == b"three"
    assert _pin_of(last) not in ("", pin)


def test_pin_survives_expired_request(w):
    """test_pin_survives_expired_request_not_restart: the pin outlives the
    pinned client's requests."""
    w.stream("PS", 2)
    w.consumer("PS", "P", ack_policy="explicit", priority_policy="pinned_client",
               priority_groups=["g"], priority_timeout=60 * SEC)
    w.pull("PS", "P", "_R.a", batch=1, group="g", expires=SEC)
    w.wait_for(lambda: w.on("_R.a"), what="the first delivery")
    pin = _pin_of(w.on("_R.a")[0])
    w.quiet(1.3)  # the request would have expired by now
    assert w.info("PS", "P")["priority_groups"][0]["pinned_client_id"] == pin
    w.pull("PS", "P", "_R.b", batch=1, group="g", no_wait=True)
    w.wait_for(lambda: w.on("_R.b"), what="the 404")
    assert [g.hdr for g in w.on("_R.b")] == [b"NATS/1.0 404 No Messages\r\n\r\n"]
    w.pull("PS", "P", "_R.c", batch=1, group="g", id=pin, no_wait=True)
    w.wait_for(lambda: w.on("_R.c"), what="the pinned delivery")
    assert [(g.data, _pin_of(g)) for g in w.on("_R.c")] == [(b"m2", pin)]


# --------------------------------------------------------------------------
# stream timers (test_js_dedupe's fake-clock tests)


def _hpub(w, subject, headers, data=b""):
    """A JetStream publish with headers; its PubAck (or error) as JSON."""
    hdr = b"NATS/1.0\r\n" + b"".join(b"%s: %s\r\n" % kv for kv in headers) + b"\r\n"
    w.n += 1
    reply = w._own("_R.api.%d" % w.n)
    w.r.send(b"HPUB %s %s %d %d\r\n%s%s\r\n" % (subject.encode(), reply.encode(), len(hdr),
                                                 len(hdr) + len(data), hdr, data))
    w.wait_for(lambda: any(g.subject == reply for g in w.got), what="the PubAck")
    (g,) = [g for g in w.got if g.subject == reply]
    return json.loads(g.data)


def _state(w, name):
    st = w.api("$JS.API.STREAM.INFO." + name)["state"]
    return st["messages"], st["first_seq"], st["last_seq"]


def _seqs(w, name):
    """The stream's stored sequences (MSG.GET over first..last)."""
    _, first, last = _state(w, name)
    out = []
    for seq in range(first, last + 1):
        r = w.api("$JS.API.STREAM.MSG.GET." + name, {"seq": seq})
        if "message" in r:
            out.append(seq)
    return out


def _until(w, what, pred, limit=6.0):
    """Poll ``pred()`` every 20 ms; the time it first held."""
    deadline = time.monotonic() + limit
    while not pred():
        assert time.monotonic() < deadline, "waited %.1f s for %s" % (limit, what)
        w.quiet(0.02)
    return w.now()


def _stream_raw(w, name, **cfg):
    body = {"name": name}
    body.update(cfg)
    resp = w.api("$JS.API.STREAM.CREATE." + name, body)
    assert "error" not in resp, resp


def test_msg_id_forgotten_after_duplicate_window(w):
    """test_msg_id_forgotten_after_duplicate_window (window 1 s): a Msg-Id
    within the window is a duplicate of its first sequence; once the window
    has passed, the same id stores a new message."""
    _stream_raw(w, "DD", subjects=["dd"], duplicate_window=SEC)
    first = w.now()
    assert _hpub(w, "dd", [(b"Nats-Msg-Id", b"a")], b"1") == {"stream": "DD", "seq": 1}
    w.quiet(first + 0.5 - w.now())
    assert _hpub(w, "dd", [(b"Nats-Msg-Id", b"b")], b"2") == {"stream": "DD", "seq": 2}
    assert _hpub(w, "dd", [(b"Nats-Msg-Id", b"a")], b"1") == {"stream": "DD", "seq": 1,
                                                             "duplicate": True}
    w.quiet(first + 1.3 - w.now())  # "a" is 1.3 s old, "b" 0.8 s
    assert w.now() - first < 1.45, "too late to tell the two ids apart"
    assert _hpub(w, "dd", [(b"Nats-Msg-Id", b"b")], b"2") == {"stream": "DD", "seq": 2,
                                                             "duplicate": True}
    assert _hpub(w, "dd", [(b"Nats-Msg-Id", b"a")], b"1") == {"stream": "DD", "seq": 3}


def test_max_age_expiry(w):
    """test_max_age_expiry_on_a_timer (max_age 1 s): each message goes when
    it is max_age old; the emptied stream's first sequence moves past it."""
    _stream_raw(w, "MA", subjects=["ma.*"], max_age=SEC)
    t1 = w.now()
    w.api("ma.a", b"1")
    w.quiet(t1 + 0.5 - w.now())
    t2 = w.now()
    w.api("ma.b", b"2")
    gone1 = _until(w, "seq 1 to expire", lambda: _state(w, "MA")[0] == 1)
    assert _seqs(w, "MA") == [2]
    gone2 = _until(w, "seq 2 to expire", lambda: _state(w, "MA")[0] == 0)
    at(gone1 - t1, 1.0)
    at(gone2 - t2, 1.0)
    assert _state(w, "MA") == (0, 3, 2)


def test_per_message_ttl_and_never(w):
    """test_per_message_ttl_and_never (max_age 3 s): Nats-TTL 1s and 2 go
    after 1 s and 2 s, "never" outlives max_age, 1h does not."""
    _stream_raw(w, "TT", subjects=["tt.*"], allow_msg_ttl=True, max_age=3 * SEC)
    t0 = w.now()
    for ttl, data in ((b"1s", b"1"), (b"never", b"2"), (b"1h", b"3"), (b"2", b"4")):
        assert "seq" in _hpub(w, "tt.a", [(b"Nats-TTL", ttl)], data)
    w.api("tt.a", b"5")
    steps = []
    for want in ([2, 3, 4, 5], [2, 3, 5], [2]):
        steps.append(_until(w, "stored %s" % want, lambda: _seqs(w, "TT") == want) - t0)
    for took, when in zip(steps, (1.0, 2.0, 3.0)):
        assert when - EARLY <= took <= when + 2 * LATE, steps
    _, first, last = _state(w, "TT")
    assert (first, last) == (2, 5)


MARKER = b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 1s\r\nNats-Rollup: sub\r\n\r\n"


def _stored(w, name, seq):
    m = w.api("$JS.API.STREAM.MSG.GET." + name, {"seq": seq})["message"]
    return (m["subject"], base64.b64decode(m.get("hdrs", "")), base64.b64decode(m.get("data", "")))


def test_subject_delete_markers_on_max_age(w):
    """test_subject_delete_markers_on_max_age (max_age 1 s, marker TTL 1 s):
    a marker per emptied subject; the markers then expire without markers of
    their own. The order of the markers is not checked: nats-server has
    written sm.b's first (its Nats-TTL expiry ran before the max_age pass,
    which reads a coarse clock), where the fake-clock test expects the order
    of the messages, which natsbroker follows."""
    _stream_raw(w, "SM", subjects=["sm.*"], allow_msg_ttl=True,
                subject_delete_marker_ttl=SEC, max_age=SEC)
    w.api("sm.a", b"x")
    _hpub(w, "sm.b", [(b"Nats-TTL", b"1s")], b"x")
    _hpub(w, "sm.c", [(b"Nats-TTL", b"5s")], b"x")
    w.api("sm.c", b"y")
    _until(w, "three markers", lambda: _state(w, "SM") == (3, 5, 7))
    assert sorted(_stored(w, "SM", seq) for seq in (5, 6, 7)) == [
        ("sm.a", MARKER, b""), ("sm.b", MARKER, b""), ("sm.c", MARKER, b"")]
    _until(w, "the markers to expire", lambda: _state(w, "SM") == (0, 8, 7))


def test_marker_ttl_raises_shorter_message_ttls(w):
    """test_marker_ttl_raises_shorter_message_ttls (marker TTL 2 s): a
    shorter Nats-TTL is stored raised to 2 (in place), a longer one kept; an
    emptied subject gets a marker, one still holding a message does not."""
    _stream_raw(w, "MR", subjects=["mr.*"], allow_msg_ttl=True,
                subject_delete_marker_ttl=2 * SEC)
    t0 = w.now()
    _hpub(w, "mr.b", [(b"X", b"1"), (b"Nats-TTL", b"1s"), (b"Y", b"2")], b"x")
    _hpub(w, "mr.c", [(b"Nats-TTL", b"1")], b"x")
    w.api("mr.c", b"y")
    _hpub(w, "mr.d", [(b"Nats-TTL", b"2m")], b"x")
    # The raised TTL goes last (nats-server removes the header, then appends).
    assert [_stored(w, "MR", seq)[1] for seq in (1, 2, 3, 4)] == [
        b"NATS/1.0\r\nX: 1\r\nY: 2\r\nNats-TTL: 2\r\n\r\n", b"NATS/1.0\r\nNats-TTL: 2\r\n\r\n",
        b"", b"NATS/1.0\r\nNats-TTL: 2m\r\n\r\n"]
    gone = _until(w, "the 2 s TTLs", lambda: _state(w, "MR")[0] == 3 and _state(w, "MR")[2] == 5)
    assert 2.0 - EARLY <= gone - t0 <= 2.0 + 2 * LATE, gone - t0
    assert _seqs(w, "MR") == [3, 4, 5]
    subject, hdr, data = _stored(w, "MR", 5)
    assert (subject, data) == ("mr.b", b"") and b"Nats-Marker-Reason: MaxAge" in hdr


def test_marker_ttl_does_not_raise_with_one_message_per_subject(w):
    """nats-server (stream.go): with max_msgs_per_subject 1 a shorter Nats-TTL
    is stored as sent, and the message goes after it."""
    _stream_raw(w, "M1", subjects=["m1.*"], allow_msg_ttl=True, max_msgs_per_subject=1,
                subject_delete_marker_ttl=2 * SEC)
    t0 = w.now()
    _hpub(w, "m1.b", [(b"Nats-TTL", b"1s"), (b"Y", b"2")], b"x")
    assert _stored(w, "M1", 1)[1] == b"NATS/1.0\r\nNats-TTL: 1s\r\nY: 2\r\n\r\n"
    gone = _until(w, "the 1 s TTL", lambda: _state(w, "M1")[1] >= 2)
    assert 1.0 - EARLY <= gone - t0 <= 1.0 + 2 * LATE, gone - t0


def test_interest_stream_without_consumers_numbers_but_keeps_nothing(w):
    """test_interest_stream_without_consumers_numbers_but_keeps_nothing."""
    _stream_raw(w, "IS", subjects=["is.*"], retention="interest")
    assert w.api("is.a", b"x") == {"stream": "IS", "seq": 1}
    assert _hpub(w, "is.b", [(b"Nats-Msg-Id", b"1")], b"x") == {"stream": "IS", "seq": 2}
    assert _hpub(w, "is.b", [(b"Nats-Msg-Id", b"1")], b"x") == {"stream": "IS", "seq": 2,
                                                               "duplicate": True}
    err = _hpub(w, "is.c", [(b"Nats-Expected-Last-Sequence", b"3")], b"x")["error"]
    assert err["description"] == "wrong last sequence: 2", err
    assert _state(w, "IS") == (0, 3, 2)
