"""A permessage-deflate bomb on the websocket port, before authentication.

One 70 KB compressed frame inflates to 8,000,000 ``PING``s (48 MB). nats-server
inflates a compressed message to at most max_payload bytes: it parses those,
then closes the connection as a read error ("maximum payload exceeded", no
close frame). natsbroker must do the same, and its memory must not follow the
inflated size.
"""

import time

import pytest
from wsproto.events import BytesMessage, Message
from wsproto.extensions import PerMessageDeflate

from tests.support.raw import dial
from tests.test_websocket import DEADLINE, KINDS, _start, both, connected

CONF = """
websocket {
  port: -1
  no_tls: true
  compression: true
}
"""

# max_payload a multiple of len("PING\r\n"), so a message can fit exactly.
SMALL_CONF = "max_payload: 6144\n" + CONF
PING = b"PING\r\n"
BOMB_PINGS = 8_000_000
MB = 1024 * 1024


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("ws-bomb"))
    out = {}
    try:
        for k in KINDS:
            out[k] = _start(k, CONF, d)
        yield out
    finally:
        for s in out.values():
            s.stop()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("ws-bomb-small"))
    out = {}
    try:
        for k in KINDS:
            out[k] = _start(k, SMALL_CONF, d)
        yield out
    finally:
        for s in out.values():
            s.stop()


def _compressing(port):
    c = connected(port, extensions=[PerMessageDeflate()])
    assert c.accept.extensions, "permessage-deflate not negotiated"
    return c


def _hwm_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _received(c):
    """Everything the server sent in binary frames (PONGs included)."""
    return b"".join(e.data for e in c.events if isinstance(e, BytesMessage))


def _pongs_only(data):
    return data.replace(b"PONG\r\n", b"") == b""


class PlainClient:
    """Another client, on the plain port, connected before the bomb."""

    def __init__(self, port):
        self.sock = dial(port, 60)
        self.sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        assert self._pong()

    def _pong(self):
        got = b""
        while b"PONG\r\n" not in got:
            d = self.sock.recv(65536)
            if not d:
                return False
            got += d
        return True

    def ping_answered(self):
        """Its PING gets a PONG, however long that takes (not timed: the
        machine may be busy)."""
        self.sock.sendall(b"PING\r\n")
        return self._pong()

    def close(self):
        self.sock.close()


def test_bomb_closes_connection_and_memory_stays_bounded(servers):
    bomb = PING * BOMB_PINGS

    def scenario(s):
        other = PlainClient(s.port)
        before = _hwm_kb(s.proc.pid)
        c = _compressing(s.ws_port)
        wire = c.ws.send(Message(data=bomb))  # one compressed frame
        assert len(wire) < 100_000, len(wire)  # ~70 KB on the wire
        c.sock.sendall(wire)
        closes = c.wait_close()
        eof = c.eof
        data = _received(c)
        c.close()
        answered = other.ping_answered()
        other.close()
        grown_mb = (_hwm_kb(s.proc.pid) - before) / 1024
        print("%s: peak RSS grew %.1f MB" % (s.kind, grown_mb))
        assert s.proc.poll() is None
        # Parsed before the close: at most max_payload's worth of PINGs.
        assert data.count(b"PONG\r\n") <= MB // len(PING)
        return closes, eof, _pongs_only(data), grown_mb < 100, answered

    # No close frame (a read error), the socket closed, nothing but PONGs
    # before it; the process did not grow by the inflated size; another
    # client is still answered.
    assert both(servers, scenario) == ([], True, True, True, True)


def test_exact_fit_is_parsed_one_byte_more_closes(small):
    def scenario(s):
        fits = _compressing(s.ws_port)
        fits.send(PING * (6144 // len(PING)))
        fits.wait(lambda: _received(fits).count(b"PONG\r\n") == 1024)
        # Still open: one more PING is answered.
        fits.send(PING)
        fits.wait(lambda: _received(fits).count(b"PONG\r\n") == 1025)
        fit = (_received(fits).count(b"PONG\r\n"), fits.closes(), fits.eof)
        fits.close()

        over = _compressing(s.ws_port)
        over.send(PING * (6144 // len(PING)) + b"P")
        closes = over.wait_close()
        result = (fit, closes, over.eof, _pongs_only(_received(over)))
        over.close()
        return result

    assert both(small, scenario) == ((1025, [], False), [], True, True)


def test_log_names_the_read_error(servers):
    def scenario(s):
        c = _compressing(s.ws_port)
        c.send(PING * (MB // len(PING) + 1))
        c.wait_close()
        c.close()
        until = time.monotonic() + DEADLINE
        while time.monotonic() < until and "maximum payload exceeded" not in s.log():
            time.sleep(0.05)
        return [ln.split(" - ")[-1] for ln in s.log().splitlines() if "maximum payload" in ln][-1:]

    assert both(servers, scenario) == ["read error: maximum payload exceeded"]
