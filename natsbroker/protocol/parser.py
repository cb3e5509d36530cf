"""Sans-IO incremental parser for the NATS text protocol.

Bytes go in through :meth:`Parser.feed`, a list of ops comes out. There is no
Twisted and no socket here, so every edge case is testable with plain bytes.

The grammar follows nats-server's byte-level state machine (server/parser.go)
rather than the prose documents, because clients depend on what the real server
accepts:

* op names are case-insensitive; ``PING``/``PONG``/``+OK`` ignore anything that
  follows them up to the newline (``PINGX`` is a PING);
* a control line ends at ``\\n``; one trailing ``\\r`` is dropped;
* fields are separated by runs of spaces/tabs;
* the argument of a control line (everything after the op name and its
  whitespace) may be at most ``max_control_line`` bytes, checked before the
  newline arrives so that a peer cannot make us buffer without bound;
* a payload size above ``max_payload`` is refused before the payload is read;
* a payload must be followed by exactly ``\\r\\n``.

Ops are plain tuples, first element an ``OP_*`` code, because the PUB path is
hot and tuples are the cheapest record Python has:

====================  =====================================================
``(OP_CONNECT, arg)``  raw JSON bytes
``(OP_PUB, subject, reply, payload)``  reply is ``None`` when absent
``(OP_HPUB, subject, reply, hdr_len, raw)``  raw = header block + payload
``(OP_SUB, subject, queue, sid)``  queue is ``None`` when absent
``(OP_UNSUB, sid, max_msgs)``  max_msgs is ``None`` when absent
``(OP_PING,)`` ``(OP_PONG,)`` ``(OP_OK,)``
``(OP_INFO, arg)`` ``(OP_ERR, arg)``  raw argument bytes
``(OP_MSG, subject, sid, reply, payload)``  only when parsing as a client
``(OP_HMSG, subject, sid, reply, hdr_len, raw)``  only when parsing as a client
``(OP_ERROR, message)``  protocol violation; the last op; ``message`` is the
                        ``-ERR`` text to send, or ``None`` where nats-server
                        closes without one
``(OP_PUBS, subject, reply, payloads)``  only with ``runs=True``: consecutive
                        PUBs with the same control line (subject, reply and
                        size), payloads in order (a list)
====================  =====================================================
"""

import io
import re

OP_CONNECT = 1
OP_PUB = 2
OP_HPUB = 3
OP_SUB = 4
OP_UNSUB = 5
OP_PING = 6
OP_PONG = 7
OP_INFO = 8
OP_OK = 9
OP_ERR = 10
OP_MSG = 11
OP_HMSG = 12
OP_ERROR = 13
OP_PUBS = 14

OP_NAMES = {
    OP_CONNECT: "CONNECT", OP_PUB: "PUB", OP_HPUB: "HPUB", OP_SUB: "SUB",
    OP_UNSUB: "UNSUB", OP_PING: "PING", OP_PONG: "PONG", OP_INFO: "INFO",
    OP_OK: "+OK", OP_ERR: "-ERR", OP_MSG: "MSG", OP_HMSG: "HMSG",
    OP_ERROR: "ERROR", OP_PUBS: "PUB",
}

ERR_UNKNOWN_OP = "Unknown Protocol Operation"
ERR_MAX_CONTROL_LINE = "maximum control line exceeded"
ERR_MAX_PAYLOAD = "Maximum Payload Violation"

MAX_CONTROL_LINE = 4096
MAX_PAYLOAD = 1024 * 1024

# Ops whose text after the name is ignored up to the newline.
_BARE = (OP_PING, OP_PONG, OP_OK)

# (spelling, op) per first letter; the spelling includes the separator the
# state machine requires after the name (None: a bare op).
_SERVER_OPS = {
    b"P": ((b"PUB", OP_PUB), (b"PING", OP_PING), (b"PONG", OP_PONG)),
    b"H": ((b"HPUB", OP_HPUB),),
    b"S": ((b"SUB", OP_SUB),),
    b"U": ((b"UNSUB", OP_UNSUB),),
    b"C": ((b"CONNECT", OP_CONNECT),),
    b"I": ((b"INFO", OP_INFO),),
    b"+": ((b"+OK", OP_OK),),
    b"-": ((b"-ERR", OP_ERR),),
}
_CLIENT_OPS = dict(_SERVER_OPS)
_CLIENT_OPS[b"M"] = ((b"MSG", OP_MSG),)
_CLIENT_OPS[b"H"] = ((b"HMSG", OP_HMSG), (b"HPUB", OP_HPUB))

