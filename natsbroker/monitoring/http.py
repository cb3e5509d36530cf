"""The monitoring port: nats-server's HTTP paths over Twisted Web, their query
options, and the responses as Go's net/http writes them."""

import urllib.parse

from twisted.internet import defer
from twisted.logger import Logger
from twisted.web import http, resource, server

from natsbroker import COMPAT_VERSION, __version__
from natsbroker.gocompat.gojson import encode_json
from natsbroker.gocompat.query import QueryError, go_bool, go_int, go_uint64, parse_query, query_values
from natsbroker.gocompat.quote import go_quote
from natsbroker.interfaces import BadRequest, IRaftGroups
from natsbroker.monitoring import dashboard, prometheus as metrics
from natsbroker.monitoring.endpoints import STATE_ANY, STATE_OPEN, healthz_status, monitor_for

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
                "gatewayz", "raftz"]
_INDEX_LAST = ["healthz", "metrics", "dashboard"]

_DASHBOARD_FILES = "/dashboard/"

log = Logger()


def make_site(broker):
    """The monitoring ``Site`` for ``broker``."""
    site = MonitorSite(MonitorResource(broker))
    site.displayTracebacks = False
    site.noisy = False
    return site


class MonitorSite(server.Site):
    noisy = False  # no "starting on <port>" line of Twisted's own

    # nats-server does not log monitoring requests; an access log line per
    # scrape would drown the server log, so requests are logged at debug only.
    def log(self, request):
        log.debug("monitor: {method} {uri} {code}",
                  method=request.method.decode("ascii", "replace"),
                  uri=request.uri.decode("ascii", "replace"), code=request.code)


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
            "/healthz": self.healthz, "/raftz": self.raftz,
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
            return asset_response(request, dashboard.asset(path[len(_DASHBOARD_FILES):]))
        handler = self._builtin.get(path)
        plugin_handler = None
        if handler is None:
            plugin_handler = self.broker.monitor_endpoints.get(path.strip("/"))
            if plugin_handler is None and path == "/jsz":
                handler = self.jsz_disabled
            elif plugin_handler is None or path != "/" + path.strip("/"):
                return not_found(request)
        # /subscriptionsz is nats-server's old name for /subsz, counted as /subsz.
        key = "/subsz" if path == "/subscriptionsz" else path
        if key != "/raftz":  # (nats-server's HandleRaftz counts nothing)
            stats = self.monitor.http_req_stats
            stats[key] = stats.get(key, 0) + 1
        query = query_values(request.uri)
        try:
            if plugin_handler is not None:
                return self._plugin(request, plugin_handler)
            return handler(request, query)
        except (BadRequest, QueryError) as e:
            return text_response(request, 400, str(e))

    def _plugin(self, request, handler):
        request.query = query_lists(request)
        try:
            result = handler(request)
        except ValueError as e:
            return text_response(request, 400, str(e))
        if not isinstance(result, defer.Deferred):
            return json_response(request, result)
        # An endpoint that has to wait (a store to read) answers later.
        finished = []
        request.notifyFinish().addBoth(finished.append)

        def done(value):
            if not finished:
                request.write(json_response(request, value))
                request.finish()

        def failed(f):
            if f.check(ValueError):
                body = text_response(request, 400, str(f.value))
            else:
                log.failure("monitor endpoint {path} failed", f, path=request.path)
                body = text_response(request, 500, "Internal Server Error")
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
            % (n, " class=last" if n == names[-1] else "", html_escape(_LABELS.get(n, n)), html_escape(n))
            for n in names)
        page = dashboard.index(version=html_escape(__version__), compat=html_escape(COMPAT_VERSION),
                               links=links)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return page.encode("utf-8")

    def dashboard_page(self, request, query):
        request.setHeader(b"content-security-policy",
                          dashboard.CONTENT_SECURITY_POLICY.encode("ascii"))
        return asset_response(request, dashboard.dashboard())

    # -- the endpoints: query strings decoded in nats-server's order -------------

    def varz(self, request, query):
        return json_response(request, self.monitor.varz())

    def connz(self, request, query):
        # Decoded in nats-server's order, so the first bad one is reported.
        sort = query.get("sort", "")
        auth = go_bool(query, "auth")
        subs, detail = subs_option(query)
        offset = go_int(query, "offset")
        limit = go_int(query, "limit")
        cid = go_uint64(query, "cid")
        state = state_option(query)
        return json_response(request, self.monitor.connz(
            sort=sort, auth=auth, subs=subs, subs_detail=detail, offset=offset, limit=limit,
            cid=cid, state=state, user=query.get("user", ""), acc=query.get("acc", ""),
            mqtt_client=query.get("mqtt_client", "")))

    def subsz(self, request, query):
        subs = go_bool(query, "subs")
        offset = go_int(query, "offset")
        limit = go_int(query, "limit")
        return json_response(request, self.monitor.subsz(
            subs=subs, offset=offset, limit=limit, test=query.get("test", ""),
            acc=query.get("acc", "")))

    def routez(self, request, query):
        subs, detail = subs_option(query)
        return json_response(request, self.monitor.routez(subs=subs or detail))

    def gatewayz(self, request, query):
        # nats-server decodes subs before accs; with no gateways neither changes the answer.
        go_bool(query, "subs")
        go_bool(query, "accs")
        return json_response(request, self.monitor.gatewayz())

    def leafz(self, request, query):
        go_bool(query, "subs")
        return json_response(request, self.monitor.leafz())

    def accountz(self, request, query):
        # (nats-server reads only "acc" here; an unknown one is a 400.)
        return json_response(request, self.monitor.accountz(query.get("acc", "")))

    def accstatz(self, request, query):
        # Over HTTP nats-server takes "unused" only (no account filter).
        unused = go_bool(query, "unused")
        return json_response(request, self.monitor.accstatz(include_unused=unused))

    def jsz_disabled(self, request, query):
        return json_response(request, self.monitor.jsz_disabled())

    def raftz(self, request, query):
        status = raftz_status(self.broker, query.get("acc", ""), query.get("group", ""))
        if status is None:
            # (nats-server's words, when no Raft node was ever registered)
            return text_response(request, 404, "No Raft nodes registered")
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"access-control-allow-origin", b"*")
        return encode_json(status, "   ").encode("utf-8")

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
        status = healthz_status(self.broker, opts)
        code = status.pop("status_code", None) or (200 if status["status"] == "ok" else 503)
        if getattr(self.broker, "lame_duck", False) and code == 500:
            # nats-server warns of every failed check; natsbroker, so far, of this one.
            if "errors" in status:
                log.warn("Healthcheck failed: {n} errors", n=len(status["errors"]))
            else:
                log.warn("Healthcheck failed: {e}", e=go_quote(status.get("error", "")))
        request.setResponseCode(code)
        return json_response(request, status, indent=False)


