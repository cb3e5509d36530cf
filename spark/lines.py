"""One change-feed line -> a record or the reason it is quarantined, in Python.

The rules are spark/records.py's (the JVM parse), line for line, so that the
ingest gives the same rows and the same quarantine reasons whichever parser
ran; tests/test_spark_lines.py runs both on the same lines and compares.
This is the slow, exact path of spark/fileparse.py: it runs on the files
whose lines the vectorized pyarrow path cannot vouch for (a bad line, a
blank line, a CR, a value of an unexpected JSON type).

What the JVM parse does, and so this module:

* the line is what lies between two ``\\n``, one trailing CR dropped; blank
  when nothing but spaces (U+0020) remain;
* the first JSON value on the line is parsed (strict JSON: no NaN, no single
  quotes, no leading zeros); anything after it is only looked at by the
  "ends with ``}``" check;
* top-level string fields must be JSON strings (or null); integer fields must
  be integers within 64 bits; ``headers`` an object of arrays; ``purge``,
  ``kv``, ``obj`` objects whose integer members are integers. String members
  inside those objects and header values take any JSON value, kept as its
  JSON text (Spark's JSON reader does the same);
* ``data`` is base64, spaces inside ignored (Spark's ``try_to_binary``).
"""

import binascii
import decimal
import json
import re

OPS = ("put", "delete", "purge", "stream_create", "stream_update", "stream_delete")
FEED_VERSIONS = (1,)
REQUIRED = ("id", "stream", "op", "seq")
STRING_FIELDS = ("id", "stream", "op", "reason", "subject", "data", "config")
PURGE_FIELDS = (("filter", "string"), ("upto_seq", "long"), ("keep", "long"))
KV_FIELDS = (("bucket", "string"), ("key", "string"), ("operation", "string"),
             ("revision", "long"))
OBJ_FIELDS = (("bucket", "string"), ("object", "string"), ("event", "string"),
              ("nuid", "string"), ("size", "long"), ("digest", "string"))
FIELDS = (
    ("id", "string"), ("feed", "long"), ("stream", "string"), ("stream_created", "long"),
    ("seq", "long"), ("op", "string"), ("reason", "string"), ("ts", "long"),
    ("subject", "string"), ("headers", "headers"), ("data", "string"),
    ("purge", PURGE_FIELDS), ("config", "string"), ("kv", KV_FIELDS), ("obj", OBJ_FIELDS),
)
FIELDS_BY_NAME = dict(FIELDS)
_OPSET = frozenset(OPS)
_KIND_TEXT = {"string": "a string", "long": "an integer"}
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_B64_CHARS = re.compile(r"[A-Za-z0-9+/]*\Z")
_B64_WS_SET = frozenset(" \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f")  # Java's isWhitespace, ASCII
_B64_WS = {ord(c): None for c in _B64_WS_SET}
_B64_WS_RE = re.compile("[%s]" % re.escape("".join(sorted(_B64_WS_SET))))
_WS = " \t\r\n"


class _Raw:
    """A JSON number kept as its text (Spark's reader keeps the token's text
    when a string field is given a number)."""
    __slots__ = ("text", "value")

    def __init__(self, text, value):
        self.text = text
        self.value = value


def _float(text):
    return _Raw(text, float(text))


def _constant(name):
    raise ValueError("non-numeric number %s" % name)  # NaN, Infinity: not JSON


_DECODER = json.JSONDecoder(parse_float=_float, parse_constant=_constant)


def _jtype(v):
    """The name diagnose() gives a value's JSON type (records._type_text)."""
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        if _LONG_MIN <= v <= _LONG_MAX:
            return "integer"
        # VARIANT keeps integers up to 38 digits as DECIMAL(n,0), longer ones as DOUBLE
        return "an out-of-range integer" if len(str(abs(v))) <= 38 else "number"
    if isinstance(v, _Raw):
        # VARIANT: an exponent makes a DOUBLE; a fraction a DECIMAL, whose
        # trailing zeros are dropped, so 1.0 is DECIMAL(1,0) like an integer
        # too large for 64 bits
        if "e" in v.text or "E" in v.text:
            return "number"
        d = decimal.Decimal(v.text)
        if d == d.to_integral_value() and len(str(abs(int(d)))) <= 38:
            return "an out-of-range integer"
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, dict):
        return "object"
    if isinstance(v, list):
        return "array"
    return "null"


