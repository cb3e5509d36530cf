"""HTTP monitoring in nats-server's shape: /varz, /connz, /subsz, /routez,
/gatewayz, /leafz, /accountz, /accstatz, /jsz, /healthz; an index at ``/`` and
a live dashboard at ``/dashboard`` (natsbroker/dashboard).

``make_site(broker)`` returns the Twisted ``Site`` the server listens with on
``http_port``. Tools written for nats-server (``nats server report``, Prometheus
exporters, dashboards) parse these documents, so they follow nats-server
v2.x closely:

* the same JSON field names, in the same order, pretty-printed with a two-space
  indent (``/healthz`` compact), with Go's number and HTML-safe string encoding;
* the same query parameters, defaults and ``400`` error texts (Go's ``strconv``
  messages included), and Go's ``404 page not found`` for unknown paths;
* ``Access-Control-Allow-Origin: *`` on JSON answers. nats-server no longer
  answers JSONP: ``?callback=`` is ignored and plain JSON comes back, and we do
  the same (a caller-named script is a same-origin bypass; CORS covers it).

The documents are built by a :class:`Monitor` (one per broker, see
:func:`monitor_for`) from options, so that the system account's
``$SYS.REQ.SERVER.<id>.<Z>`` requests (natsbroker/system/plugin.py) answer with the very
same data as the HTTP endpoints; the HTTP side only decodes query strings.

Accounts: connections, subscriptions and the per-account statistics belong to
the account of the client (``client.account``); ``/connz`` shows ``account``
(with ``auth``) for accounts other than ``$G`` and filters with ``?acc=``,
``/subsz?acc=`` and ``/accountz?acc=`` look at one account, ``/accstatz``
lists the accounts in use (all with ``?unused=1``).

A field is left out rather than invented when we have nothing true to put in it
(``go``, ``git_commit``, ``gomaxprocs``, ``feature_flags``,
``disk_io_wait_stats``: see :data:`VARZ_OMITTED`). Counters for things this
broker does not have (routes, leaf nodes, stalled producers) are reported as
the zero they truly are.

The subscriptions a plugin makes for itself (the system account plugin's:
nats-server's internal system client and the service imports every account
gets) are not counted or listed: nats-server's own internal subscriptions
differ in number anyway, and what a client made is what the counts are for.
Such a plugin provides :class:`~natsbroker.interfaces.IInternalSubscriptions`;
the one that provides :class:`~natsbroker.interfaces.ISystemEvents` adds its
``system_imports(name)`` / ``system_exports(name)`` to /accountz.

Plugins add endpoints with ``broker.add_monitor_endpoint(path, handler)``:
``handler(request)`` returns a dict (or a Deferred firing with one), served as
JSON at ``/path``; raising ``ValueError`` answers ``400`` with its text, as
nats-server does for bad query parameters. ``request.query`` holds the decoded
query (:func:`query_lists`). A path the monitor serves itself, or another
plugin took, is refused. A plugin fills a /varz field with
:class:`~natsbroker.interfaces.IVarzSection` (JetStream's ``"jetstream"``
block: nats-server's config/stats/limits shape), takes part in plain
``/healthz`` with :class:`~natsbroker.interfaces.IHealthCheck` (see
:func:`_plugin_health`) and answers /healthz's detailed checks with
:class:`~natsbroker.interfaces.IHealthReport`; see :func:`_healthz`.
Without a ``jsz`` endpoint of a plugin, ``/jsz`` answers as nats-server does
with JetStream off.
"""

import hashlib
import os
import sys
import time
import urllib.parse
import weakref

from twisted.internet import defer
from twisted.logger import Logger
from twisted.web import http, resource, server

from natsbroker import COMPAT_VERSION, __version__, _build
from natsbroker.auth.users import NkeyName, raw_auth_user
from natsbroker.connection.tls import cert_not_after
from natsbroker.gocompat.durations import format_duration
from natsbroker.gocompat.gojson import encode_json
from natsbroker.gocompat.query import QueryError, go_bool, go_int, go_uint64, parse_query, query_values
from natsbroker.gocompat.quote import go_quote
from natsbroker.gocompat.times import rfc3339, rfc3339_seconds
from natsbroker.identity import GIT_COMMIT, runtime
from natsbroker.interfaces import (
    BadRequest,
    IAccountJetStream,
    IHealthCheck,
    IHealthReport,
    IInternalSubscriptions,
    ISystemEvents,
    IVarzSection,
)
from natsbroker.monitoring import dashboard, prometheus as metrics
from natsbroker.subjects import sublist as S
from natsbroker.subjects.sublist import is_valid_literal_subject, subject_matches

try:
    import resource as _resource  # the stdlib module (getrusage), not twisted.web's
except ImportError:  # there is no such module on Windows
    _resource = None

log = Logger()

# nats-server's defaults for list sizes (DefaultConnListSize, DefaultSubListSize).
DEFAULT_LIMIT = 1024

# nats-server's global account: connections in it show no "account" in /connz.
GLOBAL_ACCOUNT = "$G"

# nats-server reports its default TLS timeout even when TLS is off.
DEFAULT_TLS_TIMEOUT = 2

# /varz fields of nats-server that we deliberately leave out, and why.
VARZ_OMITTED = {
    "gomaxprocs": "a Go runtime setting; nothing corresponds in Python",
    "feature_flags": "nats-server's internal JetStream feature switches",
    "disk_io_wait_stats": "nats-server's filestore disk I/O throttle, which we do not have",
}

# natsbroker's own /varz fields, which nats-server does not have (last in /varz).
VARZ_OWN = {"natsbroker_build": "which build runs: the compiled hot modules or their sources"}

# Sort options of /connz (nats-server's SortOpt values).
_SORTS = ("cid", "start", "subs", "pending", "msgs_to", "msgs_from", "bytes_to",
          "bytes_from", "last", "idle", "uptime", "stop", "reason", "rtt")

_OPEN, _CLOSED, _ANY = "open", "closed", "any"

# The index page names the endpoints nats-server names (when we serve them),
# in its order; ours follow.
_LABELS = {
    "varz": "General", "jsz": "JetStream", "connz": "Connections",
    "accountz": "Accounts", "accstatz": "Account Stats", "subsz": "Subscriptions",
    "routez": "Routes", "leafz": "LeafNodes", "gatewayz": "Gateways",
    "raftz": "Raft Groups", "healthz": "Health Probe",
    "metrics": "Prometheus Metrics", "dashboard": "Live Dashboard",
}
_INDEX_FIRST = ["varz", "jsz", "connz", "accountz", "accstatz", "subsz", "routez", "leafz",
                "gatewayz"]
_INDEX_LAST = ["healthz", "metrics", "dashboard"]

