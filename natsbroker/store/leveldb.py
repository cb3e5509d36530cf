"""``storage: file``: streams in LevelDB (plyvel), one database per stream.

Layout under the store's directory::

    <path>/streams/<name>/     the LevelDB database of stream <name>
    <path>/trash/<name>.<n>/   a deleted stream's database, being removed
    <path>/quarantine/<name>-<time>/  a stream's files set aside on damage (kept)

Keys of a stream database (``Q`` = 8-byte big-endian, ``I`` = 4-byte)::

    b"d" Q(seq)                        -> Q(ts) I(len subject | 1<<31) I(len hdr) I(crc)
                                          subject hdr data
    b"s" I(len subject) subject Q(seq) -> I(msg_size)        per-subject index
    b"m" key                           -> value              meta (config, consumers)
    b"S"                               -> Q(first_seq) Q(last_seq) Q(last_ts)
    b"F"                               -> b"\\x02": every record carries a checksum

``crc`` is zlib's CRC-32 of ``Q(seq) Q(ts) I(len subject) I(len hdr)`` followed
by subject, hdr and data, so damage LevelDB's own block checksums miss (bytes
in its log, a block it does not verify, a record under the wrong key) is still
caught on read (:func:`verify_record`). Records written before checksums
existed (``Q(ts) I(len subject) I(len hdr)``, top bit clear) are read as they
are in stores without ``b"F"``; in a store with it, such a record is damage.
A record that fails is never served: it leaves the in-memory bookkeeping as a
lost message (a gap for readers, counted in ``lost``), the log names stream,
sequence and the file holding it, and it stays on disk for
``natsbroker-admin verify``/``repair``.

The length-prefixed subject keeps one subject's index entries contiguous and in
sequence order whatever bytes subjects hold, so a literal subject's first/last
message or count from a sequence is a seek, never a stream scan.

In memory (exact at all times): the counters, ``first_seq``/``last_seq``, the
deleted interior sequences (a bitmap, :class:`~.common.SeqSet`) and per subject
``[count, first, last]`` (first/last recomputed by an index seek when the one
they name is removed). None of that is persisted except the ``b"S"`` record
(written in every commit batch, atomically with the data): on open one pass over
the index keys (not the payloads) rebuilds the per-subject counts, the byte
total (index values hold each message's size) and the deleted gaps (sequences in
``[first_seq, last_seq]`` without an index entry). ``b"S"`` carries what the
index cannot tell: ``last_seq``/``last_ts`` once the newest messages are gone and
``first_seq`` of an emptied stream. Bytes are counted as nats-server's file
store counts them (:func:`~.base.file_msg_size`).

Reads: staged messages and those of recent commits come from memory (see
below); a reader going forward through older committed records (a consumer
catching up, limits removing the oldest) is served by a parked iterator instead
of point gets (about 3x cheaper).

Group commit: writes are staged in Python, never written one by one. Appends
go to ``_staged`` (``seq -> StoredMsg``, plus the staged sequences of each
subject), deletes and meta writes to ``_ops`` (``key -> value | None``); reads
consult them before the database. :meth:`LevelDBStore.commit` turns each dirty
stream's staging into one ``WriteBatch`` (plus the ``b"S"`` record) written with
``sync=store.sync``: one fsync per dirty stream per turn, none per message.

Recent messages: consumers usually read what was just stored, so the messages
of recent commits stay in memory (each stream's ``_recent``), store-wide up to
:data:`RECENT_BYTES` (counted as limits count bytes) and for at most
:data:`RECENT_SECONDS`, oldest commit out first, checked at every commit (an
idle store keeps its last ones). They are served as they were written, so a
reader at the tail neither reads nor verifies them back; like nats-server's
block cache, which holds the blocks being written and read. Only small
messages (:data:`RECENT_MSG_MAX` on average per commit): for large ones the
per-message cost of a read is small beside their bytes, and memory is not
(an object store's chunks).

Purges never block on the size of the stream: a full purge only moves
``first_seq`` past ``last_seq`` in memory and drops the staged messages; every
key below the new ``first_seq`` is garbage that no read looks at (reads are
bounded by ``first_seq`` and check the bookkeeping), and once the new
``first_seq`` is committed a background collector deletes those keys in chunks
of :data:`GC_CHUNK` keys per reactor turn (``reactor.callLater``). A partial
purge below a sequence (``purge(seq=)``, ``purge(keep=)``) reads whichever side
is smaller: the messages it removes, or the messages it keeps (rebuilding the
bookkeeping from them and leaving the rest to the collector). A reopened store
finds leftover garbage during its index pass and collects it again.

``remove(seq, erase=True)`` deletes the record and, after the commit, asks
LevelDB to compact the key's range so the table files holding the old bytes are
rewritten (best effort: LevelDB has no in-place overwrite and the bytes may
linger in its write-ahead log until it rotates).

Damage (issue 12). Two small files next to LevelDB's own in each stream's
directory keep what a damaged database must not take along:
``NATSBROKER-HWM`` (:class:`HighWater`: first/last sequence, counts, consumers'
delivered and ack floors; one ``pwrite`` per commit, no extra fsync) and
``NATSBROKER-META`` (:class:`PinnedMeta`: the stream's and its consumers'
configs, rewritten only when they change). On open, a database behind its
high-water mark (a torn log) keeps ``last_seq`` at the mark: the lost range is
a gap of deleted sequences, reported as ``lost`` in the state and logged, and
no sequence is ever handed out twice; lost config records are put back. A
directory with LevelDB files but no ``CURRENT`` is never opened (a fresh
database over it would delete its tables as obsolete), and a stream that fails
to open is moved, never deleted, to ``quarantine/<name>-<time>/`` and logged
with how to repair it; the other streams open as usual.

Deleting a stream closes its database and renames its directory into
``trash/`` at once (so the name is free again); the directory is removed in a
thread and the Deferred fires when that is done. A reopened store empties
``trash/``.
"""

import collections
import os
import shutil
import struct
import time
import zlib
from bisect import bisect_left, bisect_right

import plyvel
from twisted.internet import defer, threads
from twisted.logger import Logger

from natsbroker import private
from natsbroker.store.base import file_msg_size, Store, StoredMsg
from natsbroker.store.common import NOT_00, INVERT, SeqSet, StreamBase, literal, popcount
from natsbroker.subjects.sublist import subject_matches

