"""Sans-IO incremental parser for the route protocol (server to server).

Bytes go in through :meth:`RouteParser.feed`, ops come out; no Twisted, no
sockets. The grammar is what nats-server 2.10-2.15 speaks on a route without
a pool (every interest and message line carries its account), as read in
``server/parser.go`` / ``route.go`` and checked on the wire
(/work/shared/reference/cluster-routes.md):

* op names are case-insensitive; a control line ends at ``\\n`` (one ``\\r``
  before it is dropped); fields are separated by runs of spaces/tabs;
* ``INFO`` may end with ``" \\r\\n"`` (initial INFO) or ``"\\r\\n"`` (gossip);
* a control line may be 16 x the client limit (64 KiB by default) and there
  is no payload limit on a route (nats-server sets ``mpay=-1``);
* any argument error closes the route without ``-ERR`` (nats-server's
  "Protocol Violation"); an unknown op gets ``-ERR 'Unknown Protocol
  Operation'``.

Ops are tuples, first element an ``OP_*`` code:

=======================================================  ======================================
``(OP_INFO, arg)`` ``(OP_CONNECT, arg)`` ``(OP_ERR, arg)``  raw argument bytes
``(OP_PING,)`` ``(OP_PONG,)`` ``(OP_OK,)``
``(OP_RSUB, origin, account, subject, queue, weight)``      RS+ (origin None) and LS+;
                                                            queue None: weight 0
``(OP_RUNSUB, origin, account, subject, queue)``            RS- and LS- (origin None when absent)
``(OP_RMSG, origin, account, subject, reply, queues,        RMSG (hdr_len 0), HMSG, LMSG;
hdr_len, raw)``                                             queues: tuple (empty: none listed)
``(OP_ERROR, message)``                                     the last op: close, with ``-ERR
                                                            message`` unless it is None
=======================================================  ======================================
"""

import re

OP_INFO = 1
OP_CONNECT = 2
OP_PING = 3
OP_PONG = 4
OP_OK = 5
OP_ERR = 6
OP_RSUB = 7
OP_RUNSUB = 8
OP_RMSG = 9
OP_ERROR = 10

OP_NAMES = {
    OP_INFO: "INFO", OP_CONNECT: "CONNECT", OP_PING: "PING", OP_PONG: "PONG",
    OP_OK: "+OK", OP_ERR: "-ERR", OP_RSUB: "RS+", OP_RUNSUB: "RS-", OP_RMSG: "RMSG",
    OP_ERROR: "ERROR",
}

ERR_UNKNOWN_OP = "Unknown Protocol Operation"
ERR_MAX_CONTROL_LINE = "maximum control line exceeded"

# 16 x nats-server's default max_control_line (4 KiB).
MAX_CONTROL_LINE = 64 * 1024

# Op names (upper case) -> code; the kind of line each one is.
_NAMES = {
    b"INFO": OP_INFO, b"CONNECT": OP_CONNECT, b"PING": OP_PING, b"PONG": OP_PONG,
    b"+OK": OP_OK, b"-ERR": OP_ERR, b"RS+": b"RS+", b"RS-": b"RS-", b"LS+": b"LS+",
    b"LS-": b"LS-", b"RMSG": b"RMSG", b"HMSG": b"HMSG", b"LMSG": b"LMSG",
}
_LONGEST = max(len(n) for n in _NAMES)
_BARE = (OP_PING, OP_PONG, OP_OK)


# "RMSG <account> <subject> [<reply>] <size>\r\n" exactly as nats-server writes
# it (upper case, single spaces, a reply that is not a queue indicator, digits):
# anything else (HMSG, LMSG, queues, odd spacing or case) takes the general path.
_RMSG_FAST = re.compile(rb"RMSG ([^ \t\r\n]+) ([^ \t\r\n]+) (?:([^ \t\r\n+|]"
                        rb"[^ \t\r\n]*) )?([0-9]{1,15})\r\n").match