_DASHBOARD_FILES = "/dashboard/"

# nats-server's /jsz (and JSZ request) with JetStream off: its JSInfo with
# Disabled set, in the field order 2.15 writes.
_JSZ_DISABLED_HEAD = {"memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0,
                      "accounts": 0, "ha_assets": 0, "api": {"level": 0, "total": 0, "errors": 0}}


def make_site(broker):
    """The monitoring ``Site`` for ``broker``."""
    site = _MonitorSite(MonitorResource(broker))
    site.displayTracebacks = False
    site.noisy = False
    return site


_MONITORS = weakref.WeakKeyDictionary()


def monitor_for(broker):
    """The broker's :class:`Monitor` (one per broker, shared by the HTTP
    listeners and the system account's requests, as nats-server's counters are)."""
    m = _MONITORS.get(broker)
    if m is None:
        m = _MONITORS[broker] = Monitor(broker)
    return m


class _MonitorSite(server.Site):
    noisy = False  # no "starting on <port>" line of Twisted's own

    # nats-server does not log monitoring requests; an access log line per
    # scrape would drown the server log, so requests are logged at debug only.
    def log(self, request):
        log.debug("monitor: {method} {uri} {code}",
                  method=request.method.decode("ascii", "replace"),
                  uri=request.uri.decode("ascii", "replace"), code=request.code)


# (BadRequest, a bad option, is the plugin API's: natsbroker.interfaces.)


