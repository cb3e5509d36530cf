"""The Twisted Protocol for one client connection: a thin adapter.

It feeds bytes to the sans-IO parser and dispatches ops through a table built
once per connection (op code -> bound handler). It owns what is per-connection
on the wire: the INFO/CONNECT handshake, authentication, PING/PONG keepalive,
the output queue flushed once per turn (:mod:`.outqueue`, shared with
routes), and the slow-consumer limit. Message routing belongs to the broker
and to the plugins that provide the handlers.
"""

import time

import attrs
from twisted.internet import interfaces, protocol
from twisted.logger import Logger
from zope.interface import implementer

from natsbroker import jsonbound
from natsbroker.accounts.account import GLOBAL_ACCOUNT
from natsbroker.auth.nkey import new_nonce
from natsbroker.auth.users import NkeyName, raw_auth_user
from natsbroker.connection.connect_hold import ConnectHold
from natsbroker.connection.outqueue import LARGE_IO, LARGE_PAYLOAD, OutputQueue
from natsbroker.connection.tls import TLS_HANDSHAKE_RECORD, describe_handshake_error
from natsbroker.connection.tls_sniff import TLS_FIRST, TLS_FIRST_FALLBACK, TLS_HANDSHAKE, TLS_PEEK, TLSSniffing
from natsbroker.gocompat.durations import format_duration
from natsbroker.gocompat.quote import go_quote
from natsbroker.interfaces import IClient, IClientObserver, IClientOpFilter, IClientOps
from natsbroker.protocol import parser as P, wire
from natsbroker.protocol.redact import redact_secrets

log = Logger()

ERR_AUTH_VIOLATION = "Authorization Violation"
ERR_AUTH_TIMEOUT = "Authentication Timeout"
ERR_STALE = "Stale Connection"
ERR_MAX_CONNECTIONS = "maximum connections exceeded"
ERR_SLOW_CONSUMER = "Slow Consumer"
ERR_BAD_PROTOCOL = "invalid client protocol"
ERR_NO_RESPONDERS_HEADERS = "no responders requires headers support"

# nats-server's first PING after connect, and how often it re-measures RTT.
FIRST_PING_INTERVAL = 2.0
RTT_MEASUREMENT_INTERVAL = 60.0


@attrs.define
class ConnectOptions:
    """CONNECT fields (nats-server's JSON names; ``pass`` is ``password``)."""

    verbose: bool = True
    pedantic: bool = True
    tls_required: bool = False
    auth_token: str | None = None
    user: str | None = None
    password: str | None = None
    name: str = ""
    lang: str = ""
    version: str = ""
    protocol: int = 0
    echo: bool = True
    sig: str = ""
    jwt: str = ""
    nkey: str = ""
    no_responders: bool = False
    headers: bool = False


# JSON field -> (attribute, accepted Python types). Like Go's json.Unmarshal,
# a value of the wrong type is an error, null keeps the default, and unknown
# fields are ignored.
_CONNECT_FIELDS = {
    "verbose": ("verbose", bool), "pedantic": ("pedantic", bool),
    "tls_required": ("tls_required", bool), "auth_token": ("auth_token", str),
    "user": ("user", str), "pass": ("password", str), "name": ("name", str),
    "lang": ("lang", str), "version": ("version", str),
    "protocol": ("protocol", int), "echo": ("echo", bool), "sig": ("sig", str),
    "jwt": ("jwt", str), "nkey": ("nkey", str),
    "no_responders": ("no_responders", bool), "headers": ("headers", bool),
}


# Go's json.Unmarshal matches an object key to a struct field exactly, or
# else case-insensitively with Unicode simple folding (bytes.EqualFold): so
# nats-server takes {"USER":..,"PASS":..} as user and password, and even
# "\u017f" (long s) for "s" and "\u212a" (Kelvin) for "k". The field names
# are ASCII: folding a key to lower-case ASCII finds its field.
_FOLD = str.maketrans({"\u017f": "s", "\u212a": "k"})


def _field_of(key):
    spec = _CONNECT_FIELDS.get(key)
    if spec is None:
        folded = key.translate(_FOLD)
        if folded.isascii():
            spec = _CONNECT_FIELDS.get(folded.lower())
    return spec


class _Pairs(list):
    """A JSON object's (key, value) pairs, in order."""


class BadConnect(ValueError):
    pass


def parse_connect(arg, opts=None):
    """CONNECT JSON -> ConnectOptions (updating ``opts`` as a second CONNECT does)."""
    try:
        # Every key in order, repeated ones too: Go assigns each in turn.
        data = jsonbound.loads(arg, object_pairs_hook=_Pairs)
    except ValueError as e:
        raise BadConnect(str(e))
    if not isinstance(data, _Pairs):
        raise BadConnect("CONNECT argument is not an object")
    opts = attrs.evolve(opts) if opts is not None else ConnectOptions()
    for key, value in data:
        spec = _field_of(key)
        if spec is None or value is None:
            continue
        attr, typ = spec
        if typ is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, typ)
        if not ok:
            raise BadConnect("bad type for %s" % key)
        setattr(opts, attr, value)
    return opts