def raftz_status(broker, acc="", group=""):
    """nats-server's Raftz: ``{account: {group: RaftzGroup}}`` of the groups
    the plugins run (:class:`IRaftGroups`), only ``acc``'s (the system
    account by default) and only ``group`` if named; ``None`` when no Raft
    group runs here at all."""
    providers = broker.providers(IRaftGroups)
    groups = [g for p in providers for g in (p.raft_groups() or ())]
    if not groups:
        return None
    acc = acc or broker.system_account.name
    out = {}
    for account, name, status in sorted(groups, key=lambda g: (g[0], g[1])):
        if account != acc or (group and name != group):
            continue
        out.setdefault(account, {})[name] = status
    return out


def query_lists(request):
    """Go's ``r.URL.Query()``: ``{name: [value, ...]}`` from the query string
    only, blank values kept, in order (what a plugin's endpoint gets as
    ``request.query``; the built-in endpoints use each name's first value)."""
    return parse_query(request.uri.partition(b"?")[2])


def subs_option(query):
    """``subs``: "detail" (any case) for details, else a boolean for subjects."""
    if query.get("subs", "").lower() == "detail":
        return False, True
    return go_bool(query, "subs"), False


def state_option(query):
    s = query.get("state", "")
    if s == "":
        return STATE_OPEN
    low = s.lower()
    if low in ("open", "closed"):
        return low
    if low in ("any", "all"):
        return STATE_ANY
    raise BadRequest("Error decoding state for %s" % s)


def json_response(request, value, indent=True):
    request.setHeader(b"content-type", b"application/json")
    request.setHeader(b"access-control-allow-origin", b"*")
    return encode_json(value, indent).encode("utf-8")


def text_response(request, code, message):
    # Go's http.Error-less error path: WriteHeader + Write, sniffed as text.
    request.setResponseCode(code)
    request.setHeader(b"content-type", b"text/plain; charset=utf-8")
    return message.encode("utf-8")


def not_found(request):
    # Go's http.NotFound.
    request.setResponseCode(404)
    request.setHeader(b"content-type", b"text/plain; charset=utf-8")
    request.setHeader(b"x-content-type-options", b"nosniff")
    return b"404 page not found\n"


def html_escape(s):
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def asset_response(request, asset):
    """A file of the dashboard (see natsbroker.monitoring.dashboard), revalidated by ETag."""
    if asset is None:
        return not_found(request)
    # Always revalidated: an upgraded broker serves new files at the same URLs.
    request.setHeader(b"cache-control", b"no-cache")
    request.setHeader(b"x-content-type-options", b"nosniff")
    if request.setETag(asset.etag.encode("ascii")) == http.CACHED:
        return b""
    request.setHeader(b"content-type", asset.content_type.encode("ascii"))
    return asset.body
