"""``/metrics``: the monitoring documents in Prometheus' exposition format.

nats-server has no Prometheus endpoint; its users run prometheus-nats-exporter
beside it, which polls /varz, /connz, /jsz ... and republishes them, and the
well-known NATS Grafana dashboards are written against the exporter's series.
This module serves those same series from the broker itself, so a dashboard
pointed at ``http://<host>:<http_port>/metrics`` works unchanged. The names,
help texts, types and labels are the exporter's (v0.20, every collector
switched on, ``-jsz=all``, ``-use_internal_server_id``):

* ``gnatsd_varz_*``, ``gnatsd_subsz_*``: its generic collector - every number
  of the document, nested objects flattened with ``_``, a gauge labelled
  ``server_id``; the string fields ``server_id``, ``server_name``,
  ``version``, ``name``, ``leader``, ``domain`` as a gauge of 1 with a
  ``value`` label, and ``start``/``config_load_time`` in epoch milliseconds;
* ``gnatsd_connz_*`` (the summary, not ``-connz_detailed``),
  ``gnatsd_routez_*``, ``gnatsd_healthz[_js_enabled_only|_js_server_only]_status*``,
  ``gnatsd_accstatz_*``, ``gnatsd_accountz_*``, ``gnatsd_leafz_conn_nodes_total``;
* ``jetstream_server_*``, ``jetstream_account_*``, ``jetstream_stream_*``,
  ``jetstream_consumer_*`` with the exporter's server/account/stream/consumer
  labels (``server_name``, ``cluster``, ``domain``, ``meta_leader``,
  ``is_meta_leader``, ``account``, ``stream_name``, ``consumer_name`` ...).

``server_id`` is the server's own id (the exporter's
``-use_internal_server_id``; by default the exporter would put its scrape URL
there). One deliberate difference: the exporter types the four
``gnatsd_connz_{in,out}_{msgs,bytes}`` sums as counters, but prometheus-client
writes every counter as ``<name>_total`` (OpenMetrics naming), which would
rename the series dashboards query; they are gauges here, as the same
numbers in ``gnatsd_varz_*`` are in the exporter too. The process's own
``process_*`` series (prometheus-client's process collector) come along, as
the exporter's do; Go's ``go_*`` runtime series have nothing to describe here.

Everything is computed when scraped, from the very functions the JSON
endpoints use (:class:`natsbroker.monitoring.endpoints.Monitor` and the JetStream plugin's
``jsz`` endpoint), on the reactor thread: no copies of the numbers, no
background threads.
"""

import gzip
import re
import urllib.parse

from prometheus_client import CollectorRegistry, ProcessCollector, exposition
from prometheus_client.core import GaugeMetricFamily
from twisted.internet import defer
from twisted.logger import Logger
from twisted.web import server

from natsbroker.gocompat.durations import go_seconds, parse_duration
from natsbroker.gocompat.times import NS_PER_SEC, go_parse_rfc3339

log = Logger()

CORE = "gnatsd"          # the exporter's CoreSystem namespace (kept for old dashboards)
JETSTREAM = "jetstream"  # its JetStreamSystem namespace

# What the exporter's ``-jsz=all`` asks /jsz for.
JSZ_QUERY = b"consumers=true&config=true&raft=true"

# The generic collector's rules (collector.go objectToMetrics): flattened
# names it drops, and the only string fields it keeps.
_SKIP = frozenset(("leaf", "trusted_operators_claim", "cluster_tls_timeout",
                   "cluster_cluster_port", "cluster_auth_timeout", "gateway_port",
                   "gateway_auth_timeout", "gateway_tls_timeout", "gateway_connect_retries"))
_LABEL_KEYS = frozenset(("server_id", "server_name", "version", "domain", "leader", "name",
                         "start", "config_load_time"))

_SERVER_LABELS = ("server_id", "server_name", "cluster", "domain", "meta_leader", "is_meta_leader")
_ACCOUNT_LABELS = _SERVER_LABELS + ("account", "account_name", "account_id")
_STREAM_LABELS = _ACCOUNT_LABELS + ("stream_name", "stream_leader", "is_stream_leader",
                                    "stream_raft_group")
_CONSUMER_LABELS = _STREAM_LABELS + ("consumer_name", "consumer_leader", "is_consumer_leader",
                                     "consumer_desc")
