"""Large messages through the large-message path, byte for byte.

A payload that spans reads is collected into a buffer of its final size
(parser), a connection reads up to LARGE_IO at once while one arrives, and a
payload of LARGE_PAYLOAD or more is written as a piece of its own, held back
while the subscriber's transport still holds output (client). The sizes here
sit on either side of those thresholds and of Twisted's 64 KiB read; the
messages go with and without headers, to a subscriber with two matching
subscriptions (so a flush carries the same large payload twice), over plain
TCP and TLS, against nats-server as well as natsbroker.
"""

import json
import random
import ssl
import threading
import time

import pytest
import trustme

from natsbroker.connection.outqueue import LARGE_IO, LARGE_PAYLOAD
from natsbroker.protocol import parser as P
from tests.support.raw import dial
from tests.support.servers import ServerProcess

KINDS = ["nats-server", "natsbroker"]
SIZES = [65535, 65537, LARGE_PAYLOAD - 1, LARGE_PAYLOAD, LARGE_PAYLOAD + 1,
         LARGE_IO - 1, LARGE_IO, LARGE_IO + 1, 3 * LARGE_IO + 7]
MAX_PAYLOAD = 8 * 1024 * 1024


# -- the parser alone ---------------------------------------------------------

def _feed_in(p, data, step):
    ops = []
    for i in range(0, len(data), step):
        ops += p.feed(data[i:i + step])
    return ops


@pytest.mark.parametrize("step", [1, 2, 3, 65536, LARGE_IO])
def test_payload_across_reads_with_its_crlf_split(step):
    size = LARGE_PAYLOAD + 1
    payload = random.Random(size).randbytes(size)
    data = (b"PUB a %d\r\n" % size + payload + b"\r\n"
            + b"HPUB b r 12 %d\r\nNATS/1.0\r\n\r\n" % (size + 12) + payload + b"\r\nPING\r\n")
    p = P.Parser(max_payload=MAX_PAYLOAD)
    ops = _feed_in(p, data[:100], 100) + _feed_in(p, data[100:], step)
    assert ops == [(P.OP_PUB, b"a", None, payload),
                   (P.OP_HPUB, b"b", b"r", 12, b"NATS/1.0\r\n\r\n" + payload), (P.OP_PING,)]
    assert type(ops[0][3]) is bytes and p.payload_wanted == 0


def test_payload_wanted_counts_down():
    p = P.Parser(max_payload=MAX_PAYLOAD)
    assert p.feed(b"PUB a 1000\r\n" + b"x" * 10) == []
    assert p.payload_wanted == 992
    assert p.feed(b"x" * 990) == [] and p.payload_wanted == 2
    assert p.feed(b"\r") == [] and p.payload_wanted == 1
    assert p.feed(b"\nPING\r\n") == [(P.OP_PUB, b"a", None, b"x" * 1000), (P.OP_PING,)]
    assert p.payload_wanted == 0


def test_no_crlf_after_a_collected_payload_is_an_error():
    p = P.Parser(max_payload=MAX_PAYLOAD)
    assert p.feed(b"PUB a 100000\r\n" + b"x" * 50000) == []
    assert p.feed(b"x" * 50000 + b"\rX\r\nPING\r\n") == [(P.OP_ERROR, P.ERR_UNKNOWN_OP)]
    assert p.dead and p.feed(b"PING\r\n") == []


# -- through a server ---------------------------------------------------------

@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    paths = {"ca": d / "ca.pem", "cert": d / "cert.pem", "key": d / "key.pem"}
    ca.cert_pem.write_to_path(paths["ca"])
    server.cert_chain_pems[0].write_to_path(paths["cert"])
    server.private_key_pem.write_to_path(paths["key"])
    return {k: str(v) for k, v in paths.items()}


@pytest.fixture(scope="module", params=[(k, t) for t in ("tcp", "tls") for k in KINDS],
                ids=lambda p: "%s-%s" % p)
def server(request, tmp_path_factory, certs):
    kind, transport = request.param
    path = tmp_path_factory.mktemp("conf") / "large.conf"
    text = "max_payload: %d\n" % MAX_PAYLOAD
    if transport == "tls":
        text += 'tls {\n  cert_file: "%s"\n  key_file: "%s"\n}\n' % (certs["cert"], certs["key"])
    path.write_text(text)
    with ServerProcess(kind, ["-c", str(path)]) as s:
        s.tls = ssl.create_default_context(cafile=certs["ca"]) if transport == "tls" else None
        yield s


