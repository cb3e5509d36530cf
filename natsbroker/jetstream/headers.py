"""Header-block edits as nats-server makes them on stored messages.

nats-server looks JetStream headers up by their exact name (``nats-incr`` is
not ``Nats-Incr``) and edits the raw block in place: ``set_header`` replaces
the first value of a name or appends one, ``gen_header`` appends, the
``remove_*`` helpers drop lines, and a block left with no header at all
becomes ``b""`` (no headers), as Go's helpers return nil.
"""

from natsbroker.protocol.wire import HeaderError, decode_headers

CRLF = b"\r\n"
EMPTY = b"NATS/1.0\r\n\r\n"


def exact(hdr, names):
    """The first value of each of ``names`` (exact case) in ``hdr``, stripped."""
    out = {}
    if not hdr:
        return out
    try:
        _, _, pairs = decode_headers(hdr)
    except HeaderError:
        return out
    for name, value in pairs:
        if name in names and name not in out:
            out[name] = value
    return out


def _line_start(hdr, name):
    """Offset of the first line that is header ``name`` (exact), or -1."""
    needle = CRLF + name + b":"
    i = hdr.find(needle)
    return -1 if i < 0 else i + 2


def gen_header(hdr, name, value):
    """``hdr`` with ``name: value`` appended (a new block if there is none)."""
    head = hdr[:-2] if len(hdr) > 2 else b"NATS/1.0\r\n"
    return head + name + b": " + value + CRLF + CRLF


def set_header(hdr, name, value):
    """``hdr`` with the first ``name`` header's value replaced, else appended."""
    if hdr:
        start = _line_start(hdr, name)
        if start >= 0:
            vstart = start + len(name) + 1
            if hdr[vstart:vstart + 1] == b" ":
                vstart += 1
            vend = hdr.find(b"\r", vstart)
            if vend < 0:
                return hdr
            return hdr[:vstart] + value + hdr[vend:]
    return gen_header(hdr, name, value)


def remove_header(hdr, name):
    """``hdr`` without its first ``name`` header."""
    if not hdr:
        return hdr
    start = _line_start(hdr, name)
    if start < 0:
        return hdr
    end = hdr.find(CRLF, start)
    if end < 0:
        return hdr
    hdr = hdr[:start] + hdr[end + 2:]
    return b"" if len(hdr) <= len(EMPTY) else hdr


def remove_prefixed(hdr, prefix):
    """``hdr`` without any header whose name starts with ``prefix``."""
    while hdr:
        start = hdr.find(CRLF + prefix)
        if start < 0:
            return hdr
        start += 2
        end = hdr.find(CRLF, start + len(prefix))
        if end < 0:
            return hdr
        hdr = hdr[:start] + hdr[end + 2:]
        if len(hdr) <= len(EMPTY):
            return b""
    return hdr
