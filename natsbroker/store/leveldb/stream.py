"""One stream's messages in its own LevelDB database: bookkeeping in memory,
group commit, recent messages, parked iterators, garbage collection and damage
handling. See :mod:`natsbroker.store.leveldb` for the design.

The per-message path (append, commit, load, load_next) calls the record codec
of :mod:`.records`; those names are imported here, module globals as they were
when both were one module, so compiling the two separately adds no lookups.
"""

import os
from bisect import bisect_left, bisect_right

import plyvel
from twisted.logger import Logger

from natsbroker.store.base import file_msg_size
from natsbroker.store.common import INVERT, NOT_00, SeqSet, StreamBase, literal, popcount
from natsbroker.store.leveldb.records import (
    FORMAT_CRC,
    FORMAT_KEY,
    META_GEN_KEY,
    STATE_KEY,
    STATE_RECORD,
    U32,
    U64,
    RecordDamaged,
    data_key,
    descending,
    error_text,
    index_prefix,
    locate_key,
    pack_record,
    record_layout,
    unpack_record,
    verify_record,
)
from natsbroker.store.leveldb.sidefiles import HWM_NAME, META_NAME, HighWater, PinnedMeta
from natsbroker.subjects.sublist import subject_matches

# The log's ``logger`` name stays the one of the module this package was.
log = Logger(namespace="natsbroker.store.leveldb")

GC_CHUNK = 1000  # keys the garbage collector examines per reactor turn
WRITE_RETRY = 1.0  # seconds between attempts to write to a stream whose last write failed
CURSORS = 4  # parked iterators for sequential reads
BULK_MIN = 4096  # purges below a sequence removing more than this may rebuild from the kept side
LOST_LIST_MAX = 1 << 20  # lost sequences listed one by one up to this many


class _Gone(Exception):
    """Raised inside the stream when a record read turns out damaged: it has
    just left the bookkeeping, so the read is retried (and skips it)."""


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
        if rec is not None and len(rec) == STATE_RECORD.size:
            first, last, last_ts = STATE_RECORD.unpack(rec)
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
        self._meta_gen = U64.unpack(g)[0] if g else 0
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
        iunpack = U32.unpack_from
        qunpack = U64.unpack_from
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
        for _ in db.iterator(start=b"d", stop=data_key(max(first, 1)), include_value=False):
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
            first = U64.unpack_from(k, 1)[0]
            break
        for k, v in descending(db, b"d", b"e"):
            last = U64.unpack_from(k, 1)[0]
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
        where = locate_key(self._db, self._path, data_key(seq))
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
        sk = U64.pack(seq)
        try:
            if v is not None and len(v) >= 16:
                off, ls, _ = record_layout(v)
                subj = bytes(v[off:off + ls])
                size = self._db.get(index_prefix(subj) + sk)
                if size is not None and len(size) == 4:
                    return subj, U32.unpack(size)[0]
            for k, size in self._db.iterator(prefix=b"s"):
                if k.endswith(sk) and len(k) == 13 + U32.unpack_from(k, 1)[0]:
                    return k[5:-8], U32.unpack(size)[0] if len(size) == 4 else 0
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
            v = self._db.get(b"d" + U64.pack(seq), verify_checksums=True)
            if seq - 1 == self._last_read and v is not None:
                self._park(self._db.iterator(start=b"d" + U64.pack(seq + 1), stop=b"e",
                                             verify_checksums=True))
        self._last_read = seq
        self._last_val = v
        return v

    def _park(self, it):
        exists = self._exists
        try:
            for k, v in it:
                s = U64.unpack_from(k, 1)[0]
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
            sk = U64.pack(seq)
            dk = b"d" + sk
            self._ops[dk] = None
            self._ops[b"s" + U32.pack(len(subj)) + subj + sk] = None
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
            pfx = index_prefix(subject)
            exists = self._exists
            for k in self._db.iterator(start=pfx + U64.pack(start),
                                       stop=pfx + U64.pack(self._committed_last + 1),
                                       include_value=False):
                s = U64.unpack_from(k, len(k) - 8)[0]
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
            pfx = index_prefix(subject)
            exists = self._exists
            for k in descending(self._db, pfx + U64.pack(self._first), pfx + U64.pack(hi + 1), False):
                s = U64.unpack_from(k, len(k) - 8)[0]
                if exists(s):
                    return s
        return 0

    def _subj_seqs(self, subject, start, stop):
        chi = min(stop, self._committed_last + 1)
        if start < chi:
            pfx = index_prefix(subject)
            exists = self._exists
            for k in self._db.iterator(start=pfx + U64.pack(start), stop=pfx + U64.pack(chi),
                                       include_value=False):
                s = U64.unpack_from(k, len(k) - 8)[0]
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
            it = self._db.iterator(start=data_key(s), stop=data_key(cl + 1), verify_checksums=True)
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
                seq = U64.unpack_from(k, 1)[0]
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
        it = descending(self._db, data_key(self._first), data_key(s + 1), verify=True)
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
            seq = U64.unpack_from(k, 1)[0]
            if exists(seq):
                try:
                    m = unpack_record(seq, v, strict)
                except RecordDamaged as e:
                    self._damage(seq, e.why, v)
                else:
                    yield m
            s = seq - 1

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
        qpack = U64.pack
        ipack = U32.pack
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
        put(STATE_KEY, STATE_RECORD.pack(self._first, self._last, self._last_ts))
        pinned = self._pinned_dirty
        if pinned:
            self._meta_gen += 1
            put(META_GEN_KEY, U64.pack(self._meta_gen))
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
            for k in db.iterator(start=pos, stop=data_key(floor), include_value=False):
                wb.delete(k)
                n += 1
                if limit and n >= limit:
                    self._gc_pos = k + b"\0"
                    wb.write()
                    return False
            pos = b"s"
        for k in db.iterator(start=pos, stop=b"t", include_value=False):
            if U64.unpack_from(k, len(k) - 8)[0] < floor:
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