_Q = struct.Struct(">Q")
_I = struct.Struct(">I")
_REC = struct.Struct(">QII")  # ts, len(subject), len(hdr): a record without a checksum
_REC2 = struct.Struct(">QIII")  # ts, len(subject) | CRC_FLAG, len(hdr), crc32
_SEED = struct.Struct(">QQII")  # seq, ts, len(subject), len(hdr): the checksum's seed
CRC_FLAG = 0x80000000  # in the subject length: the record carries a checksum
FORMAT_KEY = b"F"  # -> format byte; b"\x02": every record must carry a checksum
FORMAT_CRC = b"\x02"
_STATE = struct.Struct(">QQQ")  # first_seq, last_seq, last_ts
STATE_KEY = b"S"
# The record layout natsbroker.store.fsck reads offline: b"d" + SEQ_STRUCT(seq)
# keys a message, b"s" + U32_STRUCT(len) + subject + seq indexes it, STATE_KEY
# holds STATE_STRUCT.
SEQ_STRUCT, U32_STRUCT, STATE_STRUCT = _Q, _I, _STATE

# The high-water mark file (see :class:`HighWater`), inside each stream's
# LevelDB directory (LevelDB ignores file names it does not own).
HWM_NAME = "NATSBROKER-HWM"
HWM_MAGIC = b"NBHW"
HWM_SLOT = 4096  # two slots, written alternately: a torn write spoils one
_HWM_HDR = struct.Struct(">4sQII")  # magic, generation, len(body), crc32(body)
_HWM_BODY = struct.Struct(">QQQQQ")  # first_seq, last_seq, last_ts, msgs, bytes
_FLOOR = struct.Struct(">QQQQ")
LOST_LIST_MAX = 1 << 20  # lost sequences listed one by one up to this many
# The pinned meta file (see :class:`PinnedMeta`), next to it.
META_NAME = "NATSBROKER-META"
META_MAGIC = b"NBMT"
_META_HDR = struct.Struct(">4sQII")  # magic, generation, len(body), crc32(body)
META_GEN_KEY = b"G"  # -> Q(generation of the pinned meta the database holds)
# Files that make a directory a LevelDB database with data in it.
DATA_SUFFIXES = (".ldb", ".sst", ".log")

_tuple_new = tuple.__new__
log = Logger()

GC_CHUNK = 1000  # keys the garbage collector examines per reactor turn
WRITE_RETRY = 1.0  # seconds between attempts to write to a stream whose last write failed
RECENT_BYTES = 32 << 20  # recent commits' messages kept in memory, store-wide (see above)
RECENT_SECONDS = 10.0  # ... and for at most this long (checked at commits)
RECENT_MSG_MAX = 8 << 10  # commits of larger messages (on average) are not kept
CURSORS = 4  # parked iterators for sequential reads
OPEN_THREADS = 32  # databases opened at once when a store opens (see LevelDBStore._open_dbs)
BULK_MIN = 4096  # purges below a sequence removing more than this may rebuild from the kept side


def _dkey(seq):
    return b"d" + _Q.pack(seq)


def _ipfx(subject):
    return b"s" + _I.pack(len(subject)) + subject


class RecordDamaged(Exception):
    """A stored record failed verification (``why`` says how)."""

    def __init__(self, seq, why):
        super().__init__(why)
        self.seq = seq
        self.why = why


def pack_record(seq, ts, subject, hdr, data):
    """The stored value of a message: header, subject, headers, payload. The
    checksum covers the sequence, timestamp and lengths (so bytes moved across
    a boundary or a record under the wrong key are caught) and every byte of
    subject, headers and payload."""
    ls = len(subject)
    lh = len(hdr)
    crc = zlib.crc32(data, zlib.crc32(hdr, zlib.crc32(subject, zlib.crc32(
        _SEED.pack(seq, ts, ls, lh)))))
    return _REC2.pack(ts, ls | CRC_FLAG, lh, crc) + subject + hdr + data


def unpack_record(seq, v, strict=True):
    """The :class:`StoredMsg` in record ``v`` of ``seq``, verified; raises
    :class:`RecordDamaged`. ``strict``: a record without a checksum is damage
    (stores written since records carry one); otherwise it is accepted as
    written by an older natsbroker."""
    s, a, b, ts = verify_record(seq, v, strict)
    # tuple.__new__: the named tuple's own __new__ is a Python function.
    return _tuple_new(StoredMsg, (seq, v[s:a], v[a:b], v[b:], ts))


def verify_record(seq, v, strict=True):
    """Check record ``v`` of ``seq`` without copying it; returns the offsets
    ``(subject, headers, payload)`` and the timestamp, or raises
    :class:`RecordDamaged`."""
    n = len(v)
    if n < 16:
        raise RecordDamaged(seq, "record truncated to %d bytes" % n)
    ts, ls, lh = _REC.unpack_from(v)
    if ls & CRC_FLAG:
        if n < 20:
            raise RecordDamaged(seq, "record truncated to %d bytes" % n)
        ls &= ~CRC_FLAG
        a = 20 + ls
        b = a + lh
        if b > n:
            raise RecordDamaged(seq, "record lengths exceed its size")
        mv = memoryview(v)
        crc = zlib.crc32(mv[b:], zlib.crc32(mv[20:b], zlib.crc32(_SEED.pack(seq, ts, ls, lh))))
        if crc != _I.unpack_from(v, 16)[0]:
            raise RecordDamaged(seq, "checksum mismatch")
        return 20, a, b, ts
    if strict:
        raise RecordDamaged(seq, "record without a checksum")
    a = 16 + ls
    b = a + lh
    if b > n:
        raise RecordDamaged(seq, "record lengths exceed its size")
    return 16, a, b, ts


def record_layout(v):
    """``(offset of the subject, len(subject), len(hdr))`` of a record, unverified."""
    ts, ls, lh = _REC.unpack_from(v)
    if ls & CRC_FLAG:
        return 20, ls & ~CRC_FLAG, lh
    return 16, ls, lh


_SST_LINE = None


def _unescape(text):
    # LevelDB's EscapeString: printable ASCII as is, anything else as \xNN.
    out = bytearray()
    i = 0
    while i < len(text):
        if text.startswith("\\x", i) and i + 4 <= len(text):
            try:
                out.append(int(text[i + 2:i + 4], 16))
                i += 4
                continue
            except ValueError:
                pass
        out.append(ord(text[i]) & 0xFF)
        i += 1
    return bytes(out)


def error_text(e):
    """LevelDB's message of a plyvel error (plyvel passes it as bytes)."""
    if e.args and isinstance(e.args[0], bytes):
        return e.args[0].decode(errors="replace")
    return str(e) or type(e).__name__


