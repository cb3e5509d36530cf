"""What nats-server's JetStream cluster layer puts inside NRG entries.

Byte 0 of a Normal entry's data is an :class:`EntryOp`; the rest is that op's
record.  The layouts follow nats-server v2.14.5 (jetstream_cluster.go,
consumer.go, store.go, filestore.go, avl/seqset.go); see
/work/shared/reference/jetstream-cluster.md §2-4.

* Meta ops 0, 1, 2, 3, 11: op + ``json.NewEncoder(..).Encode(assignment)``,
  so the JSON ends with ``"\\n"``; op 9: op + an S2 *stream* of that JSON.
  The assignment's config (``stream``/``consumer``) is a Go ``json.RawMessage``:
  it is kept here as its text (``config_json``) so a nats-server record
  re-encodes byte for byte; :meth:`StreamAssignment.stream_config` builds the
  project's :class:`StreamConfig` from it.  Fields we do not model are kept in
  ``unknown`` (key -> JSON text) and written back after the known ones.
* Stream ops 4/14/16/17 are binary, 5/6/15 JSON; consumer ops 7, 8, 10, 12,
  13, 18 binary.  Snapshots: :func:`encode_meta_snapshot`,
  :func:`encode_stream_snapshot`, :func:`encode_consumer_state`.

Every decoder refuses bad input with :class:`EntryError` only.  Times
(``created``, a client's ``start``) are kept as the RFC 3339 text nats-server
wrote and are not parsed; configs are checked to be JSON objects, not
validated (nats-server marks an asset with an unknown config field
"unsupported" rather than refusing the entry).
"""

import enum
import json
import struct
import time

import attrs

from natsbroker.cluster import s2
from natsbroker.gocompat.gojson import go_json_dumps

__all__ = [
    "COMPRESS_THRESHOLD",
    "Acks",
    "BatchMsg",
    "ClientInfo",
    "ConsumerAssignment",
    "ConsumerState",
    "DeleteRange",
    "DeletedSet",
    "Delivered",
    "EntryError",
    "EntryOp",
    "MsgDelete",
    "PendingRequest",
    "RaftGroup",
    "ResetSeq",
    "Skip",
    "StreamAssignment",
    "StreamMsg",
    "StreamPurge",
    "StreamSnapshot",
    "decode_consumer_state",
    "decode_entry",
    "decode_meta_entry",
    "decode_meta_snapshot",
    "decode_stream_snapshot",
    "encode_consumer_state",
    "encode_entry",
    "encode_meta_entry",
    "encode_meta_snapshot",
    "encode_stream_msg",
    "encode_stream_snapshot",
]


class EntryError(ValueError):
    """Entry data nats-server would refuse to decode (or we cannot)."""


class EntryOp(enum.IntEnum):
    """jetstream_cluster.go entryOp: only appended to, never renumbered."""
    ASSIGN_STREAM = 0
    ASSIGN_CONSUMER = 1
    REMOVE_STREAM = 2
    REMOVE_CONSUMER = 3
    STREAM_MSG = 4
    PURGE_STREAM = 5
    DELETE_MSG = 6
    UPDATE_DELIVERED = 7
    UPDATE_ACKS = 8
    ASSIGN_COMPRESSED_CONSUMER = 9
    UPDATE_SKIP = 10
    UPDATE_STREAM = 11
    ADD_PENDING_REQUEST = 12
    REMOVE_PENDING_REQUEST = 13
    COMPRESSED_STREAM_MSG = 14
    DELETE_RANGE = 15
    BATCH_MSG = 16
    BATCH_COMMIT_MSG = 17
    RESET_SEQ = 18


STREAM_OPS = (EntryOp.ASSIGN_STREAM, EntryOp.REMOVE_STREAM, EntryOp.UPDATE_STREAM)
CONSUMER_OPS = (EntryOp.ASSIGN_CONSUMER, EntryOp.REMOVE_CONSUMER, EntryOp.ASSIGN_COMPRESSED_CONSUMER)
META_OPS = STREAM_OPS + CONSUMER_OPS

# jetstream_cluster.go compressThreshold: op 4 bodies whose subject, reply,
# header and payload exceed this are tried compressed (op 14).
COMPRESS_THRESHOLD = 8192
# Go's zero time.Time as it marshals.
ZERO_TIME = "0001-01-01T00:00:00Z"

_U64_MAX = (1 << 64) - 1


# ---------------------------------------------------------------------------
# Varints as Go's encoding/binary writes and reads them
# ---------------------------------------------------------------------------

def put_uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def put_varint(n):
    """binary.PutVarint: zigzag, then uvarint."""
    return put_uvarint(n << 1 if n >= 0 else -2 * n - 1)


def uvarint(buf, pos=0):
    """binary.Uvarint at ``pos``: (value, bytes used); used 0 = cut off,
    negative = overflow, as Go reports them."""
    x = shift = 0
    for i in range(10):
        if pos + i >= len(buf):
            return 0, 0
        b = buf[pos + i]
        if b < 0x80:
            if i == 9 and b > 1:
                return 0, -(i + 1)
            return x | b << shift, i + 1
        x |= (b & 0x7F) << shift
        shift += 7
    return 0, -11


def varint(buf, pos=0):
    ux, n = uvarint(buf, pos)
    x = ux >> 1
    if ux & 1:
        x = ~x
    return x, n


