"""Assembling a server: broker, plugins, listeners, monitoring, shutdown.

``make_service(config)`` returns a Twisted service (what ``twistd natsbroker``
runs); ``run(config)`` runs it under the reactor for the ``natsbroker`` command.
"""

import json
import os
import sys
import time

import attrs
from twisted.application import service
from twisted.internet import defer, endpoints
from twisted.internet.error import CannotListenError
from twisted.logger import Logger

from natsbroker import COMPAT_VERSION, __version__, _build
from natsbroker.auth.users import Authenticator
from natsbroker.broker import Broker
from natsbroker.config.load import ConfigError, load_config
from natsbroker.connection.client import ClientFactory, ClientListener
from natsbroker.connection.tls import TLSConfigError, server_context
from natsbroker.discovery import PluginLoadError, config_blocks, plugins_for
from natsbroker.fatal import StartupError, go_strerror, join_host_port, listen_error, path_error
from natsbroker.interfaces import IBrokerPlugin, IShutdownObserver, ISystemEvents

log = Logger()


def listen_backlog():
    """The accept queue Go gives every listener: the kernel's somaxconn (Twisted's
    default of 50 leaves clients connecting in a burst unanswered for minutes)."""
    try:
        with open("/proc/sys/net/core/somaxconn") as f:
            n = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 128  # Go's fallback, syscall.SOMAXCONN
    return max(1, min(n, 65535))


def _endpoint_string(host, port):
    port = 0 if port == -1 else port
    host = host.replace(":", "\\:")
    return "tcp:%d:interface=%s:backlog=%d" % (port, host, listen_backlog())


def _describe(addr):
    if hasattr(addr, "port"):
        return join_host_port(addr.host, addr.port)  # [::1]:4222, as nats-server
    return str(getattr(addr, "name", addr))


# What nats-server says when it cannot listen, per listener.
def _client_listen_error(host, port, err):
    return 'Error listening on port: %s, "%s"' % (join_host_port(host, port),
                                                 listen_error(host, port, err))


def _monitor_listen_error(host, port, err):
    return "Can't start monitoring: can't listen to the monitor port: " + listen_error(host, port, err)


def _websocket_listen_error(host, port, err):
    return "Unable to listen for websocket connections: " + listen_error(host, port, err)


