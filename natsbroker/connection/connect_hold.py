"""A CONNECT that waits: for the auth service (auth callout,
:mod:`natsbroker.auth.callout`) or, in operator mode, for an account JWT the
URL resolver must fetch first. Nothing the client sends after it is
processed until the answer: it is kept, parsed, in order, and past
:data:`HOLD_LIMIT` reading pauses, as nats-server's read loop waits.

A mixin of :class:`~.client.ClientProtocol`, which holds the state
(``_callout``, ``_held_ops``: None while no CONNECT waits, ``_held_bytes``,
``_reads_paused``, ``_expiry_call``) and checks ``_held_ops`` in
``dataReceived``; it provides the CONNECT steps this calls back into
(``_on_connect``, ``_accept_connect``, ``_auth_violation``, ``_join``,
``_dispatch_ops``) and ``broker``, ``auth``, ``transport``, ``send_err``.
"""

from twisted.logger import Logger

# The log's ``logger`` name stays the client connection's, as before the split.
log = Logger(namespace="natsbroker.connection.client")

# While a CONNECT waits for the auth service, what the client sends next is
# kept (parsed) up to about this many bytes; then reading pauses until the
# answer, as nats-server's read loop waits for it.
HOLD_LIMIT = 64 * 1024


class ConnectHold:
    """Mixin: a client's CONNECT held for an answer (see the module)."""

    def _hold_ops(self, ops, size):
        # A CONNECT waits for the auth service: keep what came after it, in
        # order; past HOLD_LIMIT stop reading until the answer.
        self._held_ops.extend(ops)
        self._held_bytes += size
        if self._held_bytes > HOLD_LIMIT and not self._reads_paused:
            self._reads_paused = True
            self.transport.pauseProducing()

    # -- auth callout (natsbroker.auth.callout) ---------------------------------

    def _hold_for_callout(self, opts):
        """Ask the auth service about this CONNECT; the connection waits
        (nothing it sends after is processed) until it answers."""
        from natsbroker.auth.callout import PendingCallout
        # The auth timer stops at CONNECT, as nats-server's: the wait for the
        # service has a timeout of its own.
        if self._auth_call is not None and self._auth_call.active():
            self._auth_call.cancel()
        self._auth_call = None
        self.opts = opts
        self._held_ops = []
        self._held_bytes = 0
        pending = PendingCallout(self.auth.callout, self, opts, self._callout_done)
        self._callout = pending
        why = pending.start()
        if why is not None:
            self._callout = None
            self._held_ops = None
            log.warn("{why}", why=why)
            self._auth_violation(opts)

    def _hold_for_fetch(self, op, opts):
        """Operator mode: a login whose account JWT must first be fetched (the
        URL resolver) waits for it as for the auth service, then the CONNECT
        is taken again. True if it waits."""
        operator = self.broker.operator
        wait = operator.prefetch_login(opts, self) if operator is not None else None
        if wait is None:
            return False
        if self._auth_call is not None and self._auth_call.active():
            self._auth_call.cancel()
        self._auth_call = None
        self._held_ops = []
        self._held_bytes = 0
        wait.addBoth(lambda _: self._fetch_done(op))
        return True

    def _fetch_done(self, op):
        held, self._held_ops = self._held_ops, None
        if self.closed:
            return
        b = self.broker
        b.begin()
        try:
            self._on_connect(op, fetched=True)
            if held and not self.closed:
                if self._held_ops is not None:
                    self._held_ops.extend(held)  # (now held for the auth service)
                else:
                    self._dispatch_ops(held)
        finally:
            b.end()
        if self._reads_paused and not self.closed and self._held_ops is None:
            self._reads_paused = False
            self.transport.resumeProducing()

    def _callout_done(self, admission, why):
        """The auth service answered (``admission``) or did not (None,
        ``why`` nats-server's warning, or None after the timeout)."""
        self._callout = None
        held, self._held_ops = self._held_ops, None
        if self.closed:
            return
        opts = self.opts
        b = self.broker
        b.begin()
        try:
            if admission is None:
                self._auth_violation(opts)
                if why:
                    log.warn("{why}", why=why)
                return
            self.user = admission.user
            self.permissions = admission.permissions
            self._join(admission.account)
            if not self.auth.admit(self):
                return
            if admission.expires_in:
                self._expiry_call = b.reactor.callLater(admission.expires_in, self._callout_expired)
            self._accept_connect(opts)
            if held:
                self._dispatch_ops(held)
        finally:
            b.end()
        if self._reads_paused and not self.closed:
            self._reads_paused = False
            self.transport.resumeProducing()

    def _callout_expired(self):
        # The user JWT the auth service issued has expired.
        self._expiry_call = None
        if not self.closed:
            log.debug("{prefix} - User Authentication Expired", prefix=self.log_prefix())
            self.send_err("User Authentication Expired", close=True, reason="Authentication Expired")
