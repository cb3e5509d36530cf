"""A connection's output queue: what is sent during a reactor turn is queued
and written once, joined, when the broker flushes its dirty connections at
the end of the turn.

Shared by client connections (:mod:`.client`) and routes (:mod:`.route`) as a
base class, not a member: the per-message path (``deliver`` appending to
``self._out``) keeps reading attributes of the connection itself, as before
the split. A client also registers itself as the transport's streaming
producer: while the transport is paused, output counts against its
``max_pending`` and the write deadline; a payload of :data:`LARGE_PAYLOAD` or
more is written as a piece of its own, held back (with all that follows)
until the transport's buffer drained. A connection class provides
``broker`` (``mark_dirty``, ``reactor``, ``config.write_deadline``),
``transport``, ``closed`` and ``_slow_consumer(deadline=False)``; a route
never registers as a producer, so it is never paused and never slow.
"""

# Payloads this large are queued and written as pieces of their own, not
# copied into a MSG frame.
LARGE_PAYLOAD = 256 * 1024

# Twisted reads (bufferSize, 64 KiB) and sends (SEND_LIMIT, 128 KiB) in small
# steps, one per reactor turn: ~1500 turns for a 60 MiB message. For a large
# payload a connection reads and sends up to this much per turn instead. A
# turn of 1 MiB takes about a millisecond; much more, and the other clients'
# PINGs would wait behind it.
LARGE_IO = 1024 * 1024


class OutputQueue:
    """Mixin: the output queue of a connection (see the module)."""

    def init_output(self, max_pending=0):
        self._out = []
        self._dirty = False
        self._large = False  # _out holds a large payload as a piece of its own
        # Output from a large payload on, waiting for the transport to drain.
        self._held = None
        self.paused = False
        self.pending_bytes = 0
        self.pending_chunks = 0
        self.max_pending = max_pending
        # The transport's send-now (a FileDescriptor's doWrite), if any.
        self._write_now = None

    def send(self, data):
        if self.closed:
            return
        self._out.append(data)
        if not self._dirty:
            self._dirty = True
            self.broker.mark_dirty(self)

    def flush(self):
        self._dirty = False
        out = self._out
        if not out or self.closed:
            return
        self._out = []
        if self.paused:
            # The socket is not draining: everything written now waits in
            # memory, and past max_pending the client is cut off.
            n = 0
            for chunk in out:
                n += len(chunk)
            self.pending_bytes += n
            self.pending_chunks += 1
            if self.pending_bytes > self.max_pending:
                self._slow_consumer()
                return
        if self._held is not None:
            # Queued behind a held large payload, in order.
            self._held.extend(out)
            self._large = False
            return
        if self._large:
            self._large = False
            self._write_pieces(out)
            return
        # One join here: Twisted would check every piece of a writeSequence.
        self._write(b"".join(out))

    def _write(self, data):
        self.transport.write(data)
        if not self.paused and self._write_now is not None:
            # Send now instead of on the reactor's next turn: saves a poll
            # round trip per message, which is most of request-reply latency.
            # An error is left for the reactor, which still has us as a writer.
            self._write_now()

    def _write_pieces(self, out):
        # Small pieces are joined. A large one must be alone in Twisted's
        # buffer when it is sent: behind unsent output Twisted joins it with
        # that (a copy of the payload in one go, tens of ms for 60 MiB). So it
        # is written and sent at once after what precedes it was handed to
        # the socket; if the transport has paused us (it still holds output),
        # it waits here, with all that follows, until resumeProducing says
        # that output is gone. (Less than bufferSize left unsent does not
        # pause us: then Twisted joins, once.)
        small = []
        transport = self.transport
        for i, piece in enumerate(out):
            if len(piece) < LARGE_PAYLOAD:
                small.append(piece)
                continue
            if small:
                self._write(b"".join(small))
                small = []
            if self.paused:
                self._held = out[i:]
                return
            if getattr(transport, "SEND_LIMIT", LARGE_IO) < LARGE_IO:
                transport.SEND_LIMIT = LARGE_IO
            transport.write(piece)
            if self._write_now is not None:
                self._write_now()
        if small:
            self._write(b"".join(small))

    def _release_held(self):
        # Closing: Twisted sends what it holds before it closes, so the held
        # output goes to it now (joined with the rest: the copy is a one-off).
        held = self._held
        if held is not None:
            self._held = None
            self.transport.writeSequence(held)

    # IPushProducer: the transport tells us when its buffer is full or drained.
    def pauseProducing(self):
        self.paused = True
        wd = self.broker.config.write_deadline
        if wd > 0 and self._deadline_call is None:
            self._deadline_call = self.broker.reactor.callLater(wd, self._write_deadline)

    def resumeProducing(self):
        self.paused = False
        self.pending_bytes = 0
        self.pending_chunks = 0
        if self._deadline_call is not None and self._deadline_call.active():
            self._deadline_call.cancel()
        self._deadline_call = None
        held = self._held
        if held is not None and not self.closed:
            # Twisted's buffer is empty: the next large payload can go.
            self._held = None
            self._write_pieces(held)
            if self._held is not None:
                # Still ours, not Twisted's, but waiting all the same.
                self.pending_bytes = sum(len(p) for p in self._held)

    def stopProducing(self):
        pass

    def _write_deadline(self):
        self._deadline_call = None
        if self.paused and not self.closed:
            self._slow_consumer(deadline=True)
            self.close_reason = "Slow Consumer (Write Deadline)"
