"""Direct gets (``$JS.API.DIRECT.GET.<stream>[.<subject>]``) as nats-server 2.15 answers them.

A direct get is answered with the stored message itself (Nats-Stream/Subject/
Sequence/Time-Stamp headers added), never JSON; a failure is a status-only
message (``NATS/1.0 408 Bad Request``). Batched gets (``batch``, from ``seq`` or
``start_time``, optionally ``next_by_subj``) and multi-last gets (``multi_last``:
the last message of every subject matching any of the filters, at most up to
``up_to_seq``/``up_to_time``) send each message with Nats-Num-Pending and
Nats-Last-Sequence headers and end with a ``204 EOB`` status message.

The functions here validate and read; ``api.direct_get`` publishes what they
yield. Counters follow nats-server's, quirks included: a ``no_hdr`` batch never
counts Nats-Num-Pending down, a multi-last get ignores ``no_hdr``, and a file
stream has no results above its last sequence.

Damaged records: a batch passes them as a consumer does (they are gaps); a
multi-last get raises :class:`Damaged` when a message of a matched subject newer
than the one it would answer with is damaged, as a single last-by-subject get
does (an older revision must not pass for the current one). That includes
damage above ``up_to_seq``: over-reporting, never a wrong answer.
"""

import attrs

from natsbroker.gocompat import gojson, times as gotime
from natsbroker.jetstream import api_models as AM, marshal
from natsbroker.subjects.sublist import is_valid_subject

# nats-server's cap on the subjects one multi-last get may answer.
MAX_MULTI_LAST = 1024

EMPTY_REQUEST = b"NATS/1.0 408 Empty Request\r\n\r\n"
MALFORMED_REQUEST = b"NATS/1.0 408 Malformed Request\r\n\r\n"
BAD_REQUEST = b"NATS/1.0 408 Bad Request\r\n\r\n"
NOT_FOUND = b"NATS/1.0 404 Message Not Found\r\n\r\n"
NO_RESULTS = b"NATS/1.0 404 No Results\r\n\r\n"
TOO_MANY_RESULTS = b"NATS/1.0 413 Too Many Results\r\n\r\n"

_SINGLE = b"Nats-Stream: %s\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\n"
_BATCHED = _SINGLE + b"Nats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n"
_EOB = b"NATS/1.0 204 EOB\r\nNats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n\r\n"
_EOB_MULTI = (b"NATS/1.0 204 EOB\r\nNats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n"
              b"Nats-UpTo-Sequence: %d\r\n\r\n")


class Status(Exception):
    """The request is answered by this status-only header block."""

    def __init__(self, header):
        super().__init__(header)
        self.header = header


class Damaged(Exception):
    """The message a get must answer with is damaged in the store."""

    def __init__(self, seq, why):
        super().__init__(seq, why)
        self.seq, self.why = seq, why


def request(body, last_subject=b""):
    """The :class:`~natsbroker.jetstream.api_models.MsgGetRequest` of a direct get, or
    :class:`Status` (408) as nats-server rejects it. ``last_subject``: the
    subject of the ``DIRECT.GET.<stream>.<subject>`` form, whose body may only
    carry ``no_hdr`` (and ``max_bytes``, which a single get never uses)."""
    if last_subject:
        if not body:
            return AM.MsgGetRequest(last_by_subj=last_subject.decode(errors="replace"))
        req = _unmarshal(body)
        if (req.seq or req.last_by_subj or req.next_by_subj or req.batch
                or req.start_time is not None or req.multi_last
                or req.up_to_seq or req.up_to_time is not None):
            raise Status(BAD_REQUEST)
        return attrs.evolve(req, last_by_subj=last_subject.decode(errors="replace"))
    if not body:
        raise Status(EMPTY_REQUEST)
    req = _unmarshal(body)
    seq, last, nxt, start = req.seq, req.last_by_subj, req.next_by_subj, req.start_time
    if not (seq or last or nxt or req.multi_last or start is not None):
        raise Status(EMPTY_REQUEST)
    has_start = start is not None
    if ((seq and last) or (seq and has_start) or (has_start and last) or (last and nxt)
            or (last and req.batch > 0) or (last and req.multi_last)
            or (nxt and req.multi_last) or (req.up_to_seq and req.up_to_time is not None)):
        raise Status(BAD_REQUEST)
    return req


def _unmarshal(body):
    try:
        return marshal.unmarshal_request(body, AM.MsgGetRequest)
    except gojson.GoJSONError:
        raise Status(MALFORMED_REQUEST) from None


def start_seq(stream, req):
    """The sequence a get starts from: ``seq``, or the first stamped at or
    after ``start_time``."""
    if req.start_time is not None:
        return stream.seq_for_time(gotime.unix_nano(req.start_time))
    return req.seq


def resolve_start(stream, req):
    """``req`` with its ``start_time`` (if any) turned into the ``seq`` it starts from."""
    if req.start_time is None:
        return req
    return attrs.evolve(req, seq=start_seq(stream, req), start_time=None)


def _head(msg):
    # The stored header block without its closing blank line; more headers follow.
    hdr = msg.hdr
    return hdr[:-2] if hdr.endswith(b"\r\n\r\n") else b"NATS/1.0\r\n"