class Monitor:
    """The monitoring documents of one broker, built from options.

    Every method returns a dict in nats-server's field order (ready for
    :func:`encode_json`) or raises :class:`BadRequest` with nats-server's text.
    """

    def __init__(self, broker):
        self.broker = broker
        self.http_req_stats = {}
        self._cpu = _CpuSampler()
        self._config_digest = _config_digest(broker.config.config_file)
        # Per account: what its closed connections had sent and received
        # (in_msgs, in_bytes, out_msgs, out_bytes), so the account totals
        # keep counting after a client leaves (see retire()).
        self._retired = {}

    # -- accounts --------------------------------------------------------------

    def _hidden(self, acc):
        """Subscriptions /subsz and the counts leave out: those plugins keep
        to themselves (IInternalSubscriptions) and those made with
        ``subscribe(..., hidden=True)``."""
        hidden = []
        for plugin in self.broker.providers(IInternalSubscriptions):
            own = plugin.internal_subscriptions
            if own and own.get(acc.name):
                hidden.extend(own[acc.name])
        made = getattr(acc, "hidden_subscriptions", None)
        if made:
            hidden.extend(made.values())
        return hidden

    def account_clients(self, acc):
        """The open connections of account ``acc``."""
        return [c for c in self.broker.clients() if getattr(c, "account", None) is acc]

    def retire(self, client):
        """Keep a closing connection's counts in its account's totals (the
        system plugin calls this for every closed connection)."""
        acc = getattr(client, "account", None)
        if acc is None:
            return
        t = self._retired.setdefault(acc.name, [0, 0, 0, 0])
        t[0] += client.in_msgs
        t[1] += client.in_bytes
        t[2] += client.out_msgs
        t[3] += client.out_bytes

    def traffic(self, acc):
        """``(in_msgs, in_bytes, out_msgs, out_bytes)`` of the account's
        clients, open and closed (nats-server's account "received"/"sent")."""
        t = list(self._retired.get(acc.name, (0, 0, 0, 0)))
        for c in self.account_clients(acc):
            t[0] += c.in_msgs
            t[1] += c.in_bytes
            t[2] += c.out_msgs
            t[3] += c.out_bytes
        return t

    def subscriptions(self, acc):
        """The account's subscriptions, less the system plugin's own."""
        hidden = self._hidden(acc)
        subs = acc.sublist.all_subscriptions()
        if hidden:
            ids = {id(s) for s in hidden}
            subs = [s for s in subs if id(s) not in ids]
        return subs

    def sub_count(self, acc):
        return acc.sublist.count - sum(1 for s in self._hidden(acc) if not s.closed)

    def sublist_stats(self, accounts):
        """nats-server's SublistStats of ``accounts`` added up as its
        ``SublistStats.add`` does. Our Sublist counts cache misses only; every
        message a client publishes is one match, so the matches of an account
        are taken from what its clients sent (at least its misses)."""
        n = cache = inserts = removes = matches = hits = max_fanout = 0
        fanout_total = samples = 0.0
        for acc in accounts:
            sl = acc.sublist
            hidden = sum(len((p.internal_subscriptions or {}).get(acc.name, ()))
                         for p in self.broker.providers(IInternalSubscriptions))
            n += sl.count - sum(1 for s in self._hidden(acc) if not s.closed)
            inserts += max(sl.inserts - hidden - getattr(acc, "hidden_inserts", 0), 0)
            removes += max(sl.removes - getattr(acc, "hidden_removes", 0), 0)
            cache += sl.cache_size
            m = max(sl.misses, self.traffic(acc)[0])
            matches += m
            hits += m - sl.misses
            max_fanout = max(max_fanout, sl.max_fanout)
            s = getattr(sl, "_fanout_samples", 0)
            fanout_total += sl.avg_fanout * s
            samples += s
        return {
            "num_subscriptions": n,
            "num_cache": cache,
            "num_inserts": inserts,
            "num_removes": removes,
            "num_matches": matches,
            "cache_hit_rate": hits / matches if matches else 0,
            "max_fanout": max_fanout,
            "avg_fanout": fanout_total / samples if samples else 0,
        }

    def jetstream_enabled(self, acc):
        """Whether account ``acc`` has JetStream, as nats-server decides: with
        JetStream on, ``$G`` alone when no other account is configured, else
        the accounts whose config enables it. A plugin that runs JetStream
        (:class:`IAccountJetStream`) says itself."""
        cfg = self.broker.config
        if not cfg.jetstream.enabled:
            return False
        runners = self.broker.providers(IAccountJetStream)
        if runners:
            return any(p.enabled_for(acc.name) for p in runners)
        acfg = getattr(acc, "account_config", None)
        if acfg is not None:
            return acfg.jetstream is not None
        if acc is self.broker.global_account:
            return not any(not a.is_system for a in self.broker.accounts.values()
                           if getattr(a, "account_config", None) is not None)
        return False

    # -- /varz -------------------------------------------------------------------

    def varz(self):
        b = self.broker
        cfg = b.config
        now_ns = time.time_ns()
        stats = b.stats
        sections = self.plugin_varz()
        v = {
            "server_id": b.server_id,
            "server_name": b.server_name,
            "version": COMPAT_VERSION,
            "proto": 1,
        }
        if GIT_COMMIT:
            v["git_commit"] = GIT_COMMIT
        v["go"] = runtime()
        v["host"] = b.host
        v["port"] = b.port
        if cfg.authorization.enabled or any(a.users or a.nkeys for a in cfg.accounts):
            v["auth_required"] = True
        tls = cfg.tls
        if tls is not None and not cfg.allow_non_tls:
            v["tls_required"] = True
        if tls is not None and tls.verify_clients:
            v["tls_verify"] = True
        cluster = getattr(b, "cluster", None)
        if cluster is not None and "connect_urls" in b._info_extra:
            v["connect_urls"] = b._info_extra["connect_urls"]
        v["max_connections"] = cfg.max_connections
        if cfg.max_subscriptions:
            v["max_subscriptions"] = cfg.max_subscriptions
        v.update({
            "ping_interval": _ns(cfg.ping_interval),
            "ping_max": cfg.ping_max,
            # What the server binds the monitor to (server.py: http_host or host).
            "http_host": cfg.http_host or cfg.host,
            "http_port": cfg.http_port,
            "http_base_path": "",
            "https_port": cfg.https_port,
            "auth_timeout": cfg.auth_timeout,
            "max_control_line": cfg.max_control_line,
            "max_payload": cfg.max_payload,
            "max_pending": cfg.max_pending,
            # No clustering, gateways, leaf nodes, MQTT or websockets: nats-server
            # shows these blocks empty when they are not configured.
            "cluster": _cluster_varz(b),
            "gateway": {},
            "leaf": {},
            "mqtt": {},
            "websocket": _websocket_varz(b),
            "jetstream": sections.pop("jetstream", {}),
            "tls_timeout": _seconds(tls.timeout) if tls is not None else DEFAULT_TLS_TIMEOUT,
            "write_deadline": _ns(cfg.write_deadline),
            "start": rfc3339_seconds(b.start_time),
            "now": rfc3339(now_ns),
            "uptime": _uptime(now_ns / 1e9 - b.start_time),
            "mem": _rss(),
            "cores": _cores(),
            "cpu": self.cpu(),
            "connections": b.num_clients,
            "total_connections": stats.total_connections,
            "routes": len(cluster.routes) if cluster is not None else 0,
            "remotes": len(cluster.routes) if cluster is not None else 0,
            "leafnodes": 0,
            # The totals add what routes carried; the client counters do not.
            "in_msgs": stats.in_msgs + (cluster.totals[0] if cluster is not None else 0),
            "in_bytes": stats.in_bytes + (cluster.totals[1] if cluster is not None else 0),
            "in_client_msgs": stats.in_msgs,
            "in_client_bytes": stats.in_bytes,
            "out_msgs": stats.out_msgs + (cluster.totals[2] if cluster is not None else 0),
            "out_bytes": stats.out_bytes + (cluster.totals[3] if cluster is not None else 0),
            "out_client_msgs": stats.out_msgs,
            "out_client_bytes": stats.out_bytes,
            "slow_consumers": stats.slow_consumers,
            "stale_connections": stats.stale_connections,
            # nats-server counts producers it stalled for a slow consumer; we
            # never stall a producer (slow consumers are cut off instead).
            "stalled_clients": 0,
            "subscriptions": self.total_subscriptions(),
            # Go marshals maps with sorted keys.
            "http_req_stats": dict(sorted(self.http_req_stats.items())),
            "config_load_time": rfc3339_seconds(getattr(b, "config_load_time", None) or b.start_time),
            "config_digest": self._config_digest,
            "system_account": b.system_account.name,
            "slow_consumer_stats": {"clients": stats.slow_consumers, "routes": 0,
                                    "gateways": 0, "leafs": 0},
            "stale_connection_stats": {"clients": stats.stale_connections, "routes": 0,
                                       "gateways": 0, "leafs": 0},
        })
        if tls is not None:
            not_after = cert_not_after(tls.cert_file)
            if not_after is not None:
                v["tls_cert_not_after"] = rfc3339_seconds(not_after)
        for field, value in sections.items():  # other plugins' fields, after nats-server's
            v.setdefault(field, value)
        # natsbroker's own field (nats-server has none): compiled build or interpreted.
        v["natsbroker_build"] = _build.info()
        return v

    def cpu(self):
        return self._cpu.percent()

    def total_subscriptions(self):
        return sum(self.sub_count(a) for a in self.broker.accounts.values())

    def active_accounts(self):
        """Accounts with a connection (nats-server's active_accounts)."""
        return len({id(c.account) for c in self.broker.clients()
                    if getattr(c, "account", None) is not None})

    def plugin_varz(self):
        """``{field: value}`` of the /varz fields plugins fill (:class:`IVarzSection`)."""
        return {p.varz_field: p.varz() or {} for p in self.broker.providers(IVarzSection)}

    def jetstream_varz(self):
        """/varz's ``jetstream`` field, ``{}`` when no plugin fills it."""
        return self.plugin_varz().get("jetstream", {})

    # -- /connz ------------------------------------------------------------------

    def connz(self, sort="", auth=False, subs=False, subs_detail=False, offset=0, limit=0,
              cid=0, state=_OPEN, user="", acc="", mqtt_client="", filter_subject=""):
        """nats-server's Connz. ``state`` is "open", "closed", "any" (or None:
        a state nats-server does not know, which lists nothing)."""
        if sort and sort not in _SORTS:
            raise BadRequest("invalid sorting option: %s" % sort)
        offset = max(offset, 0)
        if limit <= 0:
            limit = DEFAULT_LIMIT
        if sort in ("stop", "reason") and state != _CLOSED:
            raise BadRequest("sort by %s only valid on closed connections" % sort)
        if cid > 0:
            limit = 1
        if filter_subject and filter_subject != ">" and not acc:
            raise BadRequest("filter by subject only valid with account filtering")
        if filter_subject == ">":
            filter_subject = ""

        b = self.broker
        now_ns = time.time_ns()
        now = now_ns / 1e9
        if acc and acc not in b.accounts:
            # nats-server returns its Connz half made: no server id, no list.
            return {"server_id": "", "now": rfc3339(now_ns), "num_connections": 0,
                    "total": 0, "offset": offset, "limit": limit, "connections": None}
        open_clients = list(b.clients()) if state in (_OPEN, _ANY) else []
        closed = list(b.closed_clients) if state in (_CLOSED, _ANY) else []
        if acc:
            account = b.accounts[acc]
            open_clients = [c for c in open_clients if getattr(c, "account", None) is account]
            closed = [s for s in closed if s.get("account", GLOBAL_ACCOUNT) == acc]
        total = len(open_clients) + len(closed)

        if cid > 0:
            open_clients = [c for c in open_clients if c.cid == cid]
            closed = [s for s in closed if s.get("cid") == cid]
        else:
            if user:
                # nats-server compares the user name a client sent in CONNECT.
                open_clients = [c for c in open_clients if raw_auth_user(c) == user]
                closed = [s for s in closed if s.get("user") == user]
            if mqtt_client:
                # No MQTT: no connection has an MQTT client id.
                open_clients, closed = [], []
        if filter_subject:
            f = filter_subject.encode()
            open_clients = [c for c in open_clients
                            if any(subjects_collide(f, s.subject) for s in c.subs.values())]

        rows = [_open_row(c, now, auth, subs, subs_detail) for c in open_clients]
        rows += [_closed_row(s, now, auth, subs, subs_detail) for s in closed]
        rows.sort(key=lambda r: r.cid)
        _sort_rows(rows, sort, now)
        page = rows[offset:offset + limit]
        return {
            "server_id": b.server_id,
            "now": rfc3339(now_ns),
            "num_connections": len(page),
            "total": total,
            "offset": offset,
            "limit": limit,
            "connections": [r.info for r in page],
        }

    # -- /subsz ------------------------------------------------------------------

    def subsz(self, subs=False, offset=0, limit=0, test="", acc=""):
        offset = max(offset, 0)
        if limit <= 0:
            limit = DEFAULT_LIMIT
        test_b = test.encode("utf-8")
        if test and not is_valid_literal_subject(test_b):
            raise BadRequest("invalid test subject, must be valid publish subject: %s" % test)
        b = self.broker
        # An account we do not have: nothing, with zero stats (as nats-server).
        accounts = [a for a in b.accounts.values() if not acc or a.name == acc]
        out = {"server_id": b.server_id, "now": rfc3339(time.time_ns())}
        out.update(self.sublist_stats(accounts))
        out.update({"total": 0, "offset": offset, "limit": limit})
        if subs:
            found = [(a.name, s) for a in accounts for s in self.subscriptions(a)
                     if not test or subject_matches(s.subject, test_b)]
            # A stable order, so that offset/limit pages do not overlap.
            found.sort(key=lambda x: (_owner_cid(x[1]), x[0], x[1].subject, x[1].sid))
            out["total"] = len(found)
            page = found[offset:offset + limit]
            if page:
                out["subscriptions_list"] = [_sub_detail(s, account=name) for name, s in page]
        return out

    # -- /routez, /gatewayz, /leafz -------------------------------------------------

    def routez(self, subs=False):
        b = self.broker
        cluster = getattr(b, "cluster", None)
        routes = sorted(cluster.routes.values(), key=lambda r: r.cid) if cluster is not None else []
        now = time.time()
        return {
            "server_id": b.server_id,
            "server_name": b.server_name,
            "now": rfc3339(time.time_ns()),
            "num_routes": len(routes),
            "routes": [_route_row(r, now, subs) for r in routes],
        }

    def gatewayz(self):
        return {"server_id": self.broker.server_id, "now": rfc3339(time.time_ns()),
                "outbound_gateways": {}, "inbound_gateways": {}}

    def leafz(self):
        return {"server_id": self.broker.server_id, "now": rfc3339(time.time_ns()),
                "leafnodes": 0, "leafs": []}

    # -- /healthz ------------------------------------------------------------------

    def healthz(self, opts):
        """nats-server's HealthStatus, with ``status_code`` (the HTTP status)."""
        status = _healthz(self.broker, opts)
        code = status.pop("status_code", None) or (200 if status["status"] == "ok" else 503)
        out = {"status": status.pop("status"), "status_code": code}
        out.update(status)
        return out

    # -- /accountz, /accstatz ------------------------------------------------------

    def accountz(self, acc=""):
        b = self.broker
        out = {"server_id": b.server_id, "now": rfc3339(time.time_ns()),
               "system_account": b.system_account.name}
        if not acc:
            out["accounts"] = list(b.accounts)
            return out
        out["account_detail"] = self.account_info(acc)
        return out

    def account_info(self, name):
        """nats-server's AccountInfo of a configured account."""
        b = self.broker
        acc = b.accounts.get(name)
        if acc is None:
            raise BadRequest("Account %s does not exist" % name)
        speakers = self.broker.providers(ISystemEvents)
        system = speakers[0] if speakers else None
        d = {"account_name": name, "update_time": rfc3339_seconds(b.start_time)}
        if acc.is_system:
            d["is_system"] = True
        d.update({
            "expired": False,
            "complete": True,
            "jetstream_enabled": self.jetstream_enabled(acc),
            "leafnode_connections": 0,
            "client_connections": len(self.account_clients(acc)),
            "subscriptions": self.sub_count(acc),
        })
        mappings = acc.mappings.ext_map() if getattr(acc, "mappings", None) is not None else {}
        if mappings:
            d["mappings"] = mappings
        exports, imports = _config_exports_imports(getattr(acc, "account_config", None))
        if system is not None:
            exports += system.system_exports(name)
            imports += system.system_imports(name)
        if exports:
            d["exports"] = exports
        if imports:
            d["imports"] = imports
        d["name_tag"] = name
        d["sublist_stats"] = self.sublist_stats([acc])
        return d

    def account_stat(self, acc):
        """nats-server's AccountStat (also the body of its account
        connection events)."""
        conns = len(self.account_clients(acc))
        in_msgs, in_bytes, out_msgs, out_bytes = self.traffic(acc)
        return {
            "acc": acc.name,
            "name": acc.name,
            "conns": conns,
            "leafnodes": 0,
            "total_conns": conns,
            "num_subscriptions": self.sub_count(acc),
            "sent": _data_stats(out_msgs, out_bytes),
            "received": _data_stats(in_msgs, in_bytes),
            "slow_consumers": 0,
        }

    def accstatz(self, accounts=(), include_unused=False):
        """nats-server's AccountStatz: the accounts named (all if none) that
        have a connection, or all of them with ``include_unused``."""
        b = self.broker
        if accounts:
            chosen = [b.accounts[n] for n in accounts if n in b.accounts]
        else:
            chosen = list(b.accounts.values())
        stats = [self.account_stat(a) for a in chosen
                 if include_unused or self.account_clients(a)]
        return {"server_id": b.server_id, "now": rfc3339(time.time_ns()),
                "account_statz": stats}

    # -- /jsz --------------------------------------------------------------------

    def jsz_disabled(self):
        """nats-server's /jsz with JetStream off."""
        out = dict(_JSZ_DISABLED_HEAD)
        out["api"] = dict(out["api"])
        out.update({"server_id": self.broker.server_id, "now": rfc3339(time.time_ns()),
                    "disabled": True, "config": {"max_memory": 0, "max_storage": 0},
                    "streams": 0, "consumers": 0, "messages": 0, "bytes": 0, "total": 0})
        return out