def _is_long(v):
    return type(v) is int and _LONG_MIN <= v <= _LONG_MAX


def _text(v):
    """A value as Spark's reader stores it in a string field: strings as they
    are, anything else as its compact JSON text."""
    if isinstance(v, str):
        return v
    if isinstance(v, _Raw):
        return _java_double(v.value)
    if v is True:
        return "true"
    if v is False:
        return "false"
    return json.dumps(_plain(v), separators=(",", ":"), ensure_ascii=False)


def _java_double(f):
    """A JSON number with a fraction or exponent as Spark's reader writes it
    into a string field: Java's Double.toString (a quoted "Infinity" when it
    overflows)."""
    if f != f or f in (float("inf"), float("-inf")):
        return '"%s"' % ("Infinity" if f > 0 else "-Infinity" if f < 0 else "NaN")
    if f == 0:
        return "-0.0" if str(f).startswith("-") else "0.0"
    if 1e-3 <= abs(f) < 1e7:
        return repr(f)
    sign, digits, exp = decimal.Decimal(repr(f)).as_tuple()
    digits = "".join(map(str, digits)).rstrip("0") or "0"
    e = len("".join(map(str, decimal.Decimal(repr(f)).as_tuple()[1]))) + exp - 1
    return "%s%s.%sE%d" % ("-" if sign else "", digits[0], digits[1:] or "0", e)


def _plain(v):
    if isinstance(v, _Raw):
        return v.value
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def b64decode(text):
    """Spark's try_to_binary(text, 'base64'), None when it gives null:
    whitespace is ignored before the padding, the padding may be left out
    but not be wrong (tests/test_spark_lines.py pins the cases down)."""
    body = text.rstrip("=")
    pad = len(text) - len(body)
    if pad > 2:
        return None
    chars = body.translate(_B64_WS) if _B64_WS_RE.search(body) else body
    if not _B64_CHARS.match(chars):
        return None
    n = len(chars)
    if (n % 4 == 1) if pad == 0 else ((n + pad) % 4 != 0):
        return None
    return binascii.a2b_base64(chars + "=" * (-n % 4))


def strip_cr(raw):
    """records.split_lines' regexp_replace(raw, '\\r$', ''): Java's ``$`` also
    matches before a line terminator that ends the input, so a CR just before
    the last character goes too when that character is a CR, U+0085, U+2028
    or U+2029."""
    if len(raw) >= 2 and raw[-2] == "\r" and raw[-1] in "\r\x85\u2028\u2029":
        raw = raw[:-2] + raw[-1]
    if raw.endswith("\r"):
        raw = raw[:-1]
    return raw


def is_blank(raw):
    return raw.strip(" ") == ""


def _first_object(raw):
    """(parsed first JSON value or None, error or None)."""
    s = raw.lstrip(_WS)
    if not s:
        # no JSON value at all: from_json gives null, not a corrupt record,
        # and the line then fails the check that it ends with '}'
        return None, "invalid JSON: trailing characters after the object"
    try:
        value, _ = _DECODER.raw_decode(s)
    except (ValueError, RecursionError):
        return None, "invalid JSON"
    if not isinstance(value, dict):
        try:
            _DECODER.decode(s)
        except (ValueError, RecursionError):
            return None, "invalid JSON"
        return None, "not a JSON object"
    return value, None


def _struct_ok(v, members):
    """A typed object as the fast parse reads it: integer members must be integers."""
    if not isinstance(v, dict):
        return False
    for name, kind in members:
        x = v.get(name)
        if x is not None and kind == "long" and not _is_long(x):
            return False
    return True