class _Reader:
    """Sequential uvarint reads; ``failed`` once one did not parse (the
    ``bi = -1`` of nats-server's decoders)."""

    def __init__(self, buf, pos):
        self.buf, self.pos, self.failed = buf, pos, False

    def u(self):
        if self.failed:
            return 0
        v, n = uvarint(self.buf, self.pos)
        if n <= 0:
            self.failed = True
            return 0
        self.pos += n
        return v

    def i(self):
        if self.failed:
            return 0
        v, n = varint(self.buf, self.pos)
        if n <= 0:
            self.failed = True
            return -1
        self.pos += n
        return v


# ---------------------------------------------------------------------------
# Go structs <-> JSON: a record class lists (json name, attribute, kind, omitempty)
# ---------------------------------------------------------------------------

_DECODER = json.JSONDecoder(parse_constant=lambda c: (_ for _ in ()).throw(EntryError("bad JSON number " + c)))
_WS = " \t\n\r"


def _skip_ws(text, i):
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _members(text, i=0):
    """The members of the JSON object at ``text[i:]`` as (key, value, raw
    text of the value) and the index after it.  Raw text lets a Go
    ``json.RawMessage`` (a config) come back byte for byte."""
    try:
        i = _skip_ws(text, i)
        if text[i:i + 4] == "null":
            return None, i + 4
        if text[i] != "{":
            raise EntryError("JSON object expected")
        out = []
        i = _skip_ws(text, i + 1)
        if text[i] == "}":
            return out, i + 1
        while True:
            if text[i] != '"':
                raise EntryError("JSON object key expected")
            key, i = json.decoder.scanstring(text, i + 1)
            i = _skip_ws(text, i)
            if text[i] != ":":
                raise EntryError("':' expected")
            i = _skip_ws(text, i + 1)
            value, end = _DECODER.raw_decode(text, i)
            out.append((key, value, text[i:end]))
            i = _skip_ws(text, end)
            if text[i] == ",":
                i = _skip_ws(text, i + 1)
                continue
            if text[i] == "}":
                return out, i + 1
            raise EntryError("',' or '}' expected")
    except EntryError:
        raise
    except (ValueError, IndexError, RecursionError) as e:
        raise EntryError("bad JSON: %s" % e) from None


def _whole(text):
    """A JSON object that must be all of ``text`` (json.Unmarshal)."""
    members, end = _members(text)
    if _skip_ws(text, end) != len(text):
        raise EntryError("bad JSON: data after the value")
    return members


def _text(data):
    # (Go decodes bad UTF-8 in strings as U+FFFD)
    return bytes(data).decode("utf-8", "replace")


def _kind_check(kind, value, raw):
    """A JSON value as attribute ``kind``; Go's zero for null."""
    if kind == "str":
        if value is None:
            return ""
        if not isinstance(value, str):
            raise EntryError("string expected")
        return value
    if kind == "time":
        if value is None:
            return ZERO_TIME
        if not isinstance(value, str):
            raise EntryError("time expected")
        return value
    if kind == "opt_time":
        if value is not None and not isinstance(value, str):
            raise EntryError("time expected")
        return value
    if kind in ("u64", "i64"):
        if value is None:
            return 0
        lo, hi = (0, _U64_MAX) if kind == "u64" else (-(1 << 63), (1 << 63) - 1)
        if type(value) is not int or not lo <= value <= hi:
            raise EntryError("integer expected")
        return value
    if kind == "bool":
        if value is None:
            return False
        if not isinstance(value, bool):
            raise EntryError("bool expected")
        return value
    if kind == "strs":
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, (str, type(None))) for v in value):
            raise EntryError("string list expected")
        return [v or "" for v in value]
    if kind == "u64s":
        if value is None:
            return None
        if not isinstance(value, list) or any(type(v) is not int or not 0 <= v <= _U64_MAX for v in value):
            raise EntryError("integer list expected")
        return value
    if kind == "raw":          # json.RawMessage: kept as text, "null" included
        if value is not None and not isinstance(value, dict):
            raise EntryError("config object expected")   # (nats-server's config decode fails)
        return raw
    if kind == "raw_ptr":      # a pointer to a struct we keep as text: null is nil
        if value is None:
            return None
        if not isinstance(value, dict):
            raise EntryError("object expected")
        return raw
    if kind == "client":
        return None if value is None else _from_members(ClientInfo, _members(raw)[0])
    if kind == "group":
        return None if value is None else _from_members(RaftGroup, _members(raw)[0])
    if kind == "consumers":
        if value is None:
            return None
        if not isinstance(value, list):
            raise EntryError("list expected")
        out, i = [], _skip_ws(raw, 1)
        for _ in value:
            members, i = _members(raw, i)
            if members is None:
                raise EntryError("null consumer")   # (nats-server would crash on it)
            out.append(_from_members(ConsumerAssignment, members))
            i = _skip_ws(raw, i)
            i = _skip_ws(raw, i + 1) if raw[i] == "," else i
        return out
    raise AssertionError(kind)


def _from_members(cls, members, spec=None):
    """Go's json.Unmarshal into ``cls``: keys match exactly, else case-blind;
    the last duplicate wins; unknown keys are kept as raw text."""
    if members is None:
        raise EntryError("object expected, got null")
    spec = spec or cls.__go_spec__
    exact = {s[0]: s for s in spec}
    folded = {s[0].lower(): s for s in spec}
    kwargs, unknown = {}, {}
    for key, value, raw in members:
        s = exact.get(key) or folded.get(key.lower())
        if s is None:
            unknown[key] = raw
            continue
        kwargs[s[1]] = _kind_check(s[2], value, raw)
    return cls(unknown=unknown, **kwargs)


