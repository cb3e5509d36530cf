"""The system account: nats-server's ``$SYS`` events and requests, as a plugin.

nats-server runs an internal client in its system account that publishes
events and answers requests on ``$SYS.`` subjects; tools (``nats server list``,
``nats server report connections``, ``nats account info``) speak to it. This
plugin is that client, built on the plugin API: it subscribes in the system
account (``broker.system_account``) and in every other account (the service
imports nats-server gives each account), publishes there, and hears clients
come and go as an :class:`~natsbroker.interfaces.IClientObserver`. The
documents are the monitoring endpoints' own (:mod:`natsbroker.monitoring.endpoints`).

Events (in the system account):

* ``$SYS.ACCOUNT.<acc>.CONNECT`` / ``.DISCONNECT`` for every client (``$G``'s
  too), and for accounts other than ``$G`` the account's connection count on
  ``$SYS.ACCOUNT.<acc>.SERVER.CONNS`` and ``$SYS.SERVER.ACCOUNT.<acc>.CONNS``
  when it changes and every 30 s while it has connections;
* ``$SYS.SERVER.<id>.CLIENT.AUTH.ERR`` when a client fails to authenticate,
  and ``$SYS.ACCOUNT.CLIENT.AUTH.ERR`` *in the account concerned* (the auth
  callout account when there is one, else the one the client was in, ``$G``)
  with the reason (an auth callout's refusal, or ``Authentication Failure``);
* ``$SYS.SERVER.<id>.LAMEDUCK`` on entering lame duck mode and
  ``$SYS.SERVER.<id>.SHUTDOWN`` when the server shuts down (the server block
  alone); after SHUTDOWN the plugin is silent, as nats-server's send queue is
  closed then (no disconnect events for the clients it closes);
* ``$SYS.SERVER.<id>.STATSZ``: the server's statistics, first after 250 ms,
  then at doubling intervals up to every 10 s, never twice within a second,
  and only when someone listens (nats-server's ``heartbeatStatsz``).

Requests (the reply is ``{"server": {...}, "data": {...}}``, or ``"error"``,
except ``STATSZ`` answering ``{"server", "statsz"}`` and ``IDZ`` a bare id):

* ``$SYS.REQ.SERVER.PING`` and ``$SYS.REQ.SERVER.{PING,<id>}.<Z>`` for Z in
  STATSZ, IDZ, VARZ, CONNZ, SUBSZ, ROUTEZ, GATEWAYZ, LEAFZ, ACCOUNTZ, JSZ,
  HEALTHZ, IPQUEUESZ, RAFTZ; ``$SYS.REQ.SERVER.<id>.KICK``;
* ``$SYS.REQ.ACCOUNT.<acc>.<Z>`` for Z in CONNZ, SUBSZ, LEAFZ, JSZ, INFO,
  STATZ, CONNS, and ``$SYS.REQ.ACCOUNT.PING.STATZ``;
* ``$SYS.REQ.USER.INFO`` (who am I), in every account;
* in every other account, ``$SYS.REQ.SERVER.PING.CONNZ``,
  ``$SYS.REQ.ACCOUNT.PING.CONNZ`` and ``.STATZ`` answer for that account only.

A request body carries the endpoint's options as JSON, with nats-server's
field names and its filters (``server_name``, ``host``, ``cluster``, ``tags``,
``domain``: a server that does not match stays silent); a body Go would not
decode is answered with Go's error text, code 400.
"""

import gzip
import time
import urllib.parse

from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from natsbroker import COMPAT_VERSION, jsonbound
from natsbroker.gocompat import gojson as G, times as gotime
from natsbroker.interfaces import (
    BadRequest,
    IAccountJetStream,
    IBrokerPlugin,
    IClientObserver,
    IInternalSubscriptions,
    ISystemEvents,
)
from natsbroker.nuid import nuid
from natsbroker.protocol import wire
from natsbroker.subjects.sublist import is_literal, subject_matches

log = Logger()

# events.go: the first STATSZ goes out after 250 ms, the interval doubles up
# to statsHBInterval; two broadcasts are at least statszRateLimit apart.
STATSZ_FIRST = 0.25
STATSZ_INTERVAL = 10.0
STATSZ_RATE_LIMIT = 1.0
# eventsHBInterval: an account's connection count is repeated this often.
ACCOUNT_CONNS_INTERVAL = 30.0

CONNECT_EVENT = "io.nats.server.advisory.v1.client_connect"
DISCONNECT_EVENT = "io.nats.server.advisory.v1.client_disconnect"
ACCOUNT_CONNS_EVENT = "io.nats.server.advisory.v1.account_connections"
# Published in the account itself (events.go's authErrorAccountEventSubj).
ACCOUNT_AUTH_ERR_SUBJECT = "$SYS.ACCOUNT.CLIENT.AUTH.ERR"
AUTH_FAILURE = "Authentication Failure"

# ServerCapability flags: JetStreamEnabled | BinaryStreamSnapshot | AccountNRG.
_JS_FLAGS = 7


class _Skip(Exception):
    """nats-server's errSkipZreq: stay silent."""


# -- request options, decoded as Go's encoding/json would ------------------------------

GoJSONError = G.GoJSONError  # (what decode_options raises, with Go's text)

_FILTER = {"server_name": "string", "cluster": "string", "host": "string",
           "tags": "[]string", "domain": "string"}

