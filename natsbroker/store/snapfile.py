"""The bytes inside a natsbroker stream snapshot (what ``$JS.API.STREAM.SNAPSHOT``
sends in its chunks and ``$JS.API.STREAM.RESTORE`` takes back), shared by the
server (:mod:`natsbroker.jetstream.snapshot`) and ``natsbroker-admin``. Standard
library only, so the admin tool can check a backup without the server's code.

::

    "NBSNAP01"                                   magic
    record*                                      kind (1) | length (4) | body | crc32 (4)

    S  JSON: format, stream, config, created, state (first/last seq, last_ts)
    M  message: seq (8) | ts (8, ns) | len(subject) (4) | len(hdr) (4) | subject | hdr | data
    C  JSON: one durable consumer: name, created, config, state
    E  JSON: last_seq, last_ts, messages, bytes, consumers (what was written)
    Z  SHA-256 of every byte before this record

Integers are big-endian. A record's CRC-32 covers its kind, length and body, so
a damaged chunk is found where it is; the closing digest catches anything else
(a lost, repeated or reordered chunk). Messages come in sequence order; the
gaps between them are the stream's deleted sequences.
"""

import collections
import hashlib
import json
import struct
import zlib

MAGIC = b"NBSNAP01"
FORMAT_VERSION = 1
_FRAME = struct.Struct(">cI")
_CRC = struct.Struct(">I")
_MSG = struct.Struct(">QqII")  # seq, ts, len(subject), len(hdr)
MAX_RECORD = 256 * 1024 * 1024


class SnapshotError(Exception):
    """A snapshot's bytes are not a valid snapshot (the text says why)."""


class Writer:
    """Frames records and keeps the running digest."""

    def __init__(self):
        self._sha = hashlib.sha256()
        self.size = 0

    def _out(self, b):
        self._sha.update(b)
        self.size += len(b)
        return b

    def magic(self):
        return self._out(MAGIC)

    def record(self, kind, body):
        head = _FRAME.pack(kind, len(body))
        crc = zlib.crc32(body, zlib.crc32(head))
        return self._out(head + body + _CRC.pack(crc))

    def json(self, kind, obj):
        return self.record(kind, json.dumps(obj, separators=(",", ":")).encode())

    def message(self, msg):
        return self.record(b"M", _MSG.pack(msg.seq, msg.ts, len(msg.subject), len(msg.hdr))
                           + msg.subject + msg.hdr + msg.data)

    def close(self):
        """The closing ``Z`` record (not part of the digest it carries)."""
        body = self._sha.digest()
        head = _FRAME.pack(b"Z", len(body))
        return head + body + _CRC.pack(zlib.crc32(body, zlib.crc32(head)))


# One stored message read back from a snapshot.
Message = collections.namedtuple("Message", "seq ts subject hdr data")


