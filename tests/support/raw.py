"""A raw-socket NATS conversation: send bytes, read until PONG, EOF or a timeout."""

import socket
import time


class Conversation:
    def __init__(self, port, timeout=2.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
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

    def read_until(self, marker=b"PONG\r\n", quiet=0.3, limit=5.0):
        """Read until the buffer ends with ``marker``, EOF, or ``quiet`` s of silence."""
        end = time.time() + limit
        while time.time() < end and not self.closed:
            if marker and self.buf.endswith(marker):
                break
            if not self._recv(quiet):
                break
        out, self.buf = self.buf, b""
        return out

    def close(self):
        self.sock.close()


def exchange(port, data, chunks=None, marker=b"PONG\r\n", quiet=0.3):
    """Send ``data`` (or ``chunks``), return ``(reply_bytes, closed)``, INFO excluded."""
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