def _data_stats(msgs, nbytes):
    zero = {"msgs": 0, "bytes": 0}
    return {"msgs": msgs, "bytes": nbytes, "gateways": dict(zero), "routes": dict(zero),
            "leafs": dict(zero)}


_RESPONSE_TYPES = {"Singleton": "Singleton", "Stream": "Streamed", "Streamed": "Streamed",
                   "Chunked": "Chunked"}


def _config_exports_imports(acfg):
    """An account's configured exports and imports in /accountz's shape
    (nats-server's ExtExport/ExtImport): services before streams."""
    exports, imports = [], []
    if acfg is None:
        return exports, imports
    services = [e for e in acfg.exports if hasattr(e, "response_type")]
    streams = [e for e in acfg.exports if not hasattr(e, "response_type")]
    for e in services:
        x = {"subject": e.subject, "type": "service",
             "response_type": _RESPONSE_TYPES.get(e.response_type, e.response_type)}
        if e.accounts:
            x["approved_accounts"] = list(e.accounts)
        exports.append(x)
    for e in streams:
        x = {"subject": e.subject, "type": "stream"}
        if e.accounts:
            x["approved_accounts"] = list(e.accounts)
        exports.append(x)
    for i in acfg.imports:
        if hasattr(i, "prefix"):  # a stream import
            if i.to:
                local = i.to
            elif i.prefix:
                local = "%s.%s" % (i.prefix, i.subject)
            else:
                local = i.subject
            imports.append({"subject": i.subject, "account": i.account, "local_subject": local,
                            "type": "stream", "invalid": False, "share": False, "tracking": False})
    for i in acfg.imports:
        if not hasattr(i, "prefix"):  # a service import
            to = i.to or i.subject
            imports.append({"subject": i.subject, "account": i.account, "to": to,
                            "local_subject": to, "type": "service", "invalid": False,
                            "share": bool(getattr(i, "share", False)), "tracking": False})
    return exports, imports