def _empty(kind, value):
    if kind in ("raw_ptr", "client", "opt_time", "consumers"):
        return value is None
    return not value


def _value_json(kind, value):
    if kind in ("raw", "raw_ptr"):
        return "null" if value is None else value
    if kind in ("client", "group"):
        return "null" if value is None else _struct_json(value)
    if kind == "consumers":
        if value is None:
            return "null"
        return "[" + ",".join(_struct_json(c, _WRITEABLE_CONSUMER) for c in value) + "]"
    return go_json_dumps(value)


def _struct_json(obj, spec=None):
    """``obj`` as Go's encoder writes its struct: fields in order, omitempty
    ones dropped when empty; then the unknown members we kept."""
    parts = []
    for name, attr, kind, omit in spec or type(obj).__go_spec__:
        value = getattr(obj, attr)
        if omit and _empty(kind, value):
            continue
        parts.append(go_json_dumps(name) + ":" + _value_json(kind, value))
    for key, raw in obj.unknown.items():
        parts.append(go_json_dumps(key) + ":" + raw)
    return "{" + ",".join(parts) + "}"


def _json_record(op, obj):
    """op + json.NewEncoder(..).Encode(obj): the encoder ends with a newline."""
    return bytes([op]) + (_struct_json(obj) + "\n").encode("utf-8")


def _unknown():
    return attrs.field(factory=dict, kw_only=True)


# ---------------------------------------------------------------------------
# Meta records (jetstream_cluster.go, events.go ClientInfo)
# ---------------------------------------------------------------------------

@attrs.define
class ClientInfo:
    """events.go ClientInfo; times are kept as the RFC 3339 text Go wrote."""
    __go_spec__ = (
        ("start", "start", "opt_time", True), ("host", "host", "str", True),
        ("id", "id", "u64", True), ("acc", "acc", "str", True), ("svc", "svc", "str", True),
        ("user", "user", "str", True), ("name", "name", "str", True), ("lang", "lang", "str", True),
        ("ver", "ver", "str", True), ("rtt", "rtt", "i64", True), ("server", "server", "str", True),
        ("cluster", "cluster", "str", True), ("alts", "alts", "strs", True),
        ("stop", "stop", "opt_time", True), ("jwt", "jwt", "str", True),
        ("issuer_key", "issuer_key", "str", True), ("name_tag", "name_tag", "str", True),
        ("tags", "tags", "strs", True), ("kind", "kind", "str", True),
        ("client_type", "client_type", "str", True), ("client_id", "client_id", "str", True),
        ("nonce", "nonce", "str", True), ("reply", "reply", "str", True),
    )
    start: str = None
    host: str = ""
    id: int = 0
    acc: str = ""
    svc: str = ""
    user: str = ""
    name: str = ""
    lang: str = ""
    ver: str = ""
    rtt: int = 0
    server: str = ""
    cluster: str = ""
    alts: list = None
    stop: str = None
    jwt: str = ""
    issuer_key: str = ""
    name_tag: str = ""
    tags: list = None
    kind: str = ""
    client_type: str = ""
    client_id: str = ""
    nonce: str = ""
    reply: str = ""
    unknown: dict = _unknown()

    @property
    def account(self):
        """serviceAccount(): the asset's owner."""
        return self.svc or self.acc

    def for_proposal(self):
        """forProposal: what assignment proposals carry (no jwt, no issuer key)."""
        return attrs.evolve(self, jwt="", issuer_key="")

    def for_assignment_snap(self):
        """forAssignmentSnap: what the meta snapshot keeps."""
        return ClientInfo(acc=self.acc, svc=self.svc, cluster=self.cluster)


@attrs.define
class RaftGroup:
    """jetstream_cluster.go raftGroup."""
    __go_spec__ = (
        ("name", "name", "str", False), ("peers", "peers", "strs", False),
        ("store", "store", "str", False), ("cluster", "cluster", "str", True),
        ("preferred", "preferred", "str", True), ("scale_up", "scale_up", "bool", True),
    )
    name: str = ""
    peers: list = attrs.field(factory=list)
    store: str = "file"
    cluster: str = ""
    preferred: str = ""
    scale_up: bool = False
    unknown: dict = _unknown()

    def __attrs_post_init__(self):
        # StorageType.UnmarshalJSON takes only these two
        if self.store not in ("file", "memory"):
            raise EntryError("bad storage type %r" % (self.store,))


def config_text(cfg):
    # json.Marshal(sa.Config): the config's own fields, no dynamic metadata
    from natsbroker.jetstream.marshal import fields_json
    return go_json_dumps(fields_json(cfg))


