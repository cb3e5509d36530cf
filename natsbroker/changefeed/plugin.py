"""The change feed: every stream mutation as JSON Lines, for Spark to ingest.

Enabled by a ``changefeed { dir: ..., streams: [...] }`` block. It watches
JetStream through ``IStreamEvents`` (nothing else of JetStream's) and writes
one record per mutation -- message stored, message removed (and why), purge,
stream created/updated/deleted -- to ``feed-<n>.tmp`` in the feed directory.
A file is closed when it reaches ``max_file_size`` or ``max_file_age``: it is
fsynced and renamed to ``feed-<n>.jsonl``; names sort in feed order, and a
reader never sees a partial file. The record schema is in
``man/natsbroker-changefeed.5``, the lines are built in ``changefeed_lines``.

The reactor only collects a turn's events and hands them over as one frame;
formatting and every disk write happen in the writer process
(``changefeed_writer``, fed by ``changefeed_process``), so the feed costs a
publish little more than a list append and the broker's GIL none of the
formatting.

Crash safety: ``checkpoint.json`` (replaced atomically after each rename)
holds, per stream, the last stored sequence whose ``put`` record is in a
completed file. At start-up every stored message after it is written again,
so after a SIGKILL no stored (hence no acknowledged) message is missing from
the feed; the records repeated that way carry the same ``id``, which is what
the ingest de-duplicates on.
"""

import collections
import fnmatch
import json
import os
import time

from twisted.logger import Logger
from zope.interface import implementer

from natsbroker import private
from natsbroker.changefeed.lines import make_record, record_line
from natsbroker.changefeed.process import FeedDirBusy, WriterProcess, lock_dir
from natsbroker.changefeed.writer import AGE, CHECKPOINT, REPLAY_POS
from natsbroker.interfaces import IBrokerPlugin, IStreamEvents

log = Logger()

REPLAY_BATCH = 2000  # records written per reactor turn while catching up
LOCK_WAIT = 30.0  # seconds to wait for a previous writer to finish with the directory


