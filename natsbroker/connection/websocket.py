"""NATS over WebSocket: nats-server's ``websocket { }`` client listener.

One Twisted protocol per TCP connection. It reads the HTTP upgrade request with
h11, answers it as nats-server does (same checks, order, statuses and bodies),
then frames with wsproto and runs the ordinary :class:`ClientProtocol` on top:
its transport is a :class:`WebSocketTransport` whose ``write`` sends one binary
message per call. So auth, keepalive, limits and every ``-ERR`` are the plain
client's; this module only adds what is WebSocket's own: the handshake, origin
checks, control frames, and close frames whose status follows the reason the
client connection was closed for.
"""

import email.utils
import hmac
import re
import zlib

import h11
from twisted.internet import protocol
from twisted.internet.interfaces import IHandshakeListener
from twisted.logger import Logger
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Message, Ping, TextMessage
from wsproto.extensions import PerMessageDeflate
from wsproto.frame_protocol import CloseReason, Opcode
from wsproto.utilities import generate_accept_token
from zope.interface import implementer

from natsbroker.accounts.account import GLOBAL_ACCOUNT
from natsbroker.auth.permissions import resolve
from natsbroker.auth.users import Authenticator, NkeyName, password_ok, type_allowed
from natsbroker.connection.client import PLAIN, ClientListener, ClientProtocol
from natsbroker.gocompat.urls import host_and_port, parse_origin

log = Logger()

# nats-server's permessage-deflate answer: always both "no context takeover"s.
PMC_RESPONSE = b"permessage-deflate; server_no_context_takeover; client_no_context_takeover"
# Output of this size or less is sent uncompressed (nats-server's wsCompressThreshold).
COMPRESS_THRESHOLD = 64
# Browsers get frames of at most this size (nats-server's wsFrameSizeForBrowsers).
BROWSER_FRAME_SIZE = 4096
MAX_CLOSE_REASON = 123  # a close frame's payload is 125 bytes, 2 of them the status
# A compressed message may have max_payload times this many bytes, at most the
# limit (nats-server's wsMaxMsgPayloadMultiple and wsMaxMsgPayloadLimit).
MAX_COMPRESSED_MULTIPLE = 8
MAX_COMPRESSED_LIMIT = 64 * 1024 * 1024
MAX_PAYLOAD_DEFAULT = 1024 * 1024  # nats-server's MAX_PAYLOAD_SIZE
LAST_BLOCK = b"\x00\x00\xff\xff\x01\x00\x00\xff\xff"  # nats-server's compressLastBlock

# Why the client connection closed -> (close status, nats-server's reason text).
# The texts are nats-server's ClosedState strings; ClientProtocol's own names
# for a few of them are translated here.
CLOSE_STATUS = {
    "Client Closed": (1000, "Client Closed"),
    "Authentication Timeout": (1008, "Authentication Timeout"),
    "Authentication Failure": (1008, "Authentication Failure"),
    "Max Connections": (1008, "Maximum Connections Exceeded"),
    "Maximum Connections Exceeded": (1008, "Maximum Connections Exceeded"),
    "Maximum Control Line Exceeded": (1008, "Maximum Control Line Exceeded"),
    "Maximum Subscriptions Exceeded": (1008, "Maximum Subscriptions Exceeded"),
    "Parse Error": (1002, "Parse Error"),
    "Protocol Violation": (1002, "Protocol Violation"),
    "Bad Client Protocol Version": (1002, "Bad Client Protocol Version"),
    "Maximum Message Payload Exceeded": (1009, "Maximum Message Payload Exceeded"),
    "Server Shutdown": (1001, "Server Shutdown"),
    # nats-server sends 1006 for these; 1006 may not be sent on the wire
    # (RFC 6455 7.4.1) and wsproto turns it into 1000.
    "Stale Connection": (1006, "Stale Connection"),
    "Write Error": (1006, "Write Error"),
    "Read Error": (1006, "Read Error"),
}
# Closes after which nats-server does not try to write anything more.
NO_CLOSE_FRAME = {"Slow Consumer (Pending Bytes)", "Slow Consumer (Write Deadline)", "Write Error",
                  "Read Error"}

