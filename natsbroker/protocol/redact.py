"""Secrets out of a traced CONNECT (``-V``): passwords, tokens, signatures.

nats-server's removeSecretsFromTrace replaces, with ``[REDACTED]``, the value
of every field whose name starts with ``pass`` or ``auth_token``, and of
``sig``, ``proxy_sig`` and ``nkey``: two regular expressions, whose value
ends at the next quote, comma, brace or line end. That is what we do too,
byte for byte, so a traced CONNECT reads the same on both servers.

The expressions alone leak what a JSON reader would take as the secret: a
password with an escaped quote or a comma in it (``"pass":"a\\"b"`` shows
``b"``), a key written with escapes (``"p\\u0061ss"``) or in another case
(``"PASS"``: Go's encoding/json matches field names case-insensitively).
So first the CONNECT is read as JSON, leniently (it may be malformed: it is
traced before it is parsed), and the whole value of every key that names
a secret, once decoded and case-folded, is replaced; the expressions then
run over the result.
"""

import json
import re
from json.decoder import scanstring

REDACTED = "[REDACTED]"

# nats-server's prefixAuthPat and exactAuthPat (client.go); Go's \s is
# [\t\n\f\r ] (not \v).
_SP = rb"[\t\n\f\r ]"
_PREFIX_AUTH = re.compile(rb'"?' + _SP + rb'*(?:auth_token[^\t\n\f\r ]*?|pass[^\t\n\f\r ]*?)"?'
                          + _SP + rb"*[:=]" + _SP + rb'*"?([^",\r\n}]*)')
_EXACT_AUTH = re.compile(rb'(?:^|[^A-Za-z0-9_])"?' + _SP + rb"*(?:proxy_sig|nkey|sig)\"?" + _SP
                         + rb'*[:=]' + _SP + rb'*"?([^",\r\n}]*)')

_SECRET_NAMES = frozenset(("sig", "proxy_sig", "nkey"))
_SECRET_PREFIXES = ("pass", "auth_token")
_JSON_WS = " \t\n\r"
_DECODER = json.JSONDecoder()
_NOT_JSON_VALUE = re.compile(r'[^,\r\n}]*')


def redact_secrets(arg):
    """``arg`` (a CONNECT's JSON, bytes) with every secret value replaced by
    ``[REDACTED]``."""
    text = arg.decode("utf-8", "surrogateescape")
    for start, end in reversed(_secret_value_spans(text)):
        text = text[:start] + REDACTED + text[end:]
    out = text.encode("utf-8", "surrogateescape")
    return _go_redact(_EXACT_AUTH, _go_redact(_PREFIX_AUTH, out))


def is_secret_key(name):
    """Does a CONNECT field of this (decoded) name hold a secret, as
    nats-server's trace expressions and Go's case-insensitive field
    matching would have it?"""
    folded = name.casefold()
    return folded in _SECRET_NAMES or folded.startswith(_SECRET_PREFIXES)


def _go_redact(pattern, data):
    # nats-server's redact: each match's value (group 1) replaced, last first.
    for m in reversed(list(pattern.finditer(data))):
        data = data[:m.start(1)] + REDACTED.encode() + data[m.end(1):]
    return data


def _secret_value_spans(text):
    """``(start, end)`` of the values of secret keys in ``text``: a string's
    contents (between its quotes), any other value whole; to the end of the
    text where a value cannot be read."""
    spans = []
    i, n = 0, len(text)
    while True:
        i = text.find('"', i)
        if i < 0:
            return spans
        try:
            key, i = scanstring(text, i + 1, False)
        except ValueError:
            i += 1  # not a readable string: look on from inside it
            continue
        j = _skip_ws(text, i)
        if j >= n or text[j] != ":" or not is_secret_key(key):
            continue
        j = _skip_ws(text, j + 1)
        start, end, i = _value_span(text, j)
        spans.append((start, end))


def _value_span(text, j):
    """``(start, end)`` of what to replace of the value at ``j``, and where
    reading goes on after it."""
    n = len(text)
    if j < n and text[j] == '"':
        try:
            _, end = scanstring(text, j + 1, False)
        except ValueError:
            return j + 1, n, n
        return j + 1, end - 1, end
    try:
        _, end = _DECODER.raw_decode(text, j)
    except (ValueError, RecursionError):
        # Not JSON: up to where nats-server's expression would stop.
        end = _NOT_JSON_VALUE.match(text, j).end()
    return j, end, end


def _skip_ws(text, i):
    n = len(text)
    while i < n and text[i] in _JSON_WS:
        i += 1
    return i