class Reader:
    """Parses a snapshot fed in arbitrary pieces and checks it as it goes:
    framing, CRCs, record order, ascending sequences, the closing digest and
    the ``E`` record's counts.

    ``on_record(kind, value)`` gets ``("S", dict)``, ``("M", Message)``,
    ``("C", dict)``, ``("E", dict)`` in order; it may raise SnapshotError.
    :meth:`finish` checks that the snapshot was complete."""

    def __init__(self, on_record=None):
        self.on_record = on_record
        self._buf = bytearray()
        self._sha = hashlib.sha256()
        self._magic = False
        self._state = "S"  # the record expected next: S, M (or C/E), C (or E), Z, done
        self.header = None
        self.end = None
        self.messages = 0
        self.consumers = 0
        self.bytes = 0
        self.last_seq = 0
        self.done = False
        self._consumed = 0  # bytes parsed and dropped from the buffer (after the magic)

    def feed(self, data):
        if not data:
            return
        if self.done:
            raise SnapshotError("data after the end of the snapshot")
        buf = self._buf
        buf += data
        if not self._magic:
            if len(buf) < len(MAGIC):
                if not MAGIC.startswith(bytes(buf)):
                    raise SnapshotError(_not_ours(buf))
                return
            if buf[:len(MAGIC)] != MAGIC:
                raise SnapshotError(_not_ours(buf))
            self._sha.update(MAGIC)
            del buf[:len(MAGIC)]
            self._magic = True
        pos = 0
        n = len(buf)
        while n - pos >= _FRAME.size:
            kind, length = _FRAME.unpack_from(buf, pos)
            if kind not in b"SMCEZ" or length > MAX_RECORD:
                raise SnapshotError("snapshot corrupt: bad record header at byte %d"
                                    % (self._offset(pos)))
            end = pos + _FRAME.size + length + _CRC.size
            if end > n:
                break
            body_end = end - _CRC.size
            crc = zlib.crc32(memoryview(buf)[pos:body_end])
            if crc != _CRC.unpack_from(buf, body_end)[0]:
                raise SnapshotError("snapshot corrupt: checksum mismatch in record at byte %d"
                                    % self._offset(pos))
            body = bytes(buf[pos + _FRAME.size:body_end])
            if kind == b"Z":
                if self._state != "Z":
                    raise SnapshotError("snapshot corrupt: digest record out of place")
                if body != self._sha.digest():
                    raise SnapshotError("snapshot corrupt: SHA-256 digest mismatch")
                self._state = "done"
                self.done = True
                if end != n:
                    raise SnapshotError("data after the end of the snapshot")
                pos = end
                break
            self._sha.update(memoryview(buf)[pos:end])
            self._record(kind, body)
            pos = end
        self._consumed += pos
        del buf[:pos]

    def _offset(self, pos):
        return len(MAGIC) + self._consumed + pos

    def _record(self, kind, body):
        st = self._state
        if kind == b"S":
            if st != "S":
                raise SnapshotError("snapshot corrupt: stream header out of place")
            value = _json(body, "stream header")
            if value.get("format") != FORMAT_VERSION:
                raise SnapshotError("unsupported snapshot format %r" % (value.get("format"),))
            self.header = value
            self._state = "M"
        elif kind == b"M":
            if st != "M":
                raise SnapshotError("snapshot corrupt: message record out of place")
            if len(body) < _MSG.size:
                raise SnapshotError("snapshot corrupt: short message record")
            seq, ts, ls, lh = _MSG.unpack_from(body)
            if _MSG.size + ls + lh > len(body):
                raise SnapshotError("snapshot corrupt: bad message record")
            if seq <= self.last_seq:
                raise SnapshotError("snapshot corrupt: message sequences out of order")
            a = _MSG.size + ls
            value = Message(seq, ts, body[_MSG.size:a], body[a:a + lh], body[a + lh:])
            self.last_seq = seq
            self.messages += 1
            self.bytes += len(value.subject) + len(value.hdr) + len(value.data)
        elif kind == b"C":
            if st not in ("M", "C"):
                raise SnapshotError("snapshot corrupt: consumer record out of place")
            value = _json(body, "consumer")
            self.consumers += 1
            self._state = "C"
        elif kind == b"E":
            if st not in ("M", "C"):
                raise SnapshotError("snapshot corrupt: end record out of place")
            value = _json(body, "end record")
            if (value.get("messages") != self.messages or value.get("consumers") != self.consumers
                    or value.get("last_seq", 0) < self.last_seq):
                raise SnapshotError("snapshot corrupt: end record does not match its contents")
            self.end = value
            self._state = "Z"
        else:  # pragma: no cover - filtered above
            raise SnapshotError("snapshot corrupt")
        if self.on_record is not None:
            self.on_record(kind.decode(), value)

    def finish(self):
        if not self._magic and not self._buf:
            raise SnapshotError("empty snapshot")
        if not self.done:
            raise SnapshotError("snapshot truncated: it ends before its digest")


def _not_ours(buf):
    if bytes(buf[:4]) == b"\xff\x06\x00\x00" or bytes(buf[:6]) == b"\xff\x06\x00\x00sN":
        return "not a natsbroker snapshot (an s2 stream: nats-server's format?)"
    return "not a natsbroker snapshot"


def _json(body, what):
    try:
        value = json.loads(body)
    except ValueError:
        raise SnapshotError("snapshot corrupt: bad %s" % what) from None
    if not isinstance(value, dict):
        raise SnapshotError("snapshot corrupt: bad %s" % what)
    return value