# The options structs of nats-server's requests (JSON name: Go type).
_CONNZ = {"sort": "server.SortOpt", "auth": "bool", "subscriptions": "bool",
          "subscriptions_detail": "bool", "offset": "int", "limit": "int", "cid": "uint64",
          "mqtt_client": "string", "state": "server.ConnState", "user": "string",
          "acc": "string", "filter_subject": "string"}
_SUBSZ = {"offset": "int", "limit": "int", "subscriptions": "bool", "account": "string",
          "test": "string"}
_ROUTEZ = {"subscriptions": "bool", "subscriptions_detail": "bool"}
_GATEWAYZ = {"name": "string", "accounts": "bool", "account_name": "string",
             "subscriptions": "bool", "subscriptions_detail": "bool"}
_LEAFZ = {"subscriptions": "bool", "account": "string"}
_ACCOUNTZ = {"account": "string"}
_ACCSTATZ = {"accounts": "[]string", "include_unused": "bool"}
_JSZ = {"account": "string", "accounts": "bool", "streams": "bool", "consumer": "bool",
        "config": "bool", "leader_only": "bool", "offset": "int", "limit": "int",
        "raft": "bool", "stream_leader_only": "bool"}
_HEALTHZ = {"js-enabled": "bool", "js-enabled-only": "bool", "js-server-only": "bool",
            "js-meta-only": "bool", "account": "string", "stream": "string",
            "consumer": "string", "details": "bool"}
_IPQUEUESZ = {"all": "bool", "filter": "string"}
_RAFTZ = {"account": "string", "group": "string"}
_KICK = {"cid": "uint64"}

def decode_options(body, struct, fields):
    """``body`` decoded into a dict of ``fields`` (plus the event filter
    fields) as ``json.Unmarshal`` into nats-server's ``struct`` would (see
    :func:`natsbroker.gocompat.gojson.unmarshal_flat`)."""
    spec = dict(fields)
    spec.update(_FILTER)
    return G.unmarshal_flat(body, struct, spec)


# -- the plugin -----------------------------------------------------------------------

class _OptionsRequest:
    """What a plugin's HTTP monitoring handler sees, made from request
    options (to ask the JetStream plugin's ``jsz`` endpoint)."""

    method = b"GET"

    def __init__(self, path, opts):
        args = {k.encode(): [(b"true" if v is True else str(v).encode())]
                for k, v in opts.items() if v not in (None, False, "", 0)}
        self.args = args
        self.path = path.encode()
        query = urllib.parse.urlencode([(k.decode(), v[0].decode()) for k, v in args.items()])
        self.uri = self.path + (b"?" + query.encode() if query else b"")

    def getHeader(self, name):
        return None

    def setHeader(self, name, value):
        pass

    def setResponseCode(self, code, message=None):
        pass


