"""The monitoring documents in nats-server's shape: /varz, /connz, /subsz,
/routez, /gatewayz, /leafz, /accountz, /accstatz, /jsz, /healthz.

The HTTP side (the paths, an index at ``/``, the dashboard) is
natsbroker.monitoring.http, whose ``make_site(broker)`` is the Twisted ``Site``
the server listens with on ``http_port``; /connz's rows are
natsbroker.monitoring.connz, the process facts natsbroker.monitoring.process.
Tools written for nats-server (``nats server report``, Prometheus
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
query (natsbroker.monitoring.http.query_lists). A path the monitor serves itself, or another
plugin took, is refused. A plugin fills a /varz field with
:class:`~natsbroker.interfaces.IVarzSection` (JetStream's ``"jetstream"``
block: nats-server's config/stats/limits shape), takes part in plain
``/healthz`` with :class:`~natsbroker.interfaces.IHealthCheck` (see
:func:`_plugin_health`) and answers /healthz's detailed checks with
:class:`~natsbroker.interfaces.IHealthReport`; see :func:`healthz_status`.
Without a ``jsz`` endpoint of a plugin, ``/jsz`` answers as nats-server does
with JetStream off.
"""

import time
import weakref

from twisted.logger import Logger

from natsbroker import COMPAT_VERSION, _build
from natsbroker.auth.users import raw_auth_user
from natsbroker.connection.tls import cert_not_after
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
from natsbroker.monitoring.connz import (
    GLOBAL_ACCOUNT,
    closed_row,
    open_row,
    owner_cid,
    route_row,
    sort_rows,
    sub_detail,
)
from natsbroker.monitoring.process import (
    CpuSampler,
    config_digest,
    go_seconds,
    nanoseconds,
    num_cpus,
    rss,
    uptime_text,
)
from natsbroker.subjects import sublist as S
from natsbroker.subjects.sublist import is_valid_literal_subject, subject_matches

log = Logger()

# nats-server's defaults for list sizes (DefaultConnListSize, DefaultSubListSize).
DEFAULT_LIMIT = 1024


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

STATE_OPEN, STATE_CLOSED, STATE_ANY = "open", "closed", "any"


# nats-server's /jsz (and JSZ request) with JetStream off: its JSInfo with
# Disabled set, in the field order 2.15 writes.
_JSZ_DISABLED_HEAD = {"memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0,
                      "accounts": 0, "ha_assets": 0, "api": {"level": 0, "total": 0, "errors": 0}}


_MONITORS = weakref.WeakKeyDictionary()


def monitor_for(broker):
    """The broker's :class:`Monitor` (one per broker, shared by the HTTP
    listeners and the system account's requests, as nats-server's counters are)."""
    m = _MONITORS.get(broker)
    if m is None:
        m = _MONITORS[broker] = Monitor(broker)
    return m


# (BadRequest, a bad option, is the plugin API's: natsbroker.interfaces.)


class Monitor:
    """The monitoring documents of one broker, built from options.

    Every method returns a dict in nats-server's field order (ready for
    :func:`encode_json`) or raises :class:`BadRequest` with nats-server's text.
    """

    def __init__(self, broker):
        self.broker = broker
        self.http_req_stats = {}
        self._cpu = CpuSampler()
        self._config_digest = config_digest(broker.config.config_file)
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
            "ping_interval": nanoseconds(cfg.ping_interval),
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
            "tls_timeout": go_seconds(tls.timeout) if tls is not None else DEFAULT_TLS_TIMEOUT,
            "write_deadline": nanoseconds(cfg.write_deadline),
            "start": rfc3339_seconds(b.start_time),
            "now": rfc3339(now_ns),
            "uptime": uptime_text(now_ns / 1e9 - b.start_time),
            "mem": rss(),
            "cores": num_cpus(),
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
            **({"tags": list(b.config.server_tags)} if b.config.server_tags else {}),
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
              cid=0, state=STATE_OPEN, user="", acc="", mqtt_client="", filter_subject=""):
        """nats-server's Connz. ``state`` is "open", "closed", "any" (or None:
        a state nats-server does not know, which lists nothing)."""
        if sort and sort not in _SORTS:
            raise BadRequest("invalid sorting option: %s" % sort)
        offset = max(offset, 0)
        if limit <= 0:
            limit = DEFAULT_LIMIT
        if sort in ("stop", "reason") and state != STATE_CLOSED:
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
        open_clients = list(b.clients()) if state in (STATE_OPEN, STATE_ANY) else []
        closed = list(b.closed_clients) if state in (STATE_CLOSED, STATE_ANY) else []
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

        rows = [open_row(c, now, auth, subs, subs_detail) for c in open_clients]
        rows += [closed_row(s, now, auth, subs, subs_detail) for s in closed]
        rows.sort(key=lambda r: r.cid)
        sort_rows(rows, sort, now)
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
            found.sort(key=lambda x: (owner_cid(x[1]), x[0], x[1].subject, x[1].sid))
            out["total"] = len(found)
            page = found[offset:offset + limit]
            if page:
                out["subscriptions_list"] = [sub_detail(s, account=name) for name, s in page]
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
            "routes": [route_row(r, now, subs) for r in routes],
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
        status = healthz_status(self.broker, opts)
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


def healthz_status(broker, opts):
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


# -- query parameters: natsbroker.gocompat.query decodes them as nats-server's Go code does


# -- responses ----------------------------------------------------------------------




# -- values ------------------------------------------------------------------------


# The helpers plugins reach through IBroker.monitor (the system account's
# documents are written as the endpoints' are; its events carry the same
# process facts).
Monitor.BadRequest = BadRequest
for _name, _helper in [("memory", rss), ("cores", num_cpus),
                      ("subjects_collide", subjects_collide)]:
    setattr(Monitor, _name, staticmethod(_helper))
del _name, _helper
