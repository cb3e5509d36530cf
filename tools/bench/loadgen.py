"""Raw-socket NATS load generator (no NATS client library).

Every worker speaks the NATS client protocol directly over a TCP socket
(the ``*-tls`` / ``*-ws`` scenarios: over TLS or WebSocket on top of it, see
``Conn`` and transports.py):

* read the server's ``INFO`` line,
* send ``CONNECT {"verbose":false,"pedantic":false,"headers":true}`` + ``PING``
  and wait for ``PONG``,
* then do its job:

  - publisher: ``sendall`` of a pre-built buffer of many
    ``PUB <subj> <size>\\r\\n<payload>\\r\\n`` frames, ended by ``PING`` and
    waiting for ``PONG`` (so every message has been processed by the server);
  - subscriber: ``SUB`` + ``PING``/``PONG``, then it only *counts bytes*:
    every delivered frame has the exact size of
    ``MSG <subj> <sid> <size>\\r\\n<payload>\\r\\n``; it finishes when the
    expected byte count has arrived and then checks with ``PING`` that the
    next bytes are exactly ``PONG\\r\\n`` (i.e. nothing extra was delivered);
  - requester / responder: one request at a time with a reply inbox; each
    frame is compared byte-for-byte with the expected one;
  - js_publisher (JetStream): creates a stream through ``$JS.API``, then
    publishes with a unique reply inbox per message (``<inbox>.<n>``, one
    wildcard ``SUB <inbox>.*``), keeping up to ``window`` publishes without
    PubAck in flight, and checks that publish ``n`` was acked exactly once
    with ``{"stream":S,"seq":n+1}`` (so the seqs are exactly 1..N) and that
    ``STREAM.INFO`` reports N messages afterwards.
  - js_consumer (JetStream): on a stream that a js_publisher run filled
    before, creates a durable consumer with explicit acks (pull, or push to
    a deliver subject), consumes and ``+ACK``s every message (pull: one
    ``CONSUMER.MSG.NEXT`` batch request at a time), checks that the
    deliveries are stream seqs 1..N in order without redeliveries, and
    polls ``CONSUMER.INFO`` until the ack floor is N.

The Key-Value / Object Store scenarios (kv-*, obj-*) are the exception: their
worker ``natspy`` drives nats-py (natspy.py), as an application would.

Sockets are blocking with kernel-level timeouts (``SO_RCVTIMEO`` /
``SO_SNDTIMEO``) so that a timeout costs no extra ``poll()`` per call; every
loop is bounded by a count and by an absolute deadline.

Workers run either as processes (default, ``fork``) or as threads; they
report through a queue with ``("ready"|"done"|"error", worker_id, payload)``
tuples.  Timestamps are ``time.monotonic()`` (CLOCK_MONOTONIC: comparable
across processes on the same machine).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import queue as queue_mod
import re
import socket
import struct
import threading
import time
import traceback

from .errors import BenchError
from .natspy import w_natspy  # nats-py itself is imported in the worker only
from .payload import make_payload
from .transports import TlsClient, TransportError, WsClient

HOST = "127.0.0.1"
CRLF = b"\r\n"
CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\nPING\r\n'
PING = b"PING\r\n"
PONG = b"PONG\r\n"

# Kernel-level timeout of one blocking socket call; loops re-check their
# absolute deadline after each expiry.
IO_SLICE = 0.5
RECV_BUF = 4 * 1024 * 1024
# Target size of one pre-built publish buffer.
PUB_CHUNK_BYTES = 512 * 1024


def msg_frame(subject: str, sid: str, payload: bytes, reply: str | None = None) -> bytes:
    head = f"MSG {subject} {sid} {reply + ' ' if reply else ''}{len(payload)}\r\n"
    return head.encode() + payload + CRLF


def pub_frame(subject: str, payload: bytes, reply: str | None = None) -> bytes:
    head = f"PUB {subject} {reply + ' ' if reply else ''}{len(payload)}\r\n"
    return head.encode() + payload + CRLF


def _timeval(seconds: float) -> bytes:
    sec = int(seconds)
    return struct.pack("ll", sec, int((seconds - sec) * 1_000_000))


def _tail(data) -> str:
    return repr(bytes(data[-160:]))


class Conn:
    """A raw NATS client connection (blocking socket, kernel timeouts).

    ``transport`` (``Transport.client`` of transports.py; None: plain TCP):
    ``{"kind": "tls", "ca": PATH, "tls_first": bool}`` does the TLS handshake
    (after the plaintext INFO in ``handshake``, or at once when
    ``tls_first``); ``{"kind": "ws"}`` does the WebSocket upgrade at once.
    From then on a layer (transports.TlsClient / WsClient) encodes what
    ``sendall`` writes and decodes what ``recv``/``recv_into`` return, so the
    workers see NATS protocol bytes whatever the transport.  The socket
    itself stays blocking with kernel timeouts.
    """

    def __init__(self, port: int, deadline: float, host: str = HOST, abort=None,
                 idle: float | None = None, transport: dict | None = None):
        self.deadline = deadline
        self.abort = abort  # Event set by the coordinator to stop early
        # Fail when one blocking read/write makes no progress for this long.
        self.idle_slices = max(1, round(idle / IO_SLICE)) if idle else None
        self.transport = transport or {"kind": "tcp"}
        kind = self.transport["kind"]
        remaining = max(0.1, deadline - time.monotonic())
        try:
            sock = socket.create_connection((host, port), timeout=min(remaining, 5.0))
        except OSError as e:
            raise BenchError(f"connect to {host}:{port} failed: {e}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(IO_SLICE))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(IO_SLICE))
        self.sock = sock
        self.buf = bytearray()  # bytes read but not consumed by readline()
        self.info: dict = {}
        self.layer = None  # TlsClient / WsClient once started
        self.recv = sock.recv
        self.recv_into = sock.recv_into
        try:
            if kind == "tls" and self.transport.get("tls_first"):
                self._start_layer(TlsClient(sock.recv_into, self._control_send, self.transport))
                self.layer.handshake(deadline)
            elif kind == "ws":
                self._start_layer(WsClient(sock.recv_into, self._control_send))
                self.layer.upgrade(host, port, deadline)
            elif kind not in ("tcp", "tls"):
                raise BenchError(f"unknown transport {kind!r}")
        except TransportError as e:
            self.close()
            raise BenchError(str(e)) from None
        except BaseException:
            self.close()
            raise

    def _start_layer(self, layer) -> None:
        if self.buf:
            raise BenchError(f"unexpected data before the {self.transport['kind']} "
                             f"handshake: {_tail(self.buf)}")
        self.layer = layer
        self.recv = layer.recv
        self.recv_into = layer.recv_into

    def _control_send(self, data) -> None:
        self._raw_sendall(data, f"{self.transport['kind']} handshake / control frame")

    def tls_summary(self) -> str | None:
        return self.layer.summary() if self.layer is not None else None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def check_deadline(self, what: str, idle_slices: int = 0) -> None:
        """Raise if past the deadline, aborted, or (idle_slices = number of
        consecutive IO_SLICE timeouts) stalled for longer than the idle limit."""
        if time.monotonic() > self.deadline:
            raise BenchError(f"timeout while {what}")
        if self.abort is not None and self.abort.is_set():
            raise BenchError(f"aborted while {what}")
        if self.idle_slices is not None and idle_slices >= self.idle_slices:
            raise BenchError(f"no progress for {idle_slices * IO_SLICE:.0f}s while {what} "
                             f"(server stalled, or messages lost?)")

    def recv_some(self, what: str) -> bytes:
        stalls = 0
        while True:
            try:
                data = self.recv(65536)
            except (BlockingIOError, socket.timeout):
                stalls += 1
                self.check_deadline(what, stalls)
                continue
            except OSError as e:
                raise BenchError(f"socket error while {what}: {e}") from None
            if not data:
                raise BenchError(f"connection closed by server while {what}; "
                                 f"last bytes: {_tail(self.buf)}")
            return data

    def sendall(self, data, what: str) -> None:
        if self.layer is not None:
            data = self.layer.encode(data)
        self._raw_sendall(data, what)

    def _raw_sendall(self, data, what: str) -> None:
        view = memoryview(data)
        stalls = 0
        while view:
            try:
                n = self.sock.send(view)
            except (BlockingIOError, socket.timeout):
                stalls += 1
                self.check_deadline(what, stalls)
                continue
            except OSError as e:
                raise BenchError(f"socket error while {what}: {e}") from None
            stalls = 0
            view = view[n:]

    def readline(self, what: str) -> bytes:
        for _ in range(100_000):
            i = self.buf.find(CRLF)
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[: i + 2]
                return line
            if len(self.buf) > 1024 * 1024:
                raise BenchError(f"protocol line too long while {what}")
            self.buf += self.recv_some(what)
        raise BenchError(f"too many reads while {what}")

    def read_exact(self, n: int, what: str) -> bytes:
        for _ in range(100_000):
            if len(self.buf) >= n:
                data = bytes(self.buf[:n])
                del self.buf[:n]
                return data
            self.buf += self.recv_some(what)
        raise BenchError(f"too many reads while {what}")

    def expect_pong(self, what: str) -> None:
        """Read control lines until PONG (answers server PINGs, fails on -ERR)."""
        for _ in range(1000):
            line = self.readline(what)
            if line == b"PONG":
                return
            if line == b"PING":
                self.sendall(PONG, what)
            elif line.startswith(b"-ERR"):
                raise BenchError(f"server error while {what}: {line.decode(errors='replace')}")
            elif line in (b"+OK",) or line.startswith(b"INFO "):
                continue
            else:
                raise BenchError(f"unexpected line while {what}: {line[:200]!r}")
        raise BenchError(f"no PONG while {what}")

    def expect_nothing_more(self, who: str) -> None:
        """PING and check that the next line is PONG (after any server PING):
        i.e. nothing more was delivered than expected (duplicates, extras)."""
        self.sendall(PING, f"final {who} PING")
        for _ in range(10):
            line = self.readline(f"waiting for {who}'s final PONG")
            if line == b"PONG":
                return
            if line != b"PING":
                raise BenchError(f"{who} received more than expected: {line[:200]!r}")
            self.sendall(PONG, "answering server PING")
        raise BenchError(f"{who}: no final PONG")

    def handshake(self) -> dict:
        line = self.readline("waiting for INFO")
        if not line.startswith(b"INFO "):
            raise BenchError(f"expected INFO, got {line[:200]!r}")
        try:
            self.info = json.loads(line[5:])
        except ValueError as e:
            raise BenchError(f"bad INFO json: {e}: {line[:200]!r}") from None
        if self.transport["kind"] == "tls" and not self.transport.get("tls_first"):
            if not (self.info.get("tls_required") or self.info.get("tls_available")):
                raise BenchError("TLS transport, but the server's INFO has neither "
                                 "tls_required nor tls_available (no TLS configured?)")
            try:  # nats-server's INFO-first upgrade
                self._start_layer(TlsClient(self.sock.recv_into, self._control_send,
                                            self.transport))
                self.layer.handshake(self.deadline)
            except TransportError as e:
                raise BenchError(str(e)) from None
        self.sendall(CONNECT, "sending CONNECT")
        self.expect_pong("waiting for PONG after CONNECT")
        return self.info

    def subscribe(self, subject: str, sid: str) -> None:
        self.sendall(f"SUB {subject} {sid}\r\n".encode() + PING, "sending SUB")
        self.expect_pong("waiting for PONG after SUB")
        if self.buf:
            raise BenchError(f"unexpected data after SUB: {_tail(self.buf)}")


def probe(port: int, timeout: float = 2.0, transport: dict | None = None) -> dict:
    """Connect (over ``transport``, see Conn), handshake, PING/PONG; return
    the server's INFO."""
    conn = Conn(port, time.monotonic() + timeout, transport=transport)
    try:
        return conn.handshake()
    finally:
        conn.close()


