"""Raw-socket NATS clients: the bytes a test sends are the bytes on the wire.

``dial`` opens the TCP connection; ``Conversation`` sends bytes and reads until
PONG, EOF or a timeout; ``Wire`` reads lines and exact MSG/HMSG frames with
deadlines; ``Raw`` is a ``Wire`` that has connected and seen its PONG.
"""

import json
import socket
import time
from collections import namedtuple


def dial(port, timeout=10.0, rcvbuf=None, nodelay=False):
    """A TCP connection to ``port`` on 127.0.0.1. ``rcvbuf`` is set before
    connecting, so the window stays small and the server's output backs up."""
    sock = socket.socket()
    try:
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(timeout)
        sock.connect(("127.0.0.1", port))
        if nodelay:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        sock.close()
        raise
    return sock


class Closed(ConnectionError, EOFError):
    """The server closed the connection."""


class Conversation:
    def __init__(self, port, timeout=10.0):
        self.sock = dial(port, timeout)
        self.timeout = timeout
        self.buf = b""
        self.closed = False
        self.info = self.read_line()

    def read_line(self):
        while b"\r\n" not in self.buf:
            if not self._recv(self.timeout):
                break
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _recv(self, timeout):
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.closed = True
            return False
        self.buf += data
        return True

    def send(self, data):
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            self.closed = True

    def read_until(self, marker=b"PONG\r\n", quiet=2.0, limit=10.0):
        """Read until the buffer ends with ``marker``, EOF, or ``quiet`` s of silence.

        The marker (or EOF) normally ends the wait; ``quiet`` only decides when
        nothing more is coming, so it is long enough for a CPU stall on a busy
        machine not to pass for silence.
        """
        return self._read(lambda buf: marker and buf.endswith(marker), quiet, limit)

    def read_pongs(self, pings, quiet=2.0, info=False, limit=10.0):
        """Read until there is a PONG for each of ``pings`` PINGs, EOF or
        ``quiet`` s of silence; with ``info``, until the INFO that confirms a
        protocol-1 CONNECT after the first PONG has come too.

        A PONG can arrive on its own before the rest of a reply: a server
        answers a PING sent with a CONNECT held for an auth callout at once,
        and nats-server writes the first PONG before it takes the lock under
        which it queues that INFO. Ending at a PONG that ends the buffer
        would cut the reply wherever the machine was busy."""
        return self._read(lambda buf: self._answered(buf, pings, info), quiet, limit)

    def _read(self, done, quiet, limit):
        """Read until ``done(buffer)``, EOF, ``quiet`` s of silence or ``limit``
        s in all; what was read."""
        end = time.time() + limit
        while time.time() < end and not self.closed:
            if done(self.buf):
                break
            if not self._recv(quiet):
                break
        out, self.buf = self.buf, b""
        return out

    @staticmethod
    def _answered(buf, pings, info):
        if buf.count(b"PONG\r\n") < pings:
            return False
        if not info:
            return buf.endswith(b"PONG\r\n")
        after = buf.partition(b"PONG\r\n")[2]
        return buf.endswith(b"\r\n") and any(
            line.startswith(b"INFO ") for line in after.split(b"\r\n"))

    def close(self):
        self.sock.close()


def exchange(port, data, chunks=None, marker=b"PONG\r\n", quiet=1.0):
    """Send ``data`` (or ``chunks``), return ``(reply_bytes, closed)``, INFO excluded.

    ``quiet`` (when neither the marker nor a close ends the reply) is 1 s: a
    slow reply is not taken for silence, and the servers' first PING, 2 s
    after the connect, is not taken for part of the reply.
    """
    c = Conversation(port)
    try:
        for chunk in chunks or [data]:
            c.send(chunk)
            if chunks:
                time.sleep(0.02)
        out = c.read_until(marker, quiet=quiet)
        if not c.closed:
            # Short reads until silence tell a close (or more output, like an
            # -ERR sent after the PONG in its own segment) from an open
            # connection.
            while c._recv(0.1):
                pass
            out += c.buf
        return out, c.closed
    finally:
        c.close()


# -- a client that reads exact MSG/HMSG frames ---------------------------------

Frame = namedtuple("Frame", "subject sid reply header payload")


