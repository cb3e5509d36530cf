"""Go's ``time.Duration`` text forms, as nats-server reads and writes them.

``format_duration`` is ``Duration.String()`` (``2m0s``, ``1.5s``, ``812µs``);
``parse_duration`` is ``time.ParseDuration`` (``1h30m``, ``1.5s``, ``-2ms``).
Both work in integer nanoseconds.
"""

import re

NANOS = 1_000_000_000

_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000,
          "s": NANOS, "m": 60 * NANOS, "h": 3600 * NANOS}
_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_MAX = (1 << 63) - 1


def format_duration(ns):
    """Go's ``time.Duration.String()`` for ``ns`` nanoseconds."""
    if ns == 0:
        return "0s"
    neg = ns < 0
    ns = abs(ns)
    if ns < NANOS:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                whole, frac = divmod(ns, size)
                text = str(whole)
                if frac:
                    text += ("." + str(frac).rjust(len(str(size)) - 1, "0")).rstrip("0")
                return ("-" if neg else "") + text + unit
    secs, frac = divmod(ns, NANOS)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    text = ""
    if h:
        text += "%dh" % h
    if h or m:
        text += "%dm" % m
    text += str(s)
    if frac:
        text += ("." + "%09d" % frac).rstrip("0")
    return ("-" if neg else "") + text + "s"


def parse_duration(text):
    """Go's ``time.ParseDuration``: nanoseconds, or ValueError."""
    s = text
    neg = False
    if s[:1] in ("-", "+"):
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError("invalid duration %r" % text)
    total = 0
    pos = 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None or m.group(1) in ("", "."):
            raise ValueError("invalid duration %r" % text)
        num, unit = m.groups()
        whole, _, frac = num.partition(".")
        size = _UNITS[unit]
        total += int(whole or "0") * size
        if frac:
            total += int(frac) * size // (10 ** len(frac))
        if total > _MAX:
            raise ValueError("invalid duration %r" % text)
        pos = m.end()
    return -total if neg else total
