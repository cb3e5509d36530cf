"""Go's ``time.Duration`` text forms, as nats-server reads and writes them.

``format_duration`` is ``Duration.String()`` (``2m0s``, ``1.5s``, ``812µs``);
``parse_duration`` is ``time.ParseDuration`` (``1h30m``, ``1.5s``, ``-2ms``),
refusing what Go refuses with Go's error text (``time: unknown unit "x" in
duration "1x"``).  Both work in integer nanoseconds.  ``duration_seconds`` is
the configuration file's form: a Go duration string, or a number of seconds.
"""

from natsbroker.gocompat.quote import time_quote as _time_quote

NANOS = 1_000_000_000

__all__ = ["NANOS", "DurationError", "duration_seconds", "format_duration", "go_seconds", "parse_duration"]

_UNITS = {b"ns": 1, b"us": 1_000, "µs".encode(): 1_000, "μs".encode(): 1_000,
          b"ms": 1_000_000, b"s": NANOS, b"m": 60 * NANOS, b"h": 3600 * NANOS}
_DIGITS = b"0123456789"
_LIMIT = 1 << 63


class DurationError(ValueError):
    """A text ``time.ParseDuration`` refuses; ``str()`` is Go's error."""


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
    """Go's ``time.ParseDuration``: nanoseconds, or :class:`DurationError`
    with Go's text.  Follows Go's code step by step, its float arithmetic
    for fractions included (``float64(f) * (float64(unit) / scale)``)."""
    orig = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
    s = orig

    def invalid():
        return DurationError("time: invalid duration " + _time_quote(orig))

    neg = False
    if s[:1] in (b"-", b"+"):
        neg = s[:1] == b"-"
        s = s[1:]
    if s == b"0":
        return 0
    if not s:
        raise invalid()
    d = 0
    while s:
        if s[0] not in _DIGITS and s[0] != 0x2E:
            raise invalid()
        i = 0
        v = 0
        while i < len(s) and s[i] in _DIGITS:     # leadingInt
            if v > _LIMIT // 10:
                raise invalid()
            v = v * 10 + s[i] - 0x30
            if v > _LIMIT:
                raise invalid()
            i += 1
        pre = i > 0
        s = s[i:]
        post = False
        f, scale = 0, 1.0
        if s[:1] == b".":
            s = s[1:]
            i, overflow = 0, False
            while i < len(s) and s[i] in _DIGITS:  # leadingFraction
                if not overflow:
                    if f > ((1 << 63) - 1) // 10:
                        overflow = True
                    else:
                        y = f * 10 + s[i] - 0x30
                        if y > _LIMIT:
                            overflow = True
                        else:
                            f, scale = y, scale * 10
                i += 1
            post = i > 0
            s = s[i:]
        if not pre and not post:
            raise invalid()
        i = 0
        while i < len(s) and s[i] != 0x2E and s[i] not in _DIGITS:
            i += 1
        if i == 0:
            raise DurationError("time: missing unit in duration " + _time_quote(orig))
        u, s = s[:i], s[i:]
        unit = _UNITS.get(u)
        if unit is None:
            raise DurationError("time: unknown unit %s in duration %s"
                                % (_time_quote(u), _time_quote(orig)))
        if v > _LIMIT // unit:
            raise invalid()
        v *= unit
        if f > 0:
            v += int(float(f) * (float(unit) / scale))
            if v > _LIMIT:
                raise invalid()
        d += v
        if d > _LIMIT:
            raise invalid()
    if neg:
        return -d
    if d > _LIMIT - 1:
        raise invalid()
    return d


def go_seconds(ns):
    """Go's ``Duration.Seconds()``: whole seconds plus the rest / 1e9, in floats
    (what exporters print for a duration)."""
    sec = abs(ns) // NANOS
    nsec = abs(ns) % NANOS
    if ns < 0:
        sec, nsec = -sec, -nsec
    return float(sec) + float(nsec) / 1e9


def duration_seconds(value):
    """A configuration duration in seconds (float): a Go duration string
    (``"2m"``, ``"1h30m"``, ``"500ms"``), or a bare int or float meaning
    seconds, as nats-server treats e.g. ``ping_interval: 120``.  ValueError
    for anything else (a unit-less string other than ``"0"`` too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"invalid duration: {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    return parse_duration(value) / NANOS
