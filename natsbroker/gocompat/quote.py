"""Go's ``strconv.Quote`` (what ``%q`` prints), the one copy.

nats-server quotes client-supplied subjects, names, query values and URLs
with ``%q`` in its -ERR texts, log lines and API errors, so natsbroker's
must quote them the same way: Go keeps every printable character (non-ASCII
too), uses the short escapes ``\\a \\b \\f \\n \\r \\t \\v``, ``\\xNN`` for other
ASCII controls and for bytes that are not UTF-8, and ``\\uNNNN`` /
``\\UNNNNNNNN`` for the remaining unprintable code points.  (JSON's escapes,
``\\u0001`` or ``\\u00e9``, are not Go's.)
"""

__all__ = ["go_quote", "time_quote"]

_GO_SHORT_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n",
                     "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(value, quote='"'):
    """Go's ``strconv.Quote`` (``%q``): a double-quoted Go string literal.

    ``value`` may be ``str`` or ``bytes``; bytes that are not UTF-8 (in a
    ``str``, the ``surrogateescape`` code points that stand for them) come
    out as ``\\xNN`` like Go's.  Printable characters (letters, marks,
    numbers, punctuation, symbols, ASCII space: Go's ``unicode.IsPrint``,
    which is Python's ``str.isprintable``) are kept, the rest escaped.
    ``quote="'"`` gives the body of Go's ``strconv.QuoteRune``.
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value).decode("utf-8", "surrogateescape")
    out = [quote]
    for ch in value:
        o = ord(ch)
        if ch == quote or ch == "\\":
            out.append("\\" + ch)
        elif 0xDC80 <= o <= 0xDCFF:            # an undecodable byte
            out.append("\\x%02x" % (o - 0xDC00))
        elif 0xD800 <= o <= 0xDFFF:            # a lone surrogate: Go has none, it is U+FFFD
            out.append("\ufffd")
        elif ch.isprintable():
            out.append(ch)
        elif ch in _GO_SHORT_ESCAPES:
            out.append(_GO_SHORT_ESCAPES[ch])
        elif o < 0x20 or o == 0x7F:
            out.append("\\x%02x" % o)
        elif o < 0x10000:
            out.append("\\u%04x" % o)
        else:
            out.append("\\U%08x" % o)
    out.append(quote)
    return "".join(out)


def time_quote(b):
    """Go's ``time.quote`` (its duration and time-parsing errors use it, not
    ``strconv.Quote``): ASCII kept, ``"`` and ``\\`` escaped, and each byte
    of a control or non-ASCII character as ``\\xNN``."""
    if isinstance(b, str):
        b = b.encode("utf-8", "surrogateescape")
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