class BrokerService(service.Service):
    """Runs one Broker: binds its ports, starts its plugins, then accepts
    clients; stops in reverse.  A start that fails logs one [FTL] line."""

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
        self.cluster = None  # natsbroker.cluster.routes.Cluster when clustered
        self.cluster_port = None
        self.ready = defer.Deferred()
        self._ports_file = None
        self._written = []  # files this server wrote, removed when it stops
        self._started = []  # plugins started, stopped in reverse
        self._start_failed = False

    @defer.inlineCallbacks
    def _start(self):
        cfg = self.config
        broker = self.broker
        try:
            plugins = plugins_for(cfg)
        except PluginLoadError as e:
            raise StartupError(str(e)) from None  # the operator's to fix, like a bad config
        for plugin in plugins:
            if not IBrokerPlugin.providedBy(plugin):
                raise StartupError("%r does not provide IBrokerPlugin" % (plugin,))
            broker.add_plugin(plugin)
        _build.log_build(log)  # now that the plugins (compiled ones too) are imported
        self._write_pid_file()
        # Every port is bound before a plugin starts, but accepts nobody until
        # they all have: a port in use stops the start before anything is
        # written (JetStream's store directory), and no client sees a server
        # without its JetStream.
        yield self._bind()
        for plugin in broker.plugins:
            yield defer.maybeDeferred(plugin.start, broker)
            self._started.append(plugin)
            broker.plugin_started(plugin)
        self._accept()
        self._write_ports_file()
        log.info("Server is ready")
        return self

    @defer.inlineCallbacks
    def _bind(self):
        """Bind every listener, in nats-server's order (monitoring, websocket,
        clients), each paused; a port that cannot be had is a StartupError."""
        cfg = self.config
        broker = self.broker
        monitor_host = cfg.http_host or cfg.host
        if cfg.http_port:
            from natsbroker.monitoring.http import make_site
            self.http_port = yield self._listen(monitor_host, cfg.http_port, make_site(broker),
                                                _monitor_listen_error)
        if cfg.https_port:
            from twisted.protocols.tls import TLSMemoryBIOFactory

            from natsbroker.monitoring.http import make_site
            self.https_tls = server_context(_https_tls(cfg.tls))
            self.https_port = yield self._listen(
                monitor_host, cfg.https_port, TLSMemoryBIOFactory(self.https_tls, False, make_site(broker)),
                _monitor_listen_error)
        if cfg.websocket.enabled:
            yield self._listen_websocket()
        self.client_tls = server_context(cfg.tls) if cfg.tls is not None else None
        self.client_listener = ClientListener(self.client_tls, cfg.allow_non_tls)
        factory = ClientFactory(broker, self.authenticator, self.client_listener)
        if cfg.port != 0 or not cfg.listen:
            self.ports.append((yield self._listen(cfg.host, cfg.port, factory, _client_listen_error)))
        for spec in cfg.listen:
            self.ports.append((yield self._listen_spec(spec, factory)))
        tcp = [p for p in self.ports if hasattr(p.getHost(), "port")]
        if tcp:
            broker.port = tcp[0].getHost().port
        if cfg.cluster.port:
            yield self._listen_cluster()

    @defer.inlineCallbacks
    def _listen_cluster(self):
        """The cluster port (routes), after the client port, as nats-server."""
        from natsbroker.cluster.routes import Cluster

        cfg = self.config
        try:
            self.cluster = Cluster(self.broker)
        except ValueError as e:
            raise StartupError("Error parsing cluster routes: %s" % e) from None
        host = cfg.cluster.host or "0.0.0.0"

        def error(h, port, err):
            return "Error listening on router port: %d - %s" % (port, listen_error(h, port, err))
        self.cluster_port = yield self._listen(host, cfg.cluster.port, self.cluster.factory(), error)
        self.cluster.listening(self.cluster_port.getHost().port)

    @defer.inlineCallbacks
    def _listen(self, host, port, factory, error):
        port = 0 if port == -1 else port
        ep = endpoints.serverFromString(self.reactor, _endpoint_string(host, port))
        try:
            listening = yield ep.listen(factory)
        except CannotListenError as e:
            raise StartupError(error(host, port, e.socketError)) from None
        _pause(listening)
        return listening

    @defer.inlineCallbacks
    def _listen_spec(self, spec, factory):
        # A twistd --listen endpoint: no nats-server words for it, only Go's errno text.
        try:
            listening = yield endpoints.serverFromString(self.reactor, spec).listen(factory)
        except CannotListenError as e:
            raise StartupError("Error listening on %s: %s" % (spec, go_strerror(e.socketError))) from None
        _pause(listening)
        return listening

    def _accept(self):
        """Let the bound listeners accept, and say so as nats-server does."""
        cfg = self.config
        for port in [self.ws_port] + self.ports + [self.cluster_port, self.http_port, self.https_port]:
            if port is not None:
                _resume(port)
        if self.ws_port is not None:
            log.info("Listening for websocket clients on {scheme}://{host}:{port}",
                     scheme=self.ws_scheme, host=cfg.websocket.host, port=self.ws_port.getHost().port)
            if self.ws_scheme == "ws":
                log.warn("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!")
        for port in self.ports:
            log.info("Listening for client connections on {addr}", addr=_describe(port.getHost()))
        if self.cluster is not None:
            log.info("Cluster name is {name}", name=self.cluster.name)
            log.info("Listening for route connections on {addr}",
                     addr=_describe(self.cluster_port.getHost()))
            self.cluster.start()
        if self.client_tls is not None:
            # nats-server's lines, which operators grep for.
            if cfg.allow_non_tls and not cfg.tls.handshake_first:
                log.info("TLS available for client connections")
            else:
                log.info("TLS required for client connections")
            if cfg.tls.handshake_first and not cfg.tls.handshake_first_fallback:
                log.warn('Clients that are not using "TLS Handshake First" option will fail to connect')
        if self.http_port is not None:
            log.info("Starting http monitor on {addr}", addr=_describe(self.http_port.getHost()))
        if self.https_port is not None:
            log.info("Starting https monitor on {addr}", addr=_describe(self.https_port.getHost()))

    @defer.inlineCallbacks
    def _listen_websocket(self):
        from natsbroker.connection.websocket import WebSocketFactory

        ws = self.config.websocket
        factory = WebSocketFactory(self.broker, self.authenticator)
        listening, scheme = factory, "ws"
        if ws.tls is not None:
            from twisted.protocols.tls import TLSMemoryBIOFactory

            self.ws_tls = factory.tls = server_context(ws.tls)
            listening, scheme = TLSMemoryBIOFactory(self.ws_tls, False, factory), "wss"
        self.ws_port = yield self._listen(ws.host, ws.port, listening, _websocket_listen_error)
        factory.port = self.ws_port.getHost().port
        self.ws_scheme = scheme
        self.broker.websocket = factory  # for /varz

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
        self.exit_code = 1
        self._start_failed = True
        # nats-server's last line is its [FTL] line: it exits right after.
        if failure.check(StartupError):
            log.critical("{message}", message=str(failure.value), nats_fatal=True)
        else:
            log.failure("Server failed to start", failure, nats_fatal=True)
        self.ready.errback(failure)
        self.ready.addErrback(lambda _: None)  # reported above, not an "Unhandled error"
        if self.reactor.running:
            self.reactor.stop()
        else:
            # twistd starts its services before its reactor runs.
            self.reactor.callWhenRunning(self.reactor.stop)

    exit_code = 0
    _pid_file = ""  # the pid file this server wrote

    def _write_pid_file(self):
        # First, as nats-server does: a pid file it cannot write stops the start.
        # Like nats-server's it is only the pid, private (0600), and left in
        # place at exit (``--signal cmd=<pid file>`` reads it as it is).
        path = self.config.pid_file
        if path:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(str(os.getpid()))
            except OSError as e:
                raise StartupError("Could not write pidfile: " + path_error("open", path, e)) from None
            self._pid_file = path

    def _write_ports_file(self):
        cfg = self.config
        if cfg.ports_file_dir:
            # nats-server names the file after its executable; under
            # `python -m natsbroker` argv[0] is __main__.py.
            name = os.path.basename(sys.argv[0])
            if not name or name.startswith("__main__"):
                name = "natsbroker"
            path = os.path.join(cfg.ports_file_dir, "%s_%d.ports" % (name, os.getpid()))
            try:
                with open(path, "w") as f:
                    json.dump(self.ports_info(), f)
            except OSError as e:
                # nats-server runs on without it.
                log.error("Error writing ports file ({path}): {error}", path=path,
                          error=path_error("open", path, e))
                return
            self._ports_file = path
            self._written.append(path)

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
        if self.cluster_port is not None:
            h = self.cluster_port.getHost()
            scheme = "tls" if self.config.cluster.tls is not None else "nats"  # as nats-server
            info["cluster"] = ["%s://%s:%d" % (scheme, host(h.host), h.port)]
        if self.ws_port is not None:
            h = self.ws_port.getHost()
            info["websocket"] = ["%s://%s:%d" % (self.ws_scheme, host(h.host), h.port)]
        return info

    def reload(self):
        """SIGHUP: read the TLS certificates, keys and CA files again (and, with
        a config file, its tls blocks). Other settings need a restart."""
        cfg = self.config
        try:
            fresh = cfg
            if cfg.config_file:
                fresh, _ = load_config(cfg.config_file, plugin_blocks=config_blocks)
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

    lame_duck = None  # natsbroker.lameduck.LameDuck, once asked for

    def enter_lame_duck(self):
        """SIGUSR2: tell the clients to move away, then stop (see natsbroker.lameduck)."""
        from natsbroker.lameduck import LameDuck

        if self.lame_duck is None:
            self.lame_duck = LameDuck(self, self.reactor)
        return self.lame_duck.enter()

    @defer.inlineCallbacks
    def stopService(self):
        super().stopService()
        broker = self.broker
        broker.shutting_down = True
        if self.lame_duck is not None:
            self.lame_duck.cancel()
        if not self._start_failed:
            log.info("Initiating Shutdown...")
            # nats-server's sendShutdownEvent: $SYS.SERVER.<id>.SHUTDOWN, then
            # no more events (not even for the clients closed below).
            for speaker in broker.providers(ISystemEvents)[:1]:
                speaker.shutdown_event()
        for port in self.ports:
            yield port.stopListening()
        if self.ws_port is not None:
            yield self.ws_port.stopListening()
        if self.cluster_port is not None:
            yield self.cluster_port.stopListening()
        if self.cluster is not None:
            self.cluster.stop()
        if self.http_port is not None:
            yield self.http_port.stopListening()
        if self.https_port is not None:
            yield self.https_port.stopListening()
        # Last words while the clients are still there (JetStream: 409 "Server
        # Shutdown" to waiting pull requests, so they pull again elsewhere).
        for observer in broker.providers(IShutdownObserver):
            try:
                observer.server_shutting_down()
            except Exception:
                log.failure("plugin {name} failed at shutdown", name=observer.name)
        for client in list(broker.clients()):
            client.close("Server Shutdown")
        for plugin in reversed(self._started):
            try:
                yield defer.maybeDeferred(plugin.stop)
            except Exception:
                log.failure("plugin {name} failed to stop", name=plugin.name)
        # Only what this server wrote. The pid file stays, as nats-server's
        # does, but not after a failed start (which leaves nothing behind).
        written = self._written + ([self._pid_file] if self._start_failed and self._pid_file else [])
        for path in written:
            try:
                os.unlink(path)
            except OSError:
                pass
        if not self._start_failed:
            log.info("Server Exiting..")