def _headers_ok(v, null_values=False):
    """An object of arrays; the fast parse takes a null array too (kept as a
    null value), diagnose() does not (it only runs when something else is wrong)."""
    return isinstance(v, dict) and all(isinstance(x, list) or (null_values and x is None)
                                       for x in v.values())


def check(raw):
    """One non-blank line -> (record dict, None) or (None, error).

    The record holds the RECORD_SCHEMA fields (absent ones None), ``data``
    decoded to bytes, ``feed`` an int."""
    o, err = _first_object(raw)
    if err is not None:
        return None, err
    if not raw.rstrip(" ").endswith("}"):
        return None, "invalid JSON: trailing characters after the object"
    ok = True
    for name in STRING_FIELDS:
        v = o.get(name)
        if v is not None and not isinstance(v, str):
            ok = False
    for name in ("feed", "stream_created", "seq", "ts"):
        v = o.get(name)
        if v is not None and not _is_long(v):
            ok = False
    h = o.get("headers")
    if h is not None and not _headers_ok(h, null_values=True):
        ok = False
    for name, members in (("purge", PURGE_FIELDS), ("kv", KV_FIELDS), ("obj", OBJ_FIELDS)):
        v = o.get(name)
        if v is not None and not _struct_ok(v, members):
            ok = False
    data = None
    if ok:
        for name in ("id", "stream"):
            if not o.get(name):
                ok = False
        if o.get("seq") is None or o.get("op") not in _OPSET:
            ok = False
        if o.get("feed") is not None and o["feed"] not in FEED_VERSIONS:
            ok = False
        if o.get("data") is not None:
            data = b64decode(o["data"])
            if data is None:
                ok = False
    if not ok:
        return None, diagnose(o)
    return _record(o, data), None


def _record(o, data):
    rec = {}
    for name, kind in FIELDS:
        v = o.get(name)
        if v is None:
            rec[name] = None
        elif name == "data":
            rec[name] = data
        elif kind == "headers":
            rec[name] = [(k, None if vs is None else [None if x is None else _text(x)
                                                      for x in vs])
                         for k, vs in v.items()]
        elif isinstance(kind, tuple):
            rec[name] = {m: (None if v.get(m) is None else
                             (v[m] if mk == "long" else _text(v[m])))
                         for m, mk in kind}
        else:
            rec[name] = v
    return rec


def diagnose(o):
    """The first problem of a parsed object the fast parse refused, in
    records.diagnose()'s order and words."""
    for name in REQUIRED:
        if o.get(name) is None:
            return "missing required field '%s'" % name
    for name, kind in FIELDS:
        v = o.get(name)
        if v is None:
            continue
        if kind in ("string", "long"):
            if not (isinstance(v, str) if kind == "string" else _is_long(v)):
                return "field '%s' must be %s, got %s" % (name, _KIND_TEXT[kind], _jtype(v))
        elif kind == "headers":
            if not _headers_ok(v):
                t = _jtype(v)
                return "field 'headers' must be an object of string arrays" + (
                    "" if t == "object" else ", got " + t)
        else:
            if not isinstance(v, dict):
                return "field '%s' must be an object, got %s" % (name, _jtype(v))
            for member, mk in kind:
                x = v.get(member)
                if x is None:
                    continue
                if not (isinstance(x, str) if mk == "string" else _is_long(x)):
                    return "field '%s.%s' must be %s, got %s" % (
                        name, member, _KIND_TEXT[mk], _jtype(x))
    for name in ("id", "stream", "op"):
        if o[name] == "":
            return "field '%s' is empty" % name
    if o["op"] not in _OPSET:
        return 'unknown op "%s"' % o["op"]
    feed = o.get("feed")
    if feed is not None and feed not in FEED_VERSIONS:
        return "unsupported feed format version %d" % feed
    if o.get("data") is not None and b64decode(o["data"]) is None:
        return "field 'data' is not valid base64"
    return "record does not match the feed schema"