def locate_key(db, path, key):
    """The file(s) that may hold ``key``: table files whose key range covers
    it (LevelDB's ``leveldb.sstables`` property, newest level first; a range
    spans every key kind, so more than one may), else the newest write-ahead
    log (the key is in the memtable)."""
    global _SST_LINE
    if _SST_LINE is None:
        import re
        _SST_LINE = re.compile(r"^\s*(\d+):\d+\['(.*)' @ \d+ : \d+ \.\. '(.*)' @ \d+ : \d+\]$")
    try:
        text = db.get_property(b"leveldb.sstables").decode("latin-1")
    except Exception:
        text = ""
    found = []
    for line in text.splitlines():
        m = _SST_LINE.match(line)
        if m and _unescape(m.group(2)) <= key <= _unescape(m.group(3)):
            n = int(m.group(1))
            name = "%06d.ldb" % n
            if not os.path.exists(os.path.join(path, name)):
                name = "%06d.sst" % n
            found.append(os.path.join(path, name))
    if len(found) == 1:
        return found[0]
    if found:
        return "one of " + ", ".join(found)
    try:
        logs = sorted(n for n in os.listdir(path) if n.endswith(".log"))
    except OSError:
        logs = []
    return os.path.join(path, logs[-1]) if logs else path


def _rev(db, start, stop, include_value=True, verify=False):
    """Entries with start <= key < stop, descending. (plyvel 1.5's
    ``iterator(start=, stop=, reverse=True)`` skips ranges holding a single key,
    so seek and step back by hand.)"""
    it = db.iterator(include_value=include_value, verify_checksums=verify)
    it.seek(stop)
    prev = it.prev
    while True:
        try:
            kv = prev()
        except StopIteration:
            return
        if (kv[0] if include_value else kv) < start:
            return
        yield kv


def _hwm_slot(slot, size):
    """The high-water mark's slot size: ``slot`` doubled until ``size`` fits."""
    while slot < size:
        slot *= 2
    return slot


class HighWater:
    """A stream's high-water mark, kept outside LevelDB so that damage to the
    database (a torn write-ahead log, lost MANIFEST) cannot take it along.

    Holds what must never go back: ``first_seq``, ``last_seq``/``last_ts``, the
    message and byte counts they came with (to count what damage lost) and
    named floors (consumers' delivered and ack floors). Written after every
    commit that changed it, with one ``pwrite`` (no fsync: LevelDB's synced
    write of the same commit is the durability point of the data; the mark is
    in the page cache before the ack goes out, so it survives a process crash
    and any damage to LevelDB's files, and reaches the disk with the kernel's
    writeback, at every :meth:`LevelDBStore.sync_all` and on close).

    Two slots, each record with a generation and a CRC, are written
    alternately, so a torn write of one leaves the other. A slot is 4 KB, or
    the next power of two that holds the record (a hundred consumers' floors
    fill 4 KB): slot 0 at offset 0, slot 1 at the slot size. A record never
    goes where it would overlap the last one written (when the slot size
    grows, the next record goes to the new slot 1, past everything), and
    the reader tries every such offset and keeps the newest valid record."""

    __slots__ = ("path", "fd", "gen", "body", "_floors", "_floors_packed", "_slot", "_last")

    def __init__(self, path):
        self.path = path
        self.fd = None
        self.gen = 0
        self.body = None
        self._floors = None  # the floors last packed, and their bytes
        self._floors_packed = b""
        self._slot = HWM_SLOT
        self._last = None  # (offset, length) of the newest valid record

    def read(self):
        """``(first, last, last_ts, msgs, bytes, {key: floors})`` of the newest
        valid slot, or None."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        best = None
        offsets = [0]
        off = HWM_SLOT
        while off < len(raw):
            offsets.append(off)
            off *= 2
        for off in offsets:
            if len(raw) < off + _HWM_HDR.size:
                continue
            magic, gen, n, crc = _HWM_HDR.unpack_from(raw, off)
            body = raw[off + _HWM_HDR.size:off + _HWM_HDR.size + n]
            if magic != HWM_MAGIC or len(body) != n or zlib.crc32(body) != crc:
                continue
            if best is None or gen > best[0]:
                best = (gen, body, off)
        if best is None:
            return None
        self.gen, body, off = best
        size = _HWM_HDR.size + len(body)
        self._last = (off, size)
        self._slot = _hwm_slot(max(self._slot, off), size)
        vals = _HWM_BODY.unpack_from(body)
        floors = {}
        i = _HWM_BODY.size
        while i < len(body):
            k = _I.unpack_from(body, i)[0]
            key = body[i + 4:i + 4 + k]
            i += 4 + k
            floors[key] = _FLOOR.unpack_from(body, i)
            i += _FLOOR.size
        return vals + (floors,)

    def write(self, first, last, last_ts, msgs, nbytes, floors):
        body = _HWM_BODY.pack(first, last, last_ts, msgs, nbytes)
        if floors:
            # Written after every commit, but the floors change only when a
            # consumer's state does: with 1000 consumers, packing them each
            # time was a visible share of a publish (a dict compare is not).
            if floors != self._floors:
                self._floors_packed = b"".join(
                    _I.pack(len(k)) + k + _FLOOR.pack(*v) for k, v in floors.items())
                self._floors = dict(floors)
            body += self._floors_packed
        if body == self.body:
            return
        if self.fd is None:
            self.fd = private.open_file(self.path, os.O_RDWR | os.O_CREAT)
        self.gen += 1
        record = _HWM_HDR.pack(HWM_MAGIC, self.gen, len(body), zlib.crc32(body)) + body
        need = len(record)
        slot = self._slot = _hwm_slot(self._slot, need)
        # Slot 0 unless the last record is there or would be overwritten by
        # this one; then slot 1, which (a power of two at least as large as
        # any earlier slot) starts past the last record.
        last = self._last
        off = 0 if last is not None and last[0] >= need else slot
        os.pwrite(self.fd, record, off)
        self._last = (off, need)
        self.body = body

    def sync(self):
        if self.fd is not None:
            os.fsync(self.fd)

    def close(self):
        if self.fd is not None:
            try:
                os.fsync(self.fd)
            finally:
                os.close(self.fd)
                self.fd = None


class PinnedMeta:
    """A copy, outside LevelDB, of the meta records that define a stream (its
    config, its consumers' configs: what the owner's ``pin_meta`` selects),
    so that a torn log cannot make a stream or consumer vanish. Rewritten
    (temporary file, fsync, rename) only by commits that change a pinned
    record, i.e. API calls, never publishes. A generation, also stored in the
    database with the records, tells on open whether the database lost some."""

    def __init__(self, path):
        self.path = path

    def remove_temps(self):
        """Remove the temporary files of writes a crash cut short."""
        d, name = os.path.split(self.path)
        for n in os.listdir(d):
            if private.is_temp_of(n, name):
                try:
                    os.unlink(os.path.join(d, n))
                except OSError:
                    pass

    def read(self):
        """``(generation, {key: value})`` or None."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        if len(raw) < _META_HDR.size:
            return None
        magic, gen, n, crc = _META_HDR.unpack_from(raw)
        body = raw[_META_HDR.size:_META_HDR.size + n]
        if magic != META_MAGIC or len(body) != n or zlib.crc32(body) != crc:
            log.warn("{path}: damaged, ignored", path=self.path)
            return None
        out = {}
        i = 0
        while i < n:
            k = _I.unpack_from(body, i)[0]
            key = body[i + 4:i + 4 + k]
            i += 4 + k
            v = _I.unpack_from(body, i)[0]
            out[key] = body[i + 4:i + 4 + v]
            i += 4 + v
        return gen, out

    def write(self, gen, records, sync):
        body = b"".join(_I.pack(len(k)) + k + _I.pack(len(v)) + v
                        for k, v in sorted(records.items()))
        private.write_atomic(
            self.path, _META_HDR.pack(META_MAGIC, gen, len(body), zlib.crc32(body)) + body, sync)