_SOURCE_LABELS = _STREAM_LABELS + ("source_name", "source_api", "source_deliver")
_MIRROR_LABELS = _STREAM_LABELS + ("mirror_name", "mirror_api", "mirror_deliver")


def render(monitor, request, query=None):
    """Answer a ``/metrics`` request (a handler of the monitor's
    ``MonitorResource``): gather the documents, then encode as the
    Prometheus client library's own handlers do (content negotiation on
    ``Accept``, gzip when accepted)."""
    finished = []
    request.notifyFinish().addBoth(finished.append)
    d = defer.maybeDeferred(gather, monitor)

    def done(scrape):
        if finished:
            return
        try:
            body = _encode(request, scrape)
        except Exception:
            log.failure("/metrics failed")
            request.setResponseCode(500)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            body = b"Internal Server Error\n"
        request.write(body)
        request.finish()

    def failed(f):
        log.failure("/metrics failed", f)
        if not finished:
            request.setResponseCode(500)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            request.write(b"Internal Server Error\n")
            request.finish()

    d.addCallbacks(done, failed)
    return server.NOT_DONE_YET


def _encode(request, scrape):
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NatsCollector(scrape))
    ProcessCollector(registry=registry)
    accept = (request.getHeader(b"accept") or b"").decode("latin-1")
    encoder, content_type = exposition.choose_encoder(accept)
    body = encoder(registry)
    request.setHeader(b"content-type", content_type.encode("ascii"))
    encoding = (request.getHeader(b"accept-encoding") or b"").decode("latin-1")
    if exposition.gzip_accepted(encoding):
        body = gzip.compress(body)
        request.setHeader(b"content-encoding", b"gzip")
    return body


class Scrape:
    """The documents one scrape is made from (nats-server's JSON shapes)."""

    def __init__(self, server_id, varz, subsz, connz, routez, leafz, healthz, accstatz,
                 accounts, jsz):
        self.server_id = server_id
        self.varz = varz
        self.subsz = subsz
        self.connz = connz
        self.routez = routez
        self.leafz = leafz
        self.healthz = healthz      # {"healthz": ..., "healthz_js_enabled_only": ...}
        self.accstatz = accstatz
        self.accounts = accounts    # [(account id, /accountz?acc= detail)]
        self.jsz = jsz


_HEALTHZ = {
    "healthz": {},
    "healthz_js_enabled_only": {"js-enabled-only": True},
    "healthz_js_server_only": {"js-server-only": True},
}


def gather(monitor):
    """A Deferred firing with the :class:`Scrape` of ``monitor`` now: what the
    exporter would read from each endpoint, with its query options."""
    b = monitor.broker
    healthz = {}
    for name, flags in _HEALTHZ.items():
        opts = {"js-enabled-only": False, "js-server-only": False, "js-meta-only": False,
                "details": False, "account": "", "stream": "", "consumer": ""}
        opts.update(flags)
        healthz[name] = monitor.healthz(opts)
    accounts = []
    for name in monitor.accountz()["accounts"]:
        accounts.append((name, monitor.account_info(name)))
    endpoint = b.monitor_endpoints.get("jsz")
    if endpoint is None:
        jsz = monitor.jsz_disabled()
    else:
        jsz = defer.maybeDeferred(endpoint, _Query(b"/jsz", JSZ_QUERY))
    parts = dict(server_id=b.server_id, varz=monitor.varz(), subsz=monitor.subsz(),
                 connz=monitor.connz(), routez=monitor.routez(), leafz=monitor.leafz(),
                 healthz=healthz, accstatz=monitor.accstatz(include_unused=True),
                 accounts=accounts)
    return defer.maybeDeferred(lambda: jsz).addCallback(lambda j: Scrape(jsz=j, **parts))


class _Query:
    """What a plugin's monitoring handler reads of a request, for asking the
    JetStream plugin's ``/jsz`` as an HTTP client would."""

    method = b"GET"

    def __init__(self, path, query):
        self.path = path
        self.uri = path + b"?" + query
        self.args = {k.encode(): [v.encode()] for k, v in urllib.parse.parse_qsl(query.decode())}

    def getHeader(self, name):
        return None

    def setHeader(self, name, value):
        pass

    def setResponseCode(self, code, message=None):
        pass


