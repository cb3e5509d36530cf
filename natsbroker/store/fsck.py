"""Offline verification and repair of a file store's streams: what
``natsbroker-admin verify`` and ``natsbroker-admin repair`` run. Plain
functions over plyvel, no reactor, so the server can call them as well.

Where: :func:`find_streams` takes a server's ``store_dir`` (holding
``jetstream/streams/<name>/``), its ``jetstream/`` directory, one stream's
LevelDB directory or a quarantined one (``jetstream/quarantine/<name>-<time>/``).
The server must not be running on it: LevelDB's ``LOCK`` says so
(:class:`StoreInUse`).

Verify (:func:`verify_stream`): the database is opened as the server opens it
(paranoid checks; LevelDB may turn its write-ahead log into a table file, as at
every server start: no record is written). Every key is read with LevelDB's
block checksums verified; a block that fails them does not end the scan
(:func:`walk` lists its keys without the check, reads each one verified and
goes on after it). Every message record is checked with
:func:`~.leveldb.records.verify_record`, then records, the per-subject index, the state
record, the config records and the two files beside the database
(``NATSBROKER-HWM``, ``NATSBROKER-META``) are compared. A database LevelDB
cannot open is examined in a temporary copy repaired by LevelDB's repair: what
``repair`` would keep and lose. The result is a :class:`StreamReport`.

Repair (:func:`repair_stream`): first a full, fsynced copy of the stream's
directory in ``quarantine/<name>-<time>-before-repair/`` (nothing is ever lost
to a repair); then ``plyvel.repair_db``; then a new database is written with
every record that verifies (damaged ones are left out: LevelDB keeps a block
that fails its checksum in its table file, where it would fail every scan and
compaction), an index rebuilt from those records, the config records (missing
ones put back from ``NATSBROKER-META``) and a state record whose last sequence
is the highest of the state record's, the high-water mark's and the verified
records' (a record's checksum covers its sequence; a damaged key may be
garbled): sequences never go back and nothing is renumbered. The new database
replaces the old one; the lost sequences are reported and appended to
``NATSBROKER-REPAIRS`` (JSON lines) in the stream's directory, which tells a
later verify that the high-water mark's message count was already accounted for.
"""

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import tempfile
import time
from bisect import bisect_left

import attrs
import plyvel

from natsbroker import private
from natsbroker.store.base import file_msg_size
from natsbroker.store.leveldb.records import (
    FORMAT_CRC,
    FORMAT_KEY,
    META_GEN_KEY,
    STATE_KEY,
    STATE_RECORD,
    U32,
    U64,
    RecordDamaged,
    locate_key,
    verify_record,
)
from natsbroker.store.leveldb.sidefiles import HWM_NAME, META_NAME, HighWater, PinnedMeta
from natsbroker.store.leveldb.store import LevelDBStore
from natsbroker.store.meta_keys import (
    CONSUMER_CONFIG,
    CONSUMER_PREFIX,
    CONSUMER_STATE,
    META_CONFIG,
    META_CREATED,
    pinned_meta,
)

REPAIRS_NAME = "NATSBROKER-REPAIRS"  # JSON lines, one per repair, in the stream's directory
TIME_FORMAT = "%Y%m%dT%H%M%SZ"  # as the server names quarantine directories
_QUARANTINED = re.compile(r"^(.+)-\d{8}T\d{6}Z(?:-before-repair)?(?:\.\d+)?$")
BATCH_BYTES = 4 << 20  # a rebuilt database is written in batches of about this size

# Finding kinds (stable: they are the JSON report's "kind").
UNOPENABLE = "unopenable"  # LevelDB cannot open the database
DAMAGED = "damaged"  # a message record that fails verification or cannot be read
UNREADABLE = "unreadable"  # keys LevelDB cannot even list (a broken block or table)
MISSING = "missing"  # an index entry without its record
UNINDEXED = "unindexed"  # a record without its index entry: the server does not see it
MISMATCH = "index-mismatch"  # an index entry that disagrees with its record
ABOVE_LAST = "above-last"  # a record above the state record's last sequence
BELOW_FIRST = "below-first"  # records below the first sequence (purged, not yet collected)
BAD_KEY = "bad-key"  # a key that does not parse
STATE = "state"  # the state record
HWM = "high-water"  # NATSBROKER-HWM against the database
LOST_TAIL = "lost-tail"  # sequences after the database's last one, below the high-water mark
META = "meta"  # config and consumer records
PINNED = "pinned-meta"  # NATSBROKER-META
FORMAT = "format"  # records without checksums
EMPTY = "empty"  # a directory without a database yet


class StoreInUse(Exception):
    """A process (the server) holds the LevelDB lock of ``path``."""

    def __init__(self, path):
        super().__init__(path)
        self.path = path


class CheckError(Exception):
    """A usage error: not a store, no such stream."""


# -- where the streams are ---------------------------------------------------------------


@attrs.define
class StreamDir:
    """A stream's LevelDB directory; ``jetstream`` is the store's ``jetstream/``
    directory when known (it holds ``quarantine/``)."""
    name: str
    path: str
    jetstream: str | None = None


# The files LevelDB names (a number and a suffix, MANIFEST-<number>, CURRENT) and
# ours: only a directory holding some is taken for a stream's database (an
# ``.log`` file alone means nothing).
_DB_FILE = re.compile(r"^(?:\d{6,}\.(?:ldb|sst|log)|MANIFEST-\d{6,}|CURRENT|%s|%s)$"
                      % (HWM_NAME, META_NAME))


def db_files(path):
    """The names of the files in ``path`` that LevelDB or natsbroker wrote."""
    return sorted(n for n in os.listdir(path) if _DB_FILE.match(n)
                  and os.path.isfile(os.path.join(path, n)))


def is_database(path):
    return any(n != META_NAME and n != HWM_NAME for n in db_files(path))


