"""NRG's binary messages, as nats-server's raft.go writes and reads them.

Sans-IO: bytes in, records out, and back. Every integer is little-endian;
a peer is named by an 8-character id (:func:`peer_id`). The layouts:

* AppendEntry (``$NRG.AE.<group>``, and ``$NRG.CR.<inbox>`` on catch-up):
  leader id, term, commit, pterm, pindex, entry count (u16), then per entry
  ``u32 len`` (1 + data), ``u8 type``, data; then a uvarint ``lterm`` (the
  leader's term, which nats-server always appends and older decoders ignore).
  No entries: a heartbeat.
* AppendEntryResponse: term, index, peer id, success (25 bytes).
* VoteRequest (``$NRG.V.<group>``): term, last term, last index, candidate (32).
* VoteResponse: term, peer id, flags (bit 0 granted, bit 1 the voter's log is
  empty) (17).
* PeerState (an EntryPeerState's data, and ``peers.idx``): cluster size and
  peer count (u32 each), the ids, and an optional u16 extension state.

Decoders refuse what nats-server's refuse (:class:`WireError`), and accept
what they accept: a trailing byte after an AppendEntry's entries that is no
complete uvarint is ignored, as Go's ``binary.Uvarint`` returning 0 is.
"""

import enum
import hashlib
import struct

import attrs

ID_LEN = 8
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

_AE_HEAD = struct.Struct("<8sQQQQH")
_ENTRY_HEAD = struct.Struct("<IB")
_AE_RESPONSE = struct.Struct("<QQ8sB")
_VOTE_REQUEST = struct.Struct("<QQQ8s")
_VOTE_RESPONSE = struct.Struct("<Q8sB")
_PEER_HEAD = struct.Struct("<II")
_U16 = struct.Struct("<H")

AE_BASE_LEN = _AE_HEAD.size  # 42
MAX_ENTRIES = 0xFFFF
MAX_ENTRY_DATA = 0x7FFFFFFF - 1  # nats-server: len(data) <= MaxInt32 (then 1 + len fits)


class WireError(ValueError):
    """Bytes nats-server's decoder would refuse."""


class EntryType(enum.IntEnum):
    """raft.go's EntryType. ``CATCHUP`` is internal to a server: never sent."""

    NORMAL = 0
    OLD_SNAPSHOT = 1
    PEER_STATE = 2
    ADD_PEER = 3
    REMOVE_PEER = 4
    LEADER_TRANSFER = 5
    SNAPSHOT = 6
    CATCHUP = 7


class ExtState(enum.IntEnum):
    """PeerState's domain extension state (raft.go extensionState)."""

    UNKNOWN = 0
    EXTENDED = 1
    NOT_EXTENDED = 2


def peer_id(server_name):
    """nats-server's getHash: the 8-character id a server has in every group
    (SHA-256 of its name, each of the first 8 bytes as a base-62 digit)."""
    digest = hashlib.sha256(server_name.encode("utf-8")).digest()
    return "".join(_BASE62[b % 62] for b in digest[:ID_LEN])


def _id_bytes(peer, allow_empty=False):
    raw = peer.encode("ascii") if isinstance(peer, str) else bytes(peer)
    if allow_empty and not raw:
        return b"\0" * ID_LEN
    if len(raw) != ID_LEN:
        raise WireError("a peer id is %d bytes, not %d" % (ID_LEN, len(raw)))
    return raw


def _id_text(raw, empty_ok=False):
    if empty_ok and raw == b"\0" * ID_LEN:
        return ""
    return raw.decode("latin-1")


