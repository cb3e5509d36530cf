"""Lame duck mode: tell the clients to move away, then stop (SIGUSR2).

As nats-server's ``lameDuckMode`` (server.go): the client and WebSocket
listeners close, JetStream shuts down (its stores closed), every client that
takes async INFO is told ``"ldm":true``; after ``lame_duck_grace_period`` the
clients are closed one by one, spread over the rest of ``lame_duck_duration``,
then the server shuts down. The grace period lets several servers be put in
lame duck mode together without their clients reconnecting to each other.
"""

import random

from twisted.internet import defer
from twisted.logger import Logger

from natsbroker.broker import INFO_ORDER
from natsbroker.gocompat.durations import NANOS
from natsbroker.interfaces import ILameDuckObserver, ISystemEvents
from natsbroker.protocol import wire

log = Logger()

SHUTDOWN_REASON = "Server Shutdown"


def to_nanos(seconds):
    return round(seconds * NANOS)


def close_schedule(clients, duration_ns, grace_ns):
    """``(interval_ns, batch)``: how nats-server spreads closing ``clients``
    connections over what the grace period leaves of the duration: at most
    one a second, and with more clients than nanoseconds, in batches."""
    dur = duration_ns - grace_ns
    if dur <= 0:
        dur = NANOS
    batch = 1
    si = dur // clients if clients else 0
    if si < 1:
        si = 1
        batch = clients // dur
    elif si > NANOS:
        si = NANOS
    return si, batch


def ldm_info(broker, client):
    """The INFO a client is sent on entering lame duck mode: the server's
    INFO for this client (as after CONNECT, without the CONNECT answer's
    fields and without a nonce), with ``"ldm":true``."""
    fields = broker.info_fields(client, connect_info=True)
    for key in ("connect_info", "remote_account", "acc_is_sys", "nonce"):
        fields.pop(key, None)
    fields["ldm"] = True
    rank = {k: i for i, k in enumerate(INFO_ORDER)}
    return wire.info(dict(sorted(fields.items(), key=lambda kv: rank.get(kv[0], len(rank)))))


def takes_async_info(client):
    """nats-server sends async INFO only to clients that said protocol 1 and
    got their first PONG (fully registered); the others get the news, if
    at all, with that PONG."""
    opts = getattr(client, "opts", None)
    return (opts is not None and opts.protocol >= 1 and not client.closed
            and getattr(client, "_first_pong_sent", False))


class LameDuck:
    """One server's lame duck mode, driven by ``reactor`` timers.

    ``service`` is the :class:`natsbroker.server.BrokerService`; ``stop``
    shuts the server down (default: stop the reactor, which stops the
    service); ``rng`` picks the random pauses (a :class:`random.Random`)."""

    def __init__(self, service, reactor, stop=None, rng=None):
        self.service = service
        self.broker = service.broker
        self.reactor = reactor
        self._stop = stop if stop is not None else reactor.stop
        self.rng = rng if rng is not None else random.Random()
        self.active = False
        self.clients = []
        self.interval = self.batch = 0
        self._timer = None

    @defer.inlineCallbacks
    def enter(self):
        """Enter lame duck mode (once; not while shutting down, nor without
        a client listener, as nats-server)."""
        svc, broker = self.service, self.broker
        if broker.shutting_down or self.active or not svc.ports:
            return
        log.info("Entering lame duck mode, stop accepting new clients")
        self.active = True
        # nats-server's sendLDMShutdownEventLocked: $SYS.SERVER.<id>.LAMEDUCK.
        for speaker in broker.providers(ISystemEvents)[:1]:
            speaker.lame_duck_event()
        broker.lame_duck = True
        listeners = list(svc.ports) + ([svc.ws_port] if svc.ws_port is not None else [])
        for port in listeners:
            yield port.stopListening()
        yield self._tell_observers()
        clients = list(broker.clients())
        if broker.shutting_down or not clients:
            self._shutdown()
            return
        cfg = broker.config
        grace = to_nanos(cfg.lame_duck_grace_period)
        self.interval, self.batch = close_schedule(
            len(clients), to_nanos(cfg.lame_duck_duration), grace)
        self.clients = clients
        # No new client can come in now: tell the ones here to move on.
        cluster = getattr(svc, "cluster", None)
        if cluster is not None:
            cluster.enter_lame_duck()
        for client in clients:
            if takes_async_info(client):
                client.send(ldm_info(broker, client))
        self._timer = self.reactor.callLater(grace / NANOS, self._grace_over)

    @defer.inlineCallbacks
    def _tell_observers(self):
        # The listeners are closed, the clients not yet told: the started
        # plugins' turn (JetStream shuts down here, as in nats-server).
        started = getattr(self.service, "_started", [])
        for plugin in self.broker.providers(ILameDuckObserver):
            if plugin not in started:
                continue
            try:
                yield defer.maybeDeferred(plugin.lame_duck_entered)
            except Exception:
                log.failure("plugin {name} failed in lame duck mode", name=plugin.name)

    def _grace_over(self):
        self._timer = None
        if self.broker.shutting_down:
            return
        log.info("Closing existing clients")
        self._close_from(0)

    def _close_from(self, i):
        self._timer = None
        if self.broker.shutting_down:
            return
        clients = self.clients
        while i < len(clients):
            clients[i].close(SHUTDOWN_REASON)
            if i == len(clients) - 1:
                break
            if self.batch == 1 or i % self.batch == 0:
                si = self.interval
                pause = max(self.rng.randrange(si), si // 2)
                self._timer = self.reactor.callLater(pause / NANOS, self._close_from, i + 1)
                return
            i += 1
        self._shutdown()

    def _shutdown(self):
        self.clients = []
        if not self.broker.shutting_down:
            self._stop()

    def cancel(self):
        """The server is stopping some other way: no more timers."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