def subjects_collide(a, b):
    """nats-server's SubjectsCollide on the bytes of two subjects."""
    return S.subjects_collide(a.decode(errors="replace"), b.decode(errors="replace"))


class MonitorResource(resource.Resource):
    """Every path: nats-server's net/http mux matches whole paths, so do we."""

    isLeaf = True

    def __init__(self, broker):
        super().__init__()
        self.broker = broker
        self.monitor = monitor_for(broker)
        self._builtin = {
            "/": self.root, "/varz": self.varz, "/connz": self.connz,
            "/subsz": self.subsz, "/subscriptionsz": self.subsz,
            "/routez": self.routez, "/gatewayz": self.gatewayz, "/leafz": self.leafz,
            "/accountz": self.accountz, "/accstatz": self.accstatz,
            "/healthz": self.healthz,
            "/metrics": lambda request, query: metrics.render(self.monitor, request),
            "/dashboard": self.dashboard_page,
        }

    @property
    def http_req_stats(self):
        return self.monitor.http_req_stats

    # -- dispatch ---------------------------------------------------------

    def render(self, request):
        # nats-server sends no Server header; neither do we advertise ours.
        request.responseHeaders.removeHeader(b"server")
        # Any method, as nats-server's handlers do not look at it.
        path = urllib.parse.unquote(request.path.decode("utf-8", "replace"))
        if path.startswith(_DASHBOARD_FILES):
            # The page's own files: not endpoints, so not in http_req_stats.
            return _asset(request, dashboard.asset(path[len(_DASHBOARD_FILES):]))
        handler = self._builtin.get(path)
        plugin_handler = None
        if handler is None:
            plugin_handler = self.broker.monitor_endpoints.get(path.strip("/"))
            if plugin_handler is None and path == "/jsz":
                handler = self.jsz_disabled
            elif plugin_handler is None or path != "/" + path.strip("/"):
                return _not_found(request)
        # /subscriptionsz is nats-server's old name for /subsz, counted as /subsz.
        key = "/subsz" if path == "/subscriptionsz" else path
        stats = self.monitor.http_req_stats
        stats[key] = stats.get(key, 0) + 1
        query = query_values(request.uri)
        try:
            if plugin_handler is not None:
                return self._plugin(request, plugin_handler)
            return handler(request, query)
        except (BadRequest, QueryError) as e:
            return _text(request, 400, str(e))

    def _plugin(self, request, handler):
        request.query = query_lists(request)
        try:
            result = handler(request)
        except ValueError as e:
            return _text(request, 400, str(e))
        if not isinstance(result, defer.Deferred):
            return _json(request, result)
        # An endpoint that has to wait (a store to read) answers later.
        finished = []
        request.notifyFinish().addBoth(finished.append)

        def done(value):
            if not finished:
                request.write(_json(request, value))
                request.finish()

        def failed(f):
            if f.check(ValueError):
                body = _text(request, 400, str(f.value))
            else:
                log.failure("monitor endpoint {path} failed", f, path=request.path)
                body = _text(request, 500, "Internal Server Error")
            if not finished:
                request.write(body)
                request.finish()

        result.addCallbacks(done, failed)
        return server.NOT_DONE_YET

    # -- / ------------------------------------------------------------------

    def root(self, request, query):
        names = list(_INDEX_FIRST)
        names += sorted(p for p in self.broker.monitor_endpoints
                        if p not in names and p not in _INDEX_LAST)
        names += _INDEX_LAST
        links = "\n".join(
            "\t<a href=./%s%s>%s<span class=\"endpoint\"> /%s</span></a>"
            % (n, " class=last" if n == names[-1] else "", _html(_LABELS.get(n, n)), _html(n))
            for n in names)
        page = dashboard.index(version=_html(__version__), compat=_html(COMPAT_VERSION),
                               links=links)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return page.encode("utf-8")

    def dashboard_page(self, request, query):
        request.setHeader(b"content-security-policy",
                          dashboard.CONTENT_SECURITY_POLICY.encode("ascii"))
        return _asset(request, dashboard.dashboard())

    # -- the endpoints: query strings decoded in nats-server's order -------------

    def varz(self, request, query):
        return _json(request, self.monitor.varz())

    def connz(self, request, query):
        # Decoded in nats-server's order, so the first bad one is reported.
        sort = query.get("sort", "")
        auth = go_bool(query, "auth")
        subs, detail = _subs(query)
        offset = go_int(query, "offset")
        limit = go_int(query, "limit")
        cid = go_uint64(query, "cid")
        state = _state(query)
        return _json(request, self.monitor.connz(
            sort=sort, auth=auth, subs=subs, subs_detail=detail, offset=offset, limit=limit,
            cid=cid, state=state, user=query.get("user", ""), acc=query.get("acc", ""),
            mqtt_client=query.get("mqtt_client", "")))

    def subsz(self, request, query):
        subs = go_bool(query, "subs")
        offset = go_int(query, "offset")
        limit = go_int(query, "limit")
        return _json(request, self.monitor.subsz(
            subs=subs, offset=offset, limit=limit, test=query.get("test", ""),
            acc=query.get("acc", "")))

    def routez(self, request, query):
        subs, detail = _subs(query)
        return _json(request, self.monitor.routez(subs=subs or detail))

    def gatewayz(self, request, query):
        # nats-server decodes subs before accs; with no gateways neither changes the answer.
        go_bool(query, "subs")
        go_bool(query, "accs")
        return _json(request, self.monitor.gatewayz())

    def leafz(self, request, query):
        go_bool(query, "subs")
        return _json(request, self.monitor.leafz())

    def accountz(self, request, query):
        # (nats-server reads only "acc" here; an unknown one is a 400.)
        return _json(request, self.monitor.accountz(query.get("acc", "")))

    def accstatz(self, request, query):
        # Over HTTP nats-server takes "unused" only (no account filter).
        unused = go_bool(query, "unused")
        return _json(request, self.monitor.accstatz(include_unused=unused))

    def jsz_disabled(self, request, query):
        return _json(request, self.monitor.jsz_disabled())

    def healthz(self, request, query):
        # Every flag is decoded (in nats-server's order) before any is used, so a
        # bad value is a 400 even next to one that decides the answer.
        js_enabled = go_bool(query, "js-enabled")  # deprecated name of js-enabled-only
        opts = {
            "js-enabled-only": go_bool(query, "js-enabled-only") or js_enabled,
            "js-server-only": go_bool(query, "js-server-only"),
            "js-meta-only": go_bool(query, "js-meta-only"),
            "details": go_bool(query, "details"),
            "account": query.get("account", ""),
            "stream": query.get("stream", ""),
            "consumer": query.get("consumer", ""),
        }
        status = _healthz(self.broker, opts)
        code = status.pop("status_code", None) or (200 if status["status"] == "ok" else 503)
        if getattr(self.broker, "lame_duck", False) and code == 500:
            # nats-server warns of every failed check; natsbroker, so far, of this one.
            if "errors" in status:
                log.warn("Healthcheck failed: {n} errors", n=len(status["errors"]))
            else:
                log.warn("Healthcheck failed: {e}", e=go_quote(status.get("error", "")))
        request.setResponseCode(code)
        return _json(request, status, indent=False)


