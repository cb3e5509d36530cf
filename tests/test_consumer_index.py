"""Many consumers on one stream: who is woken for a message and what it counts.

natsbroker indexes a stream's consumers by filter and counts the turn's new
messages in bulk (natsbroker.jetstream.consumer_index). These tests
pin the numbers that bookkeeping feeds -- the pending count in every ack reply
subject (the cached count, not the one CONSUMER.INFO recomputes), num_pending,
delivered sequences, interest and workqueue retention -- for many consumers
with different filters (literal, ``*``, ``>``, several filter_subjects),
against a brute-force count. The scenario tests run on nats-server as well,
which shows the brute-force count is the spec; the hypothesis test draws
random filters and subjects against natsbroker.
"""

import asyncio
import json

import nats
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from tests.support.servers import ServerProcess

KINDS = ["nats-server", "natsbroker"]
TIMEOUT = 10.0

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", params=KINDS)
def server(request, tmp_path_factory):
    store = tmp_path_factory.mktemp("cindex-" + request.param)
    with ServerProcess(request.param, ["-js", "-sd", str(store)]) as s:
        yield s


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    store = tmp_path_factory.mktemp("cindex-hyp")
    with ServerProcess("natsbroker", ["-js", "-sd", str(store)]) as s:
        yield s


def run(coro, limit=120):
    return asyncio.run(asyncio.wait_for(coro, limit))


# -- the oracle ---------------------------------------------------------------------


def matches(pattern, subject):
    pt, s = pattern.split("."), subject.split(".")
    for i, p in enumerate(pt):
        if p == ">":
            return len(s) > i
        if i >= len(s) or (p != "*" and p != s[i]):
            return False
    return len(pt) == len(s)


def takes(filters, subject):
    return not filters or any(matches(f, subject) for f in filters)


def with_filters(cfg, filters):
    """``cfg`` with ``filters`` as a consumer config says them: one as
    filter_subject, several as filter_subjects, none as neither."""
    if len(filters) == 1:
        return dict(cfg, filter_subject=filters[0])
    if filters:
        return dict(cfg, filter_subjects=list(filters))
    return cfg


def filters_of(cfg):
    if cfg.get("filter_subject"):
        return [cfg["filter_subject"]]
    return list(cfg.get("filter_subjects") or ())


# -- wire helpers -------------------------------------------------------------------


async def api(nc, subject, body=b""):
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    m = await nc.request(subject, body, timeout=TIMEOUT)
    return json.loads(m.data)


async def publish_burst(nc, subjects):
    """Publish without waiting in between (they arrive in few reads, so a
    server turn stores many), then collect the PubAcks; returns the seqs."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox + ".*")
    for i, subj in enumerate(subjects):
        await nc.publish(subj, b"m%d" % i, reply="%s.%d" % (inbox, i))
    seqs = {}
    while len(seqs) < len(subjects):
        m = await sub.next_msg(timeout=TIMEOUT)
        ack = json.loads(m.data)
        seqs[int(m.subject.rsplit(".", 1)[1])] = ack.get("seq")
    await sub.unsubscribe()
    return [seqs[i] for i in range(len(subjects))]


def ack_meta(reply):
    """(stream seq, delivery count, pending) from a v1 ack reply subject."""
    t = reply.split(".")
    return int(t[-4]), int(t[-5]), int(t[-1])


async def fetch(nc, stream, consumer, n, expires=0.5):
    """Up to ``n`` messages of one pull request: [(subject, seq, pending, reply)]."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    req = {"batch": n, "expires": int(expires * 1e9)}
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.%s.%s" % (stream, consumer),
                     json.dumps(req).encode(), reply=inbox)
    out = []
    try:
        while len(out) < n:
            m = await sub.next_msg(timeout=expires + TIMEOUT)
            if not m.reply:  # a status: 408 at expiry
                break
            seq, _, pending = ack_meta(m.reply)
            out.append((m.subject, seq, pending, m.reply))
    finally:
        await sub.unsubscribe()
    return out


