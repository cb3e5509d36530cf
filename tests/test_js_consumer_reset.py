"""``$JS.API.CONSUMER.RESET.<stream>.<consumer>`` (nats-server 2.14+, ADR-60),
against nats-server 2.15.1 and natsbroker side by side.

The body is ``{"seq": N}``, or nothing (or ``{}``, ``null``, ``{"seq": 0}``)
for the ack floor + 1. The consumer forgets what it delivered (pending,
redelivery counts, last activity), its delivery sequence starts again at 1 and
its ack floor is ``seq - 1``; the reply is the consumer info plus
``reset_seq``. What nats-server 2.15.1 does, observed:

* the consumer answers its own reset subject: no consumer (or stream), no
  reply at all (and no API count, no audit);
* a sequence is not checked against the stream: below the first sequence or
  past the last one is accepted as given;
* an explicit sequence needs deliver policy ``all``, ``by_start_sequence``
  (not below ``opt_start_seq``: "invalid reset: below start seq") or
  ``by_start_time`` (not below its first message: "below start time");
  others answer 400/10204 "invalid reset: not allowed";
* the body goes through ``json.Unmarshal`` (unknown fields ignored, Go's
  texts in 10025 errors); error replies carry ``"reset_seq": 0``;
* on an interest stream, moving the ack floor forward removes what no
  consumer needs any more.

Transcripts are compared as in test_js_priority (its ``Wire`` client).
"""

import json
import os
import subprocess
import textwrap

import pytest

from tests.support.servers import ROOT, ServerProcess
from tests.test_js_consumer_timers import SEC, h  # noqa: F401  (fixture)
from tests.test_js_priority import KINDS, Wire, _consumer, _stream

pytestmark = pytest.mark.timeout(180)

RESET = "$JS.API.CONSUMER.RESET."


def _pull(w, stream, consumer, name, n):
    """A no_wait pull of ``n``: the messages (and a 404 if fewer were there)."""
    w.pull(stream, consumer, name, {"batch": n, "no_wait": True})
    return w.take(n)


def scenario_reset_api(w):
    """Every reply of the reset API, from one consumer and each deliver policy."""
    _stream(w, "RS", 6)
    w.api("$JS.API.STREAM.PURGE.RS", {"seq": 3}, record=False)  # first sequence 3
    _consumer(w, "RS", "C")
    fs = _pull(w, "RS", "C", "p1", 3)
    w.api(fs[0].reply, b"+ACK")
    for body in [b"", b"{}", b'{"seq":0}', b"null", b'{"seq":1}', b'{"seq":2}', b'{"seq":3}',
                 b'{"seq":5}', b'{"seq":7}', b'{"seq":100}', b'{"SEQ":4,"other":1}', b"{bad",
                 b'{"seq":"x"}', b'{"seq":-1}', b'{"seq":1.5}', b"[]", b" ", b"5"]:
        if body == b'{"seq":1}':
            # nats-server takes a reply's delivered/ack_floor from its consumer
            # file store, and a reset to 1 leaves that state all zero, which the
            # store reads as "not loaded": it reads its o.dat back from disk. The
            # ack above has the store's flusher write o.dat in the background (at
            # most every 100 ms); while that write is still going (a loaded
            # machine) the reply showed the state after the ack, delivered 3/5 and
            # ack floor 1/3, instead of 0/0 and 0/0. Let it finish first.
            w.settle()
        w.api(RESET + "RS.C", body)
    for subject in ["RS.NOPE", "NOPE.C", "RS", "RS.C.x"]:
        w.api(RESET + subject, b"", wait=1.0)
    w.api("$JS.API.CONSUMER.INFO.RS.C")
    for name, cfg in [("N", {"deliver_policy": "new"}), ("L", {"deliver_policy": "last"}),
                      ("LP", {"deliver_policy": "last_per_subject", "filter_subject": "rs.>"}),
                      ("BS", {"deliver_policy": "by_start_sequence", "opt_start_seq": 5}),
                      ("BT", {"deliver_policy": "by_start_time", "ack_policy": "none",
                              "opt_start_time": "2000-01-01T00:00:00Z"}),
                      ("PU", {"deliver_subject": "nowhere.rs"})]:
        _consumer(w, "RS", name, **cfg)
        for body in [b"", b'{"seq":4}', b'{"seq":6}']:
            w.api(RESET + "RS." + name, body)
    w.api("$JS.API.INFO")
    return w.out