class ClientListener:
    """What a client port offers beyond plain TCP: its TLS (a
    :class:`natsbroker.connection.tls.ServerTLS` or None) and the INFO fields that follow."""

    def __init__(self, tls=None, allow_non_tls=False):
        self.tls = tls
        self.allow_non_tls = allow_non_tls
        self.refresh()

    def refresh(self):
        """Recompute the INFO fields (after the TLS settings were reloaded)."""
        tls, allow_non_tls = self.tls, self.allow_non_tls
        self.info = {}
        if tls is not None:
            cfg = tls.config
            # As nats-server: a mixed port says tls_available; TLS first
            # says tls_required too (the INFO goes out inside the session).
            if cfg.handshake_first or not allow_non_tls:
                self.info["tls_required"] = True
            if cfg.verify_clients:
                self.info["tls_verify"] = True
            if allow_non_tls:
                self.info["tls_available"] = True

    def fallback_info(self):
        """INFO fields after a TLS-first port fell back to sending INFO first."""
        info = dict(self.info)
        if self.allow_non_tls:
            info.pop("tls_required", None)
        return info


PLAIN = ClientListener()


@implementer(IClient, interfaces.IPushProducer, interfaces.IHandshakeListener)
class ClientProtocol(OutputQueue, TLSSniffing, ConnectHold, protocol.Protocol):
    """One client connection."""

    def __init__(self, broker, authenticator, listener=PLAIN):
        self.broker = broker
        self.auth = authenticator
        self.listener = listener
        self.listener_info = listener.info
        self._tls_wait = 0
        self._tls_call = None
        self._fallback_call = None
        self.tls_version = ""
        self.tls_cipher = ""
        self.tls_peer_cert = None
        self.tls_first = False
        self._tls_snapshot = {}
        self._tls_conn = None
        # verify_and_map: the user is the one the client certificate names.
        self.tls_map = listener.tls is not None and listener.tls.config.verify_and_map
        cfg = broker.config
        self.parser = P.Parser(cfg.max_control_line, cfg.max_payload)
        self.cid = 0
        self.opts = ConnectOptions()
        self.subs = {}
        self.user = None
        self.permissions = None
        # $G until CONNECT names a user of another account.
        self.account = broker.global_account
        # With nkey users configured, each client's INFO has a nonce to sign.
        self.nonce = new_nonce() if authenticator.nonce_required else ""
        self.host = ""
        self.port = 0
        self.connect_received = False
        self._first_pong_sent = False
        self._seen_bytes = False
        self.closed = False
        self.close_reason = ""
        self.start = time.time()
        self.last_activity = self.start
        # Cached CONNECT flags read on the hot path.
        self.verbose = True
        self.pedantic = True
        self.echo = True
        self.headers = False
        self.no_responders = False
        # Output queued this turn, and accounting for the slow-consumer limit.
        self.init_output(cfg.max_pending)
        # Subscriptions this connection may have (0: no limit; a JWT user's
        # limits may lower it).
        self.max_subs = cfg.max_subscriptions
        self.trace = cfg.trace
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self.pings_out = 0
        self._last_in = broker.reactor.seconds()
        # Round-trip time measured with our PINGs (seconds; 0 = not yet).
        self.rtt = 0.0
        self._rtt_start = 0.0
        self._ping_call = None
        self._auth_call = None
        self._deadline_call = None
        self._dispatch = {}
        self._msg_memo = broker.msg_memo
        # The transport's own read size (None: not a Twisted FileDescriptor,
        # e.g. WebSocket), raised while a large payload is arriving.
        self._read_size = None
        self._allow_responses = False
        # Auth callout: the request a CONNECT waits on, the ops that came
        # after it (None: no CONNECT is waiting), what they took to read.
        self._callout = None
        self._held_ops = None
        self._held_bytes = 0
        self._reads_paused = False
        self._expiry_call = None

    # -- connection lifecycle ---------------------------------------------

    def connectionMade(self):
        b = self.broker
        peer = self.transport.getPeer()
        self.host = getattr(peer, "host", "")
        self.port = getattr(peer, "port", 0)
        self.cid = b.next_cid()
        # Like Go's net package (and so nats-server): no Nagle delay. Without it
        # a reply written in a later turn than the data before it waits for the
        # peer's delayed ACK (~40 ms).
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if set_no_delay is not None:
            try:
                set_no_delay(True)
            except OSError:
                pass
        self.transport.registerProducer(self, True)
        # Plain TCP/UNIX transports are FileDescriptors that can write at once.
        self._write_now = getattr(self.transport, "doWrite", None)
        size = getattr(self.transport, "bufferSize", None)
        if isinstance(size, int):
            self._read_size = size
        info = wire.info(b.info_fields(self))
        if b.shutting_down or b.num_clients >= b.config.max_connections:
            self.transport.write(info + wire.err(ERR_MAX_CONNECTIONS))
            self.closed = True
            self.close_reason = "Max Connections"
            self.transport.loseConnection()
            return
        b.register(self)
        self._dispatch = self._build_dispatch()
        tls = self.listener.tls
        if tls is None:
            self.transport.write(info)
            self._start_timers()
            return
        # TLS: the timers start once the handshake is done, as nats-server's
        # (an auth timeout must not write into a half-made TLS session).
        cfg = tls.config
        self._tls_call = b.reactor.callLater(cfg.timeout, self._tls_timeout)
        if cfg.handshake_first:
            if cfg.handshake_first_fallback > 0:
                self._tls_wait = TLS_FIRST_FALLBACK
                self._fallback_call = b.reactor.callLater(
                    cfg.handshake_first_fallback, self._tls_fallback)
            else:
                self._tls_wait = TLS_FIRST
        else:
            self.transport.write(info)
            self._tls_wait = TLS_PEEK

    def _start_timers(self):
        b = self.broker
        reactor = b.reactor
        if self.auth.required:
            self._auth_call = reactor.callLater(b.config.auth_timeout, self._auth_timeout)
        if b.config.ping_interval > 0:
            # As nats-server: the first PING comes early (to measure RTT), the
            # rest every ping_interval.
            first = min(b.config.ping_interval, FIRST_PING_INTERVAL)
            self._ping_call = reactor.callLater(first, self._ping_timer)

    def _build_dispatch(self):
        table = {
            P.OP_CONNECT: self._on_connect,
            P.OP_PING: self._on_ping,
            P.OP_PONG: self._on_pong,
            P.OP_INFO: _ignore,
            P.OP_OK: _ignore,
            P.OP_ERR: self._on_err,
        }
        owner = {}
        for plugin in self.broker.providers(IClientOps):
            ops = dict(plugin.client_ops(self))
            if P.OP_PUB in ops and P.OP_PUB not in owner:
                # Runs only for the PUB handler that came with an OP_PUBS one.
                ops.setdefault(P.OP_PUBS, None)
            for code, handler in ops.items():
                if code in owner or code in table:
                    _op_taken(self.broker, plugin, code, owner.get(code))
                    continue
                owner[code] = plugin
                if handler is not None:
                    table[code] = handler
        filters = [plugin.client_op_filters(self)
                   for plugin in self.broker.providers(IClientOpFilter)]
        if filters:
            _chain_filters(table, filters)
        # Runs of PUBs only for a handler that takes them.
        self.parser.runs = P.OP_PUBS in table
        # Ops no one handles (and the parser's OP_ERROR) get an entry too,
        # so that dispatching one is a single lookup.
        for code in P.OP_NAMES:
            table.setdefault(code, self._on_unhandled)
        return table

    def connectionLost(self, reason=None):
        if self._tls_wait and not self.closed and not (
                self._tls_wait == TLS_PEEK and self.listener.allow_non_tls):
            why = describe_handshake_error(reason) if self._tls_wait == TLS_HANDSHAKE else "EOF"
            if why.startswith("tls: first record"):
                self._tls_refuse(why)
            else:
                log.error("{peer} - cid:{cid} - TLS handshake error: {why}", peer=self._peer(),
                          cid=self.cid, why=why)
            self.close_reason = "TLS Handshake Failure"
        self.closed = True
        self._tls_wait = 0
        if not self.close_reason:
            self.close_reason = "Client Closed"
        self._cancel_tls_timer()
        self._cancel_fallback()
        for c in (self._ping_call, self._auth_call, self._deadline_call, self._expiry_call):
            if c is not None and c.active():
                c.cancel()
        self._ping_call = self._auth_call = self._deadline_call = self._expiry_call = None
        if self._callout is not None:
            self._callout.cancel()
            self._callout = None
        self._held_ops = None
        self._out = []
        self._held = None
        b = self.broker
        if b._clients.get(self.cid) is self:
            b.unregister(self)
            # /connz?state=closed shows the subscriptions a connection had.
            b.closed_clients.append(self.snapshot())
            for plugin in b.providers(IClientObserver):
                plugin.client_closed(self)
            # Whatever a plugin left behind must not keep delivering to us.
            acc = self.account
            for sub in list(self.subs.values()):
                if not sub.closed:
                    sub.closed = True
                    acc.sublist.remove(sub)
                    if acc.imports is not None:
                        acc.imports.sub_removed(sub)
            self.subs.clear()

    def snapshot(self):
        """What /connz shows of this connection (also kept after it closes)."""
        return {
            "cid": self.cid, "ip": self.host, "port": self.port,
            "start": self.start, "last_activity": self.last_activity,
            "pending_bytes": self.pending_bytes,
            "in_msgs": self.in_msgs, "out_msgs": self.out_msgs,
            "in_bytes": self.in_bytes, "out_bytes": self.out_bytes,
            "subscriptions": len(self.subs), "name": self.opts.name,
            "lang": self.opts.lang, "version": self.opts.version,
            # (the user a failed login tried, too: nats-server's raw auth user)
            "user": self.user or self.opts.nkey or self.opts.user,
            "nkey": isinstance(self.user, NkeyName),
            "account": self.account.name,
            "reason": self.close_reason,
            "stop": time.time() if self.closed else None,
            "rtt": self.rtt,
            "subjects": [s.subject.decode(errors="replace") for s in self.subs.values()],
            "tls": self._tls_snapshot,
            "subs_detail": [_sub_detail(s, self.cid) for s in self.subs.values()],
        }

    # -- input --------------------------------------------------------------

    def dataReceived(self, data):
        if self.closed:
            return
        if self._tls_wait:
            if self._tls_wait == TLS_HANDSHAKE:
                return
            if data[0] == TLS_HANDSHAKE_RECORD:
                self._tls_begin(data)
                return
            if self._tls_wait == TLS_PEEK and self.listener.allow_non_tls:
                self._tls_plaintext()  # a plaintext client on a mixed port
            else:
                self._tls_refuse("tls: first record does not look like a TLS handshake")
                return
        self.last_activity = time.time()
        self._last_in = self.broker.reactor.seconds()
        if not self.connect_received and self.auth.required and not self._seen_bytes:
            self._seen_bytes = True
            if data[:1] not in (b"C", b"c") and not self._first_op_not_connect():
                return
        parser = self.parser
        ops = parser.feed(data)
        if self._read_size is not None:
            wanted = parser.payload_wanted
            if wanted or self.transport.bufferSize != self._read_size:
                self._size_reads(wanted)
        if not ops:
            return
        if self.trace:
            self._trace_in(ops)
        if self._held_ops is not None:
            self._hold_ops(ops, len(data))
            return
        b = self.broker
        b.begin()
        try:
            if not self.connect_received:
                self._dispatch_ops(ops)
                return
            # (every op code has an entry: see _build_dispatch)
            dispatch = self._dispatch
            for op in ops:
                dispatch[op[0]](op)
                if self.closed:
                    break
        finally:
            b.end()

    def _dispatch_ops(self, ops):
        """Dispatch before the connection is fully up: a CONNECT may be held
        for the auth service, and then what follows it waits too (kept off
        the loop above, which every later read takes)."""
        dispatch = self._dispatch
        for i, op in enumerate(ops):
            handler = dispatch.get(op[0])
            if handler is None:
                self._on_unhandled(op)
            else:
                handler(op)
            if self.closed:
                return
            if self._held_ops is not None:
                self._held_ops.extend(ops[i + 1:])
                return

    def _size_reads(self, wanted):
        # Read what the payload still needs, up to LARGE_IO, in one recv; the
        # usual size otherwise. (For this connection bufferSize is also how
        # much of its own output Twisted holds before pausing us: more, only
        # while it sends us a large payload.)
        self.transport.bufferSize = min(max(wanted, self._read_size), LARGE_IO)

    def _trace_in(self, ops):
        # -V: what the client sent, in nats-server's trace shape.
        for op in ops:
            code = op[0]
            if code == P.OP_PUBS:
                self._trace_in([(P.OP_PUB, op[1], op[2], raw) for raw in op[3]])
                continue
            if code == P.OP_ERROR:
                continue
            name = P.OP_NAMES[code]
            if code in (P.OP_PUB, P.OP_HPUB):
                fields = [f for f in op[1:3] if f is not None]
                args = b" ".join(fields).decode(errors="replace")
                text = "<<- [%s %s %d]" % (name, args, len(op[-1]))
                self._trace(text)
                text = "<<- MSG_PAYLOAD: [%s]" % go_quote(op[-1][:128])
            else:
                args = b" ".join(f if isinstance(f, bytes) else str(f).encode()
                                 for f in op[1:] if f is not None)
                if code == P.OP_CONNECT:
                    args = _redact_connect(args)
                text = ("<<- [%s %s]" % (name, args.decode(errors="replace"))).replace(" ]", "]")
            self._trace(text)

    def _trace(self, text):
        log.debug("{peer} - cid:{cid} - {text}", peer=self._peer(), cid=self.cid,
                  text=text, nats_trace=True)  # unquoted, as nats-server

    def _peer(self):
        return "%s:%s" % (self.host, self.port)

    def _first_op_not_connect(self):
        """With auth on, the first op must be CONNECT, as nats-server's parser
        decides from the very first byte; a configured no_auth_user lets a
        telnet-style client in without one. Returns True to go on."""
        ok, user, perms, account = self.auth.authenticate(ConnectOptions(), client=self)
        # (An nkey no_auth_user needs a CONNECT, as in nats-server.)
        if ok and self.broker.config.no_auth_user and not isinstance(user, NkeyName):
            self.user, self.permissions = user, perms
            self._join(account)
            self._connected()
            return True
        self._auth_violation(ConnectOptions())
        return False

    def _auth_violation(self, opts):
        # nats-server's authViolation: the log line names what was tried
        # (never the secret), then the -ERR and the close.
        if self.auth.operator_mode:
            what = ""  # nats-server names nothing in operator mode
        elif opts.nkey:
            what = " - Nkey %s" % go_quote(opts.nkey)
        elif opts.user:
            what = " - User %s" % go_quote(opts.user)
        elif opts.auth_token:
            what = ' - Token "[REDACTED]"'
        else:
            what = ""
        self.broker.security_log.error(
            "authentication", "{prefix} - authentication error{what}",
            prefix=self.log_prefix(), what=what)
        # What was tried stays with the connection, as in nats-server: its
        # auth error and disconnect events and /connz name it.
        self.opts = opts
        self.send_err(ERR_AUTH_VIOLATION, close=True, reason="Authentication Failure")

    def _auth_note(self, text):
        # Why a login failed, at debug level, before the ERR line (as nats-server).
        log.debug("{peer} - cid:{cid} - {text}", peer=self._peer(), cid=self.cid, text=text)

    @property
    def auth_user_name(self):
        return raw_auth_user(self)

    def log_prefix(self):
        """nats-server's client prefix for log lines: address, cid and, once
        authenticated, the account and identity."""
        prefix = "%s:%s - cid:%d" % (self.host, self.port, self.cid)
        acc = self.account.name
        tag = getattr(self.user, "log_tag", None)
        if tag is not None:
            prefix += ' - "%s"' % tag  # a JWT user: "<account>/<name>/jwt:<user>"
        elif isinstance(self.user, NkeyName):
            prefix += ' - "%s/nkey:%s"' % (acc, self.user)
        elif self.user:
            prefix += ' - "%s/user:%s"' % (acc, self.user)
        elif self.connect_received and self.opts.auth_token and self.auth.required:
            prefix += ' - "%s/token"' % acc
        return prefix

    def may_publish(self, subject):
        perms = self.permissions
        return perms is None or perms.allows_publish(subject)

    def may_subscribe(self, subject, queue=None):
        perms = self.permissions
        return perms is None or perms.can_subscribe(subject, queue)

    def permission_violation(self, subject, sid=None, queue=None):
        """Refuse a publish (``sid`` None) or a subscription to ``subject``
        as nats-server does: the -ERR to the client and an ERR log line
        (rate-limited)."""
        quoted = go_quote(subject)
        if sid is None:
            self.send_err("Permissions Violation for Publish to %s" % quoted)
            what = "Publish Violation - Subject %s" % quoted
        elif queue:
            q = go_quote(queue)
            self.send_err("Permissions Violation for Subscription to %s using queue %s" % (quoted, q))
            what = "Subscription Violation - Subject %s, Queue: %s, SID %s" % (
                quoted, q, sid.decode(errors="replace"))
        else:
            self.send_err("Permissions Violation for Subscription to %s" % quoted)
            what = "Subscription Violation - Subject %s, SID %s" % (quoted, sid.decode(errors="replace"))
        self.broker.security_log.error("permissions", "{prefix} - {what}",
                                       prefix=self.log_prefix(), what=what)

    def reply_violation(self, reply):
        """Refuse a publish whose reply subject is reserved (service import and
        JetStream ack replies), in nats-server's words."""
        quoted = go_quote(reply)
        self.send_err("Permissions Violation for Publish with Reply of %s" % quoted)
        self.broker.security_log.error("permissions", "{prefix} - {what}", prefix=self.log_prefix(),
                                       what="Publish Violation - Reply %s" % quoted)

    def _on_unhandled(self, op):
        if op[0] == P.OP_ERROR:
            msg = op[1]
            if msg is not None:
                self.send_err(msg, close=True, reason=_reason_for(msg))
            else:
                self.close("Protocol Violation")
        else:
            self.send_err(P.ERR_UNKNOWN_OP, close=True, reason="Protocol Violation")

    def _on_connect(self, op, fetched=False):
        # As nats-server's processConnect: a first estimate of the round trip
        # is the time from accept to CONNECT (PONGs refine it later); kept
        # as its getRTT reports it, whole microseconds under a millisecond.
        if not fetched:
            rtt = max(time.time() - self.start, 1e-9)
            self.rtt = int(rtt * 1e6) / 1e6 if 1e-6 < rtt < 1e-3 else rtt
        try:
            opts = parse_connect(op[1], self.opts if self.connect_received else None)
        except BadConnect:
            self.close("Protocol Violation")
            return
        if opts.protocol < 0 or opts.protocol > 1:
            self.send_err(ERR_BAD_PROTOCOL, close=True, reason="Protocol Violation")
            return
        if opts.no_responders and not opts.headers:
            self.send_err(ERR_NO_RESPONDERS_HEADERS, close=True, reason="Protocol Violation")
            return
        if not self.connect_received and self.auth.required:
            if not fetched and self._hold_for_fetch(op, opts):
                return
            result = self.auth.authenticate(
                opts, self._tls_names(), nonce=self.nonce, note=self._auth_note, client=self)
            if self.auth.callout is not None and self.auth.wants_callout(opts, result):
                self._hold_for_callout(opts)
                return
            ok, user, perms, account = result
            if not ok:
                self._auth_violation(opts)
                return
            self.user = user
            self.permissions = perms
            self._join(account)
            if not self.auth.admit(self):
                return
        elif not self.connect_received:
            # No auth configured; a no_auth_user still brings its permissions.
            ok, user, perms, account = self.auth.authenticate(opts)
            self.user, self.permissions = user, perms
            self._join(account)
        self._accept_connect(opts)

    def _accept_connect(self, opts):
        # The CONNECT is accepted (or, after the first, updates the options).
        self.opts = opts
        self.verbose = opts.verbose
        self.pedantic = opts.pedantic
        self.echo = opts.echo
        self.headers = opts.headers
        self.no_responders = opts.no_responders
        first = not self.connect_received
        if self.verbose:
            self.send(wire.OK)
        if first:
            self._connected()

    def _connected(self):
        self.connect_received = True
        perms = self.permissions
        self._allow_responses = perms is not None and perms.allow_responses
        if self._auth_call is not None and self._auth_call.active():
            self._auth_call.cancel()
        self._auth_call = None
        for plugin in self.broker.providers(IClientObserver):
            plugin.client_connected(self)

    def _join(self, name):
        """Put the connection in account ``name`` (it has no subscriptions
        yet: CONNECT comes first)."""
        acc = self.broker.accounts.get(name or GLOBAL_ACCOUNT)
        if acc is not None:
            self.account = acc

    def _on_ping(self, op):
        self.send(wire.PONG)
        if self.connect_received and not self._first_pong_sent:
            self._first_pong_sent = True
            if self.opts.protocol >= 1:
                # nats-server follows the first PONG after a protocol-1 CONNECT
                # with an INFO update confirming the connection and its
                # account. It must come after the PONG: clients wait for that
                # PONG before they accept async INFO.
                self.send(wire.info(self.broker.info_fields(self, connect_info=True)))

    def _on_pong(self, op):
        self.pings_out = 0
        if self._rtt_start:
            self.rtt = max(self.broker.reactor.seconds() - self._rtt_start, 1e-9)

    def _on_err(self, op):
        # A client sending -ERR is broken; nats-server hangs up without a word.
        self.close("Protocol Violation")

    # -- output -------------------------------------------------------------

    def send_ok(self):
        if self.verbose:
            self.send(wire.OK)

    def send_err(self, message, close=False, reason="Protocol Violation"):
        if self.closed:
            return
        if close:
            self.flush()
            self._release_held()
            self.transport.write(wire.err(message))
            self.close(reason)
        else:
            self.send(wire.err(message))

    def close(self, reason):
        if self.closed:
            return
        self.flush()
        self._release_held()
        self.closed = True
        self.close_reason = reason
        # A TLS transport shuts down only once no producer is registered.
        self.transport.unregisterProducer()
        self.transport.loseConnection()

    def check_deliveries(self):
        """From now on, check what this client's wildcard subscriptions
        receive against its subscribe deny list: it has one that a deny
        entry overlaps. (The check is put in front of ``deliver`` only for
        such a client, so that no other delivery pays for it.)"""
        if "deliver" in self.__dict__:
            return
        perms = self.permissions
        known, wildcard_subs, denied = perms.deny_cache, perms.wildcard_subs, perms.delivery_denied
        deliver = ClientProtocol.deliver.__get__(self)

        def deliver_checked(sub, subject, reply, hdr_len, raw):
            # As nats-server's deliverMsg: a message on a denied subject does
            # not reach a wildcard subscription (nor count against its max,
            # nor grant a reply). False tells the router it was not delivered.
            if known.get(subject) is not False and sub.subject in wildcard_subs and \
                    denied(subject, sub.queue):
                return False
            return deliver(sub, subject, reply, hdr_len, raw)

        self.deliver = deliver_checked
        self.takes_runs = False
        # The router must hear about refusals: the next queue member gets the
        # message, and a request nobody took gets no-responders.
        self.account.count_deliveries()

    def deliver(self, sub, subject, reply, hdr_len, raw):
        if self.closed:
            return
        if reply and self._allow_responses:
            # allow_responses: receiving a request grants a reply to it
            # (within the user's max and expires).
            self.permissions.grant_response(reply)
        size = len(raw)
        if hdr_len or size >= LARGE_PAYLOAD:
            self._deliver_framed(sub, subject, reply, hdr_len, raw)
            return
        # The frame is "MSG <subject> " + sid + " [reply] <size>\r\n<payload>\r\n";
        # head and tail are built once per message for all subscribers.
        memo = self._msg_memo
        if memo[0] is not raw or memo[1] is not reply or memo[3] is not subject:
            if reply:
                memo[2] = b" %s %d\r\n%s\r\n" % (reply, size, raw)
            else:
                memo[2] = b" %d\r\n%s\r\n" % (size, raw)
            memo[4] = b"MSG " + subject + b" "
            memo[0] = raw
            memo[1] = reply
            memo[3] = subject
        out = self._out
        # (one += of a tuple is cheaper than three appends)
        out += (memo[4], sub.sid, memo[2])
        self.out_msgs += 1
        self.out_bytes += size
        if not self._dirty:
            self._dirty = True
            self.broker.mark_dirty(self)
        sub.delivered += 1
        if sub.max_msgs and sub.delivered >= sub.max_msgs:
            self.remove_sub(sub)

    # Account.route_run may hand this connection a run of messages at once.
    takes_runs = True

    def deliver_run(self, sub, subject, payloads):
        """deliver() for messages published one after the other to
        ``subject``, all of one size, without reply or headers: their frames
        differ only in the payload, so they are made with one join."""
        if self.closed:
            return
        size = len(payloads[0])
        if sub.max_msgs or size >= LARGE_PAYLOAD:
            for raw in payloads:
                if sub.closed:
                    return  # (it reached its max: the rest no longer match)
                self.deliver(sub, subject, None, 0, raw)
            return
        head = b"MSG %s %s %d\r\n" % (subject, sub.sid, size)
        out = self._out
        out += (head, (b"\r\n" + head).join(payloads), b"\r\n")
        n = len(payloads)
        self.out_msgs += n
        self.out_bytes += n * size
        if not self._dirty:
            self._dirty = True
            self.broker.mark_dirty(self)
        sub.delivered += n

    def _deliver_framed(self, sub, subject, reply, hdr_len, raw):
        # A message with headers, or a large one: a frame (or pieces) of its own.
        if len(raw) >= LARGE_PAYLOAD:
            self._out.extend(self._large_pieces(sub, subject, reply, hdr_len, raw))
            self._large = True
        else:
            self._out.append(self._frame_with_headers(sub, subject, reply, hdr_len, raw))
        self.out_msgs += 1
        self.out_bytes += len(raw)
        if not self._dirty:
            self._dirty = True
            self.broker.mark_dirty(self)
        sub.delivered += 1
        if sub.max_msgs and sub.delivered >= sub.max_msgs:
            self.remove_sub(sub)

    def _large_pieces(self, sub, subject, reply, hdr_len, raw):
        # A big payload is not copied into a frame: the control line, the
        # payload and the CRLF are queued as three pieces, written one by one
        # (so Twisted sends the payload from the object itself).
        if hdr_len and not self.headers:
            raw, hdr_len = raw[hdr_len:], 0
        r = b" " + reply if reply else b""
        if hdr_len:
            head = b"HMSG %s %s%s %d %d\r\n" % (subject, sub.sid, r, hdr_len, len(raw))
        else:
            head = b"MSG %s %s%s %d\r\n" % (subject, sub.sid, r, len(raw))
        return head, raw, b"\r\n"

    def _frame_with_headers(self, sub, subject, reply, hdr_len, raw):
        if self.headers:
            if reply:
                return b"HMSG %s %s %s %d %d\r\n%s\r\n" % (
                    subject, sub.sid, reply, hdr_len, len(raw), raw)
            return b"HMSG %s %s %d %d\r\n%s\r\n" % (
                subject, sub.sid, hdr_len, len(raw), raw)
        # A client that did not ask for headers gets the payload alone.
        raw = raw[hdr_len:]
        if reply:
            return b"MSG %s %s %s %d\r\n%s\r\n" % (subject, sub.sid, reply, len(raw), raw)
        return b"MSG %s %s %d\r\n%s\r\n" % (subject, sub.sid, len(raw), raw)

    def remove_sub(self, sub):
        if not sub.closed:
            sub.closed = True
            acc = self.account
            acc.sublist.remove(sub)
            if acc.imports is not None:
                # Its shadow subscriptions and the response mappings waiting on it.
                acc.imports.sub_removed(sub)
        if self.subs.get(sub.sid) is sub:
            del self.subs[sub.sid]

    def _slow_consumer(self, deadline=False):
        self.broker.stats.slow_consumers += 1
        if deadline:
            log.info("{prefix} - Slow Consumer Detected: WriteDeadline of {d} exceeded with "
                     "{chunks} chunks of {n} total bytes.", prefix=self.log_prefix(),
                     d=format_duration(self.broker.config.write_deadline),
                     chunks=self.pending_chunks, n=self.pending_bytes)
        else:
            log.info("{prefix} - Slow Consumer Detected: MaxPending of {n} Exceeded",
                     prefix=self.log_prefix(), n=self.max_pending)
        self.transport.write(wire.err(ERR_SLOW_CONSUMER))
        self.closed = True
        self.close_reason = "Slow Consumer (Pending Bytes)"
        # Abort: the peer is not reading, so a graceful close would wait forever.
        self.transport.abortConnection()

    # -- timers -------------------------------------------------------------

    def _auth_timeout(self):
        self._auth_call = None
        if not self.connect_received and not self.closed:
            self.send_err(ERR_AUTH_TIMEOUT, close=True, reason="Authentication Timeout")

    def _ping_timer(self):
        self._ping_call = None
        if self.closed:
            return
        cfg = self.broker.config
        now = self.broker.reactor.seconds()
        # (No PING measured yet counts as long ago, as nats-server's zero
        # rttStart: the rtt taken at CONNECT is only a first estimate.)
        need_rtt = (self.rtt == 0 or not self._rtt_start
                    or now - self._rtt_start > RTT_MEASUREMENT_INTERVAL)
        if now - self._last_in < cfg.ping_interval and not need_rtt:
            # Recent traffic proves the client alive: no PING this round.
            pass
        elif self.pings_out + 1 > cfg.ping_max:
            self.broker.stats.stale_connections += 1
            self.send_err(ERR_STALE, close=True, reason="Stale Connection")
            return
        else:
            self.pings_out += 1
            self._rtt_start = now
            self.send(wire.PING)
        self._ping_call = self.broker.reactor.callLater(cfg.ping_interval, self._ping_timer)


