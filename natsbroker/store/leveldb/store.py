"""The store: one :class:`~.stream.LevelDBStream` per directory under
``<path>/streams/``, opened, created, deleted, quarantined and committed
together; the store-wide budget of recent messages. See
:mod:`natsbroker.store.leveldb`.
"""

import collections
import os
import shutil
import time

import plyvel
from twisted.internet import defer, threads
from twisted.logger import Logger

from natsbroker import private
from natsbroker.store.base import Store
from natsbroker.store.leveldb.records import STATE_KEY, STATE_RECORD, error_text
from natsbroker.store.leveldb.sidefiles import HWM_NAME, META_NAME
from natsbroker.store.leveldb.stream import LevelDBStream

# The log's ``logger`` name stays the one of the module this package was.
log = Logger(namespace="natsbroker.store.leveldb")

RECENT_BYTES = 32 << 20  # recent commits' messages kept in memory, store-wide (see the package)
RECENT_SECONDS = 10.0  # ... and for at most this long (checked at commits)
RECENT_MSG_MAX = 8 << 10  # commits of larger messages (on average) are not kept
OPEN_THREADS = 32  # databases opened at once when a store opens (see LevelDBStore._open_dbs)
# Files that make a directory a LevelDB database with data in it.
DATA_SUFFIXES = (".ldb", ".sst", ".log")


def has_data_files(path):
    """True if ``path`` holds LevelDB table, log or manifest files."""
    for n in os.listdir(path):
        if n.endswith(DATA_SUFFIXES) or n.startswith("MANIFEST-") or n in (HWM_NAME, META_NAME):
            return True
    return False


class StoreDamaged(Exception):
    """A stream's store cannot be opened as it is; nothing was changed."""


def check_name(name):
    """Stream names become directory names: refuse anything path-like."""
    if (not isinstance(name, str) or not name or name in (".", "..") or ".." in name
            or "/" in name or "\\" in name or "\0" in name or name != name.strip()):
        raise ValueError("invalid stream name %r" % (name,))


