"""Bad input against JetStream consumers, natsbroker and nats-server side by side.

Both servers run once for the module (``-js``); each example sends the same
bytes to both over raw NATS connections and compares what comes back: status
replies, API JSON (timestamps and version metadata left out), ack
confirmations, advisories, the consumer's numbers and the stream's state.
nats-server 2.15.1 is the spec. After each example natsbroker must also still
be alive, its control consumer must deliver and confirm acks correctly, the
fuzzed consumer's numbers must be sane and the stream's messages unchanged.

The generators leave out the inputs of the known differences listed at the end
of the module (each has its own strict xfail test, named after it, that expects
only a ``KnownDifference`` and checks natsbroker's health either way): when one
is fixed, widen what its comment names (``HEARTBEATS``) again.

Examples are not shrunk (each costs a quarter of a second on two servers); the
failure message shows the input as sent.
"""

import contextlib
import itertools
import json
import re
import threading
import time

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings, strategies as st

from tests.support.raw import dial
from tests.support.servers import ServerProcess
from tests.test_observed_live import rfc3339_ns

LOADED = time.time_ns()  # before any server of this module started


def _server_time(text, where):
    """A time the server stamped (what the norm_* helpers drop): RFC 3339 as
    Go writes it, after this module was loaded and not in the future."""
    ns = rfc3339_ns(text)
    assert LOADED <= ns <= time.time_ns() + 5_000_000, (where, text)

pytestmark = pytest.mark.timeout(120)

SEC = 1_000_000_000
WINDOW = 0.25  # seconds both servers get to answer (or not) an example
FUZZ = settings(max_examples=25, deadline=None, database=None,
                suppress_health_check=list(HealthCheck),
                phases=[Phase.explicit, Phase.reuse, Phase.generate])

MESSAGES = [(b"fz.a", b"one"), (b"fz.b", b"two"), (b"fz.a", b"three"), (b"fz.c", b"four")]


# --------------------------------------------------------------------------
# raw connections