def _healthz(broker, opts):
    """nats-server's health status; the plugins decide their own part.

    nats-server checks the request first, then stops at "ok" when JetStream is
    off. With JetStream on, a plugin must run it (:class:`IAccountJetStream`),
    or JetStream cannot be healthy. Every :class:`IHealthCheck` plugin then
    answers ``healthz(opts)`` (a dict like ``{"status": "ok"}``, with
    ``status_code`` when not 200): the first one not ok decides.
    """
    error = None
    if opts["consumer"] and not opts["stream"]:
        error = '"stream" must not be empty when checking consumer health'
    elif opts["stream"] and not opts["account"]:
        error = '"account" must not be empty when checking stream health'
    if error is not None:
        status = {"status": "error", "status_code": 400}
        if opts["details"]:
            status["errors"] = [{"type": "BAD_REQUEST", "error": error}]
        else:
            status["error"] = error
        return status
    if getattr(broker, "lame_duck", False):
        # nats-server's readyForConnections: lame duck mode closed the listeners.
        closed = ["server"] + (["websocket"] if broker.config.websocket.enabled else [])
        error = "failed to be ready for connections after 1ms: " + ", ".join(closed)
        status = {"status": "error", "status_code": 500}
        if opts["details"]:
            status["errors"] = [{"type": "CONNECTION", "error": error}]
        else:
            status["error"] = error
        return status
    if not any(opts[k] for k in ("js-enabled-only", "js-server-only", "js-meta-only", "account")):
        failed = _plugin_health(broker)
        if failed:
            status = {"status": "unavailable", "status_code": 503}
            if opts["details"]:
                status["errors"] = [{"type": "PLUGIN", "error": e} for e in failed]
            else:
                status["error"] = failed[0]
            return status
    if broker.config.jetstream.enabled and not broker.providers(IAccountJetStream):
        # nats-server's answer when JetStream is configured but not running.
        return {"status": "unavailable", "status_code": 503,
                "error": "JetStream not enabled (10076)"}
    first = None
    for plugin in broker.providers(IHealthReport):
        status = dict(plugin.healthz(opts))
        if status.get("status") != "ok":
            return status
        if first is None:
            first = status
    return first if first is not None else {"status": "ok"}


def _plugin_health(broker):
    """What every IHealthCheck plugin finds wrong, as ``"name: error"`` lines
    (a check that raises counts as failed)."""
    failed = []
    for plugin in broker.providers(IHealthCheck):
        try:
            error = plugin.health_check()
        except Exception as e:
            log.failure("health check of plugin {name} failed", name=plugin.name)
            error = "health check failed: %s" % e
        if error:
            failed.append("%s: %s" % (plugin.name, error))
    return failed


class _Row:
    """One connection of /connz: its JSON, and the raw values sorts compare."""

    __slots__ = ("info", "cid", "start", "last", "stop", "subs", "pending", "in_msgs",
                 "out_msgs", "in_bytes", "out_bytes", "reason", "rtt")

    def __init__(self, info, start, last, stop, rtt=0.0):
        self.info = info
        self.rtt = rtt
        self.cid = info["cid"]
        self.start, self.last, self.stop = start, last, stop
        self.subs = info["subscriptions"]
        self.pending = info["pending_bytes"]
        self.in_msgs, self.out_msgs = info["in_msgs"], info["out_msgs"]
        self.in_bytes, self.out_bytes = info["in_bytes"], info["out_bytes"]
        self.reason = info.get("reason", "")


# Sort keys; nats-server sorts these descending, except where noted below.
_DESCENDING = {
    "subs": lambda r: r.subs,
    "pending": lambda r: r.pending,
    "msgs_to": lambda r: r.out_msgs,
    "msgs_from": lambda r: r.in_msgs,
    "bytes_to": lambda r: r.out_bytes,
    "bytes_from": lambda r: r.in_bytes,
    "last": lambda r: r.last,
    "stop": lambda r: r.stop or 0,
    "rtt": lambda r: r.rtt,
}