@implementer(IBrokerPlugin)
class ChangeFeed:
    name = "changefeed"

    def __init__(self, config):
        self.config = config
        self.cfg = config.changefeed
        self.broker = None
        self.js = None
        self.writer = None
        self._pending = []  # this turn's records
        self._ready = collections.deque()  # earlier turns' records, for the writer
        self._flush_call = None
        self._age_calls = {}  # file number -> its max_file_age timer
        self._retention_call = None
        self.checkpoint = {}  # stream -> {"created": ns, "seq": n}
        self._replay_pos = {}  # stream -> next seq the start-up replay will write
        self._wanted = {}  # stream -> included?
        self._generation = 0  # of the writer process: a replay belongs to one
        self._restart_call = None

    @property
    def records(self):
        return self.writer.records if self.writer is not None else 0

    # -- lifecycle ------------------------------------------------------------

    def start(self, broker):
        self.broker = broker
        stores = broker.providers(IStreamEvents)
        js = stores[0] if stores else None
        if js is None:
            log.error("change feed: no plugin offers IStreamEvents (is JetStream on?); disabled")
            return
        self.js = js
        self.dir = os.path.abspath(self.cfg.dir or broker.store_path("changefeed"))
        private.make_dirs(self.dir)  # 0700: the feed holds message data
        try:
            names = self._start_writer(LOCK_WAIT)
        except FeedDirBusy as e:
            from natsbroker.fatal import StartupError
            raise StartupError(str(e)) from None
        js.add_stream_observer(self.on_events, batched=True)
        self._replay(names, None, self._generation)
        if self.cfg.retention > 0:
            self._expire_old()
        log.info("Change feed: writing to {dir}", dir=self.dir)

    def _start_writer(self, lock_wait):
        """Take the directory, set the replay up from the checkpoint and
        start the writer process; returns the streams to replay."""
        lock_fd = lock_dir(self.dir, lock_wait)
        numbers = [0]
        for name in os.listdir(self.dir):
            if name.startswith("feed-") and name.endswith(".tmp"):
                # An unfinished file of a previous run: its puts are replayed.
                os.unlink(os.path.join(self.dir, name))
            elif private.is_temp_of(name, CHECKPOINT):
                # A checkpoint write a crash cut short (or something planted
                # under the name: unlinking a symlink leaves its target).
                os.unlink(os.path.join(self.dir, name))
            elif name.startswith("feed-") and name.endswith(".jsonl"):
                try:
                    numbers.append(int(name[5:-6]))
                except ValueError:
                    pass
        self._load_checkpoint()
        names = [n for n in self.js.stream_names() if self.wants(n)]
        # Until the replay reaches a stream, live puts of it in a completed
        # file must not move its checkpoint past what the replay has to write.
        self._replay_pos = {name: self._replay_start(name) for name in names}
        self._generation += 1
        self.writer = WriterProcess(self.dir, self.cfg.max_file_size, max(numbers),
                                    self.checkpoint, self._replay_pos, self._opened_in_thread,
                                    lock_fd, self._died_in_thread)
        self.writer.start()
        return names

    def _died_in_thread(self, writer, status):
        self.broker.reactor.callFromThread(self._died, writer, status)

    def _died(self, writer, status):
        """The writer process ended without being asked to: start another
        one (at most once a second), which writes the puts after the
        checkpoint again, as at start-up after a crash."""
        if self.js is None or writer is not self.writer:
            return
        log.error("change feed: the writer process exited (status {status}); starting a new "
                  "one, which writes the puts since the checkpoint again", status=status)
        self.writer = None
        for call in [self._flush_call, *self._age_calls.values()]:
            if call is not None and call.active():
                call.cancel()
        self._flush_call = None
        self._age_calls = {}
        # What was queued is written again by the replay (puts) or was the
        # lost file's (the rest), as after a crash.
        self._pending = []
        self._ready.clear()
        writer.close()
        self._restart_call = self.broker.reactor.callLater(1.0, self._restart)

    def _restart(self):
        self._restart_call = None
        if self.js is None:
            return
        try:
            names = self._start_writer(LOCK_WAIT)
        except (OSError, FeedDirBusy) as e:
            log.error("change feed: cannot start the writer again: {e}; the feed stops", e=e)
            return
        self._replay(names, None, self._generation)

    def stop(self):
        if self.js is None:
            return
        if self._restart_call is not None and self._restart_call.active():
            self._restart_call.cancel()
        self.js.remove_stream_observer(self.on_events)
        for call in [self._flush_call, self._retention_call, *self._age_calls.values()]:
            if call is not None and call.active():
                call.cancel()
        if self.writer is None:  # between a writer's death and its successor
            self.js = None
            return
        self._age_calls = {}
        # Shutting down: write everything and finish the open file now.
        self._ready.append(self._pending)
        self._pending = []
        while self._ready:
            self.writer.submit(self._ready.popleft())
        self.writer.stop()
        self.js = None

    # -- selection --------------------------------------------------------------

    def wants(self, stream):
        pats = self.cfg.streams
        return not pats or any(fnmatch.fnmatchcase(stream, p) for p in pats)

    # -- events ------------------------------------------------------------------

    def on_events(self, events):
        """A group commit's events (durable now), once per commit: puts go
        to the writer as runs of their fields, other records formatted."""
        wanted = self._wanted
        every = not self.cfg.streams
        out = []
        # Puts go as runs (see changefeed_writer): consecutive puts of one
        # stream with consecutive sequences share one header, so a put is
        # four items, not seven: marshalling the stream name and two ints
        # per put was a third of what the feed cost the reactor.
        run_stream = None
        run_created = next_seq = count_at = 0
        for ev in events:
            # Unpacked, not by name or index: compiled, a named tuple's field
            # costs a generic attribute lookup, an index a Python-level
            # __getitem__; iterating it is the tuple's own C iterator.
            stream, created, op, seq, ts, _, m, _, _ = ev
            if not every:
                if stream in wanted:
                    if not wanted[stream]:
                        continue
                elif not wanted.setdefault(stream, self.wants(stream)):
                    continue
            if op == "put":
                _, subject, hdr, data, _ = m
                if seq == next_seq and stream == run_stream and created == run_created:
                    out[count_at] += 1
                else:
                    out.append(stream)
                    out.append(created)
                    out.append(seq)
                    count_at = len(out)
                    out.append(1)
                    run_stream = stream
                    run_created = created
                next_seq = seq + 1
                out.append(ts)
                out.append(subject)
                out.append(hdr)
                out.append(data)
            else:
                out.append(record_line(make_record(ev)))
                run_stream = None
        if not out or self.writer is None:
            return  # (no writer: its successor's replay writes the puts)
        if self._pending or self._ready:
            # The start-up replay's records are queued: these go after them.
            self._add(*out)
        else:
            self.writer.submit(out)

    def _flush(self):
        """Hand this turn's queued records (the replay's, file ages, and live
        records queued behind them) to the writer one reactor turn later."""
        self._flush_call = None
        self._ready.append(self._pending)
        self._pending = []
        self.broker.reactor.callLater(0, self._hand)

    def _hand(self):
        # The oldest batch, whichever of these calls runs first: every batch
        # waits at least one turn, and they reach the writer in feed order.
        if self._ready and self.writer is not None:
            self.writer.submit(self._ready.popleft())

    def _replay_start(self, name):
        cp = self.checkpoint.get(name)
        created = self.js.stream_created(name)
        return cp["seq"] + 1 if cp and cp.get("created") == created else 1

    def _replay(self, names, position, generation):
        """Write put records for stored messages newer than the checkpoint, a
        batch per reactor turn (a large backlog must not stall the server)."""
        if generation != self._generation or self.writer is None:
            return  # a writer that is gone: its successor replays
        n = 0
        while names:
            name = names[0]
            created = self.js.stream_created(name)
            if position is None:
                position = self._replay_start(name)
            msg = self.js.read_stream(name, position)
            while msg is not None and n < REPLAY_BATCH:
                self.on_replayed(name, created, msg)
                n += 1
                position = msg.seq + 1
                msg = self.js.read_stream(name, position)
            if msg is not None:
                # Live records interleave with the rest of the backlog: the
                # checkpoint may not pass what the replay has written.
                self._set_replay_pos(name, position)
                self.broker.reactor.callLater(0, self._replay, names, position, generation)
                return
            self._set_replay_pos(name, None)
            names.pop(0)
            position = None

    def _set_replay_pos(self, name, position):
        if position is None:
            self._replay_pos.pop(name, None)
        else:
            self._replay_pos[name] = position
        self._add((REPLAY_POS, name, position))

    def on_replayed(self, name, created, msg):
        # A put as the writer takes it: a run of one.
        self._add(name, created, msg.seq, 1, msg.ts, msg.subject, msg.hdr, msg.data)

    def _add(self, *items):
        self._pending.extend(items)
        if self._flush_call is None:
            self._flush_call = self.broker.reactor.callLater(0, self._flush)

    # -- files ---------------------------------------------------------------------

    def _opened_in_thread(self, no):
        self.broker.reactor.callFromThread(self._opened, no)

    def _opened(self, no):
        if self.js is not None:
            self._age_calls[no] = self.broker.reactor.callLater(self.cfg.max_file_age,
                                                               self._aged, no)

    def _aged(self, no):
        if self.writer is None:
            return
        self._age_calls.pop(no, None)
        self._add((AGE, no))

    def _load_checkpoint(self):
        try:
            with open(os.path.join(self.dir, CHECKPOINT)) as f:
                self.checkpoint = json.load(f)
        except (OSError, ValueError):
            self.checkpoint = {}

    def _expire_old(self):
        """Remove completed files older than ``retention``."""
        cutoff = time.time() - self.cfg.retention
        for name in sorted(os.listdir(self.dir)):
            if name.startswith("feed-") and name.endswith(".jsonl"):
                path = os.path.join(self.dir, name)
                try:
                    if os.stat(path).st_mtime < cutoff:
                        os.unlink(path)
                except OSError:
                    pass
        self._retention_call = self.broker.reactor.callLater(
            min(self.cfg.retention, 60.0), self._expire_old)