@attrs.define
class StreamAssignment:
    """jetstream_cluster.go streamAssignment (ops 0, 2, 11); ``consumers``
    only in a meta snapshot (``Consumers``)."""
    __go_spec__ = (
        ("client", "client", "client", True), ("created", "created", "time", False),
        ("stream", "config_json", "raw", False), ("group", "group", "group", False),
        ("sync", "sync", "str", False), ("subject", "subject", "str", True),
        ("reply", "reply", "str", True), ("restore_state", "restore_state", "raw_ptr", True),
    )
    client: ClientInfo = None
    created: str = ZERO_TIME
    config_json: str = "null"
    group: RaftGroup = None
    sync: str = ""
    subject: str = ""
    reply: str = ""
    restore_state: str = None   # StreamState JSON text
    consumers: list = None      # meta snapshot only
    unknown: dict = _unknown()

    @property
    def config(self):
        """The config as plain JSON values."""
        return json.loads(self.config_json)

    @property
    def name(self):
        cfg = self.config
        return cfg.get("name", "") if isinstance(cfg, dict) else ""

    def stream_config(self):
        """The project's StreamConfig model (unknown config fields ignored)."""
        from natsbroker.jetstream.marshal import converter
        from natsbroker.jetstream.stream_models import StreamConfig
        return converter.structure(self.config, StreamConfig)

    @classmethod
    def with_config(cls, cfg, **kw):
        """An assignment of the project's StreamConfig: only its Go fields are written."""
        return cls(config_json=config_text(cfg), **kw)


@attrs.define
class ConsumerAssignment:
    """jetstream_cluster.go consumerAssignment (ops 1, 3, 9)."""
    __go_spec__ = (
        ("client", "client", "client", True), ("created", "created", "time", False),
        ("name", "name", "str", False), ("stream", "stream", "str", False),
        ("consumer", "config_json", "raw", False), ("group", "group", "group", False),
        ("subject", "subject", "str", True), ("reply", "reply", "str", True),
        ("state", "state", "raw_ptr", True),
    )
    client: ClientInfo = None
    created: str = ZERO_TIME
    name: str = ""
    stream: str = ""
    config_json: str = "null"
    group: RaftGroup = None
    subject: str = ""
    reply: str = ""
    state: str = None   # ConsumerState JSON text
    unknown: dict = _unknown()

    @property
    def config(self):
        return json.loads(self.config_json)

    def consumer_config(self):
        """The project's ConsumerConfig model (unknown config fields ignored)."""
        from natsbroker.jetstream.consumer_models import ConsumerConfig
        from natsbroker.jetstream.marshal import converter
        return converter.structure(self.config, ConsumerConfig)

    @classmethod
    def with_config(cls, cfg, **kw):
        return cls(config_json=config_text(cfg), **kw)


# writeableStreamAssignment / writeableConsumerAssignment: the meta snapshot's
_WRITEABLE_STREAM = StreamAssignment.__go_spec__[:5] + (("Consumers", "consumers", "consumers", False),)
_WRITEABLE_CONSUMER = ConsumerAssignment.__go_spec__[:6]


def encode_meta_entry(op, record):
    """An op 0, 1, 2, 3, 9 or 11 entry's data for an assignment.  The caller
    applies ``ClientInfo.for_proposal`` (nats-server does before encoding)."""
    op = EntryOp(op)
    want = StreamAssignment if op in STREAM_OPS else ConsumerAssignment if op in CONSUMER_OPS else None
    if want is None or not isinstance(record, want):
        raise EntryError("op %s does not carry a %s" % (op.name, type(record).__name__))
    if op == EntryOp.ASSIGN_COMPRESSED_CONSUMER:
        # s2.NewWriter + json.NewEncoder: the S2 stream holds the JSON and its newline
        return bytes([op]) + s2.encode_stream((_struct_json(record) + "\n").encode("utf-8"))
    return _json_record(op, record)


def decode_meta_entry(data):
    """(op, StreamAssignment | ConsumerAssignment) of a meta entry's data."""
    op, body = _op(data)
    if op in STREAM_OPS:
        return op, _from_members(StreamAssignment, _whole(_text(body)))
    if op == EntryOp.ASSIGN_COMPRESSED_CONSUMER:
        # json.NewDecoder(s2.NewReader).Decode: the first value; the rest unread
        try:
            text = _text(s2.decode_stream(body))
        except s2.S2Error as e:
            raise EntryError("op 9: %s" % e) from None
        return op, _from_members(ConsumerAssignment, _members(text)[0])
    if op in CONSUMER_OPS:
        return op, _from_members(ConsumerAssignment, _whole(_text(body)))
    raise EntryError("op %s is no meta op" % op.name)


def _op(data):
    if not data:
        raise EntryError("empty entry")
    try:
        return EntryOp(data[0]), memoryview(data)[1:]
    except ValueError:
        raise EntryError("unknown entry op %d" % data[0]) from None


def encode_meta_snapshot(streams):
    """The meta group's snapshot of StreamAssignments (their ``consumers``
    lists of ConsumerAssignments): an S2 block of the JSON array; clients cut
    to ``for_assignment_snap``; no streams, no data."""
    if not streams:
        return b""
    items = []
    for sa in streams:
        w = attrs.evolve(sa, client=(sa.client or ClientInfo()).for_assignment_snap(),
                         consumers=[attrs.evolve(ca, client=(ca.client or ClientInfo()).for_assignment_snap(),
                                                 unknown={})
                                    for ca in sa.consumers or ()],
                         unknown={})
        items.append(_struct_json(w, _WRITEABLE_STREAM))
    return s2.encode_block(("[" + ",".join(items) + "]").encode("utf-8"))