_WS = b" \t"
# "PUB <subject> [reply] <size>\r\n" with single spaces: the common spelling.
_PUB_FAST = re.compile(rb"PUB ([^ \t\r\n]+) (?:([^ \t\r\n]+) )?(\d+)\r\n").match
_NO_SPACE_ERR = {OP_CONNECT: None, OP_INFO: None}
_NO_LINE = (b"", None, None, 0)


class ProtocolError(Exception):
    """A protocol violation: the connection must close.

    ``message`` is the ``-ERR`` text nats-server sends for it, or ``None``
    where nats-server closes the connection silently.
    """

    def __init__(self, message):
        super().__init__(message)
        self.message = message


class _Incomplete(Exception):
    """More bytes are needed to tell which op this is."""


def _parse_size(field):
    # nats-server accepts only ASCII digits; anything else is a parse error.
    if not field.isdigit():
        raise ProtocolError(None)
    return int(field)


class Parser:
    """Incremental parser: ``feed(bytes) -> [op, ...]``.

    ``client=True`` parses what a server sends (MSG/HMSG, INFO, +OK, -ERR),
    for test clients and the benchmark; the default parses what a client sends.
    ``runs=True`` hands out PUBs that repeat their control line as one
    ``OP_PUBS`` op (a consumer then checks and routes the subject once per
    run instead of once per message). After an ``OP_ERROR`` the parser is
    dead and ignores further input.
    """

    def __init__(self, max_control_line=MAX_CONTROL_LINE,
                 max_payload=MAX_PAYLOAD, client=False, runs=False):
        self.max_control_line = max_control_line
        self.max_payload = max_payload
        self.runs = runs
        self._ops = _CLIENT_OPS if client else _SERVER_OPS
        self._client = client
        self._buf = b""
        # A payload still arriving over several reads (see _start_body), and
        # the length (payload + CRLF) that completes it.
        self._body = None
        self._need = 0
        # A parsed header waiting for its payload: (op tuple prefix, size).
        self._pending = None
        # A bare op (PING...) whose line is still open: its tail is dropped.
        self._skipping = None
        # The last PUB control line the fast path took: (line, subject,
        # reply, size); b"" for none.
        self._pub_line = _NO_LINE
        self.dead = False

    def feed(self, data):
        """Parse ``data`` and return the list of complete ops it finishes."""
        if self.dead:
            return []
        ops = []
        if self._body is not None:
            data = self._collect(data, ops)
            if not data:
                return ops
        buf = self._buf + data if self._buf else data
        pos = 0
        n = len(buf)
        if self._skipping is not None:
            # A bare op whose line was still open: drop up to the newline.
            nl = buf.find(b"\n")
            if nl < 0:
                self._buf = b""
                return ops
            ops.append((self._skipping,))
            self._skipping = None
            pos = nl + 1
        append = ops.append
        pub_fast = _PUB_FAST
        max_payload = self.max_payload
        mcl = self.max_control_line
        # The last PUB control line taken by the fast path, and what it said:
        # a publisher mostly repeats its line (same subject, same size), and
        # comparing bytes is far cheaper than the regex. The limits may have
        # changed since it was parsed (a JWT user's max_payload).
        line, subject, reply, size = self._pub_line
        ll = len(line)
        if ll and (size > max_payload or ll - 6 > mcl):
            line, subject, reply, size = _NO_LINE
            ll = 0
        runs = self.runs
        # The payload list of the OP_PUBS op that ends ``ops``, while the
        # PUBs go on repeating its line (None: the last op is another).
        run = None
        try:
            while pos < n:
                if ll and buf.startswith(line, pos):
                    start = pos + ll
                    if runs:
                        stop = start + size
                        if stop + 2 > n:
                            self._pending = ((OP_PUB, subject, reply), size)
                            pos = start
                            break
                        if buf[stop] != 13 or buf[stop + 1] != 10:
                            raise ProtocolError(ERR_UNKNOWN_OP)
                        if run is None:
                            run = [buf[start:stop]]
                            append((OP_PUBS, subject, reply, run))
                        else:
                            run.append(buf[start:stop])
                        pos = stop + 2
                        continue
                else:
                    run = None
                    m = pub_fast(buf, pos)
                    start = 0
                    if m is not None:
                        # Fast path for the most common op, spelled the usual
                        # way; anything unusual takes the general path below.
                        sub_, rep_, sz = m.groups()
                        sz = int(sz)
                        start = m.end()
                        if sz <= max_payload and start - pos - 6 <= mcl:
                            # The line is kept for comparing only once it
                            # repeats: where every line differs, keeping it
                            # would cost more than it saves.
                            if sz == size and sub_ == subject and rep_ == reply:
                                line = buf[pos:start]
                                ll = start - pos
                            else:
                                ll = 0
                            subject = sub_
                            reply = rep_
                            size = sz
                        else:
                            start = 0
                if start:
                    stop = start + size
                    if stop + 2 > n:
                        self._pending = ((OP_PUB, subject, reply), size)
                        pos = start
                        break
                    if buf[stop] != 13 or buf[stop + 1] != 10:
                        raise ProtocolError(ERR_UNKNOWN_OP)
                    append((OP_PUB, subject, reply, buf[start:stop]))
                    pos = stop + 2
                    continue
                nl = buf.find(b"\n", pos)
                if nl < 0:
                    self._check_partial(buf, pos, n)
                    break
                end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
                op = self._line(buf, pos, end)
                pos = nl + 1
                if op is not None:
                    append(op)
                    continue
                # A header (PUB, HPUB, or MSG/HMSG as a client) waits for
                # its payload.
                head, sz = self._pending
                stop = pos + sz
                if n < stop + 2:
                    break
                if buf[stop] != 13 or buf[stop + 1] != 10:
                    raise ProtocolError(ERR_UNKNOWN_OP)
                append(head + (buf[pos:stop],))
                self._pending = None
                pos = stop + 2
        except ProtocolError as e:
            self._pub_line = _NO_LINE
            self.dead = True
            self._buf = b""
            self._pending = None
            ops.append((OP_ERROR, e.message))
            return ops
        self._pub_line = (line if ll else b"", subject, reply, size)
        if self._pending is not None:
            # Waiting for more of a payload: collect it until it is whole.
            self._start_body(self._pending[1] + 2, memoryview(buf)[pos:] if pos else buf)
            self._buf = b""
        else:
            self._buf = buf[pos:] if pos < n else b""
        return ops

    @property
    def payload_wanted(self):
        """Bytes still missing from the payload being collected (with its
        CRLF), 0 when none is: a hint for how much the caller may read at once."""
        if self._body is None:
            return 0
        return self._need - self._body.tell()

    def _start_body(self, need, data):
        # The payload is copied once, a read at a time, into a buffer of its
        # final size that becomes the payload itself: no join at the end (a
        # second copy, all at once, that holds the reactor for tens of ms at
        # 60 MiB), and no growing buffer (realloc copies it, as well). A
        # BytesIO made from a bytes object of its own alone writes into it in
        # place, and getvalue() hands that object over. bytes(n) is calloc'd,
        # so its pages are touched as the data comes, not now.
        self._body = io.BytesIO(bytes(need))
        self._body.write(data)
        self._need = need

    def _collect(self, data, ops):
        """Add ``data`` to the payload being collected; once it is whole,
        append its op to ``ops``. Returns the bytes that follow it."""
        body = self._body
        room = self._need - body.tell()
        if len(data) < room:
            body.write(data)
            return b""
        body.write(memoryview(data)[:room] if len(data) > room else data)
        self._body = None
        size = self._need - 2
        body.seek(size)
        if body.read(2) != b"\r\n":
            self.dead = True
            ops.append((OP_ERROR, ERR_UNKNOWN_OP))
            return b""
        # Dropping the CRLF shrinks the buffer in place; getvalue() then
        # returns that buffer itself.
        body.truncate(size)
        ops.append(self._pending[0] + (body.getvalue(),))
        self._pending = None
        return data[room:]

    def _op_at(self, buf, pos, end, complete):
        """Identify the op starting at ``pos``: ``(op, arg_start)``.

        Mirrors the state machine: a wrong byte anywhere in the name is an
        unknown op at once, even before the newline arrives.
        """
        first = buf[pos:pos + 1].upper()
        for spelling, op in self._ops.get(first, ()):
            ln = len(spelling)
            got = buf[pos:min(pos + ln, end)].upper()
            if got != spelling[:len(got)]:
                continue
            if len(got) < ln:
                if complete:
                    continue
                raise _Incomplete()
            if op in _BARE:
                return op, pos + ln
            # Ops with arguments need whitespace after the name; nats-server
            # says nothing when CONNECT or INFO lack it, and calls it an
            # unknown op otherwise.
            if pos + ln >= end:
                if not complete:
                    raise _Incomplete()
                raise ProtocolError(_NO_SPACE_ERR.get(op, ERR_UNKNOWN_OP))
            if buf[pos + ln] not in _WS:
                raise ProtocolError(_NO_SPACE_ERR.get(op, ERR_UNKNOWN_OP))
            a = pos + ln
            while a < end and buf[a] in _WS:
                a += 1
            return op, a
        # A name that is a proper prefix of some op but cut short by the line
        # end, or no op at all.
        raise ProtocolError(ERR_UNKNOWN_OP)

    def _check_partial(self, buf, pos, n):
        """No newline yet: refuse junk and over-long lines early."""
        try:
            op, a = self._op_at(buf, pos, n, complete=False)
        except _Incomplete:
            return
        if op in _BARE:
            # nats-server stays in the PING state without storing the tail.
            self._skipping = op
            return
        arglen = n - a
        if arglen and buf[n - 1] == 13:
            arglen -= 1
        if arglen > self.max_control_line:
            raise ProtocolError(ERR_MAX_CONTROL_LINE)

    def _line(self, buf, pos, end):
        op, a = self._op_at(buf, pos, end, complete=True)
        if op in _BARE:
            return (op,)
        if end - a > self.max_control_line:
            raise ProtocolError(ERR_MAX_CONTROL_LINE)
        arg = buf[a:end]
        if op == OP_PUB:
            f = arg.split()
            if len(f) == 2:
                subject, reply, size = f[0], None, f[1]
            elif len(f) == 3:
                subject, reply, size = f
            else:
                raise ProtocolError(None)
            size = _parse_size(size)
            if size > self.max_payload:
                raise ProtocolError(ERR_MAX_PAYLOAD)
            self._pending = ((OP_PUB, subject, reply), size)
            return None
        if op == OP_HPUB:
            f = arg.split()
            if len(f) == 3:
                subject, reply, hdr, size = f[0], None, f[1], f[2]
            elif len(f) == 4:
                subject, reply, hdr, size = f
            else:
                raise ProtocolError(None)
            hdr = _parse_size(hdr)
            size = _parse_size(size)
            if hdr > size:
                raise ProtocolError(None)
            if size > self.max_payload:
                raise ProtocolError(ERR_MAX_PAYLOAD)
            self._pending = ((OP_HPUB, subject, reply, hdr), size)
            return None
        if op == OP_SUB:
            f = arg.split()
            if len(f) == 2:
                return (OP_SUB, f[0], None, f[1])
            if len(f) == 3:
                return (OP_SUB, f[0], f[1], f[2])
            raise ProtocolError(None)
        if op == OP_UNSUB:
            f = arg.split()
            if len(f) == 1:
                return (OP_UNSUB, f[0], None)
            if len(f) == 2:
                # A non-numeric max is ignored, as nats-server does.
                mx = int(f[1]) if f[1].isdigit() else None
                return (OP_UNSUB, f[0], mx)
            raise ProtocolError(None)
        if op == OP_CONNECT or op == OP_INFO or op == OP_ERR:
            return (op, arg)
        if op == OP_MSG:
            f = arg.split()
            if len(f) == 3:
                subject, sid, reply, size = f[0], f[1], None, f[2]
            elif len(f) == 4:
                subject, sid, reply, size = f
            else:
                raise ProtocolError(None)
            self._pending = ((OP_MSG, subject, sid, reply), _parse_size(size))
            return None
        if op == OP_HMSG:
            f = arg.split()
            if len(f) == 4:
                subject, sid, reply, hdr, size = f[0], f[1], None, f[2], f[3]
            elif len(f) == 5:
                subject, sid, reply, hdr, size = f
            else:
                raise ProtocolError(None)
            self._pending = ((OP_HMSG, subject, sid, reply, _parse_size(hdr)),
                             _parse_size(size))
            return None
        raise ProtocolError(ERR_UNKNOWN_OP)  # pragma: no cover - table bug
