"""The Twisted Protocol for one route (a connection to another server of the
cluster): a thin adapter, as the client Protocol is.

It feeds bytes to the sans-IO route parser and hands each op to the cluster
(natsbroker.cluster.routes), which owns the route table, interest and gossip. What
is per connection stays here: the CONNECT/INFO handshake checks, PING/PONG,
the output queue flushed once per turn (:mod:`.outqueue`, as a client's), and
a peer's remote interest, held as subscriptions owned by this route (a
:class:`RouteSink` per account) in the accounts' own Sublists, so that
``Account.route`` stays the one routing path.
"""

import random
import time

from twisted.internet import protocol
from twisted.internet.interfaces import IHandshakeListener
from twisted.logger import Logger
from zope.interface import implementer

from natsbroker import jsonbound
from natsbroker.auth.permissions import ResolvedPermissions
from natsbroker.connection.client import ConnectOptions
from natsbroker.connection.outqueue import OutputQueue
from natsbroker.connection.tls import describe_handshake_error
from natsbroker.gocompat.quote import go_quote
from natsbroker.protocol import route_parser as R, wire
from natsbroker.protocol.redact import redact_secrets
from natsbroker.subjects.sublist import Subscription

log = Logger()

ERR_AUTH_VIOLATION = "Authorization Violation"
ERR_CLIENT_ON_ROUTE_PORT = "attempted to connect to route port"
ERR_STALE = "Stale Connection"
ERR_AUTH_TIMEOUT = "Authentication Timeout"

# The most members a peer's queue group weight stands for here (a peer may
# claim up to 999,999,999).
MAX_QUEUE_MEMBERS = 1024

# nats-server's firstPingInterval, and the cap on a route's ping interval.
FIRST_PING_INTERVAL = 1.0
MAX_ROUTE_PING_INTERVAL = 30.0


class RouteSink:
    """Owner of one peer's interest in one account: what a match hands it is
    sent to the peer as RMSG/HMSG.

    A message is sent once per route however many of the peer's
    subscriptions it matches; the queue groups for which one of the peer's
    members was picked are listed on it (``+ reply q1 q2`` / ``| q1 q2``), so
    the frame already queued is rewritten when a group picks the peer after
    its plain interest matched. One hop: a message that came from a route is
    never sent on to another (``broker.route_source`` is its origin)."""

    __slots__ = ("route", "account", "acc_bytes", "_key", "_at", "_out", "_queues")
    # Another server: a delivery shown under another subject (a JetStream
    # consumer's) comes here addressed to its deliver subject (IMessageSink).
    remote = True

    def __init__(self, route, account):
        self.route = route
        self.account = account
        self.acc_bytes = account.name.encode()
        self._key = None
        self._at = 0
        self._out = None
        self._queues = None

    def deliver(self, sub, subject, reply, hdr_len, raw):
        route = self.route
        if route.closed:
            return False
        broker = route.broker
        src = broker.route_source
        if src is None:
            key = (None, broker.internal_publishes, subject, reply)
        elif src.__class__ is RouteProtocol:
            return False  # one hop: routed messages go to local clients only
        else:
            key = (src, src.in_msgs, subject, reply)
        q = sub.queue
        perms = route.route_perms
        if perms is not None and sub.subject in perms.wildcard_subs and perms.delivery_denied(subject, q):
            return False  # not exported to this peer (cluster permissions)
        out = route._out
        if key == self._key and out is self._out:
            # The same message again: another subscription of the peer, or
            # a queue group that picked the peer's member.
            if q is not None and q not in self._queues:
                self._queues.append(q)
                out[self._at] = self._frame(subject, reply, hdr_len, raw)
            return True
        self._key = key
        self._queues = [q] if q is not None else []
        self._out = out
        self._at = len(out)
        out.append(self._frame(subject, reply, hdr_len, raw))
        route.out_msgs += 1
        route.out_bytes += len(raw)
        if not route._dirty:
            route._dirty = True
            broker.mark_dirty(route)
        return True

    def _frame(self, subject, reply, hdr_len, raw):
        if hdr_len and not self.route.headers:
            # A peer without headers gets the payload alone (nats-server strips them).
            raw, hdr_len = raw[hdr_len:], 0
        queues = self._queues
        if queues:
            mid = (b"+ " + reply + b" " if reply else b"| ") + b" ".join(queues) + b" "
        else:
            mid = reply + b" " if reply else b""
        if hdr_len:
            return b"HMSG %s %s %s%d %d\r\n%s\r\n" % (self.acc_bytes, subject, mid, hdr_len, len(raw), raw)
        return b"RMSG %s %s %s%d\r\n%s\r\n" % (self.acc_bytes, subject, mid, len(raw), raw)