@implementer(IBrokerPlugin, IClientObserver, ISystemEvents, IInternalSubscriptions)
class SystemAccount:
    """nats-server's internal system client (events.go)."""

    name = "system"

    def __init__(self, config):
        self.config = config
        self.broker = None
        # {account name: [Subscription]}: ours, not counted in monitoring.
        self.internal_subscriptions = {}
        self._seq = 0
        self._stmr = None
        self._cstatsz = STATSZ_FIRST
        self._last_statsz = None
        self._conns_timers = {}
        # Connections per account other than $G (joined at CONNECT), so that
        # a connection storm does not count them all each time.
        self._conns = {}
        # Set by shutdown_event: nothing is sent after it.
        self._silenced = False

    # -- life cycle ------------------------------------------------------------------

    def start(self, broker):
        self.broker = broker
        self.reactor = broker.reactor
        self.monitor = broker.monitor
        self.sys = sys_acc = broker.system_account
        sid = broker.server_id
        sub = self._subscribe

        sub(sys_acc, "$SYS.REQ.SERVER.PING", self._statsz_request)
        for name, handler in self._server_requests().items():
            sub(sys_acc, "$SYS.REQ.SERVER.%s.%s" % (sid, name), handler)
            sub(sys_acc, "$SYS.REQ.SERVER.PING.%s" % name, handler)
        sub(sys_acc, "$SYS.REQ.SERVER.%s.KICK" % sid, self._kick_request)
        sub(sys_acc, "$SYS.REQ.SERVER.%s.LDM" % sid, self._ldm_request)
        for name, handler in self._account_requests().items():
            sub(sys_acc, "$SYS.REQ.ACCOUNT.*.%s" % name, handler)
        sub(sys_acc, "$SYS.REQ.ACCOUNT.PING.STATZ", self._accounts_statz_request)
        sub(sys_acc, "$SYS.REQ.USER.*.INFO", self._user_info_direct)
        sub(sys_acc, "$SYS.DEBUG.SUBSCRIBERS", self._debug_subscribers)
        for acc in list(broker.accounts.values()):
            self._install_imports(acc)
        # remoteServerUpdate: a server heard of for the first time is told
        # about this one at once (processNewServer's "announce ourselves"),
        # so that a JetStream meta leader can place streams on a server that
        # came up after its own first statsz went out.
        # (Only in a cluster: a standalone server has nobody to meet, and
        # sends statsz only when someone listens.)
        self._servers = set()
        self._server_sub = None
        if broker.config.cluster.port:
            self._server_sub = sys_acc.subscribe(b"$SYS.SERVER.*.STATSZ", self._remote_statsz,
                                                 hidden=True)
        self._cstatsz = STATSZ_FIRST
        self._stmr = self.reactor.callLater(self._cstatsz, self._heartbeat_statsz)

    def _remote_statsz(self, sub, subject, reply, hdr_len, raw):
        sid = bytes(subject).split(b".")[2].decode("latin-1", "replace")
        if sid == self.broker.server_id or sid in self._servers or self._silenced:
            return
        self._servers.add(sid)
        self.send_statsz(self._broadcast_subject())

    def stop(self):
        if getattr(self, "_server_sub", None) is not None:
            self.sys.unsubscribe(self._server_sub)
            self._server_sub = None
        for call in [self._stmr] + list(self._conns_timers.values()):
            if call is not None and call.active():
                call.cancel()
        self._stmr = None
        self._conns_timers.clear()
        for name, subs in self.internal_subscriptions.items():
            acc = self.broker.accounts.get(name)
            for s in subs:
                acc.unsubscribe(s)
        self.internal_subscriptions = {}

    def _install_imports(self, acc):
        """The service imports every account gets (nats-server's
        registerSystemImports); an account made at run time (operator mode)
        gets them with its first connection."""
        sub = self._subscribe
        sub(acc, "$SYS.REQ.USER.INFO", self._user_info_request)
        if acc.is_system:
            return
        connz = self._imported(acc, self._account_connz)
        sub(acc, "$SYS.REQ.ACCOUNT.PING.CONNZ", connz)
        sub(acc, "$SYS.REQ.SERVER.PING.CONNZ", connz)
        sub(acc, "$SYS.REQ.ACCOUNT.PING.STATZ", self._imported(acc, self._account_statz))

    def _subscribe(self, acc, subject, handler):
        def callback(sub, subject, reply, hdr_len, raw):
            if not acc.serving_request():
                return  # the server's own publish (a response sent here), not a request
            handler(acc, subject.decode("utf-8", "replace"),
                    reply.decode("utf-8", "replace") if reply else "",
                    bytes(raw[:hdr_len]), bytes(raw[hdr_len:]))
        s = acc.subscribe(subject, callback)
        self.internal_subscriptions.setdefault(acc.name, []).append(s)
        return s

    def _imported(self, acc, handler):
        """A service import into ``acc``: the request is about ``acc`` itself."""
        def imported(where, subject, reply, hdr, body):
            handler(where, acc.name, reply, hdr, body)
        return imported

    # -- publishing ---------------------------------------------------------------------

    def server_info(self):
        """nats-server's ServerInfo block; every message that carries one
        takes the next sequence number."""
        b = self.broker
        cfg = b.config
        self._seq += 1
        si = {"name": b.server_name, "host": b.host, "id": b.server_id}
        if cfg.cluster.name:
            si["cluster"] = cfg.cluster.name
        js = cfg.jetstream.enabled
        if js and cfg.jetstream.domain:
            si["domain"] = cfg.jetstream.domain
        si["ver"] = COMPAT_VERSION
        if cfg.server_tags:
            si["tags"] = list(cfg.server_tags)  # (placement matches them)
        si.update({"jetstream": js, "flags": _JS_FLAGS if js else 0,
                   "seq": self._seq, "time": gotime.rfc3339(time.time_ns())})
        return si

    def _send(self, acc, subject, build, headers=None):
        """Publish ``build()`` (a dict, or bytes) on ``subject`` in ``acc``.
        Without a subscriber nothing is built (the sequence still moves on)."""
        if self._silenced:
            return 0
        if not acc.sublist.has_interest(subject.encode()):
            self._seq += 1
            return 0
        value = build()
        payload = value if isinstance(value, bytes) else G.encode_json(value, indent=False).encode()
        self.broker.begin()
        try:
            return acc.publish(subject, payload, headers=headers)
        finally:
            self.broker.end()

    def _respond(self, acc, reply, hdr, build):
        """An API response (``{"server", "data"|"error"}``), gzipped when the
        request asks for it (Accept-Encoding) as nats-server does."""
        if not reply:
            return
        encoding = _accept_encoding(hdr)
        if not encoding:
            self._send(acc, reply, build)
            return

        def compressed():
            raw = G.encode_json(build(), indent=False).encode()
            return gzip.compress(raw) if encoding == "gzip" else raw
        self._send(acc, reply, compressed, headers=[("Content-Encoding", encoding)])

    def _event(self, acc, subject, build):
        self._send(acc, subject, build)

    # -- STATSZ -----------------------------------------------------------------------

    def statsz(self):
        """nats-server's ServerStats (the "statsz" object)."""
        b = self.broker
        m = self.monitor
        st = b.stats
        sent = {"msgs": st.out_msgs, "bytes": st.out_bytes}
        received = {"msgs": st.in_msgs, "bytes": st.in_bytes}
        s = {
            "start": gotime.rfc3339_seconds(b.start_time),
            "mem": self.monitor.memory(),
            "cores": self.monitor.cores(),
            "cpu": m.cpu(),
            "connections": b.num_clients,
            "total_connections": st.total_connections,
            "active_accounts": m.active_accounts(),
            "subscriptions": m.total_subscriptions(),
            "sent": sent,
            "sent_to_clients": dict(sent),
            "received": received,
            "received_from_clients": dict(received),
            "slow_consumers": st.slow_consumers,
        }
        if st.slow_consumers:
            s["slow_consumer_stats"] = {"clients": st.slow_consumers, "routes": 0,
                                        "gateways": 0, "leafs": 0}
        if st.stale_connections:
            s["stale_connections"] = st.stale_connections
            s["stale_connection_stats"] = {"clients": st.stale_connections, "routes": 0,
                                           "gateways": 0, "leafs": 0}
        s["active_servers"] = 1
        js = m.jetstream_varz()
        if js:
            js = dict(js)
            if "config" in js:
                # (nats-server leaves its store directory out of STATSZ)
                js["config"] = {k: v for k, v in js["config"].items() if k != "store_dir"}
            s["jetstream"] = js
        return s

    def _statsz_message(self):
        return {"server": self.server_info(), "statsz": self.statsz()}

    def _broadcast_subject(self):
        return "$SYS.SERVER.%s.STATSZ" % self.broker.server_id

    def _heartbeat_statsz(self):
        # Back off from 250 ms to the full interval, re-arming first: a send
        # that the rate limit holds back moves the timer itself.
        if self._cstatsz < STATSZ_INTERVAL:
            self._cstatsz = min(self._cstatsz * 2, STATSZ_INTERVAL)
        self._stmr = self.reactor.callLater(self._cstatsz, self._heartbeat_statsz)
        self.send_statsz(self._broadcast_subject())

    def _limit_statsz(self, subject):
        """nats-server's limitStatsz: True to hold a broadcast back."""
        if subject != self._broadcast_subject():
            return False
        interval = min(STATSZ_RATE_LIMIT, self._cstatsz)
        now = self.reactor.seconds()
        if self._last_statsz is not None and now - self._last_statsz < interval:
            due = self._last_statsz + interval - now
            if self._stmr is not None and self._stmr.active():
                self._stmr.reset(due)
            return True
        self._last_statsz = now
        return False

    def send_statsz(self, subject, acc=None):
        if self._limit_statsz(subject):
            return
        acc = acc or self.sys
        # Standalone, nats-server sends only when someone listens.
        if not acc.sublist.has_interest(subject.encode()):
            return
        self._send(acc, subject, self._statsz_message)

    def _statsz_request(self, acc, subject, reply, hdr, body):
        if not reply:
            # No reply: a request for a broadcast now (and the limit reset).
            reply = self._broadcast_subject()
            self._last_statsz = None
        try:
            opts = decode_options(body, "StatszEventOptions", {})
        except GoJSONError as e:
            why = str(e)  # (e is gone once the except block ends; the answer may be built later)
            self._send(acc, reply, lambda: {"server": self.server_info(),
                                            "error": {"code": 400, "description": why}})
            return
        if body and self._filtered(opts):
            return
        self.send_statsz(reply, acc)

    # -- the zReq requests ------------------------------------------------------------

    def _zreq(self, acc, reply, hdr, body, struct, fields, respond, null_data=True):
        """nats-server's zReq: decode the options, skip if filtered, answer
        with the data or the error (``null_data``: a failed answer carries
        ``"data": null`` as nats-server's typed results do)."""
        if not reply:
            return
        try:
            opts = decode_options(body, struct, fields)
        except GoJSONError as e:
            why = str(e)  # (e is gone once the except block ends; the answer may be built later)
            self._respond(acc, reply, hdr, lambda: {
                "server": self.server_info(), "error": {"code": 400, "description": why}})
            return
        if body and self._filtered(opts):
            return
        try:
            data = respond(opts)
        except _Skip:
            return
        except BadRequest as e:
            self._error(acc, reply, hdr, str(e), null_data)
            return
        if isinstance(data, defer.Deferred):
            def failed(f):
                if f.check(_Skip):
                    return
                self._error(acc, reply, hdr, f.getErrorMessage(), null_data)
            data.addCallbacks(lambda d: self._answer(acc, reply, hdr, d), failed)
            data.addErrback(lambda f: log.failure("system request {subject}", f, subject=reply))
            return
        self._answer(acc, reply, hdr, data)

    def _answer(self, acc, reply, hdr, data):
        def build():
            out = {"server": self.server_info()}
            if data is not None:
                out["data"] = data
            return out
        self._respond(acc, reply, hdr, build)

    def _error(self, acc, reply, hdr, text, null_data=True):
        def build():
            out = {"server": self.server_info()}
            if null_data:
                out["data"] = None
            out["error"] = {"code": 500, "description": text}
            return out
        self._respond(acc, reply, hdr, build)

    def _filtered(self, opts):
        """nats-server's filterRequest: True when the request is not for us."""
        b = self.broker
        cfg = b.config
        if opts["server_name"] and opts["server_name"] not in b.server_name:
            return True
        if opts["host"] and opts["host"] not in (b.host or ""):
            return True
        if opts["cluster"] and opts["cluster"] not in cfg.cluster.name:
            return True
        if opts["tags"]:
            return True  # we have no server tags, so none of them matches
        domain = cfg.jetstream.domain if cfg.jetstream.enabled else ""
        if opts["domain"] and opts["domain"] != domain:
            return True
        return False

    def _server_requests(self):
        m = self.monitor

        def z(struct, fields, respond):
            def handler(acc, subject, reply, hdr, body):
                self._zreq(acc, reply, hdr, body, struct, fields, respond)
            return handler

        return {
            "IDZ": self._idz_request,
            "STATSZ": self._statsz_request,
            "VARZ": z("VarzEventOptions", {}, lambda o: m.varz()),
            "SUBSZ": z("SubszEventOptions", _SUBSZ, lambda o: m.subsz(
                subs=o["subscriptions"], offset=o["offset"], limit=o["limit"], test=o["test"],
                acc=o["account"])),
            "CONNZ": z("ConnzEventOptions", _CONNZ, lambda o: self._connz(o)),
            "ROUTEZ": z("RoutezEventOptions", _ROUTEZ, lambda o: m.routez()),
            "GATEWAYZ": z("GatewayzEventOptions", _GATEWAYZ, lambda o: m.gatewayz()),
            "LEAFZ": z("LeafzEventOptions", _LEAFZ, lambda o: m.leafz()),
            "ACCOUNTZ": z("AccountzEventOptions", _ACCOUNTZ, lambda o: m.accountz(o["account"])),
            "JSZ": z("JszEventOptions", _JSZ, self._jsz),
            "HEALTHZ": z("HealthzEventOptions", _HEALTHZ, self._healthz),
            "IPQUEUESZ": z("IpqueueszEventOptions", _IPQUEUESZ, lambda o: {}),
            "RAFTZ": z("RaftzEventOptions", _RAFTZ, lambda o: {}),
        }

    def _connz(self, o, acc=None):
        state = {0: "open", 1: "closed", 2: "any"}.get(o["state"])
        return self.monitor.connz(
            sort=o["sort"], auth=o["auth"], subs=o["subscriptions"],
            subs_detail=o["subscriptions_detail"], offset=o["offset"], limit=o["limit"],
            cid=o["cid"], state=state, user=o["user"], acc=o["acc"] if acc is None else acc,
            mqtt_client=o["mqtt_client"], filter_subject=o["filter_subject"])

    def _healthz(self, o):
        return self.monitor.healthz({
            "js-enabled-only": o["js-enabled-only"] or o["js-enabled"],
            "js-server-only": o["js-server-only"], "js-meta-only": o["js-meta-only"],
            "details": o["details"], "account": o["account"], "stream": o["stream"],
            "consumer": o["consumer"]})

    # The JSON names of nats-server's JSzOptions, as /jsz's query names.
    _JSZ_QUERY = {"account": "acc", "accounts": "accounts", "streams": "streams",
                  "consumer": "consumers", "config": "config", "leader_only": "leader-only",
                  "offset": "offset", "limit": "limit", "raft": "raft",
                  "stream_leader_only": "stream-leader-only"}

    def _jsz_endpoint(self):
        b = self.broker
        if not b.config.jetstream.enabled or not b.providers(IAccountJetStream):
            return None
        return b.monitor_endpoints.get("jsz")

    def _jsz(self, o):
        """JSZ: the JetStream plugin's /jsz, asked with the request's options."""
        endpoint = self._jsz_endpoint()
        if endpoint is None:
            return self.monitor.jsz_disabled()
        return endpoint(_OptionsRequest("/jsz", {q: o[k] for k, q in self._JSZ_QUERY.items()}))

    def _account_jsz(self, name, o):
        """$SYS.REQ.ACCOUNT.<acc>.JSZ: the account's entry of /jsz?acc=<acc>."""
        b = self.broker
        endpoint = self._jsz_endpoint()
        if endpoint is None:
            raise BadRequest("jetstream not enabled")
        acc = b.accounts.get(name)
        if acc is None:
            raise BadRequest('account "%s" not found' % name)
        if not self.monitor.jetstream_enabled(acc):
            raise BadRequest('account "%s" not jetstream enabled' % name)
        query = {q: o[k] for k, q in self._JSZ_QUERY.items()}
        query["acc"] = name
        result = endpoint(_OptionsRequest("/jsz", query))

        def detail(jsz):
            found = jsz.get("account_details") or []
            if found:
                return found[0]
            # A JetStream plugin without per-account details: its totals.
            api = jsz.get("api") or {}
            return {"name": name, "id": name, "memory": jsz.get("memory", 0),
                    "storage": jsz.get("storage", 0),
                    "reserved_memory": jsz.get("reserved_memory", 0),
                    "reserved_storage": jsz.get("reserved_storage", 0),
                    "accounts": 0, "ha_assets": 0,
                    "api": {"level": 0, "total": api.get("total", 0),
                            "errors": api.get("errors", 0)}}
        if isinstance(result, defer.Deferred):
            return result.addCallback(detail)
        return detail(result)

    def _idz_request(self, acc, subject, reply, hdr, body):
        b = self.broker
        if reply:
            self._send(acc, reply, lambda: {"name": b.server_name, "host": b.host,
                                            "id": b.server_id})

    def _client_request(self, acc, reply, hdr, body, what, act, missing):
        """KICK and LDM: ``{"cid": N}`` names an open client; an answer
        without data, or nats-server's error when there is no such client."""
        try:
            if not body:
                raise GoJSONError("unexpected end of JSON input")
            cid = decode_options(body, "%sClientReq" % what, _KICK)["cid"]
        except GoJSONError as e:
            # (nats-server logs this and does not answer)
            log.error("Error unmarshalling {what} client request: {e}", what=what.lower(), e=e)
            return

        def respond(o):
            for c in list(self.broker.clients()):
                if c.cid == cid:
                    act(c)
                    return None
            raise BadRequest(missing)
        self._zreq(acc, reply, hdr, body, "EventFilterOptions", {}, respond, null_data=False)

    def _kick_request(self, acc, subject, reply, hdr, body):
        self._client_request(acc, reply, hdr, body, "Kick", lambda c: c.close("Kicked"),
                             "no such client or leafnode id")

    def _ldm_request(self, acc, subject, reply, hdr, body):
        # Lame duck mode for one client: an INFO telling it to go elsewhere.
        def ldm(c):
            fields = self.broker.info_fields(c)
            fields.pop("nonce", None)
            fields["ldm"] = True
            c.send(wire.info(fields))
        self._client_request(acc, reply, hdr, body, "LDM", ldm, "no such client id")

    # -- $SYS.REQ.ACCOUNT.* -----------------------------------------------------------

    def _account_requests(self):
        def per_account(struct, fields, respond):
            def handler(acc, subject, reply, hdr, body):
                toks = subject.split(".")
                if len(toks) != 5:
                    return
                name = toks[3]
                self._zreq(acc, reply, hdr, body, struct, fields, lambda o: respond(name, o))
            return handler

        m = self.monitor
        return {
            "SUBSZ": per_account("SubszEventOptions", _SUBSZ, lambda name, o: m.subsz(
                subs=True, offset=o["offset"], limit=o["limit"], test=o["test"], acc=name)),
            "CONNZ": per_account("ConnzEventOptions", _CONNZ,
                                 lambda name, o: self._connz(o, acc=name)),
            "LEAFZ": per_account("LeafzEventOptions", _LEAFZ, lambda name, o: m.leafz()),
            "JSZ": per_account("JszEventOptions", _JSZ, self._account_jsz),
            "INFO": per_account("AccInfoEventOptions", {},
                                lambda name, o: m.account_info(name)),
            "STATZ": per_account("AccountStatzEventOptions", _ACCSTATZ, self._statz_for),
            "CONNS": self._conns_request,
        }

    def _statz_for(self, name, o):
        if name == "PING":
            raise _Skip()  # $SYS.REQ.ACCOUNT.PING.STATZ has its own handler
        stz = self.monitor.accstatz(accounts=[name], include_unused=o["include_unused"])
        if not stz["account_statz"] and not o["include_unused"]:
            raise _Skip()
        return stz

    def _accounts_statz_request(self, acc, subject, reply, hdr, body):
        def respond(o):
            stz = self.monitor.accstatz(accounts=o["accounts"] or (),
                                        include_unused=o["include_unused"])
            if not stz["account_statz"] and not o["include_unused"]:
                raise _Skip()
            return stz
        self._zreq(acc, reply, hdr, body, "AccountStatzEventOptions", _ACCSTATZ, respond)

    def _account_connz(self, where, name, reply, hdr, body):
        self._zreq(where, reply, hdr, body, "ConnzEventOptions", _CONNZ,
                   lambda o: self._connz(o, acc=name))

    def _account_statz(self, where, name, reply, hdr, body):
        self._zreq(where, reply, hdr, body, "AccountStatzEventOptions", _ACCSTATZ,
                   lambda o: self._statz_for(name, o))

    def _conns_request(self, acc, subject, reply, hdr, body):
        toks = subject.split(".")
        if len(toks) != 5 or not reply:
            return
        name = toks[3]
        if body:
            try:
                req = jsonbound.loads(body)
            except ValueError:
                return
            if not isinstance(req, dict) or req.get("acc", name) != name:
                return
        target = self.broker.accounts.get(name)
        if target is None or not self.monitor.account_clients(target):
            return
        self._send(acc, reply, lambda: self._account_conns_message(target))

    # -- user info, debug --------------------------------------------------------------

    def _user_info_request(self, acc, subject, reply, hdr, body):
        client = self.broker.route_source
        user = client.auth_user_name if client is not None else ""
        account = client.account.name if client is not None else ""
        data = {"user": user, "account": account}
        if account:
            data["account_name"] = account
        perms = _public_permissions(self.broker, client) if client is not None else None
        if perms:
            data["permissions"] = perms
        self._answer(acc, reply, hdr, data)

    def _user_info_direct(self, acc, subject, reply, hdr, body):
        # Asked directly (not through an account's import): nats-server has no
        # client information to go by.
        self._answer(acc, reply, hdr, {"user": "", "account": ""})

    def _debug_subscribers(self, acc, subject, reply, hdr, body):
        """$SYS.DEBUG.SUBSCRIBERS: how many client subscriptions (of the
        asking client's account) a subject [and queue] has."""
        if not reply:
            return
        client = self.broker.route_source
        target = client.account if client is not None else self.sys
        args = body.decode("utf-8", "replace").strip().split(" ")
        subject = args[0].encode()
        queue = args[1].encode() if len(args) > 1 else None
        n = 0
        for s in self.monitor.subscriptions(target):
            if getattr(s.owner, "cid", 0) == 0:
                continue
            if queue is not None and s.queue != queue:
                continue
            if is_literal(subject):
                if subject_matches(s.subject, subject):
                    n += 1
            elif self.monitor.subjects_collide(s.subject, subject):
                n += 1
        self._send(acc, reply, lambda: str(n).encode())

    # -- client events ----------------------------------------------------------------

    def client_connected(self, client):
        acc = client.account
        if acc.name not in self.internal_subscriptions:
            self._install_imports(acc)
        self.broker.begin()
        try:
            if acc is not self.broker.global_account:
                self._conns[acc.name] = self._conns.get(acc.name, 0) + 1
                self._account_conns_update(acc)
            self._event(self.sys, "$SYS.ACCOUNT.%s.CONNECT" % acc.name, lambda: {
                "type": CONNECT_EVENT, "id": nuid(), "timestamp": gotime.rfc3339(time.time_ns()),
                "server": self.server_info(), "client": _client_info(client)})
        finally:
            self.broker.end()

    def client_closed(self, client):
        self.monitor.retire(client)
        acc = client.account
        stop = time.time_ns()
        self.broker.begin()
        try:
            if acc is not self.broker.global_account:
                self._conns[acc.name] = max(self._conns.get(acc.name, 0) - 1, 0)
                self._account_conns_update(acc)
            if getattr(client, "close_reason", "") == AUTH_FAILURE:
                self._event(self.sys, "$SYS.SERVER.%s.CLIENT.AUTH.ERR" % self.broker.server_id,
                            lambda: _disconnect_event(self, client, time.time_ns()))
                self._account_auth_error(client)
            self._event(self.sys, "$SYS.ACCOUNT.%s.DISCONNECT" % acc.name,
                        lambda: _disconnect_event(self, client, stop))
        finally:
            self.broker.end()

    def _account_auth_error(self, client):
        """nats-server's sendAccountAuthErrorEvent: the failure told to the
        account concerned, on a subject of its own. An auth callout says
        which account and why (natsbroker.auth.callout sets
        ``client.auth_error``); otherwise a configured callout's account, or
        the account the client was in."""
        where, reason, was = getattr(client, "auth_error", None) or (None, AUTH_FAILURE, {})
        if where is None:
            callout = getattr(getattr(client, "auth", None), "callout", None)
            name = getattr(callout, "account", None) if callout is not None else None
            where = self.broker.accounts.get(name) if isinstance(name, str) else None
        acc = where or client.account
        now = time.time_ns()

        def build():
            msg = _disconnect_event(self, client, now)
            ci = msg["client"]
            ci["acc"] = acc.name
            if was:
                # (Go's field order: issuer_key, name_tag, tags, kind...)
                rest = {k: ci.pop(k) for k in ("issuer_key", "name_tag", "tags", "kind", "client_type")
                        if k in ci}
                rest.update(was)
                ci.update({k: rest[k] for k in ("issuer_key", "name_tag", "tags", "kind", "client_type")
                           if k in rest})
            msg["reason"] = reason or ""
            return msg
        self._event(acc, ACCOUNT_AUTH_ERR_SUBJECT, build)

    # -- server events -----------------------------------------------------------------

    def lame_duck_event(self):
        """``$SYS.SERVER.<id>.LAMEDUCK`` (nats-server's
        sendLDMShutdownEventLocked): the server block alone."""
        self._event(self.sys, "$SYS.SERVER.%s.LAMEDUCK" % self.broker.server_id, self.server_info)

    def shutdown_event(self):
        """``$SYS.SERVER.<id>.SHUTDOWN``, the last message: nats-server closes
        its send queue after it, so nothing more is sent (not even the
        disconnect events of the clients shutdown closes)."""
        if self._silenced:
            return
        self._event(self.sys, "$SYS.SERVER.%s.SHUTDOWN" % self.broker.server_id, self.server_info)
        self._silenced = True

    def _account_conns_message(self, acc):
        msg = {"type": ACCOUNT_CONNS_EVENT, "id": nuid(),
               "timestamp": gotime.rfc3339(time.time_ns()), "server": self.server_info()}
        msg.update(self.monitor.account_stat(acc))
        return msg

    def _account_conns_update(self, acc):
        """An account's connection count, on both subjects nats-server uses,
        repeated every 30 s while the account has connections."""
        timer = self._conns_timers.pop(acc.name, None)
        if timer is not None and timer.active():
            timer.cancel()
        if self._conns.get(acc.name):
            self._conns_timers[acc.name] = self.reactor.callLater(
                ACCOUNT_CONNS_INTERVAL, self._account_conns_heartbeat, acc)
        for subject in ("$SYS.SERVER.ACCOUNT.%s.CONNS", "$SYS.ACCOUNT.%s.SERVER.CONNS"):
            self._event(self.sys, subject % acc.name, lambda: self._account_conns_message(acc))

    def _account_conns_heartbeat(self, acc):
        self._conns_timers.pop(acc.name, None)
        self.broker.begin()
        try:
            self._account_conns_update(acc)
        finally:
            self.broker.end()

    # -- what /accountz shows of the imports and exports made here ---------------------

    def system_imports(self, name):
        """The service imports nats-server gives account ``name``, in
        /accountz's shape."""
        acc = self.broker.accounts.get(name)
        sys_name = self.sys.name

        def imp(to, mapped, share=False):
            return {"subject": mapped, "account": sys_name, "to": to, "local_subject": to,
                    "type": "service", "invalid": False, "share": share, "tracking": False}
        user_info = imp("$SYS.REQ.USER.INFO", "$SYS.REQ.USER.%s.INFO" % name, share=True)
        if acc is None or acc.is_system:
            return [user_info]
        out = [imp("$SYS.REQ.ACCOUNT.PING.CONNZ", "$SYS.REQ.ACCOUNT.%s.CONNZ" % name),
               imp("$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.ACCOUNT.%s.CONNZ" % name),
               imp("$SYS.REQ.ACCOUNT.PING.STATZ", "$SYS.REQ.ACCOUNT.%s.STATZ" % name),
               user_info]
        if self.broker.config.jetstream.enabled:
            out.append(imp("$JS.API.>", "$JS.API.>", share=True))
        return out

    def system_exports(self, name):
        """The system account's service exports, in /accountz's shape."""
        acc = self.broker.accounts.get(name)
        if acc is None or not acc.is_system:
            return []

        def exp(subject, response_type):
            return {"subject": subject, "type": "service", "response_type": response_type}
        return [exp("$SYS.REQ.USER.*.INFO", "Singleton"),
                exp("$SYS.REQ.ACCOUNT.*.CONNZ", "Streamed"),
                exp("$SYS.REQ.ACCOUNT.*.STATZ", "Streamed"),
                exp("$SYS.DEBUG.SUBSCRIBERS", "Singleton")]


