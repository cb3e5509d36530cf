"""Consumer ``ack_policy: "flow_control"`` (nats-server 2.14+, API level 4),
against nats-server 2.15.1 and natsbroker side by side.

What nats-server does (consumer.go, observed with 2.15.1):

* config: only a push consumer (10218); ``flow_control`` and a 1s
  ``idle_heartbeat`` are forced unless pedantic (pedantic: 10219 without flow
  control, 10052 "flow control ack policy heartbeat needs to be 1s");
  ``max_ack_pending`` must be > 0 (10220, default 1000); no ``ack_wait`` or
  ``backoff`` (10221); no ``max_deliver`` > 0 (10222); ``_nats.req.level`` 4;
  allowed on a workqueue stream;
* acks to the ``$JS.ACK`` reply subjects are confirmed but do nothing
  (``+ACK``, ``-NAK``...); there is no ack wait, so nothing is redelivered;
* a flow control request goes out when the delivery reaches
  ``max_ack_pending``, and after an idle heartbeat while deliveries are
  unacknowledged (and no request is outstanding);
* a reply to a flow control request with ``Nats-Last-Consumer`` /
  ``Nats-Last-Stream`` headers acks up to those sequences like an ack ``all``
  (a plain reply, or one without a consumer sequence, only reopens the window).

Transcripts are compared as in test_js_priority (its ``Wire`` client); flow
control reply subjects carry a random token, shown as ``ID``.
"""

import json
import re

import pytest

from tests.support.servers import ServerProcess
from tests.test_js_priority import KINDS, Wire, _consumer, _stream

pytestmark = pytest.mark.timeout(180)

FC_ID = re.compile(r"(\$JS\.FC\.[^. '\\]+\.[^. '\\]+)\.[A-Za-z0-9]{4}")
SEC = 10**9
CREATE = "$JS.API.CONSUMER.CREATE.%s.%s"


def _fc(w, stream, name, **cfg):
    cfg.setdefault("durable_name", name)
    cfg.setdefault("ack_policy", "flow_control")
    return w.api(CREATE % (stream, name), {"stream_name": stream, "config": cfg})


def _hpub(w, subject, hdr, body=b""):
    w.r.send(b"HPUB %s %d %d\r\n%s%s\r\n" % (subject.encode(), len(hdr), len(hdr) + len(body),
                                             hdr, body))


