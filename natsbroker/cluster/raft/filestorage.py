"""An NRG node's durable state in a LevelDB database (plyvel), one per group.

The same interface and semantics as
:class:`natsbroker.cluster.raft.storage.MemoryStorage`; every method that
changes state writes one synced ``WriteBatch`` and returns once it is on
disk, so a crash leaves the state before the call or after it, never a mix
(truncate, compact and a snapshot with its compaction included).

Keys (``Q`` = 8-byte big-endian, ``I`` = 4-byte)::

    b"tav"          -> I(crc) Q(term) vote (UTF-8)
    b"peers"        -> I(crc) encoded PeerState
    b"meta"         -> I(crc) Q(first_index) Q(last_index) Q(snapshot's last_index)
                       B(1: a snapshot is stored)
    b"snap"         -> I(crc) Q(last_term) Q(last_index) I(len peer_state)
                       peer_state data
    b"log" Q(index) -> I(crc) Q(term) encoded AppendEntry

``crc`` is zlib's CRC-32 (as the JetStream store's records) of the key
followed by the rest of the value, so a damaged byte anywhere, a truncated
value or a record under another key fails on read: :class:`StorageError`
names the group's directory, the record and the file LevelDB keeps it in;
the record is never served and never deleted (it stays for inspection).

``b"meta"`` is written in every batch that moves first/last or adds or drops
the snapshot: ``first_index``/``last_index`` survive compaction past the end
of the WAL, and the snapshot's index is known without reading the snapshot
(a truncate decides whether to forget it from ``meta`` alone). Its absence in
a database that holds other records is damage.

The snapshot lives in the database, not in a side file: saving it and
compacting the WAL through it are then one batch with one fsync, and it is
checked like every other record. nats-server writes ``snap.<term>.<index>``
files and compacts afterwards; a crash in between leaves an uncompacted WAL
next to the new snapshot, which is harmless but is a second state to reason
about. The cost is that the snapshot's bytes also go through LevelDB's log
and compactions; group snapshots are the upper layer's state (stream and
consumer state, the meta group's assignments), kilobytes to a few megabytes.
"""

import os
import struct
import zlib

import plyvel

from natsbroker import private
from natsbroker.cluster.raft.storage import Snapshot, StorageError
from natsbroker.store.leveldb.records import U32, U64, error_text, locate_key

TAV_KEY = b"tav"
PEERS_KEY = b"peers"
META_KEY = b"meta"
SNAP_KEY = b"snap"
LOG_PREFIX = b"log"

_META = struct.Struct(">QQQB")  # first_index, last_index, snapshot's last_index, has one
_SNAP = struct.Struct(">QQI")  # last_term, last_index, len(peer_state)
_CRC = 4  # the checksum in front of every value
# Files that make a directory a LevelDB database with data in it.
_DATA_SUFFIXES = (".ldb", ".sst", ".log")


def log_key(index):
    return LOG_PREFIX + U64.pack(index)


def seal(key, body):
    """The stored value of ``body`` under ``key``: its checksum, then it."""
    return U32.pack(zlib.crc32(body, zlib.crc32(key))) + body