def _public_permissions(broker, client):
    """nats-server's publicPermissions of a client: the permissions its
    user has in the configuration, in nats-server's JSON."""
    name = getattr(client, "user", None)
    if not name:
        return None
    cfg = broker.config
    acfg = getattr(client.account, "account_config", None)
    if acfg is not None:
        users, nkeys, default = acfg.users, acfg.nkeys, acfg.default_permissions
    else:
        auth = cfg.authorization
        users, nkeys, default = auth.users, auth.nkeys, auth.permissions
    perms = None
    for u in users:
        if u.user == name:
            perms = u.permissions
            break
    else:
        for u in nkeys:
            if u.nkey == name:
                perms = u.permissions
                break
    perms = perms or default
    if perms is None:
        return None
    out = {}
    for kind in ("publish", "subscribe"):
        p = getattr(perms, kind)
        if p is not None and (p.allow or p.deny):
            d = {}
            if p.allow:
                d["allow"] = list(p.allow)
            if p.deny:
                d["deny"] = list(p.deny)
            out[kind] = d
    if perms.allow_responses:
        r = perms.response
        max_msgs = r.max_msgs if r is not None and r.max_msgs else 1
        expires = r.expires if r is not None and r.expires else 120.0
        out["responses"] = {"max": max_msgs, "ttl": int(round(expires * 1e9))}
    return out or None


