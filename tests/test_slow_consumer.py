"""A subscriber that stops reading is cut off; the server and everyone else carry on."""

import os
import re
import socket
import tempfile
import time

from tests.support.raw import Conversation, dial
from tests.support.servers import ServerProcess


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def test_stalled_reader_is_cut_and_memory_stays_bounded():
    fd, conf = tempfile.mkstemp(suffix=".conf")
    with os.fdopen(fd, "w") as f:
        f.write("max_pending: 4MB\nmax_payload: 64KB\n")
    with ServerProcess("natsbroker", ["-c", conf]) as server:
        stalled = dial(server.port, None, rcvbuf=4096)
        stalled.sendall(b'CONNECT {"verbose":false}\r\nSUB flood 1\r\nPING\r\n')
        got = b""
        while b"PONG\r\n" not in got:  # INFO and PONG (so SUB is in); from now on it reads nothing
            chunk = stalled.recv(4096)
            assert chunk, got
            got += chunk

        healthy = Conversation(server.port)
        healthy.send(b'CONNECT {"verbose":false}\r\nSUB other 1\r\nPING\r\n')
        assert healthy.read_until().endswith(b"PONG\r\n")

        pub = Conversation(server.port)
        pub.send(b'CONNECT {"verbose":false}\r\n')
        frame = b"PUB flood 32768\r\n" + b"x" * 32768 + b"\r\n"
        burst = frame * 64  # 2 MiB a burst
        for _ in range(20):  # 40 MiB in all: ten times max_pending
            pub.send(burst)
        pub.send(b"PUB other 2\r\nok\r\nPING\r\n")
        assert pub.read_until(limit=30, quiet=30).endswith(b"PONG\r\n")
        assert not pub.closed
        # (the server's keepalive PING, 2 s after the connect, may come first)
        got = healthy.read_until(b"ok\r\n", limit=10, quiet=10).replace(b"PING\r\n", b"")
        assert got == b"MSG other 1 2\r\nok\r\n"
        # The broker held at most about max_pending for the stalled client.
        assert rss_bytes(server.proc.pid) < 150 * 1024 * 1024

        # The stalled client was disconnected: draining its socket ends in EOF.
        stalled.settimeout(10)
        data = b""
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                chunk = stalled.recv(1 << 20)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            data += chunk[-64:]
            data = data[-64:]
        else:
            raise AssertionError("stalled client was never disconnected")
        # nats-server's line, with the client's address and cid in front.
        assert re.search(r"\[INF\] 127\.0\.0\.1:\d+ - cid:\d+ - Slow Consumer Detected: "
                         r"MaxPending of 4194304 Exceeded", server.log()), server.log()
        stalled.close()
        healthy.close()
        pub.close()


def test_stalled_tls_reader_is_cut_and_memory_stays_bounded(tmp_path):
    """The same over TLS: the TLS layer passes the socket's back-pressure on,
    so a stalled TLS subscriber is cut at max_pending too."""
    import ssl

    import trustme
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    conf = tmp_path / "tls.conf"
    conf.write_text('max_pending: 4MB\nmax_payload: 64KB\ntls { cert_file: "%s", key_file: "%s" }\n'
                    % (tmp_path / "cert.pem", tmp_path / "key.pem"))
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))

    def connect(server, rcvbuf=None):
        raw = dial(server.port, 10, rcvbuf=rcvbuf)
        buf = b""
        while b"\r\n" not in buf:
            buf += raw.recv(4096)
        return ctx.wrap_socket(raw, server_hostname="127.0.0.1")

    def until(sock, marker, limit=30):
        got, end = b"", time.time() + limit
        sock.settimeout(limit)
        while marker not in got and time.time() < end:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            got += chunk
        return got

    with ServerProcess("natsbroker", ["-c", str(conf)]) as server:
        stalled = connect(server, rcvbuf=4096)
        stalled.sendall(b'CONNECT {"verbose":false}\r\nSUB flood 1\r\nPING\r\n')
        assert until(stalled, b"PONG\r\n").endswith(b"PONG\r\n")
        healthy = connect(server)
        healthy.sendall(b'CONNECT {"verbose":false}\r\nSUB other 1\r\nPING\r\n')
        assert until(healthy, b"PONG\r\n").endswith(b"PONG\r\n")
        pub = connect(server)
        pub.sendall(b'CONNECT {"verbose":false}\r\n')
        burst = (b"PUB flood 32768\r\n" + b"x" * 32768 + b"\r\n") * 64
        for _ in range(20):  # 40 MiB
            pub.sendall(burst)
        pub.sendall(b"PUB other 2\r\nok\r\nPING\r\n")
        assert until(pub, b"PONG\r\n").endswith(b"PONG\r\n")
        assert until(healthy, b"ok\r\n").replace(b"PING\r\n", b"") == b"MSG other 1 2\r\nok\r\n"
        assert rss_bytes(server.proc.pid) < 150 * 1024 * 1024
        # The stalled client is gone: reading on ends in EOF or a reset.
        end = time.time() + 20
        closed = False
        while time.time() < end and not closed:
            try:
                closed = stalled.recv(1 << 20) == b""
            except (ConnectionResetError, ssl.SSLError, OSError):
                closed = True
        assert closed
        assert "Slow Consumer" in server.log()