# wsproto's words for a bad frame -> nats-server's (its wsRead errors).
_FRAME_ERRORS = [
    ("unmasked frame", "mask bit missing"),
    ("payload len > 125", "control frame length bigger than maximum allowed of 125 bytes"),
    ("fragment control frame", "control frame does not have final bit set"),
    ("expected CONTINUATION", "new message started before final frame for previous message was received"),
    ("unexpected CONTINUATION", "invalid continuation frame"),
]

_ERR_BAD_PROTOCOL = b"-ERR 'invalid client protocol'\r\n"


def _frame_error(text):
    for theirs, ours in _FRAME_ERRORS:
        if theirs in text:
            return ours
    m = re.match(r"Invalid opcode (0x[0-9a-f]+)", text)
    if m:
        return "unknown opcode %d" % int(m.group(1), 16)
    return text


def max_compressed_size(mpay):
    """nats-server's wsMaxMessageSize: how many compressed bytes one message
    may have (several max_payload operations, but bounded)."""
    return min(mpay * MAX_COMPRESSED_MULTIPLE, MAX_COMPRESSED_LIMIT)


class _Deflate(PerMessageDeflate):
    """permessage-deflate as nats-server does it: small outbound messages
    left uncompressed; an inbound message is gathered compressed and inflated
    once complete, to at most max_payload bytes.

    A compressed message is a bomb until proven otherwise: 70 KB can inflate
    to 48 MB. So, as nats-server's wsDecompressAndParse, its compressed size
    is capped (``max_compressed_size``) and inflation stops one byte past
    ``max_payload``: the first ``max_payload`` bytes are handed on, then
    ``exceeded`` is set and the connection is to close ("maximum payload
    exceeded", a read error)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.mpay = MAX_PAYLOAD_DEFAULT  # the client's max_payload, kept current by the protocol
        self.exceeded = False
        self._compressed = []  # the current message's compressed frames
        self._compressed_size = 0

    def frame_outbound(self, proto, opcode, rsv, data, fin):
        if opcode is not Opcode.CONTINUATION and fin and len(data) <= COMPRESS_THRESHOLD:
            return rsv, data
        return super().frame_outbound(proto, opcode, rsv, data, fin)

    def frame_inbound_payload_data(self, proto, data):
        if not self._inbound_compressed or not self._inbound_is_compressible:
            return data
        if self.exceeded:
            return b""
        self._compressed_size += len(data)
        if self._compressed_size > max_compressed_size(self.mpay):
            self._exceed()
        else:
            self._compressed.append(bytes(data))
        return b""

    def frame_inbound_complete(self, proto, fin):
        if not fin or not self._inbound_is_compressible or not self._inbound_compressed:
            return super().frame_inbound_complete(proto, fin)
        self._inbound_compressed = None
        compressed, self._compressed = self._compressed, []
        size, self._compressed_size = self._compressed_size, 0
        if self.exceeded:
            return None
        # The sync flush the sender left off, and an empty final block.
        compressed.append(LAST_BLOCK)
        if size + len(LAST_BLOCK) > max_compressed_size(self.mpay):
            self._exceed()
            return None
        # (Contexts are never taken over: nats-server's answer says so.)
        inflate = zlib.decompressobj(-self.client_max_window_bits)
        budget = self.mpay
        out = []
        try:
            for chunk in compressed:
                # One byte over the budget tells an exact fit from too much.
                data = inflate.decompress(chunk, budget + 1)
                if len(data) > budget:
                    out.append(data[:budget])
                    self._exceed()
                    break
                budget -= len(data)
                out.append(data)
        except zlib.error:
            return CloseReason.INVALID_FRAME_PAYLOAD_DATA
        return b"".join(out)

    def _exceed(self):
        self.exceeded = True
        self._compressed, self._compressed_size = [], 0


def _header_has(headers, name, token):
    """nats-server's wsHeaderContains: a comma-separated token, any case."""
    token = token.lower()
    for key, value in headers:
        if key == name:
            for t in value.split(b","):
                if t.strip(b" \t").decode("latin-1").lower() == token:
                    return True
    return False


def _header(headers, name):
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return ""


