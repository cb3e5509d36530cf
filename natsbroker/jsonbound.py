"""JSON from clients, decoded with a bounded nesting depth.

nats-server decodes every JSON document a client can send (CONNECT, JWT
claims, ``$JS.API`` and ``$SYS`` requests, auth callout responses) with Go's
``encoding/json``, which refuses more than 10,000 levels of nesting
("exceeded max depth") and otherwise decodes at any depth.  Python's decoders
recurse once per level and raise ``RecursionError`` a little under 1,000
levels: left alone, a CONNECT nested 2,000 deep (which nats-server accepts)
or a deeper ``$SYS`` request escapes as an unhandled error with a traceback in
the log, once per message.

Every JSON entry point for client input goes through :func:`loads` (or, for
the hand-written Go-compatible parsers, :func:`room`):

* up to :data:`MAX_DEPTH` levels decode as nats-server decodes them (the
  recursion limit is raised for the call; CPython 3.11's C decoder needs about
  160 bytes of C stack per level, 1.6 MB at the limit, and pure-Python
  recursion uses none);
* deeper input raises :class:`TooDeep`, a ``ValueError``, which every caller
  already handles as bad JSON; ``RecursionError`` never escapes.

The depth scan runs only after the fast decoder gave up, so ordinary
documents cost one ``json.loads``.
"""

import array
import contextlib
import itertools
import json
import re
import sys

#: Go's ``encoding/json`` maxNestingDepth.
MAX_DEPTH = 10000
#: Deep enough for any real document, shallow enough for ``json.dumps`` to
#: write it again from the reactor's stack without raising the recursion limit.
REENCODE_DEPTH = 500

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.S)
# '[' and '{' open a level (1), ']' and '}' close one (0xff = -1 as a signed
# byte); everything else counts 0.
LEVEL_STEPS = bytes(1 if c in b"[{" else 0xFF if c in b"]}" else 0 for c in range(256))


class TooDeep(ValueError):
    """More than :data:`MAX_DEPTH` levels of nesting; ``offset`` is where Go's
    scanner stops (the byte after the first bracket too deep)."""

    def __init__(self, offset):
        super().__init__("exceeded max depth")
        self.offset = offset


def _blank_string(m):
    return b" " * (m.end() - m.start())


def blank_strings(data):
    """``data`` (bytes) with every string, quotes included, turned into as
    many spaces (an unterminated one to the end): what is left is JSON's
    structure at the same offsets, for C-speed searches."""
    return _STRING.sub(_blank_string, data) if b'"' in data else bytes(data)


def too_deep_at(data, limit=MAX_DEPTH):
    """The Go offset at which ``data`` (bytes or str) first nests deeper than
    ``limit``, or None.  Brackets inside strings do not count; the work is
    a few C-level passes over the input."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if data.count(b"[") + data.count(b"{") <= limit:
        return None
    plain = blank_strings(bytes(data))
    steps = array.array("b", plain.translate(LEVEL_STEPS))
    for index, level in enumerate(itertools.accumulate(steps)):
        if level > limit:
            return index + 1
    return None


def check_depth(data, limit=MAX_DEPTH):
    """Raise :class:`TooDeep` if ``data`` nests deeper than ``limit``."""
    offset = too_deep_at(data, limit)
    if offset is not None:
        raise TooDeep(offset)


def _stack_depth():
    frame, n = sys._getframe(), 0
    while frame is not None:
        frame, n = frame.f_back, n + 1
    return n


@contextlib.contextmanager
def room(levels):
    """Let the code in the block recurse ``levels`` more times than the
    caller's stack already does (for parsers that recurse once or a few times
    per JSON level, bounded by their own depth check)."""
    old = sys.getrecursionlimit()
    need = _stack_depth() + levels + 100
    if need > old:
        sys.setrecursionlimit(need)
    try:
        yield
    finally:
        if need > old:
            sys.setrecursionlimit(old)


def loads(data, max_depth=MAX_DEPTH, **kwargs):
    """``json.loads(data, **kwargs)`` that decodes up to ``max_depth`` levels
    and raises :class:`TooDeep` beyond (never ``RecursionError``).

    A document the server encodes again (``json.dumps`` recurses too) is read
    with ``max_depth=REENCODE_DEPTH``, checked before decoding."""
    if max_depth < MAX_DEPTH:
        check_depth(data, max_depth)
        return json.loads(data, **kwargs)
    try:
        return json.loads(data, **kwargs)
    except RecursionError:
        pass
    check_depth(data, max_depth)
    with room(max_depth + 50):
        return json.loads(data, **kwargs)