def decode_meta_snapshot(data, max_size=s2.DEFAULT_MAX_SIZE):
    """A meta snapshot as a list of StreamAssignment (``consumers`` set; a
    consumer without ``stream`` gets the stream's name, as nats-server does)."""
    if not data:
        return []
    try:
        text = _text(s2.decode_block(bytes(data), max_size))
        value, end = _DECODER.raw_decode(text, _skip_ws(text, 0))
    except s2.S2Error as e:
        raise EntryError("meta snapshot: %s" % e) from None
    except (ValueError, RecursionError) as e:
        raise EntryError("meta snapshot: bad JSON: %s" % e) from None
    if _skip_ws(text, end) != len(text):
        raise EntryError("meta snapshot: data after the JSON")
    if value is None:
        return []
    if not isinstance(value, list):
        raise EntryError("meta snapshot: not a JSON array")
    out, i = [], _skip_ws(text, _skip_ws(text, 0) + 1)
    for _ in value:
        members, i = _members(text, i)
        i = _skip_ws(text, i)
        i = _skip_ws(text, i + 1) if text[i] == "," else i
        if members is None:
            raise EntryError("meta snapshot: null stream")   # nats-server would crash on it
        sa = _from_members(StreamAssignment, members, _WRITEABLE_STREAM)
        for ca in sa.consumers or ():
            if not ca.stream:
                ca.stream = sa.name
        out.append(sa)
    return out


# ---------------------------------------------------------------------------
# Stream records
# ---------------------------------------------------------------------------

FLAG_FROM_SOURCE_OR_MIRROR = 1

_STREAM_MSG_MIN = 26    # decodeStreamMsg: lseq, ts and four lengths


@attrs.define
class StreamMsg:
    """Op 4 (op 14 compressed): a message the stream leader proposes."""
    subject: str
    reply: str = ""
    hdr: bytes = b""
    msg: bytes = b""
    lseq: int = 0
    ts: int = 0
    flags: int = 0

    @property
    def sourced(self):
        return bool(self.flags & FLAG_FROM_SOURCE_OR_MIRROR)


@attrs.define
class BatchMsg:
    """Ops 16/17: a message of an atomic batch (17 commits it)."""
    batch_id: str
    batch_seq: int
    msg: StreamMsg
    commit: bool = False
    compressed: bool = False


def _b(s):
    return s.encode("utf-8", "surrogateescape") if isinstance(s, str) else bytes(s)


def encode_stream_msg(m, compress=True, batch_id="", batch_seq=0, commit=False):
    """encodeStreamMsgAllowCompressAndBatch: op 4, or op 14 when ``compress``
    and subject+reply+hdr+msg exceed 8 KiB and the S2 block is shorter than
    the whole uncompressed record; in a batch (``batch_id``) behind op 16/17.
    Lengths are clipped to their fields as nats-server clips them."""
    subject, reply = _b(m.subject)[:0xFFFF], _b(m.reply)[:0xFFFF]
    hdr, msg = bytes(m.hdr)[:0xFFFF], bytes(m.msg)[:0xFFFFFFFF]
    prefix = b""
    if batch_id:
        bid = _b(batch_id)[:0xFFFF]
        prefix = bytes([EntryOp.BATCH_COMMIT_MSG if commit else EntryOp.BATCH_MSG]) + \
            struct.pack("<H", len(bid)) + bid + put_uvarint(batch_seq)
    body = b"".join((
        struct.pack("<QQH", m.lseq, m.ts & _U64_MAX, len(subject)), subject,
        struct.pack("<H", len(reply)), reply, struct.pack("<H", len(hdr)), hdr,
        struct.pack("<I", len(msg)), msg, put_uvarint(m.flags)))
    plain = prefix + bytes([EntryOp.STREAM_MSG]) + body
    if compress and len(subject) + len(reply) + len(hdr) + len(msg) > COMPRESS_THRESHOLD:
        packed = s2.encode_block(body)
        if len(packed) < len(plain):
            return prefix + bytes([EntryOp.COMPRESSED_STREAM_MSG]) + packed
    return plain


def _decode_stream_msg_body(buf):
    """decodeStreamMsg of what follows op 4."""
    if len(buf) < _STREAM_MSG_MIN:
        raise EntryError("stream msg shorter than %d bytes" % _STREAM_MSG_MIN)
    lseq, ts = struct.unpack_from("<Qq", buf, 0)
    pos, parts = 16, []
    for width in ("<H", "<H", "<H", "<I"):
        size = struct.calcsize(width)
        if len(buf) - pos < size:
            raise EntryError("stream msg: a length is cut off")
        n = struct.unpack_from(width, buf, pos)[0]
        pos += size
        if len(buf) - pos < n:
            raise EntryError("stream msg: a field runs past the end")
        parts.append(bytes(buf[pos:pos + n]))
        pos += n
    flags = 0
    if pos < len(buf):
        flags, _ = uvarint(buf, pos)   # (nats-server ignores a bad flags varint: 0)
    subject, reply, hdr, msg = parts
    return StreamMsg(subject.decode("utf-8", "surrogateescape"), reply.decode("utf-8", "surrogateescape"),
                     hdr, msg, lseq, ts, flags)


def _decode_msg_op(op, body, max_size=s2.DEFAULT_MAX_SIZE):
    if op == EntryOp.COMPRESSED_STREAM_MSG:
        try:
            body = s2.decode_block(bytes(body), max_size)
        except s2.S2Error as e:
            raise EntryError("op 14: %s" % e) from None
    elif op != EntryOp.STREAM_MSG:
        raise EntryError("op %d is no stream message" % op)
    return _decode_stream_msg_body(body)