def scenario_reset_delivery(w):
    """What comes after a reset: the same messages again as first deliveries
    (delivery count 1, consumer sequence from 1), to requests already waiting
    too; pending and redelivered forgotten."""
    _stream(w, "RD", 4)
    _consumer(w, "RD", "C", ack_wait=30 * SEC)
    fs = _pull(w, "RD", "C", "p1", 4)
    w.api(fs[1].reply, b"-NAK")
    w.api(fs[3].reply, b"+ACK")
    _pull(w, "RD", "C", "p2", 1)  # the redelivery (count 2)
    w.api("$JS.API.CONSUMER.INFO.RD.C")
    w.note("a request waits; the reset feeds it from sequence 2")
    w.pull("RD", "C", "waiting", {"batch": 2, "expires": 30 * SEC})
    w.settle()
    # (nats-server's reply and the deliveries race: either may come first)
    w.api(RESET + "RD.C", {"seq": 2}, linger=0.5)
    w.api("$JS.API.CONSUMER.INFO.RD.C")
    w.note("old ack replies after the reset")
    w.api(fs[0].reply, b"+ACK")
    w.api("$JS.API.CONSUMER.INFO.RD.C")
    w.note("back to the ack floor")
    w.api(RESET + "RD.C", b"")
    _pull(w, "RD", "C", "p3", 4)
    w.api("$JS.API.CONSUMER.INFO.RD.C")
    return w.out


def scenario_reset_interest(w):
    """Interest retention: a forward reset drops what no consumer needs."""
    w.api("$JS.API.STREAM.CREATE.IR", {"name": "IR", "subjects": ["ir.>"],
                                       "retention": "interest"}, record=False)
    _consumer(w, "IR", "A")
    _consumer(w, "IR", "B", filter_subject="ir.b")
    for i in range(6):
        w.api("ir.%s" % ("b" if i % 2 else "a"), b"m%d" % i)
    for subject, body in [("IR.A", {"seq": 5}), ("IR.B", {"seq": 7}), ("IR.A", {"seq": 1})]:
        w.api(RESET + subject, body)
        w.settle()
        w.api("$JS.API.STREAM.INFO.IR")
    return w.out


SCENARIOS = [scenario_reset_api, scenario_reset_delivery, scenario_reset_interest]


@pytest.fixture(scope="module")
def transcripts():
    got = {}
    for kind in KINDS:
        got[kind] = {}
        with ServerProcess(kind, ["-js"]) as s:
            for fn in SCENARIOS:
                w = Wire(s.port, advisories=())
                try:
                    got[kind][fn.__name__] = fn(w)
                except Exception as e:  # the transcript shows how far it got
                    got[kind][fn.__name__] = w.out + ["FAILED %r" % e]
                finally:
                    w.close()
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


def test_reset_replies_observed(transcripts):
    _has(transcripts, "scenario_reset_api",
         '"delivered": {"consumer_seq": 0, "stream_seq": 3}, "ack_floor": {"consumer_seq": 0, '
         '"stream_seq": 3}, "num_ack_pending": 0, "num_redelivered": 0, "num_waiting": 0, '
         '"num_pending": 3, "ts": "TS", "reset_seq": 4}',
         '"num_pending": 4, "ts": "TS", "reset_seq": 1}',
         '"stream_seq": 99}, "num_ack_pending": 0, "num_redelivered": 0, "num_waiting": 0, '
         '"num_pending": 0, "ts": "TS", "reset_seq": 100}',
         '"error": {"code": 400, "err_code": 10025, "description": "invalid JSON: json: cannot '
         'unmarshal number -1 into Go struct field JSApiConsumerResetRequest.seq of type uint64"}, '
         '"reset_seq": 0}',
         '"description": "invalid reset: not allowed"}, "reset_seq": 0}',
         '"description": "invalid reset: below start seq"}, "reset_seq": 0}',
         "$JS.API.CONSUMER.RESET.RS.NOPE  -> NO REPLY",
         "$JS.API.CONSUMER.RESET.NOPE.C  -> NO REPLY")


def test_reset_delivery_observed(transcripts):
    _has(transcripts, "scenario_reset_delivery",
         "waiting rd.m $JS.ACK.RD.C.1.2.1.TS.2 b'' b'm2'",
         "waiting rd.m $JS.ACK.RD.C.1.3.2.TS.1 b'' b'm3'")


# --------------------------------------------------------------------------
# durability: the reset state is what a restart finds


def test_reset_survives_restart(tmp_path):
    got = {}
    for kind in KINDS:
        store = tmp_path / kind
        out = []
        with ServerProcess(kind, ["-js", "-sd", str(store)]) as s:
            w = Wire(s.port, advisories=())
            _stream(w, "DR", 5)
            _consumer(w, "DR", "C")
            fs = _pull(w, "DR", "C", "p", 5)
            for f in fs[:4]:
                w.api(f.reply, b"+ACK")
            w.api(RESET + "DR.C", {"seq": 2})
            out.append(w.api("$JS.API.CONSUMER.INFO.DR.C"))
            w.close()
        with ServerProcess(kind, ["-js", "-sd", str(store)]) as s:
            w = Wire(s.port, advisories=())
            out.append(w.api("$JS.API.CONSUMER.INFO.DR.C"))
            fs = _pull(w, "DR", "C", "again", 1)
            out.append([(f.subject, f.payload, f.reply.split(".")[4:7]) for f in fs[:1]])
            w.close()
        got[kind] = out
    info = json.loads(got["nats-server"][1][4:])
    assert (info["delivered"], info["ack_floor"], info["num_pending"]) == (
        {"consumer_seq": 0, "stream_seq": 1}, {"consumer_seq": 0, "stream_seq": 1}, 4)
    assert got["nats-server"][2] == [("dr.m", b"m2", ["1", "2", "1"])]
    assert got["natsbroker"] == got["nats-server"]