# A traced CONNECT: every secret value replaced, as nats-server's trace
# (and whatever its patterns would leak too).
_redact_connect = redact_secrets


def _sub_detail(sub, cid):
    d = {"subject": sub.subject.decode(errors="replace")}
    if sub.queue:
        d["qgroup"] = sub.queue.decode(errors="replace")
    d["sid"] = sub.sid.decode(errors="replace")
    d["msgs"] = sub.delivered
    if sub.max_msgs:
        d["max"] = sub.max_msgs
    d["cid"] = cid
    return d


def _ignore(op):
    pass


_REASONS = {
    P.ERR_MAX_CONTROL_LINE: "Maximum Control Line Exceeded",
    P.ERR_MAX_PAYLOAD: "Maximum Message Payload Exceeded",
}


def _reason_for(msg):
    return _REASONS.get(msg, "Protocol Violation")


class ClientFactory(protocol.Factory):
    """Makes a ClientProtocol per accepted connection."""

    noisy = False

    def __init__(self, broker, authenticator, listener=PLAIN):
        self.broker = broker
        self.authenticator = authenticator
        self.listener = listener

    def buildProtocol(self, addr):
        p = ClientProtocol(self.broker, self.authenticator, self.listener)
        p.factory = self
        return p


# (server, plugin, op code) conflicts already logged: once per server.
_conflicts_logged = set()