def put_uvarint(n):
    """Go's binary.PutUvarint."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def uvarint(buf, pos=0):
    """Go's binary.Uvarint: ``(value, bytes read)``; ``(0, 0)`` when ``buf``
    ends first, ``(0, -n)`` on a 64-bit overflow."""
    x = shift = 0
    for i, b in enumerate(memoryview(buf)[pos:pos + 10]):
        if i == 9 and b > 1:
            return 0, -(i + 1)
        if b < 0x80:
            return x | b << shift, i + 1
        x |= (b & 0x7F) << shift
        shift += 7
    return 0, 0


@attrs.define
class Entry:
    type: EntryType
    data: bytes = b""


@attrs.define
class AppendEntry:
    leader: str  # "" when unset (encoded as zero bytes)
    term: int
    commit: int
    pterm: int
    pindex: int
    entries: list = attrs.field(factory=list)
    lterm: int = 0

    @property
    def heartbeat(self):
        return not self.entries

    def encode(self):
        if len(self.entries) > MAX_ENTRIES:
            raise WireError("too many entries")
        parts = [_AE_HEAD.pack(_id_bytes(self.leader, allow_empty=True), self.term, self.commit,
                               self.pterm, self.pindex, len(self.entries))]
        for e in self.entries:
            if len(e.data) > MAX_ENTRY_DATA:
                raise WireError("entry too large")
            parts.append(_ENTRY_HEAD.pack(1 + len(e.data), int(e.type)))
            parts.append(bytes(e.data))
        parts.append(put_uvarint(self.lterm))
        return b"".join(parts)

    @classmethod
    def decode(cls, msg):
        if len(msg) < AE_BASE_LEN:
            raise WireError("append entry shorter than %d bytes" % AE_BASE_LEN)
        leader, term, commit, pterm, pindex, n = _AE_HEAD.unpack_from(msg, 0)
        entries, pos, end = [], AE_BASE_LEN, len(msg)
        for _ in range(n):
            if end - pos < 4:
                raise WireError("append entry: an entry's length is cut off")
            size = struct.unpack_from("<I", msg, pos)[0]
            pos += 4
            if size == 0 or pos + size > end:
                raise WireError("append entry: an entry runs past the end")
            kind = msg[pos]
            # (an unknown type is kept as its number: nats-server does not check it here)
            entries.append(Entry(EntryType(kind) if kind in _TYPES else kind, bytes(msg[pos + 1:pos + size])))
            pos += size
        lterm = 0
        if pos < end:
            value, used = uvarint(msg, pos)
            if used > 0:
                lterm = value
        return cls(_id_text(leader, empty_ok=True), term, commit, pterm, pindex, entries, lterm)


_TYPES = {int(t) for t in EntryType}


@attrs.define
class AppendEntryResponse:
    term: int
    index: int
    peer: str
    success: bool

    def encode(self):
        return _AE_RESPONSE.pack(self.term, self.index, _id_bytes(self.peer), 1 if self.success else 0)

    @classmethod
    def decode(cls, msg):
        if len(msg) != _AE_RESPONSE.size:
            raise WireError("append entry response is %d bytes, not %d" % (len(msg), _AE_RESPONSE.size))
        term, index, peer, ok = _AE_RESPONSE.unpack(msg)
        return cls(term, index, _id_text(peer), ok == 1)


@attrs.define
class VoteRequest:
    term: int
    last_term: int
    last_index: int
    candidate: str

    def encode(self):
        return _VOTE_REQUEST.pack(self.term, self.last_term, self.last_index, _id_bytes(self.candidate))

    @classmethod
    def decode(cls, msg):
        if len(msg) != _VOTE_REQUEST.size:
            raise WireError("vote request is %d bytes, not %d" % (len(msg), _VOTE_REQUEST.size))
        term, last_term, last_index, candidate = _VOTE_REQUEST.unpack(msg)
        return cls(term, last_term, last_index, _id_text(candidate))


@attrs.define
class VoteResponse:
    term: int
    peer: str
    granted: bool
    empty: bool = False  # the voter's log is empty

    def encode(self):
        return _VOTE_RESPONSE.pack(self.term, _id_bytes(self.peer),
                                   (1 if self.granted else 0) | (2 if self.empty else 0))

    @classmethod
    def decode(cls, msg):
        if len(msg) != _VOTE_RESPONSE.size:
            raise WireError("vote response is %d bytes, not %d" % (len(msg), _VOTE_RESPONSE.size))
        term, peer, flags = _VOTE_RESPONSE.unpack(msg)
        return cls(term, _id_text(peer), bool(flags & 1), bool(flags & 2))


@attrs.define
class PeerState:
    cluster_size: int
    peers: list = attrs.field(factory=list)
    ext: int = ExtState.UNKNOWN

    def encode(self):
        return (_PEER_HEAD.pack(self.cluster_size, len(self.peers))
                + b"".join(_id_bytes(p) for p in self.peers) + _U16.pack(int(self.ext)))

    @classmethod
    def decode(cls, buf):
        if len(buf) < _PEER_HEAD.size:
            raise WireError("peer state shorter than 8 bytes")
        size, n = _PEER_HEAD.unpack_from(buf, 0)
        body = bytes(buf[_PEER_HEAD.size:])
        have = len(body) // ID_LEN
        if have < n:
            raise WireError("peer state names %d peers and holds %d" % (n, have))
        peers = [_id_text(body[i * ID_LEN:(i + 1) * ID_LEN]) for i in range(n)]
        rest = body[n * ID_LEN:]
        ext = _U16.unpack_from(rest, 0)[0] if len(rest) >= 2 else ExtState.UNKNOWN
        return cls(size, peers, ext)


def quorum(cluster_size):
    """nats-server's qn: a majority of the cluster."""
    return cluster_size // 2 + 1