class Wire:
    """A raw connection read by lines and exact frames, each read bounded by a
    deadline: ``None`` when it passes, :class:`Closed` when the server closes."""

    def __init__(self, port=None, timeout=10.0, info=True, sock=None, **dial_options):
        self.sock = sock if sock is not None else dial(port, timeout, **dial_options)
        self.buf = b""
        # The INFO line, as sent.
        self.info_line = self._line() if info else None

    @property
    def info(self):
        """The INFO's JSON."""
        return json.loads(self.info_line[5:])

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            return False
        if not data:
            raise Closed("server closed the connection")
        self.buf += data
        return True

    def _line(self, deadline=None):
        deadline = deadline or time.monotonic() + 10
        while b"\r\n" not in self.buf:
            if not self._fill(deadline):
                return None
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _need(self, n, deadline):
        while len(self.buf) < n:
            if not self._fill(deadline):
                return False
        return True

    def read_line(self, limit=10.0):
        """The next line (without CRLF); AssertionError if none comes in ``limit`` s."""
        line = self._line(time.monotonic() + limit)
        assert line is not None, "no line in %gs after %r" % (limit, self.buf)
        return line

    def read_until(self, done=b"PONG\r\n", limit=10.0, strict=True):
        """Everything read until ``done`` (bytes to be found in what was read,
        or a predicate on it) holds, or the server closes; the buffer is left
        empty. If ``limit`` s pass first: AssertionError, or (``strict`` false)
        what was read."""
        if not callable(done):
            marker = done
            done = lambda buf: marker in buf  # noqa: E731
        deadline = time.monotonic() + limit
        try:
            while not done(self.buf):
                if not self._fill(deadline):
                    assert not strict, "not done in %gs: %r" % (limit, self.buf)
                    break
        except Closed:
            pass
        out, self.buf = self.buf, b""
        return out

    def exact(self, n, deadline=None):
        """The next ``n`` bytes, or None at the deadline."""
        if not self._need(n, deadline or time.monotonic() + 10):
            return None
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def frame_after(self, line, deadline):
        """The :class:`Frame` that the MSG/HMSG ``line`` announces."""
        parts = line.split(b" ")
        if parts[0] == b"MSG":
            reply = parts[3] if len(parts) == 5 else None
            hlen, tlen = 0, int(parts[-1])
        elif parts[0] == b"HMSG":
            reply = parts[3] if len(parts) == 6 else None
            hlen, tlen = int(parts[-2]), int(parts[-1])
        else:
            raise AssertionError("unexpected line %r" % line)
        if not self._need(tlen + 2, deadline):
            raise AssertionError("truncated frame after %r" % line)
        body, self.buf = self.buf[:tlen], self.buf[tlen + 2:]
        return Frame(parts[1].decode(), int(parts[2]), reply.decode() if reply else None,
                     body[:hlen], body[hlen:])


class Raw(Wire):
    """A bare client connection: exact MSG/HMSG frames, header bytes included.
    ``connect`` is what it sends first; then a PING, and it waits for the PONG."""

    CONNECT = (b'CONNECT {"verbose":false,"pedantic":false,"headers":true,'
               b'"no_responders":true,"protocol":1}\r\nPING\r\n')

    def __init__(self, port, timeout=5.0, connect=CONNECT):
        super().__init__(port, timeout)
        self.send(connect)
        self.wait_pong()

    def sub(self, subject, sid):
        self.send(b"SUB %s %d\r\n" % (subject.encode(), sid))

    def pub(self, subject, body=b"", reply=None):
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        r = b" " + reply.encode() if reply else b""
        self.send(b"PUB %s%s %d\r\n%s\r\n" % (subject.encode(), r, len(body), body))

    def wait_pong(self, limit=10.0):
        """Frames received before the PONG answering a fresh PING."""
        self.send(b"PING\r\n")
        return self.frames(until=None, limit=limit, stop_at_pong=True)

    def frames(self, until=None, limit=10.0, stop_at_pong=False):
        """Read frames until ``until(frames)`` is true, a PONG (if asked) or ``limit`` s."""
        deadline = time.monotonic() + limit
        out = []
        while True:
            if until is not None and until(out):
                return out
            line = self._line(deadline)
            if line is None:
                return out
            if line == b"PONG":
                if stop_at_pong:
                    return out
                continue
            if line == b"PING":
                self.send(b"PONG\r\n")
                continue
            if line.startswith((b"+OK", b"INFO")):
                continue
            if line.startswith(b"-ERR"):
                raise AssertionError(line)
            out.append(self.frame_after(line, deadline + 5))


def count(n, pred=lambda f: True):
    return lambda frames: sum(1 for f in frames if pred(f)) >= n
