"""Client transports of the core scenarios: plain TCP, TLS and WebSocket.

Server side: what each server is started with (a config file in the server's
fresh directory, nats-server syntax, read by both servers).  Client side:
what the load generator's ``Conn`` does on top of the TCP socket.

* ``tcp``: nothing (the servers' plain client port).
* ``tls``: ``tls { cert_file, key_file }`` with a certificate for 127.0.0.1
  issued by a throw-away CA (``trustme``, generated once per bench run into
  a temporary directory).  The client reads the plaintext ``INFO``, then does
  the TLS handshake (nats-server's INFO-first upgrade) with Python's ``ssl``
  module, verifying the server against that CA; with ``--tls-first`` both
  servers get ``handshake_first: true`` and the client starts with the
  handshake.
* ``ws``: ``websocket { host: 127.0.0.1, port: -1, no_tls: true }``; the
  server's WebSocket port is read from its ports file (``--ports_file_dir``,
  key ``"websocket"``).  The client upgrades with ``wsproto`` (no
  extensions, so no compression) and sends binary frames, masked by
  wsproto, of at most ``WS_FRAME_BYTES``; server frames are decoded by
  wsproto, server pings answered.

``Transport.client`` is a plain dict handed to the worker processes.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import ssl
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# Largest binary frame the WebSocket client sends: a 512 KB publish buffer
# goes out as 8 frames (each masked with its own key, as a browser would).
WS_FRAME_BYTES = 64 * 1024


class TransportError(Exception):
    """Set-up of a transport failed (no trustme, bad handshake, ...)."""


# -- certificates --------------------------------------------------------------

@dataclass(frozen=True)
class TLSFiles:
    dir: str
    ca: str    # the CA certificate the client trusts (PEM)
    cert: str  # the server's certificate chain (PEM), SANs 127.0.0.1 and localhost
    key: str   # its private key (PEM)


def make_tls_files(parent: str | None = None) -> TLSFiles:
    """A fresh CA and server certificate in a new temporary directory
    (remove it with ``remove_tls_files``)."""
    try:
        import trustme  # noqa: PLC0415 - only when a TLS scenario runs
    except ImportError:
        raise TransportError("the TLS scenarios need trustme: "
                             ".venv/bin/pip install 'trustme>=1.1'") from None
    d = tempfile.mkdtemp(prefix="bench-tls-", dir=parent)
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    files = TLSFiles(d, os.path.join(d, "ca.pem"), os.path.join(d, "server.pem"),
                     os.path.join(d, "server-key.pem"))
    ca.cert_pem.write_to_path(files.ca)
    cert.private_key_pem.write_to_path(files.key)
    with open(files.cert, "wb") as f:
        for blob in cert.cert_chain_pems:
            f.write(blob.bytes())
    return files


def remove_tls_files(files: TLSFiles | None) -> None:
    if files is not None:
        shutil.rmtree(files.dir, ignore_errors=True)


# -- server side -----------------------------------------------------------------

# The "perms" scenarios: the same clients, as a user with permissions to
# check on every PUB and SUB. Every bench subject is allowed. A wildcard
# subscription to bench.sub.<tag>.* (pubsub-perms-wild) overlaps the deny
# entry bench.sub.*.*.secret, so every delivery to it is checked as well.
PERMS_CONF = """no_auth_user: bench
authorization {
  users = [
    {user: bench, password: bench, permissions: {
      publish: {
        allow: ["bench.>", "_INBOX.>", "metrics.*.cpu", "orders.*.created"]
        deny: ["bench.admin.>", "bench.*.secret", "orders.eu.*", "$SYS.>"]
      }
      subscribe: {
        allow: ["bench.>", "_INBOX.>", "metrics.> q1"]
        deny: ["bench.admin.>", "bench.*.*.secret", "bench.sub.*.*.secret", "bench.*.* q9"]
      }
    }}
  ]
}
"""

@dataclass(frozen=True)
class Transport:
    kind: str                       # "tls", "ws" or "perms" ("tcp" is no Transport: None)
    tls: TLSFiles | None = None     # kind "tls"
    tls_first: bool = False         # kind "tls": handshake_first on both sides
    client: dict = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def make(cls, kind: str, tls: TLSFiles | None = None, tls_first: bool = False):
        if kind == "tcp":
            return None
        if kind == "tls":
            if tls is None:
                raise TransportError("TLS transport without certificates")
            return cls(kind, tls, tls_first,
                       {"kind": "tls", "ca": tls.ca, "tls_first": tls_first})
        if kind == "ws":
            return cls(kind, client={"kind": "ws"})
        if kind == "perms":
            # plain TCP; the clients are the no_auth_user, so they connect
            # (and the readiness probe connects) without credentials
            return cls(kind, client={"kind": "tcp"})
        raise TransportError(f"unknown transport {kind!r}")

    def config_text(self) -> str:
        """The config file both servers are started with (``-c``)."""
        if self.kind == "tls":
            first = "  handshake_first: true\n" if self.tls_first else ""
            return ("tls {\n"
                    f"  cert_file: {json.dumps(self.tls.cert)}\n"
                    f"  key_file: {json.dumps(self.tls.key)}\n"
                    f"{first}}}\n")
        if self.kind == "perms":
            return PERMS_CONF
        return 'websocket {\n  host: "127.0.0.1"\n  port: -1\n  no_tls: true\n}\n'

    def server_args(self, role: str, tmp: Path) -> tuple[list, dict]:
        """(extra server args, {file in tmp: text}); the ports file goes to
        ``tmp`` too (the WebSocket port is read from it)."""
        conf = tmp / f"{self.kind}.conf"
        return (["-c", str(conf), "--ports_file_dir", str(tmp)],
                {conf.name: self.config_text()})

    def describe(self) -> str:
        text = " ".join(self.config_text().split())
        if self.kind == "perms":
            return ("-c CONF: every client is the no_auth_user \"bench\", whose permissions "
                    "have allow and deny lists with wildcards, publish and subscribe (see "
                    "transports.PERMS_CONF)")
        if self.kind == "tls":
            how = ("TLS first (handshake_first)" if self.tls_first
                   else "INFO first, then the handshake")
            return f"-c CONF with {text}; client: Python ssl, {how}, verifies the trustme CA"
        return (f"-c CONF with {text}; client: wsproto, binary frames <= "
                f"{WS_FRAME_BYTES // 1024} KiB, masked, no compression")


def read_ws_port(ports_dir: str) -> int | None:
    """The WebSocket port from a ``*.ports`` file in ``ports_dir`` (None: not
    there yet, or not complete yet)."""
    for path in sorted(glob.glob(os.path.join(ports_dir, "*.ports"))):
        try:
            with open(path) as f:
                info = json.load(f)
        except (OSError, ValueError):
            continue  # being written
        urls = info.get("websocket") if isinstance(info, dict) else None
        if not urls:
            continue
        # nats-server lists every interface when bound to 0.0.0.0; prefer loopback
        url = next((u for u in urls if "//127.0.0.1:" in u), urls[0])
        try:
            return int(url.rsplit(":", 1)[1].split("/")[0])
        except ValueError:
            continue
    return None


# -- client side -----------------------------------------------------------------
#
# A layer sits between the load generator's Conn and its TCP socket:
# ``encode(data)`` returns the bytes to write for NATS protocol bytes
# ``data``; ``recv(n)`` / ``recv_into(mv, n)`` return decoded NATS protocol
# bytes (0 / b"": the server closed), reading the socket with ``raw_recv``
# (which may raise socket.timeout -- nothing read so far is lost, the caller
# counts the stall and calls again).  The socket stays a plain blocking one
# with kernel timeouts whatever the transport.

RAW_READ = 256 * 1024  # bytes per read of the TCP socket under a layer
TLS_READ = 32 * 1024   # > one TLS record's plaintext (16 KiB): one record per read


class _Layer:
    def __init__(self, raw_recv_into, raw_send):
        self.raw_recv_into = raw_recv_into
        self.raw_send = raw_send     # a complete write (control frames, handshakes)
        self.pending = bytearray()   # decoded, not yet returned
        self.closed = False
        self._rbuf = bytearray(RAW_READ)
        self._rview = memoryview(self._rbuf)

    def _read_raw(self) -> memoryview | None:
        n = self.raw_recv_into(self._rview, RAW_READ)
        return self._rview[:n] if n else None

    def _fill(self) -> None:
        """Decode until something is pending or the stream is closed."""
        while not self.pending and not self.closed:
            data = self._read_raw()
            if data is None:
                self.closed = True
                return
            self._feed(data)

    def recv(self, n: int) -> bytes:
        self._fill()
        data = bytes(self.pending[:n])
        del self.pending[:n]
        return data

    def recv_into(self, mv, n: int = 0) -> int:
        self._fill()
        k = min(n or len(mv), len(self.pending))
        mv[:k] = self.pending[:k]
        del self.pending[:k]
        return k


def tls_context(client: dict) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=client["ca"])


class TlsClient(_Layer):
    """TLS for one connection: Python's ssl module on memory BIOs
    (``SSLContext.wrap_bio``), the server verified against the trustme CA.

    Not ``wrap_socket``: an ``SSLSocket`` returns one TLS record per read and
    reads every record with two system calls (header, then body), so a
    server that writes small records would make the client the bottleneck;
    here the socket is read in RAW_READ chunks and all their records are
    decrypted at once, whatever record sizes the server chose."""

    def __init__(self, raw_recv_into, raw_send, client: dict):
        super().__init__(raw_recv_into, raw_send)
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = tls_context(client).wrap_bio(self.inc, self.out,
                                                server_hostname="127.0.0.1")
        # records are decrypted into this buffer (no allocation per record:
        # nats-server writes records of a few hundred bytes under load)
        self._dbuf = bytearray(TLS_READ)
        self._dview = memoryview(self._dbuf)

    def handshake(self, deadline: float) -> None:
        for _ in range(10_000):
            try:
                self.obj.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
            except ssl.SSLError as e:
                self._flush()  # the alert, for the server's log
                raise TransportError(f"TLS handshake failed: {e}") from None
            while True:
                if time.monotonic() > deadline:
                    raise TransportError("TLS handshake timed out")
                try:
                    data = self._read_raw()
                    break
                except (BlockingIOError, socket.timeout):
                    continue
            if data is None:
                raise TransportError("connection closed during the TLS handshake")
            self.inc.write(data)
        raise TransportError("TLS handshake did not finish")

    def _flush(self) -> None:
        if self.out.pending:
            self.raw_send(self.out.read())

    def encode(self, data) -> bytes:
        self.obj.write(data)  # memory BIO: always writes everything
        return self.out.read()

    def _feed(self, data) -> None:
        self.inc.write(data)
        read, dbuf, dview, pending = self.obj.read, self._dbuf, self._dview, self.pending
        try:
            while True:
                k = read(TLS_READ, dbuf)
                if not k:
                    self.closed = True
                    break
                pending += dview[:k]
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            self.closed = True  # close_notify
        except ssl.SSLError as e:
            raise TransportError(f"TLS error: {e}") from None
        self._flush()  # e.g. a key update

    def summary(self) -> str:
        c = self.obj.cipher()
        return f"{self.obj.version()} {c[0]}" if c else str(self.obj.version())


def _import_wsproto() -> None:
    """wsproto into this module's globals, on first use (the other scenarios
    need nothing beyond the standard library)."""
    global WSConnection, ConnectionType, AcceptConnection, BytesMessage, CloseConnection
    global Message, Ping, RejectConnection, Request
    try:
        from wsproto import ConnectionType, WSConnection  # noqa: PLC0415
        from wsproto.events import (  # noqa: PLC0415
            AcceptConnection,
            BytesMessage,
            CloseConnection,
            Message,
            Ping,
            RejectConnection,
            Request,
        )
    except ImportError:
        raise TransportError("the WebSocket scenarios need wsproto: "
                             ".venv/bin/pip install 'wsproto>=1.2'") from None


class WsClient(_Layer):
    """WebSocket framing for one connection (wsproto, client side).

    ``encode(data)``: binary frames of at most WS_FRAME_BYTES, masked by
    wsproto.  Decoding: message payloads go to ``pending``; server pings are
    answered through ``raw_send`` at once, a close frame ends the stream.
    """

    def __init__(self, raw_recv_into, raw_send):
        super().__init__(raw_recv_into, raw_send)
        _import_wsproto()
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.close_reason = ""

    def upgrade(self, host: str, port: int, deadline: float) -> None:
        """The HTTP upgrade; raises TransportError unless the server accepts."""
        self.raw_send(self.ws.send(Request(host=f"{host}:{port}", target="/")))
        for _ in range(10_000):
            try:
                data = self._read_raw()
            except (BlockingIOError, socket.timeout):
                if time.monotonic() > deadline:
                    raise TransportError("WebSocket upgrade timed out") from None
                continue
            if data is None:
                raise TransportError("connection closed during the WebSocket upgrade")
            self.ws.receive_data(bytes(data))
            for ev in self.ws.events():
                if isinstance(ev, AcceptConnection):
                    self._events()  # frames right behind the 101 response
                    return
                if isinstance(ev, RejectConnection):
                    raise TransportError(f"WebSocket upgrade rejected: HTTP {ev.status_code}")
        raise TransportError("no answer to the WebSocket upgrade")

    def encode(self, data) -> bytes:
        send, n = self.ws.send, len(data)
        if n <= WS_FRAME_BYTES:
            return send(BytesMessage(data=bytes(data)))
        mv = memoryview(data)
        return b"".join(send(BytesMessage(data=bytes(mv[i:i + WS_FRAME_BYTES])))
                        for i in range(0, n, WS_FRAME_BYTES))

    def _feed(self, data) -> None:
        self.ws.receive_data(bytes(data))
        self._events()

    def _events(self) -> None:
        for ev in self.ws.events():
            if isinstance(ev, Message):
                d = ev.data
                self.pending += d.encode() if isinstance(d, str) else d
            elif isinstance(ev, Ping):
                self.raw_send(self.ws.send(ev.response()))
            elif isinstance(ev, CloseConnection):
                self.closed = True
                self.close_reason = f"{ev.code} {ev.reason or ''}".strip()

    def summary(self) -> None:
        return None