class RouteProtocolError(Exception):
    """The route must close; ``message`` is the -ERR text or None (silent)."""

    def __init__(self, message=None):
        super().__init__(message)
        self.message = message


def _size(field):
    # nats-server's parseSize: ASCII digits only.
    if not field.isdigit():
        raise RouteProtocolError(None)
    return int(field)


# nats-server's parseSize reads at most 9 digits (a longer number is -1).
MAX_WEIGHT_DIGITS = 9


def _weight(field):
    # nats-server takes parseSize's answer as is (-1 for junk or more than 9
    # digits, which then adds no member); a weight below 1 counts as no
    # member here too.
    return int(field) if field.isdigit() and len(field) <= MAX_WEIGHT_DIGITS else 0


def parse_msg_args(args, headers):
    """processRoutedMsgArgs / processRoutedHeaderMsgArgs on the fields after
    the origin (LMSG) or the op name: ``(account, subject, reply, queues,
    hdr_len, size)``. ``RMSG acc subj [reply] size``, ``... + reply q.. size``,
    ``... | q.. size``; HMSG has ``hdr_len`` before the size."""
    n = len(args)
    tail = 2 if headers else 1
    if n < 2 + tail:
        raise RouteProtocolError(None)
    queues = ()
    if n == 2 + tail:
        reply = None
    elif n == 3 + tail:
        reply = args[2]
    else:
        ind = args[2]
        if ind == b"+":
            reply = args[3]
            queues = tuple(args[4:n - tail])
        elif ind == b"|":
            reply = None
            queues = tuple(args[3:n - tail])
        else:
            # "RMSG $G foo x y 2": a bad reply indicator closes the route.
            raise RouteProtocolError(None)
    size = _size(args[-1])
    hdr_len = _size(args[-2]) if headers else 0
    if hdr_len > size:
        raise RouteProtocolError(None)
    return args[0], args[1], reply, queues, hdr_len, size