def _decode_batch(op, body):
    """decodeBatchMsg, then the inner op 4/14 record."""
    if len(body) < 2:
        raise EntryError("batch msg: id length cut off")
    n = struct.unpack_from("<H", body, 0)[0]
    if len(body) - 2 < n:
        raise EntryError("batch msg: id runs past the end")
    bid = bytes(body[2:2 + n]).decode("utf-8", "surrogateescape")
    seq, used = uvarint(body, 2 + n)
    if used <= 0:
        raise EntryError("batch msg: bad batch sequence")
    pos = 2 + n + used
    if pos >= len(body):
        raise EntryError("batch msg: no message")
    inner = body[pos]
    msg = _decode_msg_op(inner, body[pos + 1:])
    return BatchMsg(bid, seq, msg, commit=op == EntryOp.BATCH_COMMIT_MSG,
                    compressed=inner == EntryOp.COMPRESSED_STREAM_MSG)


@attrs.define
class StreamPurge:
    """Op 5: jetstream_cluster.go streamPurge (``request`` kept as JSON text)."""
    __go_spec__ = (
        ("client", "client", "client", True), ("stream", "stream", "str", False),
        ("last_seq", "last_seq", "u64", False), ("subject", "subject", "str", False),
        ("reply", "reply", "str", False), ("request", "request", "raw_ptr", True),
    )
    client: ClientInfo = None
    stream: str = ""
    last_seq: int = 0
    subject: str = ""
    reply: str = ""
    request: str = None
    unknown: dict = _unknown()


@attrs.define
class MsgDelete:
    """Op 6: jetstream_cluster.go streamMsgDelete."""
    __go_spec__ = (
        ("client", "client", "client", True), ("stream", "stream", "str", False),
        ("seq", "seq", "u64", False), ("no_erase", "no_erase", "bool", True),
        ("subject", "subject", "str", False), ("reply", "reply", "str", False),
    )
    client: ClientInfo = None
    stream: str = ""
    seq: int = 0
    no_erase: bool = False
    subject: str = ""
    reply: str = ""
    unknown: dict = _unknown()


@attrs.define
class DeleteRange:
    """Op 15 (JSON ``{"First","Num"}``: store.go DeleteRange has no tags) and a
    run-length delete block of a stream snapshot."""
    __go_spec__ = (("First", "first", "u64", False), ("Num", "num", "u64", False))
    first: int = 0
    num: int = 0
    unknown: dict = _unknown()


@attrs.define
class DeletedSet:
    """An AVL seqset delete block (or the legacy JSON ``deleted`` list) of a
    stream snapshot: the deleted sequences, ascending."""
    seqs: tuple


# ---------------------------------------------------------------------------
# Consumer records
# ---------------------------------------------------------------------------

@attrs.define
class Delivered:
    """Op 7 updateDelivered."""
    dseq: int
    sseq: int
    dc: int
    ts: int


@attrs.define
class Acks:
    """Op 8 updateAcks."""
    dseq: int
    sseq: int


@attrs.define
class Skip:
    """Op 10 updateSkip: the consumer's next stream sequence."""
    sseq: int


@attrs.define
class PendingRequest:
    """Ops 12 (add) / 13 (remove): a pull request's reply subject."""
    reply: str
    add: bool = True


@attrs.define
class ResetSeq:
    """Op 18 resetSeq."""
    seq: int
    reply: str = ""


# ---------------------------------------------------------------------------
# Any entry
# ---------------------------------------------------------------------------

def encode_entry(op, record, compress=True):
    """The data of a Normal entry: ``op`` and its record (as decode_entry gives)."""
    op = EntryOp(op)
    if op in META_OPS:
        return encode_meta_entry(op, record)
    if op in (EntryOp.STREAM_MSG, EntryOp.COMPRESSED_STREAM_MSG):
        return encode_stream_msg(record, compress=compress)
    if op in (EntryOp.BATCH_MSG, EntryOp.BATCH_COMMIT_MSG):
        return encode_stream_msg(record.msg, compress=compress, batch_id=record.batch_id,
                                 batch_seq=record.batch_seq, commit=op == EntryOp.BATCH_COMMIT_MSG)
    want = {EntryOp.PURGE_STREAM: StreamPurge, EntryOp.DELETE_MSG: MsgDelete,
            EntryOp.DELETE_RANGE: DeleteRange, EntryOp.UPDATE_DELIVERED: Delivered,
            EntryOp.UPDATE_ACKS: Acks, EntryOp.UPDATE_SKIP: Skip,
            EntryOp.ADD_PENDING_REQUEST: PendingRequest, EntryOp.REMOVE_PENDING_REQUEST: PendingRequest,
            EntryOp.RESET_SEQ: ResetSeq}[op]
    if not isinstance(record, want):
        raise EntryError("op %s does not carry a %s" % (op.name, type(record).__name__))
    if want in (StreamPurge, MsgDelete, DeleteRange):
        return _json_record(op, record)
    if op == EntryOp.UPDATE_DELIVERED:
        return bytes([op]) + put_uvarint(record.dseq) + put_uvarint(record.sseq) + \
            put_uvarint(record.dc) + put_varint(record.ts)
    if op == EntryOp.UPDATE_ACKS:
        return bytes([op]) + put_uvarint(record.dseq) + put_uvarint(record.sseq)
    if op == EntryOp.UPDATE_SKIP:
        return bytes([op]) + struct.pack("<Q", record.sseq)
    if op == EntryOp.RESET_SEQ:
        return bytes([op]) + struct.pack("<Q", record.seq) + _b(record.reply)
    return bytes([op]) + _b(record.reply)


