"""The stream database's keys and its message record codec, verified on read.

Layout and record format: see :mod:`natsbroker.store.leveldb`. Also LevelDB's
own diagnostics (which file holds a key, the text of a plyvel error) and a
descending range read, which the stream and natsbroker-admin share.
"""

import os
import struct
import zlib

from natsbroker.store.base import StoredMsg

U64 = struct.Struct(">Q")
U32 = struct.Struct(">I")
_REC = struct.Struct(">QII")  # ts, len(subject), len(hdr): a record without a checksum
_REC2 = struct.Struct(">QIII")  # ts, len(subject) | CRC_FLAG, len(hdr), crc32
_SEED = struct.Struct(">QQII")  # seq, ts, len(subject), len(hdr): the checksum's seed
CRC_FLAG = 0x80000000  # in the subject length: the record carries a checksum
FORMAT_KEY = b"F"  # -> format byte; b"\x02": every record must carry a checksum
FORMAT_CRC = b"\x02"
STATE_RECORD = struct.Struct(">QQQ")  # first_seq, last_seq, last_ts
STATE_KEY = b"S"
META_GEN_KEY = b"G"  # -> Q(generation of the pinned meta the database holds)

_tuple_new = tuple.__new__


def data_key(seq):
    return b"d" + U64.pack(seq)


def index_prefix(subject):
    return b"s" + U32.pack(len(subject)) + subject


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
        if crc != U32.unpack_from(v, 16)[0]:
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


def descending(db, start, stop, include_value=True, verify=False):
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