class NatsCollector:
    """A prometheus-client collector yielding the exporter's metric families
    from one :class:`Scrape`, sorted by name as Go's registry sorts them."""

    def __init__(self, scrape):
        self.scrape = scrape

    def collect(self):
        families = {}
        sid = self.scrape.server_id
        for builder in (self._varz, self._subsz, self._connz, self._routez, self._leafz,
                        self._healthz, self._accstatz, self._accountz, self._jsz):
            for name, help_text, labels, samples in builder(sid):
                fam = families.get(name)
                if fam is None:
                    fam = families[name] = GaugeMetricFamily(name, help_text, labels=labels)
                for values, value in samples:
                    fam.add_metric(values, value)
        for name in sorted(families):
            fam = families[name]
            fam.samples.sort(key=lambda s: sorted(s.labels.items()))
            yield fam

    # -- the generic collector: /varz, /subsz ------------------------------------

    def _varz(self, sid):
        return _flatten(self.scrape.varz, CORE + "_varz", sid)

    def _subsz(self, sid):
        return _flatten(self.scrape.subsz, CORE + "_subsz", sid)

    # -- connz.go (summary) ----------------------------------------------------

    def _connz(self, sid):
        c = self.scrape.connz
        conns = c.get("connections") or ()
        sums = {k: sum(_num(x.get(k)) for x in conns)
                for k in ("pending_bytes", "subscriptions", "in_bytes", "out_bytes", "in_msgs",
                          "out_msgs")}
        values = [("num_connections", c.get("num_connections")), ("total", c.get("total")),
                  ("offset", c.get("offset")), ("limit", c.get("limit"))]
        values += sorted(sums.items())
        for key, v in values:
            yield "%s_connz_%s" % (CORE, key), key, ["server_id"], [([sid], _num(v))]

    # -- routez.go -------------------------------------------------------------

    def _routez(self, sid):
        r = self.scrape.routez
        p = CORE + "_routez_"
        yield p + "server_id", "server_id", ["server_id", "value"], [
            ([sid, _str(r.get("server_id"))], 1)]
        yield p + "server_name", "server_name", ["server_id", "value"], [
            ([sid, _str(r.get("server_name"))], 1)]
        yield p + "num_routes", "num_routes", ["server_id"], [([sid], _num(r.get("num_routes")))]
        routes = r.get("routes") or ()
        if not routes:
            return
        base = ["server_id", "rid"]
        info, rtt, uptime = [], [], []
        per = {k: [] for k in ("subscriptions", "in_msgs", "out_msgs", "in_bytes", "out_bytes")}
        for route in routes:
            rid = _str(route.get("rid"))
            info.append(([sid, rid, _str(route.get("remote_id")), _str(route.get("remote_name")),
                          _str(route.get("account")), _str(route.get("ip")),
                          _str(route.get("compression"))], 1))
            seconds = _go_duration(route.get("rtt") or "")
            if seconds is not None:
                rtt.append(([sid, rid], seconds))
            seconds = _go_duration(route.get("uptime") or "")
            if seconds is None:
                seconds = _uptime(route.get("uptime") or "")
            if seconds is not None:
                uptime.append(([sid, rid], seconds))
            for k, samples in per.items():
                samples.append(([sid, rid], _num(route.get(k))))
        yield p + "route_info", "route_info", ["server_id", "rid", "remote_id", "remote_name",
                                               "account", "ip", "compression"], info
        if rtt:
            yield p + "route_rtt_seconds", "rtt_seconds", base, rtt
        if uptime:
            yield p + "route_uptime_seconds", "uptime_seconds", base, uptime
        for k, samples in per.items():
            yield p + "route_" + k, k, base, samples

    # -- leafz.go (no leaf node connections here) -------------------------------

    def _leafz(self, sid):
        yield (CORE + "_leafz_conn_nodes_total", "nodes_total", ["server_id"],
               [([sid], _num(self.scrape.leafz.get("leafnodes")))])

    # -- healthz.go: status is 0 when healthy -----------------------------------

    def _healthz(self, sid):
        for endpoint, health in self.scrape.healthz.items():
            ok = health.get("status") == "ok"
            yield "%s_%s_status" % (CORE, endpoint), "status", ["server_id"], [
                ([sid], 0 if ok else 1)]
            yield "%s_%s_status_value" % (CORE, endpoint), "status", ["server_id", "value"], [
                ([sid, _str(health.get("status"))], 1 if ok else 0)]

    # -- accstatz.go (?unused=1) ------------------------------------------------

    def _accstatz(self, sid):
        stats = self.scrape.accstatz.get("account_statz") or ()
        fields = (("current_connections", lambda a: a.get("conns")),
                  ("total_connections", lambda a: a.get("total_conns")),
                  ("subscriptions", lambda a: a.get("num_subscriptions")),
                  ("leaf_nodes", lambda a: a.get("leafnodes")),
                  ("sent_messages", lambda a: (a.get("sent") or {}).get("msgs")),
                  ("sent_bytes", lambda a: (a.get("sent") or {}).get("bytes")),
                  ("received_messages", lambda a: (a.get("received") or {}).get("msgs")),
                  ("received_bytes", lambda a: (a.get("received") or {}).get("bytes")),
                  ("slow_consumers", lambda a: a.get("slow_consumers")))
        labels = ["server_id", "account", "account_id", "account_name"]
        for key, get in fields:
            samples = []
            for a in stats:
                acc = _str(a.get("acc"))
                samples.append(([sid, acc, acc, _str(a.get("name") or acc)], _num(get(a))))
            yield "%s_accstatz_%s" % (CORE, key), key, labels, samples

    # -- accountz.go: /accountz, then /accountz?acc= per account ------------------

    def _accountz(self, sid):
        labels = ["server_id", "account_id", "account_name"]
        states = ("client_connections", "leafnode_connections", "subscriptions", "is_system",
                  "expired", "complete", "jetstream_enabled")
        limits = ("subs", "data", "payload", "imports", "exports", "wildcards", "conn", "leaf")
        out = {k: [] for k in states}
        out.update({"limit_" + k: [] for k in limits})
        for acc_id, d in self.scrape.accounts:
            values = [sid, acc_id, _str(d.get("account_name") or acc_id)]
            for k in states:
                out[k].append((values, _num(d.get(k))))
            # A JWT account's limits; without one they are the zero the
            # exporter reads from nats-server too.
            lim = ((d.get("decoded_jwt") or {}).get("nats") or {}).get("limits") or {}
            for k in limits:
                out["limit_" + k].append((values, _num(lim.get(k))))
        for k, samples in out.items():
            yield "%s_accountz_%s" % (CORE, k), k, labels, samples

    # -- jsz.go (-jsz=all) --------------------------------------------------------

    def _jsz(self, sid):
        j = self.scrape.jsz
        server_name = _str(self.scrape.varz.get("server_name"))
        meta = j.get("meta_cluster")
        if meta is not None:
            cluster, leader = _str(meta.get("name")), _str(meta.get("leader"))
            is_leader = _bool(leader == server_name)
        else:
            cluster, leader, is_leader = "", "", "true"
        config = j.get("config") or {}
        srv = [sid, server_name, cluster, _str(config.get("domain")), leader, is_leader]
        p = JETSTREAM + "_"
        server = (
            ("server_jetstream_disabled", "JetStream disabled or not",
             1 if j.get("disabled") else 0),
            ("server_max_memory", "JetStream Max Memory", config.get("max_memory")),
            ("server_max_storage", "JetStream Max Storage", config.get("max_storage")),
            ("server_total_streams", "Total number of streams in JetStream", j.get("streams")),
            ("server_total_consumers", "Total number of consumers in JetStream",
             j.get("consumers")),
            ("server_total_messages", "Total number of stored messages in JetStream",
             j.get("messages")),
            ("server_total_message_bytes", "Total number of bytes stored in JetStream",
             j.get("bytes")),
        )
        for name, help_text, value in server:
            yield p + name, help_text, list(_SERVER_LABELS), [(srv, _num(value))]

        acc_rows, stream_rows, consumer_rows, source_rows, mirror_rows = {}, {}, {}, {}, {}
        for acc in j.get("account_details") or ():
            name = _str(acc.get("name"))
            a = srv + [name, name, _str(acc.get("id"))]
            for key, field in (("account_max_storage", "reserved_storage"),
                               ("account_max_memory", "reserved_memory"),
                               ("account_storage_used", "storage"),
                               ("account_memory_used", "memory")):
                acc_rows.setdefault(key, []).append((a, _num(acc.get(field))))
            for st in acc.get("stream_detail") or ():
                leader_name = (st.get("cluster") or {}).get("leader")
                s = a + [_str(st.get("name")), _str(leader_name),
                         _bool(leader_name == server_name) if st.get("cluster") is not None
                         else "true", _str(st.get("stream_raft_group"))]
                state = st.get("state") or {}
                for key, field in (("stream_total_messages", "messages"),
                                   ("stream_total_bytes", "bytes"),
                                   ("stream_first_seq", "first_seq"),
                                   ("stream_last_seq", "last_seq"),
                                   ("stream_consumer_count", "consumer_count"),
                                   ("stream_subject_count", "num_subjects")):
                    stream_rows.setdefault(key, []).append((s, _num(state.get(field))))
                scfg = st.get("config")
                if scfg is not None:
                    stream_rows.setdefault("stream_limit_bytes", []).append(
                        (s, _num(scfg.get("max_bytes"))))
                    stream_rows.setdefault("stream_limit_messages", []).append(
                        (s, _num(scfg.get("max_msgs"))))
                for src in st.get("sources") or ():
                    ext = src.get("external") or {}
                    v = s + [_str(src.get("name")), _str(ext.get("api")), _str(ext.get("deliver"))]
                    source_rows.setdefault("stream_source_lag", []).append(
                        (v, _num(src.get("lag"))))
                    source_rows.setdefault("stream_source_active_duration_ns", []).append(
                        (v, _num(src.get("active"))))
                mirror = st.get("mirror")
                if mirror:
                    ext = mirror.get("external") or {}
                    v = s + [_str(mirror.get("name")), _str(ext.get("api")),
                             _str(ext.get("deliver"))]
                    mirror_rows.setdefault("stream_mirror_lag", []).append(
                        (v, _num(mirror.get("lag"))))
                    mirror_rows.setdefault("stream_mirror_active_duration_ns", []).append(
                        (v, _num(mirror.get("active"))))
                for c in st.get("consumer_detail") or ():
                    cleader = (c.get("cluster") or {}).get("leader")
                    v = s + [_str(c.get("name")), _str(cleader),
                             _bool(cleader == server_name) if c.get("cluster") is not None
                             else "true", _str((c.get("config") or {}).get("description"))]
                    delivered = c.get("delivered") or {}
                    ack_floor = c.get("ack_floor") or {}
                    ts = _epoch(c.get("ts"))
                    for key, seq in (("consumer_last_delivery_seconds", delivered),
                                     ("consumer_last_ack_seconds", ack_floor)):
                        last = _epoch(seq.get("last_active"))
                        if ts is not None and last is not None:
                            consumer_rows.setdefault(key, []).append((v, ts - last))
                    for key, value in (
                            ("consumer_delivered_consumer_seq", delivered.get("consumer_seq")),
                            ("consumer_delivered_stream_seq", delivered.get("stream_seq")),
                            ("consumer_num_ack_pending", c.get("num_ack_pending")),
                            ("consumer_num_redelivered", c.get("num_redelivered")),
                            ("consumer_num_waiting", c.get("num_waiting")),
                            ("consumer_num_pending", c.get("num_pending")),
                            ("consumer_ack_floor_stream_seq", ack_floor.get("stream_seq")),
                            ("consumer_ack_floor_consumer_seq", ack_floor.get("consumer_seq"))):
                        consumer_rows.setdefault(key, []).append((v, _num(value)))
        for rows, labels in ((acc_rows, _ACCOUNT_LABELS), (stream_rows, _STREAM_LABELS),
                             (consumer_rows, _CONSUMER_LABELS), (source_rows, _SOURCE_LABELS),
                             (mirror_rows, _MIRROR_LABELS)):
            for key, samples in rows.items():
                yield p + key, JSZ_HELP[key], list(labels), samples