def scenario_config(w):
    """Every create answer: forced settings, errors, pedantic, update, info."""
    _stream(w, "FC", 2)
    for cfg in [{}, {"deliver_subject": "to.fc.a"},
                {"deliver_subject": "to.fc.b", "flow_control": False, "idle_heartbeat": 5 * SEC},
                {"deliver_subject": "to.fc.c", "ack_wait": 5 * SEC},
                {"deliver_subject": "to.fc.d", "backoff": [SEC, 2 * SEC]},
                {"deliver_subject": "to.fc.e", "max_deliver": 5},
                {"deliver_subject": "to.fc.f", "max_deliver": 1},
                {"deliver_subject": "to.fc.g", "max_deliver": -1, "max_ack_pending": -1},
                {"deliver_subject": "to.fc.h", "max_ack_pending": 10, "deliver_group": "q"},
                {"deliver_subject": "to.fc.i", "headers_only": True, "description": "x",
                 "filter_subject": "fc.m", "metadata": {"k": "v"}},
                {"deliver_subject": "to.fc.j", "max_waiting": 3},
                {"deliver_subject": "to.fc.k", "direct": True},
                {"ack_policy": "flow_Control", "deliver_subject": "to.fc.l"},
                {"deliver_subject": "to.fc.m", "pause_until": "2000-01-01T00:00:00Z"}]:
        name = "C%d" % len(w.out)
        w.api(CREATE % ("FC", name), {"stream_name": "FC", "config": dict(
            {"durable_name": name, "ack_policy": "flow_control"}, **cfg)})
    for cfg in [{"deliver_subject": "to.fc.p"},
                {"deliver_subject": "to.fc.p", "flow_control": True},
                {"deliver_subject": "to.fc.p", "flow_control": True, "idle_heartbeat": 2 * SEC},
                {"deliver_subject": "to.fc.p", "flow_control": True, "idle_heartbeat": SEC},
                {"deliver_subject": "to.fc.p", "flow_control": True, "idle_heartbeat": SEC,
                 "max_ack_pending": 7}]:
        w.api(CREATE % ("FC", "P"), {"stream_name": "FC", "pedantic": True, "config": dict(
            {"durable_name": "P", "ack_policy": "flow_control"}, **cfg)})
    w.note("legacy and ephemeral creates")
    w.api("$JS.API.CONSUMER.DURABLE.CREATE.FC.L", {"stream_name": "FC", "config": {
        "durable_name": "L", "ack_policy": "flow_control", "deliver_subject": "to.fc.q"}})
    w.api("$JS.API.CONSUMER.CREATE.FC", {"stream_name": "FC", "config": {
        "name": "E", "ack_policy": "flow_control", "deliver_subject": "to.fc.r"}})
    w.note("updates")
    _consumer(w, "FC", "X", deliver_subject="to.fc.x", flow_control=True, idle_heartbeat=SEC)
    w.api(CREATE % ("FC", "X"), {"stream_name": "FC", "config": {
        "durable_name": "X", "ack_policy": "flow_control", "deliver_subject": "to.fc.x"}})
    _fc(w, "FC", "Y", deliver_subject="to.fc.y")
    _fc(w, "FC", "Y", deliver_subject="to.fc.y", max_ack_pending=50, description="d")
    _fc(w, "FC", "Y", deliver_subject="to.fc.y", ack_policy="all")
    w.api(CREATE % ("FC", "Y"), {"stream_name": "FC", "action": "create", "config": {
        "durable_name": "Y", "ack_policy": "flow_control", "deliver_subject": "to.fc.y",
        "max_ack_pending": 50, "description": "d"}})
    w.api("$JS.API.CONSUMER.INFO.FC.Y")
    w.api("$JS.API.CONSUMER.LIST.FC")
    w.note("workqueue and interest streams")
    w.api("$JS.API.STREAM.CREATE.WQ", {"name": "WQ", "subjects": ["wq.>"],
                                       "retention": "workqueue"}, record=False)
    _fc(w, "WQ", "W", deliver_subject="to.wq.d")
    _fc(w, "WQ", "W2", deliver_subject="to.wq.d2", filter_subject="wq.x")
    return w.out


def _fc_replies(fs):
    """The flow control request subjects among frames ``fs``: a request's
    reply, or the one a heartbeat names as stalled (under load the request
    and a heartbeat may both be among them, in either order)."""
    out = []
    for f in fs:
        if f.reply and f.reply.startswith("$JS.FC."):
            out.append(f.reply)
        else:
            m = re.search(rb"Nats-Consumer-Stalled: (\S+)", f.header or b"")
            if m:
                out.append(m.group(1).decode())
    return out


def scenario_delivery(w):
    """Acks by flow control replies, at max_ack_pending and after heartbeats."""
    _stream(w, "FD", 5)
    # Subscribed after the create: nats-server may deliver before it sends
    # the create's reply when the subscriber is already there.
    _fc(w, "FD", "C", deliver_subject="to.fd.d", max_ack_pending=3)
    w._sub("to.fd.d", "D")
    fs = w.take(4, limit=10.0)
    fc = _fc_replies(fs)
    w.api("$JS.API.CONSUMER.INFO.FD.C")
    w.note("a plain reply: the window reopens, nothing is acked")
    w.r.pub(fc[-1], b"")
    w.settle()
    w.api("$JS.API.CONSUMER.INFO.FD.C")
    w.note("the idle heartbeat asks again")
    fs = w.take(2, limit=10.0)
    fc = _fc_replies(fs)
    w.note("a reply with the last sequences acks up to them")
    _hpub(w, fc[-1], b"NATS/1.0\r\nNats-Last-Consumer: 2\r\nNats-Last-Stream: 2\r\n\r\n")
    fs = w.take(3, limit=10.0)
    w.api("$JS.API.CONSUMER.INFO.FD.C")
    w.note("an old request's reply is ignored")
    _hpub(w, fc[-1], b"NATS/1.0\r\nNats-Last-Consumer: 4\r\nNats-Last-Stream: 4\r\n\r\n")
    w.settle()
    w.api("$JS.API.CONSUMER.INFO.FD.C")
    w.note("what comes to the ack subject is confirmed and ignored (nak included)")
    msgs = [f for f in fs if f.reply and f.reply.startswith("$JS.ACK.")]
    w.api(msgs[0].reply, b"+ACK")
    w.api("$JS.API.CONSUMER.INFO.FD.C")
    w.api(msgs[-1].reply, b"-NAK")
    w.take(1, limit=1.5)
    w.api(msgs[-1].reply, b"+ACK")
    w.api("$JS.API.CONSUMER.INFO.FD.C")
    w.note("nothing pending: heartbeats only, no redeliveries")
    w.take(2, limit=2.5)
    return w.out


