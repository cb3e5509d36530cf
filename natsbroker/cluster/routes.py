"""The cluster: routes to the other servers, and what we tell them.

nats-server's route model, for one plain connection per peer (no pool, no
compression: what a 2.10+ server does with a peer whose INFO has no
``route_pool_size`` and ``"compression":"off"``; see
/work/shared/reference/cluster-routes.md):

* the cluster port accepts routes; the configured ``routes`` are dialed and
  re-dialed every second while they are down; servers we learn of from
  gossip are dialed once (nats-server's ``connect_retries`` default 0);
* the first route registered for a server id wins, a later one is closed;
* once a route is registered it gets our whole interest (``RS+ <account>
  <subject> [<queue> <weight>]`` for every subject) and from then on every
  change: RS+ on a plain subject's first subscription, RS+ with the new
  weight on each change of a queue group, RS- on the last one going;
* the peer's interest is a subscription owned by the route in the account's
  own Sublist (protocol.route.RouteSink), so a client's message reaches it
  through ``Account.route`` like any subscriber; a routed message is
  delivered to local subscribers only (one hop, full mesh);
* a server that connects to us is told to our other routes (gossip), which
  dial it, so every server ends up connected to every other;
* clients learn the other servers' client URLs from ``connect_urls`` in INFO,
  sent again to clients of protocol 1 when a server joins or leaves.
"""

import functools
import json
import random
import urllib.parse

import attrs
from cryptography import x509
from OpenSSL import crypto
from twisted.internet import endpoints, protocol, ssl as tssl
from twisted.logger import Logger
from twisted.protocols.tls import TLSMemoryBIOFactory

from natsbroker import COMPAT_VERSION
from natsbroker.auth.nkey import new_nonce
from natsbroker.auth.users import password_ok
from natsbroker.cluster.jsforward import install as install_js_forwarding, split_deliver_reply
from natsbroker.connection.route import MAX_ROUTE_PING_INTERVAL, RouteFactory, RouteProtocol, RouteSink
from natsbroker.connection.tls import server_context
from natsbroker.identity import runtime
from natsbroker.interfaces import IRouteObserver
from natsbroker.netaddrs import global_unicast_addresses
from natsbroker.nuid import nuid
from natsbroker.protocol import wire

log = Logger()

# nats-server's DEFAULT_ROUTE_RECONNECT (plus a random 0-100 ms, as its
# reConnectToRoute, so that two servers that closed each other's duplicate
# do not dial at the same moment again).
ROUTE_RECONNECT = 1.0
ROUTE_DIAL_TIMEOUT = 2.0

# nats-server's AUTH_TIMEOUT, the route auth timeout without TLS (with TLS:
# the TLS timeout + 1 s, getDefaultAuthTimeout).
DEFAULT_AUTH_TIMEOUT = 2.0

# Route protocol version: 2, as the reference note says, because message
# tracing (proto 3) is not implemented.
ROUTE_PROTO = 2

RUNTIME = runtime()


class RouteURL:
    """A route to dial: ``nats-route://[user:pass@]host:port``."""

    def __init__(self, host, port, user="", password="", text=""):
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.text = text or "nats-route://%s/" % _host_port(host, port)

    @property
    def key(self):
        return (self.host, self.port)

    def __repr__(self):
        return "<RouteURL %s>" % self.text

    @classmethod
    def parse(cls, text):
        text = text.strip()
        if "://" not in text:
            text = "nats-route://" + text
        u = urllib.parse.urlsplit(text)
        if not u.hostname or not u.port:
            raise ValueError("route URL %r has no host:port" % text)
        return cls(u.hostname, u.port, urllib.parse.unquote(u.username or ""),
                   urllib.parse.unquote(u.password or ""), text)


def _host_port(host, port):
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


def _local_ips():
    # A client port on every interface: nats-server lists each interface's
    # global unicast addresses (not what the host name resolves to, which
    # is often 127.0.1.1: a client on another host would fail over to its
    # own loopback).
    return global_unicast_addresses() or ["127.0.0.1"]