class FileStorage:
    """An NRG group's storage in the LevelDB database at ``path`` (created,
    0700, if missing)."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        private.make_dirs(self.path)
        if not os.path.exists(os.path.join(self.path, "CURRENT")) and any(
                n.endswith(_DATA_SUFFIXES) or n.startswith("MANIFEST-")
                for n in os.listdir(self.path)):
            # A fresh database over these files would delete them as obsolete.
            raise StorageError("raft storage %s: LevelDB files but no CURRENT file "
                               "(MANIFEST/CURRENT lost); nothing was changed" % self.path)
        try:
            self._db = plyvel.DB(self.path, create_if_missing=True, paranoid_checks=True)
        except plyvel.Error as e:
            raise StorageError("raft storage %s: cannot open: %s" % (self.path, error_text(e))) from e
        try:
            self._first, self._last, self._snap_index = self._load_meta()
        except BaseException:
            self._db.close()
            raise

    # -- records ------------------------------------------------------------

    def _damaged(self, key, why):
        name = "log index %d" % U64.unpack_from(key, len(LOG_PREFIX))[0] \
            if key.startswith(LOG_PREFIX) and len(key) == len(LOG_PREFIX) + 8 else key.decode()
        return StorageError("raft storage %s: %s damaged (%s), in %s; left as it is"
                            % (self.path, name, why, locate_key(self._db, self.path, key)))

    def _get(self, key):
        """The verified body stored under ``key``, or None."""
        try:
            v = self._db.get(key, verify_checksums=True)
        except plyvel.CorruptionError as e:
            raise self._damaged(key, error_text(e)) from e
        if v is None:
            return None
        if len(v) < _CRC:
            raise self._damaged(key, "value truncated to %d bytes" % len(v))
        body = v[_CRC:]
        if zlib.crc32(body, zlib.crc32(key)) != U32.unpack_from(v)[0]:
            raise self._damaged(key, "checksum mismatch")
        return body

    def _load_meta(self):
        body = self._get(META_KEY)
        if body is None:
            with self._db.iterator(include_value=False) as it:
                for key in it:
                    raise self._damaged(META_KEY, "missing, but the database holds %r" % key)
            # A new database: meta first, so that any other record without it
            # is damage.
            self._write(meta=(1, 0, None))
            return 1, 0, None
        if len(body) != _META.size:
            raise self._damaged(META_KEY, "%d bytes, not %d" % (len(body), _META.size))
        first, last, snap, has_snap = _META.unpack(body)
        if first < 1 or first > last + 1 or has_snap > 1:
            raise self._damaged(META_KEY, "first %d, last %d" % (first, last))
        return first, last, snap if has_snap else None

    def _write(self, puts=(), deletes=(), meta=None):
        """One synced batch: ``puts`` (key, body) sealed, ``deletes``, and the
        new ``meta`` (first, last, snapshot index) if given; the in-memory
        copy of meta follows only once the batch is on disk."""
        # transaction=True: an exception in the block writes nothing.
        with self._db.write_batch(transaction=True, sync=True) as wb:
            for key in deletes:
                wb.delete(key)
            for key, body in puts:
                wb.put(key, seal(key, body))
            if meta is not None:
                first, last, snap = meta
                wb.put(META_KEY, seal(META_KEY, _META.pack(
                    first, last, snap or 0, snap is not None)))
        if meta is not None:
            self._first, self._last, self._snap_index = meta

    def _log_keys(self, lo, hi):
        """The WAL's keys for ``lo <= index <= hi`` that are stored."""
        if lo > hi:
            return []
        with self._db.iterator(start=log_key(lo), stop=log_key(hi + 1),
                               include_value=False) as it:
            return list(it)

    # -- term and vote ------------------------------------------------------

    def load_term_vote(self):
        """(term, voted-for id or "")."""
        body = self._get(TAV_KEY)
        if body is None:
            return 0, ""
        if len(body) < 8:
            raise self._damaged(TAV_KEY, "%d bytes" % len(body))
        return U64.unpack_from(body)[0], body[8:].decode()

    def save_term_vote(self, term, vote):
        self._write(puts=[(TAV_KEY, U64.pack(term) + vote.encode())])

    # -- peers --------------------------------------------------------------

    def load_peer_state(self):
        """The encoded PeerState last saved, or None."""
        return self._get(PEERS_KEY)

    def save_peer_state(self, encoded):
        self._write(puts=[(PEERS_KEY, bytes(encoded))])

    # -- the WAL ------------------------------------------------------------

    @property
    def first_index(self):
        return self._first

    @property
    def last_index(self):
        return self._last

    def wal_bytes(self):
        """The bytes the WAL's records take (read through: for /raftz)."""
        if self._first > self._last:
            return 0
        with self._db.iterator(start=log_key(self._first), stop=log_key(self._last + 1),
                               include_key=False) as it:
            return sum(len(v) for v in it)

    def append(self, index, term, encoded):
        """Store the AppendEntry ``encoded`` (of ``term``) at ``index``,
        which must be ``last_index + 1``."""
        self.append_many([(index, term, encoded)])

    def append_many(self, records):
        """Store ``records`` ((index, term, encoded) each, indexes following
        ``last_index`` one by one) in one synced batch: all or none."""
        last = self._last
        puts = []
        for index, term, encoded in records:
            if index != last + 1:
                raise ValueError("append at %d, last is %d" % (index, last))
            puts.append((log_key(index), U64.pack(term) + bytes(encoded)))
            last = index
        if puts:
            self._write(puts=puts, meta=(self._first, last, self._snap_index))

    def entry(self, index):
        """(term, encoded AppendEntry) at ``index``, or None when the WAL
        does not hold it (compacted or beyond the end)."""
        if index < self._first or index > self._last:
            return None
        key = log_key(index)
        body = self._get(key)
        if body is None:
            return None
        if len(body) < 8:
            raise self._damaged(key, "%d bytes" % len(body))
        return U64.unpack_from(body)[0], body[8:]

    def term_at(self, index):
        got = self.entry(index)
        return None if got is None else got[0]

    def truncate(self, index):
        """Drop every record after ``index``. Truncating to 0 empties the
        WAL and forgets the snapshot, as nats-server's resetWAL does."""
        if index == 0:
            with self._db.iterator(prefix=LOG_PREFIX, include_value=False) as it:
                deletes = list(it)
            self._write(deletes=deletes + [SNAP_KEY], meta=(1, 0, None))
            return
        deletes = self._log_keys(index + 1, self._last)
        snap = self._snap_index
        if snap is not None and snap > index:
            deletes.append(SNAP_KEY)
            snap = None
        self._write(deletes=deletes, meta=(min(self._first, index + 1), index, snap))

    def _compaction(self, through):
        """The deletes and meta of compacting through ``through``."""
        deletes = self._log_keys(self._first, min(through, self._last))
        return deletes, (max(self._first, through + 1), max(self._last, through))

    def compact(self, through):
        """Drop every record up to and including ``through``."""
        deletes, (first, last) = self._compaction(through)
        self._write(deletes=deletes, meta=(first, last, self._snap_index))

    # -- snapshots ----------------------------------------------------------

    def load_snapshot(self):
        if self._snap_index is None:
            return None
        body = self._get(SNAP_KEY)
        if body is None:
            raise self._damaged(SNAP_KEY, "missing, meta names one at %d" % self._snap_index)
        if len(body) < _SNAP.size:
            raise self._damaged(SNAP_KEY, "%d bytes" % len(body))
        term, index, n = _SNAP.unpack_from(body)
        if _SNAP.size + n > len(body) or index != self._snap_index:
            raise self._damaged(SNAP_KEY, "index %d, meta names %d, peer state %d bytes"
                                % (index, self._snap_index, n))
        a = _SNAP.size + n
        return Snapshot(last_term=term, last_index=index,
                        peer_state=body[_SNAP.size:a], data=body[a:])

    def save_snapshot(self, snapshot):
        """Keep ``snapshot`` (replacing the last one) and compact the WAL
        through its index, in one batch."""
        peers = bytes(snapshot.peer_state)
        body = _SNAP.pack(snapshot.last_term, snapshot.last_index, len(peers)) \
            + peers + bytes(snapshot.data)
        deletes, (first, last) = self._compaction(snapshot.last_index)
        self._write(puts=[(SNAP_KEY, body)], deletes=deletes,
                    meta=(first, last, snapshot.last_index))

    def close(self):
        if not self._db.closed:
            self._db.close()


def move_aside(path, now=None):
    """Rename a damaged group's directory out of the way, never deleting it
    (it stays for inspection): ``<path>.damaged-<UTC time>``; returns the new
    path."""
    import time
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    target = "%s.damaged-%s" % (path, stamp)
    n = 1
    while os.path.exists(target):
        n += 1
        target = "%s.damaged-%s-%d" % (path, stamp, n)
    os.rename(path, target)
    return target

