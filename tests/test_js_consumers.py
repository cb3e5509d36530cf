"""JetStream consumers, scenario by scenario, against nats-server and natsbroker.

Every expected value below was observed from nats-server 2.15.1 (the spec).
natsbroker runs the same scenarios and must give the same results.

Raw wire checks (status lines, heartbeat and flow-control headers, ack reply
subjects) go through a plain socket so the exact bytes are asserted.
"""

import asyncio
import datetime
import json
import re
import signal
import time

import nats
import nats.errors
import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError

from tests.support.both import connect_js
from tests.support.clients import flushed
from tests.support.raw import Raw, count
from tests.support.servers import ServerProcess

KINDS = ["nats-server", "natsbroker"]

pytestmark = pytest.mark.timeout(60)

API_TIMEOUT = 10.0  # a positive wait: generous for a CPU stall on a busy machine


# --------------------------------------------------------------------------
# fixtures and helpers


@pytest.fixture(scope="module", params=KINDS)
def server(request, tmp_path_factory):
    store = tmp_path_factory.mktemp("consumers-" + request.param)
    with ServerProcess(request.param, ["-js", "-sd", str(store)]) as s:
        s.kind_name = request.param
        s.consumer_api = None
        yield s


@pytest.fixture
def srv(server):
    """The module's server, once its consumer API is known to answer.

    A server without consumers would let every request wait for its timeout;
    one probe per module makes such a run fail fast instead.
    """
    if server.consumer_api is None:
        server.consumer_api = run(_probe(server), 20)
    if not server.consumer_api:
        pytest.fail("%s does not answer $JS.API.CONSUMER.INFO" % server.kind_name)
    return server


async def _probe(server):
    nc = await nats.connect(server.url)
    try:
        await nc.request("$JS.API.CONSUMER.INFO.NOSTREAM.NOCONS", b"", timeout=10)
        return True
    except Exception:
        return False
    finally:
        await nc.close()


def run(coro, limit=40):
    return asyncio.run(asyncio.wait_for(coro, limit))


def _conn(server):
    return connect_js(server.url, API_TIMEOUT)


async def api(nc, subject, body=b""):
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    m = await nc.request(subject, body, timeout=API_TIMEOUT)
    return json.loads(m.data)


def err(resp):
    e = resp["error"]
    return (e["code"], e["err_code"], e["description"])


def apierr(e):
    return (e.code, e.err_code, e.description)


def seqs(info, waiting=True):
    """The consumer info numbers a scenario asserts."""
    out = {
        "delivered": (info.delivered.consumer_seq, info.delivered.stream_seq),
        "ack_floor": (info.ack_floor.consumer_seq, info.ack_floor.stream_seq),
        "num_ack_pending": info.num_ack_pending,
        "num_redelivered": info.num_redelivered,
        "num_waiting": info.num_waiting,
        "num_pending": info.num_pending,
    }
    if not waiting:
        del out["num_waiting"]
    return out


def raw_seqs(info):
    return {
        "delivered": (info["delivered"]["consumer_seq"], info["delivered"]["stream_seq"]),
        "ack_floor": (info["ack_floor"]["consumer_seq"], info["ack_floor"]["stream_seq"]),
        "num_ack_pending": info["num_ack_pending"],
        "num_redelivered": info["num_redelivered"],
        "num_waiting": info["num_waiting"],
        "num_pending": info["num_pending"],
    }


def meta(m):
    md = m.metadata
    return (m.data, md.sequence.stream, md.sequence.consumer, md.num_delivered, md.num_pending)


async def drain(sub, quiet=0.3):
    out = []
    while True:
        try:
            out.append(await sub.next_msg(timeout=quiet))
        except nats.errors.TimeoutError:
            return out


async def drain_n(sub, n, limit=10.0, quiet=0.5):
    """``n`` messages (waiting up to ``limit`` s for them), then any more that
    come within ``quiet`` s."""
    out = []
    end = time.monotonic() + limit
    while len(out) < n and time.monotonic() < end:
        try:
            out.append(await sub.next_msg(timeout=max(0.1, end - time.monotonic())))
        except nats.errors.TimeoutError:
            break
    return out + await drain(sub, quiet)


async def fetch_until(psub, n, limit=10.0):
    """Fetch until ``n`` messages arrived or ``limit`` seconds passed."""
    got = []
    end = time.monotonic() + limit
    while len(got) < n and time.monotonic() < end:
        try:
            got += await psub.fetch(n - len(got), timeout=min(1.0, max(0.1, end - time.monotonic())))
        except asyncio.TimeoutError:  # (a batch fetch whose 408 beats the client's timer raises asyncio's)
            pass
    return got


async def pull_nowait(nc, stream, consumer, batch=10):
    """One no_wait pull request: the messages, up to the 404 that ends it."""
    sub = await nc.subscribe(nc.new_inbox())
    try:
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.%s.%s" % (stream, consumer),
                         json.dumps({"batch": batch, "no_wait": True}).encode(), reply=sub.subject)
        out = []
        while True:
            m = await sub.next_msg(timeout=10)
            if m.headers and m.headers.get("Status"):
                assert m.headers["Status"] == "404", m.headers
                return out
            out.append(m)
    finally:
        await sub.unsubscribe()


def go_ns(ts):
    """An RFC 3339 timestamp with nanoseconds (as nats-server writes) to epoch ns."""
    base, _, frac = ts.rstrip("Z").partition(".")
    dt = datetime.datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return int(dt.timestamp()) * 10**9 + int((frac + "000000000")[:9])


# --------------------------------------------------------------------------
# pull consumers