class WebSocketAuthenticator:
    """The websocket block's own auth, when it has some, before the server's.

    As nats-server: a ``username`` or ``token`` in the block is the only way
    in over WebSocket; a ``no_auth_user`` there names a user of the server's
    users for clients without credentials."""

    def __init__(self, config, base=None):
        self.ws = config.websocket
        self.base = base if base is not None else Authenticator(config)
        # (name -> (user, account)): the base authenticator's tables.
        self._users = self.base._users
        self._nkeys = self.base._nkeys
        self.required = self.base.required or self.ws.auth_override

    def __getattr__(self, name):
        # The rest (nonce_required, operator_mode, admit) is the base's.
        return getattr(self.base, name)

    def authenticate(self, opts, tls_names=None, **kw):
        ws = self.ws
        if ws.username:
            if opts.user == ws.username and password_ok(ws.password or None, opts.password):
                return True, ws.username, None, GLOBAL_ACCOUNT
            return False, None, None, None
        if ws.token:
            if opts.auth_token is not None and hmac.compare_digest(
                    ws.token.encode(), opts.auth_token.encode()):
                return True, None, None, GLOBAL_ACCOUNT
            return False, None, None, None
        if ws.no_auth_user and self._no_credentials(opts):
            # (As nats-server: a user not allowed on WebSocket is refused.)
            found = self._nkeys.get(ws.no_auth_user)
            if found is not None and not opts.nkey:
                if type_allowed(found[0], "WEBSOCKET"):
                    return True, NkeyName(found[0].nkey), resolve(found[0].permissions), found[1]
                return False, None, None, None
            # (verify_and_map: the certificate names the user, not this.)
            found = self._users.get(ws.no_auth_user)
            if found is not None and tls_names is None and not (opts.nkey and self._nkeys):
                if type_allowed(found[0], "WEBSOCKET"):
                    return True, found[0].user, resolve(found[0].permissions), found[1]
                return False, None, None, None
        return self.base.authenticate(opts, tls_names, **kw)

    @staticmethod
    def _no_credentials(opts):
        """nats-server's test for a no_auth_user login: the CONNECT has no
        user, no password and no token (empty counts as absent). Any of
        them, even a lone password, means the client meant to log in as
        someone, and is judged as that."""
        return not (opts.user or opts.password or opts.auth_token)


class WebSocketTransport:
    """What the ClientProtocol writes to: each write is one binary message."""

    def __init__(self, ws):
        self._ws = ws
        tcp = ws.transport
        self._tcp = tcp
        # ClientProtocol's fast path: send now what was just written. The
        # frame went through the TCP transport's write(), so its doWrite is
        # as safe here as on a plain connection.
        do_write = getattr(tcp, "doWrite", None)
        if do_write is not None:
            self.doWrite = do_write
        no_delay = getattr(tcp, "setTcpNoDelay", None)
        if no_delay is not None:
            self.setTcpNoDelay = no_delay
        self.bad_protocol = False

    def write(self, data):
        if data.endswith(_ERR_BAD_PROTOCOL):
            self.bad_protocol = True
        self._ws.send_data(data)

    def writeSequence(self, seq):
        self.write(b"".join(seq))

    def loseConnection(self):
        self._ws.close_for(self._ws.client.close_reason if self._ws.client else "")

    def abortConnection(self):
        self._tcp.abortConnection()

    def getPeer(self):
        return self._tcp.getPeer()

    def getHost(self):
        return self._tcp.getHost()

    def registerProducer(self, producer, streaming):
        self._tcp.registerProducer(producer, streaming)

    def unregisterProducer(self):
        self._tcp.unregisterProducer()

    def pauseProducing(self):
        self._tcp.pauseProducing()

    def resumeProducing(self):
        self._tcp.resumeProducing()

    def stopProducing(self):
        self._tcp.stopProducing()