def _sort_rows(rows, sort, now):
    # Python's sort is stable: ties keep cid order (Go's sort.Sort does not
    # promise any order for ties).
    if sort in _DESCENDING:
        rows.sort(key=_DESCENDING[sort], reverse=True)
    elif sort == "idle":
        # Most idle first: idle is now - last activity, for closed ones too.
        rows.sort(key=lambda r: now - r.last, reverse=True)
    elif sort == "uptime":
        # Shortest uptime first (ascending, as nats-server's byUptime).
        rows.sort(key=lambda r: (r.stop or now) - r.start)
    elif sort == "reason":
        rows.sort(key=lambda r: r.reason)
    # "", "cid" and "start" (start order is cid order) are already in place.


def _websocket_varz(broker):
    """nats-server's WebsocketOptsVarz: its field order, empty values left out."""
    ws = broker.config.websocket
    if not ws.enabled:
        return {}
    listener = getattr(broker, "websocket", None)  # set by the server once listening
    tls = ws.tls
    v = {
        "host": ws.host,
        "port": listener.port if listener is not None else ws.port,
        "advertise": ws.advertise,
        "no_auth_user": ws.no_auth_user,
        "jwt_cookie": ws.jwt_cookie,
        "handshake_timeout": int(ws.handshake_timeout * 1e9),  # a Go time.Duration
        "auth_timeout": ws.auth_timeout,
        "no_tls": ws.no_tls,
        "tls_map": bool(tls is not None and tls.verify_and_map),
        "tls_pinned_certs": list(tls.pinned_certs) if tls is not None else [],
        "same_origin": ws.same_origin,
        "allowed_origins": list(ws.allowed_origins),
        "compression": ws.compression,
    }
    return {k: x for k, x in v.items() if x}


def _conn_head(cid, ip, port, start, last):
    return {"cid": cid, "kind": "Client", "type": "nats", "ip": ip, "port": port,
            "start": rfc3339_seconds(start), "last_activity": rfc3339_seconds(last)}


def _conn_tail(info, end, start, last, counters, name, lang, version, rtt=0.0):
    # RTT comes from the server's PINGs; "0s" until the first PONG, as nats-server.
    info["rtt"] = go_duration(rtt)
    info["uptime"] = _uptime(end - start)
    info["idle"] = _uptime(end - last)
    info.update(counters)
    # Go's omitempty: absent, not empty.
    if name:
        info["name"] = name
    if lang:
        info["lang"] = lang
    if version:
        info["version"] = version


def _open_row(c, now, auth, subs, detail):
    info = _conn_head(c.cid, c.host, c.port, c.start, c.last_activity)
    if getattr(c, "websocket", None) is not None:
        info["type"] = "websocket"
    _conn_tail(info, now, c.start, c.last_activity, {
        "pending_bytes": c.pending_bytes,
        "in_msgs": c.in_msgs, "out_msgs": c.out_msgs,
        "in_bytes": c.in_bytes, "out_bytes": c.out_bytes,
        "subscriptions": len(c.subs),
    }, c.opts.name, c.opts.lang, c.opts.version, c.rtt)
    tls_fields = getattr(c, "tls_fields", None)
    if tls_fields is not None:
        info.update(tls_fields(auth))
    acc = getattr(c, "account", None)
    acc = acc.name if acc is not None else GLOBAL_ACCOUNT
    user = c.user or raw_auth_user(c)
    if auth and user:
        info["authorized_user"] = user
    if auth and acc != GLOBAL_ACCOUNT:
        # "account" is shown only for accounts other than $G.
        info["account"] = acc
    if c.subs:
        if detail:
            info["subscriptions_list_detail"] = [_sub_detail(s) for s in c.subs.values()]
        elif subs:
            info["subscriptions_list"] = [_str(s.subject) for s in c.subs.values()]
    jwt = getattr(c.opts, "jwt", "")
    if auth and jwt:
        info["jwt"] = jwt
    if auth and isinstance(c.user, NkeyName):
        info["issuer_key"] = acc  # an nkey user's issuer: its account
    if auth:
        info["name_tag"] = acc
    return _Row(info, c.start, c.last_activity, None, c.rtt)


def _closed_row(snap, now, auth, subs, detail):
    start = snap.get("start") or now
    last = snap.get("last_activity") or start
    stop = snap.get("stop") or now
    info = _conn_head(snap.get("cid", 0), snap.get("ip", ""), snap.get("port", 0), start, last)
    info["type"] = snap.get("type", "nats")
    info["stop"] = rfc3339_seconds(stop)
    if snap.get("reason"):
        info["reason"] = snap["reason"]
    # A closed connection's uptime and idle time stop with it.
    _conn_tail(info, stop, start, last, {
        "pending_bytes": snap.get("pending_bytes", 0),
        "in_msgs": snap.get("in_msgs", 0), "out_msgs": snap.get("out_msgs", 0),
        "in_bytes": snap.get("in_bytes", 0), "out_bytes": snap.get("out_bytes", 0),
        "subscriptions": snap.get("subscriptions", 0),
    }, snap.get("name"), snap.get("lang"), snap.get("version"), snap.get("rtt", 0.0))
    info.update(snap.get("tls") or {})
    acc = snap.get("account") or GLOBAL_ACCOUNT
    if auth and snap.get("user"):
        info["authorized_user"] = snap["user"]
    if auth and acc != GLOBAL_ACCOUNT:
        info["account"] = acc
    # A snapshot may carry full subscription details ("subs_detail": dicts in
    # the subscriptions_list_detail shape) or only the subjects ("subjects").
    details = snap.get("subs_detail") or []
    subjects = snap.get("subjects") or [d["subject"] for d in details]
    if detail:
        if details:
            info["subscriptions_list_detail"] = [dict(d) for d in details]
    elif subs and subjects:
        info["subscriptions_list"] = list(subjects)
    if auth and snap.get("nkey"):
        info["issuer_key"] = acc
    if auth and acc != GLOBAL_ACCOUNT:
        # (nats-server tags a closed connection only outside $G)
        info["name_tag"] = acc
    return _Row(info, start, last, stop, snap.get("rtt", 0.0))


def _cluster_varz(b):
    """/varz ``cluster``: nats-server's ClusterOptsVarz (empty when not clustered)."""
    cluster = getattr(b, "cluster", None)
    if cluster is None:
        return {}
    out = {"name": cluster.name, "addr": cluster.host, "cluster_port": cluster.port,
           "auth_timeout": 2}
    if cluster.explicit:
        out["urls"] = [u.text.split("://", 1)[-1].rsplit("@", 1)[-1].rstrip("/") for u in cluster.explicit]
    out["tls_timeout"] = 2
    # No route pooling: one connection per peer, as nats-server's pool_size -1.
    out["pool_size"] = -1
    return out