def _op_taken(broker, plugin, code, holder):
    """A second plugin claims an op: the first keeps it (silently replacing
    pubsub's PUB would drop every message); say so once."""
    key = (id(broker), plugin.name, code)
    if key in _conflicts_logged:
        return
    _conflicts_logged.add(key)
    held = "the core" if holder is None else "plugin %s" % holder.name
    log.error("plugin {name}: {op} is handled by {held} already; "
              "intercept it with IClientOpFilter instead", name=plugin.name,
              op=P.OP_NAMES.get(code, code), held=held)


def _chain_filters(table, filters):
    """Put each plugin's op filters in front of the op's handler, first
    plugin first. Without an OP_PUBS filter next to every OP_PUB one, runs
    are turned off so that the OP_PUB filters see every PUB."""
    codes = {code for f in filters for code in f}
    if P.OP_PUB in codes and not all(P.OP_PUBS in f for f in filters if P.OP_PUB in f):
        table.pop(P.OP_PUBS, None)
    for code in codes:
        handler = table.get(code)
        if handler is None:
            continue  # (OP_PUBS without runs, or an op no plugin handles)
        for f in reversed(filters):
            op_filter = f.get(code)
            if op_filter is not None:
                handler = _filtered(op_filter, handler)
        table[code] = handler


def _filtered(op_filter, handler):
    def filtered(op):
        op = op_filter(op)
        if op is not None:
            handler(op)
    return filtered
