"""Assembling a server: broker, plugins, listeners, monitoring, shutdown.

``make_service(config)`` returns a Twisted service (what ``twistd natsbroker``
runs); ``run(config)`` runs it under the reactor for the ``natsbroker`` command.
"""

import json
import os
import signal
import sys

import attrs

from twisted.application import service
from twisted.internet import defer, endpoints
from twisted.logger import Logger

from natsbroker import COMPAT_VERSION, __version__
from natsbroker.auth import Authenticator
from natsbroker.broker import Broker
from natsbroker.interfaces import IBrokerPlugin
from natsbroker.plugin import plugins_for
from natsbroker.protocol.client import ClientFactory, ClientListener
from natsbroker.configfile import ConfigError, load_config
from natsbroker.tls import TLSConfigError, server_context

log = Logger()


def _endpoint_string(host, port):
    port = 0 if port == -1 else port
    host = host.replace(":", "\\:")
    return "tcp:%d:interface=%s" % (port, host)


def _describe(addr):
    if hasattr(addr, "port"):
        return "%s:%d" % (addr.host, addr.port)
    return str(getattr(addr, "name", addr))


class BrokerService(service.Service):
    """Runs one Broker: starts its plugins, then listens; stops in reverse."""

    name = "natsbroker"

    def __init__(self, config, reactor=None):
        if reactor is None:
            from twisted.internet import reactor
        self.reactor = reactor
        self.config = config
        self.broker = Broker(config, reactor)
        self.authenticator = Authenticator(config)
        self.ports = []
        self.http_port = None
        self.https_port = None
        self.https_tls = None
        self.client_tls = None
        self.client_listener = None
        self.ws_tls = None
        self.ws_port = None
        self.ready = defer.Deferred()
        self._ports_file = None

    @defer.inlineCallbacks
    def _start(self):
        cfg = self.config
        broker = self.broker
        for plugin in plugins_for(cfg):
            if not IBrokerPlugin.providedBy(plugin):
                raise TypeError("%r does not provide IBrokerPlugin" % (plugin,))
            broker.add_plugin(plugin)
        for plugin in broker.plugins:
            yield defer.maybeDeferred(plugin.start, broker)
        if cfg.websocket.enabled:
            yield self._listen_websocket()
        self.client_tls = server_context(cfg.tls) if cfg.tls is not None else None
        self.client_listener = ClientListener(self.client_tls, cfg.allow_non_tls)
        factory = ClientFactory(broker, self.authenticator, self.client_listener)
        specs = [_endpoint_string(cfg.host, cfg.port)] if cfg.port != 0 or not cfg.listen else []
        specs += list(cfg.listen)
        for spec in specs:
            ep = endpoints.serverFromString(self.reactor, spec)
            port = yield ep.listen(factory)
            self.ports.append(port)
            log.info("Listening for client connections on {addr}",
                     addr=_describe(port.getHost()))
        if self.client_tls is not None:
            # nats-server's lines, which operators grep for.
            if cfg.allow_non_tls and not cfg.tls.handshake_first:
                log.info("TLS available for client connections")
            else:
                log.info("TLS required for client connections")
            if cfg.tls.handshake_first and not cfg.tls.handshake_first_fallback:
                log.warn('Clients that are not using "TLS Handshake First" option will fail to connect')
        tcp = [p for p in self.ports if hasattr(p.getHost(), "port")]
        if tcp:
            broker.port = tcp[0].getHost().port
        if cfg.http_port:
            from natsbroker.monitor import make_site
            ep = endpoints.serverFromString(
                self.reactor, _endpoint_string(cfg.http_host or cfg.host, cfg.http_port))
            self.http_port = yield ep.listen(make_site(broker))
            log.info("Starting http monitor on {addr}", addr=_describe(self.http_port.getHost()))
        if cfg.https_port:
            from twisted.protocols.tls import TLSMemoryBIOFactory

            from natsbroker.monitor import make_site
            self.https_tls = server_context(_https_tls(cfg.tls))
            ep = endpoints.serverFromString(
                self.reactor, _endpoint_string(cfg.http_host or cfg.host, cfg.https_port))
            self.https_port = yield ep.listen(
                TLSMemoryBIOFactory(self.https_tls, False, make_site(broker)))
            log.info("Starting https monitor on {addr}", addr=_describe(self.https_port.getHost()))
        self._write_files()
        log.info("Server is ready")
        return self

    @defer.inlineCallbacks
    def _listen_websocket(self):
        from natsbroker.protocol.websocket import WebSocketFactory

        ws = self.config.websocket
        factory = WebSocketFactory(self.broker, self.authenticator)
        listening, scheme = factory, "ws"
        if ws.tls is not None:
            from twisted.protocols.tls import TLSMemoryBIOFactory

            self.ws_tls = factory.tls = server_context(ws.tls)
            listening, scheme = TLSMemoryBIOFactory(self.ws_tls, False, factory), "wss"
        ep = endpoints.serverFromString(self.reactor, _endpoint_string(ws.host, ws.port))
        self.ws_port = yield ep.listen(listening)
        factory.port = self.ws_port.getHost().port
        self.ws_scheme = scheme
        self.broker.websocket = factory  # for /varz
        log.info("Listening for websocket clients on {scheme}://{host}:{port}",
                 scheme=scheme, host=ws.host, port=factory.port)
        if scheme == "ws":
            log.warn("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!")

    def startService(self):
        super().startService()
        log.info("Starting natsbroker {v} (nats-server {c} compatible)",
                 v=__version__, c=COMPAT_VERSION)
        log.info("Server ID: {id}", id=self.broker.server_id)
        if _plaintext_passwords(self.config):
            log.warn("Plaintext passwords detected, use nkeys or bcrypt")
        d = self._start()
        d.addCallbacks(self.ready.callback, self._failed)
        return d

    def _failed(self, failure):
        log.failure("Server failed to start", failure)
        self.ready.errback(failure)
        if self.reactor.running:
            self.reactor.stop()
        self.exit_code = 1

    exit_code = 0

    def _write_files(self):
        cfg = self.config
        if cfg.pid_file:
            with open(cfg.pid_file, "w") as f:
                f.write(str(os.getpid()))
        if cfg.ports_file_dir:
            # nats-server names the file after its executable; under
            # `python -m natsbroker` argv[0] is __main__.py.
            name = os.path.basename(sys.argv[0])
            if not name or name.startswith("__main__"):
                name = "natsbroker"
            self._ports_file = os.path.join(
                cfg.ports_file_dir, "%s_%d.ports" % (name, os.getpid()))
            with open(self._ports_file, "w") as f:
                json.dump(self.ports_info(), f)

    def ports_info(self):
        """Client and monitoring URLs, in nats-server's ports-file shape."""
        def host(h):
            return "127.0.0.1" if h in ("0.0.0.0", "") else h
        info = {"nats": ["nats://%s:%d" % (host(p.getHost().host), p.getHost().port)
                         for p in self.ports if hasattr(p.getHost(), "port")]}
        if self.http_port is not None:
            h = self.http_port.getHost()
            info["monitoring"] = ["http://%s:%d" % (host(h.host), h.port)]
        if self.https_port is not None:
            h = self.https_port.getHost()
            info.setdefault("monitoring", []).append("https://%s:%d" % (host(h.host), h.port))
        if self.ws_port is not None:
            h = self.ws_port.getHost()
            info["websocket"] = ["%s://%s:%d" % (self.ws_scheme, host(h.host), h.port)]
        return info

    def reload(self):
        """SIGHUP: read the TLS certificates, keys and CA files again (and, with
        a config file, its tls blocks). Other settings need a restart."""
        log.info('Trapped "hangup" signal')
        cfg = self.config
        try:
            fresh = cfg
            if cfg.config_file:
                fresh, _ = load_config(cfg.config_file)
                if cfg.tls_from_flags:
                    fresh.tls = cfg.tls
            pairs = [(self.client_tls, fresh.tls), (self.https_tls, fresh.tls),
                     (self.ws_tls, fresh.websocket.tls)]
            built = []
            for current, tls in pairs:
                if current is None:
                    continue
                if tls is None:
                    raise ConfigError("turning TLS off needs a restart")
                if current is self.https_tls:
                    tls = _https_tls(tls)
                built.append((current, server_context(tls)))
        except (ConfigError, TLSConfigError) as e:
            log.error("Failed to reload server configuration: {e}", e=e)
            return False
        for current, new in built:
            current.adopt(new)
        if built:
            cfg.tls = fresh.tls
            cfg.websocket.tls = fresh.websocket.tls
            self.client_listener.refresh()
            log.info("Reloaded: tls = enabled")
        log.info("Reloaded server configuration")
        return True

    @defer.inlineCallbacks
    def stopService(self):
        super().stopService()
        broker = self.broker
        broker.shutting_down = True
        log.info("Initiating Shutdown...")
        for port in self.ports:
            yield port.stopListening()
        if self.ws_port is not None:
            yield self.ws_port.stopListening()
        if self.http_port is not None:
            yield self.http_port.stopListening()
        if self.https_port is not None:
            yield self.https_port.stopListening()
        for client in list(broker.clients()):
            client.close("Server Shutdown")
        for plugin in reversed(broker.plugins):
            try:
                yield defer.maybeDeferred(plugin.stop)
            except Exception:
                log.failure("plugin {name} failed to stop", name=plugin.name)
        for path in (self._ports_file, self.config.pid_file):
            if path:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        log.info("Server Exiting..")