def _route_row(r, now, subs):
    """One /routez entry (nats-server's RouteInfo, omitempty fields left out)."""
    row = {
        "rid": r.cid, "remote_id": r.remote_id, "remote_name": r.remote_name,
        "did_solicit": r.did_solicit, "is_configured": r.did_solicit and not r.implicit,
        "ip": r.host, "port": r.port,
        "start": rfc3339_seconds(r.start), "last_activity": rfc3339_seconds(r.last_activity),
        "rtt": go_duration(r.rtt), "uptime": _uptime(now - r.start), "idle": _uptime(now - r.last_activity),
        "pending_size": 0,
        "in_msgs": r.in_msgs, "out_msgs": r.out_msgs, "in_bytes": r.in_bytes, "out_bytes": r.out_bytes,
        "subscriptions": r.num_subscriptions(),
    }
    if subs and r.remote_subs:
        row["subscriptions_list"] = [_str(subject) for (_, subject, _) in r.remote_subs]
    row["compression"] = "off"
    return row


def _owner_cid(sub):
    # Internal (plugin) subscriptions have no connection: cid 0.
    return getattr(sub.owner, "cid", 0)


def _sub_detail(sub, account=None):
    d = {}
    if account is not None:
        # /subsz names the account (and its tag); /connz's per-client lists do not.
        d["account"] = account
        d["account_tag"] = account
    d["subject"] = _str(sub.subject)
    if sub.queue:
        d["qgroup"] = _str(sub.queue)
    d["sid"] = _str(sub.sid)
    d["msgs"] = sub.delivered
    if sub.max_msgs:
        d["max"] = sub.max_msgs
    d["cid"] = _owner_cid(sub)
    return d


def _str(b):
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)


# -- query parameters: natsbroker.gocompat.query decodes them as nats-server's Go code does


def query_lists(request):
    """Go's ``r.URL.Query()``: ``{name: [value, ...]}`` from the query string
    only, blank values kept, in order (what a plugin's endpoint gets as
    ``request.query``; the built-in endpoints use each name's first value)."""
    return parse_query(request.uri.partition(b"?")[2])

def _subs(query):
    """``subs``: "detail" (any case) for details, else a boolean for subjects."""
    if query.get("subs", "").lower() == "detail":
        return False, True
    return go_bool(query, "subs"), False


def _state(query):
    s = query.get("state", "")
    if s == "":
        return _OPEN
    low = s.lower()
    if low in ("open", "closed"):
        return low
    if low in ("any", "all"):
        return _ANY
    raise BadRequest("Error decoding state for %s" % s)


# -- responses ----------------------------------------------------------------------

def _json(request, value, indent=True):
    request.setHeader(b"content-type", b"application/json")
    request.setHeader(b"access-control-allow-origin", b"*")
    return encode_json(value, indent).encode("utf-8")


def _text(request, code, message):
    # Go's http.Error-less error path: WriteHeader + Write, sniffed as text.
    request.setResponseCode(code)
    request.setHeader(b"content-type", b"text/plain; charset=utf-8")
    return message.encode("utf-8")


def _not_found(request):
    # Go's http.NotFound.
    request.setResponseCode(404)
    request.setHeader(b"content-type", b"text/plain; charset=utf-8")
    request.setHeader(b"x-content-type-options", b"nosniff")
    return b"404 page not found\n"


def _html(s):
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def _asset(request, asset):
    """A file of the dashboard (see natsbroker.monitoring.dashboard), revalidated by ETag."""
    if asset is None:
        return _not_found(request)
    # Always revalidated: an upgraded broker serves new files at the same URLs.
    request.setHeader(b"cache-control", b"no-cache")
    request.setHeader(b"x-content-type-options", b"nosniff")
    if request.setETag(asset.etag.encode("ascii")) == http.CACHED:
        return b""
    request.setHeader(b"content-type", asset.content_type.encode("ascii"))
    return asset.body


# -- JSON as Go's encoding/json writes it: natsbroker.gocompat.gojson.encode_json


# -- values ------------------------------------------------------------------------

def go_duration(seconds):
    """Go's time.Duration.String() of a float number of seconds."""
    return format_duration(int(round(seconds * 1e9)))


def _ns(seconds):
    """Seconds -> nanoseconds (Go's time.Duration in JSON)."""
    return int(round(seconds * 1e9))


def _uptime(seconds):
    """nats-server's myUptime: whole seconds as "1y2d3h4m5s", leading zero units dropped."""
    s = max(int(seconds), 0)
    m, h, d = s // 60, s // 3600, s // 86400
    y = d // 365
    if y:
        return "%dy%dd%dh%dm%ds" % (y, d % 365, h % 24, m % 60, s % 60)
    if d:
        return "%dd%dh%dm%ds" % (d, h % 24, m % 60, s % 60)
    if h:
        return "%dh%dm%ds" % (h, m % 60, s % 60)
    if m:
        return "%dm%ds" % (m, s % 60)
    return "%ds" % s


def _rss():
    """Resident set size in bytes (nats-server's "mem")."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    if _resource is None:
        return 0
    # Not Linux: the peak RSS is the best the platform offers (bytes on macOS, KiB elsewhere).
    peak = _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _cores():
    # Go's runtime.NumCPU counts the CPUs this process may run on.
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class _CpuSampler:
    """CPU use in percent of one core, like nats-server's "cpu".

    nats-server samples once a second in the background; we sample when asked,
    at most once a second, and report the use since the previous sample.
    """

    def __init__(self):
        self._wall = time.monotonic()
        self._cpu = _cpu_seconds()
        self._pcpu = 0.0

    def percent(self):
        wall = time.monotonic()
        if wall - self._wall >= 1.0:
            cpu = _cpu_seconds()
            self._pcpu = round((cpu - self._cpu) / (wall - self._wall) * 100, 1)
            self._wall, self._cpu = wall, cpu
        return self._pcpu


def _cpu_seconds():
    t = os.times()
    return t.user + t.system


def _config_digest(path):
    """"sha256:<hex>" of the config file's bytes as loaded; "" without one.

    nats-server digests its parsed configuration, so the values differ; both
    change exactly when the configuration file does.
    """
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            return "sha256:" + hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return ""


def _seconds(value):
    # A Go float64 of whole seconds marshals without a fraction (2, not 2.0).
    return int(value) if float(value).is_integer() else value


# -- for the system account plugin (the same values its events carry) ------------------

def memory():
    """The resident set size in bytes (nats-server's "mem")."""
    return _rss()


def cores():
    """CPUs this process may run on (nats-server's "cores")."""
    return _cores()


# The helpers plugins reach through IBroker.monitor (the system account's
# documents are written as the endpoints' are).
Monitor.BadRequest = BadRequest
for _name, _helper in [("memory", memory), ("cores", cores),
                      ("subjects_collide", subjects_collide)]:
    setattr(Monitor, _name, staticmethod(_helper))
del _name, _helper