def _rtt_ns(rtt):
    """nats-server's getRTT in nanoseconds (microseconds when under 1 ms)."""
    ns = int(rtt * 1e9)
    if 1000 < ns < 1000000:
        ns -= ns % 1000
    return ns


def _client_info(client, stop_ns=None):
    """nats-server's ClientInfo of a connection (``stop_ns``: it has closed)."""
    acc = client.account.name
    ci = {"start": gotime.rfc3339_seconds(client.start), "host": client.host}
    if client.cid:
        ci["id"] = client.cid
    ci["acc"] = acc
    user = client.auth_user_name
    if user:
        ci["user"] = user
    opts = client.opts
    for key, value in (("name", opts.name), ("lang", opts.lang), ("ver", opts.version)):
        if value:
            ci[key] = value
    if stop_ns is not None:
        rtt = _rtt_ns(getattr(client, "rtt", 0.0) or 0.0)
        if rtt:
            ci["rtt"] = rtt
        ci["stop"] = gotime.rfc3339(stop_ns)
    if getattr(opts, "jwt", ""):
        ci["jwt"] = opts.jwt
    if getattr(opts, "nkey", ""):
        ci["issuer_key"] = acc
    ci["name_tag"] = acc
    ci["kind"] = "Client"
    ci["client_type"] = "websocket" if getattr(client, "websocket", None) is not None else "nats"
    return ci


def _disconnect_event(plugin, client, stop_ns):
    return {
        "type": DISCONNECT_EVENT, "id": nuid(), "timestamp": gotime.rfc3339(stop_ns),
        "server": plugin.server_info(), "client": _client_info(client, stop_ns),
        "sent": {"msgs": client.in_msgs, "bytes": client.in_bytes},
        "received": {"msgs": client.out_msgs, "bytes": client.out_bytes},
        "reason": getattr(client, "close_reason", "") or "Client Closed",
    }


def _accept_encoding(hdr):
    """What a request's Accept-Encoding asks for: "gzip", "identity" for
    anything we cannot do, or "" (nats-server also does snappy/s2; we answer
    those uncompressed, saying so)."""
    if not hdr:
        return ""
    try:
        _, _, pairs = wire.decode_headers(bytes(hdr))
    except ValueError:
        return ""
    for name, value in pairs:
        if name.lower() == b"accept-encoding":
            v = value.decode("latin-1").lower()
            if not v:
                return ""
            if "gzip" in v and "snappy" not in v and "s2" not in v:
                return "gzip"
            return "identity"
    return ""