# --------------------------------------------------------------------------
# Workers.  Each gets (port, params, start_event, report) and returns a dict.
# --------------------------------------------------------------------------

def _wait_start(conn: "Conn", start_evt) -> None:
    if not start_evt.wait(max(0.0, conn.deadline - time.monotonic())):
        raise BenchError("start signal never came")
    conn.check_deadline("starting")


def w_publisher(port, p, start_evt, report):
    """Publish p['count'] frames of p['subject'], then PING/PONG."""
    deadline = time.monotonic() + p["timeout"]
    conn = Conn(port, deadline, abort=p.get("abort"), idle=p.get("idle"),
                transport=p.get("transport"))
    try:
        conn.handshake()
        frame = pub_frame(p["subject"], make_payload(p["size"]))
        per_chunk = max(1, PUB_CHUNK_BYTES // len(frame))
        chunk = frame * per_chunk
        count = p["count"]
        full, rest = divmod(count, per_chunk)
        tail = frame * rest
        report("ready", None)
        _wait_start(conn, start_evt)
        if p.get("start_delay"):
            # Cluster runs: the subscribers' interest must cross the route
            # first (their SUB was answered by another server).
            time.sleep(p["start_delay"])
        t0 = time.monotonic()
        for i in range(full):
            conn.sendall(chunk, f"publishing (after {i * per_chunk}/{count} msgs)")
            if (i & 15) == 0:
                conn.check_deadline(f"publishing ({i * per_chunk}/{count} msgs sent)")
        conn.sendall(tail + PING, "publishing last chunk")
        t_sent = time.monotonic()
        conn.expect_pong("waiting for publisher's final PONG")
        t1 = time.monotonic()
        return {"t0": t0, "t_sent": t_sent, "t1": t1, "msgs": count,
                "tls": conn.tls_summary()}
    finally:
        conn.close()


def w_subscriber(port, p, start_evt, report):
    """SUB, then count bytes until p['count'] MSG frames have been received.

    The stream is not parsed; the only thing looked for is a server ``PING``
    (nats-server sends one ~2 s after connecting to measure the RTT) which may
    sit between two MSG frames: ``bytearray.count`` finds it (our subjects and
    payload never contain ``PING\\r\\n``), it is answered and its 6 bytes are
    added to the expected total.
    """
    deadline = time.monotonic() + p["timeout"]
    conn = Conn(port, deadline, abort=p.get("abort"), idle=p.get("idle"),
                transport=p.get("transport"))
    try:
        conn.handshake()
        conn.subscribe(p["subject"], p["sid"])
        # (a wildcard subscription gets the messages under their own subject)
        frame = msg_frame(p.get("msg_subject", p["subject"]), p["sid"], make_payload(p["size"]))
        flen = len(frame)
        expected = p["count"] * flen
        buf = bytearray(RECV_BUF)
        mv = memoryview(buf)
        recv_into = conn.recv_into
        report("ready", None)
        _wait_start(conn, start_evt)
        got = 0          # bytes received, PINGs included
        pings = 0
        n = 0
        edge = b""       # last 5 bytes of the previous read (PING split across reads)
        t_first = None
        reads = 0
        stalls = 0
        while got < expected:
            reads += 1
            if (reads & 63) == 0:
                conn.check_deadline(f"receiving ({(got - 6 * pings) // flen}/{p['count']} msgs)")
            try:
                n = recv_into(mv, min(RECV_BUF, expected - got))
            except (BlockingIOError, socket.timeout):
                stalls += 1
                conn.check_deadline(f"receiving: subscriber got {(got - 6 * pings) // flen} of "
                                    f"{p['count']} msgs ({got}/{expected} bytes)", stalls)
                continue
            except OSError as e:
                raise BenchError(f"subscriber socket error after {got}/{expected} bytes: {e}")
            stalls = 0
            if n == 0:
                raise BenchError(f"server closed subscriber connection after "
                                 f"{(got - 6 * pings) // flen}/{p['count']} msgs "
                                 f"({got}/{expected} bytes)")
            if t_first is None:
                t_first = time.monotonic()
                k = min(n, 4)
                if bytes(mv[:k]) != frame[:k] and bytes(mv[:k]) != PING[:k]:
                    raise BenchError(f"subscriber: unexpected first bytes {bytes(mv[:min(n, 200)])!r}")
            found = buf.count(PING, 0, n)
            if edge:
                found += (edge + bytes(mv[:min(n, 5)])).count(PING)
            edge = bytes(mv[max(0, n - 5):n])
            if found:
                pings += found
                expected += 6 * found
                conn.sendall(PONG * found, "answering server PING")
            got += n
        t_end = time.monotonic()
        # The last bytes must be the end of a MSG frame (or a PING).
        k = min(n, flen)
        tail = bytes(mv[n - k:n])
        if tail != frame[flen - k:] and not tail.endswith(PING):
            raise BenchError(f"subscriber: stream does not end with a whole MSG frame: "
                             f"{bytes(mv[max(0, n - 80):n])!r}")
        conn.expect_nothing_more("subscriber")
        return {"t_first": t_first, "t_end": t_end, "bytes": got, "msgs": p["count"],
                "server_pings": pings}
    finally:
        conn.close()


def _read_frame(conn: Conn, mv: memoryview, frame: bytes, what: str) -> None:
    """Read exactly one frame equal to ``frame`` (skipping/answering server
    PINGs in front of it) when at most one frame is in flight."""
    flen = len(frame)
    recv_into = conn.recv_into
    got = 0
    stalls = 0
    for _ in range(1_000_000):
        while got < flen:
            try:
                n = recv_into(mv[got:], flen - got)
            except (BlockingIOError, socket.timeout):
                stalls += 1
                conn.check_deadline(f"waiting for {what}", stalls)
                continue
            except OSError as e:
                raise BenchError(f"socket error waiting for {what}: {e}")
            if n == 0:
                raise BenchError(f"server closed the connection waiting for {what}; "
                                 f"got {bytes(mv[:got])!r}")
            got += n
        if mv[:flen] == frame:
            return
        if mv[:6] == PING:
            mv[:got - 6] = mv[6:got]
            got -= 6
            conn.sendall(PONG, "answering server PING")
            continue
        raise BenchError(f"unexpected data waiting for {what}: {bytes(mv[:flen])[:200]!r}")
    raise BenchError(f"too many PINGs waiting for {what}")


def w_requester(port, p, start_evt, report):
    """p['count'] sequential requests, each waiting for its reply."""
    deadline = time.monotonic() + p["timeout"]
    conn = Conn(port, deadline, abort=p.get("abort"), idle=p.get("idle"),
                transport=p.get("transport"))
    try:
        conn.handshake()
        inbox = p["inbox"]
        conn.subscribe(inbox, "1")
        payload = make_payload(p["size"])
        request = pub_frame(p["subject"], payload, reply=inbox)
        reply = msg_frame(inbox, "1", payload)
        mv = memoryview(bytearray(len(reply)))
        count = p["count"]
        report("ready", None)
        _wait_start(conn, start_evt)
        t0 = time.monotonic()
        for i in range(count):
            conn.sendall(request, "sending a request")
            _read_frame(conn, mv, reply, f"reply {i} of {count}")
            if (i & 255) == 0:
                conn.check_deadline(f"requesting ({i}/{count} round trips done)")
        t1 = time.monotonic()
        conn.expect_nothing_more("requester")
        return {"t0": t0, "t1": t1, "msgs": count, "tls": conn.tls_summary()}
    finally:
        conn.close()


def w_responder(port, p, start_evt, report):
    """Answer p['count'] requests on p['subject'] to their reply subject."""
    deadline = time.monotonic() + p["timeout"]
    conn = Conn(port, deadline, abort=p.get("abort"), idle=p.get("idle"),
                transport=p.get("transport"))
    try:
        conn.handshake()
        conn.subscribe(p["subject"], "2")
        payload = make_payload(p["size"])
        request = msg_frame(p["subject"], "2", payload, reply=p["inbox"])
        answer = pub_frame(p["inbox"], payload)
        mv = memoryview(bytearray(len(request)))
        count = p["count"]
        report("ready", None)
        _wait_start(conn, start_evt)
        for i in range(count):
            _read_frame(conn, mv, request, f"request {i} of {count} (responder)")
            conn.sendall(answer, "sending a reply")
            if (i & 255) == 0:
                conn.check_deadline(f"responding ({i}/{count} requests answered)")
        conn.expect_nothing_more("responder")
        return {"msgs": count}
    finally:
        conn.close()


# --------------------------------------------------------------------------
# JetStream
# --------------------------------------------------------------------------

def _js_api(conn: Conn, subject: str, body: bytes, reply: str, what: str) -> dict:
    """One JetStream API request; returns the decoded JSON response.  Only
    one request is in flight (nats-server answers API requests out of order)
    and nothing but its response may arrive meanwhile."""
    conn.sendall(pub_frame(subject, body, reply=reply), what)
    for _ in range(1000):
        line = conn.readline(what)
        if line == b"PING":
            conn.sendall(PONG, "answering server PING")
            continue
        if line == b"+OK" or line.startswith(b"INFO "):
            continue
        if line.startswith(b"-ERR"):
            raise BenchError(f"server error while {what}: {line.decode(errors='replace')}")
        parts = line.split()
        if len(parts) not in (4, 5) or parts[0] != b"MSG" or not parts[-1].isdigit():
            raise BenchError(f"unexpected line while {what}: {line[:200]!r}")
        payload = conn.read_exact(int(parts[-1]) + 2, what)
        if payload[-2:] != CRLF:
            raise BenchError(f"malformed MSG while {what}: {line[:200]!r}")
        if parts[1].decode(errors="replace") != reply:
            raise BenchError(f"unexpected message while {what}: {line[:200]!r} "
                             f"{payload[:200]!r}")
        try:
            resp = json.loads(payload[:-2])
        except ValueError:
            raise BenchError(f"bad JSON response while {what}: {payload[:300]!r}") from None
        if not isinstance(resp, dict):
            raise BenchError(f"bad response while {what}: {payload[:300]!r}")
        if "error" in resp:
            raise BenchError(f"{what}: JetStream API error {json.dumps(resp['error'])}")
        return resp
    raise BenchError(f"no response while {what}")


def _js_publish(conn: Conn, stream: str, subject: str, prefix: str, payload: bytes,
                count: int, window: int) -> tuple[float, float]:
    """Publish ``count`` messages to ``subject``, message n with reply
    subject ``prefix + str(n)``, keeping at most ``window`` without a PubAck.
    Returns (t0, t1): first send, last ack received.

    Every PubAck is matched to its publish by the reply subject; publish n
    must get exactly one ack ``{"stream": stream, "seq": n + 1}`` (one
    connection, so the stream stores the messages in publish order); an
    error ack, a duplicate, an ack for a message never sent or a wrong seq
    fails the run.  Acks missing for --idle-timeout fail it as well."""
    head = f"PUB {subject} {prefix}".encode()
    tail = f" {len(payload)}\r\n".encode() + payload + CRLF
    # Fast path for the usual ack frame; anything else goes the slow way.
    fast = re.compile(b"MSG " + re.escape(prefix.encode()) + rb"(\d+) 1 (\d+)\r\n"
                      + rb'(\{"stream":"' + re.escape(stream.encode())
                      + rb'","seq":(\d+)\})\r\n').match
    acked = bytearray(count)
    sent = done = 0
    bad_seq = 0
    first_bad = None
    buf = conn.buf

    def ack(n: int, seq: int) -> None:
        nonlocal done, bad_seq, first_bad
        if n >= sent:
            raise BenchError(f"PubAck for publish #{n}, which was never sent "
                             f"({sent} sent)")
        if acked[n]:
            raise BenchError(f"duplicate PubAck for publish #{n} (seq {seq})")
        acked[n] = 1
        done += 1
        if seq != n + 1:
            bad_seq += 1
            if first_bad is None:
                first_bad = (n, seq)

    def slow(line: bytes, body: bytes) -> None:
        parts = line.split()
        subj = parts[1].decode(errors="replace")
        if not subj.startswith(prefix) or not subj[len(prefix):].isdigit():
            raise BenchError(f"unexpected message while publishing: {line[:200]!r} "
                             f"{body[:200]!r}")
        n = int(subj[len(prefix):])
        try:
            a = json.loads(body)
        except ValueError:
            raise BenchError(f"bad PubAck for publish #{n}: {body[:300]!r}") from None
        if not isinstance(a, dict):
            raise BenchError(f"bad PubAck for publish #{n}: {body[:300]!r}")
        if "error" in a:
            raise BenchError(f"publish #{n} rejected: {json.dumps(a['error'])}")
        if a.get("stream") != stream or not isinstance(a.get("seq"), int):
            raise BenchError(f"bad PubAck for publish #{n}: {body[:300]!r}")
        if a.get("duplicate"):
            raise BenchError(f"publish #{n} acked as a duplicate: {body[:300]!r}")
        ack(n, a["seq"])

    t0 = time.monotonic()
    for loops in range(1, 1 << 62):
        if done >= count:
            break
        k = min(window - (sent - done), count - sent)
        if k > 0:
            out = b"".join([b"%s%d%s" % (head, i, tail) for i in range(sent, sent + k)])
            sent += k
            conn.sendall(out, f"publishing ({done}/{count} acked, {sent - done} in flight)")
        if (loops & 63) == 0:
            conn.check_deadline(f"publishing ({done}/{count} acked, {sent - done} in flight)")
        buf += conn.recv_some(f"waiting for PubAcks ({done}/{count} acked, "
                              f"{sent - done} in flight)")
        pos, end = 0, len(buf)
        while pos < end:
            m = fast(buf, pos)
            if m is not None and len(m.group(3)) == int(m.group(2)):
                ack(int(m.group(1)), int(m.group(4)))
                pos = m.end()
                continue
            i = buf.find(CRLF, pos)
            if i < 0:
                if end - pos > 64 * 1024:
                    raise BenchError(f"protocol line too long while publishing: "
                                     f"{bytes(buf[pos:pos + 200])!r}")
                break
            line = bytes(buf[pos:i])
            if line.startswith(b"MSG "):
                parts = line.split()
                if len(parts) not in (4, 5) or not parts[-1].isdigit():
                    raise BenchError(f"malformed MSG while publishing: {line[:200]!r}")
                stop = i + 2 + int(parts[-1])
                if stop + 2 > end:
                    break  # the payload is not complete yet
                if buf[stop:stop + 2] != CRLF:
                    raise BenchError(f"malformed MSG while publishing: {line[:200]!r}")
                slow(line, bytes(buf[i + 2:stop]))
                pos = stop + 2
            elif line == b"PING":
                conn.sendall(PONG, "answering server PING")
                pos = i + 2
            elif line == b"+OK" or line.startswith(b"INFO "):
                pos = i + 2
            elif line.startswith(b"-ERR"):
                raise BenchError(f"server error while publishing ({done}/{count} acked): "
                                 f"{line.decode(errors='replace')}")
            else:
                raise BenchError(f"unexpected line while publishing: {line[:200]!r}")
        del buf[:pos]
    t1 = time.monotonic()
    if bad_seq:
        n, seq = first_bad
        raise BenchError(f"{bad_seq} of {count} PubAcks had a seq other than the publish "
                         f"order (publish #{n} got seq {seq}, expected {n + 1}): the seqs "
                         f"are not 1..N in order")
    if done != count or acked.count(0):
        raise BenchError(f"only {done} of {count} publishes acked")
    return t0, t1


def w_js_publisher(port, p, start_evt, report):
    """Create stream p['stream'] (subjects p['subjects'], storage
    p['storage']), publish p['count'] messages with a PubAck window of
    p['window'] (1 = synchronous), verify acks and the stream state,
    optionally delete the stream (warm-up)."""
    deadline = time.monotonic() + p["timeout"]
    conn = Conn(port, deadline, abort=p.get("abort"), idle=p.get("idle"),
                transport=p.get("transport"))
    try:
        info = conn.handshake()
        if not info.get("jetstream"):
            raise BenchError('the server\'s INFO has no "jetstream":true: JetStream is not '
                             "enabled (was it started with -js -sd DIR?)")
        stream, count = p["stream"], p["count"]
        prefix = p["inbox"] + "."
        conn.subscribe(prefix + "*", "1")
        cfg = {"name": stream, "subjects": [p["subjects"]], "storage": p["storage"]}
        resp = _js_api(conn, f"$JS.API.STREAM.CREATE.{stream}",
                       json.dumps(cfg, separators=(",", ":")).encode(), prefix + "create",
                       f"creating stream {stream}")
        got = resp.get("config") or {}
        if got.get("name") != stream or got.get("storage") != p["storage"]:
            raise BenchError(f"stream create: unexpected config {json.dumps(got)[:300]}")
        state = resp.get("state") or {}
        if state.get("messages") or state.get("last_seq"):
            raise BenchError(f"stream {stream} already holds messages (state "
                             f"{json.dumps(state)}): the store is not fresh")
        payload = make_payload(p["size"])
        report("ready", None)
        _wait_start(conn, start_evt)
        t0, t1 = _js_publish(conn, stream, p["subject"], prefix, payload, count,
                             p["window"])
        resp = _js_api(conn, f"$JS.API.STREAM.INFO.{stream}", b"", prefix + "info",
                       f"checking stream {stream}")
        state = resp.get("state") or {}
        if (state.get("messages"), state.get("first_seq"), state.get("last_seq")) != (
                count, 1, count):
            raise BenchError(f"stream {stream} after {count} acked publishes: state "
                             f"{json.dumps(state)} (expected {count} messages, seqs 1..{count})")
        if p.get("delete"):
            resp = _js_api(conn, f"$JS.API.STREAM.DELETE.{stream}", b"", prefix + "delete",
                           f"deleting stream {stream}")
            if resp.get("success") is not True:
                raise BenchError(f"stream delete failed: {json.dumps(resp)[:300]}")
        conn.expect_nothing_more("JetStream publisher")
        return {"t0": t0, "t1": t1, "msgs": count}
    finally:
        conn.close()


# -- JetStream consumers ----------------------------------------------------

JS_PULL_EXPIRES_NS = 5_000_000_000  # "expires" of every CONSUMER.MSG.NEXT request


def _hdr_status(hdr: bytes) -> tuple[int, str]:
    """(code, text) of a ``NATS/1.0 <code> <text>`` header block; (0, '') if none."""
    first = hdr.split(CRLF, 1)[0].split(None, 2)
    if len(first) >= 2 and first[0] == b"NATS/1.0" and first[1].isdigit():
        return int(first[1]), (first[2].decode(errors="replace") if len(first) > 2 else "")
    return 0, ""


def _js_consume(conn: Conn, stream: str, consumer: str, subject: str, payload: bytes,
                count: int, prefix: str, batch: int = 0,
                deliver: str | None = None) -> dict:
    """Consume ``count`` messages from a fresh consumer and ack each one.

    Pull (``batch`` > 0): one ``CONSUMER.MSG.NEXT`` request at a time, asking
    for ``min(batch, left)`` messages with ``expires`` 5 s and a reply
    subject of its own (``prefix + "p<k>"``, under the ``SUB prefix*``, sid
    1); the next request goes out, together with the last acks, as soon as
    the previous one has been filled (or ended with a 408).
    Push (``deliver``): the consumer waits for interest, so the measured run
    starts with ``SUB <deliver> 2``.

    Every delivery must be ``MSG <subject> <sid> $JS.ACK.<stream>.<consumer>.
    1.<sseq>.<dseq>...`` with the expected payload and sseq = dseq = the
    number of messages delivered so far + 1 (one consumer on a stream holding
    seqs 1..N: in order, no gaps, no duplicates, no redeliveries).  It is
    acked with a plain ``PUB <reply> 4`` ``+ACK`` (no ack reply requested);
    the acks of one read go out in one ``sendall``.  After the last delivery
    ``CONSUMER.INFO`` is polled until the server reports all of them acked
    (``num_ack_pending`` 0, ``ack_floor.stream_seq`` N).
    Returns t0 (first request / SUB sent), t_delivered (last delivery read),
    t1 (ack floor confirmed) and counters."""
    sid = b"1" if batch else b"2"
    subj_b, stream_b, cons_b = subject.encode(), stream.encode(), consumer.encode()
    ack_head = b"$JS.ACK.%s.%s." % (stream_b, cons_b)
    fast = re.compile(b"MSG " + re.escape(subj_b) + b" " + sid + b" ("
                      + re.escape(ack_head) + rb"1\.(\d+)\.(\d+)\.\d+\.\d+) "
                      + b"%d\r\n" % len(payload) + re.escape(payload) + CRLF).match
    api_next = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
    done = 0            # deliveries read (== acks sent after each read)
    req_k = 0           # pull requests sent
    req_left = 0        # messages the open pull request may still deliver
    timeouts = 0        # pull requests that ended with 408 before being filled
    pings = 0
    buf = conn.buf

    def where() -> str:
        return (f"{done}/{count} delivered"
                + (f", pull request #{req_k} open for {req_left} more" if batch else ""))

    def deliver_one(reply: bytes, sseq: int, dseq: int) -> None:
        nonlocal done, req_left
        if batch:
            if req_left <= 0:
                raise BenchError(f"delivery of stream seq {sseq} with no pull request open "
                                 f"({where()})")
            req_left -= 1
        done += 1
        if sseq != done or dseq != done:
            raise BenchError(f"delivery #{done} has stream seq {sseq}, delivery seq {dseq} "
                             f"(expected both {done}): out of order, gap or duplicate")
        acks.append(b"PUB %s 4\r\n+ACK\r\n" % reply)

    def slow(parts: list, hdr: bytes, body: bytes) -> None:
        nonlocal req_left, timeouts
        subj = parts[1].decode(errors="replace")
        reply = parts[3] if len(parts) == (6 if hdr else 5) else b""
        if reply.startswith(b"$JS.ACK."):
            toks = reply.split(b".")
            # v1: $JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<dseq>.<ts>.<pending>
            # v2: $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<dc>... (+ token)
            i = 2 if len(toks) == 9 else 4 if len(toks) >= 11 else -1
            if i < 0 or not all(t.isdigit() for t in toks[i + 2:i + 5]):
                raise BenchError(f"malformed ack subject {reply[:200]!r} ({where()})")
            if (toks[i], toks[i + 1]) != (stream_b, cons_b):
                raise BenchError(f"delivery for another consumer: {reply[:200]!r}")
            dc, sseq, dseq = (int(t) for t in toks[i + 2:i + 5])
            if dc != 1:
                raise BenchError(f"stream seq {sseq} redelivered (delivery count {dc}) "
                                 f"({where()})")
            if subj != subject or parts[2] != sid or body != payload or hdr:
                raise BenchError(f"unexpected delivery (subject, sid, headers or payload): "
                                 f"{b' '.join(parts)[:200]!r} {hdr[:100]!r} {body[:100]!r}")
            deliver_one(reply, sseq, dseq)
            return
        code, text = _hdr_status(hdr) if hdr and not body else (0, "")
        if batch and subj.startswith(prefix + "p") and code:
            k = subj[len(prefix) + 1:]
            if code == 100:
                return  # idle heartbeat (not asked for, harmless)
            if code == 408 and k == str(req_k) and req_left > 0:
                timeouts += 1
                req_left = 0  # the request is over; the loop sends the next one
                return
            raise BenchError(f"pull request #{k}: status {code} {text} "
                             f"(current request #{req_k}; {where()})")
        raise BenchError(f"unexpected message while consuming ({where()}): "
                         f"{b' '.join(parts)[:200]!r} {hdr[:200]!r} {body[:200]!r}")

    acks: list = []
    t0 = time.monotonic()
    if batch:
        out = b""
    else:
        out = f"SUB {deliver} 2\r\n".encode()
    for loops in range(1, 1 << 62):
        if batch and req_left == 0 and done < count:
            req_k += 1
            req_left = min(batch, count - done)
            body = b'{"batch":%d,"expires":%d}' % (req_left, JS_PULL_EXPIRES_NS)
            out += pub_frame(api_next, body, reply=f"{prefix}p{req_k}")
        if out:
            conn.sendall(out, f"acking / requesting ({where()})")
        if done >= count:
            break
        if (loops & 63) == 0:
            conn.check_deadline(f"consuming ({where()})")
        buf += conn.recv_some(f"waiting for deliveries ({where()})")
        pos, end = 0, len(buf)
        while pos < end:
            m = fast(buf, pos)
            if m is not None:
                deliver_one(m.group(1), int(m.group(2)), int(m.group(3)))
                pos = m.end()
                continue
            i = buf.find(CRLF, pos)
            if i < 0:
                if end - pos > 64 * 1024:
                    raise BenchError(f"protocol line too long while consuming: "
                                     f"{bytes(buf[pos:pos + 200])!r}")
                break
            line = bytes(buf[pos:i])
            if line.startswith((b"MSG ", b"HMSG ")):
                parts = line.split()
                hmsg = parts[0] == b"HMSG"
                if (len(parts) not in ((5, 6) if hmsg else (4, 5))
                        or not parts[-1].isdigit() or (hmsg and not parts[-2].isdigit())):
                    raise BenchError(f"malformed message line while consuming: {line[:200]!r}")
                total = int(parts[-1])
                hlen = int(parts[-2]) if hmsg else 0
                stop = i + 2 + total
                if stop + 2 > end:
                    break  # the payload is not complete yet
                if buf[stop:stop + 2] != CRLF or hlen > total:
                    raise BenchError(f"malformed message while consuming: {line[:200]!r}")
                slow(parts, bytes(buf[i + 2:i + 2 + hlen]), bytes(buf[i + 2 + hlen:stop]))
                pos = stop + 2
            elif line == b"PING":
                pings += 1
                acks.append(PONG)
                pos = i + 2
            elif line == b"+OK" or line.startswith(b"INFO "):
                pos = i + 2
            elif line.startswith(b"-ERR"):
                raise BenchError(f"server error while consuming ({where()}): "
                                 f"{line.decode(errors='replace')}")
            else:
                raise BenchError(f"unexpected line while consuming: {line[:200]!r}")
        del buf[:pos]
        out = b"".join(acks)
        acks.clear()
    t_delivered = time.monotonic()

    # Acks are fire-and-forget: wait until the server has applied all of them.
    api_info = f"$JS.API.CONSUMER.INFO.{stream}.{consumer}"
    idle = (conn.idle_slices or 40) * IO_SLICE
    last_floor, t_moved, polls = -1, time.monotonic(), 0
    while True:
        polls += 1
        info = _js_api(conn, api_info, b"", prefix + "cinfo",
                       f"checking consumer {consumer} ({count} delivered and acked)")
        dlv, floor = info.get("delivered") or {}, info.get("ack_floor") or {}
        if (dlv.get("stream_seq"), dlv.get("consumer_seq"), info.get("num_pending"),
                info.get("num_redelivered")) != (count, count, 0, 0):
            raise BenchError(f"consumer {consumer} after {count} deliveries: delivered "
                             f"{json.dumps(dlv)}, num_pending {info.get('num_pending')}, "
                             f"num_redelivered {info.get('num_redelivered')} (expected "
                             f"seqs {count}, 0 pending, 0 redelivered)")
        if info.get("num_ack_pending") == 0 and floor.get("stream_seq") == count:
            if floor.get("consumer_seq") != count:
                raise BenchError(f"consumer {consumer}: ack floor {json.dumps(floor)} "
                                 f"(expected seqs {count})")
            break
        now = time.monotonic()
        if floor.get("stream_seq") != last_floor:
            last_floor, t_moved = floor.get("stream_seq"), now
        elif now - t_moved > idle:
            raise BenchError(f"consumer {consumer}: ack floor stuck at {json.dumps(floor)}, "
                             f"num_ack_pending {info.get('num_ack_pending')} for "
                             f"{idle:.0f}s after all {count} acks were sent")
        conn.check_deadline(f"waiting for the ack floor to reach {count}")
        time.sleep(0.001)
    t1 = time.monotonic()
    return {"t0": t0, "t_delivered": t_delivered, "t1": t1, "msgs": count,
            "pull_requests": req_k, "pull_timeouts": timeouts, "info_polls": polls,
            "server_pings": pings}


def w_js_consumer(port, p, start_evt, report):
    """Consume the p['count'] messages that the set-up run stored in stream
    p['stream'] through a new durable consumer p['consumer'] (pull when
    p['batch'] > 0, else push to a deliver subject), ack every message and
    check the consumer's state; optionally delete the stream (warm-up)."""
    deadline = time.monotonic() + p["timeout"]
    conn = Conn(port, deadline, abort=p.get("abort"), idle=p.get("idle"),
                transport=p.get("transport"))
    try:
        info = conn.handshake()
        if not info.get("jetstream"):
            raise BenchError('the server\'s INFO has no "jetstream":true: JetStream is not '
                             "enabled (was it started with -js -sd DIR?)")
        stream, name, count = p["stream"], p["consumer"], p["count"]
        prefix = p["inbox"] + "."
        conn.subscribe(prefix + "*", "1")
        resp = _js_api(conn, f"$JS.API.STREAM.INFO.{stream}", b"", prefix + "info",
                       f"checking stream {stream}")
        state = resp.get("state") or {}
        if (state.get("messages"), state.get("first_seq"), state.get("last_seq")) != (
                count, 1, count):
            raise BenchError(f"stream {stream} before consuming: state {json.dumps(state)} "
                             f"(expected {count} messages, seqs 1..{count})")
        deliver = None if p["batch"] else f"{p['inbox']}.dlv.{name}"
        cfg = {"durable_name": name, "deliver_policy": "all", "ack_policy": "explicit",
               "max_ack_pending": p["max_ack_pending"]}
        if deliver:
            cfg["deliver_subject"] = deliver
        body = json.dumps({"stream_name": stream, "config": cfg}, separators=(",", ":"))
        resp = _js_api(conn, f"$JS.API.CONSUMER.CREATE.{stream}.{name}", body.encode(),
                       prefix + "ccreate", f"creating consumer {name}")
        got = resp.get("config") or {}
        if (got.get("durable_name"), got.get("ack_policy"), got.get("deliver_subject"),
                got.get("max_ack_pending")) != (name, "explicit", deliver,
                                                p["max_ack_pending"]):
            raise BenchError(f"consumer create: unexpected config {json.dumps(got)[:300]}")
        if resp.get("num_pending") != count or (resp.get("delivered") or {}).get("stream_seq"):
            raise BenchError(f"consumer {name} not fresh: {json.dumps(resp)[:300]}")
        payload = make_payload(p["size"])
        report("ready", None)
        _wait_start(conn, start_evt)
        res = _js_consume(conn, stream, name, p["subject"], payload, count, prefix,
                          batch=p["batch"], deliver=deliver)
        if p.get("delete"):
            resp = _js_api(conn, f"$JS.API.STREAM.DELETE.{stream}", b"", prefix + "delete",
                           f"deleting stream {stream}")
            if resp.get("success") is not True:
                raise BenchError(f"stream delete failed: {json.dumps(resp)[:300]}")
        conn.expect_nothing_more("JetStream consumer")
        return res
    finally:
        conn.close()


WORKERS = {
    "publisher": w_publisher,
    "subscriber": w_subscriber,
    "requester": w_requester,
    "responder": w_responder,
    "js_publisher": w_js_publisher,
    "js_consumer": w_js_consumer,
    "natspy": w_natspy,
}


def _worker_main(kind, wid, port, params, start_evt, abort_evt, q):
    def report(what, payload):
        q.put((what, wid, payload))

    try:
        result = WORKERS[kind](port, dict(params, abort=abort_evt), start_evt, report)
        result["cpu"] = time.thread_time()
        q.put(("done", wid, result))
    except (BenchError, TransportError) as e:
        q.put(("error", wid, f"{kind}#{wid}: {e}"))
    except BaseException as e:  # noqa: BLE001 - report anything, never hang
        q.put(("error", wid, f"{kind}#{wid}: {type(e).__name__}: {e}\n"
                             f"{traceback.format_exc(limit=5)}"))


def run_workers(port: int, specs: list[tuple[str, dict]], mode: str,
                timeout: float, idle: float | None = None,
                transport: dict | None = None) -> list[dict]:
    """Start all workers, wait until all are ready, fire the start signal
    together, and collect their results (in spec order).  ``transport``:
    how every worker connects (see Conn; None: plain TCP).

    Raises BenchError if any worker fails or the whole thing exceeds
    ``timeout`` (+ a small grace period); all workers are always ended.
    """
    if mode == "process":
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
        q = ctx.Queue()
        start_evt, abort_evt = ctx.Event(), ctx.Event()
        make = lambda target, args: ctx.Process(target=target, args=args, daemon=True)  # noqa: E731
    elif mode == "thread":
        q = queue_mod.Queue()
        start_evt, abort_evt = threading.Event(), threading.Event()
        make = lambda target, args: threading.Thread(target=target, args=args, daemon=True)  # noqa: E731
    else:
        raise ValueError(f"unknown worker mode {mode!r}")

    deadline = time.monotonic() + timeout + 5.0
    ok = False
    workers = []
    results: dict[int, dict] = {}
    try:
        for wid, (kind, params) in enumerate(specs):
            params = dict(params, timeout=timeout, idle=idle, transport=transport)
            # A spec may name its own server port (cluster runs: publisher on
            # one node, subscribers on another).
            w = make(_worker_main, (kind, wid, params.get("port", port), params, start_evt,
                                    abort_evt, q))
            w.start()
            workers.append(w)

        def next_msg(stage):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"timeout ({timeout:.0f}s) while {stage}")
            try:
                return q.get(timeout=remaining)
            except queue_mod.Empty:
                raise BenchError(f"timeout ({timeout:.0f}s) while {stage}") from None

        ready = set()
        while len(ready) < len(specs):
            what, wid, payload = next_msg("waiting for workers to connect")
            if what == "error":
                raise BenchError(payload)
            if what == "ready":
                ready.add(wid)
            else:
                raise BenchError(f"worker {wid} finished before start: {payload}")
        start_evt.set()
        while len(results) < len(specs):
            what, wid, payload = next_msg("waiting for workers to finish")
            if what == "error":
                raise BenchError(payload)
            if what == "done":
                results[wid] = payload
        ok = True
        return [results[i] for i in range(len(specs))]
    finally:
        if not ok:
            abort_evt.set()  # workers stop at their next check (<= IO_SLICE)
        start_evt.set()      # release anyone still waiting for the start
        if mode == "process":
            if not ok:
                for w in workers:
                    if w.is_alive():
                        w.terminate()
            for w in workers:
                w.join(timeout=2.0)
                if w.is_alive():
                    w.terminate()
                    w.join(timeout=2.0)
                if w.is_alive():
                    w.kill()
                    w.join(timeout=2.0)
            q.cancel_join_thread()
            q.close()
        else:
            for w in workers:
                w.join(timeout=2.0 * IO_SLICE + 1.0 if not ok else 2.0)
