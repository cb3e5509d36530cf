"""The two small files beside each stream's LevelDB files that keep what a
damaged database must not take along: :class:`HighWater` (sequences and floors
that never go back) and :class:`PinnedMeta` (the configs that define the
stream). See "Damage" in :mod:`natsbroker.store.leveldb`.
"""

import os
import struct
import zlib

from twisted.logger import Logger

from natsbroker import private
from natsbroker.store.leveldb.records import U32

# The log's ``logger`` name stays the one of the module this package was.
log = Logger(namespace="natsbroker.store.leveldb")


# The high-water mark file (see :class:`HighWater`), inside each stream's
# LevelDB directory (LevelDB ignores file names it does not own).
HWM_NAME = "NATSBROKER-HWM"
HWM_MAGIC = b"NBHW"
HWM_SLOT = 4096  # two slots, written alternately: a torn write spoils one
_HWM_HDR = struct.Struct(">4sQII")  # magic, generation, len(body), crc32(body)
_HWM_BODY = struct.Struct(">QQQQQ")  # first_seq, last_seq, last_ts, msgs, bytes
_FLOOR = struct.Struct(">QQQQ")
# The pinned meta file (see :class:`PinnedMeta`), next to it.
META_NAME = "NATSBROKER-META"
META_MAGIC = b"NBMT"
_META_HDR = struct.Struct(">4sQII")  # magic, generation, len(body), crc32(body)


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
            k = U32.unpack_from(body, i)[0]
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
                    U32.pack(len(k)) + k + _FLOOR.pack(*v) for k, v in floors.items())
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
            k = U32.unpack_from(body, i)[0]
            key = body[i + 4:i + 4 + k]
            i += 4 + k
            v = U32.unpack_from(body, i)[0]
            out[key] = body[i + 4:i + 4 + v]
            i += 4 + v
        return gen, out

    def write(self, gen, records, sync):
        body = b"".join(U32.pack(len(k)) + k + U32.pack(len(v)) + v
                        for k, v in sorted(records.items()))
        private.write_atomic(
            self.path, _META_HDR.pack(META_MAGIC, gen, len(body), zlib.crc32(body)) + body, sync)

