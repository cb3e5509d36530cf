"""Go's ``encoding/json`` as nats-server's JetStream API uses it.

nats-server decodes API requests with Go's ``encoding/json`` in strict mode, so
*its* error texts reach clients: ``invalid JSON: json: unknown field "x"``,
``invalid JSON: json: cannot unmarshal string into Go struct field
StreamConfigRequest.max_msgs of type int64``, ``invalid JSON: invalid character
'}' looking for beginning of value at offset 9``, ``invalid JSON: unexpected
EOF``.  ``decode_fields`` reproduces them (see "Go JSON decoding" below for the
rules), driven by the ``GoType`` descriptors a model's fields carry (``STRING``,
``INT64``, ``Ptr(Placement)``...).  ``go_json_dumps`` writes JSON as Go does
(compact, ``<>&`` escaped as ``\\u003c``...).  Building attrs instances from
the decoded fields is :mod:`natsbroker.jetstream.marshal`'s job.
"""

import array
import codecs
import decimal
import itertools
import json
import math
import re
import sys

import attrs

from natsbroker import jsonbound
from natsbroker.gocompat.quote import go_quote
from natsbroker.gocompat.times import go_parse_rfc3339, rfc3339

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


def encode_json(value, indent=True):
    """``value`` as Go's ``json.MarshalIndent(v, "", "  ")`` (or, with
    ``indent=False``, ``json.Marshal``) writes it: strings escaped as in
    :func:`go_json_dumps` (lone surrogates as U+FFFD), floats in Go's
    shortest form (``2``, ``0.5``, ``1e-7``, ``1e+21``), bytes as UTF-8 text
    (a bad byte as U+FFFD).  The monitor's documents and the system account's
    messages; slower than :func:`go_json_dumps`, which keeps Python's float
    text and no indentation, for the JetStream API."""
    out = []
    # (``indent`` may also be the unit itself: /raftz indents by 3 spaces)
    _encode(value, out, "\n" if indent else "", indent if isinstance(indent, str) else
            ("  " if indent else ""))
    return "".join(out)


def _encode_string(text):
    text = json.dumps(text, ensure_ascii=False).translate(_GO_HTML_ESCAPES)
    if _SURROGATES.search(text):
        text = _SURROGATES.sub("\ufffd", text)
    return text


def _encode(v, out, nl, indent):
    if isinstance(v, str):
        out.append(_encode_string(v))
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif v is None:
        out.append("null")
    elif isinstance(v, int):
        out.append(str(v))
    elif isinstance(v, float):
        out.append(go_float(v))
    elif isinstance(v, dict):
        if not v:
            out.append("{}")
            return
        inner = nl + indent if indent else ""
        out.append("{")
        for i, (k, item) in enumerate(v.items()):
            out.append(("," if i else "") + inner)
            _encode(str(k), out, inner, indent)
            out.append(": " if indent else ":")
            _encode(item, out, inner, indent)
        out.append(nl + "}")
    elif isinstance(v, (list, tuple)):
        if not v:
            out.append("[]")
            return
        inner = nl + indent if indent else ""
        out.append("[")
        for i, item in enumerate(v):
            out.append(("," if i else "") + inner)
            _encode(item, out, inner, indent)
        out.append(nl + "]")
    elif isinstance(v, bytes):
        _encode(v.decode("utf-8", "replace"), out, nl, indent)
    else:
        raise TypeError("cannot encode %r as JSON" % (v,))


def go_float(f):
    """A float64 as Go's encoding/json writes it: shortest digits, fixed
    notation, an exponent only below 1e-6 or from 1e21 (``e-7``, not
    ``e-07``); 2.0 is ``2``."""
    if math.isnan(f) or math.isinf(f):
        raise ValueError("JSON cannot encode %r" % f)
    a = abs(f)
    r = repr(f)
    if a != 0 and (a < 1e-6 or a >= 1e21):
        mant, _, exp = r.partition("e")
        if exp.startswith("-"):
            exp = "-" + (exp[1:].lstrip("0") or "0")
        return mant.removesuffix(".0") + "e" + exp
    if "e" in r:
        r = format(decimal.Decimal(r), "f")
    return r.removesuffix(".0")


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


class EndOfInput(Exception):
    pass


class _Node:
    __slots__ = ("kind", "value", "start", "end", "at")

    def __init__(self, kind, value, start, end, at=None):
        self.kind = kind          # object, array, string, number, true, false, null
        self.value = value        # [(key, key_node, node)], [node], str, literal str, None
        self.start = start        # byte offsets (exact parser nodes)
        self.end = end
        self.at = at              # a C decoder value's offset in _fast_text(data)


_WS = b" \t\r\n"
_WS_RUN = re.compile(rb"[ \t\r\n]*")
_DIGITS = re.compile(rb"[0-9]*")
_STRING_SPECIAL = re.compile(rb'["\\\x00-\x1f]')
_HEX = b"0123456789abcdefABCDEF"
_MAX_DEPTH = jsonbound.MAX_DEPTH


def quote_char(data, i):
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