# jsz.go's help texts, verbatim.
JSZ_HELP = {
    "account_max_memory": "JetStream Account Max Memory in bytes",
    "account_max_storage": "JetStream Account Max Storage in bytes",
    "account_storage_used": "Total number of bytes used by JetStream storage",
    "account_memory_used": "Total number of bytes used by JetStream memory",
    "stream_total_messages": "Total number of messages from a stream",
    "stream_limit_messages": "The maximum number of messages allowed in a JetStream stream as "
                             "per its configuration. A value of -1 indicates no limit.",
    "stream_total_bytes": "Total stored bytes from a stream",
    "stream_limit_bytes": "The maximum configured storage limit (in bytes) for a JetStream "
                          "stream. A value of -1 indicates no limit.",
    "stream_first_seq": "First sequence from a stream",
    "stream_last_seq": "Last sequence from a stream",
    "stream_consumer_count": "Total number of consumers from a stream",
    "stream_subject_count": "Total number of subjects in a stream",
    "consumer_delivered_consumer_seq": "Latest sequence number of a stream consumer",
    "consumer_delivered_stream_seq": "Latest sequence number of a stream",
    "consumer_last_delivery_seconds": "Seconds since last message delivery to consumer",
    "consumer_last_ack_seconds": "Seconds since last ack from consumer",
    "consumer_num_ack_pending": "Number of pending acks from a consumer",
    "consumer_num_redelivered": "Number of redelivered messages from a consumer",
    "consumer_num_waiting": "Number of inflight fetch requests from a pull consumer",
    "consumer_num_pending": "Number of pending messages from a consumer",
    "consumer_ack_floor_stream_seq": "Number of ack floor stream seq from a consumer",
    "consumer_ack_floor_consumer_seq": "Number of ack floor consumer seq from a consumer",
    "stream_source_lag": "Number of messages a stream source is behind",
    "stream_source_active_duration_ns": "Stream source active duration in nanoseconds "
                                        "(-1 indicates inactive)",
    "stream_mirror_lag": "Number of messages a stream mirror is behind",
    "stream_mirror_active_duration_ns": "Stream mirror active duration in nanoseconds "
                                        "(-1 indicates inactive)",
}


