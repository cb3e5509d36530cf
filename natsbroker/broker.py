"""The Broker: connections, the Sublist, message routing and the plugin registry.

Routing is the hot path (PUB -> MSG): one cached Sublist match, then one
``deliver`` per subscription, each of which appends a ready frame to the
subscriber's output list. Output is written once per reactor turn: the
protocol flushes after each read, and internal publishes schedule one flush.
"""

import collections
import itertools
import os
import time

from twisted.logger import Logger
from zope.interface import implementer

from natsbroker import COMPAT_VERSION, JS_API_LEVEL
from natsbroker.accounts.account import DEFAULT_SYSTEM_ACCOUNT, GLOBAL_ACCOUNT, Account, InternalSink  # noqa: F401
from natsbroker.accounts.imports import wire as wire_imports
from natsbroker.cluster.jsforward import install as install_js_forwarding
from natsbroker.identity import GIT_COMMIT, ServerKeys, runtime
from natsbroker.interfaces import IAccountObserver, IBroker
from natsbroker.monitoring.endpoints import monitor_for
from natsbroker.ratelog import RateLimitedLog

log = Logger()

RUNTIME = runtime()



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


# The store directory when neither store_dir nor -sd gives one (relative to
# the working directory).
DEFAULT_STORE_DIR = "data"