def scenario_fc_reply_forms(w):
    """Replies with odd headers: no consumer sequence, a bad one, then a good one."""
    _stream(w, "FR", 4)
    _fc(w, "FR", "C", deliver_subject="to.fr.d", max_ack_pending=2)
    w._sub("to.fr.d", "D")  # after the create: see scenario_delivery
    fs = w.take(3)
    for hdr in [b"NATS/1.0\r\nNats-Last-Stream: 1\r\n\r\n",
                b"NATS/1.0\r\nNats-Last-Consumer: x\r\nNats-Last-Stream: 2\r\n\r\n",
                b"NATS/1.0\r\nNats-Last-Consumer: 1\r\nNats-Last-Stream: 1\r\n\r\n"]:
        fc = [f for f in fs if f.reply and f.reply.startswith("$JS.FC.")]
        if not fc:
            w.note("no flow control request")
            break
        _hpub(w, fc[-1].reply, hdr)
        fs = w.take(1, limit=2.5)
        w.api("$JS.API.CONSUMER.INFO.FR.C")
    return w.out


SCENARIOS = [scenario_config, scenario_delivery, scenario_fc_reply_forms]


@pytest.fixture(scope="module")
def transcripts():
    got = {}
    for kind in KINDS:
        got[kind] = {}
        with ServerProcess(kind, ["-js"]) as s:
            for fn in SCENARIOS:
                w = Wire(s.port, advisories=())
                try:
                    out = fn(w)
                except Exception as e:  # the transcript shows how far it got
                    out = w.out + ["FAILED %r" % e]
                finally:
                    w.close()
                got[kind][fn.__name__] = [FC_ID.sub(r"\1.ID", line) for line in out]
    return got


@pytest.mark.parametrize("name", [fn.__name__ for fn in SCENARIOS])
def test_same_transcript_as_nats_server(transcripts, name):
    ref = transcripts["nats-server"][name]
    assert not any(line.startswith("FAILED") for line in ref), ref
    assert transcripts["natsbroker"][name] == ref


def _has(transcripts, name, *needles):
    text = "\n".join(transcripts["nats-server"][name])
    for needle in needles:
        assert needle in text, (needle, text)


def test_config_observed(transcripts):
    _has(transcripts, "scenario_config",
         '"err_code": 10218',
         '"flow_control": true, "idle_heartbeat": 1000000000',
         '"_nats.req.level": "4"')


def test_delivery_observed(transcripts):
    _has(transcripts, "scenario_delivery",
         "D to.fd.d $JS.FC.FD.C.ID b'NATS/1.0 100 FlowControl Request\\r\\n\\r\\n' b''",
         "$JS.ACK.FD.C.1.5.5.TS.0 -NAK -> API b''",
         "Nats-Consumer-Stalled: $JS.FC.FD.C.ID")
    lines = transcripts["nats-server"]["scenario_delivery"]
    infos = [json.loads(line.split("-> API ", 1)[1]) for line in lines
             if line.startswith("$JS.API.CONSUMER.INFO")]
    assert [(i["ack_floor"]["stream_seq"], i["num_ack_pending"]) for i in infos] == [
        (0, 3), (0, 3), (2, 3), (2, 3), (2, 3), (2, 3)]
    assert not any("$JS.ACK.FD.C.2." in line for line in lines)  # no redelivery