@implementer(IHandshakeListener)
class WebSocketProtocol(protocol.Protocol):
    """One TCP connection on the websocket port: HTTP upgrade, then NATS."""

    def __init__(self, factory):
        self.factory = factory
        self.cfg = factory.config.websocket
        self.http = h11.Connection(h11.SERVER)
        self.ws = None  # wsproto Connection once upgraded
        self._deflate = None  # its permessage-deflate, when negotiated
        self.client = None  # the ClientProtocol once upgraded
        self._tls_conn = None  # wss: the TLS session once its handshake is done
        self.browser = False
        self._timer = None
        self._closing = False
        self._echo = None  # our answer to the peer's close frame

    # -- the HTTP upgrade ---------------------------------------------------

    def connectionMade(self):
        self._start_timer()

    def _start_timer(self):
        # nats-server's handshake_timeout is its HTTP server's ReadTimeout:
        # a request not read in time is dropped without an answer.
        t = self.cfg.handshake_timeout
        if t > 0:
            self._timer = self.factory.reactor.callLater(t, self._handshake_timeout)

    def _stop_timer(self):
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _handshake_timeout(self):
        self._timer = None
        if self.ws is None:
            self.transport.loseConnection()

    def dataReceived(self, data):
        if self.ws is not None:
            self._frames(data)
            return
        if self._closing:
            return
        self.http.receive_data(data)
        while self.ws is None and not self._closing:
            try:
                event = self.http.next_event()
            except h11.RemoteProtocolError as e:
                self._bad_http(e)
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._request = event
            elif isinstance(event, h11.EndOfMessage):
                self._upgrade(self._request)
            elif isinstance(event, h11.ConnectionClosed):
                self.transport.loseConnection()
                return

    def _bad_http(self, error):
        # Go's net/http answers a request it cannot read itself, and hangs up.
        text = "400 Bad Request"
        if "Host" in str(error):
            text = "400 Bad Request: missing required Host header"
        self.transport.write(b"HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                             b"Connection: close\r\n\r\n%s" % (text.encode(), text.encode()))
        self._closing = True
        self.transport.loseConnection()

    def _reject(self, status, reason):
        """nats-server's wsReturnHTTPError: Go's http.Error with its status text."""
        log.error("{peer} - websocket handshake error: {reason}",
                  peer=_describe(self.transport.getPeer()), reason=reason)
        phrase = _STATUS_TEXT[status]
        body = phrase + b"\n"
        out = self.http.send(h11.Response(status_code=status, reason=phrase, headers=[
            (b"Content-Type", b"text/plain; charset=utf-8"),
            (b"Sec-Websocket-Version", b"13"),
            (b"X-Content-Type-Options", b"nosniff"),
            (b"Date", email.utils.formatdate(usegmt=True).encode()),
            (b"Content-Length", b"%d" % len(body)),
        ]))
        out += self.http.send(h11.Data(data=body))
        out += self.http.send(h11.EndOfMessage())
        self.transport.write(out)
        # Like Go's server: the connection stays open for another request
        # unless HTTP says otherwise.
        if self.http.our_state is h11.MUST_CLOSE or self.http.their_state is not h11.DONE:
            self._closing = True
            self.transport.loseConnection()
            return
        self.http.start_next_cycle()
        self._stop_timer()
        self._start_timer()

    def _upgrade(self, req):
        h = req.headers
        # nats-server's checks, in its order (RFC 6455 4.2.1).
        if req.method != b"GET":
            return self._reject(405, "request method must be GET")
        if not _header(h, b"host"):
            return self._reject(400, "'Host' missing in request")
        if not _header_has(h, b"upgrade", "websocket"):
            return self._reject(400, "invalid value for header 'Upgrade'")
        if not _header_has(h, b"connection", "Upgrade"):
            return self._reject(400, "invalid value for header 'Connection'")
        key = _header(h, b"sec-websocket-key")
        if not key:
            return self._reject(400, "key missing")
        if not _header_has(h, b"sec-websocket-version", "13"):
            return self._reject(400, "invalid version")
        err = self._check_origin(h)
        if err:
            return self._reject(403, "origin not allowed: " + err)
        trailing, _ = self.http.trailing_data
        if trailing:
            log.error("{peer} - websocket handshake error: client sent data before handshake is complete",
                      peer=_describe(self.transport.getPeer()))
            self._closing = True
            self.transport.loseConnection()
            return
        compress = self.cfg.compression and any(
            p.strip(b" \t").lower() == b"permessage-deflate"
            for k, v in h if k == b"sec-websocket-extensions"
            for ext in v.split(b",") for p in ext.split(b";"))
        headers = [(b"Upgrade", b"websocket"), (b"Connection", b"Upgrade"),
                   (b"Sec-WebSocket-Accept", generate_accept_token(key.encode()))]
        extensions = []
        if compress:
            headers.append((b"Sec-WebSocket-Extensions", PMC_RESPONSE))
            self._deflate = _Deflate()
            self._deflate.finalize(PMC_RESPONSE.decode())
            extensions.append(self._deflate)
        self.transport.write(self.http.send(h11.InformationalResponse(
            status_code=101, reason=b"Switching Protocols", headers=headers)))
        self._stop_timer()
        ua = _header(h, b"user-agent")
        # nats-server limits frames for browsers, but not compressed ones here
        # (see BROWSER_FRAME_SIZE in send_data).
        self.browser = ua.startswith("Mozilla/") and not compress
        self.ws = Connection(ConnectionType.SERVER, extensions=extensions)
        self.jwt_cookie = self._cookie(h) if self.cfg.jwt_cookie else ""
        self.client = self.factory.build_client()
        self.client.websocket = self.factory
        if self._tls_conn is not None:
            # wss: the session's facts for /connz, and verify_and_map's names.
            self.client.tls_session(self._tls_conn)
            self.client.tls_map = self.factory.tls.config.verify_and_map
        self.client.makeConnection(WebSocketTransport(self))
        if self.cfg.auth_timeout and self.client._auth_call is not None:
            # The websocket block's authorization timeout replaces the server's.
            self.client._auth_call.reset(self.cfg.auth_timeout)

    def _cookie(self, headers):
        from http.cookies import SimpleCookie
        jar = SimpleCookie()
        for k, v in headers:
            if k == b"cookie":
                try:
                    jar.load(v.decode("latin-1"))
                except Exception:
                    pass
        morsel = jar.get(self.cfg.jwt_cookie)
        return morsel.value if morsel is not None else ""

    def _check_origin(self, headers):
        """nats-server's checkOrigin: '' if allowed, else why not."""
        cfg = self.cfg
        allowed = self.factory.allowed_origins
        if not cfg.same_origin and not allowed:
            return ""
        origin = _header(headers, b"origin") or _header(headers, b"sec-websocket-origin")
        if not origin:
            return ""
        try:
            scheme, host = parse_origin(origin)
            oh, op = host_and_port(scheme == "https", host)
            if cfg.same_origin:
                # The expected origin is this request's: its Host, and the
                # listener's scheme (https on wss), as nats-server builds it.
                tls = cfg.tls is not None
                rh, rp = host_and_port(tls, _header(headers, b"host"))
                if oh != rh or op != rp or scheme != ("https" if tls else "http"):
                    return "not same origin"
        except ValueError as e:
            return str(e)
        # (same_origin and allowed_origins together: both must agree.)
        if allowed and (scheme, op) not in allowed.get(oh, ()):
            return "not in the allowed list"
        return ""

    # -- frames -----------------------------------------------------------------

    def _frames(self, data):
        ws = self.ws
        if ws.state is not ConnectionState.OPEN:
            return
        deflate = self._deflate
        if deflate is not None:
            deflate.mpay = self.client.parser.max_payload
        ws.receive_data(data)
        chunks = []
        for event in ws.events():
            if isinstance(event, (BytesMessage, TextMessage)):
                # nats-server reads text frames as bytes, like binary ones.
                data = event.data if isinstance(event, BytesMessage) else event.data.encode("utf-8")
                if data:
                    chunks.append(data)
                if deflate is not None and deflate.exceeded:
                    self._too_big(chunks)
                    return
            elif isinstance(event, Ping):
                self.transport.write(ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                # Feed what came before the close first, as nats-server does.
                self._feed(chunks)
                chunks = []
                if ws.state is ConnectionState.REMOTE_CLOSING:
                    self._echo = event.response()
                    self.client.close("Client Closed")
                else:
                    # A frame wsproto could not read: nats-server's protocol error.
                    self.transport.write(ws.send(CloseConnection(
                        code=event.code, reason=_frame_error(event.reason or "")[:MAX_CLOSE_REASON])))
                    self.client.close("Read Error")
                return
        self._feed(chunks)

    def _too_big(self, chunks):
        """A compressed message over the limit: as nats-server, what fitted
        is parsed, then the connection closes as a read error (no close
        frame)."""
        self._feed(chunks)
        client = self.client
        if not client.closed:
            log.error("{prefix} - read error: maximum payload exceeded", prefix=client.log_prefix())
            client.close("Read Error")

    def _feed(self, chunks):
        if chunks and not self.client.closed:
            self.client.dataReceived(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    def send_data(self, data):
        ws = self.ws
        if ws is None or ws.state is not ConnectionState.OPEN or not data:
            return
        if self.browser and len(data) > BROWSER_FRAME_SIZE:
            out = b"".join(ws.send(Message(data=data[i:i + BROWSER_FRAME_SIZE]))
                           for i in range(0, len(data), BROWSER_FRAME_SIZE))
        else:
            out = ws.send(Message(data=data))
        self.transport.write(out)

    def close_for(self, reason):
        """The ClientProtocol hangs up: the close frame nats-server sends for ``reason``."""
        ws = self.ws
        if ws is not None:
            if ws.state is ConnectionState.REMOTE_CLOSING and self._echo is not None:
                self.transport.write(ws.send(self._echo))
            elif ws.state is ConnectionState.OPEN and reason not in NO_CLOSE_FRAME:
                if reason == "Protocol Violation" and self.client.transport.bad_protocol:
                    reason = "Bad Client Protocol Version"
                code, text = CLOSE_STATUS.get(reason, (1011, reason))
                self.transport.write(ws.send(CloseConnection(code=code, reason=text[:MAX_CLOSE_REASON])))
        self.transport.loseConnection()

    def handshakeCompleted(self):
        """IHandshakeListener (wss): the TLS session is up; pinned_certs is
        checked here, as on the client port."""
        conn = self.transport.getHandle()
        why = self.factory.tls.check_pinned(conn.get_peer_certificate())
        if why is not None:
            log.error("{peer} - TLS handshake error: {why}", peer=_describe(self.transport.getPeer()),
                      why=why)
            self.transport.abortConnection()
            return
        self._tls_conn = conn

    def connectionLost(self, reason=None):
        self._stop_timer()
        client = self.client
        if client is None:
            return
        if not client.close_reason:
            # The peer went away without a close frame: nats-server's read error.
            client.close_reason = "Read Error"
        client.connectionLost(reason)
        closed = self.factory.broker.closed_clients
        if closed and closed[-1].get("cid") == client.cid:
            closed[-1]["type"] = "websocket"


def _describe(addr):
    return "%s:%s" % (getattr(addr, "host", addr), getattr(addr, "port", ""))


_STATUS_TEXT = {400: b"Bad Request", 403: b"Forbidden", 405: b"Method Not Allowed"}


class WebSocketFactory(protocol.Factory):
    """Accepts WebSocket clients; ``host``/``port`` are what their INFO shows."""

    noisy = False

    def __init__(self, broker, authenticator=None):
        self.broker = broker
        self.config = broker.config
        self.reactor = broker.reactor
        ws = self.config.websocket
        self.authenticator = WebSocketAuthenticator(self.config, authenticator)
        self.auth_override = ws.auth_override
        self.host = ws.host
        self.port = ws.port  # the bound port once listening
        # TLS (wss) is the listener's outer layer; the INFO says so, as
        # nats-server's does (tls_required and tls_available).
        self.listener = PLAIN
        self.tls = None  # wss: the ServerTLS, set by the server
        if ws.tls is not None:
            self.listener = ClientListener()
            self.listener.info = {"tls_required": True, "tls_available": True}
        # host -> [(scheme, port)]: a host may be allowed on several.
        self.allowed_origins = {}
        for origin in ws.allowed_origins:
            try:
                scheme, host = parse_origin(origin)
                h, p = host_and_port(scheme == "https", host)
            except ValueError as e:
                # (As nats-server: validated at start; skipped if not.)
                log.error("error parsing allowed origin: {e}", e=e)
                continue
            self.allowed_origins.setdefault(h, []).append((scheme, p))

    def build_client(self):
        return ClientProtocol(self.broker, self.authenticator, self.listener)

    def buildProtocol(self, addr):
        return WebSocketProtocol(self)