@implementer(IHandshakeListener)
class RouteProtocol(OutputQueue, protocol.Protocol):
    """One route connection, accepted (``url`` None) or solicited.

    With cluster TLS the connection is wrapped in Twisted's TLS layer and
    nothing is said before the handshake is done (TLS first, both ways)."""

    # What plugins read off ``broker.route_source`` for a routed message.
    is_route = True
    echo = True
    no_responders = False
    user = None
    permissions = None
    verbose = False

    def __init__(self, cluster, url=None, implicit=False):
        self.cluster = cluster
        self.broker = cluster.broker
        self.url = url  # a RouteURL when we dialed
        self.did_solicit = url is not None
        self.implicit = implicit
        self.parser = R.RouteParser(cluster.max_control_line)
        self.trace = self.broker.config.trace
        self.cid = 0
        self.host = ""
        self.port = 0
        self.start = time.time()
        self.last_activity = self.start
        self.closed = False
        self.close_reason = ""
        self.no_reconnect = False
        self.connect_received = False
        self.registered = False
        self.remote_id = ""
        self.remote_name = ""
        self.remote_info = {}
        self.headers = True
        self.opts = ConnectOptions(verbose=False, pedantic=False)
        self.account = self.broker.global_account
        # The cluster's import/export permissions, compiled for this route
        # (its own caches and delivery filter); None: everything passes.
        # (Not ``permissions``: that is what a routed message's publisher
        # may do, and a route's messages are not checked here.)
        perms = cluster.permissions
        self.route_perms = ResolvedPermissions(perms) if perms is not None else None
        self.subs = {}
        # (account name, subject, queue) -> the subscriptions standing for
        # it: one for plain interest, ``weight`` copies for a queue group (so
        # that picking a member is proportional, as nats-server's sublist
        # repeats a remote queue sub qw times).
        self.remote_subs = {}
        self.sinks = {}
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self.pings_out = 0
        self.rtt = 0.0
        self._rtt_start = 0.0
        self._ping_call = None
        self._auth_call = None
        self._tls_call = None
        self.tls_pending = False
        self.init_output()
        self._dispatch = {
            R.OP_INFO: self._on_info, R.OP_CONNECT: self._on_connect,
            R.OP_PING: self._on_ping, R.OP_PONG: self._on_pong, R.OP_OK: _ignore,
            R.OP_ERR: self._on_err, R.OP_RSUB: self._on_rsub, R.OP_RUNSUB: self._on_runsub,
            R.OP_RMSG: self._on_rmsg, R.OP_ERROR: self._on_error,
        }

    def __repr__(self):
        return "<Route rid:%d %s>" % (self.cid, self.remote_name or self.remote_id or "?")

    # -- lifecycle --------------------------------------------------------------

    def connectionMade(self):
        peer = self.transport.getPeer()
        self.host = getattr(peer, "host", "")
        self.port = getattr(peer, "port", 0)
        self.cid = self.broker.next_cid()
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if set_no_delay is not None:
            try:
                set_no_delay(True)
            except OSError:
                pass
        cluster = self.cluster
        cluster.connections.add(self)
        if cluster.tls is not None:
            # The handshake first; a peer that does not finish it in time is
            # dropped (nats-server's tls timeout for routes).
            self.tls_pending = True
            self._tls_call = self.broker.reactor.callLater(cluster.tls.timeout, self._tls_timeout)
            return
        self._start()

    def handshakeCompleted(self):
        """IHandshakeListener: the TLS session is up; now the route protocol."""
        self.tls_pending = False
        self._cancel("_tls_call")
        if not self.closed:
            self._start()
            self.flush()

    def _tls_timeout(self):
        self._tls_call = None
        if self.tls_pending and not self.closed:
            h = self.transport.getHost()
            self._tls_failed("read tcp %s:%s->%s: i/o timeout" % (h.host, h.port, self._peer()))
            # A plain close of the socket under the unfinished TLS session.
            getattr(self.transport, "transport", self.transport).loseConnection()

    def _tls_failed(self, why):
        log.error("{peer} - rid:{rid} - TLS route handshake error: {why}", peer=self._peer(),
                  rid=self.cid, why=why)
        self.tls_pending = False
        self.closed = True
        self.close_reason = "TLS Handshake Failure"

    def _start(self):
        cluster = self.cluster
        if self.did_solicit:
            # CONNECT first, then our INFO at once: no pool and no
            # compression, so nothing to wait for (nats-server does the same
            # with pool_size -1 and compression off).
            self.send(cluster.connect_line(self.url))
            self.send(wire.info(cluster.route_info()))
            self.connect_received = True  # (the acceptor's check, not ours)
        else:
            self.send(wire.info(cluster.route_info()))
            if cluster.username:
                # CONNECT (with the credentials) must come within the auth timeout.
                self._auth_call = self.broker.reactor.callLater(cluster.auth_timeout, self._auth_timeout)
        # Without compression to negotiate, nats-server starts a route's PINGs
        # as soon as it exists: a peer that never speaks is found stale too.
        self.start_pings()
        self.flush()

    def _auth_timeout(self):
        self._auth_call = None
        if not self.connect_received and not self.closed:
            log.debug("{peer} - rid:{rid} - Authentication Timeout", peer=self._peer(), rid=self.cid)
            self.close("Authentication Timeout", ERR_AUTH_TIMEOUT)

    def _cancel(self, name):
        call = getattr(self, name)
        if call is not None and call.active():
            call.cancel()
        setattr(self, name, None)

    def connectionLost(self, reason=None):
        if self.tls_pending and not self.closed:
            why = describe_handshake_error(reason)
            if "proxy request" in why:  # plaintext where a ClientHello belongs
                why = "tls: first record does not look like a TLS handshake"
            self._tls_failed(why)
        self.closed = True
        if not self.close_reason:
            self.close_reason = "Client Closed"
        for name in ("_ping_call", "_auth_call", "_tls_call"):
            self._cancel(name)
        self._out = []
        self.cluster.route_closed(self)

    def close(self, reason, err=None):
        if self.closed:
            return
        if err is not None:
            self.send(wire.err(err))
        self.flush()
        self.closed = True
        self.close_reason = reason
        self.transport.loseConnection()

    # -- input ------------------------------------------------------------------

    def dataReceived(self, data):
        if self.closed:
            return
        self.last_activity = time.time()
        ops = self.parser.feed(data)
        if not ops:
            return
        if self.trace:
            self._trace_in(ops)
        b = self.broker
        b.begin()
        try:
            dispatch = self._dispatch
            for op in ops:
                if not self.connect_received and op[0] != R.OP_CONNECT:
                    # The acceptor needs CONNECT first, as nats-server.
                    self.close("Authentication Failure", ERR_AUTH_VIOLATION)
                    break
                dispatch[op[0]](op)
                if self.closed:
                    break
        finally:
            b.route_source = None
            b.end()

    def _trace_in(self, ops):
        # -V: what the peer sent, in nats-server's route trace shape.
        for op in ops:
            code = op[0]
            if code == R.OP_ERROR:
                continue
            if code == R.OP_RSUB:
                _, origin, acc, subject, queue, weight = op
                fields = [b"LS+" if origin else b"RS+", origin, acc, subject, queue,
                          b"%d" % weight if queue else None]
            elif code == R.OP_RUNSUB:
                fields = [b"RS-"] + list(op[2:])
            elif code == R.OP_RMSG:
                _, origin, acc, subject, reply, queues, hdr_len, raw = op
                mid = ([b"+", reply] if reply else [b"|"]) + list(queues) if queues else [reply]
                sizes = [b"%d" % hdr_len, b"%d" % len(raw)] if hdr_len else [b"%d" % len(raw)]
                name = b"LMSG" if origin else (b"HMSG" if hdr_len else b"RMSG")
                fields = [name, origin, acc, subject] + mid + sizes
            elif code == R.OP_CONNECT:
                # The password never reaches the log, as nats-server's trace.
                fields = [b"CONNECT", redact_secrets(op[1])]
            else:
                fields = [R.OP_NAMES[code].encode()] + list(op[1:])
            text = b" ".join(f for f in fields if f is not None).decode(errors="replace")
            self._trace("<<- [%s]" % text)
            if code == R.OP_RMSG:
                self._trace("<<- MSG_PAYLOAD: [%s]" % go_quote(op[-1][:128]))

    def _trace(self, text):
        log.debug("{peer} - rid:{rid} - {text}", peer=self._peer(), rid=self.cid,
                  text=text, nats_trace=True)  # unquoted, as nats-server

    def _on_error(self, op):
        self.close("Protocol Violation", op[1])

    def _on_connect(self, op):
        if self.did_solicit:
            return
        try:
            data = jsonbound.loads(op[1])
        except ValueError:
            self.close("Protocol Violation")
            return
        if not isinstance(data, dict):
            self.close("Protocol Violation")
            return
        if not self.cluster.authorized(data):
            # Before anything else, as nats-server's processConnect.
            user = data.get("user")
            log.error("{peer} - rid:{rid} - authentication error{who}", peer=self._peer(), rid=self.cid,
                      who=' - User "%s"' % user if user else "")
            self.close("Authentication Failure", ERR_AUTH_VIOLATION)
            return
        if data.get("lang"):
            # A client dialed the route port.
            self.close("Protocol Violation", ERR_CLIENT_ON_ROUTE_PORT)
            return
        gateway = data.get("gateway")
        if gateway:
            self.close("Protocol Violation",
                       'Rejecting connection from gateway "%s" on the Route port' % gateway)
            return
        why = self.cluster.check_connect(data)
        if why is not None:
            self.close("Cluster Name Conflict", why)
            return
        self.headers = bool(data.get("headers", False))
        self.opts.name = str(data.get("name") or "")
        self.connect_received = True
        self._cancel("_auth_call")

    def _on_info(self, op):
        try:
            info = jsonbound.loads(op[1])
        except ValueError:
            self.close("Protocol Violation")
            return
        if not isinstance(info, dict):
            self.close("Protocol Violation")
            return
        if not self.registered:
            self.cluster.first_info(self, info)
        else:
            self.cluster.async_info(self, info)

    def _on_ping(self, op):
        self.send(wire.PONG)

    def _on_pong(self, op):
        self.pings_out = 0
        if self._rtt_start:
            self.rtt = max(self.broker.reactor.seconds() - self._rtt_start, 1e-9)

    def _on_err(self, op):
        # nats-server closes a route that says -ERR (processErr). A pooled
        # nats-server's dedicated $SYS route attempt ends this way every
        # time it meets a peer without a pool: expected, so not an error.
        text = op[1].decode(errors="replace")
        level = log.debug if "Not possible to have a dedicated route" in text else log.error
        level("{peer} - rid:{rid} - Route Error {err}", peer=self._peer(), rid=self.cid, err=text)
        self.close("Parse Error")

    def _on_rsub(self, op):
        _, origin, acc, subject, queue, weight = op
        self.cluster.remote_sub(self, acc, subject, queue, weight)

    def _on_runsub(self, op):
        _, origin, acc, subject, queue = op
        self.cluster.remote_unsub(self, acc, subject, queue)

    def _on_rmsg(self, op):
        _, origin, acc, subject, reply, queues, hdr_len, raw = op
        self.in_msgs += 1
        self.in_bytes += len(raw)
        self.cluster.routed_msg(self, acc, subject, reply, queues, hdr_len, raw)

    # -- remote interest ----------------------------------------------------------

    # -- cluster permissions (nats-server's canImport / canExport) ------------------

    def can_import(self, subject):
        """Is our interest in ``subject`` told to the peer (RS+/RS-)? The
        import permission, checked as a publish."""
        perms = self.route_perms
        return perms is None or perms.can_publish(subject)

    def can_export(self, subject, queue):
        """Is the peer's RS+ for ``subject`` taken (and so are messages sent
        to it)? The export permission, checked as a subscribe of the subject
        alone. A wildcard interest overlapping an export deny entry has what
        it receives filtered (see RouteSink.deliver)."""
        perms = self.route_perms
        if perms is None:
            return True
        if not perms.can_subscribe(subject):
            return False
        if perms.checks_deliveries(subject):
            # Refusals must reach the router: a queue group then picks
            # another member.
            for acc in self.broker.accounts.values():
                acc.count_deliveries()
        return True

    def sink(self, account):
        s = self.sinks.get(account.name)
        if s is None:
            s = self.sinks[account.name] = RouteSink(self, account)
        return s

    def set_interest(self, account, subject, queue, weight):
        """The peer's interest in ``subject`` [``queue``] of ``account`` is
        now ``weight`` members (plain interest: 1); 0 removes it."""
        # A member per unit of weight, up to a bound: nats-server keeps one
        # sub and repeats it at match time, so a 9-digit weight costs it a
        # big match result; here it would cost that many objects at once.
        weight = min(weight, MAX_QUEUE_MEMBERS)
        key = (account.name, subject, queue)
        subs = self.remote_subs.get(key)
        if subs is None:
            if weight <= 0:
                return
            subs = self.remote_subs[key] = []
        sink = self.sink(account)
        sublist = account.sublist
        while len(subs) < weight:
            sub = Subscription(subject, b"", sink, queue)
            subs.append(sub)
            sublist.insert(sub)
        while len(subs) > weight:
            sub = subs.pop()
            sub.closed = True
            sublist.remove(sub)
        if not subs:
            del self.remote_subs[key]

    def drop_interest(self):
        """Take every remote subscription of this route out of the Sublists."""
        accounts = self.broker.accounts
        for (acc_name, _, _), subs in self.remote_subs.items():
            acc = accounts.get(acc_name)
            if acc is None:
                continue
            for sub in subs:
                sub.closed = True
                acc.sublist.remove(sub)
        self.remote_subs = {}

    def num_subscriptions(self):
        return len(self.remote_subs)

    # -- keepalive --------------------------------------------------------------

    def start_pings(self):
        if self._ping_call is not None or self.closed:
            return
        # nats-server's first route PING comes after ~1 s (or the ping
        # interval if shorter), + up to 20% jitter.
        delay = min(self.cluster.ping_interval, FIRST_PING_INTERVAL) * (1 + random.random() * 0.2)
        self._ping_call = self.broker.reactor.callLater(delay, self._ping_timer)

    def _ping_timer(self):
        self._ping_call = None
        if self.closed:
            return
        cluster = self.cluster
        if self.pings_out + 1 > cluster.ping_max:
            self.broker.stats.stale_connections += 1
            self.close("Stale Connection", ERR_STALE)
            return
        self.pings_out += 1
        self._rtt_start = self.broker.reactor.seconds()
        self.send(wire.PING)
        self._ping_call = self.broker.reactor.callLater(cluster.ping_interval, self._ping_timer)

    def _peer(self):
        return "%s:%s" % (self.host, self.port)


def _ignore(op):
    pass


class RouteFactory(protocol.Factory):
    """Accepted routes (the cluster port)."""

    noisy = False

    def __init__(self, cluster):
        self.cluster = cluster

    def buildProtocol(self, addr):
        p = RouteProtocol(self.cluster)
        p.factory = self
        return p