def _pause(port):
    # Bound and listening, but not accepting: connections wait in the backlog.
    if hasattr(port, "stopReading"):
        port.stopReading()


def _resume(port):
    if hasattr(port, "startReading"):
        port.startReading()


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
    """Run a server in the foreground until SIGINT/SIGTERM (or the end of lame
    duck mode); returns the exit code. Signals: see natsbroker.signals."""
    from twisted.internet import reactor

    from natsbroker.logs import SyslogError, start_logging
    try:
        start_logging(config)
    except (OSError, SyslogError) as e:
        # Before there is a log: nats-server's words, in Go's plain log format.
        text = str(e) if isinstance(e, SyslogError) else \
            "error opening file: " + path_error("open", config.log_file, e)
        sys.stderr.write("%s %s\n" % (time.strftime("%Y/%m/%d %H:%M:%S"), text))
        return 1
    top = make_service(config, reactor)
    svc = top.getServiceNamed("natsbroker")

    from natsbroker.gctune import tune
    from natsbroker.signals import install

    reactor.callWhenRunning(top.startService)
    reactor.callWhenRunning(tune)  # this process is a broker: see natsbroker/gctune.py
    reactor.addSystemEventTrigger("before", "shutdown", top.stopService)
    install(reactor, svc)
    reactor.run(installSignalHandlers=False)
    return svc.exit_code