def _connect(s, headers=True, rcvbuf=None):
    # A small receive buffer (set before connecting) keeps the window small:
    # the server's socket fills and its transport has to hold output.
    sock = dial(s.port, 30, rcvbuf=rcvbuf)
    buf = b""
    while b"\r\n" not in buf:
        buf += sock.recv(1)  # only the INFO line: TLS follows it
    if s.tls is not None:
        sock = s.tls.wrap_socket(sock, server_hostname="127.0.0.1")
    connect = {"verbose": False, "pedantic": False, "headers": headers}
    sock.sendall(b"CONNECT %s\r\nPING\r\n" % json.dumps(connect).encode())
    buf = b""
    while not buf.endswith(b"PONG\r\n"):
        data = sock.recv(65536)
        assert data, buf
        buf += data
    return sock


def _messages():
    """(subject, reply, header block or None, payload) around the thresholds,
    each large one followed by a small one."""
    out = []
    for i, size in enumerate(SIZES):
        payload = random.Random(size).randbytes(size)
        out.append((b"big.%d" % i, b"r.%d" % i if i % 2 else None, None, payload))
        hdr = b"NATS/1.0\r\nX-Size: %d\r\n\r\n" % size
        out.append((b"big.h%d" % i, None, hdr, payload[::-1]))
        out.append((b"big.s%d" % i, None, None, b"small %d" % i))
    return out


def _publish(sock, messages):
    frames = []
    for subject, reply, hdr, payload in messages:
        r = b" " + reply if reply else b""
        if hdr is None:
            frames.append(b"PUB %s%s %d\r\n" % (subject, r, len(payload)))
            frames.append(payload)
        else:
            frames.append(b"HPUB %s%s %d %d\r\n" % (subject, r, len(hdr), len(hdr) + len(payload)))
            frames.append(hdr + payload)
        frames.append(b"\r\n")
    sock.sendall(b"".join(frames))


def _receive(sock, count, delay=0.0):
    """The first ``count`` MSG/HMSG ops the subscriber gets, parsed as a client."""
    time.sleep(delay)  # a late reader: the server's output backs up meanwhile
    p = P.Parser(max_payload=MAX_PAYLOAD, client=True)
    got = []
    while len(got) < count:
        data = sock.recv(1 << 20)
        assert data, "connection closed after %d messages" % len(got)
        for op in p.feed(data):
            assert op[0] != P.OP_ERROR, op
            if op[0] in (P.OP_MSG, P.OP_HMSG):
                got.append(op)
    return got


def _expected(messages, sid, headers):
    out = []
    for subject, reply, hdr, payload in messages:
        if hdr is None:
            out.append((P.OP_MSG, subject, sid, reply, payload))
        elif headers:
            out.append((P.OP_HMSG, subject, sid, reply, len(hdr), hdr + payload))
        else:
            out.append((P.OP_MSG, subject, sid, reply, payload))
    return out


def _exchange(server, headers=True, rcvbuf=None, delay=0.0):
    messages = _messages()
    sub = _connect(server, headers=headers, rcvbuf=rcvbuf)
    pub = _connect(server)
    try:
        # Two subscriptions match every message: each large payload goes to
        # this connection twice in the same flush.
        sub.sendall(b"SUB big.> 1\r\nSUB big.* 2\r\nPING\r\n")
        assert _receive_pong(sub)
        sender = threading.Thread(target=_publish, args=(pub, messages))
        sender.start()
        got = _receive(sub, 2 * len(messages), delay)
        sender.join(30)
    finally:
        sub.close()
        pub.close()
    for sid in (b"1", b"2"):
        mine = [op for op in got if op[2] == sid]
        want = _expected(messages, sid, headers)
        assert len(mine) == len(want)
        for g, w in zip(mine, want):
            # Compared one by one so that a failure does not print megabytes.
            assert g[:-1] == w[:-1] and len(g[-1]) == len(w[-1])
            assert g[-1] == w[-1], "payload of %r differs" % (w[1],)


def _receive_pong(sock):
    buf = b""
    while not buf.endswith(b"PONG\r\n"):
        data = sock.recv(4096)
        if not data:
            return False
        buf += data
    return True


def test_large_messages_byte_exact(server):
    _exchange(server)


def test_large_messages_to_a_client_without_headers(server):
    """HPUB to a client that did not ask for headers: MSG with the payload alone."""
    _exchange(server, headers=False)


def test_large_messages_to_a_late_reader(server):
    """The subscriber's socket fills before it reads: large payloads wait
    behind unsent output (held until the transport drains) and still come in
    order, whole."""
    _exchange(server, rcvbuf=64 * 1024, delay=0.5)