class Parser:
    """Syntax checker + tree builder with Go's (json v2, v1 mode) error texts."""

    def __init__(self, data):
        self.d = data
        self.n = len(data)

    def ws(self, i):
        if i < self.n and self.d[i] in _WS:
            i = _WS_RUN.match(self.d, i).end()
        return i

    def fail(self, i, context):
        q, size = quote_char(self.d, i)
        raise GoJSONError("invalid character %s %s at offset %d" % (q, context, i + size))

    def value(self, i, depth=0):
        if i >= self.n:
            raise EndOfInput()
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
                        raise EndOfInput()
                    if self.d[j] != expect:
                        self.fail(j, "in literal %s (expecting '%s')" % (lit.decode(), chr(expect)))
                    j += 1
                kind = lit.decode()
                return _Node(kind, None, i, j), j
        self.fail(i, "looking for beginning of value")

    def obj(self, i, depth, members=None):
        """The object opening at ``i``; or, given ``members``, the rest of an
        object whose member value ended just before ``i`` (see ``resume``)."""
        d = self.d
        start = i
        if members is None:
            if depth > _MAX_DEPTH:
                raise GoJSONError("exceeded max depth at offset %d" % (i + 1))
            members = []
            i = self.ws(i + 1)
            if i >= self.n:
                raise EndOfInput()
            if d[i] == 0x7D:
                return _Node("object", members, start, i + 1), i + 1
        else:
            start = None
            i = self.obj_next(i, depth, members, start)
            if type(i) is tuple:
                return i
        while True:
            if d[i] != 0x22:
                self.fail(i, "looking for beginning of object key string")
            key, i = self.string(i)
            i = self.ws(i)
            if i >= self.n:
                raise EndOfInput()
            if d[i] != 0x3A:
                self.fail(i, "after object key")
            i = self.ws(i + 1)
            node, i = self.value(i, depth)
            members.append((key, node))
            i = self.obj_next(i, depth, members, start)
            if type(i) is tuple:
                return i

    def obj_next(self, i, depth, members, start):
        # After a member value: the next key's offset, or the finished node.
        i = self.ws(i)
        if i >= self.n:
            raise EndOfInput()
        c = self.d[i]
        if c == 0x2C:
            i = self.ws(i + 1)
            if i >= self.n:
                raise EndOfInput()
            return i
        if c == 0x7D:
            return _Node("object", members, start, i + 1), i + 1
        self.fail(i, "after object key:value pair")

    def arr(self, i, depth, items=None):
        """The array opening at ``i``; or, given ``items``, the rest of an
        array whose element ended just before ``i`` (see ``resume``)."""
        start = i
        if items is None:
            if depth > _MAX_DEPTH:
                raise GoJSONError("exceeded max depth at offset %d" % (i + 1))
            items = []
            i = self.ws(i + 1)
            if i >= self.n:
                raise EndOfInput()
            if self.d[i] == 0x5D:
                return _Node("array", items, start, i + 1), i + 1
        else:
            start = None
            i = self.arr_next(i, items, start)
            if type(i) is tuple:
                return i
        while True:
            node, i = self.value(i, depth)
            items.append(node)
            i = self.arr_next(i, items, start)
            if type(i) is tuple:
                return i

    def arr_next(self, i, items, start):
        # After an element: the next element's offset, or the finished node.
        i = self.ws(i)
        if i >= self.n:
            raise EndOfInput()
        c = self.d[i]
        if c == 0x2C:
            return self.ws(i + 1)
        if c == 0x5D:
            return _Node("array", items, start, i + 1), i + 1
        self.fail(i, "after array element")

    def resume(self, i, open_brackets):
        """Parse on from ``i``, just after a complete member value or element
        inside the containers ``open_brackets`` (their opening bytes,
        outermost first), as :meth:`value` would have from the outermost
        one's start; returns where the outermost ends.  Raises what
        :meth:`value` would."""
        for depth in range(len(open_brackets), 0, -1):
            if open_brackets[depth - 1] == 0x7B:
                _, i = self.obj(i, depth, members=[])
            else:
                _, i = self.arr(i, depth, items=[])
        return i

    def string(self, i):
        d, n = self.d, self.n
        out = []
        j = i + 1
        seg = j
        while True:
            m = _STRING_SPECIAL.search(d, j)
            if m is None:
                raise EndOfInput()
            j = m.start()
            c = d[j]
            if c == 0x22:
                out.append(d[seg:j].decode("utf-8", "gojson"))
                return "".join(out), j + 1
            if c < 0x20:
                self.fail(j, "in string")
            out.append(d[seg:j].decode("utf-8", "gojson"))
            if j + 1 >= n:
                raise EndOfInput()
            e = d[j + 1]
            if e == 0x75:                                   # \uXXXX
                seq = d[j:j + 6]
                if any(b not in _HEX for b in seq[2:]):
                    raise GoJSONError(_bad_escape(seq, j + len(seq)))
                if len(seq) < 6:
                    raise EndOfInput()
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
            raise EndOfInput()
        if d[j] == 0x30:
            j += 1
        elif 0x31 <= d[j] <= 0x39:
            j = _DIGITS.match(d, j).end()
        else:
            self.fail(j, "in numeric literal")
        if j < n and d[j] == 0x2E:
            j += 1
            if j >= n:
                raise EndOfInput()
            if not 0x30 <= d[j] <= 0x39:
                self.fail(j, "in numeric literal")
            j = _DIGITS.match(d, j).end()
        if j < n and d[j] in b"eE":
            j += 1
            if j < n and d[j] in b"+-":
                j += 1
            if j >= n:
                raise EndOfInput()
            if not 0x30 <= d[j] <= 0x39:
                self.fail(j, "in numeric literal")
            j = _DIGITS.match(d, j).end()
        return j


