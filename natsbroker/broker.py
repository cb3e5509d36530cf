"""The Broker: connections, the Sublist, message routing and the plugin registry.

Routing is the hot path (PUB -> MSG): one cached Sublist match, then one
``deliver`` per subscription, each of which appends a ready frame to the
subscriber's output list. Output is written once per reactor turn: the
protocol flushes after each read, and internal publishes schedule one flush.
"""

import collections
import itertools
import time

from twisted.logger import Logger
from zope.interface import implementer

from natsbroker import COMPAT_VERSION, JS_API_LEVEL
from natsbroker.identity import GIT_COMMIT, ServerKeys, runtime
from natsbroker.ratelog import RateLimitedLog
from natsbroker.interfaces import IBroker, IMessageSink
from natsbroker.mapping import SubjectMappings
from natsbroker.protocol import wire
from natsbroker.subjects import Subscription, Sublist, subject_matches

log = Logger()

RUNTIME = runtime()

# The no-responders status nats-server sends back to a requester.
_NO_RESPONDERS = b"NATS/1.0 503\r\nNats-Subject: %s\r\n\r\n"


# nats-server's Info struct order; keys it does not know (a plugin's
# add_info_field) follow them.
INFO_ORDER = (
    "server_id", "server_name", "version", "proto", "git_commit", "go", "host", "port",
    "headers", "auth_required", "tls_required", "tls_verify", "tls_available",
    "max_payload", "jetstream", "ip", "client_id", "client_ip", "nonce", "cluster",
    "cluster_dynamic", "domain", "connect_urls", "ws_connect_urls", "ldm", "compression",
    "connect_info", "remote_account", "acc_is_sys", "api_lvl", "xkey",
)
_INFO_RANK = {k: i for i, k in enumerate(INFO_ORDER)}


def _in_info_order(fields):
    n = len(INFO_ORDER)
    return dict(sorted(fields.items(), key=lambda kv: _INFO_RANK.get(kv[0], n)))


class Stats:
    """Server-wide counters.

    Message and byte counts live on each connection (one increment on the
    hot path instead of two); the totals here add the live connections to what
    closed connections had counted.
    """

    def __init__(self, broker):
        self._broker = broker
        self.closed_in_msgs = self.closed_in_bytes = 0
        self.closed_out_msgs = self.closed_out_bytes = 0
        self.slow_consumers = 0
        self.stale_connections = 0
        self.total_connections = 0

    def _sum(self, attr):
        return sum(getattr(c, attr) for c in self._broker.clients())

    @property
    def in_msgs(self):
        return self.closed_in_msgs + self._sum("in_msgs")

    @property
    def in_bytes(self):
        return self.closed_in_bytes + self._sum("in_bytes")

    @property
    def out_msgs(self):
        return self.closed_out_msgs + self._sum("out_msgs")

    @property
    def out_bytes(self):
        return self.closed_out_bytes + self._sum("out_bytes")

    def retire(self, client):
        """Keep a closing connection's counts in the totals."""
        self.closed_in_msgs += client.in_msgs
        self.closed_in_bytes += client.in_bytes
        self.closed_out_msgs += client.out_msgs
        self.closed_out_bytes += client.out_bytes


@implementer(IMessageSink)
class InternalSink:
    """Delivers to a plugin's callback: the owner of internal subscriptions."""

    __slots__ = ("callback",)

    def __init__(self, callback):
        self.callback = callback

    def deliver(self, sub, subject, reply, hdr_len, raw):
        try:
            self.callback(sub, subject, reply, hdr_len, raw)
        except Exception:
            # A plugin's fault is logged; it never reaches the publishing
            # client's connection nor the other subscribers of the subject.
            log.failure("plugin subscription {sub}: delivery of {subject} failed",
                        sub=sub.subject.decode(errors="replace"),
                        subject=subject.decode(errors="replace"))