def test_pull_fetch_explicit_acks(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="PF", subjects=["pf.>"])
            for i in range(5):
                await js.publish("pf.a", b"m%d" % i)
            psub = await js.pull_subscribe("pf.>", durable="PFD")
            first = await psub.fetch(3, timeout=10)
            await first[0].ack()
            await first[1].ack_sync()
            ci1 = await js.consumer_info("PF", "PFD")
            rest = await fetch_until(psub, 2)
            for m in [first[2]] + rest:
                await m.ack_sync()
            ci2 = await js.consumer_info("PF", "PFD")
            t0 = time.monotonic()
            try:
                await psub.fetch(1, timeout=0.5)
                empty = None
            except nats.errors.TimeoutError as e:
                empty = type(e).__name__
            took = time.monotonic() - t0
            return first, ci1, rest, ci2, empty, took
        finally:
            await nc.close()
    first, ci1, rest, ci2, empty, took = run(main())
    assert [meta(m) for m in first] == [(b"m0", 1, 1, 1, 4), (b"m1", 2, 2, 1, 3), (b"m2", 3, 3, 1, 2)]
    assert [m.subject for m in first] == ["pf.a"] * 3
    assert seqs(ci1) == {"delivered": (3, 3), "ack_floor": (2, 2), "num_ack_pending": 1,
                         "num_redelivered": 0, "num_waiting": 0, "num_pending": 2}
    assert ci1.config.ack_policy == "explicit" and ci1.config.max_waiting == 512
    assert ci1.config.ack_wait == 30.0 and ci1.config.max_ack_pending == 1000
    assert ci1.config.max_deliver == -1 and ci1.config.filter_subject == "pf.>"
    assert [meta(m) for m in rest] == [(b"m3", 4, 4, 1, 1), (b"m4", 5, 5, 1, 0)]
    assert seqs(ci2) == {"delivered": (5, 5), "ack_floor": (5, 5), "num_ack_pending": 0,
                         "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}
    assert empty == "TimeoutError" and took < 3


def test_pull_request_status_headers(srv):
    """Every terminal status of a pull request, byte for byte."""
    async def setup():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="PS", subjects=["ps.>"])
            await js.publish("ps.a", b"x" * 100)
            out = []
            for cfg in ({"durable_name": "MW", "ack_policy": "explicit", "max_waiting": 1},
                        {"durable_name": "LIM", "ack_policy": "explicit", "max_batch": 3,
                         "max_expires": 1000000000},
                        {"durable_name": "HB", "ack_policy": "explicit", "filter_subject": "ps.none"},
                        {"durable_name": "PUSH", "deliver_subject": "nobody.ps"}):
                out.append(await api(nc, "$JS.API.CONSUMER.CREATE.PS." + cfg["durable_name"],
                                     {"stream_name": "PS", "config": cfg}))
            return out
        finally:
            await nc.close()
    created = run(setup())
    assert all("error" not in c for c in created), created
    nxt = "$JS.API.CONSUMER.MSG.NEXT.PS."
    r = Raw(srv.port)
    try:
        r.sub("_R.>", 1)
        r.pub(nxt + "MW", {"batch": 5, "no_wait": True}, "_R.nw1")
        nw1 = r.frames(until=count(2))
        r.pub(nxt + "MW", {"batch": 5, "no_wait": True}, "_R.nw2")
        nw2 = r.frames(until=count(1))
        r.pub(nxt + "MW", {"batch": 2, "expires": 300000000}, "_R.exp")
        exp = r.frames(until=count(1))
        # One lingering request fills max_waiting=1; the next one is refused.
        r.pub(nxt + "MW", {"batch": 1, "expires": 3000000000}, "_R.wait")
        r.wait_pong()
        for _ in range(200):  # the server queues pull requests asynchronously
            r.pub("$JS.API.CONSUMER.INFO.PS.MW", b"", "_R.info")
            info = r.frames(until=count(1))
            if json.loads(info[0].payload).get("num_waiting"):
                break
            time.sleep(0.05)
        r.pub(nxt + "MW", {"batch": 1, "expires": 3000000000}, "_R.over")
        over = r.frames(until=count(1))
        r.pub(nxt + "MW", b"", "_R.plain")
        plain = r.frames(until=count(1))
        r.pub("$JS.API.CONSUMER.DELETE.PS.MW", b"", "_R.del")
        deleted = r.frames(until=count(2))
        r.pub(nxt + "LIM", {"batch": 5}, "_R.mb")
        mb = r.frames(until=count(1))
        r.pub(nxt + "LIM", {"batch": 1, "expires": 5000000000}, "_R.me")
        me = r.frames(until=count(1))
        r.pub(nxt + "LIM", {"batch": 1, "max_bytes": 10}, "_R.mby")
        mby = r.frames(until=count(1))
        r.pub(nxt + "PUSH", {"batch": 1}, "_R.push")
        push = r.frames(until=count(1))
        r.pub(nxt + "HB", b"{bad", "_R.bad")
        bad = r.frames(until=count(1))
        r.pub(nxt + "HB", {"batch": 2, "expires": 1200000000, "idle_heartbeat": 500000000}, "_R.hb")
        hb = r.frames(until=lambda fs: any(f.header.startswith(b"NATS/1.0 408") for f in fs))
        r.pub(nxt + "NOPE", {"batch": 1}, "_R.nr")
        noresp = r.frames(until=count(1))
    finally:
        r.close()

    assert [(f.subject, f.reply, f.payload) for f in nw1[:1]] == [("ps.a", nw1[0].reply, b"x" * 100)]
    assert nw1[0].reply.startswith("$JS.ACK.PS.MW.1.1.1.") and nw1[0].header == b""
    assert (nw1[1].subject, nw1[1].header, nw1[1].payload) == (
        "_R.nw1", b"NATS/1.0 404 No Messages\r\n\r\n", b"")
    assert [(f.subject, f.header, f.payload) for f in nw2] == [
        ("_R.nw2", b"NATS/1.0 404 No Messages\r\n\r\n", b"")]
    assert [(f.subject, f.header, f.payload) for f in exp] == [
        ("_R.exp", b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 2\r\n"
                   b"Nats-Pending-Bytes: 0\r\n\r\n", b"")]
    assert raw_seqs(json.loads(info[0].payload)) == {
        "delivered": (1, 1), "ack_floor": (0, 0), "num_ack_pending": 1, "num_redelivered": 0,
        "num_waiting": 1, "num_pending": 0}
    assert [(f.subject, f.header) for f in over] == [
        ("_R.over", b"NATS/1.0 409 Exceeded MaxWaiting\r\n\r\n")]
    assert [(f.subject, f.header) for f in plain] == [
        ("_R.plain", b"NATS/1.0 409 Exceeded MaxWaiting\r\n\r\n")]
    # Deleting the consumer ends the lingering request before the API reply.
    assert [(f.subject, f.header, f.payload) for f in deleted] == [
        ("_R.wait", b"NATS/1.0 409 Consumer Deleted\r\n\r\n", b""),
        ("_R.del", b"", b'{"type":"io.nats.jetstream.api.v1.consumer_delete_response","success":true}')]
    assert [(f.subject, f.header) for f in mb] == [
        ("_R.mb", b"NATS/1.0 409 Exceeded MaxRequestBatch of 3\r\n\r\n")]
    assert [(f.subject, f.header) for f in me] == [
        ("_R.me", b"NATS/1.0 409 Exceeded MaxRequestExpires of 1s\r\n\r\n")]
    assert [(f.subject, f.header) for f in mby] == [
        ("_R.mby", b"NATS/1.0 409 Message Size Exceeds MaxBytes\r\nNats-Pending-Messages: 1\r\n"
                   b"Nats-Pending-Bytes: 10\r\n\r\n")]
    assert [(f.subject, f.header) for f in push] == [
        ("_R.push", b"NATS/1.0 409 Consumer is push based\r\n\r\n")]
    assert [(f.subject, f.header) for f in bad] == [
        ("_R.bad", b"NATS/1.0 400 Bad Request - invalid character 'b' looking for beginning "
                   b"of object key string\r\n\r\n")]
    beats, last = hb[:-1], hb[-1]
    assert 1 <= len(beats) <= 3
    assert {(f.subject, f.header, f.payload) for f in beats} == {
        ("_R.hb", b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 0\r\nNats-Last-Stream: 1\r\n\r\n", b"")}
    assert (last.subject, last.header) == (
        "_R.hb", b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 2\r\nNats-Pending-Bytes: 0\r\n\r\n")
    # No consumer, no responder: the core server's 503.
    assert [(f.subject, f.header) for f in noresp] == [
        ("_R.nr", b"NATS/1.0 503\r\nNats-Subject: $JS.API.CONSUMER.MSG.NEXT.PS.NOPE\r\n\r\n")]


def test_ack_reply_subject_shape(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="AR", subjects=["ar.>"])
            await js.publish("ar.one", b"a")
            await js.publish("ar.two", b"b")
            await js.publish("ar.one", b"c")
            stored = [(await api(nc, "$JS.API.STREAM.MSG.GET.AR", {"seq": s}))["message"]["time"]
                      for s in (1, 2, 3)]
            psub = await js.pull_subscribe("ar.>", durable="ARC", config=ConsumerConfig(ack_wait=0.5))
            msgs = await fetch_until(psub, 3)
            await msgs[0].ack_sync()
            await msgs[2].ack_sync()
            again = await fetch_until(psub, 1)
            return stored, msgs, again
        finally:
            await nc.close()
    stored, msgs, again = run(main())
    toks = [m.reply.split(".") for m in msgs + again]
    # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts ns>.<pending>: the
    # 9-token form (no domain, no account hash, no random token).
    assert [len(t) for t in toks] == [9, 9, 9, 9]
    assert [t[:4] for t in toks] == [["$JS", "ACK", "AR", "ARC"]] * 4
    assert [t[4:7] + t[8:] for t in toks] == [
        ["1", "1", "1", "2"], ["1", "2", "2", "1"], ["1", "3", "3", "0"],
        ["2", "2", "4", "0"]]
    # The timestamp is the stored message's, nanoseconds since the epoch, the
    # same on a redelivery.
    assert [int(t[7]) for t in toks] == [go_ns(ts) for ts in stored] + [go_ns(stored[1])]
    assert [m.metadata.timestamp.timestamp() for m in msgs] == pytest.approx(
        [go_ns(ts) / 1e9 for ts in stored], abs=1e-5)


# --------------------------------------------------------------------------
# acknowledgements


def test_ack_nak_progress_term(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="AK", subjects=["ak.>"])
            for i in range(5):
                await js.publish("ak.x", b"m%d" % i)
            psub = await js.pull_subscribe("ak.>", durable="AKC")
            msgs = await fetch_until(psub, 5)
            await msgs[0].ack()
            await msgs[1].nak()
            t0 = time.monotonic()  # the delay runs from the nak: a stall after it must not shorten `waited`
            await msgs[2].nak(delay=1.5)
            await msgs[3].in_progress()
            await msgs[4].term()
            # Acks are processed in order; a confirmed one (in-progress may be
            # repeated) means the ones before it are done too.
            wpi = await nc.request(msgs[3].reply, b"+WPI", timeout=10)
            ci1 = await js.consumer_info("AK", "AKC")
            nak_now = await fetch_until(psub, 1)
            ci2 = await js.consumer_info("AK", "AKC")
            delayed = await fetch_until(psub, 1)
            waited = time.monotonic() - t0
            ci3 = await js.consumer_info("AK", "AKC")
            for m in nak_now + delayed:
                await m.ack_sync()
            ci4 = await js.consumer_info("AK", "AKC")
            # A second ack of an acked message is still confirmed (empty reply).
            dup = await nc.request(nak_now[0].reply, b"+ACK", timeout=10)
            try:
                await nak_now[0].ack_sync()
                client_side = None
            except nats.errors.Error as e:
                client_side = type(e).__name__
            return msgs, wpi, ci1, nak_now, ci2, delayed, waited, ci3, ci4, dup, client_side
        finally:
            await nc.close()
    msgs, wpi, ci1, nak_now, ci2, delayed, waited, ci3, ci4, dup, client_side = run(main())
    assert wpi.data == b""
    assert [meta(m) for m in msgs] == [(b"m%d" % i, i + 1, i + 1, 1, 4 - i) for i in range(5)]
    # term drops m4 from the pending set; nak and in-progress keep theirs.
    assert seqs(ci1) == {"delivered": (5, 5), "ack_floor": (1, 1), "num_ack_pending": 3,
                         "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}
    assert [meta(m) for m in nak_now] == [(b"m1", 2, 6, 2, 0)]
    assert ci2.num_ack_pending == 3 and ci2.num_redelivered == 1
    assert [meta(m) for m in delayed] == [(b"m2", 3, 7, 2, 0)]
    assert 1.0 <= waited < 4.5
    assert seqs(ci3) == {"delivered": (7, 5), "ack_floor": (1, 1), "num_ack_pending": 3,
                         "num_redelivered": 2, "num_waiting": 0, "num_pending": 0}
    # The floor moves by the original delivery sequences (2 and 3) and stops
    # before m3, still in progress.
    assert seqs(ci4) == {"delivered": (7, 5), "ack_floor": (3, 3), "num_ack_pending": 1,
                         "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}
    assert (dup.data, dup.headers) == (b"", None)
    assert client_side == "MsgAlreadyAckdError"


def test_raw_ack_payloads_and_replies(srv):
    """Each ack body sent as a request: which get a (empty) reply, and +NXT."""
    async def setup():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="RA", subjects=["ra.>"])
            for i in range(6):
                await js.publish("ra.a", b"x%d" % i)
            return await api(nc, "$JS.API.CONSUMER.CREATE.RA.RAC", {
                "stream_name": "RA", "config": {"durable_name": "RAC", "ack_policy": "explicit"}})
        finally:
            await nc.close()
    assert "error" not in run(setup())
    r = Raw(srv.port)
    try:
        r.sub("_R.>", 1)
        r.pub("$JS.API.CONSUMER.MSG.NEXT.RA.RAC", {"batch": 6, "expires": 2000000000}, "_R.next")
        msgs = r.frames(until=count(6))
        replies = {}
        for i, body in enumerate([b"", b"+ACK", b"-NAK", b"+WPI", b"+TERM"]):
            r.pub(msgs[i].reply, body, "_R.a%d" % i)
            replies[body] = r.frames(until=count(1))
        # +NXT acks and asks for the next message on the same reply subject.
        r.pub(msgs[5].reply, b"+NXT", "_R.nxt")
        nxt = r.frames(until=count(1))
        r.pub(msgs[0].reply, b"+ACK", "_R.again")
        again = r.frames(until=count(1))
        r.pub("$JS.ACK.RA.RAC.1.99.99.0.0", b"+ACK", "_R.never")
        never = r.wait_pong(limit=3) + r.frames(limit=0.5)
        r.pub("$JS.API.CONSUMER.INFO.RA.RAC", b"", "_R.info")
        info = r.frames(until=count(1))
    finally:
        r.close()
    assert [(f.subject, f.payload) for f in msgs] == [("ra.a", b"x%d" % i) for i in range(6)]
    for body, frames in replies.items():
        assert [(f.subject, f.header, f.payload) for f in frames] == [(frames[0].subject, b"", b"")], body
    assert [(f.subject, f.payload, f.reply.split(".")[4:7]) for f in nxt] == [
        ("ra.a", b"x2", ["2", "3", "7"])]
    assert [(f.subject, f.payload) for f in again] == [("_R.again", b"")]
    assert never == []  # an ack for a never-delivered sequence gets no reply
    assert raw_seqs(json.loads(info[0].payload)) == {
        "delivered": (7, 6), "ack_floor": (2, 2), "num_ack_pending": 2, "num_redelivered": 1,
        "num_waiting": 0, "num_pending": 0}


def test_ack_wait_redelivery_max_deliver_advisory(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            adv = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.AW.>")
            await js.add_stream(name="AW", subjects=["aw.>"])
            await js.publish("aw.x", b"one")
            psub = await js.pull_subscribe("aw.>", durable="AWC",
                                           config=ConsumerConfig(ack_wait=0.5, max_deliver=2))
            t0 = time.monotonic()
            first = await fetch_until(psub, 1)
            second = await fetch_until(psub, 1)
            gap = time.monotonic() - t0
            await asyncio.sleep(1.2)  # the second delivery's ack wait is over
            mid = await js.consumer_info("AW", "AWC")
            try:
                early = await adv.next_msg(timeout=0.2)
            except nats.errors.TimeoutError:
                early = None
            # The advisory comes when a pull finds the message out of deliveries.
            try:
                third = await psub.fetch(1, timeout=1.5)
            except nats.errors.TimeoutError:
                third = []
            advisory = await adv.next_msg(timeout=10)
            ci = await js.consumer_info("AW", "AWC")
            return first, second, gap, mid, early, advisory, third, ci
        finally:
            await nc.close()
    first, second, gap, mid, early, advisory, third, ci = run(main())
    assert [meta(m) for m in first] == [(b"one", 1, 1, 1, 0)]
    assert [meta(m) for m in second] == [(b"one", 1, 2, 2, 0)]
    assert second[0].reply.split(".")[4:7] == ["2", "1", "2"]
    assert 0.4 <= gap < 3.5
    # Past its ack wait the message still counts as pending (and no advisory
    # yet) until a pull request makes the consumer look for the next message.
    assert seqs(mid) == {"delivered": (2, 1), "ack_floor": (0, 0), "num_ack_pending": 1,
                         "num_redelivered": 1, "num_waiting": 0, "num_pending": 0}
    assert early is None
    assert third == []
    assert advisory.subject == "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.AW.AWC"
    body = json.loads(advisory.data)
    assert list(body) == ["type", "id", "timestamp", "stream", "consumer", "stream_seq", "deliveries"]
    assert {k: body[k] for k in ("type", "stream", "consumer", "stream_seq", "deliveries")} == {
        "type": "io.nats.jetstream.advisory.v1.max_deliver", "stream": "AW", "consumer": "AWC",
        "stream_seq": 1, "deliveries": 2}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", body["timestamp"])
    # The message left the pending set without moving the ack floor.
    # (num_waiting left out: the client's timed-out pull may not have expired yet.)
    assert seqs(ci, waiting=False) == {"delivered": (2, 1), "ack_floor": (0, 0), "num_ack_pending": 0,
                                       "num_redelivered": 1, "num_pending": 0}


def test_in_progress_holds_redelivery(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="WP", subjects=["wp.>"])
            await js.publish("wp.x", b"slow")
            psub = await js.pull_subscribe("wp.>", durable="WPC", config=ConsumerConfig(ack_wait=2))
            (m,) = await fetch_until(psub, 1)
            # 3.2 s of work, over the ack wait of 2 s, reporting progress every
            # 0.4 s: a stall of up to 1.6 s is not taken for a lapse
            for _ in range(8):
                await asyncio.sleep(0.4)
                await m.in_progress()
            await flushed(nc)
            held = await js.consumer_info("WP", "WPC")
            again = await fetch_until(psub, 1)
            return held, again
        finally:
            await nc.close()
    held, again = run(main())
    assert seqs(held) == {"delivered": (1, 1), "ack_floor": (0, 0), "num_ack_pending": 1,
                          "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}
    assert [meta(m) for m in again] == [(b"slow", 1, 2, 2, 0)]


def test_max_ack_pending_stalls(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="MP", subjects=["mp.>"])
            for i in range(5):
                await js.publish("mp.x", b"%d" % i)
            psub = await js.pull_subscribe("mp.>", durable="MPC",
                                           config=ConsumerConfig(max_ack_pending=2))
            first = await fetch_until(psub, 5, limit=1.5)
            ci1 = await js.consumer_info("MP", "MPC")
            try:
                stalled = await psub.fetch(5, timeout=0.7)
            except asyncio.TimeoutError:  # nats-py's or asyncio's (see fetch_until)
                stalled = []
            await first[0].ack_sync()
            more = await fetch_until(psub, 1)
            ci2 = await js.consumer_info("MP", "MPC")
            return first, ci1, stalled, more, ci2
        finally:
            await nc.close()
    first, ci1, stalled, more, ci2 = run(main())
    assert [m.data for m in first] == [b"0", b"1"]
    # (num_waiting left out: the client's fetches may still be waiting.)
    assert seqs(ci1, waiting=False) == {"delivered": (2, 2), "ack_floor": (0, 0), "num_ack_pending": 2,
                                        "num_redelivered": 0, "num_pending": 3}
    assert stalled == []
    assert [meta(m) for m in more] == [(b"2", 3, 3, 1, 2)]
    assert (ci2.delivered.stream_seq, ci2.ack_floor.stream_seq, ci2.num_ack_pending,
            ci2.num_pending) == (3, 1, 2, 2)


# --------------------------------------------------------------------------
# deliver policies and filters


def test_deliver_policies(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="DP", subjects=["dp.>"])
            for i, s in enumerate(["dp.a", "dp.b", "dp.a", "dp.c", "dp.b"]):
                await js.publish(s, b"v%d" % (i + 1))
            await asyncio.sleep(0.05)
            mid = datetime.datetime.now(datetime.timezone.utc)
            await asyncio.sleep(0.05)
            await js.publish("dp.a", b"v6")
            out = {}
            cfgs = {
                "all": ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
                "new": ConsumerConfig(deliver_policy=DeliverPolicy.NEW),
                "last": ConsumerConfig(deliver_policy=DeliverPolicy.LAST),
                "lps": ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, filter_subject="dp.>"),
                "lpsf": ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                                       filter_subjects=["dp.a", "dp.b"]),
                "bss": ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=4),
                "bst": ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=mid.isoformat()),
            }
            for name, cfg in cfgs.items():
                cfg.durable_name = name
                ci = await js.add_consumer("DP", cfg)
                got = await pull_nowait(nc, "DP", name)
                out[name] = (ci.num_pending, ci.config.deliver_policy,
                             [(m.subject, m.data, m.metadata.sequence.stream, m.metadata.sequence.consumer,
                               m.metadata.num_pending) for m in got])
            # "new" sees what comes after it.
            await js.publish("dp.c", b"v7")
            psub = await js.pull_subscribe_bind("new", "DP")
            out["new+"] = [(m.data, m.metadata.sequence.stream, m.metadata.sequence.consumer)
                           for m in await fetch_until(psub, 1)]
            try:
                await js.add_consumer("DP", ConsumerConfig(durable_name="lpsx",
                                                           deliver_policy=DeliverPolicy.LAST_PER_SUBJECT))
                out["lpsx"] = None
            except APIError as e:
                out["lpsx"] = apierr(e)
            return out
        finally:
            await nc.close()
    out = run(main())
    assert out["all"] == (6, "all", [("dp.a", b"v1", 1, 1, 5), ("dp.b", b"v2", 2, 2, 4),
                                     ("dp.a", b"v3", 3, 3, 3), ("dp.c", b"v4", 4, 4, 2),
                                     ("dp.b", b"v5", 5, 5, 1), ("dp.a", b"v6", 6, 6, 0)])
    assert out["new"] == (0, "new", [])
    assert out["new+"] == [(b"v7", 7, 1)]
    assert out["last"] == (1, "last", [("dp.a", b"v6", 6, 1, 0)])
    assert out["lps"] == (3, "last_per_subject", [("dp.c", b"v4", 4, 1, 2), ("dp.b", b"v5", 5, 2, 1),
                                                  ("dp.a", b"v6", 6, 3, 0)])
    assert out["lpsf"] == (2, "last_per_subject", [("dp.b", b"v5", 5, 1, 1), ("dp.a", b"v6", 6, 2, 0)])
    assert out["bss"] == (3, "by_start_sequence", [("dp.c", b"v4", 4, 1, 2), ("dp.b", b"v5", 5, 2, 1),
                                                   ("dp.a", b"v6", 6, 3, 0)])
    assert out["bst"] == (1, "by_start_time", [("dp.a", b"v6", 6, 1, 0)])
    assert out["lpsx"] == (400, 10094, "consumer delivery policy is deliver last per subject, "
                                       "but optional filter subject is not set")


def test_filters_and_headers_only(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="FH", subjects=["fh.>"])
            await js.publish("fh.a", b"hello world")
            await js.publish("fh.b", b"12345", headers={"X-Custom": "yes"})
            await js.publish("fh.c", b"")
            await js.publish("fh.a.deep", b"d")
            out = {}
            for name, cfg in {
                "one": ConsumerConfig(filter_subject="fh.b"),
                "wild": ConsumerConfig(filter_subject="fh.*"),
                "many": ConsumerConfig(filter_subjects=["fh.c", "fh.a.>"]),
            }.items():
                cfg.durable_name = name
                ci = await js.add_consumer("FH", cfg)
                got = await pull_nowait(nc, "FH", name)
                out[name] = (ci.num_pending, ci.config.filter_subject, ci.config.filter_subjects,
                             [(m.subject, m.metadata.sequence.stream, m.metadata.sequence.consumer)
                              for m in got])
            await js.add_consumer("FH", ConsumerConfig(durable_name="HO", headers_only=True))
            return out
        finally:
            await nc.close()
    out = run(main())
    assert out["one"] == (1, "fh.b", None, [("fh.b", 2, 1)])
    assert out["wild"] == (3, "fh.*", None, [("fh.a", 1, 1), ("fh.b", 2, 2), ("fh.c", 3, 3)])
    assert out["many"] == (2, None, ["fh.c", "fh.a.>"], [("fh.c", 3, 1), ("fh.a.deep", 4, 2)])
    r = Raw(srv.port)
    try:
        r.sub("_R.>", 1)
        r.pub("$JS.API.CONSUMER.MSG.NEXT.FH.HO", {"batch": 5, "no_wait": True}, "_R.ho")
        frames = r.frames(until=count(5))
    finally:
        r.close()
    # Headers only: the payload is dropped and Nats-Msg-Size (payload length)
    # is appended after the message's own headers.
    assert [(f.subject, f.header, f.payload) for f in frames] == [
        ("fh.a", b"NATS/1.0\r\nNats-Msg-Size: 11\r\n\r\n", b""),
        ("fh.b", b"NATS/1.0\r\nX-Custom: yes\r\nNats-Msg-Size: 5\r\n\r\n", b""),
        ("fh.c", b"NATS/1.0\r\nNats-Msg-Size: 0\r\n\r\n", b""),
        ("fh.a.deep", b"NATS/1.0\r\nNats-Msg-Size: 1\r\n\r\n", b""),
        ("_R.ho", b"NATS/1.0 404 No Messages\r\n\r\n", b""),
    ]
    assert [f.reply.split(".")[4:7] for f in frames[:4]] == [["1", str(i), str(i)] for i in range(1, 5)]


# --------------------------------------------------------------------------
# push consumers


def test_push_durable_subscribe(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="PU", subjects=["pu.>"])
            for i in range(4):
                await js.publish("pu.%d" % (i % 2), b"p%d" % i)
            sub = await js.subscribe("pu.>", durable="PUD", manual_ack=True)
            got = []
            for _ in range(4):
                m = await sub.next_msg(timeout=10)
                got.append((m.subject,) + meta(m))
                await m.ack_sync()
            ci = await sub.consumer_info()
            try:
                await js.subscribe("pu.>", durable="PUD")
                rebind = None
            except nats.js.errors.Error as e:
                rebind = e.description
            await js.publish("pu.0", b"p4")
            live = await sub.next_msg(timeout=10)
            return got, ci, rebind, (live.subject,) + meta(live)
        finally:
            await nc.close()
    got, ci, rebind, live = run(main())
    assert got == [("pu.0", b"p0", 1, 1, 1, 3), ("pu.1", b"p1", 2, 2, 1, 2),
                   ("pu.0", b"p2", 3, 3, 1, 1), ("pu.1", b"p3", 4, 4, 1, 0)]
    assert seqs(ci) == {"delivered": (4, 4), "ack_floor": (4, 4), "num_ack_pending": 0,
                        "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}
    assert ci.push_bound is True and ci.config.deliver_subject.startswith("_INBOX.")
    assert ci.config.max_waiting is None and ci.config.ack_policy == "explicit"
    assert rebind == "consumer is already bound to a subscription"
    assert live == ("pu.0", b"p4", 5, 5, 1, 0)


def test_push_deliver_group(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="QG", subjects=["qg.>"])
            q1 = await js.subscribe("qg.>", queue="QGW", manual_ack=True)
            q2 = await js.subscribe("qg.>", queue="QGW", manual_ack=True)
            ci = await js.consumer_info("QG", "QGW")
            for i in range(10):
                await js.publish("qg.x", b"%d" % i)
            seen = []
            end = time.monotonic() + 10
            while len(seen) < 10 and time.monotonic() < end:  # a slow delivery gets more rounds
                for q in (q1, q2):
                    for m in await drain(q, quiet=0.5):
                        seen.append(m.metadata.sequence.stream)
                        await m.ack_sync()
            after = await js.consumer_info("QG", "QGW")
            return ci, seen, after
        finally:
            await nc.close()
    ci, seen, after = run(main())
    assert ci.config.deliver_group == "QGW" and ci.config.durable_name == "QGW"
    assert ci.push_bound is True and ci.config.deliver_subject.startswith("_INBOX.")
    assert sorted(seen) == list(range(1, 11))  # each message to exactly one member
    assert seqs(after) == {"delivered": (10, 10), "ack_floor": (10, 10), "num_ack_pending": 0,
                           "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}


def test_ordered_consumer(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="OC", subjects=["oc.>"])
            for i in range(3):
                await js.publish("oc.%d" % i, b"o%d" % i)
            o = await js.subscribe("oc.>", ordered_consumer=True)
            got = [await o.next_msg(timeout=10) for _ in range(3)]
            await js.publish("oc.9", b"o9")
            got.append(await o.next_msg(timeout=10))
            ci = await o.consumer_info()
            return [(m.subject,) + meta(m) for m in got], ci
        finally:
            await nc.close()
    got, ci = run(main())
    assert got == [("oc.0", b"o0", 1, 1, 1, 2), ("oc.1", b"o1", 2, 2, 1, 1),
                   ("oc.2", b"o2", 3, 3, 1, 0), ("oc.9", b"o9", 4, 4, 1, 0)]
    c = ci.config
    assert (c.durable_name, c.ack_policy, c.max_deliver, c.flow_control, c.idle_heartbeat,
            c.mem_storage, c.num_replicas, c.inactive_threshold, c.filter_subject) == (
        None, "none", 1, True, 5.0, True, 1, 5.0, "oc.>")
    assert re.fullmatch(r"[A-Za-z0-9]{8}", ci.name)
    # With no acks, the ack floor follows delivery.
    assert seqs(ci) == {"delivered": (4, 4), "ack_floor": (4, 4), "num_ack_pending": 0,
                        "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}
    assert ci.push_bound is True


def test_push_idle_heartbeat_and_flow_control(srv):
    size, n = 100000, 25
    r = Raw(srv.port)
    try:
        r.sub("_R.>", 1)
        r.sub("deliver.fc", 2)
        r.pub("$JS.API.STREAM.CREATE.FC", {"name": "FC", "subjects": ["fc.>"]}, "_R.s")
        assert "error" not in json.loads(r.frames(until=count(1))[0].payload)
        r.pub("$JS.API.CONSUMER.CREATE.FC.HB", {"stream_name": "FC", "config": {
            "durable_name": "HB", "deliver_subject": "deliver.fc", "ack_policy": "none",
            "idle_heartbeat": 500000000, "flow_control": True}}, "_R.c1")
        idle = r.frames(until=count(2, lambda f: f.sid == 2))
        assert "error" not in json.loads(idle[0].payload), idle
        for i in range(n):
            r.pub("fc.a", b"%c" % (65 + i % 26) * size)
        early = r.wait_pong()
        # A flow-control request past 1 MiB of deliveries, a stall past 2 MiB
        # until it is answered, and heartbeats that report the stall.
        stalled = early + r.frames(until=lambda fs: sum(1 for f in fs if f.header.startswith(
            b"NATS/1.0 100 Idle Heartbeat")) >= 1)
        fc = [f for f in stalled if f.header.startswith(b"NATS/1.0 100 FlowControl")]
        assert fc, stalled
        r.pub(fc[0].reply, b"")
        resumed = r.frames(until=lambda fs: any(f.header.startswith(b"NATS/1.0 100 Idle") for f in fs))
        r.pub("$JS.API.CONSUMER.INFO.FC.HB", b"", "_R.i")
        info = json.loads(r.frames(until=count(1))[0].payload)
    finally:
        r.close()
    created = [f for f in idle if f.sid == 1]
    beats = [f for f in idle if f.sid == 2]
    assert json.loads(created[0].payload)["push_bound"] is True
    assert [(f.subject, f.reply, f.header, f.payload) for f in beats] == [
        ("deliver.fc", None, b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 0\r\n"
                             b"Nats-Last-Stream: 0\r\n\r\n", b"")] * 2
    data = [f for f in stalled if f.subject == "fc.a" and not f.header]
    assert len(data) == 21
    assert [f.payload[:1] for f in data] == [b"%c" % (65 + i) for i in range(21)]
    assert data[0].reply.split(".")[:7] == ["$JS", "ACK", "FC", "HB", "1", "1", "1"]
    ctl = [f for f in stalled if f.header]
    assert [(f.subject, f.header) for f in ctl[:1]] == [("deliver.fc", b"NATS/1.0 100 FlowControl Request\r\n\r\n")]
    assert re.fullmatch(r"\$JS\.FC\.FC\.HB\.[A-Za-z0-9]{4}", fc[0].reply)
    # The request goes out once more than half of the 2 MiB window is
    # unanswered (after the 11th message); deliveries stop past the full
    # window (after the 21st).
    assert stalled.index(fc[0]) == 11
    assert (ctl[-1].reply, ctl[-1].header) == (None, (
        b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 21\r\nNats-Last-Stream: 21\r\n"
        b"Nats-Consumer-Stalled: %s\r\n\r\n" % fc[0].reply.encode()))
    assert {f.header[:29] for f in resumed if f.header} == {b"NATS/1.0 100 Idle Heartbeat\r\n"}
    rest = [f for f in resumed if not f.header]
    assert [f.payload[:1] for f in rest] == [b"%c" % (65 + i) for i in range(21, n)]
    assert [f.header for f in resumed if f.header][-1] == (
        b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 25\r\nNats-Last-Stream: 25\r\n\r\n")
    assert raw_seqs(info) == {"delivered": (25, 25), "ack_floor": (25, 25), "num_ack_pending": 0,
                              "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}


# --------------------------------------------------------------------------
# management


def test_consumer_management(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="MG", subjects=["mg.>"])
            created = []
            for n in ("C3", "C1", "C4", "C0", "C2"):
                created.append(await js.add_consumer("MG", ConsumerConfig(durable_name=n)))
            info = await js.consumer_info("MG", "C1")
            names = await api(nc, "$JS.API.CONSUMER.NAMES.MG")
            page = await api(nc, "$JS.API.CONSUMER.NAMES.MG", {"offset": 3})
            listed = await api(nc, "$JS.API.CONSUMER.LIST.MG", {"offset": 4})
            infos = await js.consumers_info("MG")
            deleted = await js.delete_consumer("MG", "C4")
            after = await api(nc, "$JS.API.CONSUMER.NAMES.MG")
            raw_del = await api(nc, "$JS.API.CONSUMER.DELETE.MG.C4")
            sinfo = await js.stream_info("MG")
            eph = await api(nc, "$JS.API.CONSUMER.CREATE.MG", {
                "stream_name": "MG", "config": {"ack_policy": "explicit"}})
            return created, info, names, page, listed, infos, deleted, after, raw_del, sinfo, eph
        finally:
            await nc.close()
    created, info, names, page, listed, infos, deleted, after, raw_del, sinfo, eph = run(main())
    assert [c.name for c in created] == ["C3", "C1", "C4", "C0", "C2"]
    assert (info.name, info.stream_name, info.config.durable_name, info.config.name) == ("C1", "MG", "C1", "C1")
    assert info.config.metadata == {"_nats.level": info.config.metadata["_nats.level"],
                                    "_nats.req.level": "0", "_nats.ver": info.config.metadata["_nats.ver"]}
    assert names == {"type": "io.nats.jetstream.api.v1.consumer_names_response", "total": 5, "offset": 0,
                     "limit": 1024, "consumers": ["C0", "C1", "C2", "C3", "C4"]}
    assert page == {"type": "io.nats.jetstream.api.v1.consumer_names_response", "total": 5, "offset": 3,
                    "limit": 1024, "consumers": ["C3", "C4"]}
    assert list(listed) == ["type", "total", "offset", "limit", "consumers"]
    assert (listed["total"], listed["offset"], listed["limit"]) == (5, 4, 256)
    assert [c["name"] for c in listed["consumers"]] == ["C4"]
    # Listed entries carry the stored metadata only (no _nats.level/_nats.ver).
    assert listed["consumers"][0]["config"]["metadata"] == {"_nats.req.level": "0"}
    assert "type" not in listed["consumers"][0]
    assert sorted(i.name for i in infos) == ["C0", "C1", "C2", "C3", "C4"]
    assert deleted is True
    assert after["consumers"] == ["C0", "C1", "C2", "C3"] and after["total"] == 4
    assert raw_del == {"type": "io.nats.jetstream.api.v1.consumer_delete_response",
                       "error": {"code": 404, "err_code": 10014, "description": "consumer not found"}}
    assert sinfo.state.consumer_count == 4
    # An ephemeral gets a generated 8-character name and a 5 s inactive threshold.
    assert re.fullmatch(r"[A-Za-z0-9]{8}", eph["name"])
    assert "durable_name" not in eph["config"] and eph["config"]["inactive_threshold"] == 5000000000


def test_consumer_pause_resume(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            adv = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.PZ.>")
            await js.add_stream(name="PZ", subjects=["pz.>"])
            await js.add_consumer("PZ", ConsumerConfig(durable_name="PZC"))
            await js.publish("pz.a", b"1")
            t0 = time.monotonic()  # the pause runs from here: a stall below must not shorten `waited`
            now = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1.5)
            until = "%s.%06d123Z" % (now.strftime("%Y-%m-%dT%H:%M:%S"), now.microsecond)
            paused = await api(nc, "$JS.API.CONSUMER.PAUSE.PZ.PZC", {"pause_until": until})
            info = await api(nc, "$JS.API.CONSUMER.INFO.PZ.PZC")
            nowait = await nc.request("$JS.API.CONSUMER.MSG.NEXT.PZ.PZC",
                                      b'{"batch":1,"no_wait":true}', timeout=10)
            # A pulled message arrives on its own subject, so no nc.request here.
            inbox = await nc.subscribe(nc.new_inbox())
            await nc.publish("$JS.API.CONSUMER.MSG.NEXT.PZ.PZC", b'{"batch":1,"expires":4000000000}',
                             reply=inbox.subject)
            msg = await inbox.next_msg(timeout=5)
            waited = time.monotonic() - t0
            info2 = await api(nc, "$JS.API.CONSUMER.INFO.PZ.PZC")
            far = await api(nc, "$JS.API.CONSUMER.PAUSE.PZ.PZC", {"pause_until": "2099-01-01T00:00:00Z"})
            resumed = await api(nc, "$JS.API.CONSUMER.PAUSE.PZ.PZC")
            info3 = await api(nc, "$JS.API.CONSUMER.INFO.PZ.PZC")
            missing = await api(nc, "$JS.API.CONSUMER.PAUSE.PZ.NOPE")
            nostream = await api(nc, "$JS.API.CONSUMER.PAUSE.NOPE.PZC")
            advs = [json.loads(m.data) for m in await drain_n(adv, 4)]
            return until, paused, info, nowait, msg, waited, info2, far, resumed, info3, missing, nostream, advs
        finally:
            await nc.close()
    (until, paused, info, nowait, msg, waited, info2, far, resumed, info3, missing, nostream,
     advs) = run(main())
    assert list(paused) == ["type", "paused", "pause_until", "pause_remaining"]
    assert (paused["type"], paused["paused"], paused["pause_until"]) == (
        "io.nats.jetstream.api.v1.consumer_pause_response", True, until)
    assert 0 < paused["pause_remaining"] <= 1.5e9
    assert (info["paused"], info["config"]["pause_until"], info["num_pending"]) == (True, until, 1)
    assert 0 < info["pause_remaining"] <= 1.5e9
    assert info["config"]["metadata"]["_nats.req.level"] == "1"  # pausing needs API level 1
    # While paused: no_wait says No Messages, a lingering pull waits for the resume.
    assert (nowait.headers, nowait.data) == ({"Status": "404", "Description": "No Messages"}, b"")
    assert (msg.subject, msg.data) == ("pz.a", b"1") and 0.8 < waited < 3.5
    assert "paused" not in info2 and "pause_remaining" not in info2
    assert raw_seqs(info2)["delivered"] == (1, 1)
    assert (far["paused"], far["pause_until"]) == (True, "2099-01-01T00:00:00Z")
    assert resumed == {"type": "io.nats.jetstream.api.v1.consumer_pause_response", "paused": False,
                       "pause_until": "0001-01-01T00:00:00Z"}
    assert "paused" not in info3
    assert missing == {"type": "io.nats.jetstream.api.v1.consumer_pause_response",
                       "error": {"code": 404, "err_code": 10014, "description": "consumer not found"},
                       "paused": False, "pause_until": "0001-01-01T00:00:00Z"}
    assert err(nostream) == (404, 10059, "stream not found")
    assert [list(a) for a in advs] == [["type", "id", "timestamp", "stream", "consumer", "paused",
                                        "pause_until"]] * 4
    assert [(a["type"], a["stream"], a["consumer"], a["paused"], a["pause_until"]) for a in advs] == [
        ("io.nats.jetstream.advisory.v1.consumer_pause", "PZ", "PZC", True, until),
        ("io.nats.jetstream.advisory.v1.consumer_pause", "PZ", "PZC", False, until),
        ("io.nats.jetstream.advisory.v1.consumer_pause", "PZ", "PZC", True, "2099-01-01T00:00:00Z"),
        ("io.nats.jetstream.advisory.v1.consumer_pause", "PZ", "PZC", False, "0001-01-01T00:00:00Z"),
    ]


def test_consumer_errors(srv):
    cases = [
        ("$JS.API.CONSUMER.INFO.ER.NOPE", b""),
        ("$JS.API.CONSUMER.INFO.NOPE.E0", b""),
        ("$JS.API.CONSUMER.DELETE.ER.NOPE", b""),
        ("$JS.API.CONSUMER.DELETE.NOPE.E0", b""),
        ("$JS.API.CONSUMER.DURABLE.CREATE.ER.X1", {"stream_name": "ER", "config": {"durable_name": "X2"}}),
        ("$JS.API.CONSUMER.CREATE.ER.X1", {"stream_name": "ER", "config": {"durable_name": "X2"}}),
        ("$JS.API.CONSUMER.CREATE.ER.X3", {"stream_name": "OTHER", "config": {"durable_name": "X3"}}),
        ("$JS.API.CONSUMER.CREATE.NOPE.X4", {"stream_name": "NOPE", "config": {"durable_name": "X4"}}),
        ("$JS.API.CONSUMER.CREATE.ER.X5", {"stream_name": "ER", "config": {
            "durable_name": "X5", "deliver_subject": "erd.x", "max_waiting": 10}}),
        ("$JS.API.CONSUMER.CREATE.ER.X6", {"stream_name": "ER", "config": {
            "durable_name": "X6", "flow_control": True}}),
        ("$JS.API.CONSUMER.CREATE.ER.X7", {"stream_name": "ER", "config": {
            "durable_name": "X7", "idle_heartbeat": 1000000000}}),
        ("$JS.API.CONSUMER.CREATE.ER.X8", {"stream_name": "ER", "config": {
            "durable_name": "X8", "deliver_policy": "by_start_sequence"}}),
        ("$JS.API.CONSUMER.CREATE.ER.X9", {"stream_name": "ER", "config": {
            "durable_name": "X9", "filter_subject": "er.a", "filter_subjects": ["er.b"]}}),
        ("$JS.API.CONSUMER.CREATE.ER.E0", {"stream_name": "ER", "config": {
            "durable_name": "E0", "ack_policy": "none"}}),
        ("$JS.API.CONSUMER.CREATE.ER.E0", {"stream_name": "ER", "config": {
            "durable_name": "E0", "ack_policy": "explicit", "deliver_subject": "erd.x"}}),
        ("$JS.API.CONSUMER.CREATE.ER.E0", {"stream_name": "ER", "config": {
            "durable_name": "E0", "ack_policy": "explicit", "ack_wait": 5000000000}, "action": "create"}),
        ("$JS.API.CONSUMER.CREATE.ER.XA", {"stream_name": "ER", "config": {
            "durable_name": "XA", "ack_policy": "explicit"}, "action": "update"}),
        ("$JS.API.CONSUMER.CREATE.ER.XB", b"{bad"),
        ("$JS.API.CONSUMER.CREATE.ER.XC", {"stream_name": "ER", "config": {
            "durable_name": "XC", "deliver_subject": "er.loop"}}),
        ("$JS.API.CONSUMER.CREATE.ER.a.b", {"stream_name": "ER", "config": {"durable_name": "a.b"}}),
    ]

    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="ER", subjects=["er.>"])
            e0 = await api(nc, "$JS.API.CONSUMER.CREATE.ER.E0", {
                "stream_name": "ER", "config": {"durable_name": "E0", "ack_policy": "explicit"}})
            out = [await api(nc, s, b) for s, b in cases]
            # The same config again with action create is not an error.
            same = await api(nc, "$JS.API.CONSUMER.CREATE.ER.E0", {
                "stream_name": "ER", "config": {"durable_name": "E0", "ack_policy": "explicit"},
                "action": "create"})
            names = await api(nc, "$JS.API.CONSUMER.NAMES.NOPE")
            try:
                await js.consumer_info("ER", "NOPE")
                nf = None
            except nats.js.errors.NotFoundError as e:
                nf = apierr(e)
            return e0, out, same, names, nf
        finally:
            await nc.close()
    e0, out, same, names, nf = run(main())
    assert "error" not in e0
    assert [err(r) for r in out] == [
        (404, 10014, "consumer not found"),
        (404, 10059, "stream not found"),
        (404, 10014, "consumer not found"),
        (404, 10059, "stream not found"),
        (400, 10017, "consumer name in subject does not match durable name in request"),
        (400, 10017, "consumer name in subject does not match durable name in request"),
        (400, 10056, "stream name in subject does not match request"),
        (404, 10059, "stream not found"),
        (400, 10080, "consumer in push mode can not set max waiting"),
        (400, 10089, "consumer flow control requires a push based consumer"),
        (400, 10088, "consumer idle heartbeat requires a push based consumer"),
        (400, 10094, "consumer delivery policy is deliver by start sequence, but optional start "
                     "sequence is not set"),
        (400, 10136, "consumer cannot have both FilterSubject and FilterSubjects specified"),
        (500, 10012, "ack policy can not be updated"),
        (500, 10012, "can not update pull consumer to push based"),
        (400, 10148, "consumer already exists"),
        (400, 10149, "consumer does not exist"),
        (400, 10025, "invalid JSON: invalid character 'b' looking for beginning of object key string "
                     "at offset 2"),
        (400, 10081, "consumer deliver subject forms a cycle"),
        (400, 10017, "consumer name in subject does not match durable name in request"),
    ]
    assert [r["type"] for r in out] == (
        ["io.nats.jetstream.api.v1.consumer_info_response"] * 2
        + ["io.nats.jetstream.api.v1.consumer_delete_response"] * 2
        + ["io.nats.jetstream.api.v1.consumer_create_response"] * 16)
    assert "error" not in same and same["name"] == "E0"
    assert names == {"type": "io.nats.jetstream.api.v1.consumer_names_response",
                     "error": {"code": 404, "err_code": 10059, "description": "stream not found"},
                     "total": 0, "offset": 0, "limit": 0, "consumers": []}
    assert nf == (404, 10014, "consumer not found")


# --------------------------------------------------------------------------
# retention


def test_workqueue_retention(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="WQ", subjects=["wq.>"], retention="workqueue")
            for i in range(3):
                await js.publish("wq.a", b"%d" % i)
            psub = await js.pull_subscribe("wq.>", durable="WQ1")
            msgs = await fetch_until(psub, 3)
            before = await js.stream_info("WQ")
            await msgs[0].ack_sync()
            after = await js.stream_info("WQ")
            errors = []
            for cfg in (ConsumerConfig(durable_name="WQ2"),
                        ConsumerConfig(durable_name="WQ3", filter_subject="wq.b"),
                        ConsumerConfig(durable_name="WQ4", deliver_subject="wqpush.x"),
                        ConsumerConfig(durable_name="WQ5", ack_policy="none", filter_subject="wq.c")):
                try:
                    await js.add_consumer("WQ", cfg)
                    errors.append(None)
                except APIError as e:
                    errors.append(apierr(e))
            for m in msgs[1:]:
                await m.ack_sync()
            done = await js.stream_info("WQ")
            ci = await js.consumer_info("WQ", "WQ1")
            return before, after, errors, done, ci
        finally:
            await nc.close()
    before, after, errors, done, ci = run(main())
    assert (before.state.messages, before.state.first_seq, before.state.last_seq) == (3, 1, 3)
    assert (after.state.messages, after.state.first_seq, after.state.last_seq) == (2, 2, 3)
    assert errors == [
        (400, 10099, "multiple non-filtered consumers not allowed on workqueue stream"),
        (400, 10100, "filtered consumer not unique on workqueue stream"),
        (400, 10099, "multiple non-filtered consumers not allowed on workqueue stream"),
        (400, 10084, "consumer in pull mode requires explicit ack policy on workqueue stream"),
    ]
    assert (done.state.messages, done.state.first_seq, done.state.last_seq, done.state.consumer_count) == (
        0, 4, 3, 1)
    assert seqs(ci) == {"delivered": (3, 3), "ack_floor": (3, 3), "num_ack_pending": 0,
                        "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}


def test_interest_retention(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            # No consumers: nothing is kept, but sequences are still assigned.
            await js.add_stream(name="IN0", subjects=["in0.>"], retention="interest")
            acks = [(await js.publish("in0.a", b"%d" % i)).seq for i in range(3)]
            none = await js.stream_info("IN0")
            await js.add_consumer("IN0", ConsumerConfig(durable_name="LATE"))
            late = await js.consumer_info("IN0", "LATE")

            await js.add_stream(name="IN", subjects=["in.>"], retention="interest")
            await js.add_consumer("IN", ConsumerConfig(durable_name="I1"))
            await js.add_consumer("IN", ConsumerConfig(durable_name="I2"))
            for i in range(3):
                await js.publish("in.a", b"%d" % i)
            states = [await js.stream_info("IN")]
            s1 = await js.pull_subscribe_bind("I1", "IN")
            s2 = await js.pull_subscribe_bind("I2", "IN")
            for m in await fetch_until(s1, 3):
                await m.ack_sync()
            states.append(await js.stream_info("IN"))
            m2 = await fetch_until(s2, 3)
            await m2[0].ack_sync()
            await m2[2].ack_sync()
            states.append(await js.stream_info("IN"))
            await m2[1].ack_sync()
            states.append(await js.stream_info("IN"))
            # Deleting a consumer releases what only it was holding.
            await js.publish("in.a", b"late")
            await js.delete_consumer("IN", "I2")
            states.append(await js.stream_info("IN"))
            await js.delete_consumer("IN", "I1")
            states.append(await js.stream_info("IN"))
            return acks, none, late, states
        finally:
            await nc.close()
    acks, none, late, states = run(main())
    assert acks == [1, 2, 3]
    assert (none.state.messages, none.state.first_seq, none.state.last_seq) == (0, 4, 3)
    # A consumer added later starts past the dropped messages.
    assert seqs(late) == {"delivered": (0, 3), "ack_floor": (0, 3), "num_ack_pending": 0,
                          "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}
    assert [(s.state.messages, s.state.first_seq, s.state.last_seq, s.state.num_deleted or 0,
             s.state.consumer_count) for s in states] == [
        (3, 1, 3, 0, 2),  # both interested
        (3, 1, 3, 0, 2),  # I1 acked all, I2 none yet
        (1, 2, 3, 1, 2),  # I2 acked 1 and 3: only 2 is left (3 is an interior delete)
        (0, 4, 3, 0, 2),  # all acked by all
        (1, 4, 4, 0, 1),  # I2 gone, I1 still holds 4
        (0, 5, 4, 0, 0),  # no consumers left
    ]


def test_limits_retention_ignores_acks(srv):
    async def main():
        nc, js = await _conn(srv)
        try:
            await js.add_stream(name="LM", subjects=["lm.>"])
            for i in range(3):
                await js.publish("lm.a", b"%d" % i)
            psub = await js.pull_subscribe("lm.>", durable="LMC")
            for m in await fetch_until(psub, 3):
                await m.ack_sync()
            await js.delete_consumer("LM", "LMC")
            return await js.stream_info("LM")
        finally:
            await nc.close()
    info = run(main())
    assert (info.state.messages, info.state.first_seq, info.state.last_seq,
            info.state.consumer_count) == (3, 1, 3, 0)


# --------------------------------------------------------------------------
# persistence


@pytest.mark.parametrize("kind", KINDS)
def test_durable_consumer_survives_restart(kind, tmp_path):
    """Ack 3 of the first 4 delivered (ack_wait 1 s), restart on the same store.

    nats-server is stopped with SIGTERM: after SIGKILL it loses acks that were
    already confirmed (it comes back with ack_floor 0 and all 4 pending), so the
    spec is the orderly shutdown. natsbroker is held to the stronger promise,
    SIGKILL, since every ack_sync here was confirmed before the kill.
    """
    store = str(tmp_path / "store")

    async def before(url):
        nc, js = await connect_js(url, API_TIMEOUT)
        try:
            await js.add_stream(name="RS", subjects=["rs.>"])
            for i in range(5):
                await js.publish("rs.a", b"r%d" % i)
            psub = await js.pull_subscribe("rs.>", durable="RSD", config=ConsumerConfig(ack_wait=1))
            msgs = await fetch_until(psub, 4)
            for m in (msgs[0], msgs[1], msgs[3]):
                await m.ack_sync()
            return [m.data for m in msgs], await js.consumer_info("RS", "RSD")
        finally:
            await nc.close()

    async def after(url):
        nc, js = await connect_js(url, API_TIMEOUT)
        try:
            ci0 = await js.consumer_info("RS", "RSD")
            psub = await js.pull_subscribe_bind("RSD", "RS")
            got = []
            end = time.monotonic() + 15
            while len(got) < 2 and time.monotonic() < end:
                try:
                    for m in await psub.fetch(1, timeout=1):
                        await m.ack_sync()  # at once: the ack wait is 1 s
                        got.append(m)
                except nats.errors.TimeoutError:
                    pass
            ci1 = await js.consumer_info("RS", "RSD")
            try:
                extra = await psub.fetch(1, timeout=0.5)
            except nats.errors.TimeoutError:
                extra = []
            return ci0, got, extra, ci1
        finally:
            await nc.close()

    s = ServerProcess(kind, ["-js", "-sd", store]).start()
    try:
        delivered, ci = run(before(s.url))
    finally:
        s.stop(signal.SIGKILL if kind == "natsbroker" else signal.SIGTERM)
    s2 = ServerProcess(kind, ["-js", "-sd", store]).start()
    try:
        ci0, got, extra, ci1 = run(after(s2.url))
    finally:
        s2.stop()
    assert delivered == [b"r0", b"r1", b"r2", b"r3"]
    assert seqs(ci) == {"delivered": (4, 4), "ack_floor": (2, 2), "num_ack_pending": 1,
                        "num_redelivered": 0, "num_waiting": 0, "num_pending": 1}
    assert seqs(ci0) == {"delivered": (4, 4), "ack_floor": (2, 2), "num_ack_pending": 1,
                         "num_redelivered": 0, "num_waiting": 0, "num_pending": 1}
    # Exactly the two unacked: r2 redelivered (its ack wait ran out across the
    # restart) and r4, never delivered. Their order depends on timing.
    assert sorted((m.data, m.metadata.sequence.stream, m.metadata.num_delivered) for m in got) == [
        (b"r2", 3, 2), (b"r4", 5, 1)]
    assert sorted(m.metadata.sequence.consumer for m in got) == [5, 6]
    assert extra == []
    assert seqs(ci1) == {"delivered": (6, 5), "ack_floor": (6, 5), "num_ack_pending": 0,
                         "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}