def _https_tls(tls):
    # Monitoring uses the client port's certificate but asks for no client
    # certificate (nats-server clears ClientAuth for HTTPS).
    return attrs.evolve(tls, verify=False, verify_and_map=False,
                        verify_cert_and_check_known_urls=False, pinned_certs=[])


def _plaintext_passwords(config):
    auth = config.authorization
    passwords = [auth.password] + [u.password for u in auth.users]
    ws = getattr(config, "websocket", None)
    if ws is not None:
        passwords.append(ws.password)
    return any(p and not p.startswith("$2") for p in passwords)


def make_service(config, reactor=None):
    """The Twisted service for a server with ``config``."""
    top = service.MultiService()
    BrokerService(config, reactor).setServiceParent(top)
    return top


def run(config):
    """Run a server in the foreground until SIGINT/SIGTERM; returns the exit code."""
    from twisted.internet import reactor

    from natsbroker.logs import start_logging
    start_logging(config)
    top = make_service(config, reactor)
    svc = top.getServiceNamed("natsbroker")

    def shutdown(signum, frame):
        reactor.callFromThread(reactor.stop)

    def hangup(signum, frame):
        reactor.callFromThread(svc.reload)

    reactor.callWhenRunning(top.startService)
    reactor.addSystemEventTrigger("before", "shutdown", top.stopService)
    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    signal.signal(signal.SIGHUP, hangup)
    reactor.run(installSignalHandlers=False)
    return svc.exit_code