def decode_entry(data, max_size=s2.DEFAULT_MAX_SIZE):
    """(op, record) of any Normal entry's data."""
    op, body = _op(data)
    if op in META_OPS:
        return decode_meta_entry(data)
    if op in (EntryOp.STREAM_MSG, EntryOp.COMPRESSED_STREAM_MSG):
        return op, _decode_msg_op(op, body, max_size)
    if op in (EntryOp.BATCH_MSG, EntryOp.BATCH_COMMIT_MSG):
        return op, _decode_batch(op, body)
    if op == EntryOp.PURGE_STREAM:
        return op, _from_members(StreamPurge, _whole(_text(body)))
    if op == EntryOp.DELETE_MSG:
        return op, _from_members(MsgDelete, _whole(_text(body)))
    if op == EntryOp.DELETE_RANGE:
        return op, _from_members(DeleteRange, _whole(_text(body)))
    if op == EntryOp.UPDATE_DELIVERED:
        r = _Reader(body, 0)
        rec = Delivered(r.u(), r.u(), r.u(), r.i())
        if r.failed:
            raise EntryError("bad replicated delivered update")
        return op, rec
    if op == EntryOp.UPDATE_ACKS:
        r = _Reader(body, 0)
        rec = Acks(r.u(), r.u())
        if r.failed:
            raise EntryError("bad replicated ack update")
        return op, rec
    if op in (EntryOp.UPDATE_SKIP, EntryOp.RESET_SEQ):
        if len(body) < 8:
            raise EntryError("bad replicated skip/reset update")
        seq = struct.unpack_from("<Q", body, 0)[0]
        if op == EntryOp.UPDATE_SKIP:
            return op, Skip(seq)
        return op, ResetSeq(seq, bytes(body[8:]).decode("utf-8", "surrogateescape"))
    # 12, 13
    return op, PendingRequest(bytes(body).decode("utf-8", "surrogateescape"),
                              add=op == EntryOp.ADD_PENDING_REQUEST)


# ---------------------------------------------------------------------------
# Stream snapshot (store.go EncodedStreamState / DecodeStreamState)
# ---------------------------------------------------------------------------

STREAM_STATE_MAGIC, STREAM_STATE_VERSION = 42, 1
RUN_LENGTH_MAGIC = 33
SEQSET_MAGIC = 22
_SEQSET_MIN = 10


@attrs.define
class StreamSnapshot:
    """A stream group's snapshot: counts and delete blocks, no messages.
    ``legacy``: it came as the old JSON form."""
    msgs: int = 0
    bytes: int = 0
    first_seq: int = 0
    last_seq: int = 0
    failed: int = 0
    num_deleted: int = 0
    deleted: list = attrs.field(factory=list)
    legacy: bool = False

    def deleted_seqs(self):
        out = []
        for block in self.deleted:
            if isinstance(block, DeleteRange):
                out.extend(range(block.first, block.first + block.num))
            else:
                out.extend(block.seqs)
        return out


def _runs(seqs):
    runs = []
    for s in sorted(set(seqs)):
        if runs and runs[-1][0] + runs[-1][1] == s:
            runs[-1][1] += 1
        else:
            runs.append([s, 1])
    return runs


def encode_stream_snapshot(snap):
    """The binary form, deletes as run-length blocks only (nats-server's
    seqset decoder links nodes without rebalancing: we never write those)."""
    out = bytearray([STREAM_STATE_MAGIC, STREAM_STATE_VERSION])
    for v in (snap.msgs, snap.bytes, snap.first_seq, snap.last_seq, snap.failed, snap.num_deleted):
        out += put_uvarint(v)
    for block in snap.deleted:
        runs = [[block.first, block.num]] if isinstance(block, DeleteRange) else _runs(block.seqs)
        for first, num in runs:
            out.append(RUN_LENGTH_MAGIC)
            out += put_uvarint(first) + put_uvarint(num)
    return bytes(out)


def _decode_seqset(buf, pos):
    """avl.Decode at ``pos``: (DeletedSet, bytes used); versions 1 and 2."""
    if len(buf) - pos < _SEQSET_MIN or buf[pos] != SEQSET_MAGIC:
        raise EntryError("bad seqset encoding")
    version = buf[pos + 1]
    if version not in (1, 2):
        raise EntryError("bad seqset version %d" % version)
    buckets = 32 if version == 2 else 64
    per_node = (buckets + 1) * 8 + 2
    nn, size = struct.unpack_from("<II", buf, pos + 2)
    if nn > (len(buf) - pos - _SEQSET_MIN) // per_node:
        raise EntryError("bad seqset encoding")
    seqs, i = set(), pos + _SEQSET_MIN
    for _ in range(nn):
        base = struct.unpack_from("<Q", buf, i)[0]
        words = struct.unpack_from("<%dQ" % buckets, buf, i + 8)
        for w, word in enumerate(words):
            while word:
                low = word & -word
                seqs.add((base + w * 64 + low.bit_length() - 1) & _U64_MAX)
                word ^= low
        i += per_node
    if version == 1 and len(seqs) != size:
        raise EntryError("bad seqset encoding")
    return DeletedSet(tuple(sorted(seqs))), i - pos