def find_streams(path):
    """``(streams, quarantined)``: the :class:`StreamDir` of every stream under
    ``path`` (a store_dir, a ``jetstream/`` directory, or one stream's
    directory) and the quarantined directories of the store, which are only
    examined when named. Raises :class:`CheckError` for anything else."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise CheckError("%s: no such directory" % path)
    for js in (os.path.join(path, "jetstream"), path):
        streams = os.path.join(js, "streams")
        if os.path.isdir(streams):
            found = [StreamDir(n, os.path.join(streams, n), js)
                     for n in sorted(os.listdir(streams))
                     if os.path.isdir(os.path.join(streams, n))]
            q = os.path.join(js, "quarantine")
            quarantined = sorted(os.path.join(q, n) for n in os.listdir(q)
                                 if os.path.isdir(os.path.join(q, n))) if os.path.isdir(q) else []
            return found, quarantined
    if is_database(path):
        parent = os.path.dirname(path)
        base = os.path.basename(path)
        kind = os.path.basename(parent)
        if kind == "streams":
            return [StreamDir(base, path, os.path.dirname(parent))], []
        if kind == "quarantine":
            m = _QUARANTINED.match(base)
            return [StreamDir(m.group(1) if m else base, path, os.path.dirname(parent))], []
        return [StreamDir(base, path, None)], []
    raise CheckError("%s: not a store (no jetstream/streams/ in it) nor a stream's "
                     "LevelDB directory" % path)


# -- LevelDB's lock ---------------------------------------------------------------------


@contextlib.contextmanager
def held_lock(path, create=False):
    """Hold LevelDB's lock of the database in ``path`` (the fcntl lock LevelDB
    takes on its LOCK file), or raise :class:`StoreInUse`. LevelDB's repair
    takes no lock of its own. Released on exit: release it before opening the
    database in this process (closing a descriptor drops every fcntl lock the
    process holds on that file, LevelDB's included)."""
    lock = os.path.join(path, "LOCK")
    try:
        fd = private.open_file(lock, os.O_RDWR | (os.O_CREAT if create else 0))
    except FileNotFoundError:
        yield  # LevelDB never ran here
        return
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise StoreInUse(path) from None
            raise
        yield
    finally:
        os.close(fd)


def _leveldb_message(e):
    a = e.args[0] if e.args else e
    return a.decode(errors="replace") if isinstance(a, bytes) else str(a)


def open_db(path):
    """The database in ``path`` opened as the server opens it (paranoid checks,
    its options); raises :class:`StoreInUse` or ``(plyvel.Error, StoreDamaged)``."""
    with held_lock(path):
        pass
    try:
        return LevelDBStore._open_db(path)
    except plyvel.IOError as e:
        if "lock" in _leveldb_message(e):
            raise StoreInUse(path) from None
        raise


# -- reading every key ----------------------------------------------------------------

OK, BAD, GAP = "ok", "bad", "gap"


def walk(db, start, stop):
    """Every key in ``[start, stop)``, block checksums verified, as
    ``(OK, key, value)``; ``(BAD, key, why)`` for a key LevelDB lists but
    cannot read verified; ``(GAP, (from, to), why)`` for a range whose keys it
    cannot even list. A damaged block does not end the walk."""
    pos = start
    while pos < stop:
        it = db.iterator(start=pos, stop=stop, verify_checksums=True)
        try:
            for k, v in it:
                yield OK, k, v
                pos = k + b"\0"
            return
        except plyvel.CorruptionError as e:
            pos = yield from _salvage(db, pos, stop, _leveldb_message(e))


def _salvage(db, pos, stop, why):
    """A verified iterator failed after ``pos``: list the keys that follow
    without checking their block and read each one verified, until one reads;
    returns where verified iteration resumes (always past ``pos``)."""
    at = pos
    try:
        for k in db.iterator(start=pos, stop=stop, include_value=False,
                             verify_checksums=False):
            if k < at:
                break  # a garbled block: its keys mean nothing
            at = k + b"\0"
            try:
                v = db.get(k, verify_checksums=True)
            except plyvel.CorruptionError as e:
                yield BAD, k, _leveldb_message(e)
                continue
            if v is not None:  # None: a key only the unchecked read sees (garbled)
                yield OK, k, v
                return at
        else:
            return stop
    except plyvel.CorruptionError as e:
        why = _leveldb_message(e)
    end = _skip(db, at, stop)
    yield GAP, (at, end), why
    return end


def _skip(db, pos, stop):
    """The lowest key (about) from which a verified iterator reads again: the
    keys as big-endian numbers, an exponential then a binary search."""
    width = max(len(pos), len(stop))
    lo = int.from_bytes(pos.ljust(width, b"\0"), "big")
    top = int.from_bytes(stop.ljust(width, b"\0"), "big")

    def readable(n):
        it = db.iterator(start=n.to_bytes(width, "big"), stop=stop, include_value=False,
                         verify_checksums=True)
        try:
            next(it, None)
            return True
        except plyvel.CorruptionError:
            return False

    step = 1
    while lo + step < top and not readable(lo + step):
        step <<= 1
    if lo + step >= top:
        return stop
    bad, good = lo + (step >> 1), lo + step
    while good - bad > 1:
        mid = (bad + good) >> 1
        if readable(mid):
            good = mid
        else:
            bad = mid
    return good.to_bytes(width, "big")


def _get(db, key):
    """``(value, None)`` or ``(None, why)`` when the key cannot be read."""
    try:
        return db.get(key, verify_checksums=True), None
    except plyvel.CorruptionError as e:
        return None, _leveldb_message(e)


# -- what a database holds ---------------------------------------------------------------


@attrs.define
class Scan:
    """Everything read from one stream database."""
    path: str
    state: tuple | None = None  # (first, last, last_ts) of the b"S" record
    state_error: str | None = None
    strict: bool = False  # b"F" says every record carries a checksum
    gen: int | None = None  # META_GEN_KEY
    meta: dict = attrs.Factory(dict)  # key (without b"m") -> value
    meta_bad: dict = attrs.Factory(dict)  # key -> why it cannot be read
    records: dict = attrs.Factory(dict)  # seq -> (subject id, size, ts), verified
    subjects: list = attrs.Factory(list)  # subject id -> subject
    subject_ids: dict = attrs.Factory(dict)  # subject -> id
    no_crc: int = 0  # verified records without a checksum (older natsbroker)
    damaged: dict = attrs.Factory(dict)  # seq -> (why, file)
    index: dict = attrs.Factory(dict)  # seq -> (subject, size or None)
    index_extra: list = attrs.Factory(list)  # (seq, subject): a second entry for a sequence
    index_bad: dict = attrs.Factory(dict)  # seq -> why the entry cannot be read
    bad_keys: list = attrs.Factory(list)  # (key, why)
    gaps: list = attrs.Factory(list)  # (prefix, from key, to key, why, file)


def scan_db(db, path, upper=0, meta_keys=()):
    """Read and check every key of the stream database ``db`` (in ``path``).
    Inside key ranges LevelDB cannot list (a table it cannot open hides every
    key in its range from iterators), the keys that may be there are read one
    by one, since point reads still find those other tables hold: message
    sequences up to ``upper`` (the high-water mark's last), the index entries
    of the records found, ``meta_keys`` (those NATSBROKER-META names)."""
    sc = Scan(path)
    raw, why = _get(db, STATE_KEY)
    if why is not None:
        sc.state_error = why
    elif raw is not None:
        if len(raw) == STATE_RECORD.size:
            sc.state = STATE_RECORD.unpack(raw)
        else:
            sc.state_error = "state record of %d bytes" % len(raw)
    raw, _ = _get(db, FORMAT_KEY)
    sc.strict = raw == FORMAT_CRC
    raw, _ = _get(db, META_GEN_KEY)
    if raw is not None and len(raw) == 8:
        sc.gen = U64.unpack(raw)[0]
    for kind, k, x in walk(db, b"m", b"n"):
        if kind is OK:
            sc.meta[k[1:]] = x
        elif kind is BAD:
            sc.meta_bad[k[1:]] = x
        else:
            sc.gaps.append((b"m",) + k + (x, _where(db, path, k[0])))
    _scan_records(db, path, sc)
    _scan_index(db, path, sc)
    if sc.gaps:
        _probe_gaps(db, path, sc, max(upper, sc.state[1] if sc.state else 0), meta_keys)
    return sc


def _where(db, path, key):
    return os.path.basename(locate_key(db, path, key))


def _scan_records(db, path, sc):
    for kind, k, x in walk(db, b"d", b"e"):
        if kind is GAP:
            sc.gaps.append((b"d",) + k + (x, _where(db, path, k[0])))
        elif len(k) != 9:
            sc.bad_keys.append((k, "message key of %d bytes" % len(k)))
        elif kind is BAD:
            sc.damaged[U64.unpack_from(k, 1)[0]] = (x, _where(db, path, k))
        else:
            _take_record(db, path, sc, k, x)


def _take_record(db, path, sc, k, v):
    """Verify record ``v`` under key ``k``: into ``sc.records`` or ``sc.damaged``."""
    seq = U64.unpack_from(k, 1)[0]
    try:
        off, a, b, ts = verify_record(seq, v, sc.strict)
    except RecordDamaged as e:
        sc.damaged[seq] = (_record_why(e.why), _where(db, path, k))
        return
    if off < 20:
        sc.no_crc += 1
    mv = memoryview(v)
    subj = v[off:a]
    sid = sc.subject_ids.get(subj)
    if sid is None:
        sid = sc.subject_ids[subj] = len(sc.subjects)
        sc.subjects.append(subj)
    sc.records[seq] = (sid, file_msg_size(subj, mv[a:b], mv[b:]), ts)


PROBE_MAX = 1 << 20  # sequences read one by one in one unlistable range, at most


def _probe_gaps(db, path, sc, upper, meta_keys):
    for prefix, lo, hi, why, where in list(sc.gaps):
        if prefix == b"d":
            first = U64.unpack(lo[1:9].ljust(8, b"\0"))[0] if lo[1:] else 0
            last = min(upper, U64.unpack(hi[1:9].ljust(8, b"\0"))[0] if hi < b"e" else upper)
            for seq in range(max(first, 1), min(last, first + PROBE_MAX) + 1):
                k = b"d" + U64.pack(seq)
                if not lo <= k < hi or seq in sc.records or seq in sc.damaged:
                    continue
                v, err = _get(db, k)
                if v is not None:
                    _take_record(db, path, sc, k, v)
                elif err is not None and seq in sc.index:
                    sc.damaged[seq] = (err, where)
        elif prefix == b"s":
            for seq, (sid, size, _) in list(sc.records.items()):
                subj = sc.subjects[sid]
                k = b"s" + U32.pack(len(subj)) + subj + U64.pack(seq)
                if lo <= k < hi and seq not in sc.index:
                    v, err = _get(db, k)
                    if v is not None:
                        sc.index[seq] = (subj, U32.unpack(v)[0] if len(v) == 4 else None)
                    elif err is not None:
                        sc.index_bad[seq] = err
        else:
            for key in meta_keys:
                k = b"m" + key
                if lo <= k < hi and key not in sc.meta:
                    v, err = _get(db, k)
                    if v is not None:
                        sc.meta[key] = v
                    elif err is not None:
                        sc.meta_bad[key] = err


def _record_why(why):
    """verify_record's reason, told apart from LevelDB's ("Corruption: ...")."""
    return why if why.startswith("record") else "record " + why


def _scan_index(db, path, sc):
    for kind, k, x in walk(db, b"s", b"t"):
        if kind is GAP:
            sc.gaps.append((b"s",) + k + (x, _where(db, path, k[0])))
            continue
        if len(k) < 13 or len(k) != 13 + U32.unpack_from(k, 1)[0]:
            sc.bad_keys.append((k, "index key does not parse"))
            continue
        seq = U64.unpack_from(k, len(k) - 8)[0]
        subj = k[5:-8]
        if kind is BAD:
            sc.index_bad[seq] = x
            continue
        size = U32.unpack(x)[0] if len(x) == 4 else None
        if seq in sc.index:
            sc.index_extra.append((seq, subj))
        else:
            sc.index[seq] = (subj, size)


# -- findings ---------------------------------------------------------------------------


@attrs.define
class Finding:
    """One thing found; ``damage`` False: a note, not damage. ``seq``/``last``:
    the sequence or range it is about."""
    kind: str
    why: str
    seq: int | None = None
    last: int | None = None
    file: str | None = None
    damage: bool = True

    def line(self):
        where = ""
        if self.seq is not None:
            where = "seq %d" % self.seq
            if self.last is not None and self.last != self.seq:
                where = "seqs %d-%d" % (self.seq, self.last)
            where += ": "
        text = "%s%s: %s" % (where, self.kind, self.why)
        if self.file:
            text += " (%s)" % self.file
        return text

    def as_json(self):
        return {k: v for k, v in attrs.asdict(self).items() if v is not None}


def seq_ranges(seqs):
    """``[[first, last], ...]`` of the sorted distinct ``seqs``."""
    out = []
    for s in sorted(set(seqs)):
        if out and out[-1][1] == s - 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out


def ranges_text(ranges, limit=20):
    parts = ["%d" % a if a == b else "%d-%d" % (a, b) for a, b in ranges[:limit]]
    if len(ranges) > limit:
        parts.append("... (%d more ranges)" % (len(ranges) - limit))
    return ", ".join(parts)


def _merge(ranges):
    out = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _grouped(findings):
    """Consecutive findings of the same kind, why and file over consecutive
    sequences as one range (human output)."""
    out = []
    for f in findings:
        p = out[-1] if out else None
        if (p is not None and f.seq is not None and p.seq is not None and f.last is None
                and (p.kind, p.why, p.file, p.damage) == (f.kind, f.why, f.file, f.damage)
                and (p.last or p.seq) + 1 == f.seq):
            p.last = f.seq
        else:
            out.append(attrs.evolve(f))
    return out


@attrs.define
class StreamReport:
    """What :func:`verify_stream` found in one stream."""
    name: str
    path: str
    findings: list = attrs.Factory(list)
    examined: str = "database"  # or a repaired copy (LevelDB cannot open it), "nothing"
    records: int = 0  # verified records
    msgs: int = 0  # verified records in [first_seq, last_seq], indexed
    first_seq: int = 0
    last_seq: int = 0
    hwm: dict | None = None
    lost: list = attrs.Factory(list)  # [[first, last], ...] of lost sequences
    lost_count: int = 0  # acked messages lost (the high-water mark's count when larger)
    counts: dict = attrs.Factory(dict)  # kind -> number of findings

    @property
    def ok(self):
        return not any(f.damage for f in self.findings)

    def add(self, kind, why, seq=None, damage=True, file=None, last=None):
        self.findings.append(Finding(kind, why, seq, last, file, damage))
        if damage:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def summary(self):
        c = self.counts
        text = ("stream %s: %d records verified, %d damaged, %d missing, %d unindexed, "
                "%d above last_seq; first_seq %d, last_seq %d"
                % (self.name, self.records, c.get(DAMAGED, 0), c.get(MISSING, 0),
                   c.get(UNINDEXED, 0), c.get(ABOVE_LAST, 0), self.first_seq, self.last_seq))
        if self.hwm is not None:
            text += " (high-water mark %d), %d messages held (high-water mark %d)" % (
                self.hwm["last_seq"], self.msgs, self.hwm["msgs"])
        else:
            text += ", %d messages held" % self.msgs
        if self.lost_count:
            text += "; lost %d: %s" % (self.lost_count, ranges_text(self.lost))
        if self.examined != "database":
            text += "; examined: %s" % self.examined
        return text + (": OK" if self.ok else ": DAMAGED")

    def lines(self):
        out = ["stream %s: %s" % (self.name, self.path)]
        out += ["  " + f.line() for f in _grouped(self.findings)]
        out.append("  " + self.summary())
        return out

    def as_json(self):
        return {"name": self.name, "path": self.path, "ok": self.ok, "examined": self.examined,
                "records": self.records, "msgs": self.msgs, "first_seq": self.first_seq,
                "last_seq": self.last_seq, "high_water": self.hwm, "lost": self.lost,
                "lost_count": self.lost_count, "counts": self.counts,
                "findings": [f.as_json() for f in self.findings]}


def _read_hwm(path):
    """``(HighWater values or None, exists, generation)``."""
    hw = HighWater(os.path.join(path, HWM_NAME))
    vals = hw.read()
    return vals, os.path.exists(hw.path), hw.gen


def read_repairs(path):
    """The entries of ``NATSBROKER-REPAIRS`` (unreadable lines skipped)."""
    out = []
    try:
        with open(os.path.join(path, REPAIRS_NAME), "rb") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except FileNotFoundError:
        pass
    return out


@attrs.define
class _Bounds:
    """The sequence range the evidence gives: state record, high-water mark and
    verified records."""
    first: int
    last: int
    last_ts: int
    floor: int  # the first sequence the state record and the mark agree on (0: unknown)
    db_last: int  # the highest sequence the database itself names


def _bounds(sc, hw):
    st = sc.state or (0, 0, 0)
    cands = [(st[1], st[2])]
    if sc.records:
        top = max(sc.records)
        cands.append((top, sc.records[top][2]))
    # Only a verified record proves its sequence (the checksum covers it): a
    # damaged record's or an index entry's key may itself be garbled.
    db_last = max(c[0] for c in cands)
    if hw is not None:
        cands.append((hw[1], hw[2]))
    last, last_ts = max(cands)
    floor = max(st[0], hw[0] if hw is not None else 0)
    if not floor:
        floor = min(sc.records) if sc.records else 0
    # first_seq: the lowest record at or above the floor (last + 1 when none is).
    kept = [s for s in sc.records if s >= floor] if floor else list(sc.records)
    first = min(kept) if kept else (last + 1 if last else 0)
    return _Bounds(first, last, last_ts, floor, db_last)


def _expected(sc, hw, b):
    """Sequences some evidence says hold a message (for the lost list)."""
    exp = set(s for s in sc.index if s >= b.floor)
    exp.update(sc.damaged)
    exp.update(sc.index_bad)
    if hw is not None and hw[3] and hw[3] == hw[1] - hw[0] + 1:
        # The mark's count fills its range: no sequence in it had been deleted.
        lo = max(hw[0], b.floor)
        if hw[1] - lo < 10_000_000:
            exp.update(range(lo, hw[1] + 1))
    return exp


def analyse(sc, name, path, hwm=None, hwm_exists=False, hwm_gen=0, pinned=None,
            pinned_exists=False, repairs=()):
    """The :class:`StreamReport` of scan ``sc``; ``hwm``: ``HighWater.read()``,
    ``pinned``: ``PinnedMeta.read()``, ``repairs``: :func:`read_repairs`."""
    r = StreamReport(name, path)
    b = _bounds(sc, hwm)
    if sc.state is None:
        if sc.state_error:
            r.add(STATE, "state record unreadable: %s" % sc.state_error)
        elif sc.records or sc.index:
            r.add(STATE, "no state record (first/last sequence)")
    # What the server will make of it: below the floor is garbage, above the
    # state record's last sequence is not seen.
    last = sc.state[1] if sc.state is not None else b.db_last
    r.first_seq, r.last_seq = b.first, b.last
    _check_meta(r, sc, pinned, pinned_exists)
    if sc.no_crc:
        r.add(FORMAT, "%d records without a checksum (written by an older natsbroker): "
              "checked by their lengths only" % sc.no_crc, damage=False)
    for prefix, lo, hi, why, where in sc.gaps:
        r.add(UNREADABLE, "%s keys %s..%s cannot be listed: %s"
              % (_PREFIXES[prefix], lo.hex(), hi.hex(), why), file=where)
    for k, why in sc.bad_keys:
        r.add(BAD_KEY, "%s: %s" % (k[:40].hex(), why))
    for seq in sorted(sc.damaged):
        why, where = sc.damaged[seq]
        if seq > b.last:
            why += " (above last_seq %d: the key itself may be garbled)" % b.last
        r.add(DAMAGED, why, seq, file=where)
    held = _check_records(r, sc, b.floor, last)
    _check_index(r, sc, b.floor)
    r.records = len(sc.records)
    r.msgs = held
    expected = _expected(sc, hwm, b)
    lost = sorted(s for s in expected if s not in sc.records and b.floor <= s <= b.last)
    done = _repaired(hwm, hwm_gen, held, repairs)
    named = {f.seq for f in r.findings if f.seq is not None}
    for seq in lost:
        if seq in named or seq > b.db_last or done is not None:
            continue
        gap = _in_gap(sc, seq)
        if gap is not None:
            r.add(DAMAGED, "in keys LevelDB cannot list (%s)" % gap[3], seq, file=gap[4])
        else:
            r.add(MISSING, "neither record nor index entry, and the high-water mark counts "
                  "a message at every sequence up to %d" % hwm[1], seq)
    tail = [[b.db_last + 1, hwm[1]]] if hwm is not None and hwm[1] > b.db_last else []
    r.lost = _merge(seq_ranges(lost) + tail)
    listed = sum(z - a + 1 for a, z in r.lost)
    _check_hwm(r, sc, hwm, hwm_exists, hwm_gen, held, b, done, listed)
    unlisted = hwm[3] - held if hwm is not None and done is None else 0
    r.lost_count = max(listed, unlisted)
    return r


def _repaired(hwm, gen, held, repairs):
    """The last repair's entry if it accounts for the high-water mark's count
    being above what the database holds (the mark is the one the repair saw
    and the database holds what it kept), else None."""
    done = repairs[-1] if repairs else None
    if (hwm is not None and done is not None and done.get("hwm") == [gen, hwm[1], hwm[3]]
            and done.get("msgs") == held):
        return done
    return None


_PREFIXES = {b"d": "message", b"s": "index", b"m": "meta"}


def _in_gap(sc, seq):
    """The data gap (keys LevelDB cannot list) holding ``seq``'s record, or None."""
    k = b"d" + U64.pack(seq)
    for g in sc.gaps:
        if g[0] == b"d" and g[1] <= k < g[2]:
            return g
    return None


def _check_records(r, sc, floor, last):
    held = 0
    below = 0
    for seq, (sid, size, _) in sorted(sc.records.items()):
        if seq < floor:
            below += 1
            continue
        if seq > last:
            r.add(ABOVE_LAST, "record above the state record's last_seq %d" % last, seq)
        entry = sc.index.get(seq)
        if entry is None:
            if seq in sc.index_bad:
                r.add(UNINDEXED, "index entry unreadable: %s" % sc.index_bad[seq], seq)
            else:
                r.add(UNINDEXED, "record without an index entry (the server does not see it)",
                      seq)
            continue
        subj, isize = entry
        if subj != sc.subjects[sid]:
            r.add(MISMATCH, "index entry under subject %r, the record's is %r"
                  % (subj.decode(errors="replace"), sc.subjects[sid].decode(errors="replace")),
                  seq)
            continue
        if isize != size:
            r.add(MISMATCH, "index entry says %s bytes, the record counts %d" % (isize, size),
                  seq)
        if seq <= last:
            held += 1
    if below:
        r.add(BELOW_FIRST, "%d records below first_seq %d: purged, not yet collected (the "
              "server removes them)" % (below, floor), damage=False)
    return held


def _check_index(r, sc, floor):
    for seq in sorted(sc.index):
        if seq in sc.records or seq in sc.damaged or seq < floor:
            continue
        subj = sc.index[seq][0].decode(errors="replace")
        gap = _in_gap(sc, seq)
        if gap is not None:
            r.add(DAMAGED, "record in keys LevelDB cannot list (%s)" % gap[3], seq, file=gap[4])
        else:
            r.add(MISSING, "index entry (subject %r) without its record" % subj, seq)
    for seq in sorted(sc.index_bad):
        if seq not in sc.records and seq not in sc.damaged and seq >= floor:
            r.add(MISSING, "index entry unreadable and no record: %s" % sc.index_bad[seq], seq)
    for seq, subj in sc.index_extra:
        r.add(MISMATCH, "a second index entry, under subject %r"
              % subj.decode(errors="replace"), seq)


def _check_hwm(r, sc, hw, exists, gen, held, b, done, listed):
    if hw is None:
        if exists:
            r.add(HWM, "%s cannot be read (both slots damaged)" % HWM_NAME)
        else:
            r.add(HWM, "no %s (a store written before natsbroker kept one)" % HWM_NAME, damage=False)
        return
    hfirst, hlast, _, hmsgs, hbytes, floors = hw
    r.hwm = {"first_seq": hfirst, "last_seq": hlast, "msgs": hmsgs, "bytes": hbytes,
             "generation": gen, "floors": len(floors)}
    if hlast > b.db_last:
        r.add(LOST_TAIL, "the high-water mark's last_seq is %d, the database's %d: acked "
              "message(s) lost (torn log); the server keeps last_seq at %d"
              % (hlast, b.db_last, hlast), b.db_last + 1, last=hlast)
    elif hlast < b.db_last:
        r.add(HWM, "the high-water mark's last_seq %d is behind the database's %d (it has "
              "no sync of its own)" % (hlast, b.db_last), damage=False)
    if hmsgs > held:
        if done is not None:
            r.hwm["explained"] = True
            r.add(HWM, "%d acked message(s) were lost before the repair of %s (%s); the "
                  "server updates the high-water mark" % (hmsgs - held, done.get("time"),
                                                          ranges_text(done.get("lost", []))),
                  damage=False)
        elif hmsgs - held > listed:
            # Lost messages no finding names (their sequences are unknown).
            r.add(HWM, "the high-water mark counts %d messages, the database holds %d: %d "
                  "acked message(s) lost, %d of them not listed above"
                  % (hmsgs, held, hmsgs - held, hmsgs - held - listed))
    if sc.state is not None and hfirst > sc.state[0]:
        r.add(HWM, "the high-water mark's first_seq %d is above the state record's %d "
              "(removals lost: the server drops what is below)" % (hfirst, sc.state[0]),
              damage=False)


def _check_meta(r, sc, pinned, pinned_exists):
    for k, why in sorted(sc.meta_bad.items()):
        r.add(META, "meta record %r unreadable: %s" % (k.decode(errors="replace"), why))
    # The server puts pinned records back on open when NATSBROKER-META is of a
    # later generation than the database (LevelDBStream._load).
    restores = pinned is not None and pinned[0] > (sc.gen or 0)
    if META_CONFIG not in sc.meta and META_CONFIG not in sc.meta_bad:
        if restores and META_CONFIG in pinned[1]:
            r.add(META, "no stream config record; %s has it: the server puts it back"
                  % META_NAME, damage=False)
        else:
            r.add(META, "no stream config record (the server quarantines the stream)")
    for k, v in sorted(sc.meta.items()):
        if k == META_CONFIG or k.endswith((b"." + CONSUMER_CONFIG, b"." + CONSUMER_STATE)):
            try:
                ok = isinstance(json.loads(v), dict)
            except ValueError:
                ok = False
            if not ok:
                r.add(META, "meta record %r is not a JSON object" % k.decode(errors="replace"))
        elif k.endswith(META_CREATED) and not v.strip().isdigit():
            r.add(META, "meta record %r is not a number" % k.decode(errors="replace"))
    if pinned is None:
        if pinned_exists:
            r.add(PINNED, "%s cannot be read (damaged)" % META_NAME)
        return
    pgen, recs = pinned
    for k, v in sorted(recs.items()):
        have = sc.meta.get(k)
        if have == v:
            continue
        name = k.decode(errors="replace")
        if restores:
            r.add(PINNED, "record %r %s the database; %s (generation %d > %d) has it: the "
                  "server puts it back" % (name, "differs in" if have is not None else
                                           "is missing from", META_NAME, pgen, sc.gen or 0),
                  damage=False)
        elif have is None:
            r.add(PINNED, "record %r is missing from the database; %s has it"
                  % (name, META_NAME))
        else:
            r.add(PINNED, "record %r differs from %s's copy" % (name, META_NAME), damage=False)
    if restores:
        for k in sorted(k for k in sc.meta if pinned_meta(k) and k not in recs):
            r.add(PINNED, "record %r was deleted since (%s, generation %d > %d, lacks it): "
                  "the server removes it" % (k.decode(errors="replace"), META_NAME, pgen,
                                             sc.gen or 0), damage=False)


# -- verify ---------------------------------------------------------------------------


def _side(path):
    hw, hexists, hgen = _read_hwm(path)
    mp = os.path.join(path, META_NAME)
    return dict(hwm=hw, hwm_exists=hexists, hwm_gen=hgen, pinned=PinnedMeta(mp).read(),
                pinned_exists=os.path.exists(mp), repairs=read_repairs(path))


def examine(db, sd, path=None):
    """The :class:`StreamReport` of the open database ``db`` of stream ``sd``
    (``path``: where ``db`` is, when it is a copy)."""
    side = _side(sd.path)
    return analyse(_scan(db, path or sd.path, side), sd.name, sd.path, **side)


def _scan(db, path, side):
    hw, pinned = side["hwm"], side["pinned"]
    keys = set(pinned[1]) if pinned is not None else set()
    # each consumer whose config is pinned has a state record too
    keys |= {k[:-len(CONSUMER_CONFIG)] + CONSUMER_STATE for k in keys if k.startswith(CONSUMER_PREFIX)
             and k.endswith(b"." + CONSUMER_CONFIG)}
    return scan_db(db, path, upper=hw[1] if hw is not None else 0,
                   meta_keys=sorted(keys | {META_CONFIG, META_CREATED}))


def verify_stream(sd, workdir=None, examine_copy=True):
    """Verify one stream (:class:`StreamDir`). A database LevelDB cannot open is
    reported as such and (``examine_copy``) examined in a temporary copy (in
    ``workdir``, default the store's jetstream directory) that LevelDB's
    repair makes openable."""
    if not os.listdir(sd.path):
        r = StreamReport(sd.name, sd.path, examined="nothing")
        r.add(EMPTY, "empty directory: no database yet (the server creates one)", damage=False)
        return r
    try:
        db = open_db(sd.path)
    except StoreInUse:
        raise
    except Exception as e:
        if not examine_copy:
            r = StreamReport(sd.name, sd.path, examined="nothing")
            r.add(UNOPENABLE, _open_failure(e))
            return r
        return _verify_copy(sd, _open_failure(e), workdir)
    try:
        return examine(db, sd)
    finally:
        db.close()


def _open_failure(e):
    if isinstance(e, plyvel.Error):
        return "LevelDB cannot open it: %s" % _leveldb_message(e)
    return str(e)


def _verify_copy(sd, why, workdir):
    base = workdir or sd.jetstream or os.path.dirname(sd.path)
    tmp = tempfile.mkdtemp(prefix=".natsbroker-verify-", dir=base)
    try:
        copy = os.path.join(tmp, sd.name)
        private.make_dir(copy)
        with held_lock(sd.path):
            # LevelDB's files only (all at the top): what its repair reads.
            for n in db_files(sd.path):
                shutil.copy2(os.path.join(sd.path, n), copy)
        plyvel.repair_db(copy)
        try:
            db = _open_lenient(copy)  # as repair reads it
        except Exception as e:
            r = StreamReport(sd.name, sd.path, examined="nothing")
            r.add(UNOPENABLE, why)
            r.add(UNOPENABLE, "not even after LevelDB's repair (in a copy): %s"
                  % _open_failure(e))
            return r
        try:
            r = examine(db, sd, copy)
        finally:
            db.close()
        r.examined = "a copy repaired by LevelDB's repair (what natsbroker-admin repair keeps)"
        r.findings.insert(0, Finding(UNOPENABLE, why + "; run natsbroker-admin repair"))
        r.counts[UNOPENABLE] = 1
        return r
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- repair ---------------------------------------------------------------------------


@attrs.define
class RepairReport:
    name: str
    path: str
    copy: str | None = None  # the pre-repair copy (kept)
    done: bool = False  # False: nothing to repair, or it failed
    failed: str | None = None
    kept: int = 0
    left_out: list = attrs.Factory(list)  # [[first, last], ...] of damaged records left out
    lost: list = attrs.Factory(list)
    lost_count: int = 0
    restored_meta: list = attrs.Factory(list)
    first_seq: int = 0
    last_seq: int = 0
    before: StreamReport | None = None
    after: StreamReport | None = None
    notes: list = attrs.Factory(list)

    @property
    def ok(self):
        return self.failed is None and (self.after is None or self.after.ok)

    def lines(self):
        p = "stream %s: " % self.name
        if not self.done and self.failed is None:
            return [p + "verifies, nothing to repair (%s)" % self.path]
        out = [p + "repairing %s" % self.path]
        if self.copy:
            out.append(p + "the files as they were are kept in %s (a full copy, fsynced)"
                       % self.copy)
        if self.before is not None:
            out += [p + "found: " + f.line() for f in _grouped(self.before.findings)]
        if self.failed is not None:
            return out + [p + "repair failed: %s" % self.failed]
        out += [p + n for n in self.notes]
        out.append(p + "kept %d records that verify; rebuilt the index from them" % self.kept)
        if self.left_out:
            out.append(p + "left out damaged records: %s" % ranges_text(self.left_out))
        if self.restored_meta:
            out.append(p + "config records as %s has them: %s (- deleted since)"
                       % (META_NAME, ", ".join(self.restored_meta)))
        out.append(p + "lost sequences: %s" % (
            "%s (%d message(s))" % (ranges_text(self.lost), self.lost_count)
            if self.lost_count else "none"))
        out.append(p + "state first_seq %d, last_seq %d (never lower than before: no "
                   "sequence is reused)" % (self.first_seq, self.last_seq))
        if self.after is not None:
            out.append(p + ("verifies: OK" if self.after.ok else
                            "still damaged after repair:"))
            if not self.after.ok:
                out += ["  " + x for x in self.after.lines()]
        parent = os.path.dirname(self.path)
        if os.path.basename(parent) == "quarantine":
            out.append(p + "to serve it, with the server stopped: mv %s %s" % (
                self.path, os.path.join(os.path.dirname(parent), "streams", self.name)))
        return out

    def as_json(self):
        return {"name": self.name, "path": self.path, "copy": self.copy, "repaired": self.done,
                "failed": self.failed, "kept": self.kept, "left_out": self.left_out,
                "lost": self.lost, "lost_count": self.lost_count,
                "restored_meta": self.restored_meta, "first_seq": self.first_seq,
                "last_seq": self.last_seq, "ok": self.ok,
                "before": self.before.as_json() if self.before else None,
                "after": self.after.as_json() if self.after else None}


def _fsync(path, directory=False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_synced(src, dst):
    shutil.copy2(src, dst)
    _fsync(dst)
    return dst


def copy_tree_synced(src, dst):
    """A full copy of ``src`` at ``dst`` (which must not exist), every file and
    directory fsynced; written as ``dst.partial`` and renamed once complete."""
    part = dst + ".partial"
    shutil.rmtree(part, ignore_errors=True)
    shutil.copytree(src, part, copy_function=_copy_synced)
    for root, _, _ in os.walk(part):
        _fsync(root, True)
    os.rename(part, dst)
    _fsync(os.path.dirname(dst), True)
    return dst


def _unique(base):
    dest, n = base, 1
    while os.path.exists(dest) or os.path.exists(dest + ".partial"):
        n += 1
        dest = "%s.%d" % (base, n)
    return dest


def _aside_dir(sd):
    """Where copies of ``sd`` go: the store's quarantine directory, else next to it."""
    if sd.jetstream:
        q = os.path.join(sd.jetstream, "quarantine")
        private.make_dirs(q)
        return q
    return os.path.dirname(sd.path)


def repair_stream(sd, now=None):
    """Repair one stream (:class:`StreamDir`); see the module's docstring.
    Raises :class:`StoreInUse`; any other failure is in the report (the
    pre-repair copy is kept whatever happens)."""
    stamp = time.strftime(TIME_FORMAT, time.gmtime(now))
    rep = RepairReport(sd.name, sd.path)
    aside = _aside_dir(sd)
    with held_lock(sd.path, create=True):
        rep.copy = copy_tree_synced(sd.path, _unique(os.path.join(
            aside, "%s-%s-before-repair" % (sd.name, stamp))))
    rep.before = verify_stream(sd, examine_copy=False)
    if rep.before.ok:
        # Nothing to do: the copy just made is the same files (LevelDB's open
        # may have moved its log into a table: same records).
        shutil.rmtree(rep.copy)
        rep.copy = None
        return rep
    rep.done = True
    work = _unique(os.path.join(sd.jetstream or os.path.dirname(sd.path),
                                ".repair-%s-%s" % (sd.name, stamp)))
    try:
        with held_lock(sd.path):
            plyvel.repair_db(sd.path)
        _rebuild(sd, work, rep)
        _swap(sd.path, work)
    except StoreInUse:
        raise
    except Exception as e:
        rep.failed = "%s: %s" % (type(e).__name__, _open_failure(e))
        return rep
    finally:
        # A new database that did not take the old one's place is only ours.
        shutil.rmtree(work, ignore_errors=True)
    rep.after = verify_stream(sd)
    return rep


def _rebuild(sd, work, rep):
    """Write in ``work`` a new database with what verifies in ``sd``'s (after
    LevelDB's repair), then copy the side files there."""
    src = _open_lenient(sd.path)
    try:
        side = _side(sd.path)
        sc = _scan(src, sd.path, side)
        found = analyse(sc, sd.name, sd.path, **side)
        # 0700 as every stream's directory (it takes the stream's place):
        # LevelDB would create it 0755.
        private.make_dir(work)
        dst = LevelDBStore._open_db(work, create=True)
        try:
            _write_records(src, dst, sc)
            b = _bounds(sc, side["hwm"])
            gen = _write_meta(dst, sc, side["pinned"], rep)
            if not sc.no_crc:
                dst.put(FORMAT_KEY, FORMAT_CRC)
            if gen is not None:
                dst.put(META_GEN_KEY, U64.pack(gen))
            # Last, synced: LevelDB's log then holds every write above.
            dst.put(STATE_KEY, STATE_RECORD.pack(b.first, b.last, b.last_ts), sync=True)
        finally:
            dst.close()
    finally:
        src.close()
    rep.kept = len(sc.records)
    kept = sorted(sc.records)
    held = len(kept) - bisect_left(kept, b.first)  # what the server will count
    # Lost: what this scan or the one before LevelDB's repair says existed,
    # less what is kept; at least what the high-water mark counted above that.
    rep.lost = _subtract(_merge(found.lost + (rep.before.lost if rep.before else [])), kept)
    hw = side["hwm"]
    rep.lost_count = max(sum(z - a + 1 for a, z in rep.lost), hw[3] - held if hw else 0)
    rep.left_out = seq_ranges(sc.damaged)
    rep.first_seq, rep.last_seq = b.first, b.last
    _write_side(sd.path, work, side, b, sc, rep, held)


def _subtract(ranges, kept):
    """``ranges`` less the sorted sequences ``kept``."""
    out = []
    for a, z in ranges:
        i = bisect_left(kept, a)
        while i < len(kept) and kept[i] <= z:
            if kept[i] > a:
                out.append([a, kept[i] - 1])
            a = kept[i] + 1
            i += 1
        if a <= z:
            out.append([a, z])
    return out


def _open_lenient(path):
    """The database after LevelDB's repair, opened to read all it can: without
    paranoid checks a table whose index block fails its checksum still opens
    (LevelDB's repair keeps such tables), while every data block read is still
    checksummed and every record checked by its own checksum. (Its logs are
    gone into tables: the open recovers nothing it could drop.) The server's
    options otherwise (LevelDBStore._open_db)."""
    with held_lock(path):
        pass
    return plyvel.DB(path, paranoid_checks=False, max_open_files=128, bloom_filter_bits=10)


def _records(src, sc):
    """``(key, value)`` of every record the scan verified: walked, and those
    only point reads found (in key ranges the walk cannot list) read one by one."""
    seen = set()
    for kind, k, v in walk(src, b"d", b"e"):
        if kind is OK and len(k) == 9 and U64.unpack_from(k, 1)[0] in sc.records:
            seen.add(U64.unpack_from(k, 1)[0])
            yield k, v
    for seq in sorted(set(sc.records) - seen):
        k = b"d" + U64.pack(seq)
        v, _ = _get(src, k)
        yield k, v if v is not None else b""


def _write_records(src, dst, sc):
    """Every record that verified (read and verified again), and its index entry."""
    wb = dst.write_batch()
    n = 0
    for k, v in _records(src, sc):
        seq = U64.unpack_from(k, 1)[0]
        try:
            off, a, b, _ = verify_record(seq, v, sc.strict)
        except RecordDamaged:
            sc.records.pop(seq)  # changed since the scan: not kept
            sc.damaged.setdefault(seq, ("failed verification on a second read", None))
            continue
        subj = v[off:a]
        mv = memoryview(v)
        wb.put(k, v)
        wb.put(b"s" + U32.pack(len(subj)) + subj + k[1:],
               U32.pack(file_msg_size(subj, mv[a:b], mv[b:])))
        n += len(v) + 2 * len(subj) + 30
        if n >= BATCH_BYTES:
            wb.write()
            wb = dst.write_batch()
            n = 0
    wb.write()


def _write_meta(dst, sc, pinned, rep):
    """The meta records that read, with the pinned ones (configs) as
    NATSBROKER-META has them when it is of a later generation than the
    database (what the server does on open: missing ones put back, ones
    deleted since removed), or, at the same generation, the ones the database
    lost or holds as invalid JSON put back. Returns the meta generation to
    store: the server then finds nothing to put back (and no damage to report)."""
    meta = dict(sc.meta)
    gen = sc.gen
    if pinned is not None:
        pgen, recs = pinned
        newer = pgen > (sc.gen or 0)
        if newer or pgen == sc.gen:
            for k, v in sorted(recs.items()):
                have = meta.get(k)
                if have is None or (newer and have != v) or (
                        k.endswith(META_CONFIG) and not _json_object(have)):
                    meta[k] = v
                    rep.restored_meta.append(k.decode(errors="replace"))
        if newer:
            for k in sorted(k for k in meta if pinned_meta(k) and k not in recs):
                del meta[k]
                rep.restored_meta.append("-" + k.decode(errors="replace"))
            gen = pgen
    wb = dst.write_batch()
    for k, v in meta.items():
        wb.put(b"m" + k, v)
    wb.write()
    return gen


def _json_object(v):
    try:
        return isinstance(json.loads(v), dict)
    except ValueError:
        return False


def _write_side(path, work, side, b, sc, rep, held):
    """Copy NATSBROKER-HWM and NATSBROKER-META into the new database's directory
    (rewritten from the database only when they cannot be read), and append
    this repair to NATSBROKER-REPAIRS."""
    for n in (HWM_NAME, META_NAME, REPAIRS_NAME):
        p = os.path.join(path, n)
        if os.path.exists(p):
            _copy_synced(p, os.path.join(work, n))
    hw = side["hwm"]
    if hw is None and side["hwm_exists"]:
        nbytes = sum(sc.records[s][1] for s in sc.records if b.first <= s <= b.last)
        h = HighWater(os.path.join(work, HWM_NAME))
        h.write(b.first, b.last, b.last_ts, held, nbytes, {})
        h.close()
        rep.notes.append("%s could not be read: rewritten from the repaired database "
                         "(consumer floors in it are lost)" % HWM_NAME)
        hw = h.read()
        side["hwm_gen"] = h.gen
    if side["pinned"] is None and side["pinned_exists"]:
        recs = {k: v for k, v in sc.meta.items() if pinned_meta(k)}
        PinnedMeta(os.path.join(work, META_NAME)).write(sc.gen or 0, recs, True)
        rep.notes.append("%s could not be read: rewritten from the database" % META_NAME)
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "tool": "natsbroker-admin repair", "copy": rep.copy, "kept": rep.kept,
             "msgs": held, "left_out": rep.left_out, "lost": rep.lost,
             "lost_count": rep.lost_count, "first_seq": b.first, "last_seq": b.last,
             "restored_meta": rep.restored_meta,
             "hwm": [side["hwm_gen"], hw[1], hw[3]] if hw is not None else None}
    fd = private.open_file(os.path.join(work, REPAIRS_NAME), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with os.fdopen(fd, "a") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())
    for n in os.listdir(work):
        p = os.path.join(work, n)
        if os.path.isfile(p):
            _fsync(p)
    _fsync(work, True)


def _swap(path, work):
    """Put the new database ``work`` in place of ``path``. The old directory (as
    LevelDB's repair left it; the pre-repair copy holds the original) is removed."""
    old = work + ".replaced"
    os.rename(path, old)
    try:
        os.rename(work, path)
    except OSError:
        os.rename(old, path)
        raise
    _fsync(os.path.dirname(path), True)
    if os.path.dirname(old) != os.path.dirname(path):
        _fsync(os.path.dirname(old), True)
    shutil.rmtree(old)