class RouteParser:
    """Incremental route parser: ``feed(bytes) -> [op, ...]``.

    After an ``OP_ERROR`` the parser is dead and ignores further input."""

    def __init__(self, max_control_line=MAX_CONTROL_LINE):
        self.max_control_line = max_control_line
        self._buf = b""
        # A message line waiting for its payload: (op prefix, size, hdr_len),
        # and the payload's pieces received so far.
        self._pending = None
        self._chunks = []
        self._have = 0
        self.dead = False

    def feed(self, data):
        if self.dead:
            return []
        ops = []
        try:
            self._feed(data, ops)
        except RouteProtocolError as e:
            self.dead = True
            self._buf = b""
            self._chunks = []
            ops.append((OP_ERROR, e.message))
        return ops

    def _feed(self, data, ops):
        if self._pending is not None:
            data = self._collect(data, ops)
            if self._pending is not None:
                return
        buf = self._buf + data if self._buf else data
        pos = 0
        n = len(buf)
        rmsg = _RMSG_FAST
        while pos < n:
            # The common line, "RMSG acc subject [reply] size", whose payload
            # is all here: one regex match and one slice, no copy of the rest
            # of the read (a read carries hundreds of messages).
            m = rmsg(buf, pos)
            if m is not None and m.end() - pos <= self.max_control_line:
                acc, subject, reply, size = m.groups()
                size = int(size)
                start = m.end()
                end = start + size
                if end + 2 <= n:
                    if buf[end:end + 2] != b"\r\n":
                        raise RouteProtocolError(None)
                    ops.append((OP_RMSG, None, acc, subject, reply, (), 0, buf[start:end]))
                    pos = end + 2
                    continue
            nl = buf.find(b"\n", pos)
            if nl < 0:
                self._check_partial(buf, pos, n)
                break
            end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
            self._line(buf[pos:end], ops)
            pos = nl + 1
            if self._pending is not None:
                head, size, hdr_len = self._pending
                if pos + size + 2 <= n:
                    # The payload is all here: take it in place.
                    if buf[pos + size:pos + size + 2] != b"\r\n":
                        raise RouteProtocolError(None)
                    ops.append(head + (hdr_len, buf[pos:pos + size]))
                    self._pending = None
                    pos += size + 2
                    continue
                # It continues in later reads.
                self._collect(buf[pos:], ops)
                self._buf = b""
                return
        self._buf = buf[pos:] if pos < n else b""

    def _collect(self, data, ops):
        """Add to the payload being collected; once whole (with its CRLF),
        emit the message. Returns the bytes after it."""
        head, size, hdr_len = self._pending
        need = size + 2 - self._have
        if len(data) < need:
            if data:
                self._chunks.append(data)
                self._have += len(data)
            return b""
        self._chunks.append(data[:need])
        whole = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
        self._chunks = []
        self._have = 0
        self._pending = None
        if whole[size:size + 2] != b"\r\n":
            raise RouteProtocolError(None)
        ops.append(head + (hdr_len, whole[:size]))
        return data[need:]

    def _name(self, line):
        """(op, rest) for a complete line."""
        i = 0
        n = len(line)
        while i < n and line[i] not in b" \t":
            i += 1
        name = line[:i].upper()
        op = _NAMES.get(name)
        if op is None:
            # PINGX is a PING for nats-server's state machine (the tail is
            # skipped): bare ops by prefix.
            for bare, code in ((b"PING", OP_PING), (b"PONG", OP_PONG), (b"+OK", OP_OK)):
                if name.startswith(bare):
                    return code, b""
            raise RouteProtocolError(ERR_UNKNOWN_OP)
        return op, line[i:].lstrip(b" \t")

    def _check_partial(self, buf, pos, n):
        # No newline yet: refuse junk and an over-long line before it ends.
        head = buf[pos:pos + _LONGEST + 1].upper()
        if head and head[:1] not in b"\r\n \t" and not any(name.startswith(head[:len(name)]) or head.startswith(name)
                            for name in _NAMES):
            raise RouteProtocolError(ERR_UNKNOWN_OP)
        if n - pos > self.max_control_line + _LONGEST + 2:
            raise RouteProtocolError(ERR_MAX_CONTROL_LINE)

    def _line(self, line, ops):
        if not line.strip():
            return  # an empty line (a stray CRLF): nothing
        op, arg = self._name(line)
        if op in _BARE:
            ops.append((op,))
            return
        if len(arg) > self.max_control_line:
            raise RouteProtocolError(ERR_MAX_CONTROL_LINE)
        if op in (OP_INFO, OP_CONNECT, OP_ERR):
            if not arg and op != OP_ERR:
                raise RouteProtocolError(None)
            ops.append((op, arg.rstrip(b" \t")))
            return
        f = arg.split()
        if op == b"RS+" or op == b"LS+":
            origin = None
            if op == b"LS+":
                if not f:
                    raise RouteProtocolError(None)
                origin, f = f[0], f[1:]
            if len(f) == 2:
                ops.append((OP_RSUB, origin, f[0], f[1], None, 0))
            elif len(f) == 4:
                ops.append((OP_RSUB, origin, f[0], f[1], f[2], _weight(f[3])))
            else:
                # "RS+ $G foo q1": a queue without a weight.
                raise RouteProtocolError(None)
            return
        if op == b"RS-" or op == b"LS-":
            # LS- carries the origin only to a peer that said lnocu in its
            # INFO; we do not (no leaf nodes here), so it never does.
            origin = None
            if len(f) == 2:
                ops.append((OP_RUNSUB, origin, f[0], f[1], None))
            elif len(f) == 3:
                ops.append((OP_RUNSUB, origin, f[0], f[1], f[2]))
            else:
                raise RouteProtocolError(None)
            return
        origin = None
        if op == b"LMSG":
            if not f:
                raise RouteProtocolError(None)
            origin, f = f[0], f[1:]
        acc, subject, reply, queues, hdr_len, size = parse_msg_args(f, op != b"RMSG")
        self._pending = ((OP_RMSG, origin, acc, subject, reply, queues), size, hdr_len)
