"""``Nats-Required-Api-Level`` (ADR-44): refuse what needs a newer JetStream API than ours.

nats-server 2.12+ reads this header on every ``$JS.API`` request, direct get,
pull request (``CONSUMER.MSG.NEXT``) and batch message (atomic or fast).  When
its value is not an integer (Go's ``strconv.Atoi``: optional sign, int64) or
is above the server's API level (``versions.API_LEVEL``) the request is refused:

* API requests: the response's ``error`` is 412/10185 "JetStream minimum api
  level required" (before anything else is checked, even the body's JSON),
  except the cluster-only requests, which answer 10010 first;
* direct gets and pull requests: a ``NATS/1.0 412 Required Api Level`` status;
* batch messages: that error as a PubAck error, and the batch is abandoned;
  an accepted header is removed before the message is stored.

Ordinary publishes ignore it (it is stored like any header).  The header is
found as nats-server's ``sliceHeader`` finds it: the first line starting
``Name:`` (exact case); spaces after the colon skipped,
the value up to the CRLF (a trailing blank makes it invalid); an empty value
asks for nothing.
"""

from natsbroker.jetstream import headers as HB, versions

H_REQUIRED_API_LEVEL = b"Nats-Required-Api-Level"
STATUS_412 = b"NATS/1.0 412 Required Api Level\r\n\r\n"

_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)


def slice_header(hdr, name):
    """nats-server's sliceHeader: the raw value of ``name``, or None."""
    if not hdr:
        return None
    key = name + b":"
    i = hdr.find(key)
    while i >= 0 and (i < 2 or hdr[i - 2:i] != b"\r\n"):
        i = hdr.find(key, i + 1)  # inside another name: look further
    if i < 0:
        return None
    i += len(key)
    n = len(hdr)
    while i < n and hdr[i:i + 1] == b" ":
        i += 1
    end = hdr.find(b"\r\n", i)
    return hdr[i:] if end < 0 else hdr[i:end]


def _atoi(value):
    """Go's ``strconv.Atoi`` (64-bit): an int, or None."""
    digits = value[1:] if value[:1] in (b"+", b"-") else value
    if not digits or not digits.isdigit() or not digits.isascii():
        return None
    n = int(value)
    return n if _INT64_MIN <= n <= _INT64_MAX else None


def required(hdr):
    """The header's raw value when it asks for something (non-empty), else None."""
    if not hdr or H_REQUIRED_API_LEVEL not in hdr:
        return None
    return slice_header(hdr, H_REQUIRED_API_LEVEL) or None


def refused(hdr, level=None):
    """True when ``hdr`` requires an API level this server does not have."""
    value = required(hdr)
    if value is None:
        return False
    n = _atoi(value)
    return n is None or n > (versions.API_LEVEL if level is None else level)


def strip(hdr):
    """``hdr`` without the header (a batch message is stored without it)."""
    return HB.remove_header(hdr, H_REQUIRED_API_LEVEL)
