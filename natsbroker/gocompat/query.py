"""Query strings as nats-server's Go code decodes them.

nats-server's monitoring handlers read options with ``r.URL.Query().Get(name)``
and ``strconv.ParseBool`` / ``strconv.Atoi`` / ``strconv.ParseUint``, and
answer a bad value with 400 and the Go error text.  This module is that
decoding, for the monitor and for plugins' endpoints alike:

- :func:`parse_query` is ``url.ParseQuery``: pairs split on ``&`` only, a
  pair holding ``;`` or a bad ``%`` escape is dropped, ``+`` is a space, and
  ``%XX`` gives the byte XX (a byte that is not UTF-8 is kept, as a
  ``surrogateescape`` code point, so ``%q`` shows it as Go does: ``"\\xff"``).
- :func:`query_values` is ``r.URL.Query().Get``: the first value of each name.
- :func:`go_bool`, :func:`go_int`, :func:`go_uint64` parse one option as the
  handlers do, raising :class:`QueryError` with nats-server's text.
"""

import re

from natsbroker.gocompat.quote import go_quote

__all__ = ["QueryError", "go_bool", "go_int", "go_uint64", "parse_query", "query_unescape",
           "query_values"]


class QueryError(ValueError):
    """A bad query option; ``str()`` is nats-server's 400 text."""


_HEX = "0123456789abcdefABCDEF"


def query_unescape(text):
    """Go's ``url.QueryUnescape`` of ``text`` (str or bytes): a ``str`` whose
    non-UTF-8 bytes are ``surrogateescape`` code points; ValueError for a
    ``%`` not followed by two hex digits."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogateescape")
    out = bytearray()
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == 0x25:  # %
            h = text[i + 1:i + 3]
            if len(h) < 2 or chr(h[0]) not in _HEX or chr(h[1]) not in _HEX:
                raise ValueError("invalid URL escape %s" % go_quote(text[i:i + 3]))
            out.append(int(h, 16))
            i += 3
        else:
            out.append(0x20 if c == 0x2B else c)  # '+' is a space in a query
            i += 1
    return out.decode("utf-8", "surrogateescape")


def parse_query(raw):
    """Go's ``url.ParseQuery`` of a raw query string (str or bytes):
    ``{name: [values...]}``, leaving out what Go leaves out (its error is
    not reported: ``r.URL.Query()`` ignores it too)."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    found = {}
    for pair in raw.split(b"&"):
        if not pair or b";" in pair:
            continue
        key, _, value = pair.partition(b"=")
        try:
            key, value = query_unescape(key), query_unescape(value)
        except ValueError:
            continue
        found.setdefault(key, []).append(value)
    return found


def query_values(uri):
    """``r.URL.Query().Get``: the query string of a request URI (never a POST
    body) as ``{name: first value}``; a missing name reads as ``""``."""
    if isinstance(uri, str):
        uri = uri.encode("utf-8", "surrogateescape")
    return {k: v[0] for k, v in parse_query(uri.partition(b"?")[2]).items()}


_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_UINT_RE = re.compile(r"[0-9]+\Z")


def go_bool(query, name):
    """nats-server's ``decodeBool``: "" is false, else ``strconv.ParseBool``."""
    s = query.get(name, "")
    if s == "" or s in _GO_FALSE:
        return False
    if s in _GO_TRUE:
        return True
    raise QueryError("Error decoding boolean for '%s': strconv.ParseBool: parsing %s: "
                     "invalid syntax" % (name, go_quote(s)))


def go_int(query, name):
    """nats-server's ``decodeInt``: "" is 0, else ``strconv.Atoi`` (int64)."""
    s = query.get(name, "")
    if s == "":
        return 0
    if not _INT_RE.match(s):
        why = "invalid syntax"
    elif not -2**63 <= int(s) < 2**63:
        why = "value out of range"
    else:
        return int(s)
    raise QueryError("Error decoding int for '%s': strconv.Atoi: parsing %s: %s"
                     % (name, go_quote(s), why))


def go_uint64(query, name):
    """nats-server's ``decodeUint64``: "" is 0, else ``strconv.ParseUint``."""
    s = query.get(name, "")
    if s == "":
        return 0
    if not _UINT_RE.match(s):
        why = "invalid syntax"
    elif int(s) >= 2**64:
        why = "value out of range"
    else:
        return int(s)
    raise QueryError("Error decoding uint64 for '%s': strconv.ParseUint: parsing %s: %s"
                     % (name, go_quote(s), why))