async def publish_then_pull(nc, subjects, stream, consumers):
    """Publish ``subjects`` and, right behind them (no wait for the PubAcks:
    natsbroker still has them in its turn's log), one single-message pull
    request per consumer. Returns (seqs, {consumer: [(seq, pending)]})."""
    inbox = nc.new_inbox()
    acks = await nc.subscribe(inbox + ".p.*")
    # (a pull delivery carries the message's own subject: one inbox each)
    pulls = {c: await nc.subscribe("%s.c.%s" % (inbox, c)) for c in consumers}
    for i, subj in enumerate(subjects):
        await nc.publish(subj, b"m%d" % i, reply="%s.p.%d" % (inbox, i))
    for c in consumers:
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.%s.%s" % (stream, c),
                         json.dumps({"batch": 1, "expires": 500_000_000}).encode(),
                         reply="%s.c.%s" % (inbox, c))
    seqs = {}
    while len(seqs) < len(subjects):
        m = await acks.next_msg(timeout=TIMEOUT)
        seqs[int(m.subject.rsplit(".", 1)[1])] = json.loads(m.data)["seq"]
    got = {}
    for c, sub in pulls.items():
        m = await sub.next_msg(timeout=TIMEOUT)  # one message, or a status
        got[c] = [ack_meta(m.reply)[::2]] if m.reply else []
        await sub.unsubscribe()
    await acks.unsubscribe()
    return [seqs[i] for i in range(len(subjects))], got


async def info(nc, stream, consumer):
    r = await api(nc, "$JS.API.CONSUMER.INFO.%s.%s" % (stream, consumer))
    assert "error" not in r, r
    return r


async def until_pending(nc, stream, consumer, n, timeout=10):
    """Consumer info until its ``num_pending`` is ``n`` (asserted at the end)."""
    end = asyncio.get_running_loop().time() + timeout
    while True:
        got = (await info(nc, stream, consumer))["num_pending"]
        if got == n or asyncio.get_running_loop().time() > end:
            assert got == n, (consumer, got, n)
            return
        await asyncio.sleep(0.05)


async def add_consumer(nc, stream, name, cfg):
    body = {"stream_name": stream, "config": dict(cfg, durable_name=name)}
    r = await api(nc, "$JS.API.CONSUMER.CREATE.%s.%s" % (stream, name), body)
    assert "error" not in r, r
    return r


async def add_stream(nc, cfg):
    await api(nc, "$JS.API.STREAM.DELETE." + cfg["name"])
    r = await api(nc, "$JS.API.STREAM.CREATE." + cfg["name"], cfg)
    assert "error" not in r, r


# -- scenarios on both servers ------------------------------------------------------------

PULL_CONSUMERS = {
    "all": {},
    "gt": {"filter_subject": ">"},
    "lit": {"filter_subject": "ix.a"},
    "lit2": {"filter_subject": "ix.a"},  # the same filter as another
    "star": {"filter_subject": "ix.*"},
    "tail": {"filter_subject": "ix.b.>"},
    "mid": {"filter_subject": "ix.*.x"},
    "multi": {"filter_subjects": ["ix.a", "ix.b.>"]},
    "multi2": {"filter_subjects": ["ix.*.x", "ix.c"]},
    "multi3": {"filter_subjects": ["ix.c.*.z", "ix.d"]},
    "none": {"filter_subject": "ix.nothing"},
    "paused": {"filter_subject": "ix.*", "pause_until": "2999-01-01T00:00:00Z"},
}
LATE_CONSUMERS = {  # created between the bursts
    "new": {"deliver_policy": "new"},
    "new_f": {"deliver_policy": "new", "filter_subject": "ix.*.x"},
    "last_f": {"deliver_policy": "last", "filter_subject": "ix.c"},
    "all_f": {"deliver_policy": "all", "filter_subjects": ["ix.d", "ix.b.y"]},
    # (on an empty stream a start sequence means 1: these come once it has some)
    "fromseq": {"deliver_policy": "by_start_sequence", "opt_start_seq": 50},
    "fromseq_f": {"deliver_policy": "by_start_sequence", "opt_start_seq": 30,
                  "filter_subjects": ["ix.b.>", "ix.a"]},
}
SUBJECTS = ["ix.a", "ix.b", "ix.b.x", "ix.b.y", "ix.c", "ix.c.x", "ix.c.q.z", "ix.d",
            "ix.q.x", "ix.a.x"]