# -- the generic collector's flattening ---------------------------------------------

def _fq_name(path):
    fqn = "_".join(path).replace("/", "_").strip("_")
    while "__" in fqn:
        fqn = fqn.replace("__", "_")
    return fqn


def _flatten(doc, prefix, sid, path=()):
    """collector.go's objectToMetrics and collectStatsFromRequests over one
    document: ``(name, help, labels, samples)`` per series."""
    for key, value in doc.items():
        p = path + (key,)
        fqn = _fq_name(p)
        if fqn in _SKIP:
            continue
        name = prefix + "_" + fqn
        if isinstance(value, bool) or value is None:
            continue  # Go's JSON booleans are not float64: not exported
        if isinstance(value, (int, float)):
            yield name, fqn, ["server_id"], [([sid], value)]
        elif isinstance(value, str):
            if key not in _LABEL_KEYS:
                continue
            ms = _epoch_ms(value)
            if ms is not None:
                yield name, fqn, ["server_id"], [([sid], ms)]
            else:
                yield name, fqn, ["server_id", "value"], [([sid, value], 1)]
        elif isinstance(value, dict):
            yield from _flatten(value, prefix, sid, p)


# -- value conversions ---------------------------------------------------------------

def _num(v):
    if isinstance(v, bool):
        return 1 if v else 0
    if isinstance(v, (int, float)):
        return v
    return 0