@implementer(IBroker)
class Broker:
    """Shared state of one server; plugins see it through IBroker."""

    def __init__(self, config, reactor=None):
        if reactor is None:
            from twisted.internet import reactor
        self.reactor = reactor
        self.config = config
        self.keys = ServerKeys()
        # Failed logins and permission violations, bounded per second.
        self.security_log = RateLimitedLog(self.reactor)
        self.server_id = self.keys.server_id
        self.server_name = config.server_name or self.server_id
        self.sublist = Sublist()
        # The Sublist's cache, read directly on the PUB path (a hit costs one
        # dict lookup instead of a method call).
        self._match_cache = self.sublist.cache
        self.stats = Stats(self)
        # (raw, reply, tail) of the last MSG frame built: a fan-out builds
        # the part after the sid once for all subscribers.
        self.msg_memo = [None, None, None, None, None]
        self.start_time = time.time()
        self._clients = {}
        self._cids = itertools.count(1)
        self._info_extra = {}
        self.monitor_endpoints = {}
        self._plugins = []
        self._by_name = {}
        self._dirty = []
        self._flush_call = None
        self._depth = 0
        self._internal_sids = itertools.count(1)
        self.shutting_down = False
        # The client whose message is being routed right now (None: internal).
        self.route_source = None
        # Recently closed connections for /connz?state=closed (nats-server keeps 10k).
        self.closed_clients = collections.deque(maxlen=10000)
        # Where clients reach us; filled in by the server once listening.
        self.port = config.port
        self.host = config.host
        # Subject mappings: only when some are configured does route() look
        # the subject up first, so without them a publish costs nothing more.
        self.mappings = None
        mappings = getattr(config, "mappings", None)
        if mappings:
            self.mappings = SubjectMappings(mappings, config.cluster.name)
            self._mapped = self.mappings.cache
            self.route = self._route_mapped

    # -- plugins ---------------------------------------------------------

    def add_plugin(self, plugin):
        self._plugins.append(plugin)
        self._by_name[plugin.name] = plugin

    @property
    def plugins(self):
        return tuple(self._plugins)

    def plugin(self, name):
        return self._by_name.get(name)

    def providers(self, iface):
        return [p for p in self._plugins if iface.providedBy(p)]

    # -- clients ---------------------------------------------------------

    def next_cid(self):
        return next(self._cids)

    def register(self, client):
        self._clients[client.cid] = client
        self.stats.total_connections += 1

    def unregister(self, client):
        if self._clients.pop(client.cid, None) is not None:
            self.stats.retire(client)

    def clients(self):
        return self._clients.values()

    @property
    def num_clients(self):
        return len(self._clients)

    def add_info_field(self, key, value):
        self._info_extra[key] = value

    def add_monitor_endpoint(self, path, handler):
        self.monitor_endpoints[path.strip("/")] = handler

    def info_fields(self, client=None, connect_info=False):
        """INFO for a new client, fields in nats-server's order (its ``Info``
        struct), ``omitempty`` ones only when set."""
        cfg = self.config
        fields = {
            "server_id": self.server_id,
            "server_name": self.server_name,
            "version": COMPAT_VERSION,
            "proto": 1,
        }
        if GIT_COMMIT:
            fields["git_commit"] = GIT_COMMIT
        fields["go"] = RUNTIME
        fields["host"] = self.host
        fields["port"] = self.port
        fields["headers"] = True
        ws = getattr(client, "websocket", None)
        if ws is not None:
            # A WebSocket client is told the WebSocket listener's address, and
            # the websocket block's own auth counts (as in nats-server).
            fields["host"], fields["port"] = ws.host, ws.port
        # As nats-server: a no_auth_user lets clients in without credentials,
        # so the first INFO does not ask for them (the update after CONNECT,
        # made from the server's own INFO, does; a WebSocket client's INFO
        # always does).
        no_auth = cfg.no_auth_user and not connect_info and ws is None
        if (cfg.authorization.enabled and not no_auth) or (ws is not None and ws.auth_override):
            fields["auth_required"] = True
        listener = getattr(client, "listener_info", None)
        if listener:
            fields.update(listener)  # tls_required / tls_verify / tls_available
        fields["max_payload"] = cfg.max_payload
        fields.update(self._info_extra)
        if client is not None:
            fields["client_id"] = client.cid
            fields["client_ip"] = client.host
            nonce = getattr(client, "nonce", "")
            if nonce and not connect_info:
                fields["nonce"] = nonce  # to sign, for nkey users
        if connect_info:
            # The INFO that follows the first PONG confirms the account.
            fields["connect_info"] = True
            fields["remote_account"] = "$G"
        domain = cfg.jetstream.domain if cfg.jetstream.enabled else ""
        if domain:
            fields["domain"] = domain
        fields["api_lvl"] = JS_API_LEVEL
        fields["xkey"] = self.keys.xkey
        return _in_info_order(fields)

    # -- routing ---------------------------------------------------------

    def route(self, source, subject, reply, hdr_len, raw):
        self.route_source = source
        r = self._match_cache.get(subject)
        if r is None:
            r = self.sublist.match(subject)
        psubs, qgroups = r
        if not psubs and not qgroups:
            if reply and source is not None and source.no_responders:
                self._no_responders(source, subject, reply)
            return 0
        n = 0
        no_echo = source is not None and not source.echo
        for sub in psubs:
            owner = sub.owner
            if no_echo and owner is source:
                continue
            owner.deliver(sub, subject, reply, hdr_len, raw)
            n += 1
        for group in qgroups:
            sub = self._pick(group, source if no_echo else None)
            if sub is not None:
                sub.owner.deliver(sub, subject, reply, hdr_len, raw)
                n += 1
        return n

    def _route_mapped(self, source, subject, reply, hdr_len, raw):
        """route() with mappings: the message goes on under the subject its
        mapping picks (as nats-server: mapped once, before matching; the
        reply subject is left alone)."""
        dest = self._mapped.get(subject)
        if dest is None:
            dest = self.mappings.resolve(subject)
        if dest.__class__ is not bytes:
            dest = dest.pick(subject)  # weighted or random: per message
            if dest.__class__ is not bytes:
                # Mapped to no valid subject: no one gets it.
                self.route_source = source
                if reply and source is not None and source.no_responders:
                    self._no_responders(source, dest.subject, reply)
                return 0
        # The rest is route() again, on purpose: a call per message is what
        # repeating it saves.
        self.route_source = source
        r = self._match_cache.get(dest)
        if r is None:
            r = self.sublist.match(dest)
        psubs, qgroups = r
        if not psubs and not qgroups:
            if reply and source is not None and source.no_responders:
                self._no_responders(source, dest, reply)
            return 0
        n = 0
        no_echo = source is not None and not source.echo
        for sub in psubs:
            owner = sub.owner
            if no_echo and owner is source:
                continue
            owner.deliver(sub, dest, reply, hdr_len, raw)
            n += 1
        for group in qgroups:
            sub = self._pick(group, source if no_echo else None)
            if sub is not None:
                sub.owner.deliver(sub, dest, reply, hdr_len, raw)
                n += 1
        return n

    _rr = 0

    def _pick(self, group, skip_owner):
        # Rotate through members so each gets an even share.
        size = len(group)
        self._rr += 1
        start = self._rr % size
        for i in range(size):
            sub = group[(start + i) % size]
            if skip_owner is None or sub.owner is not skip_owner:
                return sub
        return None

    def _no_responders(self, source, subject, reply):
        # Only the requester's own subscription to its reply subject gets it.
        for sub in source.subs.values():
            if subject_matches(sub.subject, reply):
                raw = _NO_RESPONDERS % subject
                source.deliver(sub, reply, None, len(raw), raw)
                return

    # -- output ----------------------------------------------------------

    def mark_dirty(self, client):
        self._dirty.append(client)
        if self._depth == 0 and self._flush_call is None:
            self._flush_call = self.reactor.callLater(0, self._scheduled_flush)

    def _scheduled_flush(self):
        self._flush_call = None
        self.flush()

    def begin(self):
        """Enter a batch (a read being processed): flushes wait for :meth:`end`."""
        self._depth += 1

    def end(self):
        self._depth -= 1
        if self._depth == 0:
            self.flush()

    def flush(self):
        dirty = self._dirty
        if not dirty:
            return
        self._dirty = []
        for client in dirty:
            client.flush()

    # -- internal pub/sub (the plugin API) --------------------------------

    def match_stats(self):
        """``(matches, cache_hits)`` of the Sublist for /subsz.

        Every routed message is one match; counting them from the message
        counters keeps an increment off the PUB path.
        """
        matches = self.stats.in_msgs + self.internal_publishes
        misses = self.sublist.misses
        return max(matches, misses), max(matches - misses, 0)

    internal_publishes = 0

    def publish(self, subject, payload, reply=None, headers=None):
        self.internal_publishes += 1
        subject = _b(subject)
        reply = _b(reply) if reply else None
        payload = _b(payload)
        if headers is None:
            hdr_len, raw = 0, payload
        else:
            block = headers if isinstance(headers, bytes) else wire.encode_headers(headers)
            hdr_len, raw = len(block), block + payload
        return self.route(None, subject, reply, hdr_len, raw)

    def deliver(self, dest, subject, payload, reply=None, headers=None):
        """Publish internally to the subscribers of ``dest``, with ``subject``
        on the MSG line (JetStream delivers a stored message to a consumer's
        inbox under the subject it was stored with). Returns the count reached."""
        self.internal_publishes += 1
        if headers is None:
            hdr_len, raw = 0, payload
        else:
            hdr_len, raw = len(headers), headers + payload
        self.route_source = None
        r = self._match_cache.get(dest)
        if r is None:
            r = self.sublist.match(dest)
        psubs, qgroups = r
        n = 0
        for sub in psubs:
            sub.owner.deliver(sub, subject, reply, hdr_len, raw)
            n += 1
        for group in qgroups:
            sub = self._pick(group, None)
            if sub is not None:
                sub.owner.deliver(sub, subject, reply, hdr_len, raw)
                n += 1
        return n

    def subscribe(self, subject, callback, queue=None):
        sid = b"i%d" % next(self._internal_sids)
        sub = Subscription(_b(subject), sid, InternalSink(callback),
                           _b(queue) if queue else None)
        self.sublist.insert(sub)
        return sub

    def unsubscribe(self, sub):
        if not sub.closed:
            sub.closed = True
            self.sublist.remove(sub)



def _b(v):
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    return str(v).encode()