def _client_tls_material(tls):
    """(our certificate with its key, the CAs that vouch for peers) from a
    cluster tls block, in Twisted's types (the files were checked at load)."""
    with open(tls.cert_file, "rb") as f:
        chain = f.read()
    with open(tls.key_file, "rb") as f:
        key = f.read()
    cert = tssl.PrivateCertificate.loadPEM(chain + b"\n" + key)
    trust = None  # the platform's roots, as Go with no ca_file
    if tls.ca_file:
        with open(tls.ca_file, "rb") as f:
            cas = x509.load_pem_x509_certificates(f.read())
        trust = tssl.trustRootFromCertificates(
            [tssl.Certificate(crypto.X509.from_cryptography(c)) for c in cas])
    return cert, trust


class _Dial(protocol.Factory):
    """Hands one dialed connection its RouteProtocol (quietly)."""

    noisy = False

    def __init__(self, route):
        self.route = route

    def buildProtocol(self, addr):
        return self.route


class Cluster:
    """The route table of one server, and its interest as its peers see it."""

    def __init__(self, broker, config=None):
        self.broker = broker
        self.reactor = broker.reactor
        cfg = config or broker.config
        ccfg = cfg.cluster
        self.name = ccfg.name or nuid()
        # No name configured: nats-server makes one up, says so
        # (cluster_dynamic) and adopts a peer's.
        self.dynamic = not ccfg.name
        self.host = ccfg.host or "0.0.0.0"
        self.port = ccfg.port
        self.max_control_line = 16 * cfg.max_control_line
        self.explicit = [RouteURL.parse(u) for u in ccfg.routes]
        self.connect_retries = ccfg.connect_retries
        self.no_advertise = ccfg.no_advertise
        self.advertise = ccfg.advertise
        self.username = ccfg.username
        self.password = ccfg.password
        self.tls = ccfg.tls
        self.auth_timeout = ccfg.auth_timeout or (
            self.tls.timeout + 1.0 if self.tls is not None else DEFAULT_AUTH_TIMEOUT)
        # As nats-server: cluster.ping_interval/ping_max if set, else the
        # server's; the interval at most 30 s on a route.
        self.ping_interval = min(ccfg.ping_interval or cfg.ping_interval or MAX_ROUTE_PING_INTERVAL,
                                 MAX_ROUTE_PING_INTERVAL)
        self.ping_max = ccfg.ping_max if ccfg.ping_max > 0 else cfg.ping_max
        # cluster permissions { import, export }, or None (nats-server's RoutePermissions).
        self.permissions = ccfg.permissions
        self.server_tls = None
        if self.tls is not None:
            # Routes always require and verify the peer's certificate, whatever
            # "verify" says (nats-server's getTLSConfig forces it), and the same
            # files serve when we dial (the CA then checks the server).
            self.server_tls = server_context(attrs.evolve(self.tls, verify=True))
            self._client_cert, self._trust = _client_tls_material(self.tls)
        self._explicit_keys = {u.key for u in self.explicit}
        self.routes = {}  # server id -> registered RouteProtocol
        self.connections = set()  # every route connection, registered or not
        self.interest = {}  # account name -> {(subject, queue): local count}
        self._dialing = set()
        self._self_urls = set()
        self._timers = set()
        self.stopping = False
        self._urls_sent = False
        self.lame_duck = False  # in lame duck mode: clients hear only the others' URLs
        self.ws_urls = []  # connect_urls as WebSocket clients are told them
        self.nonce = new_nonce()
        self._closed_totals = [0, 0, 0, 0]
        broker.cluster = self
        broker.add_info_field("cluster", self.name)
        for acc in list(broker.accounts.values()):
            self.watch_account(acc)
        # Without JetStream of our own, $JS.API goes to the cluster's
        # JetStream servers through $SYS (natsbroker.cluster.jsforward).
        install_js_forwarding(broker)

    # -- start / stop -------------------------------------------------------------

    def factory(self):
        f = RouteFactory(self)
        if self.server_tls is not None:
            # TLS first: the handshake before our INFO (nats-server's createRoute).
            return TLSMemoryBIOFactory(self.server_tls, False, f)
        return f

    def client_tls(self, host):
        """The TLS options for dialing ``host``: our certificate, and the
        server's checked against ca_file and the host name (IP SAN for an
        address), unless ``insecure``."""
        if self.tls.insecure:
            return tssl.CertificateOptions(privateKey=self._client_cert.privateKey.original,
                                           certificate=self._client_cert.original)
        return tssl.optionsForClientTLS(host, trustRoot=self._trust, clientCertificate=self._client_cert)

    def listening(self, port):
        """The cluster port is bound (``port`` is the one we got)."""
        self.port = port

    def start(self):
        """Dial the configured routes."""
        for url in self.explicit:
            self.solicit(url)

    def stop(self):
        self.stopping = True
        for call in list(self._timers):
            if call.active():
                call.cancel()
        self._timers.clear()
        for route in list(self.connections):
            route.close("Server Shutdown")

    def enter_lame_duck(self):
        """Tell every peer we are going away, as nats-server does on entering
        lame duck mode: our route INFO once more, with ``"ldm":true`` and
        without the nonce (the peers then drop our client URLs from their
        clients' INFO). For the lame duck mode to call."""
        info = self.route_info()
        info.pop("nonce", None)
        info["ldm"] = True
        line = wire.info(info)
        for route in self.routes.values():
            route.send(line)
        # As nats-server's sendLDMToClients: from now on clients are told only
        # the other servers' URLs (the lame duck INFO that follows carries them).
        self.lame_duck = True
        if self._urls_sent and not self.no_advertise:
            self.broker.add_info_field("connect_urls", self.client_urls())
            self.ws_urls = self.ws_client_urls()

    def _later(self, delay, f, *args):
        def run():
            self._timers.discard(call)
            f(*args)
        call = self.reactor.callLater(delay, run)
        self._timers.add(call)

    @property
    def totals(self):
        """(in_msgs, in_bytes, out_msgs, out_bytes) over routes, closed ones included."""
        t = list(self._closed_totals)
        for r in self.connections:
            t[0] += r.in_msgs
            t[1] += r.in_bytes
            t[2] += r.out_msgs
            t[3] += r.out_bytes
        return tuple(t)

    # -- dialing --------------------------------------------------------------------

    def solicit(self, url, implicit=False, attempt=0):
        if self.stopping or url.key in self._self_urls or url.key in self._dialing:
            return
        self._dialing.add(url.key)
        ep = endpoints.HostnameEndpoint(self.reactor, url.host, url.port, timeout=ROUTE_DIAL_TIMEOUT)
        if self.tls is not None:
            ep = endpoints.wrapClientTLS(self.client_tls(url.host), ep)
        route = RouteProtocol(self, url, implicit)
        d = ep.connect(_Dial(route))

        def made(_):
            self._dialing.discard(url.key)

        def failed(f):
            self._dialing.discard(url.key)
            log.debug("Error trying to connect to route ({url}): {e}", url=url.text,
                      e=f.getErrorMessage())
            if not implicit:
                self._later(ROUTE_RECONNECT, self.solicit, url)
            elif attempt < self.connect_retries:
                self._later(ROUTE_RECONNECT, self.solicit, url, True, attempt + 1)
        d.addCallbacks(made, failed)
        return d

    def connect_line(self, url):
        """The CONNECT a solicited route starts with (nats-server's fields
        and order; ``lnoc`` left out: no leaf nodes here)."""
        c = {"echo": True, "verbose": False, "pedantic": False}
        if url.user:
            c["user"] = url.user
        if url.password:
            c["pass"] = url.password
        c["tls_required"] = self.tls is not None
        c["headers"] = True
        c["name"] = self.broker.server_id
        c["cluster"] = self.name
        if self.dynamic:
            c["cluster_dynamic"] = True
        return b"CONNECT " + json.dumps(c, separators=(",", ":")).encode() + b"\r\n"

    def route_info(self):
        """Our INFO on a route: what the reference note says a minimal peer
        sends (proto 2, headers, compression off, no route_pool_size, no
        lnoc/lnocu, no jetstream) in nats-server's field order."""
        b = self.broker
        host, port = self.advertised()
        info = {
            "server_id": b.server_id,
            "server_name": b.server_name,
            "version": COMPAT_VERSION,
            "proto": ROUTE_PROTO,
            "go": RUNTIME,
            "host": host,
            "port": port,
            "headers": True,
        }
        if self.username:
            info["auth_required"] = True
        if self.tls is not None:
            info["tls_required"] = True
            info["tls_verify"] = True
        info["max_payload"] = b.config.max_payload
        if self.advertise:
            info["ip"] = "nats-route://%s/" % _host_port(host, port)
        info["nonce"] = self.nonce
        info["cluster"] = self.name
        if self.dynamic:
            info["cluster_dynamic"] = True
        if not self.no_advertise:
            info["connect_urls"] = self.own_client_urls()
            ws_urls = self.own_ws_urls()
            if ws_urls:
                info["ws_connect_urls"] = ws_urls
        info["compression"] = "off"
        return info

    def advertised(self):
        """(host, port) peers are told to dial: cluster.advertise
        ("host[:port]", the port defaulting to ours), else the listener's."""
        if not self.advertise:
            return self.host, self.port
        host, sep, port = self.advertise.rpartition(":")
        if not sep or not port.isdigit() or (host.count(":") and not host.endswith("]")):
            host, port = self.advertise, self.port
        host = host.strip("[]")
        return host, int(port)

    # -- handshake ------------------------------------------------------------------

    def authorized(self, data):
        """The acceptor's credentials check on CONNECT (nats-server's
        isRouterAuthorized): no cluster user, anything goes."""
        if not self.username:
            return True
        user, password = data.get("user"), data.get("pass")
        if user != self.username:
            return False
        return password_ok(self.password, password if isinstance(password, str) else "")

    def check_connect(self, data):
        """The acceptor's cluster name check on CONNECT: the -ERR text to
        close with, or None."""
        theirs = data.get("cluster") or ""
        if theirs == self.name:
            return None
        if self.dynamic and theirs and (not data.get("cluster_dynamic") or self.name < theirs):
            self._adopt_name(theirs)
            return None
        if data.get("cluster_dynamic"):
            return None  # the peer adopts ours from our INFO
        return 'Rejecting connection, cluster name "%s" does not match "%s"' % (theirs, self.name)

    def _adopt_name(self, name):
        log.info("Cluster name updated to {name}", name=name)
        self.name = name
        self.dynamic = False
        self.broker.add_info_field("cluster", name)
        for route in list(self.routes.values()):
            route.close("Cluster Name Conflict")

    def first_info(self, route, info):
        """The peer's first INFO: register the route, or close it."""
        sid = info.get("server_id")
        if not isinstance(sid, str) or not sid or info.get("gateway"):
            route.close("Protocol Violation")
            return
        b = self.broker
        if sid == b.server_id:
            # A configured route that is ourselves: never dialed again.
            route.no_reconnect = True
            if route.url is not None:
                self._self_urls.add(route.url.key)
            log.debug("Detected route to self, ignoring {url}",
                      url=route.url.text if route.url else route._peer())
            route.close("Route To Self")
            return
        theirs = info.get("cluster") or ""
        if theirs and theirs != self.name:
            if self.dynamic and (not info.get("cluster_dynamic") or self.name < theirs):
                self._adopt_name(theirs)
            elif not info.get("cluster_dynamic"):
                log.error("Rejecting connection, cluster name {theirs!r} does not match {ours!r}",
                          theirs=theirs, ours=self.name)
                route.close("Cluster Name Conflict")
                return
        if not route.did_solicit and info.get("server_name") == b.server_name:
            log.error("Remote server has a duplicate name: {name!r}", name=b.server_name)
            route.no_reconnect = True
            route.close("Duplicate Server Name")
            return
        existing = self.routes.get(sid)
        if existing is not None and not existing.closed:
            # First registered wins; the dialed URL moves to the route kept,
            # so that it is re-dialed when that one goes.
            if route.url is not None and existing.url is None:
                existing.url, existing.implicit = route.url, route.implicit
                existing.did_solicit = True
            route.no_reconnect = True
            route.close("Duplicate Route")
            return
        route.remote_id = sid
        route.remote_name = str(info.get("server_name") or "")
        route.remote_info = info
        route.headers = bool(info.get("headers")) and (route.did_solicit or route.headers)
        route.registered = True
        self.routes[sid] = route
        log.info("{peer} - rid:{rid} - Route connection created", peer=route._peer(), rid=route.cid)
        for observer in b.providers(IRouteObserver):
            try:
                observer.route_registered(dict(info))
            except Exception:
                log.failure("route observer {o!r} failed", o=observer)
        self._send_interest(route)
        self.update_client_urls()
        if not route.implicit:
            # Tell the others about it (a route we dialed because of gossip
            # was announced by whoever told us).
            self._gossip(route)

    def async_info(self, route, info):
        """An INFO on an established route: gossip about another server, or
        news about the peer itself (lame duck)."""
        if info.get("gateway"):
            return
        sid = info.get("server_id")
        if sid and sid != route.remote_id:
            self.implicit_route(route, info)
        elif info.get("ldm"):
            # The peer is going away: its clients' URLs leave our INFO.
            route.lame_duck = True
            self.update_client_urls()

    def implicit_route(self, via, info):
        sid = info.get("server_id")
        if not isinstance(sid, str) or sid == self.broker.server_id or sid in self.routes:
            return
        if info.get("route_account"):
            return  # a pinned-account route: we have no pool (as nats-server with pool_size -1)
        ip = info.get("ip")
        try:
            if ip:
                url = RouteURL.parse(ip)
            else:
                url = RouteURL(via.host, int(info.get("port") or 0))
        except (ValueError, TypeError):
            return
        if url.key in self._explicit_keys or not url.port:
            return
        if info.get("auth_required") and self.username:
            # As nats-server's processImplicitRoute: our cluster credentials.
            url.user, url.password = self.username, self.password
        log.debug("Connecting to implicit route {url}", url=url.text)
        self.solicit(url, implicit=True)

    def _gossip(self, new):
        info = dict(new.remote_info)
        for key in ("nonce", "route_account", "route_pool_idx"):
            info.pop(key, None)
        if not info.get("ip"):
            info["ip"] = "nats-route://%s/" % _host_port(new.host, int(info.get("port") or 0))
        line = b"INFO " + json.dumps(info, separators=(",", ":")).encode() + b"\r\n"
        for route in self.routes.values():
            if route is not new:
                route.send(line)

    def route_closed(self, route):
        if route in self.connections:
            self.connections.discard(route)
            t = self._closed_totals
            t[0] += route.in_msgs
            t[1] += route.in_bytes
            t[2] += route.out_msgs
            t[3] += route.out_bytes
        was = route.registered and self.routes.get(route.remote_id) is route
        if was:
            del self.routes[route.remote_id]
            log.info("{peer} - rid:{rid} - Router connection closed: {reason}", peer=route._peer(),
                     rid=route.cid, reason=route.close_reason)
        route.drop_interest()
        if was:
            self.update_client_urls()
        if self.stopping or route.no_reconnect or route.url is None:
            return
        if route.implicit:
            # A gossiped server is re-dialed once (connect_retries 0).
            self._later(random.random() * 0.1, self.solicit, route.url, True)
        else:
            self._later(ROUTE_RECONNECT + random.random() * 0.1, self.solicit, route.url)

    # -- interest -------------------------------------------------------------------

    def watch_account(self, acc):
        """Keep the peers' view of ``acc``'s interest from now on (with what
        it already has)."""
        change = acc.sublist.on_change = functools.partial(self._local_change, acc)
        for sub in acc.sublist.all_subscriptions():
            change(sub, 1)

    def _local_change(self, acc, sub, delta):
        owner = sub.owner.__class__
        if owner is RouteSink or owner.__name__ == "ServiceImportSink":
            # A peer's own interest is never announced back, nor are service
            # import subscriptions (nats-server's sub.si).
            return
        counts = self.interest.get(acc.name)
        if counts is None:
            counts = self.interest[acc.name] = {}
        key = (sub.subject, sub.queue)
        n = counts.get(key, 0) + delta
        if n <= 0:
            counts.pop(key, None)
        else:
            counts[key] = n
        if not self.routes:
            return
        accb = acc.name.encode()
        if sub.queue is None:
            if n == 1 and delta > 0:
                line = b"RS+ %s %s\r\n" % (accb, sub.subject)
            elif n <= 0:
                line = b"RS- %s %s\r\n" % (accb, sub.subject)
            else:
                return
        elif n > 0:
            line = b"RS+ %s %s %s %d\r\n" % (accb, sub.subject, sub.queue, n)
        else:
            line = b"RS- %s %s %s\r\n" % (accb, sub.subject, sub.queue)
        for route in self.routes.values():
            if route.can_import(sub.subject):
                route.send(line)

    def _send_interest(self, route):
        out = []
        for acc_name, counts in self.interest.items():
            accb = acc_name.encode()
            for (subject, queue), n in counts.items():
                if not route.can_import(subject):
                    continue
                if queue is None:
                    out.append(b"RS+ %s %s\r\n" % (accb, subject))
                else:
                    out.append(b"RS+ %s %s %s %d\r\n" % (accb, subject, queue, n))
        if out:
            route.send(b"".join(out))

    def _account(self, name):
        return self.broker.accounts.get(name.decode(errors="replace"))

    def remote_sub(self, route, acc_name, subject, queue, weight):
        acc = self._account(acc_name)
        if acc is None:
            log.debug("Unknown account {acc!r} for subject {subject!r}", acc=acc_name, subject=subject)
            return
        if not route.can_export(subject, queue):
            log.debug("{peer} - rid:{rid} - Can not export {subject!r}, ignoring remote subscription "
                      "request", peer=route._peer(), rid=route.cid, subject=subject.decode(errors="replace"))
            return
        route.set_interest(acc, subject, queue, weight if queue is not None else 1)

    def remote_unsub(self, route, acc_name, subject, queue):
        acc = self._account(acc_name)
        if acc is not None:
            route.set_interest(acc, subject, queue, 0)

    # -- messages -------------------------------------------------------------------

    def routed_msg(self, route, acc_name, subject, reply, queues, hdr_len, raw):
        """RMSG/HMSG: local subscribers only (one hop); of the queue groups,
        only those listed, each to one local member."""
        acc = self._account(acc_name)
        if acc is None:
            return
        broker = self.broker
        broker.route_source = route
        route.account = acc
        r = acc._match_cache.get(subject)
        if r is None:
            r = acc.sublist.match(subject)
        psubs, qgroups = r
        shown = subject
        if reply and reply[:1] == b"$":
            # A JetStream delivery: the stored message's subject rides after
            # '@' in its $JS.ACK reply; clients see it as the MSG subject.
            stored, ack = split_deliver_reply(reply)
            if stored is not None:
                shown, reply = stored, ack
        for sub in psubs:
            owner = sub.owner
            cls = owner.__class__
            if cls is RouteSink or cls.__name__ == "ServiceImportSink":
                # (nats-server does not process service imports for messages
                # from a route: the sending server did.)
                continue
            if shown is not subject and cls.__name__ == "ShadowSink":
                owner.deliver_stored(sub, shown, reply, hdr_len, raw)
            else:
                owner.deliver(sub, shown, reply, hdr_len, raw)
        if not queues or not qgroups:
            return
        for group in qgroups:
            if group[0].queue not in queues:
                continue
            local = [s for s in group if s.owner.__class__ is not RouteSink]
            if not local:
                continue
            start = random.randrange(len(local))
            for i in range(len(local)):
                sub = local[(start + i) % len(local)]
                if sub.owner.deliver(sub, shown, reply, hdr_len, raw) is not False:
                    break

    # -- client URLs ------------------------------------------------------------------

    def own_client_urls(self):
        b = self.broker
        host = b.host
        if host in ("", "0.0.0.0", "::"):
            return [_host_port(ip, b.port) for ip in _local_ips()]
        return [_host_port(host, b.port)]

    def own_ws_urls(self):
        """Our WebSocket listener's "host:port"s (none without one), which
        peers learn from ws_connect_urls in our route INFO."""
        b = self.broker
        factory = getattr(b, "websocket", None)
        port = getattr(factory, "port", None)
        if not port:
            return []
        ws = b.config.websocket
        if ws.advertise:
            return [ws.advertise]
        if ws.host in ("", "0.0.0.0", "::"):
            return [_host_port(ip, port) for ip in _local_ips()]
        return [_host_port(ws.host, port)]

    def _peer_url_lists(self, key):
        """The ``key`` list (connect_urls, ws_connect_urls) of each route's
        INFO, routes in lame duck mode left out."""
        for route in self.routes.values():
            if not getattr(route, "lame_duck", False):
                yield route.remote_info.get(key) or ()

    def _cluster_urls(self, own, key):
        urls = [] if self.lame_duck else list(own())
        for peer_urls in self._peer_url_lists(key):
            for u in peer_urls:
                if isinstance(u, str) and u not in urls:
                    urls.append(u)
        return urls

    def ws_client_urls(self):
        """connect_urls for WebSocket clients: the cluster's WebSocket URLs
        (nats-server's generateClientInfoJSON gives them WSConnectURLs)."""
        return self._cluster_urls(self.own_ws_urls, "ws_connect_urls")

    def client_urls(self):
        return self._cluster_urls(self.own_client_urls, "connect_urls")

    def _peers_advertise(self):
        """Whether a route (not in lame duck mode) gave us client or
        WebSocket URLs in its INFO."""
        return any(any(self._peer_url_lists(key)) for key in ("connect_urls", "ws_connect_urls"))

    def update_client_urls(self):
        """connect_urls in client INFO (nats-server has none until a route
        first brings some), and an async INFO to the clients that take one.

        As nats-server's updateServerINFOAndSendINFOToClients: only URLs a
        route announces change the INFO, so a route whose INFO has no
        connect_urls (a raw peer, a no_advertise server) sends clients no
        INFO, and our own URL appears only with the first URLs of a peer."""
        if not self._urls_sent and not self._peers_advertise():
            return
        if self.no_advertise:
            return
        urls, ws_urls = self.client_urls(), self.ws_client_urls()
        b = self.broker
        plain_same = self._urls_sent and b._info_extra.get("connect_urls") == urls
        ws_same = self._urls_sent and self.ws_urls == ws_urls
        if plain_same and ws_same:
            return
        self._urls_sent = True
        b.add_info_field("connect_urls", urls)
        self.ws_urls = ws_urls
        for c in list(b.clients()):
            # As nats-server: clients of protocol 1 that have had their first
            # PONG (before that, the INFO after it carries the news); each
            # kind only when its own list changed.
            if c.closed or (plain_same if getattr(c, "websocket", None) is None else ws_same):
                continue
            if c.opts.protocol >= 1 and getattr(c, "_first_pong_sent", False):
                fields = b.info_fields(c)
                fields.pop("nonce", None)
                c.send(wire.info(fields))
