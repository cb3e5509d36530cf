"""Carries an NRG node's effects over a broker account (Twisted side).

The state machine (:mod:`.node`) decides; this adapter only moves bytes and
time: ``Send`` becomes an internal publish in the group's account (the
system account, as nats-server keeps NRG traffic), ``Subscribe`` a hidden
internal subscription, the node's next deadline a ``callLater`` on the
broker's reactor, and messages on its subjects go back into
:meth:`Node.receive`.

As nats-server's send queue does (its internal client has ``noIcb`` set), a
message a server publishes for one of its Raft nodes never reaches that
server's own internal subscriptions: only other servers' nodes (over routes)
and ordinary subscribers (a ``$SYS`` user watching ``$NRG.>``) see it.
"""

from natsbroker.cluster.raft.node import Committed, LeaderChange, Log, Send, Subscribe, Unsubscribe
from natsbroker.cluster.raft.storage import StorageError


class RaftTransport:
    """Runs ``node`` in ``account`` (an IBroker) on ``reactor``.

    ``on_commit(Committed)`` and ``on_leader(LeaderChange)`` reach the upper
    layer; ``log(level, text)`` gets the node's log lines;
    ``on_failure(StorageError)`` hears that the log turned out damaged while
    running (a record failing its checksum when read, to apply it or to
    send it to a follower): the node is stopped then, never acting on what
    it cannot read, and the error is logged. (A damaged log found when the
    node starts is raised by :meth:`start`, for the caller to move aside.)
    """

    def __init__(self, node, account, reactor, on_commit=None, on_leader=None, log=None,
                 on_failure=None):
        self.node = node
        self.account = account
        self.reactor = reactor
        self.on_commit = on_commit
        self.on_leader = on_leader
        self.log = log
        self.on_failure = on_failure
        self.failed = None
        self._subs = {}
        self._timer = None
        self._timer_at = None
        self._flush_call = None
        self.stopped = False

    def start(self):
        self._run(self.node.start())

    def stop(self):
        if self.stopped:
            return
        self._run(self.node.stop())
        self.stopped = True
        self._cancel_timer()
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        for sub in self._subs.values():
            self.account.unsubscribe(sub)
        self._subs.clear()

    def call(self, method, *args, **kwargs):
        """Call a node method that returns effects, and carry them out."""
        self._run(self._guarded(method, *args, **kwargs))

    def _guarded(self, method, *args, **kwargs):
        try:
            return method(*args, **kwargs)
        except StorageError as e:
            self._fail(e)
            return ()

    def _fail(self, err):
        if self.failed is not None:
            return
        self.failed = str(err)
        if self.log is not None:
            self.log("error", "Raft log damaged while running (%s): group %s stopped on this "
                     "server, nothing read from it is used; a restart moves the log aside "
                     "and its peers catch it up" % (err, self.node.group))
        self.stop()
        if self.on_failure is not None:
            self.on_failure(err)

    def propose(self, data):
        """Queue a proposal (leader only: NotLeader otherwise); proposals made
        in one reactor turn go out together in as few AppendEntries (so as
        few synced WAL writes) as the batch limits allow."""
        self.node.propose(data, flush=False)
        if self._flush_call is None or not self._flush_call.active():
            self._flush_call = self.reactor.callLater(0, self._flush)

    def _flush(self):
        self._flush_call = None
        if not self.stopped:
            self._run(self._guarded(self.node.flush))

    # -- inbound --------------------------------------------------------

    def _on_msg(self, sub, subject, reply, hdr_len, raw):
        if self.account.route_source is None:
            return  # published by this server: see the module docstring
        if isinstance(subject, (bytes, bytearray)):
            subject = subject.decode("latin-1")
        if isinstance(reply, (bytes, bytearray)):
            reply = reply.decode("latin-1")
        self._run(self._guarded(self.node.receive, subject, reply or "", bytes(raw[hdr_len:])))

    # -- effects ----------------------------------------------------------

    def _run(self, effects):
        if self.stopped:
            return
        for e in effects:
            kind = type(e)
            if kind is Send:
                self.account.publish(e.subject, e.payload, reply=e.reply or None)
            elif kind is Subscribe:
                if e.subject not in self._subs:
                    self._subs[e.subject] = self.account.subscribe(e.subject, self._on_msg, hidden=True)
            elif kind is Unsubscribe:
                sub = self._subs.pop(e.subject, None)
                if sub is not None:
                    self.account.unsubscribe(sub)
            elif kind is Committed:
                if self.on_commit is not None:
                    self.on_commit(e)
            elif kind is LeaderChange:
                if self.on_leader is not None:
                    self.on_leader(e)
            elif kind is Log:
                if self.log is not None:
                    self.log(e.level, e.text)
        self._schedule()

    # -- time -----------------------------------------------------------

    def _schedule(self):
        if self.stopped:
            return
        at = self.node.next_deadline()
        if at == self._timer_at and self._timer is not None and self._timer.active():
            return
        self._cancel_timer()
        if at is None:
            return
        self._timer_at = at
        self._timer = self.reactor.callLater(max(0.0, at - self.reactor.seconds()), self._tick)

    def _cancel_timer(self):
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = self._timer_at = None

    def _tick(self):
        self._timer = self._timer_at = None
        self._run(self._guarded(self.node.tick))