def decode_stream_snapshot(data):
    """A stream snapshot, binary (42, 1 ...) or the legacy JSON form."""
    buf = bytes(data)
    if len(buf) >= 2 and buf[0] == STREAM_STATE_MAGIC and buf[1] == STREAM_STATE_VERSION:
        r = _Reader(buf, 2)
        snap = StreamSnapshot(*(r.u() for _ in range(5)))
        if r.failed:
            raise EntryError("corrupt stream state")
        snap.num_deleted = r.u()
        if snap.num_deleted > 0:
            while r.pos < len(buf):
                if buf[r.pos] == SEQSET_MAGIC:
                    block, used = _decode_seqset(buf, r.pos)
                    r.pos += used
                elif buf[r.pos] == RUN_LENGTH_MAGIC:
                    r.pos += 1
                    block = DeleteRange(r.u(), r.u())
                    if r.failed:
                        raise EntryError("corrupt stream state")
                else:
                    raise EntryError("corrupt stream state")
                snap.deleted.append(block)
        return snap
    legacy = _from_members(_LegacySnapshot, _whole(_text(buf)))
    snap = StreamSnapshot(legacy.messages, legacy.bytes, legacy.first_seq, legacy.last_seq,
                          legacy.clfs, len(legacy.deleted or ()), legacy=True)
    if legacy.deleted:
        snap.deleted.append(DeletedSet(tuple(legacy.deleted)))
    return snap


@attrs.define
class _LegacySnapshot:
    __go_spec__ = (
        ("messages", "messages", "u64", False), ("bytes", "bytes", "u64", False),
        ("first_seq", "first_seq", "u64", False), ("last_seq", "last_seq", "u64", False),
        ("clfs", "clfs", "u64", False), ("deleted", "deleted", "u64s", True),
    )
    messages: int = 0
    bytes: int = 0
    first_seq: int = 0
    last_seq: int = 0
    clfs: int = 0
    deleted: list = None
    unknown: dict = _unknown()


# ---------------------------------------------------------------------------
# Consumer state snapshot (store.go encodeConsumerState, filestore.go decodeConsumerState)
# ---------------------------------------------------------------------------

CONSUMER_STATE_MAGIC = 22
_HBIT = 1 << 63


@attrs.define
class ConsumerState:
    """``ack_floor``/``delivered`` are (consumer seq, stream seq); ``pending``
    maps a stream seq to (consumer seq, delivery time in Unix ns, whole
    seconds once encoded); ``redelivered`` a stream seq to its count."""
    ack_floor: tuple = (0, 0)
    delivered: tuple = (0, 0)
    pending: dict = attrs.field(factory=dict)
    redelivered: dict = attrs.field(factory=dict)


def encode_consumer_state(state, now_s=None):
    """Version 2; pending times relative to ``now_s`` (Unix seconds, default
    now rounded as Go's ``time.Now().Round(time.Second)``)."""
    afc, afs = state.ack_floor
    out = bytearray([CONSUMER_STATE_MAGIC, 2])
    for v in (afc, afs, state.delivered[0], state.delivered[1], len(state.pending)):
        out += put_uvarint(v)
    if state.pending:
        if now_s is None:
            now_s = (time.time_ns() + 500_000_000) // 1_000_000_000
        out += put_varint(now_s)
        for sseq in sorted(state.pending):
            dseq, ts = state.pending[sseq]
            secs = abs(ts) // 1_000_000_000 * (1 if ts >= 0 else -1)   # Go's / truncates
            out += put_uvarint((sseq - afs) & _U64_MAX) + put_uvarint((dseq - afc) & _U64_MAX)
            out += put_varint(now_s - secs)
    out += put_uvarint(len(state.redelivered))
    for seq in sorted(state.redelivered):
        out += put_uvarint((seq - afs) & _U64_MAX) + put_uvarint(state.redelivered[seq])
    return bytes(out)


def decode_consumer_state(data):
    """decodeConsumerState, versions 1 and 2."""
    buf = bytes(data)
    if len(buf) < 2 or buf[0] != CONSUMER_STATE_MAGIC:
        raise EntryError("corrupt consumer state")
    version = buf[1]
    if version not in (1, 2):
        raise EntryError("unsupported consumer state version: %d" % version)
    r = _Reader(buf, 2)
    afc, afs, dc, ds = r.u(), r.u(), r.u(), r.u()
    if r.failed:
        raise EntryError("corrupt consumer state")
    if version == 1:
        if afc > 1:
            dc = (dc + afc - 1) & _U64_MAX
        if afs > 1:
            ds = (ds + afs - 1) & _U64_MAX
    if afs & _HBIT or ds & _HBIT:
        raise EntryError("corrupt consumer state")
    state = ConsumerState((afc, afs), (dc, ds))
    npending = r.u()
    if npending > 0:
        mints = r.i()
        for _ in range(npending):
            sseq = r.u()
            dseq = r.u() if version == 2 else 0
            ts = r.i()
            if r.failed:
                raise EntryError("corrupt consumer state")
            sseq = (sseq + afs) & _U64_MAX
            if sseq == 0:
                raise EntryError("corrupt consumer state")
            if version == 2:
                dseq = (dseq + afc) & _U64_MAX
            ts = (ts + mints if version == 1 else mints - ts) * 1_000_000_000
            state.pending[sseq] = (dseq, ts)
    nredelivered = r.u()
    for _ in range(nredelivered):
        seq, n = r.u(), r.u()
        if r.failed:
            break    # (nats-server reads zeros from here on: nothing more is kept)
        if seq > 0 and n > 0:
            state.redelivered[(seq + afs) & _U64_MAX] = n
    return state
