"""natsbroker.jetstream.remote_sourcing on a simulated clock: what a link
asks the origin for, what it makes of deliveries, gaps, heartbeats and flow
control, and when it asks again (nats-server's stream.go timings)."""

import json

from twisted.internet.task import Clock

from natsbroker.jetstream.remote_sourcing import (
    FC_REPLY,
    REQUIRED_LEVEL,
    RemoteSourcing,
    retry_backoff,
)


class Account:
    def __init__(self):
        self.requests, self.published, self.subs = [], [], {}

    def request(self, subject, payload, reply=None, headers=None):
        self.requests.append((subject, json.loads(payload), reply, headers))

    def publish(self, subject, payload, reply=None, headers=None):
        self.published.append((subject, payload))

    def subscribe(self, subject, callback, hidden=False):
        sub = object()
        self.subs[sub] = (subject, callback)
        return sub

    def unsubscribe(self, sub):
        self.subs.pop(sub, None)

    def sub_for(self, subject):
        return next((s, cb) for s, (subj, cb) in self.subs.items() if subj == subject)


class State:
    def __init__(self, last=0):
        self.msgs = last
        self.first_seq = 1 if last else 0
        self.last_seq = last
        self.last_ts = 0


class Store:
    def __init__(self):
        self.last = 0

    def state(self):
        return State(self.last)

    def load(self, seq):
        return None


class Spec:
    def __init__(self, name="O", filter_subject="", transforms=None):
        self.name, self.filter_subject = name, filter_subject
        self.subject_transforms = transforms
        self.external = None
        self.opt_start_seq = 0
        self.opt_start_time = None
        self.consumer = None


class Config:
    def __init__(self, mirror=None, sources=None):
        self.mirror, self.sources, self.num_replicas = mirror, sources, 3


class Dest:
    name = "D"

    def __init__(self, cfg):
        self.config = cfg
        self.store = Store()


class Sink:
    def __init__(self):
        self.calls = []

    def copy(self, link, subject, hdr, data, sseq, ts):
        self.calls.append(("copy", subject, hdr, data, sseq, ts))

    def skip(self, link, first, last):
        self.calls.append(("skip", first, last))

    def flow_control(self, link, reply, hdr):
        self.calls.append(("fc", reply, hdr))


def setup(mirror=True, spec=None):
    clock, account, sink = Clock(), Account(), Sink()
    spec = spec or Spec()
    dest = Dest(Config(mirror=spec) if mirror else Config(sources=[spec]))
    rs = RemoteSourcing(account, clock, dest, sink, account_name="ACC")
    rs.start()
    return rs, clock, account, sink


def answer(account, name="JS_MIRROR_x-abcdefgh", deliver="$JS.M.d1", delivered=0, error=None,
           identity=None):
    subject, body, reply, headers = account.requests[-1]
    sub, cb = account.sub_for(reply)
    resp = {"error": error} if error else {
        "name": name, "config": {"deliver_subject": deliver, "name": name},
        "delivered": {"consumer_seq": 0, "stream_seq": delivered}}
    hdr = b"NATS/1.0\r\nNats-Stream-Identity: %s\r\n\r\n" % identity.encode() if identity else b""
    cb(sub, reply.encode(), None, len(hdr), hdr + json.dumps(resp).encode())


def deliver(account, subject, sseq, dseq, data=b"d", hdr=b"", cname="JS_MIRROR_x-abcdefgh",
            deliver_subject="$JS.M.d1", ts=100, pending=0):
    sub, cb = account.sub_for(deliver_subject)
    reply = ("$JS.ACK.O.%s.1.%d.%d.%d.%d" % (cname, sseq, dseq, ts, pending)).encode()
    cb(sub, subject, reply, len(hdr), hdr + data)


def control(account, hdr, reply=None, deliver_subject="$JS.M.d1"):
    sub, cb = account.sub_for(deliver_subject)
    cb(sub, b"$JS.M.d1", reply, len(hdr), hdr)


def test_a_mirror_asks_for_its_consumer_and_copies_in_order():
    rs, clock, account, sink = setup()
    subject, body, reply, headers = account.requests[0]
    assert subject == "$JS.API.CONSUMER.CREATE.O" and headers == REQUIRED_LEVEL
    cfg = body["config"]
    assert body["stream_name"] == "O" and cfg["deliver_policy"] == "all"
    assert cfg["name"].startswith("JS_MIRROR_") and cfg["deliver_subject"].startswith("$JS.M.")
    assert cfg["metadata"] == {"_nats.mirror.stream": "D", "_nats.mirror.acc": "ACC"}
    answer(account)
    deliver(account, b"o.1", 1, 1, ts=11)
    deliver(account, b"o.3", 3, 2, ts=13, pending=4)  # seq 2 gone at the origin
    deliver(account, b"o.3", 3, 2)  # (again: ignored)
    deliver(account, b"o.9", 9, 3, cname="OLD")  # (an older consumer's: ignored)
    assert sink.calls == [("copy", b"o.1", b"", b"d", 1, 11), ("skip", 2, 2),
                          ("copy", b"o.3", b"", b"d", 3, 13)]
    assert rs.links[0].lag == 3
    mirror, sources = rs.info()
    assert sources is None and mirror.name == "O" and mirror.lag == 3