def single(stream, msg, no_hdr=False):
    """``(headers, payload)`` answering a single get with ``msg``."""
    if no_hdr:
        return None, msg.data
    return _head(msg) + _SINGLE % (stream.name.encode(), msg.subject, msg.seq,
                                   gotime.rfc3339(msg.ts).encode()) + b"\r\n", msg.data


def _batched(name, msg, pending, last_seq):
    return _head(msg) + _BATCHED % (name, msg.subject, msg.seq, gotime.rfc3339(msg.ts).encode(),
                                    pending, last_seq) + b"\r\n"


def _size(msg):
    # What nats-server counts against max_bytes: subject, stored headers, payload.
    return len(msg.subject) + len(msg.hdr) + len(msg.data)


def batch(stream, req, max_pending):
    """Yield the replies of a batched get: up to ``req.batch`` messages from
    the start sequence (matching ``next_by_subj`` if set), then the EOB status;
    :class:`Status` 404 if there is not even a first one. ``max_pending``: the
    server's, the byte budget when the request sets no ``max_bytes``."""
    store = stream.store
    name = stream.name.encode()
    seq = start_seq(stream, req)
    nxt = req.next_by_subj.encode() or None
    pending = store.num_pending(seq, nxt)
    budget = req.max_bytes or max_pending
    last_seq = sent_bytes = 0
    for i in range(req.batch if req.batch > 0 else 0):
        # seq is 0 (and nothing else set) only for a start time on a stream
        # never written to: nothing to find.
        msg = store.load_next(seq, nxt) if (seq or nxt is not None) else None
        if msg is None:
            if i:
                break
            raise Status(NOT_FOUND)
        seq = msg.seq + 1
        if req.no_hdr:
            hdr = None  # and, as nats-server, Nats-Num-Pending is not counted down
        else:
            pending -= 1
            hdr = _batched(name, msg, pending, last_seq)
        last_seq = msg.seq
        yield hdr, msg.data
        sent_bytes += _size(msg)
        if sent_bytes >= budget:
            break
    yield _EOB % (pending, last_seq), b""


def multi_last(stream, req, max_pending):
    """Yield the replies of a multi-last get: the last message (at most up to
    ``up_to_seq``/``up_to_time``) of each subject matching ``req.multi_last``,
    in sequence order from ``req.seq``, at most ``req.batch`` of them, then the
    EOB status carrying the upper bound (``Nats-UpTo-Sequence``) a client pages
    with. :class:`Status` 404/413 when there is nothing or too much."""
    store = stream.store
    st = store.state()
    if req.up_to_time is not None:
        up_to = stream.seq_for_time(gotime.parse_rfc3339(req.up_to_time)) - 1
        if up_to <= 0:
            raise Status(NO_RESULTS)
    elif req.up_to_seq:
        up_to = req.up_to_seq
        if up_to > st.last_seq and stream.config.storage == "file":
            # nats-server's file store finds no block holding it: nothing.
            raise Status(NO_RESULTS)
    else:
        up_to = st.last_seq
    seqs = last_seqs(store, req.multi_last, up_to) if st.msgs else []
    if not seqs:
        raise Status(NO_RESULTS)
    name = stream.name.encode()
    budget = req.max_bytes or max_pending
    pending = len(seqs)
    last_seq = sent = sent_bytes = 0
    for seq in seqs:
        if seq < req.seq:
            pending -= 1
            continue
        msg = store.load(seq)
        if msg is None:
            raise Status(NOT_FOUND)
        pending -= 1
        yield _batched(name, msg, pending, last_seq), msg.data
        last_seq = seq
        sent_bytes += _size(msg)
        if sent_bytes >= budget:
            break
        sent += 1
        if 0 < req.batch <= sent:
            break
    yield _EOB_MULTI % (pending, last_seq, up_to), b""


def last_seqs(store, filters, up_to):
    """Sorted sequences of the last message at or below ``up_to`` of every
    subject matching one of ``filters``; :class:`Status` 413 above
    :data:`MAX_MULTI_LAST`, :class:`Damaged` if one of those is damaged."""
    found = set()
    damaged_since = getattr(store, "damaged_since", None)
    for f in filters:
        f = f.encode()
        if not is_valid_subject(f):
            continue  # matches no stored subject
        for subject in store.subject_counts(f):
            seq = _last_seq(store, subject, up_to)
            if damaged_since is not None:
                # Any damaged record of the subject above the answer, even one
                # past up_to: the store names one such record, not the lowest.
                hit = damaged_since(seq, subject)
                if hit is not None:
                    raise Damaged(*hit)
            if seq:
                found.add(seq)
                if len(found) > MAX_MULTI_LAST:
                    raise Status(TOO_MANY_RESULTS)
    return sorted(found)


def _last_seq(store, subject, up_to):
    msg = store.load_last(subject)
    if msg is None:
        return 0
    if msg.seq <= up_to:
        return msg.seq
    # The subject has moved on since up_to: walk its messages up to there.
    seq = 0
    msg = store.load_next(0, subject)
    while msg is not None and msg.seq <= up_to:
        seq = msg.seq
        msg = store.load_next(seq + 1, subject)
    return seq