def _str(v):
    return "" if v is None else str(v)


def _bool(b):
    return "true" if b else "false"


def _time_parts(s):
    """``(seconds, nanoseconds)`` since the epoch of an RFC 3339 time (Go's
    RFC3339Nano), or None."""
    if not isinstance(s, str):
        return None
    try:
        ns, _ = go_parse_rfc3339(s)
    except ValueError:
        return None
    return divmod(ns, NS_PER_SEC)


def _epoch(s):
    """Seconds since the epoch of an RFC 3339 time, or None."""
    t = _time_parts(s)
    return None if t is None else t[0] + t[1] / 1e9


def _epoch_ms(s):
    """Go's ``UnixMilli()`` of an RFC 3339 time, or None."""
    t = _time_parts(s)
    return None if t is None else t[0] * 1000 + t[1] // 1000000


def _go_duration(s):
    """Seconds of a Go ``time.Duration`` string ("1.5ms", "2h3m"), or None."""
    if not s:
        return None
    try:
        return go_seconds(parse_duration(s))
    except ValueError:
        return None


_UPTIME = re.compile(r"(?:(\d+)y)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?\Z")


def _uptime(s):
    """Seconds of nats-server's uptime format ("1y2d3h4m5s"), or None."""
    m = _UPTIME.match(s or "")
    if not s or m is None:
        return None
    y, d, h, mi, sec = (int(x or 0) for x in m.groups())
    total = (((y * 365 + d) * 24 + h) * 60 + mi) * 60 + sec
    return float(total) if total else None