# --------------------------------------------------------------------------
# timers: a reset forgets the pending messages' ack deadlines (fake clock)


def test_reset_forgets_ack_deadlines(h):  # noqa: F811  (the timers harness fixture)
    """nats-server: after a reset nothing delivered before it is redelivered
    by the ack timer; the messages come again only as new deliveries."""
    h.stream("RT", 2)
    h.consumer("RT", "C", ack_policy="explicit", ack_wait=SEC)
    h.pull("RT", "C", b"_R.p", batch=2, expires=30 * SEC)
    assert [f.tokens for f in h.delivered(b"rt.")] == [[1, 1, 1, 1], [1, 2, 2, 0]]
    h.wait(0.5)
    resp = h.api(b"$JS.API.CONSUMER.RESET.RT.C", {"seq": 2})
    assert (resp["reset_seq"], resp["num_ack_pending"], resp["delivered"], resp["ack_floor"]) == (
        2, 0, {"consumer_seq": 0, "stream_seq": 1}, {"consumer_seq": 0, "stream_seq": 1})
    h.wait(5)
    assert len(h.delivered(b"rt.")) == 2
    h.pull("RT", "C", b"_R.q", batch=2, no_wait=True)
    assert [(f.data, f.tokens) for f in h.delivered(b"rt.")[2:]] == [(b"m2", [1, 2, 1, 0])]


# --------------------------------------------------------------------------
# the next-generation client (nats-jetstream 0.3.0, Python 3.13)


CLIENT_SCENARIO = textwrap.dedent('''
    import asyncio, json, sys
    from nats.client import connect
    from nats.jetstream import new

    async def main(url):
        nc = await connect(url)
        js = new(nc, strict=True)
        out = {}
        s = await js.create_stream(name="CR", subjects=["cr.>"])
        for i in range(4):
            await js.publish("cr.x", b"m%d" % i)
        c = await s.create_consumer(name="C", durable_name="C", ack_policy="explicit")
        b = await c.fetch(max_messages=3, max_wait=2.0)
        got = [m async for m in b]
        await got[0].double_ack()
        r = await c.reset()
        out["floor"] = [r.reset_seq, r.info.delivered.get("stream_seq"),
                        r.info.ack_floor.get("stream_seq"), r.info.num_ack_pending,
                        r.info.num_pending]
        r = await c.reset(3)
        out["seq"] = [r.reset_seq, r.info.num_pending]
        b = await c.fetch(max_messages=5, max_wait=1.0)
        out["after"] = [[m.data.decode(), m.metadata.sequence.consumer, m.metadata.num_delivered]
                        async for m in b]
        try:
            n = await s.create_consumer(name="N", durable_name="N", deliver_policy="new")
            await n.reset(2)
            out["new"] = "no error"
        except Exception as e:
            out["new"] = [type(e).__name__, str(e)]
        await nc.close()
        print(json.dumps(out))

    asyncio.run(main(sys.argv[1]))
''')


def test_nats_jetstream_client_reset():
    from tests.test_nats_core import _interpreter
    py = _interpreter()
    got = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-js"]) as s:
            run = subprocess.run([py, "-c", CLIENT_SCENARIO, s.url], capture_output=True,
                                 text=True, timeout=90, cwd=ROOT, env=dict(os.environ))
            assert run.returncode == 0, (kind, run.stdout, run.stderr)
            got[kind] = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["nats-server"]["floor"] == [2, 1, 1, 0, 3]
    assert got["nats-server"]["after"] == [["m2", 1, 1], ["m3", 2, 1]]
    assert got["natsbroker"] == got["nats-server"]


def test_reset_request_bodies():
    """The body through json.Unmarshal, as nats-server reads it (no server)."""
    from natsbroker.jetstream import consumer_requests as CR
    from natsbroker.jetstream.errors import ApiError
    assert [CR.parse_reset_request(b) for b in (b"", b"{}", b"null", b'{"seq":0}', b'{"SEQ":7}',
                                                b'{"seq":4,"x":[]}')] == [0, 0, 0, 0, 7, 4]
    for raw, text in [
            (b" ", "unexpected end of JSON input"),
            (b"{bad", "invalid character 'b' looking for beginning of object key string"),
            (b'{"seq":"x"}', "json: cannot unmarshal string into Go struct field "
                             "JSApiConsumerResetRequest.seq of type uint64"),
            (b'{"seq":-1}', "json: cannot unmarshal number -1 into Go struct field "
                            "JSApiConsumerResetRequest.seq of type uint64"),
            (b"[]", "json: cannot unmarshal array into Go value of type "
                    "server.JSApiConsumerResetRequest")]:
        with pytest.raises(ApiError) as e:
            CR.parse_reset_request(raw)
        assert (e.value.code, e.value.err_code, e.value.description) == (
            400, 10025, "invalid JSON: " + text)