class Conn:
    """A raw NATS connection; a reader thread keeps every frame with its sid."""

    def __init__(self, port):
        self.sock = dial(port, 10, nodelay=True)
        self.buf = b""
        self.frames = []  # (sid, subject, reply, header, payload)
        self.pongs = 0
        self.errors = []
        self.closed = False
        self.cv = threading.Condition()
        self.send(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,'
                  b'"no_responders":true,"protocol":1}\r\n')
        threading.Thread(target=self._run, daemon=True).start()

    def send(self, data):
        self.sock.sendall(data)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _read(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise EOFError
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._read()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _run(self):
        try:
            self.sock.settimeout(None)
            while True:
                line = self._line()
                if line == b"PING":
                    self.send(b"PONG\r\n")
                    continue
                if line == b"PONG":
                    with self.cv:
                        self.pongs += 1
                        self.cv.notify_all()
                    continue
                if line.startswith(b"-ERR"):
                    with self.cv:
                        self.errors.append(line)
                    continue
                p = line.split(b" ")
                if p[0] == b"MSG":
                    reply, hlen, tlen = (p[3] if len(p) == 5 else None), 0, int(p[-1])
                elif p[0] == b"HMSG":
                    reply, hlen, tlen = (p[3] if len(p) == 6 else None), int(p[-2]), int(p[-1])
                else:
                    continue
                while len(self.buf) < tlen + 2:
                    self._read()
                body, self.buf = self.buf[:tlen], self.buf[tlen + 2:]
                with self.cv:
                    self.frames.append((int(p[2]), p[1], reply, body[:hlen], body[hlen:]))
                    self.cv.notify_all()
        except (OSError, EOFError, ValueError):
            with self.cv:
                self.closed = True
                self.cv.notify_all()

    def wait(self, pred, timeout):
        with self.cv:
            return self.cv.wait_for(pred, timeout)

    def ping(self, timeout=10):
        with self.cv:
            n = self.pongs
        try:
            self.send(b"PING\r\n")
        except OSError:
            return False
        return bool(self.wait(lambda: self.pongs > n or self.closed, timeout)) and not self.closed


def _b(v):
    return v.encode() if isinstance(v, str) else v


class Side:
    """One server, one connection, the requests a test makes."""

    def __init__(self, kind, proc):
        self.kind = kind
        self.proc = proc
        self.conn = Conn(proc.port)
        self._sids = itertools.count(10)
        self._inbox = itertools.count()
        self.conn.send(b"SUB _I.> 1\r\nSUB $JS.EVENT.ADVISORY.CONSUMER.> 2\r\n")
        assert self.conn.ping()

    def sub(self, subject):
        sid = next(self._sids)
        self.conn.send(b"SUB %s %d\r\n" % (_b(subject), sid))
        return sid

    def unsub(self, sid):
        self.conn.send(b"UNSUB %d\r\n" % sid)

    def pub(self, subject, body=b"", reply=None):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        r = b" " + _b(reply) if reply else b""
        self.conn.send(b"PUB %s%s %d\r\n%s\r\n" % (_b(subject), r, len(body), body))

    def frames(self, sid):
        with self.conn.cv:
            return [f for f in self.conn.frames if f[0] == sid]

    def advisories(self, since):
        with self.conn.cv:
            return [f for f in self.conn.frames[since:] if f[0] == 2]

    def mark(self):
        with self.conn.cv:
            return len(self.conn.frames)

    def request(self, subject, body=b"", timeout=10.0, raw=False):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        inbox = b"_I.%d" % next(self._inbox)
        self.pub(subject, body, inbox)
        got = []

        def ready():
            got[:] = [f for f in self.conn.frames if f[1] == inbox]
            return bool(got) or self.conn.closed
        self.conn.wait(ready, timeout)
        if not got:
            return None
        f = got[0]
        if raw:
            return f
        if f[3]:
            return ("status", f[3])
        return json.loads(f[4])

    def api(self, subject, body=b""):
        resp = self.request(subject, body)
        assert isinstance(resp, dict), (self.kind, subject, resp)
        return resp

    def info(self, stream, name):
        return self.api("$JS.API.CONSUMER.INFO.%s.%s" % (stream, name))

    def close(self):
        self.conn.close()
        self.proc.stop()


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    out = []
    try:
        for kind in ("nats-server", "natsbroker"):
            store = tmp_path_factory.mktemp("cfuzz-" + kind)
            out.append(Side(kind, ServerProcess(kind, ["-js", "-sd", str(store)]).start()))
        for s in out:
            for name, extra in (("FZ", {}), ("WQ", {"retention": "workqueue"}), ("CT", {}), ("CR", {})):
                cfg = {"name": name, "subjects": [name.lower() + ".>"]}
                cfg.update(extra)
                assert "error" not in s.api("$JS.API.STREAM.CREATE." + name, cfg)
            for subject, data in MESSAGES:
                s.api(subject, data)
            assert "error" not in s.api("$JS.API.CONSUMER.CREATE.CT.CTRL", {
                "stream_name": "CT", "config": {"durable_name": "CTRL", "ack_policy": "explicit"}})
            s.fz_state = stream_state(s, "FZ")
            s.ctrl_seq = 0
        yield out
    finally:
        for s in out:
            s.close()


_names = itertools.count()


def new_name(prefix="F"):
    return "%s%d" % (prefix, next(_names))


# --------------------------------------------------------------------------
# normalizing and checking


def stream_state(side, name):
    st = side.api("$JS.API.STREAM.INFO." + name)["state"]
    return {k: st.get(k) for k in ("messages", "bytes", "first_seq", "last_seq", "num_deleted")}


def nums(info):
    if not isinstance(info, dict) or "error" in info:
        return info
    return {
        "delivered": (info["delivered"]["consumer_seq"], info["delivered"]["stream_seq"]),
        "ack_floor": (info["ack_floor"]["consumer_seq"], info["ack_floor"]["stream_seq"]),
        "num_ack_pending": info["num_ack_pending"], "num_redelivered": info["num_redelivered"],
        "num_waiting": info["num_waiting"], "num_pending": info["num_pending"]}


def norm_frame(f):
    """(subject, reply with the timestamp token masked, header, payload)."""
    _, subject, reply, hdr, data = f
    if reply and reply.startswith(b"$JS.ACK."):
        t = reply.split(b".")
        if len(t) == 9:
            t[7] = b"<ts>"
        reply = b".".join(t)
    if hdr:
        # A no-responders status names the ack subject, stamp included.
        hdr = _HDR_ACK_TS.sub(rb"\1<ts>", hdr)
    return (subject, reply, hdr, data)


_HDR_ACK_TS = re.compile(rb"(Nats-Subject: \$JS\.ACK\.(?:[^.\r]+\.){5})\d+(?=[.\r])")


def norm_advisory(f):
    body = json.loads(f[4])
    assert re.fullmatch(r"[A-Za-z0-9]{22}", body.pop("id", "")), f
    _server_time(body.pop("timestamp", ""), f[1])
    return (f[1], body)


def norm_api(resp):
    if not isinstance(resp, dict):
        return resp
    resp = json.loads(json.dumps(resp))
    for k in ("created", "ts"):
        if k in resp:
            _server_time(resp.pop(k), k)
    for part in (resp, resp.get("config") if isinstance(resp.get("config"), dict) else {}):
        md = part.get("metadata") if isinstance(part, dict) else None
        if isinstance(md, dict):
            md.pop("_nats.ver", None)
            md.pop("_nats.level", None)
    name = resp.get("name")
    if isinstance(name, str) and name not in CHOSEN_NAMES:
        resp["name"] = "<generated>"
    for sub in ("delivered", "ack_floor"):
        if isinstance(resp.get(sub), dict):
            if "last_active" in resp[sub]:
                _server_time(resp[sub].pop("last_active"), sub + ".last_active")
    return resp


def check_info_sane(info, explicit=True):
    n = nums(info)
    assert isinstance(n, dict), info
    assert n["num_ack_pending"] >= 0 and n["num_redelivered"] >= 0, n
    assert n["num_pending"] >= 0 and n["num_waiting"] >= 0, n
    assert n["ack_floor"][1] <= n["delivered"][1], n
    if explicit:  # with ack all, nats-server itself takes the consumer seq from the subject
        assert n["ack_floor"][0] <= n["delivered"][0], n
    assert n["num_ack_pending"] <= max(n["delivered"][1] - n["ack_floor"][1], 0), n


def check_broker(nb):
    """natsbroker is alive, FZ is as it was, and CTRL delivers and confirms."""
    assert nb.conn.ping(), "natsbroker connection lost"
    assert nb.conn.errors == [], nb.conn.errors
    assert nb.proc.proc.poll() is None, "natsbroker exited:\n" + nb.proc.log()[-3000:]
    assert stream_state(nb, "FZ") == nb.fz_state
    nb.ctrl_seq += 1
    payload = b"ctrl-%d" % nb.ctrl_seq
    ack = nb.api("ct.x", payload)
    assert ack == {"stream": "CT", "seq": nb.ctrl_seq}, ack
    inbox = new_name("_C.")
    sid = nb.sub(inbox)
    nb.pub("$JS.API.CONSUMER.MSG.NEXT.CT.CTRL", {"batch": 1, "no_wait": True}, inbox)
    assert nb.conn.wait(lambda: len([f for f in nb.conn.frames if f[0] == sid]) >= 1, 10)
    (msg,) = nb.frames(sid)
    nb.unsub(sid)
    assert (msg[1], msg[4]) == (b"ct.x", payload), msg
    seq = b"%d" % nb.ctrl_seq
    assert msg[2].split(b".")[:7] == [b"$JS", b"ACK", b"CT", b"CTRL", b"1", seq, seq], msg
    confirm = nb.request(msg[2], b"+ACK", raw=True)
    assert confirm is not None and confirm[3:] == (b"", b""), confirm
    info = nums(nb.info("CT", "CTRL"))
    assert info == {"delivered": (nb.ctrl_seq, nb.ctrl_seq), "ack_floor": (nb.ctrl_seq, nb.ctrl_seq),
                    "num_ack_pending": 0, "num_redelivered": 0, "num_waiting": 0,
                    "num_pending": 0}, info


def pair(sides):
    ns, nb = sides
    assert ns.kind == "nats-server" and nb.kind == "natsbroker"
    return ns, nb


# --------------------------------------------------------------------------
# pull requests


def settle(sides, measure, limit):
    """After the window: give a slow side (a loaded machine) up to ``limit``
    s more to produce as much as the other did, so that only a real
    difference fails a comparison."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        counts = [measure(s) for s in sides]
        if counts[0] == counts[1]:
            return
        time.sleep(0.05)


def pull_case(sides, body, cfg=None, window=WINDOW, slack=3.0):
    """Send ``body`` as a CONSUMER.MSG.NEXT request to a fresh consumer on
    FZ; what each server answered in ``window`` s, and the consumer's numbers."""
    name = new_name("P")
    config = {"durable_name": name, "ack_policy": "explicit"}
    config.update(cfg or {})
    for s in sides:
        created = s.api("$JS.API.CONSUMER.CREATE.FZ." + name, {"stream_name": "FZ", "config": config})
        assert "error" not in created, created
        s._sid = s.sub("_P." + name)
        s.pub("$JS.API.CONSUMER.MSG.NEXT.FZ." + name, body, "_P." + name)
    time.sleep(window)
    settle(sides, lambda s: len(s.frames(s._sid)), slack)
    out = []
    for s in sides:
        frames = [norm_frame(f) for f in s.frames(s._sid)]
        s.unsub(s._sid)
        info = s.info("FZ", name)
        out.append({"frames": frames, "info": nums(info), "raw_info": info})
    for s in sides:
        s.api("$JS.API.CONSUMER.DELETE.FZ." + name)
    return out


class KnownDifference(AssertionError):
    """The difference a strict xfail below expects, and only that: a broken
    broker (check_broker) or a crash is another exception, so it still fails."""


@contextlib.contextmanager
def known_difference():
    """The comparisons a strict xfail expects to fail: their AssertionError
    becomes a KnownDifference (``xfail(raises=KnownDifference)``)."""
    try:
        yield
    except AssertionError as e:
        raise KnownDifference(str(e)) from e


def compare(want, got, keys, what):
    for k in keys:
        assert got[k] == want[k], "%s: %s differs\n  nats-server: %r\n  natsbroker : %r" % (
            what, k, want[k], got[k])


INTS = [0, -1, 1, 2, 3, 5, 2 ** 31, 2 ** 63 - 1, 2 ** 63, 10 ** 30, 1.5, 1e3, "2", None, True, [1], {}]
# Request expiries: instant, or far beyond the window (nothing timing-dependent).
# (1 ms is not: nats-server may or may not deliver before such a request expires.)
EXPIRES = [0, -1, 1, 1000, 30 * SEC, 2 ** 63 - 1, 2 ** 63, "1s", None, 1.5e9, True, -30 * SEC]
# Heartbeats: none below 100 ms (both servers flood, at different rates), and
# no negative ones (test_negative_pull_heartbeat_means_none).
HEARTBEATS = [0, SEC, 5 * SEC, 2 ** 62, 2 ** 63 - 1, "1s", None, True, 1.5]
MAX_BYTES = [0, -1, 1, 60, 1000, 2 ** 63, "1", None, 1.5]
NO_WAIT = [True, False, None, 1, "true"]
EXTRA = {"group": ["x", 1], "priority": [0, 12, -1], "min_pending": [5, -3], "id": ["x"],
         "min_ack_pending": [1], "unknown": [{"x": [1, 2]}], "BATCH": [2], "No_Wait": [True],
         "Expires": [1000]}

json_request = st.fixed_dictionaries({}, optional={
    "batch": st.sampled_from(INTS), "expires": st.sampled_from(EXPIRES),
    "max_bytes": st.sampled_from(MAX_BYTES), "no_wait": st.sampled_from(NO_WAIT),
    "idle_heartbeat": st.sampled_from(HEARTBEATS),
    **{k: st.sampled_from(v) for k, v in EXTRA.items()},
}).map(lambda d: json.dumps(d).encode())

pull_body = st.one_of(
    st.binary(max_size=16),
    st.sampled_from([b"0", b"-1", b"3", b"9223372036854775807", b"9223372036854775808",
                     b"99999999999999999999", b"+2", b" 2 ", b"1_0", b"0x10", b"{", b"null", b"[]",
                     b'"x"', b"{}", b"\t\n"]),
    json_request,
    st.tuples(st.sampled_from([b"", b"  ", b"\r\n"]), json_request,
              st.sampled_from([b"", b" ", b"garbage", b"}", b"\x00"])).map(b"".join),
)


@FUZZ
@given(body=pull_body)
def test_pull_request_bodies(sides, body):
    ns, nb = pair(sides)
    want, got = pull_case(sides, body)
    compare(want, got, ("frames", "info"), "MSG.NEXT %r" % body)
    check_info_sane(got["raw_info"])
    check_broker(nb)


BATCHES = [b"0", b"-1", b"9223372036854775807", b"9223372036854775808", b"99999999999999999999",
           b'{"batch":0}', b'{"batch":-1}', b'{"batch":-1,"expires":1000000}',
           b'{"batch":0,"no_wait":true}', b'{"batch":9223372036854775807,"no_wait":true}',
           b'{"batch":9223372036854775807,"expires":30000000000}', b'{"batch":9223372036854775808}',
           b'{"batch":100000000000000000000000}', b'{"batch":1e3}',
           # nats-server's n-- wraps int64: -2**63 becomes 2**63-1 after the first message.
           pytest.param(b'{"batch":-9223372036854775808}', marks=pytest.mark.xfail(
               strict=True, raises=KnownDifference,
               reason="batch -2**63: nats-server's int64 count wraps and keeps delivering; "
                      "natsbroker stops after one")),
           b'{"batch":1000000,"no_wait":true,"max_bytes":1}',
           b'{"batch":2147483648,"no_wait":true,"max_bytes":9223372036854775807}']


@pytest.mark.parametrize("body", BATCHES)
def test_absurd_batch_sizes(sides, body):
    ns, nb = pair(sides)
    want, got = pull_case(sides, body)
    try:
        with known_difference():
            compare(want, got, ("frames", "info"), "MSG.NEXT %r" % body)
    finally:
        check_info_sane(got["raw_info"])
        check_broker(nb)
    check_broker(nb)


def test_absurd_batch_with_max_batch_and_max_bytes_limits(sides):
    ns, nb = pair(sides)
    for body in (b'{"batch":9223372036854775807}', b'{"batch":5,"max_bytes":9223372036854775807}',
                 b'{"batch":3,"expires":9223372036854775807}', b"7"):
        want, got = pull_case(sides, body, cfg={"max_batch": 4, "max_bytes": 1000,
                                                "max_expires": 60 * SEC})
        compare(want, got, ("frames", "info"), "MSG.NEXT %r (limits)" % body)
    check_broker(nb)


# --------------------------------------------------------------------------
# acks


def _ack_subject(reply, tokens, drop=0, extra=()):
    t = reply.split(b".")
    for i, v in tokens.items():
        t[i] = v
    if drop:
        t = t[:-drop]
    return b".".join(t + list(extra))


def _own_advisories(side, name):
    """The consumer's advisories since the mark (CREATED left out: nats-server
    sends it asynchronously, maybe after the create reply)."""
    return [f for f in side.advisories(side._mark)
            if f[1].endswith(b"." + name.encode()) and b".CONSUMER.CREATED." not in f[1]]


def ack_case(sides, ops, policy="explicit", stream="FZ", deliver=3, slack=3.0):
    """A fresh consumer on ``stream`` gets ``deliver`` messages (no_wait pull);
    ``ops`` are sent as acks: ``(message index, {token index: bytes}, body,
    with_reply[, drop, extra])`` or ``(None, subject, body, with_reply)``.
    Per side: the replies to each op, the consumer's advisories, the numbers,
    then what a no_wait pull of 10 gets, the numbers and the stream's state."""
    name = new_name("A")
    for s in sides:
        if stream == "WQ":
            s.api("$JS.API.STREAM.PURGE.WQ")
            for subject, data in MESSAGES:
                s.api(b"wq" + subject[2:], data)
        created = s.api("$JS.API.CONSUMER.CREATE.%s.%s" % (stream, name), {
            "stream_name": stream, "config": {"durable_name": name, "ack_policy": policy}})
        assert "error" not in created, created
        s._mark = s.mark()
        s._sid = s.sub("_P." + name)
        s.pub("$JS.API.CONSUMER.MSG.NEXT.%s.%s" % (stream, name), {"batch": deliver, "no_wait": True},
              "_P." + name)
    for s in sides:
        assert s.conn.wait(lambda: len([f for f in s.conn.frames if f[0] == s._sid and f[2]]) >= deliver, 10)
        s._msgs = [f for f in s.frames(s._sid) if f[2]]
        s._replies = []
    # One op at a time (to both servers at once), each given a moment:
    # nats-server handles acks and the pull requests of +NXT on different
    # goroutines, so back-to-back ops race there.
    for j, op in enumerate(ops):
        k, tokens, body, with_reply = op[:4]
        drop, extra = (op[4], op[5]) if len(op) > 4 else (0, ())
        for s in sides:
            subject = _ack_subject(s._msgs[k][2], tokens, drop, extra) if k is not None else tokens
            if with_reply:
                s._replies.append(s.sub("_Q.%s.%d" % (name, j)))
                s.pub(subject, body, "_Q.%s.%d" % (name, j))
            else:
                s._replies.append(None)
                s.pub(subject, body)
        time.sleep(0.03)
    time.sleep(WINDOW)
    settle(sides, lambda s: ([len(s.frames(r)) if r else None for r in s._replies],
                             len(_own_advisories(s, name))), slack)
    for s in sides:
        s._res = {
            "replies": [[norm_frame(f) for f in s.frames(r)] if r else None for r in s._replies],
            "advisories": [norm_advisory(f) for f in _own_advisories(s, name)],
            "info": nums(s.info(stream, name)),
        }
        s._sid2 = s.sub("_P2." + name)
        s.pub("$JS.API.CONSUMER.MSG.NEXT.%s.%s" % (stream, name), {"batch": 10, "no_wait": True},
              "_P2." + name)
    time.sleep(0.15)
    settle(sides, lambda s: len(s.frames(s._sid2)), slack)
    out = []
    for s in sides:
        res = s._res
        res["after"] = [norm_frame(f) for f in s.frames(s._sid2)]
        raw = s.info(stream, name)
        res["info_after"], res["raw_info"] = nums(raw), raw
        res["stream"] = stream_state(s, stream)
        for sid in [s._sid, s._sid2] + [r for r in s._replies if r]:
            s.unsub(sid)
        s.api("$JS.API.CONSUMER.DELETE.%s.%s" % (stream, name))
        out.append(res)
    return out


ACK_KEYS = ("replies", "advisories", "info", "after", "info_after", "stream")

# What nats-server reads as an ack (bytes.Equal), and bodies it ignores.
ACK_BODIES = [b"", b"+ACK", b"+OK"]
UNKNOWN_BODIES = [b"+ack", b"+ACKX", b" +ACK ", b"+ACK\r\n", b"garbage\xff", b"ACK"]
NAK_BODIES = [b"-NAK", b"-NAK junk", b'-NAK {"delay":"x"}', b'-NAK {"delay":-5}', b"-NAK {bad",
              b"-NAK -1s", b"-NAK 1h", b'-NAK {"delay":3600000000000}', b'-NAK {"delay":1}',
              b"-NAK 1ns", b"-NAKED", b"-NAK\t5", b"-NAK 0"]
OTHER_BODIES = [b"+WPI", b"+WPIX", b"+NXT", b'+NXT {"batch":2}', b"+NXT {bad", b"+NXT 0",
                b'+NXT {"batch":-1,"no_wait":true}', b'+NXT {"no_wait":true,"batch":5}']
TERM_BODIES = [b"+TERM", b"+TERM reason", b"+TERMINATE", b"+TERM \xff\xfe"]
# Stream sequence tokens: digits (wrapping past 2**64), and junk.
SSEQ_TOKENS = [b"1", b"2", b"3", b"4", b"99", b"9223372036854775807", b"18446744073709551615",
               b"abc", b"x1", b"\xc3\xa9", b"0x1", b"+1", b"-1", b"0_1", b"18446744073709551617"]
SEQ_TOKENS = [b"0", b"1", b"2", b"3", b"7", b"99"]

ack_token_op = st.tuples(
    st.integers(0, 2),
    st.fixed_dictionaries({}, optional={4: st.sampled_from(SEQ_TOKENS),
                                        5: st.sampled_from(SSEQ_TOKENS),
                                        6: st.sampled_from(SEQ_TOKENS)}),
    st.sampled_from(ACK_BODIES), st.booleans())
plain_op = st.tuples(st.integers(0, 2), st.just({}),
                     st.sampled_from(ACK_BODIES + NAK_BODIES + OTHER_BODIES + TERM_BODIES
                                     + UNKNOWN_BODIES),
                     st.booleans())


@FUZZ
@given(policy=st.sampled_from(["explicit", "explicit", "all"]),
       stream=st.sampled_from(["FZ", "FZ", "WQ"]),
       ops=st.lists(st.one_of(ack_token_op, plain_op), min_size=1, max_size=4))
# A delayed NAK of a message already queued for redelivery takes it out of the
# queue (nats-server redelivers "two" first, then "three" after the delay).
@example(policy="explicit", stream="FZ",
         ops=[(2, {}, b"-NAK", False), (1, {}, b"-NAK", False), (2, {}, b'-NAK {"delay":1}', False)])
@example(policy="all", stream="FZ",
         ops=[(2, {}, b"-NAK", False), (1, {}, b"-NAK", False), (2, {}, b"-NAK -1s", False)])
def test_acks(sides, policy, stream, ops):
    ns, nb = pair(sides)
    if stream == "WQ":
        policy = "explicit"  # the only policy a workqueue allows
    if policy == "all":
        # With ack all nats-server trusts the subject's consumer sequence (its
        # ack floor can pass what it delivered, then its delivered count
        # stalls): not something to copy, so no token games there.
        ops = [(k, {}, body, r) for k, _, body, r in ops]
    want, got = ack_case(sides, ops, policy, stream)
    compare(want, got, ACK_KEYS, "acks %r (%s on %s)" % (ops, policy, stream))
    check_info_sane(got["raw_info"], explicit=policy == "explicit")
    check_broker(nb)


# --------------------------------------------------------------------------
# CONSUMER.CREATE garbage


WEIRD = [None, True, False, 0, -1, 1, 2, -5, 2 ** 31, 2 ** 63 - 1, 2 ** 63, 2 ** 64, 1.5, 1e3, "", "x",
         "all", "explicit", "none", "instant", "original", "new", "last_per_subject", "1s", [], [1], [0],
         [-1, 2], [SEC, 2 * SEC], {}, {"a": 1}, {"a": "b"}, "cr.>", "cr.*", "cr.a", "a..b", ">", "*",
         "fz.a", "2099-01-01T00:00:00Z", "1970-01-01T00:00:01Z", "bad-time", "50%", "101%", "abc",
         "A" * 300, 30 * SEC, 5 * SEC, 100_000_000, 99_999_999, "dlv.x", "_INBOX.x", "q"]
FIELDS = ["durable_name", "name", "description", "deliver_policy", "opt_start_seq", "opt_start_time",
          "ack_policy", "ack_wait", "max_deliver", "backoff", "filter_subject", "filter_subjects",
          "replay_policy", "rate_limit_bps", "sample_freq", "max_waiting", "max_ack_pending",
          "flow_control", "idle_heartbeat", "headers_only", "max_batch", "max_expires", "max_bytes",
          "inactive_threshold", "num_replicas", "mem_storage", "deliver_subject", "deliver_group",
          "metadata", "pause_until", "priority_policy", "priority_groups", "priority_timeout",
          "direct"]

# Consumer names a request can choose; any other name was generated.
CHOSEN_NAMES = {"K", "D"} | {w for w in WEIRD if isinstance(w, str)}

create_config = st.dictionaries(st.sampled_from(FIELDS), st.sampled_from(WEIRD), max_size=5)
create_body = st.one_of(
    st.binary(max_size=12),
    st.sampled_from([b"{", b"null", b"[]", b"{}", b'{"config":null}', b'{"stream_name":"CR"}',
                     b'{"stream_name":"NOPE","config":{}}', b'{"config":[]}',
                     b'{"stream_name":"CR","config":{"durable_name":"D"}} x', b'"x"', b"1"]),
    st.fixed_dictionaries(
        {"stream_name": st.sampled_from(["CR", "CR", "CR", "NOPE", "", 5, None]),
         "config": create_config},
        optional={"action": st.sampled_from(["create", "update", "", "bogus", 1]),
                  "pedantic": st.sampled_from([True, False, 1])}).map(lambda d: json.dumps(d).encode()),
)
create_subject = st.sampled_from([
    "$JS.API.CONSUMER.CREATE.CR", "$JS.API.CONSUMER.CREATE.CR.K", "$JS.API.CONSUMER.CREATE.CR.K.cr.a",
    "$JS.API.CONSUMER.CREATE.CR.K.x", "$JS.API.CONSUMER.DURABLE.CREATE.CR.K",
    "$JS.API.CONSUMER.CREATE.NOPE", "$JS.API.CONSUMER.CREATE.CR.K.cr.*.>"])


@settings(FUZZ, max_examples=60)
@given(subject=create_subject, body=create_body, twice=st.booleans())
def test_consumer_create_garbage(sides, subject, body, twice):
    ns, nb = pair(sides)
    answers = []
    for s in sides:
        first = norm_api(s.request(subject, body))
        second = norm_api(s.request(subject, body)) if twice else None
        answers.append((first, second))
    assert answers[1] == answers[0], "CREATE %s %r" % (subject, body)
    infos = []
    for s in sides:
        names = s.api("$JS.API.CONSUMER.NAMES.CR")["consumers"] or []
        got = []
        for n in names:
            info = s.info("CR", n)
            if s is nb:
                check_info_sane(info)
            got.append(json.dumps(norm_api(info), sort_keys=True))
            s.api("$JS.API.CONSUMER.DELETE.CR." + n)
        infos.append(sorted(got))
    assert infos[1] == infos[0], "CREATE %s %r" % (subject, body)
    check_broker(nb)


# --------------------------------------------------------------------------
# Known differences, each a differential case (xfail until natsbroker matches)


def _differential_ack(sides, ops, policy="explicit", keys=ACK_KEYS):
    ns, nb = pair(sides)
    want, got = ack_case(sides, ops, policy)
    try:
        compare(want, got, keys, "acks %r (%s)" % (ops, policy))
    finally:
        check_broker(nb)


@pytest.mark.parametrize("body", [b"+ack", b"+ACKX", b" +ACK ", b"+ACK\r\n", b"garbage\xff", b"ACK"])
def test_unknown_ack_body_is_ignored(sides, body):
    """nats-server: only "", "+ACK", "+OK" ack; an unknown body is confirmed
    (empty reply) and changes nothing. natsbroker strips the body and acks
    anything it does not recognize."""
    _differential_ack(sides, [(0, {}, body, True)])


@pytest.mark.parametrize("tokens,body", [
    ({4: b"abc"}, b"+ACK"),  # nats-server: a junk count is 2**64-1, the ack still counts
    ({6: b"abc"}, b"+ACK"),  # likewise a junk consumer seq (the pending record has the real one)
    ({5: b"+1"}, b"+ACK"),   # Python int() reads "+1", nats-server does not: no ack there
    ({5: b"0_1"}, b"+ACK"),  # nor "0_1"
    ({5: b"-1"}, b"+ACK"),   # not a number for nats-server (no reply); int() -1 (replies)
    ({5: b"18446744073709551617"}, b"+ACK"),  # nats-server's int64 wraps: 2**64+1 acks seq 1
    ({4: b"-7"}, b"+TERM"),  # the TERM advisory's deliveries: 18446744073709551615, not -7
])
def test_ack_token_parsing(sides, tokens, body):
    _differential_ack(sides, [(0, tokens, body, True)])


@pytest.mark.parametrize("drop,extra", [(1, ()), (0, (b"x",)), (0, (b"x", b"y", b"z"))])
def test_ack_subject_token_count(sides, drop, extra):
    """nats-server subscribes ``$JS.ACK.<stream>.<consumer>.*.*.*.*.*``: a
    request on an ack subject of another length gets the no-responders 503."""
    _differential_ack(sides, [(0, {}, b"+ACK", True, drop, extra)])


@pytest.mark.parametrize("body", [b"+ACK", b"-NAK", b"+WPI", b"+TERM"])
def test_ack_none_consumer_has_no_ack_subscriber(sides, body):
    _differential_ack(sides, [(0, {}, body, True)], policy="none")


@pytest.mark.parametrize("ops", [
    [(0, {}, b"+ACK", True), (0, {}, b"+TERM", True)],  # already acked
    [(0, {}, b"+TERM", True), (0, {}, b"+TERM", True)],  # twice
    [(0, {5: b"4"}, b"+TERM", True)],  # delivered later than this consumer got to
    [(0, {5: b"99"}, b"+TERM", True)],  # beyond the stream
])
def test_term_advisory_for_any_sequence(sides, ops):
    _differential_ack(sides, ops)


@pytest.mark.parametrize("body", [
    b"-NAK", b"+WPI", b"+TERM", b"+ACK"])
def test_ack_for_sequence_zero(sides, body):
    _differential_ack(sides, [(0, {5: b"0"}, body, True)])


@pytest.mark.parametrize("body", [b"-NAK", b"+WPI"])
def test_nak_progress_for_undelivered_sequence_are_confirmed(sides, body):
    _differential_ack(sides, [(0, {5: b"99"}, body, True)])


@pytest.mark.parametrize("ops", [
    [(0, {6: b"0"}, b"-NAK", True)],   # at or below the ack floor: ignored
    [(0, {6: b"99"}, b"-NAK", True)],  # beyond what was delivered: ignored
    [(0, {6: b"3"}, b"-NAK", True)],   # in range: the advisory's consumer_seq is 3
    # a nak of the first delivery's subject after a redelivery: deliveries 1 (the subject's)
    [(0, {}, b"-NAK", True), (2, {}, b'+NXT {"batch":1}', True), (0, {}, b"-NAK", True)],
])
def test_nak_checks_the_delivery_sequence(sides, ops):
    """nats-server's processNak: ``dseq <= ack floor || dseq > last delivered``
    -> ignored (no advisory, no redelivery); its MSG_NAKED advisory carries the
    subject's consumer seq and delivery count, not the server's."""
    _differential_ack(sides, ops)


@pytest.mark.parametrize("body", [
    b'{"max_bytes":60}', b'{"max_bytes":1000,"no_wait":true}', b'{"batch":1,"max_bytes":60}',
    b'{"batch":2,"max_bytes":1000}', b'{"batch":1,"max_bytes":1000,"expires":30000000000}',
    b'{"batch":-1,"max_bytes":60}'])
def test_max_bytes_request_ends_with_batch_completed(sides, body):
    """nats-server: a request with max_bytes that got its batch (a missing or
    non-positive batch counts as one message) ends with ``409 Batch Completed``
    and Nats-Pending-Messages (batch left, may be negative) /
    Nats-Pending-Bytes (bytes left), e.g. {"batch":2,"max_bytes":1000}: two
    messages then ``Nats-Pending-Messages: 0``, ``Nats-Pending-Bytes: 904``."""
    ns, nb = pair(sides)
    want, got = pull_case(sides, body)
    try:
        compare(want, got, ("frames", "info"), "MSG.NEXT %r" % body)
    finally:
        check_broker(nb)


@pytest.mark.parametrize("hb", [-1, -5 * SEC])
@pytest.mark.xfail(strict=True, raises=KnownDifference,
                   reason="a negative idle_heartbeat: no heartbeats on either "
                          "server now, but nats-server delivers 3 of the 4 messages")
def test_negative_pull_heartbeat_means_none(sides, hb):
    """nats-server treats idle_heartbeat <= 0 as no heartbeat; natsbroker sent
    1,700 heartbeats in 0.25 s (and spins the reactor)."""
    ns, nb = pair(sides)
    want, got = pull_case(sides, json.dumps({"batch": 5, "idle_heartbeat": hb,
                                             "expires": 30 * SEC}).encode(), slack=0)
    try:
        with known_difference():
            assert len(got["frames"]) == len(want["frames"]) == 3, (
                len(want["frames"]), len(got["frames"]), got["frames"][3:5])
            compare(want, got, ("frames", "info"), "idle_heartbeat %d" % hb)
    finally:
        check_broker(nb)


@pytest.mark.xfail(strict=True, raises=KnownDifference,
                   reason="a wildcard subscription counts as push interest; "
                          "nats-server needs one on the deliver subject itself")
def test_push_interest_needs_a_literal_subscription(sides):
    """nats-server: with only ``dw.>`` subscribed, a push consumer delivering
    to ``dw.x`` is not push_bound and delivers nothing (natsbroker delivers)."""
    ns, nb = pair(sides)
    name = new_name("W")
    for s in sides:
        s._sid = s.sub("dw%s.>" % name)
        s._created = norm_api(s.api("$JS.API.CONSUMER.CREATE.FZ." + name, {"stream_name": "FZ", "config": {
            "durable_name": name, "ack_policy": "none", "deliver_subject": "dw%s.x" % name}}))
    time.sleep(WINDOW)
    got = []
    for s in sides:
        got.append(([norm_frame(f) for f in s.frames(s._sid)], s._created, nums(s.info("FZ", name))))
        s.unsub(s._sid)
        s.api("$JS.API.CONSUMER.DELETE.FZ." + name)
    try:
        with known_difference():
            assert got[1] == got[0]
    finally:
        check_broker(nb)