def burst(n, offset):
    return [SUBJECTS[(i * 7 + offset + i // 3) % len(SUBJECTS)] for i in range(n)]


def expected(cfg, stored, created_last):
    """The seqs a consumer delivers, in order: ``stored`` [(seq, subject)]."""
    filters = filters_of(cfg)
    policy = cfg.get("deliver_policy", "all")
    start = 1
    if policy == "by_start_sequence":
        start = cfg["opt_start_seq"]
    elif policy == "new":
        start = created_last + 1
    elif policy == "last":
        last = [s for s, subj in stored if s <= created_last and takes(filters, subj)]
        start = last[-1] if last else created_last + 1
    return [s for s, subj in stored if s >= start and takes(filters, subj)]


@pytest.mark.parametrize("server", KINDS, indirect=True)
def test_pending_and_delivery_per_filter(server):
    async def main():
        nc = await nats.connect(server.url, allow_reconnect=False)
        try:
            await add_stream(nc, {"name": "IX", "subjects": ["ix.>"], "storage": "file"})
            cfgs = {}
            for name, cfg in PULL_CONSUMERS.items():
                cfgs[name] = dict(cfg, ack_policy="explicit")
                await add_consumer(nc, "IX", name, cfgs[name])
            stored = []
            subjects = burst(70, 0)
            stored += list(zip(await publish_burst(nc, subjects), subjects))
            created_last = {name: 0 for name in cfgs}
            for name, cfg in LATE_CONSUMERS.items():
                cfgs[name] = dict(cfg, ack_policy="explicit")
                await add_consumer(nc, "IX", name, cfgs[name])
                created_last[name] = stored[-1][0]
            subjects = burst(70, 3)
            stored += list(zip(await publish_burst(nc, subjects), subjects))

            want = {n: expected(c, stored, created_last[n]) for n, c in cfgs.items()}
            for name in cfgs:
                i = await info(nc, "IX", name)
                assert i["num_pending"] == len(want[name]), name
            # Three messages each: the pending count in each ack reply is the
            # consumer's running count (what the bulk accounting keeps).
            for name in cfgs:
                got = await fetch(nc, "IX", name, 3)
                if name == "paused":
                    assert got == []
                    continue
                exp = want[name][:3]
                assert [g[1] for g in got] == exp, name
                assert [g[2] for g in got] == [len(want[name]) - k for k in range(1, len(exp) + 1)], name
                for g in got:
                    assert takes(filters_of(cfgs[name]), g[0])
                i = await info(nc, "IX", name)
                assert i["num_pending"] == len(want[name]) - len(exp), name
                assert i["num_ack_pending"] == len(exp), name
                if exp:
                    assert i["delivered"]["stream_seq"] == exp[-1], name
            # More messages after the cursors moved: counted from there on.
            subjects = burst(40, 5)
            more = list(zip(await publish_burst(nc, subjects), subjects))
            stored += more
            for name, cfg in cfgs.items():
                if name == "paused":
                    continue
                rest = expected(cfg, stored, created_last[name])[3:]
                # nats-server may PubAck a message before its consumers have
                # counted it (it signals them asynchronously): the pending
                # count must first reach what is stored (at once here).
                await until_pending(nc, "IX", name, len(rest))
                got = await fetch(nc, "IX", name, 1)
                assert [(g[1], g[2]) for g in got] == ([(rest[0], len(rest) - 1)] if rest else []), name
        finally:
            await nc.close()
    run(main())


@pytest.mark.parametrize("server", KINDS, indirect=True)
def test_push_consumers_many_filters(server):
    """Push consumers, one without interest until later: each gets what its
    filters take, with the pending count of each delivery."""
    async def main():
        nc = await nats.connect(server.url, allow_reconnect=False)
        try:
            await add_stream(nc, {"name": "PX", "subjects": ["px.>"], "storage": "file"})
            filters = {"p0": [], "p1": ["px.a"], "p2": ["px.*"], "p3": ["px.b.>"],
                       "p4": ["px.a", "px.b.>"], "p5": ["px.*.x"], "late": ["px.*"]}
            subs = {}
            for name, fs in filters.items():
                cfg = with_filters({"ack_policy": "explicit", "deliver_subject": "dlv." + name}, fs)
                if name != "late":
                    subs[name] = await nc.subscribe("dlv." + name)
                await add_consumer(nc, "PX", name, cfg)
            subjects = ["px.a", "px.b", "px.b.x", "px.c.x", "px.a", "px.b.y.z"] * 8
            stored = list(zip(await publish_burst(nc, subjects), subjects))
            subs["late"] = await nc.subscribe("dlv.late")
            for name, fs in filters.items():
                want = [s for s, subj in stored if takes(fs, subj)]
                got = []
                while len(got) < len(want):
                    m = await subs[name].next_msg(timeout=TIMEOUT)
                    seq, dc, pending = ack_meta(m.reply)
                    got.append((seq, pending))
                assert [g[0] for g in got] == want, name
                # A push delivery may go out while the burst is still being
                # stored (nats-server's often does): its pending count is
                # what was stored then, never more than what remains after it.
                assert all(p <= len(want) - k - 1 for k, (_, p) in enumerate(got)), name
                assert got[-1][1] == 0, name
        finally:
            await nc.close()
    run(main())


@pytest.mark.parametrize("server", KINDS, indirect=True)
def test_interest_retention_with_filtered_consumers(server):
    async def main():
        nc = await nats.connect(server.url, allow_reconnect=False)
        try:
            await add_stream(nc, {"name": "IN", "subjects": ["in.>"], "storage": "file",
                                  "retention": "interest"})
            cfgs = {"i1": ["in.a"], "i2": ["in.b.*", "in.c"], "i3": ["in.*.x"]}
            for name, fs in cfgs.items():
                await add_consumer(nc, "IN", name, with_filters({"ack_policy": "explicit"}, fs))
            subjects = ["in.a", "in.b.1", "in.c", "in.d", "in.q.x", "in.b.x", "in.e.y", "in.a.x"] * 3
            await publish_burst(nc, subjects)
            kept = [s for s in subjects if any(takes(fs, s) for fs in cfgs.values())]
            st = await api(nc, "$JS.API.STREAM.INFO.IN")
            assert st["state"]["messages"] == len(kept)
            for name, fs in cfgs.items():
                want = [s for s in subjects if takes(fs, s)]
                got = await fetch(nc, "IN", name, len(want) + 1)
                assert [g[0] for g in got] == want, name
                for g in got:
                    await nc.request(g[3], b"+ACK", timeout=TIMEOUT)
            st = await api(nc, "$JS.API.STREAM.INFO.IN")
            assert st["state"]["messages"] == 0
        finally:
            await nc.close()
    run(main())


@pytest.mark.parametrize("server", KINDS, indirect=True)
def test_workqueue_disjoint_filters(server):
    async def main():
        nc = await nats.connect(server.url, allow_reconnect=False)
        try:
            await add_stream(nc, {"name": "WQ", "subjects": ["wq.>"], "storage": "file",
                                  "retention": "workqueue"})
            cfgs = {"w1": {"filter_subject": "wq.a.*"},
                    "w2": {"filter_subjects": ["wq.b", "wq.c.>"]},
                    "w3": {"filter_subject": "wq.d"}}
            for name, cfg in cfgs.items():
                await add_consumer(nc, "WQ", name, dict(cfg, ack_policy="explicit"))
            subjects = ["wq.a.1", "wq.b", "wq.c.x.y", "wq.d", "wq.a.2", "wq.e"] * 5
            stored = list(zip(await publish_burst(nc, subjects), subjects))
            for name, cfg in cfgs.items():
                fs = filters_of(cfg)
                want = [s for s, subj in stored if takes(fs, subj)]
                i = await info(nc, "WQ", name)
                assert i["num_pending"] == len(want)
                got = await fetch(nc, "WQ", name, len(want) + 1)
                assert [(g[1], g[2]) for g in got] == [(s, len(want) - k - 1) for k, s in enumerate(want)]
                for g in got:
                    await nc.request(g[3], b"+ACK", timeout=TIMEOUT)
            st = await api(nc, "$JS.API.STREAM.INFO.WQ")
            assert st["state"]["messages"] == subjects.count("wq.e")
        finally:
            await nc.close()
    run(main())


# -- random filters, random subjects (natsbroker against the brute-force count) ----------------

TOKENS = ["a", "b", "c"]
subject_st = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=3).map(
    lambda ts: "h." + ".".join(ts))
filter_st = st.lists(st.sampled_from(TOKENS + ["*"]), min_size=1, max_size=3).flatmap(
    lambda ts: st.sampled_from([ts, ts + [">"]])).map(lambda ts: "h." + ".".join(ts))
consumer_st = st.lists(filter_st, max_size=3, unique=True)


def _overlap(fs):
    """nats-server refuses filter_subjects that overlap; so does natsbroker."""
    def collide(x, y):
        a, b = x.split("."), y.split(".")
        for i in range(max(len(a), len(b))):
            if i < len(a) and a[i] == ">":
                return len(b) > i
            if i < len(b) and b[i] == ">":
                return len(a) > i
            if i >= len(a) or i >= len(b):
                return False
            if a[i] != b[i] and "*" not in (a[i], b[i]):
                return False
        return True
    return any(collide(x, y) for i, x in enumerate(fs) for y in fs[i + 1:])


_example = [0]


# No shrinking: every example runs against a real server, and shrinking takes minutes.
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(consumers=st.lists(consumer_st, min_size=1, max_size=6),
       first=st.lists(subject_st, min_size=1, max_size=25),
       second=st.lists(subject_st, max_size=25),
       third=st.lists(subject_st, min_size=1, max_size=25),
       take=st.integers(0, 4))
def test_random_filters_count_like_brute_force(broker, consumers, first, second, third, take):
    consumers = [fs for fs in consumers if not _overlap(fs)]
    _example[0] += 1
    stream = "H%d" % _example[0]

    async def main():
        nc = await nats.connect(broker.url, allow_reconnect=False)
        try:
            await add_stream(nc, {"name": stream, "subjects": ["h.>"], "storage": "file"})
            for k, fs in enumerate(consumers):
                await add_consumer(nc, stream, "c%d" % k, with_filters({"ack_policy": "explicit"}, fs))
            stored = list(zip(await publish_burst(nc, first), first))
            # Each consumer takes a few, then more arrive behind its cursor.
            taken = {}
            for k, fs in enumerate(consumers):
                want = [s for s, subj in stored if takes(fs, subj)]
                got = await fetch(nc, stream, "c%d" % k, take, expires=0.2) if take else []
                exp = want[:take]
                assert [(g[1], g[2]) for g in got] == [
                    (s, len(want) - i - 1) for i, s in enumerate(exp)], (fs, first)
                taken[k] = len(exp)
            stored += list(zip(await publish_burst(nc, second), second)) if second else []
            for k, fs in enumerate(consumers):
                want = [s for s, subj in stored if takes(fs, subj)][taken[k]:]
                got = await fetch(nc, stream, "c%d" % k, 1, expires=0.2)
                assert [(g[1], g[2]) for g in got] == ([(want[0], len(want) - 1)] if want else []), \
                    (fs, first, second)
                i = await info(nc, stream, "c%d" % k)
                assert i["num_pending"] == max(len(want) - 1, 0)
                taken[k] += len(got)
            # Pull requests in the same turn as the messages they get.
            names = ["c%d" % k for k in range(len(consumers))]
            seqs, got = await publish_then_pull(nc, third, stream, names)
            stored += list(zip(seqs, third))
            for k, fs in enumerate(consumers):
                want = [s for s, subj in stored if takes(fs, subj)][taken[k]:]
                assert got["c%d" % k] == ([(want[0], len(want) - 1)] if want else []), \
                    (fs, first, second, third)
        finally:
            await api(nc, "$JS.API.STREAM.DELETE." + stream)
            await nc.close()
    run(main(), 60)


# -- the index alone: counts through long logs and trims -------------------------------------

from natsbroker.jetstream import consumer_index as CI  # noqa: E402
from natsbroker.subjects.sublist import subject_matches  # noqa: E402


class _Js:
    def consumer_index_logged(self, index):
        pass


class _Consumer:
    """What the index needs of a consumer, settling as Consumer does."""

    def __init__(self, index, filters):
        self.index = index
        self.filters = [f.encode() for f in filters]
        self.sseq = 1
        self.npc = 0
        self._lmark = index.end
        self._kicked = False
        self.js = _Js()

    def wants(self, subject):
        return any(subject_matches(f, subject) for f in self.filters)

    def settle(self):
        if self._lmark != self.index.end:
            self.npc += self.index.count(self._lmark, self.sseq,
                                         self.wants if self.filters else None)
            self._lmark = self.index.end

    def kick(self):
        self._kicked = True
        self.index.busy(self)


_op_st = st.one_of(
    st.tuples(st.just("store"), subject_st),
    st.tuples(st.just("move"), st.integers(0, 5), st.integers(1, 4)),
    st.tuples(st.just("trim"), st.booleans()),
)


@settings(max_examples=200, deadline=None)
@given(consumers=st.lists(consumer_st, min_size=1, max_size=5),
       ops=st.lists(_op_st, max_size=80), log_min=st.integers(1, 12))
def test_index_counts_like_brute_force_through_trims(consumers, ops, log_min):
    # Pending = stored messages at or past the cursor that the filters take,
    # however the log is trimmed in between; a cursor moves only after its
    # consumer settles (as Consumer._next_msg does).
    old = CI.LOG_MIN
    CI.LOG_MIN = log_min
    try:
        index = CI.ConsumerIndex()
        cs = [_Consumer(index, fs) for fs in consumers if not _overlap(fs)]
        for c in cs:
            index.add(c)
        stored = []

        def check(cs):
            # Not after every op: a consumer that has not settled for a while
            # counts a long stretch of the log at once.
            for c in cs:
                want = sum(1 for s, subj in stored
                           if s >= c.sseq and (not c.filters or c.wants(subj)))
                c.settle()
                assert c.npc == want

        for op in ops:
            if op[0] == "store":
                seq = len(stored) + 1
                stored.append((seq, op[1].encode()))
                index.stored(seq, op[1].encode())
            elif op[0] == "move" and cs:
                c = cs[op[1] % len(cs)]
                c.settle()
                # Past the next messages it takes, as deliveries would.
                taken = [s for s, subj in stored
                         if s >= c.sseq and (not c.filters or c.wants(subj))][:op[2]]
                if taken:
                    c.npc -= len(taken)
                    c.sseq = taken[-1] + 1
            elif op[0] == "trim":
                index.trim(force=op[1])
                check(cs)
        check(cs)
    finally:
        CI.LOG_MIN = old
