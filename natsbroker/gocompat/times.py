"""Go's ``time.Time`` as nats-server's JSON shows it: RFC 3339 with nanoseconds.

``rfc3339(ns)`` formats Unix nanoseconds as Go marshals a ``time.Time`` (up to 9
fraction digits, trailing zeros dropped, ``Z``); ``0``/``None`` is Go's zero
time ``0001-01-01T00:00:00Z``.  ``parse_rfc3339`` is the inverse and raises
``ValueError`` with Go's ``time.Parse`` message.  Durations are
:mod:`natsbroker.gocompat.durations`'s.
"""

import datetime
import time

from natsbroker.gocompat.quote import time_quote as _time_quote

NS_PER_SEC = 1_000_000_000


def now_ns():
    """Wall clock as Unix nanoseconds (what timestamps are kept in)."""
    return time.time_ns()


ZERO_TIME = "0001-01-01T00:00:00Z"
_EPOCH = datetime.datetime(1970, 1, 1)
_GO_ZERO_NS = -62135596800 * NS_PER_SEC          # 0001-01-01T00:00:00Z in Unix ns


def rfc3339(ns, offset=0, zero_is_unset=True):
    """Unix nanoseconds as Go marshals a ``time.Time`` (RFC 3339, nanoseconds).

    ``2026-11-22T07:12:34.123456789Z``; trailing zeros of the fraction are
    dropped (``.5Z``, or none at all).  ``offset``: the zone offset in seconds
    (``+02:00``); 0 prints ``Z``.  ``None`` -- and ``0`` unless
    ``zero_is_unset=False`` -- is Go's zero time ``0001-01-01T00:00:00Z``, what
    nats-server shows for an empty stream's ``first_ts``/``last_ts``.
    """
    if ns is None or (ns == 0 and zero_is_unset):
        return ZERO_TIME
    secs, frac = divmod(ns + offset * NS_PER_SEC, NS_PER_SEC)
    dt = _EPOCH + datetime.timedelta(seconds=secs)
    out = "%04d-%02d-%02dT%02d:%02d:%02d" % (dt.year, dt.month, dt.day,
                                            dt.hour, dt.minute, dt.second)
    if frac:
        out += ("." + "%09d" % frac).rstrip("0")
    if offset == 0:
        return out + "Z"
    sign = "+" if offset > 0 else "-"
    off = abs(offset) // 60
    return out + "%s%02d:%02d" % (sign, off // 60, off % 60)


def rfc3339_seconds(t):
    """A ``time.time()`` float as :func:`rfc3339` (UTC, 0 is the epoch):
    such floats hold microseconds truly, so no nanoseconds are invented."""
    return rfc3339(int(round(t * 1e6)) * 1000, zero_is_unset=False)


def rfc3339_local(t):
    """A ``time.time()`` float as Go marshals a ``time.Now()`` taken in the
    local zone: RFC 3339, nanoseconds, the local offset (``Z`` for UTC)."""
    secs = int(t)
    frac = min(int(round((t - secs) * 1e9)), NS_PER_SEC - 1)
    offset = datetime.datetime.fromtimestamp(t).astimezone().utcoffset()
    return rfc3339(secs * NS_PER_SEC + frac, int(offset.total_seconds()), zero_is_unset=False)


def go_time_string(t):
    """Go's ``time.Time.String()`` of a UTC time (Unix seconds, or an aware or
    UTC ``datetime``): ``2006-01-02 15:04:05.999999999 +0000 UTC``."""
    if isinstance(t, datetime.datetime):
        if t.tzinfo is not None:
            t = t.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        ns = ((t - _EPOCH) // datetime.timedelta(microseconds=1)) * 1000
    else:
        ns = int(round(t * 1e6)) * 1000 if isinstance(t, float) else int(t) * NS_PER_SEC
    text = rfc3339(ns, zero_is_unset=False)[:-1].replace("T", " ")
    return text + " +0000 UTC"


def parse_rfc3339(text):
    """An RFC 3339 time as Unix nanoseconds; Go's zero time gives 0.

    Accepts what Go's ``time.Parse(time.RFC3339, ...)`` accepts (fractions of
    any length, ``,`` as decimal mark, one-digit hours); raises ``ValueError``
    with Go's message otherwise.
    """
    ns, _ = go_parse_rfc3339(text)
    return 0 if ns == _GO_ZERO_NS else ns


def unix_nano(text):
    """Go's ``time.Time.UnixNano()`` of an RFC 3339 time: int64 arithmetic
    that wraps outside 1678-2262 (a start time in the year 2999 comes out
    before every message, as nats-server finds it)."""
    ns = parse_rfc3339(text)
    return ((ns + (1 << 63)) % (1 << 64)) - (1 << 63)


_LAYOUT = "2006-01-02T15:04:05Z07:00"
_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def go_parse_rfc3339(text):
    """Go's ``time.Parse(time.RFC3339, text)``: returns ``(unix_ns, offset_seconds)``."""
    value = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
    whole = value

    def bad(elem, rest, msg=""):
        if msg:
            return ValueError("parsing time %s%s" % (_time_quote(whole), msg))
        return ValueError("parsing time %s as %s: cannot parse %s as %s" % (
            _time_quote(whole), _time_quote(_LAYOUT.encode()), _time_quote(rest),
            _time_quote(elem.encode())))

    def isdigit(b, i):
        return len(b) > i and 0x30 <= b[i] <= 0x39

    def getnum(b, fixed):
        if not isdigit(b, 0):
            return None, b
        if not isdigit(b, 1):
            if fixed:
                return None, b
            return b[0] - 0x30, b[1:]
        return (b[0] - 0x30) * 10 + (b[1] - 0x30), b[2:]

    def skip(b, prefix):
        for ch in prefix.encode():
            if not b or b[0] != ch:
                return None
            b = b[1:]
        return b

    # 2006
    if len(value) < 4 or not isdigit(value, 0) or not all(0x30 <= c <= 0x39 for c in value[:4]):
        raise bad("2006", value)
    year = int(value[:4])
    value = value[4:]
    fields = []
    for prefix, elem, fixed, rng, lo, hi in (
            ("-", "01", True, "month", 1, 12), ("-", "02", True, None, 0, 99),
            ("T", "15", False, "hour", 0, 23), (":", "04", True, "minute", 0, 59),
            (":", "05", True, "second", 0, 59)):
        rest = skip(value, prefix)
        if rest is None:
            raise bad(prefix, value)
        value = rest
        num, rest = getnum(value, fixed)
        if num is None:
            raise bad(elem, value)
        if rng and not lo <= num <= hi:
            raise bad(elem, rest, ": %s out of range" % rng)
        value = rest
        fields.append(num)
    month, day, hour, minute, sec = fields
    nsec = 0
    if len(value) >= 2 and value[0] in b".," and isdigit(value, 1):
        n = 2
        while n < len(value) and isdigit(value, n):
            n += 1
        digits = value[1:min(n, 10)]
        nsec = int(digits) * 10 ** (9 - len(digits))
        value = value[n:]
    # Z07:00
    hold = value
    if value[:1] == b"Z":
        offset = 0
        value = value[1:]
    else:
        if len(value) < 6 or value[3] != 0x3A or value[0] not in b"+-":
            raise bad("Z07:00", hold)
        hh, _ = getnum(value[1:3], True)
        mm, _ = getnum(value[4:6], True)
        if hh is None or mm is None:
            raise bad("Z07:00", hold)
        if hh > 24:
            raise bad("Z07:00", value[6:], ": time zone offset hour out of range")
        if mm > 60:
            raise bad("Z07:00", value[6:], ": time zone offset minute out of range")
        offset = (hh * 60 + mm) * 60 * (1 if value[0] == 0x2B else -1)
        value = value[6:]
    if value:
        raise ValueError("parsing time %s: extra text: %s" % (_time_quote(whole), _time_quote(value)))
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    dim = 29 if month == 2 and leap else _DAYS[month - 1]
    if day < 1 or day > dim:
        raise ValueError("parsing time %s: day out of range" % _time_quote(whole))
    days = (datetime.date(year if year > 0 else 1, month, day) - datetime.date(1970, 1, 1)).days
    if year == 0:                        # datetime has no year 0; Go does (366 days)
        days -= 366
    secs = days * 86400 + hour * 3600 + minute * 60 + sec - offset
    return secs * NS_PER_SEC + nsec, offset