def has_data_files(path):
    """True if ``path`` holds LevelDB table, log or manifest files."""
    for n in os.listdir(path):
        if n.endswith(DATA_SUFFIXES) or n.startswith("MANIFEST-") or n in (HWM_NAME, META_NAME):
            return True
    return False


class _Gone(Exception):
    """Raised inside the stream when a record read turns out damaged: it has
    just left the bookkeeping, so the read is retried (and skips it)."""


class StoreDamaged(Exception):
    """A stream's store cannot be opened as it is; nothing was changed."""


def check_name(name):
    """Stream names become directory names: refuse anything path-like."""
    if (not isinstance(name, str) or not name or name in (".", "..") or ".." in name
            or "/" in name or "\\" in name or "\0" in name or name != name.strip()):
        raise ValueError("invalid stream name %r" % (name,))


class LevelDBStream(StreamBase):
    # Limits count bytes as nats-server's file store does.
    msg_size = staticmethod(file_msg_size)
    SEEK_SUBJECTS = 16

    def __init__(self, owner, name, path, db):
        super().__init__(name)
        self._owner = owner
        self._path = path
        self._db = db
        self._subjects = {}  # subject -> [count, first, last]; first/last 0 = look up
        self._staged = {}  # seq -> StoredMsg appended since the last commit
        self._staged_subj = {}  # subject -> ascending staged seqs
        self._staged_bytes = 0
        self._recent = {}  # seq -> StoredMsg of recent commits (LevelDBStore._keep_recent)
        self._ops = {}  # key -> value, or None to delete
        self._erased = []
        self._cursors = {}  # seq -> (iterator parked after it, its record)
        self._last_read = -1
        self._last_val = None
        self._dirty = False
        self._committed_last = 0  # every key in the DB is <= this; staged seqs are above
        self._gc_needed = False
        self._gc_floor = 0
        self._gc_pos = None  # next key to examine, None when no collection is due
        self._gc_call = None
        self._closed = False
        self._hwm = HighWater(os.path.join(path, HWM_NAME))
        self._floors = {}  # name -> 4 ints that must never go back (consumers)
        self._hwm_floors = {}  # floors as found on open
        self.lost = None  # (sequences, bytes) of acked messages damage took
        self._pinned = PinnedMeta(os.path.join(path, META_NAME))
        self._pinned.remove_temps()
        self._meta_gen = 0
        self._pinned_dirty = False
        self.repaired = False  # open found damage and raised the bookkeeping
        self.damaged = {}  # seq -> why, records found damaged since open (not served)
        self.write_error = None  # LevelDB's message while writes fail (disk full, EIO)
        self._retry_call = None
        self._damaged_subj = {}  # seq -> the damaged record's subject (index), or None
        self._strict = True  # every record must carry a checksum (see _load)
        self._side_failed = False
        self._load()

    # -- open ---------------------------------------------------------------

    def _load(self):
        db = self._db
        rec = db.get(STATE_KEY)
        if rec is not None and len(rec) == _STATE.size:
            first, last, last_ts = _STATE.unpack(rec)
        else:
            first, last, last_ts = self._range_of_records(rec)
        for k, v in db.iterator(prefix=b"m"):
            self._meta[k[1:]] = v
        if db.get(FORMAT_KEY) != FORMAT_CRC:
            # Written by a natsbroker whose records carried no checksum: those
            # are accepted as they are; new records carry one.
            for _ in db.iterator(prefix=b"d", include_value=False):
                self._strict = False
                break
            if self._strict:
                self._ops[FORMAT_KEY] = FORMAT_CRC
                self._mark_dirty()
        g = db.get(META_GEN_KEY)
        self._meta_gen = _Q.unpack(g)[0] if g else 0
        pinned = self._pinned.read()
        if pinned is not None and pinned[0] > self._meta_gen:
            # The database lost pinned records (a torn log): put them back.
            restored = []
            for k, v in pinned[1].items():
                if self._meta.get(k) != v:
                    self._meta[k] = v
                    self._ops[b"m" + k] = v
                    restored.append(k.decode(errors="replace"))
            # ... and records deleted since (a deleted consumer) stay deleted.
            pin = self._owner.pin_meta
            for k in [k for k in self._meta if pin is not None and pin(k)
                      and k not in pinned[1]]:
                del self._meta[k]
                self._ops[b"m" + k] = None
                restored.append("-" + k.decode(errors="replace"))
            self._meta_gen = pinned[0] - 1
            self._pinned_dirty = True
            self.repaired = True
            log.warn("JetStream stream {name}: store lost {n} config record change(s) "
                     "(damaged log); put back from {path}: {keys} (- deleted since)",
                     name=self.name, n=len(restored),
                     path=self._pinned.path, keys=", ".join(restored))
            self._mark_dirty()
        # Sequences never go back: a high-water mark above what the database
        # holds means committed writes were lost (torn log); the lost range
        # stays used up and shows as deleted sequences.
        hw = self._hwm.read()
        db_last = last
        if hw is not None:
            hfirst, hlast, hts, hmsgs, hbytes, self._hwm_floors = hw
            self._floors = dict(self._hwm_floors)
            if hlast > last or hfirst > first:
                self.repaired = True
                if hlast > last:
                    last, last_ts = hlast, hts
                if hfirst > first:
                    first = hfirst  # removals were lost: what is below is garbage
                if not first:
                    first = 1
        span = last - first + 1 if first else 0
        present = bytearray((span + 7) >> 3) if span > 0 else bytearray()
        subjects = {}
        nbytes = n = 0
        garbage = False
        iunpack = _I.unpack_from
        qunpack = _Q.unpack_from
        # Keys come grouped by subject, in sequence order within a subject.
        pfx = b""
        plen = cnt = sfirst = slast = 0
        for k, v in db.iterator(prefix=b"s"):
            if len(k) != plen + 8 or not k.startswith(pfx):
                if cnt:
                    subjects[pfx[5:]] = [cnt, sfirst, slast]
                    n += cnt
                plen = len(k) - 8
                pfx = k[:plen]
                cnt = 0
            seq = qunpack(k, plen)[0]
            if seq < first or seq > last:
                garbage = True
                continue
            if not cnt:
                sfirst = seq
            slast = seq
            cnt += 1
            nbytes += iunpack(v)[0]
            i = seq - first
            present[i >> 3] |= 1 << (i & 7)
        if cnt:
            subjects[pfx[5:]] = [cnt, sfirst, slast]
            n += cnt
        for _ in db.iterator(start=b"d", stop=_dkey(max(first, 1)), include_value=False):
            garbage = True
            break
        self._last = last
        self._last_ts = last_ts
        self._subjects = subjects
        self._msgs = n
        self._bytes = nbytes
        if not n:
            self._first = first
            self._first_ts = 0
        else:
            k = NOT_00.search(present).start()
            b = present[k]
            self._first = first + (k << 3) + (b & -b).bit_length() - 1
            self._first_ts = None
            inv = present.translate(INVERT)
            extra = (len(inv) << 3) - span
            if extra:
                inv[-1] &= 0xFF >> extra
            dels = SeqSet.from_bits(first, inv, popcount(inv))
            dels.clear_below(self._first)
            self._deleted = dels
        if self.repaired:
            if not n and self._first <= last:
                self._first = last + 1
            lost_n = max(0, hmsgs - n)
            if lost_n:
                lo = db_last + 1
                hi = min(last, lo + LOST_LIST_MAX - 1)
                seqs = [s for s in range(lo, hi + 1)] if hi >= lo else []
                self.lost = (seqs, max(0, hbytes - nbytes))
            log.warn("JetStream stream {name}: store holds sequences up to {db_last} but "
                     "{hlast} were stored before (high-water mark): {lost} acked message(s) "
                     "lost to damage; last sequence kept at {hlast}, the lost range is a gap "
                     "(deleted sequences), no sequence will be reused",
                     name=self.name, db_last=db_last, hlast=last, lost=lost_n)
            self._mark_dirty()  # the next commit stores the raised state record
        self._committed_last = last
        if garbage:
            self._start_gc()

    def _range_of_records(self, rec):
        """``(first, last, last_ts)`` from the message records themselves, for
        a database whose state record is missing or damaged: without it every
        record would look like garbage above ``last_seq`` 0 and be collected."""
        db = self._db
        first = last = last_ts = 0
        for k in db.iterator(prefix=b"d", include_value=False):
            first = _Q.unpack_from(k, 1)[0]
            break
        for k, v in _rev(db, b"d", b"e"):
            last = _Q.unpack_from(k, 1)[0]
            try:
                last_ts = verify_record(last, v, False)[3]
            except RecordDamaged:
                pass
            break
        if first or rec is not None:
            log.warn("JetStream stream {name}: state record {what}; range taken from the "
                     "message records: {first}..{last}", name=self.name,
                     what="missing" if rec is None else "damaged", first=first, last=last)
            self._mark_dirty()
        return first, last, last_ts

    # -- storage hooks ----------------------------------------------------

    def _mark_dirty(self):
        if not self._dirty:
            self._dirty = True
            self._owner._dirty_streams.add(self)

    _touch = _mark_dirty

    def _put(self, msg):
        seq = msg.seq
        subj = msg.subject
        self._staged[seq] = msg
        info = self._subjects.get(subj)
        if info is None:
            self._subjects[subj] = [1, seq, seq]
            self._subj_gen += 1
        else:
            info[0] += 1
            info[2] = seq
        lst = self._staged_subj.get(subj)
        if lst is None:
            self._staged_subj[subj] = [seq]
        else:
            lst.append(seq)
        self._staged_bytes += self.msg_size(subj, msg.hdr, msg.data)
        if not self._dirty:
            self._dirty = True
            self._owner._dirty_streams.add(self)

    def _get(self, seq):
        m = self._staged.get(seq)
        if m is None:
            m = self._recent.get(seq)
            if m is None:
                try:
                    v = self._read(seq)
                    if v is None:
                        raise RecordDamaged(seq, "record missing")
                    m = unpack_record(seq, v, self._strict)
                except RecordDamaged as e:
                    self._damage(seq, e.why, v)
                    raise _Gone()
                except plyvel.CorruptionError as e:
                    self._damage(seq, error_text(e), None)
                    raise _Gone()
        return m

    # Public reads: a record found damaged is never returned; it has left the
    # bookkeeping (see _damage), so the read is tried again and passes it.

    def load(self, seq):
        try:
            return super().load(seq)
        except _Gone:
            return None

    def load_last(self, filter_subject=None):
        while True:
            try:
                return super().load_last(filter_subject)
            except _Gone:
                continue

    def state(self):
        while True:
            try:
                st = super().state()
                break
            except _Gone:
                continue
        if self.lost is not None:
            st.lost = self.lost
        return st

    def damage_of(self, seq):
        """Why ``seq`` is not served (its record failed verification), or None."""
        return self.damaged.get(seq)

    def damaged_since(self, seq, filter_subject=None):
        """``(seq, why)`` of the lowest damaged record above ``seq`` whose
        subject matches ``filter_subject`` (or is unknown), or None."""
        for s, why in sorted(self.damaged.items()):
            if s > seq:
                subj = self._damaged_subj.get(s)
                if (filter_subject is None or subj is None
                        or subject_matches(filter_subject, subj)):
                    return s, why
        return None

    def _damage(self, seq, why, v):
        """The committed record of ``seq`` failed verification: it is never
        served. It leaves the in-memory bookkeeping as a lost message (counted
        in ``lost``, a gap for readers), nothing is written or deleted (the
        record stays for ``natsbroker-admin verify``/``repair``), and the log
        names the stream, the sequence and the file."""
        self._cursors = {}
        self._last_read = -1
        self._last_val = None
        if seq in self.damaged or not self._exists(seq):
            return
        self.damaged[seq] = why
        where = locate_key(self._db, self._path, _dkey(seq))
        entry = self._index_of(seq, v)
        size = 0
        self._damaged_subj[seq] = None
        if entry is not None:
            subj, size = entry
            self._damaged_subj[seq] = subj
            self._unindex(subj, seq)
            self._bytes -= size
        self._msgs -= 1
        if seq == self._first:
            self._advance_first()
        else:
            self._deleted.add(seq)
        seqs, nbytes = self.lost if self.lost is not None else ([], 0)
        if len(seqs) < LOST_LIST_MAX:
            seqs = list(seqs) + [seq]
        self.lost = (seqs, nbytes + size)
        self._match_cache.clear()
        log.error("JetStream stream {name}: message sequence {seq} is damaged ({why}) in {file}; "
                  "it is not served and counts as lost. natsbroker-admin verify lists every "
                  "damaged record, natsbroker-admin repair keeps what verifies",
                  name=self.name, seq=seq, why=why, file=where)

    def _index_of(self, seq, v):
        """``(subject, size)`` of ``seq``'s index entry: looked up under the
        subject the record names, else found by a pass over the index."""
        sk = _Q.pack(seq)
        try:
            if v is not None and len(v) >= 16:
                off, ls, _ = record_layout(v)
                subj = bytes(v[off:off + ls])
                size = self._db.get(_ipfx(subj) + sk)
                if size is not None and len(size) == 4:
                    return subj, _I.unpack(size)[0]
            for k, size in self._db.iterator(prefix=b"s"):
                if k.endswith(sk) and len(k) == 13 + _I.unpack_from(k, 1)[0]:
                    return k[5:-8], _I.unpack(size)[0] if len(size) == 4 else 0
        except plyvel.Error:
            pass
        return None

    def _read(self, seq):
        """The committed record of ``seq``. A reader going forward through the
        stream (a consumer catching up, removals from the head) is served by a
        cursor (an iterator parked on the record after the last one read, up to
        :data:`CURSORS` of them); anything else is a point get. Records never
        change once written, so a cursor's snapshot is good for every sequence
        still stored."""
        if seq == self._last_read:  # e.g. load_next(first) then remove(first)
            return self._last_val
        cursors = self._cursors
        c = cursors.pop(seq, None)
        if c is not None:
            self._park(c[0])
            v = c[1]
        else:
            # Checksums verified: damage raises rather than serving wrong bytes.
            v = self._db.get(b"d" + _Q.pack(seq), verify_checksums=True)
            if seq - 1 == self._last_read and v is not None:
                self._park(self._db.iterator(start=b"d" + _Q.pack(seq + 1), stop=b"e",
                                             verify_checksums=True))
        self._last_read = seq
        self._last_val = v
        return v

    def _park(self, it):
        exists = self._exists
        try:
            for k, v in it:
                s = _Q.unpack_from(k, 1)[0]
                if exists(s):
                    cursors = self._cursors
                    if cursors and len(cursors) >= CURSORS:
                        del cursors[next(iter(cursors))]
                    cursors[s] = (it, v)
                    return
        except plyvel.CorruptionError:
            pass  # no cursor: the next read is a point get, which names the damage

    def _drop(self, seq, erase, m=None):
        sm = self._staged.pop(seq, None)
        if sm is not None:  # never written: forget it
            subj = sm.subject
            size = self.msg_size(subj, sm.hdr, sm.data)
            lst = self._staged_subj[subj]
            if lst[-1] == seq:
                lst.pop()
            else:
                lst.remove(seq)
            if not lst:
                del self._staged_subj[subj]
        else:
            rm = self._recent.pop(seq, None)
            if m is None:
                m = rm
            if m is not None:
                subj = m.subject
                size = self.msg_size(subj, m.hdr, m.data)
            else:
                try:
                    v = self._read(seq)
                    if v is None:
                        raise RecordDamaged(seq, "record missing")
                    off, a, b, _ = verify_record(seq, v, self._strict)
                    # The record is a header, then subject, hdr and data;
                    # memoryview slices give their lengths without copying them.
                    mv = memoryview(v)
                    subj = v[off:a]
                    size = self.msg_size(subj, mv[a:b], mv[b:])
                except (RecordDamaged, plyvel.CorruptionError):
                    # Removing a record that cannot be read: its index entry
                    # says what to take out of the bookkeeping.
                    entry = self._index_of(seq, None)
                    if entry is None:
                        raise
                    subj, size = entry
            sk = _Q.pack(seq)
            dk = b"d" + sk
            self._ops[dk] = None
            self._ops[b"s" + _I.pack(len(subj)) + subj + sk] = None
            if erase:
                self._erased.append(dk)
        self._unindex(subj, seq)
        return size

    def _unindex(self, subj, seq):
        """Take ``seq`` out of ``subj``'s in-memory entry."""
        info = self._subjects.get(subj)
        if info is None:
            return
        n = info[0] = info[0] - 1
        if not n:
            del self._subjects[subj]
            self._subj_gen += 1
        else:
            # A subject's first/last that goes is looked up again when needed,
            # unless one message is left (KV: a key's previous revision goes).
            if info[1] == seq:
                info[1] = info[2] if n == 1 else 0
            if info[2] == seq:
                info[2] = info[1] if n == 1 else 0
        if not self._dirty:
            self._dirty = True
            self._owner._dirty_streams.add(self)

    def _drop_all(self):
        self._subjects = {}
        self._subj_gen += 1
        self._staged = {}
        self._staged_subj = {}
        self._staged_bytes = 0
        self._recent = {}
        # Deletes of committed message keys are moot: those keys are garbage now.
        self._ops = {k: v for k, v in self._ops.items() if k[:1] == b"m"}
        self._gc_needed = True
        self._mark_dirty()

    def _drop_below(self, seq):
        kept = (self._last - seq + 1) - self._deleted.count_ge(seq)
        remove = self._msgs - kept
        if remove <= kept or remove <= BULK_MIN:
            n = nbytes = 0
            for m in self._scan(self._first):
                if m.seq >= seq:
                    break
                nbytes += self._drop(m.seq, False, m)
                n += 1
            return n, nbytes
        # Most messages go: rebuild from the kept ones, collect the rest later.
        subjects = {}
        kbytes = 0
        for m in self._scan(seq):
            s = m.seq
            kbytes += self.msg_size(m.subject, m.hdr, m.data)
            info = subjects.get(m.subject)
            if info is None:
                subjects[m.subject] = [1, s, s]
            else:
                info[0] += 1
                info[2] = s
        self._subjects = subjects
        self._subj_gen += 1
        self._staged = {s: m for s, m in self._staged.items() if s >= seq}
        self._staged_subj = {}
        for s, m in self._staged.items():
            self._staged_subj.setdefault(m.subject, []).append(s)
        self._recent = {s: m for s, m in self._recent.items() if s >= seq}
        self._gc_needed = True
        self._mark_dirty()
        return remove, self._bytes - kbytes

    def load_next(self, seq, filter_subject=None):
        if filter_subject is None:
            # A reader at the tail: the next message is usually in memory.
            s = self._next_existing(seq)
            if not s:
                return None
            m = self._staged.get(s) or self._recent.get(s)
            if m is not None:
                return m
        while True:
            try:
                return self._load_next(seq, filter_subject)
            except _Gone:
                continue

    def _load_next(self, seq, filter_subject):
        # A consumer walks forward and its filter usually matches the next
        # message: try that one before seeking the index (a seek costs an
        # iterator; for a literal subject only when it is most of the stream).
        if filter_subject is not None and filter_subject != b">" and self._msgs:
            if literal(filter_subject):
                info = self._subjects.get(filter_subject)
                if info is None:
                    return None
                probe = info[0] * 2 >= self._msgs
            else:
                probe = True
            if probe:
                s = self._next_existing(seq)
                if not s:
                    return None
                m = self._get(s)
                if m.subject == filter_subject or subject_matches(filter_subject, m.subject):
                    return m
        return super().load_next(seq, filter_subject)

    # Per-subject index: committed entries in the DB (filtered by _exists, which
    # hides removed-but-uncommitted and garbage entries), then staged seqs, all
    # of which are above the committed ones.

    def _idx_next(self, subject, start):
        if start <= self._committed_last:
            pfx = _ipfx(subject)
            exists = self._exists
            for k in self._db.iterator(start=pfx + _Q.pack(start),
                                       stop=pfx + _Q.pack(self._committed_last + 1),
                                       include_value=False):
                s = _Q.unpack_from(k, len(k) - 8)[0]
                if exists(s):
                    return s
        lst = self._staged_subj.get(subject)
        if lst:
            i = bisect_left(lst, start)
            if i < len(lst):
                return lst[i]
        return 0

    def _idx_prev(self, subject, stop):
        lst = self._staged_subj.get(subject)
        if lst:
            i = bisect_right(lst, stop)
            if i:
                return lst[i - 1]
        hi = min(stop, self._committed_last)
        if hi >= self._first:
            pfx = _ipfx(subject)
            exists = self._exists
            for k in _rev(self._db, pfx + _Q.pack(self._first), pfx + _Q.pack(hi + 1), False):
                s = _Q.unpack_from(k, len(k) - 8)[0]
                if exists(s):
                    return s
        return 0

    def _subj_seqs(self, subject, start, stop):
        chi = min(stop, self._committed_last + 1)
        if start < chi:
            pfx = _ipfx(subject)
            exists = self._exists
            for k in self._db.iterator(start=pfx + _Q.pack(start), stop=pfx + _Q.pack(chi),
                                       include_value=False):
                s = _Q.unpack_from(k, len(k) - 8)[0]
                if exists(s):
                    yield s
        lst = self._staged_subj.get(subject)
        if lst:
            yield from lst[bisect_left(lst, start):bisect_left(lst, stop)]

    def _idx_count(self, subject, lo, hi):
        n = 0
        for _ in self._subj_seqs(subject, lo, hi):
            n += 1
        return n

    def _subj_count(self, subject):
        info = self._subjects.get(subject)
        return info[0] if info is not None else 0

    def _subj_first(self, subject, start):
        info = self._subjects.get(subject)
        if info is None:
            return 0
        f = info[1]
        if not f:
            f = info[1] = self._idx_next(subject, self._first)
        if start <= f:
            return f
        if start > self._subj_last(subject):
            return 0
        return self._idx_next(subject, start)

    def _subj_last(self, subject):
        info = self._subjects.get(subject)
        if info is None:
            return 0
        last = info[2]
        if not last:
            last = info[2] = self._idx_prev(subject, self._last)
        return last

    def _subj_count_from(self, subject, start):
        info = self._subjects.get(subject)
        if info is None:
            return 0
        f = self._subj_first(subject, 0)
        if start <= f:
            return info[0]
        last = self._subj_last(subject)
        if start > last:
            return 0
        if start - f <= last - start:
            return info[0] - self._idx_count(subject, f, start)
        return self._idx_count(subject, start, last + 1)

    def _scan(self, start):
        s = self._next_existing(start)
        if not s:
            return
        cl = self._committed_last
        if s <= cl:
            exists = self._exists
            strict = self._strict
            it = self._db.iterator(start=_dkey(s), stop=_dkey(cl + 1), verify_checksums=True)
            while True:
                try:
                    k, v = next(it)
                except StopIteration:
                    break
                except plyvel.CorruptionError:
                    # A damaged block ends the iterator: go on record by record.
                    s = self._next_existing(s)
                    while s and s <= cl:
                        m = self._get_or_none(s)
                        if m is not None:
                            yield m
                        s = self._next_existing(s + 1)
                    break
                seq = _Q.unpack_from(k, 1)[0]
                if exists(seq):
                    try:
                        m = unpack_record(seq, v, strict)
                    except RecordDamaged as e:
                        self._damage(seq, e.why, v)
                    else:
                        yield m
                s = seq + 1
            s = self._next_existing(cl + 1)
        while s:
            yield self._staged[s]
            s = self._next_existing(s + 1)

    def _get_or_none(self, seq):
        try:
            return self._get(seq)
        except _Gone:
            return None

    def _scan_rev(self, stop):
        s = self._prev_existing(stop)
        cl = self._committed_last
        while s > cl:
            yield self._staged[s]
            s = self._prev_existing(s - 1)
        if not s:
            return
        exists = self._exists
        strict = self._strict
        it = _rev(self._db, _dkey(self._first), _dkey(s + 1), verify=True)
        while True:
            try:
                k, v = next(it)
            except StopIteration:
                return
            except plyvel.CorruptionError:
                s = self._prev_existing(s)
                while s:
                    m = self._get_or_none(s)
                    if m is not None:
                        yield m
                    s = self._prev_existing(s - 1)
                return
            seq = _Q.unpack_from(k, 1)[0]
            if exists(seq):
                try:
                    m = unpack_record(seq, v, strict)
                except RecordDamaged as e:
                    self._damage(seq, e.why, v)
                else:
                    yield m
            s = seq - 1

    def state(self):
        st = super().state()
        if self.lost is not None:
            st.lost = self.lost
        return st

    # -- floors -------------------------------------------------------------

    def set_floor(self, key, values):
        """Record 4 ints under ``key`` (a consumer's delivered and ack floors)
        in the high-water mark with the next commit."""
        self._floors[key] = tuple(values)
        self._mark_dirty()

    def del_floor(self, key):
        if self._floors.pop(key, None) is not None:
            self._mark_dirty()

    def floor(self, key):
        """The floors stored under ``key`` found on open, or None."""
        return self._hwm_floors.get(key)

    # -- meta ---------------------------------------------------------------

    def put_meta(self, key, value):
        self._meta[key] = value
        self._ops[b"m" + key] = value
        pin = self._owner.pin_meta
        if pin is not None and pin(key):
            self._pinned_dirty = True
        self._mark_dirty()

    def del_meta(self, key):
        existed = self._meta.pop(key, None) is not None
        if existed:
            self._ops[b"m" + key] = None
            pin = self._owner.pin_meta
            if pin is not None and pin(key):
                self._pinned_dirty = True
            self._mark_dirty()
        return existed

    # -- commit, collection, close -----------------------------------------

    def _commit(self, sync):
        wb = self._db.write_batch(sync=sync)
        put = wb.put
        for k, v in self._ops.items():
            if v is None:
                wb.delete(k)
            else:
                put(k, v)
        qpack = _Q.pack
        ipack = _I.pack
        pack = pack_record
        pfxs = {}
        for seq, m in self._staged.items():
            subj = m.subject
            hdr = m.hdr
            data = m.data
            sk = qpack(seq)
            put(b"d" + sk, pack(seq, m.ts, subj, hdr, data))
            p = pfxs.get(subj)
            if p is None:
                p = pfxs[subj] = b"s" + ipack(len(subj)) + subj
            put(p + sk, ipack(self.msg_size(subj, hdr, data)))
        put(STATE_KEY, _STATE.pack(self._first, self._last, self._last_ts))
        pinned = self._pinned_dirty
        if pinned:
            self._meta_gen += 1
            put(META_GEN_KEY, _Q.pack(self._meta_gen))
        wb.write()
        # The copies outside LevelDB are a safety net: failing them never
        # fails a write that LevelDB took (logged once per stream).
        try:
            self._hwm.write(self._first, self._last, self._last_ts, self._msgs, self._bytes,
                            self._floors)
            if pinned:
                self._pinned_dirty = False
                pin = self._owner.pin_meta
                self._pinned.write(self._meta_gen,
                                   {k: v for k, v in self._meta.items() if pin(k)}, sync)
        except OSError as e:
            if not self._side_failed:
                self._side_failed = True
                log.warn("JetStream stream {name}: cannot write {hwm} or {meta}: {e}",
                         name=self.name, hwm=HWM_NAME, meta=META_NAME, e=e)
        if self._staged:
            self._owner._keep_recent(self, self._staged, self._staged_bytes)
        self._staged = {}
        self._staged_subj = {}
        self._staged_bytes = 0
        self._ops = {}
        self._cursors = {}  # don't pin old table files for long
        self._committed_last = self._last
        self._dirty = False
        if self._gc_needed:
            self._gc_needed = False
            self._start_gc()
        if self._erased:
            keys, self._erased = self._erased, []
            self._owner._call_later(0, self._compact_keys, keys)

    def _write_failed(self, e):
        """A commit's write failed (nothing of it is in the database: a
        LevelDB write batch is all or nothing). Its new messages are given up:
        their sequences become gaps (never handed out again; their publishers
        get an error instead of an ack) and they are never served. Removals,
        meta and state records stay staged, to be written with the next
        successful commit: they are what clients were told. Until then the
        stream refuses publishes (see :attr:`write_error`) and a timer tries
        the write again; logged once per failure and once on recovery.
        Returns the sequences given up."""
        failed = sorted(self._staged)
        for seq in failed:
            self._remove_existing(seq)
        self._staged_bytes = 0
        if self.write_error is None:
            log.error("JetStream stream {name}: store write failed: {e}. Publishes to it fail "
                      "until writes succeed again (retried every {t:g}s); {n} unacknowledged "
                      "message(s) not stored", name=self.name, e=error_text(e), t=WRITE_RETRY,
                      n=len(failed))
        self.write_error = error_text(e)
        self._dirty = True
        if self._retry_call is None and not self._closed:
            self._retry_call = self._owner._call_later(WRITE_RETRY, self._retry_write)
        return failed

    def _retry_write(self):
        self._retry_call = None
        if self._closed or self.write_error is None:
            return
        try:
            # Never append after the failed write's torn record in the current
            # write-ahead log (its recovery would drop whatever follows): a
            # memtable flush moves LevelDB to a new log first (errors here are
            # LevelDB's background error, which the write below then reports).
            self._db.compact_range(start=b"\xff\xff", stop=b"\xff\xff\x00")
            try:
                self._commit(self._owner.sync)
            except plyvel.Error:
                # LevelDB may keep a failed sync's error for good: reopen
                # (recovering its log) once there is room, then try again.
                self._reopen()
                self._commit(self._owner.sync)
        except (plyvel.Error, OSError) as e:
            self.write_error = error_text(e)
            self._retry_call = self._owner._call_later(WRITE_RETRY, self._retry_write)
            return
        log.info("JetStream stream {name}: store writes succeed again", name=self.name)
        self.write_error = None

    def _reopen(self):
        self._cursors = {}
        self._last_read = -1
        self._db.close()
        self._db = self._owner._open_db(self._path)

    def _start_gc(self):
        """Collect every key below the (committed) first sequence."""
        self._gc_floor = self._first
        self._gc_pos = b"d"
        if self._gc_call is None:
            self._gc_call = self._owner._call_later(0, self._gc_step)

    def _gc_step(self):
        self._gc_call = None
        if not self._closed and not self.collect(GC_CHUNK):
            self._gc_call = self._owner._call_later(0, self._gc_step)

    def collect(self, limit=None):
        """Delete up to ``limit`` (all if None) garbage keys below the committed
        first sequence; True when nothing is left to collect. Runs by itself
        from the reactor after purges; tests may call it directly."""
        if self._gc_pos is None or self._closed:
            return True
        floor = self._gc_floor
        db = self._db
        wb = db.write_batch()
        n = 0
        pos = self._gc_pos
        if pos[:1] == b"d":
            for k in db.iterator(start=pos, stop=_dkey(floor), include_value=False):
                wb.delete(k)
                n += 1
                if limit and n >= limit:
                    self._gc_pos = k + b"\0"
                    wb.write()
                    return False
            pos = b"s"
        for k in db.iterator(start=pos, stop=b"t", include_value=False):
            if _Q.unpack_from(k, len(k) - 8)[0] < floor:
                wb.delete(k)
            n += 1
            if limit and n >= limit:
                self._gc_pos = k + b"\0"
                wb.write()
                return False
        wb.write()
        self._gc_pos = None
        return True

    def _compact_keys(self, keys):
        if not self._closed:
            for k in keys:
                self._db.compact_range(start=k, stop=k + b"\0")

    def _close(self):
        if self._closed:
            return
        self._closed = True
        for call in (self._gc_call, self._retry_call):
            if call is not None:
                try:
                    call.cancel()
                except Exception:
                    pass
        self._gc_call = self._retry_call = None
        self._cursors = {}
        self._owner._forget_recent(self)
        try:
            self._hwm.close()
        finally:
            self._db.close()


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
                st._db.put(STATE_KEY, _STATE.pack(st._first, st._last, st._last_ts), sync=True)
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