def test_flow_control_and_heartbeats():
    rs, clock, account, sink = setup()
    answer(account)
    deliver(account, b"o.1", 1, 1)
    control(account, b"NATS/1.0 100 FlowControl Request\r\n\r\n", reply=b"fc.reply")
    assert sink.calls[-1] == ("fc", b"fc.reply", FC_REPLY % (1, 1))
    # A heartbeat that agrees; one naming a stalled consumer's inbox.
    control(account, b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1\r\n"
                     b"Nats-Last-Stream: 1\r\n\r\n")
    control(account, b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1\r\n"
                     b"Nats-Consumer-Stalled: stalled.inbox\r\n\r\n")
    assert account.published == [(b"stalled.inbox", b"")]
    assert len(account.requests) == 1
    # A heartbeat naming a delivery we never had: a new consumer, from
    # where the stream stands, once 2 s have passed since the last request.
    dest_store = rs.dest.store
    dest_store.last = 1
    control(account, b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 5\r\n\r\n")
    assert len(account.requests) == 1
    clock.advance(2.3)
    assert len(account.requests) == 2
    cfg = account.requests[-1][1]["config"]
    assert cfg["deliver_policy"] == "by_start_sequence" and cfg["opt_start_seq"] == 2


def test_a_delivery_out_of_step_and_silence_ask_again():
    rs, clock, account, sink = setup()
    answer(account)
    deliver(account, b"o.1", 1, 1)
    clock.advance(3)
    deliver(account, b"o.5", 5, 3)  # delivery 2 lost
    assert len(account.requests) == 2 and ("skip", 2, 4) not in sink.calls
    answer(account, deliver="$JS.M.d2")
    # Ten seconds without a word: asked again.
    clock.advance(10.5)
    clock.advance(10)
    assert len(account.requests) == 3


def test_a_refused_request_backs_off():
    rs, clock, account, sink = setup()
    answer(account, error={"code": 404, "err_code": 10059, "description": "stream not found"})
    link = rs.links[0]
    assert link.error.err_code == 10059
    mirror, _ = rs.info()
    assert mirror.error is not None
    clock.advance(2 + retry_backoff(1) - 0.01)
    assert len(account.requests) == 1
    clock.advance(0.3)
    assert len(account.requests) == 2
    answer(account, error={"code": 404, "err_code": 10059, "description": "stream not found"})
    clock.advance(2 + retry_backoff(2) + 0.3)
    assert len(account.requests) == 3
    answer(account)
    assert link.error is None and link.fails == 0
    # No answer at all: asked again after 30 s.
    rs2, clock2, account2, _ = setup()
    clock2.advance(30.01)
    clock2.advance(2 + retry_backoff(1) + 0.3)
    assert len(account2.requests) == 2


def test_a_source_stamps_its_copies_and_resumes_after_them():
    spec = Spec(filter_subject="o.a.>")
    rs, clock, account, sink = setup(mirror=False, spec=spec)
    subject, body, reply, headers = account.requests[0]
    assert subject == "$JS.API.CONSUMER.CREATE.O.%s.o.a.>" % body["config"]["name"]
    assert body["config"]["filter_subject"] == "o.a.>"
    answer(account, name="JS_SRC_y-12345678", deliver="$JS.S.d1", identity="Ab3_x-Yz")
    deliver(account, b"o.a.1", 4, 1, hdr=b"NATS/1.0\r\nX: 1\r\nNats-Expected-Stream: O\r\n\r\n",
            cname="JS_SRC_y-12345678", deliver_subject="$JS.S.d1")
    kind, subj, hdr, data, sseq, ts = sink.calls[-1]
    assert (kind, subj, sseq) == ("copy", b"o.a.1", 4)
    assert hdr == (b"NATS/1.0\r\nX: 1\r\nNats-Stream-Source: O 4 o.a.> > o.a.1 Ab3_x-Yz"
                   b"\r\n\r\n")
    # A source's gap is no gap (its own sequences): only delivery steps count.
    deliver(account, b"o.a.2", 9, 2, cname="JS_SRC_y-12345678", deliver_subject="$JS.S.d1")
    assert sink.calls[-1][4] == 9 and not [c for c in sink.calls if c[0] == "skip"]
    clock.advance(3)
    deliver(account, b"o.a.3", 12, 4, cname="JS_SRC_y-12345678", deliver_subject="$JS.S.d1")
    cfg = account.requests[-1][1]["config"]
    assert cfg["deliver_policy"] == "by_start_sequence" and cfg["opt_start_seq"] == 10
    _, sources = rs.info()
    assert sources[0].seq == 9
    rs.stop()
    assert not account.subs and not clock.getDelayedCalls()