class LevelDBStore(Store):
    """Streams in ``<path>/streams/<name>/``.

    ``sync=False`` commits without fsync: a process crash loses nothing
    committed, an OS crash or power loss may lose the last writes. That is
    nats-server's default trade-off (it acks before fsync and syncs every
    ``sync_interval``, 2 minutes); ``sync_interval`` (seconds) does the same
    here: :meth:`sync_all` on a timer. ``reactor`` (default: the global one)
    runs the timer, background collection and thread work; with a
    ``twisted.internet.task.Clock`` thread work runs inline (tests)."""

    def __init__(self, path, sync=True, reactor=None, sync_interval=None, pin_meta=None):
        self.path = os.path.abspath(path)
        self.pin_meta = pin_meta  # key -> True: the meta record is kept in PinnedMeta too
        self.sync = sync
        self.sync_interval = sync_interval
        self._sync_call = None
        self._reactor = reactor
        self._streams = {}
        self._dirty_streams = set()
        self._recent = collections.deque()  # (stream, first, last, bytes, time) per commit kept
        self._recent_bytes = 0
        self._streams_dir = os.path.join(self.path, "streams")
        self._trash_dir = os.path.join(self.path, "trash")
        self._quarantine_dir = os.path.join(self.path, "quarantine")
        self._closed = False
        self.failed = {}  # stream -> sequences the last commit gave up (write failed)
        self.quarantined = {}  # stream name -> (directory it was moved to, why)
        self.offline = {}  # stream name -> why its store could not be opened
        # 0700 from the store directory down (see natsbroker.private).
        private.make_dirs(self._streams_dir)
        dirs = []
        with os.scandir(self._streams_dir) as it:
            for entry in it:
                if entry.is_dir():
                    dirs.append((entry.name, entry.path))
        dirs.sort()
        for (name, p), opened in zip(dirs, self._open_dbs([p for _, p in dirs])):
            try:
                if isinstance(opened, BaseException):
                    raise opened
                st = self._open_stream(name, p, opened)
            except Exception as e:
                # One damaged stream never stops the others; its files stay
                # where they are, untouched, for natsbroker-admin repair.
                self._set_offline(name, p, e)
                continue
            self._streams[name] = st
            if st.repaired:
                st._commit(self.sync)  # the raised state record, durable at once
        if os.path.isdir(self._trash_dir) and os.listdir(self._trash_dir):
            self._in_thread(self.empty_trash)
        if sync_interval and not sync:
            self._sync_call = self._call_later(sync_interval, self._periodic_sync)

    def _keep_recent(self, st, staged, nbytes):
        """A commit of ``st`` wrote ``staged`` (seq -> StoredMsg, ascending):
        keep them in memory for readers, within the store-wide budget."""
        if nbytes > RECENT_BYTES or nbytes > RECENT_MSG_MAX * len(staged):
            return
        q = self._recent
        now = time.monotonic()
        st._recent.update(staged)
        q.append((st, next(iter(staged)), next(reversed(staged)), nbytes, now))
        self._recent_bytes += nbytes
        horizon = now - RECENT_SECONDS
        while self._recent_bytes > RECENT_BYTES or q[0][4] < horizon:
            old, first, last, n, _ = q.popleft()
            self._recent_bytes -= n
            pop = old._recent.pop
            for s in range(first, last + 1):
                pop(s, None)
            if not old._recent:
                old._recent = {}  # a fresh dict: an emptied one keeps its size

    def _forget_recent(self, st):
        """``st`` closes: its recent messages leave the budget."""
        st._recent = {}
        if any(e[0] is st for e in self._recent):
            self._recent = collections.deque(e for e in self._recent if e[0] is not st)
            self._recent_bytes = sum(e[3] for e in self._recent)

    def _periodic_sync(self):
        self._sync_call = None
        if not self._closed:
            self.sync_all()
            self._sync_call = self._call_later(self.sync_interval, self._periodic_sync)

    def sync_all(self):
        """Commit what is staged, then fsync every stream's write-ahead log
        (everything written with ``sync=False`` so far becomes durable)."""
        self.commit()
        for st in self._streams.values():
            if st.write_error is None:
                st._db.put(STATE_KEY, STATE_RECORD.pack(st._first, st._last, st._last_ts), sync=True)
                st._hwm.sync()

    @property
    def reactor(self):
        if self._reactor is None:
            from twisted.internet import reactor
            self._reactor = reactor
        return self._reactor

    def _call_later(self, delay, f, *args):
        return self.reactor.callLater(delay, f, *args)

    def _in_thread(self, f, *args):
        r = self.reactor
        if hasattr(r, "getThreadPool"):
            return threads.deferToThreadPool(r, r.getThreadPool(), f, *args)
        return defer.maybeDeferred(f, *args)

    @staticmethod
    def _open_db(path, create=False):
        """Open the LevelDB database in ``path``. Only a new stream creates
        one: a directory with table or log files but no CURRENT is a damaged
        database (a fresh one over it would delete those files as obsolete)."""
        if not create and not os.path.exists(os.path.join(path, "CURRENT")):
            if has_data_files(path):
                raise StoreDamaged(
                    "LevelDB files but no CURRENT file (MANIFEST/CURRENT deleted or lost): %s"
                    % ", ".join(sorted(os.listdir(path))[:20]))
            create = True  # empty: a stream created just before a crash
        return plyvel.DB(path, create_if_missing=create, paranoid_checks=True,
                         max_open_files=128, bloom_filter_bits=10)

    @classmethod
    def _open_dbs(cls, paths):
        """:meth:`_open_db` of every path: a database or the exception its
        open raised, in order. Opening a LevelDB database is mostly waiting
        for the disk (it turns the log into a table and writes a new MANIFEST
        and CURRENT, each synced) and plyvel releases the GIL while it does,
        so the streams open at once in a few threads: one by one, a thousand
        streams took seconds of fsyncs. The caller loads them afterwards, in
        order, in its own thread (loading is Python: threads would not help)."""
        def one(path):
            try:
                return cls._open_db(path)
            except Exception as e:
                return e
        if len(paths) < 2:
            return [one(p) for p in paths]
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(min(OPEN_THREADS, len(paths)),
                                thread_name_prefix="leveldb-open") as pool:
            return list(pool.map(one, paths))

    def _open_stream(self, name, path, db):
        """The stream of ``db`` (opened by :meth:`_open_dbs`); closes it on failure."""
        try:
            return LevelDBStream(self, name, path, db)
        except BaseException:
            db.close()
            raise

    def _set_offline(self, name, path, e):
        why = error_text(e)
        if isinstance(e, plyvel.IOError) and "lock" in why.lower():
            why = "store locked by another process: %s" % why
        self.offline[name] = why
        log.error("JetStream stream {name} is offline: {why}. Its files in {path} are left as "
                  "they are. To repair: stop the server, run natsbroker-admin verify {store} "
                  "--stream {name} to see the damage, then natsbroker-admin repair {store} "
                  "--stream {name} (it keeps a copy of the files as they were) and start the "
                  "server again", name=name, why=why, path=path, store=self.path)

    def delete_offline(self, name):
        """Delete an offline stream's files (an explicit STREAM.DELETE)."""
        if self.offline.pop(name, None) is None:
            return defer.succeed(False)
        if name in self._streams:  # opened, but its owner could not load it
            return self.delete_stream(name)
        return self._trash(name, os.path.join(self._streams_dir, name))

    def quarantine_stream(self, name, why, path=None):
        """Move a stream's directory to ``quarantine/<name>-<timestamp>/`` (never
        delete it) and log what was found and how to repair it. The stream is
        closed first if it is open. Returns the new directory."""
        st = self._streams.pop(name, None)
        if st is not None:
            self._dirty_streams.discard(st)
            st._close()
            path = st._path
        if path is None:
            path = os.path.join(self._streams_dir, name)
        private.make_dirs(self._quarantine_dir)
        base = os.path.join(self._quarantine_dir, "%s-%s" % (
            name, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())))
        dest = base
        n = 1
        while os.path.exists(dest):
            n += 1
            dest = "%s.%d" % (base, n)
        os.rename(path, dest)
        self._fsync_dir(self._streams_dir)
        self.quarantined[name] = (dest, why)
        log.warn("JetStream stream {name} is offline: {why}. Its files were moved, nothing "
                 "deleted, to {dest}. To repair: stop the server, run LevelDB's repair on that "
                 "directory (python -c \"import plyvel; plyvel.repair_db('{dest}')\"), check it, "
                 "move it back to {back} and start the server",
                 name=name, why=why, dest=dest, back=os.path.join(self._streams_dir, name))
        return dest

    def _fsync_dir(self, path):
        if self.sync:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def create_stream(self, name):
        check_name(name)
        if name in self._streams or name in self.offline:
            raise ValueError("stream %r exists" % (name,))
        p = os.path.join(self._streams_dir, name)
        # 0700: LevelDB creates its files in it 0644 (now and at every
        # compaction); the directory keeps them from other users.
        private.make_dir(p)
        st = LevelDBStream(self, name, p, self._open_db(p, create=True))
        self._fsync_dir(self._streams_dir)
        st._mark_dirty()  # the next commit writes its state record
        self._streams[name] = st
        return st

    def stream(self, name):
        return self._streams.get(name)

    def stream_names(self):
        return sorted(self._streams)

    def delete_stream(self, name):
        st = self._streams.pop(name, None)
        if st is None:
            return defer.succeed(False)
        self._dirty_streams.discard(st)
        st._close()
        return self._trash(name, st._path)

    def _trash(self, name, path):
        # Renamed at once (the name is free again), removed in a thread.
        private.make_dirs(self._trash_dir)
        dest = os.path.join(self._trash_dir, "%s.%d" % (name, time.time_ns()))
        os.rename(path, dest)
        d = self._in_thread(shutil.rmtree, dest, True)
        d.addCallback(lambda _: True)
        return d

    def empty_trash(self):
        """Remove every deleted stream's directory now (blocking)."""
        if os.path.isdir(self._trash_dir):
            for n in os.listdir(self._trash_dir):
                shutil.rmtree(os.path.join(self._trash_dir, n), True)

    def commit(self, sync=True):
        """Write every staged batch; ``sync=False`` skips the fsync for a turn
        whose writes back no acknowledgement (consumer progress, expiry)."""
        self.failed = {}
        if not self._dirty_streams:
            return
        streams, self._dirty_streams = self._dirty_streams, set()
        sync = self.sync and sync
        for i, st in enumerate(streams):
            if st.write_error is not None:
                continue  # its retry timer writes it
            try:
                st._commit(sync)
            except plyvel.Error as e:
                # Disk full, I/O error: this stream's batch is not written;
                # the others' are.
                self.failed[st] = (st._write_failed(e), st.write_error)
            except BaseException:
                self._dirty_streams.update(s for s in streams if s._dirty)
                raise

    @property
    def dirty(self):
        return bool(self._dirty_streams)

    def close(self):
        """Commit what is staged and close every database."""
        if self._closed:
            return
        self.commit()
        self._closed = True
        if self._sync_call is not None and self._sync_call.active():
            self._sync_call.cancel()
        self._sync_call = None
        for st in self._streams.values():
            st._close()