def room():
    """Recursion enough for the parser (two frames a level) and the decoding
    that walks its tree, up to Go's depth limit, which the parser enforces."""
    return jsonbound.room(3 * _MAX_DEPTH)


def parse_json_values(data, fast=True):
    """Syntax-check ``data`` value by value like a Go ``json.Decoder``; yields nodes.

    Raises ``GoJSONError`` (message as nats-server reports it after "invalid
    JSON: ") at the first syntax error.  Lazy: a value is only checked once the
    previous one has been consumed, as the Go decoder loop does.

    ``fast``: a value that Python's C decoder takes (see "Fast path" below) is
    decoded by it, the rest by :class:`Parser`; ``fast=False`` uses only the
    parser (byte offsets on every node).
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    data = bytes(data)
    if fast:
        text = _fast_text(data)
        if text is not None:
            lossy = (not data.isascii() and _SURROGATES.search(text) is not None
                     or b"\\u" in data and _SURROGATE_ESCAPE.search(data) is not None)
            yield from _fast_values(data, text, lossy)
            return
    yield from _exact_values(data, 0)


def unmarshal_node(data):
    """The one JSON value of ``data`` as Go's ``json.Unmarshal`` reads it
    (the whole input syntax-checked first), as a node for :class:`Decoder`.

    Raises ``GoJSONError`` with the decoder's texts ("... at offset N",
    "unexpected EOF" also for no value at all, "exceeded max depth at offset
    N"), or "invalid character 'x' after top-level value" for more than one
    value.  Valid input is read by the C decoder, the rest as in
    :func:`parse_json_values` (the exact parser only near a syntax error)."""
    data = bytes(data)
    text = _fast_text(data)
    if text is None:
        return _exact_unmarshal_node(data)
    i = _WS_TEXT.match(text).end()
    if i >= len(text):
        raise GoJSONError("unexpected EOF")
    start = i if len(text) == len(data) else _blen(text[:i])
    try:
        value, end = _SCAN(text, i)
        if type(value) is bytes and end < len(text) and text[end] not in " \t\r\n":
            raise _NumberRunsOn()
    except (StopIteration, ValueError, RecursionError) as refused:
        value, end = _refused_value(data, text, i, start, refused)
        if type(value) is _Node:
            return _only_value(data, value, end)
    trailing = _WS_TEXT.match(text, end).end()
    if trailing < len(text):
        raise GoJSONError("invalid character %s after top-level value"
                          % quote_char(data, _blen(text[:trailing]))[0])
    if not data.isascii() and _SURROGATES.search(text) is not None \
            or b"\\u" in data and _SURROGATE_ESCAPE.search(data) is not None:
        value = _go_strings(value)
    kind, value = unpack(value)
    return _Node(kind, value, None, None, i)


_AT_OFFSET = re.compile(r" at offset [0-9]+\Z")


def unmarshal_syntax(data):
    """Go's ``json.Unmarshal`` syntax check (its ``checkValid``): raises
    :class:`GoJSONError` with the ``SyntaxError``'s own text, which has no
    offset and says "unexpected end of JSON input" where a Decoder says
    "unexpected EOF" (nats-server's system requests show these)."""
    try:
        unmarshal_node(data)
    except GoJSONError as e:
        text = str(e)
        text = "unexpected end of JSON input" if text == "unexpected EOF" else _AT_OFFSET.sub("", text)
        raise GoJSONError(text) from None


# Go types of the flat option structs ``unmarshal_flat`` fills, and their zero values.
_FLAT_ZERO = {"bool": False, "int": 0, "uint64": 0, "string": "", "server.SortOpt": "",
              "server.ConnState": 0, "[]string": None}


class _Number(float):
    """A JSON number that is not an integer literal, with its text (Go's
    errors quote the literal: ``number 1e400``, never ``inf``)."""

    def __new__(cls, text):
        self = float.__new__(cls, text)
        self.text = text
        return self


def unmarshal_flat(body, struct, spec):
    """``body`` (bytes) as ``json.Unmarshal`` into a flat Go struct named
    ``struct`` whose fields ``spec`` gives (JSON name: Go type, one of
    ``_FLAT_ZERO``'s): a dict of every field (zero values for the missing).
    Unknown keys are ignored, keys match case-insensitively, ``null`` leaves a
    field alone; :class:`GoJSONError` with Go's text otherwise (the first
    type mismatch, as Go reports the first and decodes on)."""
    opts = {name: _FLAT_ZERO[t] for name, t in spec.items()}
    if not body:
        return opts
    unmarshal_syntax(body)
    value = jsonbound.loads(bytes(body).decode("utf-8", "replace"), parse_float=_Number)
    if value is None:
        return opts                      # null into a struct: nothing to do
    if not isinstance(value, dict):
        raise GoJSONError("json: cannot unmarshal %s into Go value of type server.%s"
                          % (_flat_kind(value), struct))
    folded = {name.lower(): name for name in spec}
    error = None
    for key, v in value.items():
        name = key if key in spec else folded.get(key.lower())
        if name is None or v is None:
            continue
        ok, converted, what, gotype, index = _flat_convert(v, spec[name])
        if ok:
            opts[name] = converted
        elif error is None:
            if index is None:
                error = "json: cannot unmarshal %s into Go struct field %s.%s of type %s" % (
                    what, struct, key, gotype)      # (the key as written, as Go's path)
            else:  # (an array element: Go names its index)
                error = "json: cannot unmarshal %s into %s.%s.%d of type %s" % (
                    what, struct, key, index, gotype)
    if error is not None:
        raise GoJSONError(error)
    return opts


def _flat_kind(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _flat_convert(v, t):
    """``(ok, value, what, type, index)``: ``what`` and ``type`` name the JSON
    value and the Go type in Go's error, ``index`` the array element."""
    kind = _flat_kind(v)
    if t == "bool":
        return (kind == "bool"), v, kind, t, None
    if t in ("string", "server.SortOpt"):
        return (kind == "string"), v, kind, t, None
    if t in ("int", "uint64", "server.ConnState"):
        if kind != "number":
            return False, None, kind, t, None
        if isinstance(v, float):     # Go parses an int from integer literals only
            return False, None, "number %s" % _number_text(v), t, None
        n = v
        if t == "uint64" and not 0 <= n < 2 ** 64 or t != "uint64" and not -2 ** 63 <= n < 2 ** 63:
            return False, None, "number %s" % _number_text(v), t, None
        return True, n, kind, t, None
    if t == "[]string":
        if kind != "array":
            return False, None, kind, t, None
        for i, x in enumerate(v):
            if x is not None and not isinstance(x, str):
                return False, None, _flat_kind(x), "string", i
        return True, [x or "" for x in v], kind, t, None
    return False, None, kind, t, None


def _number_text(v):
    return v.text if type(v) is _Number else str(v)


def _exact_unmarshal_node(data):
    p = Parser(data)
    i = p.ws(0)
    try:
        with room():
            node, i = p.value(i)
    except EndOfInput:
        raise GoJSONError("unexpected EOF") from None
    except RecursionError:
        raise GoJSONError("exceeded max depth") from None
    return _only_value(data, node, i)


def _only_value(data, node, i):
    i = Parser(data).ws(i)
    if i < len(data):
        raise GoJSONError("invalid character %s after top-level value" % quote_char(data, i)[0])
    return node


def _exact_values(data, i):
    p = Parser(data)
    while True:
        i = p.ws(i)
        if i >= p.n:
            return
        try:
            with room():
                node, i = p.value(i)
        except EndOfInput:
            raise GoJSONError("unexpected EOF") from None
        except RecursionError:
            raise GoJSONError("exceeded max depth") from None
        yield node


# --- Fast path ---------------------------------------------------------------
#
# Building the tree in Python costs ~1 us a value: a 1 MB request body held
# the reactor a third of a second, where nats-server only applies max_payload.
# Syntactically valid input (the common case) is decoded by Python's C decoder
# instead, into plain values that keep what decoding needs: objects as their
# (key, value) pairs in order with duplicates (_Obj), numbers as their literal
# in bytes (Go checks "1.0" for an int; the only bytes in the tree).  It
# agrees with Go's grammar and values except:
#
# * invalid UTF-8 (given to the C decoder as lone surrogates) and \uD800-\uDFFF
#   escapes (Go writes U+FFFD for a lone surrogate, Python keeps it): the
#   surrogates left in decoded strings become U+FFFD (``_go_strings``);
# * NaN/Infinity (accepted by Python only), a top-level number that runs on
#   ("1x"), and any syntax error: Go's error text and offset come from the
#   exact parser, run only from the last complete value before where the C
#   decoder failed (``_error_near``), so a malformed 1 MB body costs a few
#   C-speed passes, not a pure-Python parse of it all; the following values go
#   to the C decoder again;
# * an enum field (nats-server compares its raw bytes) whose raw text cannot be
#   told from the decoded value (a string that had escapes or invalid UTF-8,
#   an object, an array): its text is found in the body by its indexes
#   (``_Locator``, C-speed skips); only if that fails, ``ExactNeeded`` and the
#   body is decoded again from exact nodes.
#
# Nesting: the C decoder recurses once a level against the recursion limit,
# far below Go's 10,000 (checked at run time); a value deeper than that is
# decoded again with the limit raised (``jsonbound.room``) up to the first
# bracket past Go's limit, found with a C-speed count.

class _Obj(list):
    """A JSON object from the C decoder: its (key, value) pairs in order."""
    __slots__ = ()


class ExactNeeded(Exception):
    """The fast path cannot give the exact answer: decode from Parser nodes."""


class _NotGo(ValueError):
    pass


def _not_go(name):
    raise _NotGo(name)


_SCAN = json.JSONDecoder(object_pairs_hook=_Obj, parse_int=str.encode, parse_float=str.encode,
                         parse_constant=_not_go).scan_once
_WS_TEXT = re.compile(r"[ \t\r\n]*")
# \u escapes of the characters of enum values ("-", digits, letters, "_"...).
_WORD_ESCAPE = re.compile(rb"\\u00(?:2[dD]|3[0-9]|[4-7][0-9a-fA-F])")
_SCAN_STRING = json.decoder.scanstring
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _fast_text(data):
    """``data`` as text for the C decoder (invalid UTF-8 bytes as lone
    surrogates, surrogateescape), or None when only the exact parser gives
    Go's answer for it."""
    if sys.getrecursionlimit() > _MAX_DEPTH:
        return None                 # the C decoder could go deeper than Go
    return data.decode("utf-8", "surrogateescape")


def _blen(text):
    """The length in bytes of a piece of ``_fast_text``."""
    return len(text.encode("utf-8", "surrogateescape"))


def _go_strings(value):
    """``value`` (a C decoder value) with the surrogates in its strings, from
    invalid UTF-8 bytes or lone surrogate escapes, as U+FFFD, one each, as Go
    decodes them.  Containers are fixed in place, without recursion."""
    fix = _go_string
    if type(value) is str:
        return fix(value)
    stack = [value] if type(value) in (list, _Obj) else []
    while stack:
        container = stack.pop()
        if type(container) is _Obj:
            for k, (key, item) in enumerate(container):
                if type(item) is str:
                    container[k] = (fix(key), fix(item))
                else:
                    container[k] = (fix(key), item)
                    if type(item) in (list, _Obj):
                        stack.append(item)
        else:
            for k, item in enumerate(container):
                if type(item) is str:
                    container[k] = fix(item)
                elif type(item) in (list, _Obj):
                    stack.append(item)
    return value


def _go_string(text):
    if _SURROGATES.search(text) is None:
        return text
    return _SURROGATES.sub("\ufffd", text)


def _fast_values(data, text, lossy=False):
    ascii_only = len(text) == len(data)
    i, n = 0, len(text)
    known_i = known_b = 0              # a char index and its byte offset
    while True:
        i = _WS_TEXT.match(text, i).end()
        if i >= n:
            return
        try:
            value, end = _SCAN(text, i)
            # The C decoder ends a number where its pattern stops ("1" of
            # "1.", "0" of "01"); Go's scanner reads on and fails.
            if type(value) is bytes and end < n and text[end] not in " \t\r\n":
                raise _NumberRunsOn()
        except (StopIteration, ValueError, RecursionError) as refused:
            if not ascii_only:
                known_b += _blen(text[known_i:i])
                known_i = i
            start = i if ascii_only else known_b
            value, end_b = _refused_value(data, text, i, start, refused)
            if type(value) is _Node:
                end = end_b if ascii_only else \
                    i + len(data[start:end_b].decode("utf-8", "surrogateescape"))
                yield value
                i = end
                continue
            end = end_b              # the C decoder took it after all (deep nesting)
        at, i = i, end
        if lossy:
            value = _go_strings(value)
        kind, value = unpack(value)
        yield _Node(kind, value, None, None, at)


class _NumberRunsOn(ValueError):
    pass


def _refused_value(data, text, i, start, refused):
    """The value at ``text[i]`` (byte ``start``) that the C decoder refused:
    ``(C decoder value, end char)`` if it takes it with more recursion,
    else ``(node, end byte)`` from the exact parser; raises Go's syntax error.

    The exact parser, about a microsecond a value, only parses from shortly
    before where the C decoder failed (see :func:`_error_near`): a 1 MB body
    with its last byte wrong costs a few C-speed passes, not a third of a
    second (tools/bench/gojson.py)."""
    stop = None                      # a byte offset the error is at or before
    if type(refused) is RecursionError:
        # Nested deeper than the recursion limit allows the C decoder: let it
        # go to Go's limit (its C stack use is bounded, see jsonbound), and
        # no further (the bracket past it is where Go stops).
        too_deep = jsonbound.too_deep_at(data[start:])
        cut = len(text) if too_deep is None else \
            i + len(data[start:start + too_deep - 1].decode("utf-8", "surrogateescape"))
        try:
            with jsonbound.room(_MAX_DEPTH + 50):
                return _SCAN(text[:cut], i)
        except (StopIteration, ValueError) as e:
            refused = e
        except RecursionError:
            refused = None
    if type(refused) is json.JSONDecodeError:
        stop = start + _blen(text[i:refused.pos])
    elif type(refused) is StopIteration:
        stop = start + _blen(text[i:refused.value])
    elif type(refused) is _NotGo:    # NaN or Infinity: Go fails at its letter
        stop = start + _BEFORE_NOT_GO_LETTER.match(_neutral(data[start:])).end()
    if stop is not None:
        _error_near(data, start, stop)
    p = Parser(data)
    try:
        with room():
            return p.value(start)
    except EndOfInput:
        raise GoJSONError("unexpected EOF") from None
    except RecursionError:
        raise GoJSONError("exceeded max depth") from None


# Outside strings up to the first N or I (in _neutral text).
_BEFORE_NOT_GO_LETTER = re.compile(rb'[^"NI]*(?:"[^"]*"[^"NI]*)*')
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


def _error_near(data, start, stop):
    """Raise Go's syntax error for the value at byte ``start``, which the C
    decoder refused at ``stop``, by parsing exactly only from the last point
    before ``stop`` that follows a complete value (a ``,`` or just after a
    closing bracket, outside strings), in the containers open there.

    The C decoder reads left to right and stops at the first byte its grammar
    refuses (or, for an unterminated string, at the string's start; NaN and
    Infinity are found by the caller): everything before ``stop`` is a valid
    beginning of a value in Go's grammar too (invalid UTF-8, as lone
    surrogates, is accepted in strings only, as Go does).  So the exact parser,
    run from ``start``, would reach that point without error, in the
    containers a bracket count outside strings finds, and resuming there gives
    its answer.  Returns (the caller then parses the whole value) when there
    is no such point."""
    plain = _neutral(data[start:stop])
    q = _last_after_value(plain)
    if q is None or plain[:q].rstrip(_WS)[-1:] in (b"[", b"{"):
        return                        # "[," is not after a value
    opens = _open_brackets(b"".join(plain[:q].split(b'"')[::2]))
    if opens is None:
        return
    p = Parser(data)
    try:
        with room():
            p.resume(start + q, opens)
    except EndOfInput:
        raise GoJSONError("unexpected EOF") from None
    except RecursionError:
        raise GoJSONError("exceeded max depth") from None


def _neutral(data):
    """``data`` with its escaped backslashes and quotes turned into other
    bytes (same length): every ``"`` left opens or closes a string, so the
    structure outside strings is found with C-speed searches."""
    return data.replace(b"\\\\", b"__").replace(b'\\"', b"__")


def _last_after_value(plain, tries=4):
    """The offset of the last ``,`` or the one after the last closing bracket
    outside strings in ``plain`` (a ``_neutral`` text), or None.  Looks back
    over a few strings only: in valid JSON there is one at most two strings
    back (``"k":"v",``)."""
    end = len(plain)
    if plain.count(b'"') % 2:
        end = plain.rfind(b'"')       # in a string: look before it
    for _ in range(tries):
        begin = plain.rfind(b'"', 0, end) + 1
        q = max(plain.rfind(b",", begin, end), plain.rfind(b"]", begin, end) + 1,
                plain.rfind(b"}", begin, end) + 1)
        if q > 0:
            return q
        if begin == 0:
            return None
        end = plain.rfind(b'"', 0, begin - 1)      # skip that string
        if end < 0:
            return None
    return None


def _open_brackets(plain):
    """The opening brackets still open at the end of ``plain`` (JSON text
    without its strings), outermost first; None when the brackets do not
    nest, none is open, or they go deeper than Go allows."""
    brackets = plain.translate(None, _NOT_BRACKETS)
    if not brackets:
        return None
    levels = array.array("i", itertools.accumulate(
        array.array("b", brackets.translate(jsonbound.LEVEL_STEPS))))
    top, deepest = levels[-1], max(levels)
    if top <= 0 or deepest > _MAX_DEPTH or min(levels) < 0:
        return None
    # The bracket that opened level k is the one after the last point at
    # level k - 1 (searched from the end, C-speed).
    backwards = levels[::-1]
    n, at, opens = len(levels), 0, bytearray()
    for k in range(top, 0, -1):
        try:
            at = backwards.index(k - 1, at)
            opener = n - at
        except ValueError:
            opener = 0
        if brackets[opener] not in b"[{":
            return None
        opens.append(brackets[opener])
    opens.reverse()
    return bytes(opens)


def unpack(node):
    """``(kind, value)`` of a parser ``_Node`` or of a C decoder value."""
    t = type(node)
    if t is _Node:
        return node.kind, node.value
    if t is str:
        return "string", node
    if t is _Obj:
        return "object", node
    if t is list:
        return "array", node
    if t is bytes:
        return "number", node.decode("ascii")
    if node is None:
        return "null", None
    return ("true" if node else "false"), None


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


class EnumType(GoType):
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


class CompressionType(GoType):
    """``StoreCompression``: its UnmarshalJSON takes a string (or null for
    none) and has its own error for anything it does not know."""

    def __init__(self, name, values):
        self.name, self.values = name, values


class SliceType(GoType):
    nullable = True

    def __init__(self, elem, name):
        self.elem, self.name = elem, name


class _Map(GoType):
    nullable = True

    def __init__(self, elem, name):
        self.elem, self.name = elem, name


class StructType(GoType):
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
STRINGS = SliceType(STRING, "[]string")
STRING_MAP = _Map(STRING, "map[string]string")
UINT64S = SliceType(UINT64, "[]uint64")


def Ptr(cls):
    return StructType(cls, pointer=True)


def Struct(cls):
    return StructType(cls, pointer=False)


def SliceOf(elem, name=None):
    if name is None:
        name = "[]" + ("*" if getattr(elem, "pointer", False) else "") + elem.name
    return SliceType(elem, name)


KIND_NAMES = {"object": "object", "array": "array", "string": "string",
              "number": "number", "true": "bool", "false": "bool"}


class Decoder:
    def __init__(self, data, root, lenient=False):
        self.data = data
        self.root = root
        self.lenient = lenient  # json.Unmarshal: unknown fields are skipped
        self.locator = None
        self._word_escapes = None

    def type_error(self, node, gotype, path, value=None):
        what = value or KIND_NAMES[unpack(node)[0]]
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

    def raw(self, node, where):
        """The node's JSON text, as nats-server's UnmarshalJSON gets it.

        ``where`` locates a C decoder value: the offset of the top-level value
        in ``_fast_text(data)`` and the member/element indexes down to it
        (None: ``ExactNeeded``).  What cannot be told from the decoded value
        (a string that had escapes or invalid UTF-8, an object, an array) is
        read from the text (``_Locator``)."""
        if type(node) is _Node and node.start is not None:
            return self.data[node.start:node.end]
        kind, value = unpack(node)
        if kind == "number":
            return value.encode("ascii")
        if kind in ("true", "false", "null"):
            return kind.encode("ascii")
        if kind == "string" and b"\\" not in self.data and "\ufffd" not in value:
            return b'"' + value.encode("utf-8") + b'"'
        if where is None:
            raise ExactNeeded()
        if self.locator is None:
            self.locator = _Locator(self.data)
        return self.locator.raw(where)

    def enum(self, node, gotype, where):
        kind, value = unpack(node)
        if kind == "string" and type(node) is not _Node and "\ufffd" not in value \
                and not self.word_escapes():
            # A string with escapes decodes to a valid value only if it
            # escapes a letter, digit, "_" or "-" (none here): a match is
            # exact without looking for the raw text; the error text needs it.
            try:
                return gotype.decode(b'"' + value.encode("utf-8") + b'"')
            except GoJSONError:
                if b"\\" not in self.data:
                    raise
        return gotype.decode(self.raw(node, where))

    def word_escapes(self):
        if self._word_escapes is None:
            self._word_escapes = b"\\u" in self.data and bool(_WORD_ESCAPE.search(self.data))
        return self._word_escapes

    def decode(self, node, gotype, current, path, where=None):
        """Decode ``node`` as ``gotype`` onto ``current``; returns the new value.

        Structs decode to dicts keyed by attribute name (merged into a dict
        already there), built into attrs instances at the end.  ``where``:
        see :meth:`raw`.
        """
        kind, value = unpack(node)
        if isinstance(gotype, EnumType):
            return self.enum(node, gotype, where)
        if isinstance(gotype, CompressionType):
            if kind == "null":
                s = ""
            elif kind != "string":
                raise GoJSONError("json: cannot unmarshal %s into Go value of type string"
                                  % KIND_NAMES[kind])
            else:
                s = value
            if s not in gotype.values:
                raise GoJSONError("unknown compression algorithm")
            return s
        if kind == "null":
            return None if gotype.nullable else current
        if isinstance(gotype, _Str):
            if kind != "string":
                self.type_error(node, gotype, path)
            return value
        if isinstance(gotype, _Bool):
            if kind not in ("true", "false"):
                self.type_error(node, gotype, path)
            return kind == "true"
        if isinstance(gotype, _Int):
            if kind != "number":
                self.type_error(node, gotype, path)
            v = gotype.convert(value)
            if v is None:
                self.type_error(node, gotype, path, "number " + value)
            return v
        if isinstance(gotype, _Time):
            if kind != "string":
                self.type_error(node, gotype, path)
            try:
                ns, offset = go_parse_rfc3339(value)
            except ValueError as e:
                raise GoJSONError(str(e)) from None
            return rfc3339(ns, offset, zero_is_unset=False)
        if isinstance(gotype, SliceType):
            if kind != "array":
                self.type_error(node, gotype, path)
            if gotype.elem is STRING and type(value) is list and _all_str(value):
                return list(value)          # C decoder strings: nothing to check
            return [self.decode(item, gotype.elem, zero_value(gotype.elem), path + [str(k)],
                                _inside(where, k))
                    for k, item in enumerate(value)]
        if isinstance(gotype, _Map):
            if kind != "object":
                self.type_error(node, gotype, path)
            out = dict(current) if current else {}
            if gotype.elem is STRING and type(value) is _Obj and _all_str(v for _, v in value):
                out.update(value)           # a later duplicate wins, as in the loop
                return out
            for k, (key, item) in enumerate(value):
                out[key] = self.decode(item, gotype.elem, out.get(key, ""), path + [key],
                                       _inside(where, k))
            return out
        if isinstance(gotype, StructType):
            if kind != "object":
                self.type_error(node, gotype, path)
            return self.struct(node, gotype.cls, current, path, where)
        raise AssertionError(gotype)

    def struct(self, node, cls, current, path, where=None):
        if where is None and type(node) is _Node and node.at is not None:
            where = (node.at,)
        out = dict(current) if current else {}
        fields = go_fields(cls)
        for k, (key, item) in enumerate(unpack(node)[1]):
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
            default = out.get(f.name, zero_value(gotype))
            out[f.name] = self.decode(item, gotype, default, path + [key], _inside(where, k))
        return out


def _inside(where, index):
    return None if where is None else where + (index,)


class _Locator:
    """Finds a C decoder value's JSON text in the body by its indexes, with
    C-speed skips (the decoder's scanner) over the members before it; each
    container's member offsets are found once."""

    def __init__(self, data):
        self.text = _fast_text(data)
        self.starts = {}

    def raw(self, where):
        text = self.text
        try:
            with jsonbound.room(_MAX_DEPTH + 50):
                i = where[0]
                for index in where[1:]:
                    starts = self.starts.get(i)
                    if starts is None:
                        starts = self.starts[i] = self._member_starts(i)
                    i = starts[index]
                _, end = _SCAN(text, i)
        except (StopIteration, ValueError, IndexError, RecursionError, TypeError):
            raise ExactNeeded() from None
        return text[i:end].encode("utf-8", "surrogateescape")

    def _member_starts(self, i):
        text = self.text
        is_object = text[i] == "{"
        out = []
        j = _WS_TEXT.match(text, i + 1).end()
        if text[j] in "]}":
            return out
        while True:
            if is_object:
                _, j = _SCAN_STRING(text, j + 1)
                j = _WS_TEXT.match(text, j).end() + 1           # the ":"
                j = _WS_TEXT.match(text, j).end()
            out.append(j)
            _, j = _SCAN(text, j)
            j = _WS_TEXT.match(text, j).end()
            if text[j] != ",":
                return out
            j = _WS_TEXT.match(text, j + 1).end()


def _all_str(values):
    return all(type(v) is str for v in values)


def zero_value(gotype):
    """Go's zero value of ``gotype`` (what a JSON null leaves in a fresh slot)."""
    if isinstance(gotype, StructType) and not gotype.pointer:
        return {}
    if isinstance(gotype, _Str):
        return ""
    if isinstance(gotype, _Int):
        return 0
    if isinstance(gotype, _Bool):
        return False
    return None


def go_fields(cls):
    cache = cls.__dict__.get("_go_field_cache")
    if cache is None:
        cache = {f.name: f for f in attrs.fields(cls) if "go" in f.metadata}
        cls._go_field_cache = cache
    return cache


def decode_fields(data, cls):
    """Decode ``data`` (bytes) for ``cls`` as nats-server's strict decoder does:
    the fields as a dict keyed by attribute name (nested structs as dicts too),
    for the converter to build ``cls`` from.  Raises ``GoJSONError``; an empty
    (or all white space) body gives ``{}``."""
    try:
        return _decode_fields(data, cls, fast=True)
    except ExactNeeded:
        return _decode_fields(data, cls, fast=False)


def _decode_fields(data, cls, fast):
    dec = Decoder(data, cls)
    top = Struct(cls)
    fields = {}
    for node in parse_json_values(data, fast):
        if node.kind == "null":
            continue
        if node.kind != "object":
            raise GoJSONError("json: cannot unmarshal %s into Go value of type %s"
                              % (KIND_NAMES[node.kind], top.name))
        fields = dec.struct(node, cls, fields, [])
    return fields


def unmarshal_fields(data, cls):
    """``decode_fields`` as Go's plain ``json.Unmarshal`` does it (what
    nats-server uses for direct gets): unknown fields are ignored, the body must
    be exactly one JSON value; ``null`` gives None (the zero values).  Raises
    ``GoJSONError`` on anything else."""
    try:
        return _unmarshal_fields(data, cls, fast=True)
    except ExactNeeded:
        return _unmarshal_fields(data, cls, fast=False)


def _unmarshal_fields(data, cls, fast):
    nodes = list(parse_json_values(data, fast))
    if len(nodes) != 1:
        raise GoJSONError("unexpected end of JSON input" if not nodes
                          else "invalid character after top-level value")
    node = nodes[0]
    if node.kind == "null":
        return None
    if node.kind != "object":
        raise GoJSONError("json: cannot unmarshal %s into Go value of type %s"
                          % (KIND_NAMES[node.kind], Struct(cls).name))
    return Decoder(data, cls, lenient=True).struct(node, cls, {}, [])


def is_json_object_or_array(raw):
    """nats-server's ``isJSONObjectOrArray``: the first byte after JSON white
    space is ``{`` or ``[``. The requests that take optional options (INFO,
    NAMES, LIST, PURGE, the stepdowns, consumer NAMES/LIST/PAUSE) parse the
    body only then; any other body counts as none."""
    raw = bytes(raw or b"").lstrip(b" \t\n\r")
    return raw[:1] in (b"{", b"[")


def is_empty_request(raw):
    """nats-server's ``isEmptyRequest``: no body, ``{}``, or a single valid JSON
    object without members (``{ }``). Any other value (``null``, ``5``,
    ``[]``, ``"x"``) is not empty: Go's ``v.(map[string]any)`` fails on it.
    STREAM.DELETE answers those with ``not_empty_request()`` (10038)."""
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
    return node.kind == "object" and not node.value
