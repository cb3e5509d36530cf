"""Encoders for what the server writes: INFO, MSG/HMSG, -ERR, and NATS/1.0 headers."""

import json

CRLF = b"\r\n"
PONG = b"PONG\r\n"
PING = b"PING\r\n"
OK = b"+OK\r\n"

HEADER_LINE = b"NATS/1.0"


def info(fields):
    """``INFO {...}\\r\\n`` with compact JSON, as nats-server writes it."""
    return b"INFO " + json.dumps(fields, separators=(",", ":")).encode() + b" \r\n"


def err(message):
    """``-ERR 'message'\\r\\n``."""
    return b"-ERR '" + message.encode() + b"'\r\n"


def msg(subject, sid, reply, payload):
    """A whole MSG frame (not for the hot path, which builds frames inline)."""
    if reply:
        head = b"MSG %s %s %s %d\r\n" % (subject, sid, reply, len(payload))
    else:
        head = b"MSG %s %s %d\r\n" % (subject, sid, len(payload))
    return head + payload + CRLF


def hmsg(subject, sid, reply, hdr_len, raw):
    """A whole HMSG frame; ``raw`` is the header block followed by the payload."""
    if reply:
        head = b"HMSG %s %s %s %d %d\r\n" % (subject, sid, reply, hdr_len, len(raw))
    else:
        head = b"HMSG %s %s %d %d\r\n" % (subject, sid, hdr_len, len(raw))
    return head + raw + CRLF


def encode_headers(headers, status=b"", description=b""):
    """Encode a NATS/1.0 header block.

    ``headers`` is an iterable of ``(name, value)`` pairs (bytes or str), or a
    mapping; a value may be a list for repeated headers. ``status`` (e.g.
    ``b"503"``) and ``description`` go on the first line as nats-server does.
    """
    first = HEADER_LINE
    if status:
        first += b" " + _b(status)
        if description:
            first += b" " + _b(description)
    parts = [first, CRLF]
    items = headers.items() if hasattr(headers, "items") else headers
    for name, value in items or ():
        values = value if isinstance(value, (list, tuple)) else (value,)
        for v in values:
            parts += [_b(name), b": ", _b(v), CRLF]
    parts.append(CRLF)
    return b"".join(parts)


class HeaderError(ValueError):
    """A header block that is not NATS/1.0."""


def decode_headers(block):
    """Parse a NATS/1.0 header block: ``(status, description, [(name, value)...])``.

    Names keep their case; values are stripped of surrounding white space.
    """
    if not block.startswith(HEADER_LINE):
        raise HeaderError("header block does not start with NATS/1.0")
    lines = block.split(CRLF)
    first = lines[0][len(HEADER_LINE):].strip()
    status, _, description = first.partition(b" ")
    pairs = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            raise HeaderError("malformed header line %r" % line)
        pairs.append((name.strip(), value.strip()))
    return status, description.strip(), pairs


def _b(v):
    if isinstance(v, bytes):
        return v
    return str(v).encode()