# The monitoring port's own endpoints (natsbroker.monitoring.endpoints): no
# plugin may add one of these paths.
BUILTIN_MONITOR_PATHS = frozenset([
    "", "varz", "connz", "subsz", "subscriptionsz", "routez", "gatewayz", "leafz",
    "accountz", "accstatz", "healthz", "raftz", "metrics", "dashboard"])


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
        self._account_observers = []
        self._dirty = []
        self._flush_call = None
        self._depth = 0
        self.shutting_down = False
        # The client whose message is being routed right now (None: internal).
        self.route_source = None
        # True while an internal request() is routed (IBroker.serving_request).
        self.route_request = False
        # Recently closed connections for /connz?state=closed (nats-server keeps 10k).
        self.closed_clients = collections.deque(maxlen=10000)
        # Where clients reach us; filled in by the server once listening.
        self.port = config.port
        self.host = config.host
        # The route table (natsbroker.cluster.routes.Cluster) when clustered.
        self.cluster = None
        self._setup_accounts(config)
        # JWT operator mode: user JWTs, accounts from a resolver (a plugin of
        # its own, started first).
        self.operator = None
        if config.operator_mode:
            from natsbroker.auth.jwt.operator import OperatorMode
            self.operator = OperatorMode(self, config)
            self.add_plugin(self.operator)

    # -- accounts --------------------------------------------------------

    def _setup_accounts(self, config):
        """``$G``, the configured accounts, and the system account (nats-server
        always has one: ``$SYS`` unless ``system_account`` names another)."""
        self.accounts = {}
        self.global_account = gacc = Account(self, GLOBAL_ACCOUNT, mappings=config.mappings)
        self.accounts[GLOBAL_ACCOUNT] = gacc
        system = config.system_account or DEFAULT_SYSTEM_ACCOUNT
        for acfg in config.accounts:
            self.accounts[acfg.name] = Account(self, acfg.name, acfg, acfg.mappings,
                                               is_system=acfg.name == system)
        if system not in self.accounts:
            self.accounts[system] = Account(self, system, is_system=True)
        self.system_account = self.accounts[system]
        # The global account's Sublist and mappings are the broker's own (the
        # IBroker calls made on the broker act in $G).
        self.sublist = gacc.sublist
        self.mappings = gacc.mappings
        self.publish = gacc.publish
        self.request = gacc.request
        self.serving_request = gacc.serving_request
        self.deliver = gacc.deliver
        self.subscribe = gacc.subscribe
        self.unsubscribe = gacc.unsubscribe
        self.route_run = gacc.route_run
        # Exports and imports, once every account exists (None: there are none).
        self.cross_account = wire_imports(self)

    # The broker acts in $G (IBroker): what an account says of itself, $G says.

    @property
    def name(self):
        return self.global_account.name

    @property
    def is_system(self):
        return self.global_account.is_system

    @property
    def account_config(self):
        return self.global_account.account_config

    @property
    def imports(self):
        return self.global_account.imports

    @property
    def monitor(self):
        """The monitoring documents (IBroker.monitor), one per broker."""
        return monitor_for(self)

    def add_account(self, name, mappings=None, is_system=False):
        """Make account ``name`` at run time (operator mode: when a user of
        it first logs in); returns it (the existing one if there is one)."""
        acc = self.accounts.get(name)
        if acc is None:
            acc = self.accounts[name] = Account(self, name, mappings=mappings, is_system=is_system)
            if self.cluster is not None:
                self.cluster.watch_account(acc)
            self.account_event("account_added", acc)
        return acc

    def account_event(self, event, acc):
        """Tell the started IAccountObserver plugins: ``event`` is
        ``account_added``, ``account_updated`` or ``account_removed``."""
        for plugin in self._account_observers:
            try:
                getattr(plugin, event)(acc)
            except Exception:
                log.failure("plugin {name} failed on {event} {account}", name=plugin.name,
                            event=event, account=acc.name)

    def account(self, name):
        """The account called ``name`` (an IBroker view of it), or ``None``."""
        return self.accounts.get(name)

    def lookup_account(self, name):
        """The account called ``name``, or in operator mode the one made from
        its JWT if the resolver has it, or ``None`` (IBroker.lookup_account)."""
        acc = self.accounts.get(name)
        if acc is None and self.operator is not None:
            jacc, _ = self.operator.lookup_account(name)
            acc = jacc.account if jacc is not None else None
        return acc

    def route(self, source, subject, reply, hdr_len, raw):
        """Route in the publishing client's account (``$G`` for an internal
        publish); clients' own PUBs go to their account's route directly."""
        acc = source.account if source is not None else self.global_account
        return acc.route(source, subject, reply, hdr_len, raw)

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

    def plugin_started(self, plugin):
        """``plugin`` has started: from now on it hears of accounts (if an
        IAccountObserver), beginning with those there are."""
        if IAccountObserver.providedBy(plugin) and plugin not in self._account_observers:
            self._account_observers.append(plugin)
            for acc in list(self.accounts.values()):
                plugin.account_added(acc)

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

    def forward_jetstream(self):
        """IBroker.forward_jetstream (natsbroker.cluster.jsforward)."""
        return [acc.name for acc in install_js_forwarding(self, force=True)]

    def store_path(self, name):
        """``<store_dir>/<name>``, absolute (IBroker.store_path)."""
        if not name or name in (".", "..") or os.sep in name or (os.altsep and os.altsep in name):
            raise ValueError("store directory name %r is not one path component" % (name,))
        root = self.config.jetstream.store_dir or os.path.join(os.getcwd(), DEFAULT_STORE_DIR)
        return os.path.join(os.path.abspath(root), name)

    def add_monitor_endpoint(self, path, handler):
        name = path.strip("/")
        if name in BUILTIN_MONITOR_PATHS or name in self.monitor_endpoints:
            # (served by the monitor or another plugin: it would never be reached)
            raise ValueError("monitor endpoint /%s is taken" % name)
        self.monitor_endpoints[name] = handler

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
        # (Users of the accounts block require auth as much as the authorization block's.)
        auth_on = cfg.authorization.enabled or any(a.users or a.nkeys for a in cfg.accounts)
        if (auth_on and not no_auth) or (ws is not None and ws.auth_override) or (
                self.operator is not None):
            fields["auth_required"] = True
        listener = getattr(client, "listener_info", None)
        if listener:
            fields.update(listener)  # tls_required / tls_verify / tls_available
        # (A JWT user's INFO after CONNECT says its own limit.)
        fields["max_payload"] = getattr(client, "max_payload", None) if connect_info else None
        if fields["max_payload"] is None:
            fields["max_payload"] = cfg.max_payload
        fields.update(self._info_extra)
        if ws is not None:
            # WebSocket clients are told the cluster's WebSocket URLs instead
            # (nats-server's generateClientInfoJSON), when there are any.
            fields.pop("connect_urls", None)
            ws_urls = getattr(self.cluster, "ws_urls", None)
            if ws_urls and "connect_urls" in self._info_extra:
                fields["connect_urls"] = list(ws_urls)
        if client is not None:
            fields["client_id"] = client.cid
            fields["client_ip"] = client.host
            nonce = getattr(client, "nonce", "")
            if nonce and not connect_info:
                fields["nonce"] = nonce  # to sign, for nkey users
        if connect_info:
            # The INFO that follows the first PONG confirms the account.
            fields["connect_info"] = True
            acc = getattr(client, "account", None) or self.global_account
            fields["remote_account"] = acc.name
            if acc.is_system:
                fields["acc_is_sys"] = True
        domain = cfg.jetstream.domain if cfg.jetstream.enabled else ""
        if domain:
            fields["domain"] = domain
        fields["api_lvl"] = JS_API_LEVEL
        fields["xkey"] = self.keys.xkey
        return _in_info_order(fields)

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

    internal_publishes = 0


