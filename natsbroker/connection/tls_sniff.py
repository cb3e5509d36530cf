"""TLS on a client port, as nats-server does it: the first byte tells a TLS
handshake (0x16) from plaintext (a mixed port, ``allow_non_tls``), or a
ClientHello must come before anything is said (``handshake_first``, with an
optional fallback to INFO for a silent client); then the handshake, its
timeout, the session's version, cipher and peer certificate (/connz), and
the send-now path under Twisted's TLS layer.

A mixin of :class:`~.client.ClientProtocol`, which keeps the state (``_tls_wait``,
one of the ``TLS_*`` below) and checks it first in ``connectionMade``,
``dataReceived`` and ``connectionLost``; it provides ``broker``, ``listener``,
``transport``, ``cid``, ``closed``, ``close``, ``_peer`` and ``_start_timers``.
"""

import functools
import os

from twisted.logger import Logger
from twisted.protocols.tls import BufferingTLSTransport, TLSMemoryBIOProtocol

from natsbroker.connection.tls import GO_CIPHER_NAMES, identities, peer_certs
from natsbroker.protocol import wire

# The log's ``logger`` name stays the client connection's, as before the split.
log = Logger(namespace="natsbroker.connection.client")

# TLS states of a connection before its first NATS byte.
TLS_PEEK = 1  # INFO sent; the first byte says TLS (0x16) or, if allowed, plaintext
TLS_FIRST = 2  # nothing sent; a ClientHello must come first
TLS_FIRST_FALLBACK = 3  # as TLS_FIRST, but INFO goes out if the client stays silent
TLS_HANDSHAKE = 4  # OpenSSL is handshaking


class TLSSniffing:
    """Mixin: the TLS side of a client connection (see the module)."""

    def _tls_begin(self, data):
        """Hand the connection to OpenSSL, ``data`` (the ClientHello's first
        bytes) included."""
        first = self._tls_wait in (TLS_FIRST, TLS_FIRST_FALLBACK)
        self._tls_wait = TLS_HANDSHAKE
        self._cancel_fallback()
        self.transport.startTLS(self.listener.tls)
        self._write_now = tls_write_now(self.transport)
        self.tls_first = first
        if first:
            # TLS first: INFO is the first thing said inside the session
            # (OpenSSL holds it until the handshake is done).
            self.transport.write(wire.info(self.broker.info_fields(self)))
        self.transport.protocol.dataReceived(data)

    def handshakeCompleted(self):
        """IHandshakeListener: the TLS session is up."""
        self._tls_wait = 0
        self._cancel_tls_timer()
        self.tls_session(self.transport.getHandle())
        why = self.listener.tls.check_pinned(self.tls_peer_cert)
        if why is not None:
            log.error("{peer} - cid:{cid} - TLS handshake error: {why}", peer=self._peer(),
                      cid=self.cid, why=why)
            self.close("TLS Handshake Failure")
            return
        log.debug("{peer} - cid:{cid} - TLS handshake complete", peer=self._peer(), cid=self.cid)
        log.debug("{peer} - cid:{cid} - TLS version {v}, cipher suite {c}", peer=self._peer(),
                  cid=self.cid, v=self.tls_version, c=self.tls_cipher)
        self._start_timers()

    def tls_session(self, conn):
        """Note what the TLS session (a pyOpenSSL Connection) is: version,
        cipher and the peer's certificate."""
        self._tls_conn = conn
        version = conn.get_protocol_version_name()
        self.tls_version = {"TLSv1.2": "1.2", "TLSv1.3": "1.3"}.get(version, version)
        name = conn.get_cipher_name() or ""
        self.tls_cipher = GO_CIPHER_NAMES.get(name, name)
        self.tls_peer_cert = conn.get_peer_certificate()
        # Kept for /connz?state=closed, without the peer chain (as nats-server).
        self._tls_snapshot = self.tls_fields(auth=False)

    def tls_fields(self, auth=False):
        """/connz's TLS fields (nats-server's ConnInfo order, omitempty)."""
        if not self.tls_version:
            return {}
        out = {"tls_version": self.tls_version, "tls_cipher_suite": self.tls_cipher}
        if auth and self.tls_peer_cert is not None:
            out["tls_peer_certs"] = peer_certs(self._tls_conn, self.tls_peer_cert)
        if self.tls_first:
            out["tls_first"] = True
        return out

    def _tls_names(self):
        # verify_and_map: the client is who its certificate says.
        if not self.tls_map or self.tls_peer_cert is None:
            return None
        return identities(self.tls_peer_cert)

    def _tls_fallback(self):
        # TLS first with a fallback: a silent client gets INFO first after all.
        self._fallback_call = None
        if self.closed or self._tls_wait != TLS_FIRST_FALLBACK:
            return
        self.listener_info = self.listener.fallback_info()
        self.transport.write(wire.info(self.broker.info_fields(self)))
        self._tls_wait = TLS_PEEK

    def _tls_timeout(self):
        self._tls_call = None
        if self.closed or not self._tls_wait:
            return
        if self._tls_wait == TLS_PEEK and self.listener.allow_non_tls:
            # Mixed port, silent client: nats-server takes it as plaintext.
            self._tls_plaintext()
            return
        log.debug("{peer} - cid:{cid} - TLS handshake timeout", peer=self._peer(), cid=self.cid)
        self.close("TLS Handshake Failure")
        self.transport.abortConnection()

    def _tls_plaintext(self):
        self._tls_wait = 0
        self._cancel_tls_timer()
        self._start_timers()

    def _cancel_tls_timer(self):
        if self._tls_call is not None and self._tls_call.active():
            self._tls_call.cancel()
        self._tls_call = None

    def _cancel_fallback(self):
        if self._fallback_call is not None and self._fallback_call.active():
            self._fallback_call.cancel()
        self._fallback_call = None

    def _tls_refuse(self, why):
        log.debug("{peer} - cid:{cid} - TLS handshake error: {why}", peer=self._peer(),
                  cid=self.cid, why=why)
        self.close("TLS Handshake Failure")


def tls_write_now(transport):
    """The send-now fast path under TLS.

    Twisted's TLS layer (BufferingTLSTransport) holds small writes until the
    next reactor turn, with a callLater per write. We already write once per
    turn, so the session writes straight through OpenSSL (the unbuffered
    TLSMemoryBIOProtocol.write, set per instance exactly as Twisted sets the
    buffered one) and the socket is flushed at once, as on a plain
    connection. A Twisted without that layer keeps its own path."""
    tls = transport.protocol
    do_write = getattr(transport, "doWrite", None)
    if (do_write is None or os.environ.get("NATSBROKER_TLS_BUFFERED")
            or not isinstance(tls, BufferingTLSTransport)):
        return None
    tls.write = functools.partial(TLSMemoryBIOProtocol.write, tls)
    return do_write
