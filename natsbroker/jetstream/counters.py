"""Message counters (``allow_msg_counter``): ``Nats-Incr`` publishes.

A counter stream stores, per subject, the running total as the body
``{"val":"<n>"}`` (arbitrary precision, as Go's big.Int) and keeps the
publisher's ``Nats-Incr`` header; the PubAck carries ``"val"``.  A stream
sourcing counter streams aggregates them: each sourced message's total
replaces that source subject's share (kept in ``Nats-Counter-Sources``,
``{"<stream>":{"<subject>":"<n>"}}``), and its ``Nats-Incr`` is rewritten to
the difference, so the arithmetic holds however the copies arrive.
"""

import re

from natsbroker import jsonbound
from natsbroker.gocompat import gojson
from natsbroker.jetstream import errors as E, headers as H

H_INCR = b"Nats-Incr"
H_COUNTER_SOURCES = b"Nats-Counter-Sources"
H_STREAM_SOURCE = b"Nats-Stream-Source"

# big.Int.SetString(s, 10): an optional sign and ASCII digits, nothing else.
_INT = re.compile(rb"[+-]?[0-9]+\Z")

# Headers a counter increment may not carry (nats-server: "increment is invalid").
INCOMPATIBLE = (b"Nats-Rollup", b"Nats-Expected-Stream", b"Nats-Expected-Last-Msg-Id",
                b"Nats-Expected-Last-Subject-Sequence-Subject",
                b"Nats-Expected-Last-Sequence", b"Nats-Expected-Last-Subject-Sequence")


def parse_incr(value):
    """A ``Nats-Incr`` value as an int; JSMessageIncrInvalidErr if it is not one."""
    if not _INT.match(value):
        raise E.message_incr_invalid()
    return int(value)


def check_publish(incr, data, h, sourced):
    """The checks of a publish carrying ``Nats-Incr`` (``incr`` parsed) to a
    counter stream; a sourced copy is taken as it is."""
    if sourced:
        return
    if data:
        raise E.message_incr_payload()
    for name in INCOMPATIBLE:
        if h.get(name):
            raise E.message_incr_invalid()


def body(total):
    """The stored body of a counter at ``total``."""
    return b'{"val":"%d"}' % total


def value_of(data):
    """A stored counter body's total (a missing or unreadable value is 0, as
    big.Int.SetString leaves it); ``None`` if the body is not a JSON object."""
    try:
        doc = jsonbound.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    val = doc.get("val", "")
    if not isinstance(val, str):
        return None
    return int(val) if _INT.match(val.encode()) else 0


def sources_of(hdr):
    """The ``Nats-Counter-Sources`` of a stored counter message, or ``{}``;
    ``None`` if it cannot be read."""
    raw = H.exact(hdr, (H_COUNTER_SOURCES,)).get(H_COUNTER_SOURCES)
    if not raw:
        return {}
    try:
        doc = jsonbound.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    return doc


def _go_json(obj):
    """A map in the key order Go's json.Marshal writes it (sorted)."""
    if isinstance(obj, dict):
        return {k: _go_json(obj[k]) for k in sorted(obj)}
    return obj


def apply(last, subject, hdr, data, incr, running=None):
    """The stored form of an increment: ``(hdr, data, total, sources)``.

    ``last`` is the subject's latest stored message (or None); ``running``,
    when given, a ``(total, sources)`` not yet stored (an atomic batch) that
    takes its place.  A sourced copy (``Nats-Stream-Source``) adds the change
    of its origin's total instead of its own ``Nats-Incr``.
    """
    if running is not None:
        total, sources = running
        sources = {k: dict(v) for k, v in sources.items()}
    elif last is not None:
        total = value_of(last.data)
        sources = sources_of(last.hdr)
        if total is None or sources is None:
            raise E.message_counter_broken()
    else:
        total, sources = 0, {}
    src = H.exact(hdr, (H_STREAM_SOURCE,)).get(H_STREAM_SOURCE)
    if src:
        fields = src.decode("utf-8", "surrogateescape").split(" ")
        origin = fields[0]
        orig_subject = fields[4] if len(fields) >= 5 else subject.decode(
            "utf-8", "surrogateescape")
        theirs = value_of(data)
        if theirs is None:
            raise E.message_counter_broken()
        share = sources.setdefault(origin, {})
        prev = share.get(orig_subject, "")
        share[orig_subject] = str(theirs)
        incr = theirs - (int(prev) if _INT.match(prev.encode()) else 0)
        hdr = H.set_header(hdr, H_INCR, b"%d" % incr)
    total += incr
    data = body(total)
    if sources:
        hdr = H.set_header(hdr, H_COUNTER_SOURCES, gojson.go_json_dumps(_go_json(sources)).encode())
    return hdr, data, total, sources
