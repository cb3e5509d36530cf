"""One JetStream stream: its config, its store, and the publish path with limits.

``Stream.accept`` is what a captured PUB/HPUB runs: ``prepare`` (every check, in
nats-server's order: size, counters, expectations, schedules, de-duplication,
roll-ups, TTL, discard-new) then ``store_prepared`` (the store append, then
discard-old limits, roll-ups, schedules and expiry).  An atomic batch
prepares all its messages before it stores any.  It returns the sequence stored
(or the duplicate's), or raises ApiError; acks are the caller's business, sent
only after the store's group commit.
"""

import collections
import heapq
import time

from natsbroker.gocompat.durations import format_duration, parse_duration
from natsbroker.gocompat.times import rfc3339
from natsbroker.jetstream import counters, errors as E, headers as HB, schedules as S
from natsbroker.jetstream.consumer_index import ConsumerIndex
from natsbroker.protocol.wire import HeaderError, decode_headers
from natsbroker.store.base import StoredMsg, StreamEvent, msg_size
from natsbroker.subjects.transform import SubjectTransform

NANOS = 1_000_000_000
_tuple_new = tuple.__new__
# nats-server's default max_payload: a counter's total may not grow past it.
MAX_PAYLOAD = 1024 * 1024

# Headers the publish path reads.
H_MSG_ID = b"Nats-Msg-Id"
H_EXPECTED_STREAM = b"Nats-Expected-Stream"
H_EXPECTED_LAST_SEQ = b"Nats-Expected-Last-Sequence"
H_EXPECTED_LAST_SUBJ_SEQ = b"Nats-Expected-Last-Subject-Sequence"
H_EXPECTED_LAST_MSG_ID = b"Nats-Expected-Last-Msg-Id"
H_ROLLUP = b"Nats-Rollup"
H_EXPECTED_LAST_SUBJ_SEQ_SUBJ = b"Nats-Expected-Last-Subject-Sequence-Subject"
H_TTL = b"Nats-TTL"
H_MARKER_REASON = b"Nats-Marker-Reason"
# What a service import adds to a request from another account (the client's
# info); nats-server's stream drops it before anything else reads the headers.
H_REQUEST_INFO = b"Nats-Request-Info"

# nats-server finds these by their exact name: "nats-msg-id" is just a header.
_WATCHED = frozenset((H_MSG_ID, H_EXPECTED_STREAM, H_EXPECTED_LAST_SEQ, H_EXPECTED_LAST_SUBJ_SEQ,
                      H_EXPECTED_LAST_SUBJ_SEQ_SUBJ, H_EXPECTED_LAST_MSG_ID, H_ROLLUP, H_TTL,
                      counters.H_INCR, S.H_SCHEDULE, S.H_TARGET, S.H_TTL, S.H_SOURCE,
                      S.H_ROLLUP, S.H_TZ, S.H_SCHEDULER, S.H_NEXT))


_NO_HEADERS = {}


def now_ns():
    return time.time_ns()


def _headers(hdr):
    """The publish-relevant headers of a header block, by canonical name."""
    if not hdr:
        return {}
    try:
        _, _, pairs = decode_headers(hdr)
    except HeaderError:
        return {}
    out = {}
    for name, value in pairs:
        if name in _WATCHED and name not in out:
            out[name] = value
    return out


def parse_ttl(value):
    """A Nats-TTL value as nats-server reads it: seconds (a Go duration truncated
    to whole seconds, or an integer), -1 for "never"; anything under a second
    is invalid (JSMessageTTLInvalidErr)."""
    text = value.decode("latin-1")
    if text.lower() == "never":
        return -1
    try:
        ns = parse_duration(text)
    except ValueError:
        ns = None
    if ns is not None:
        if ns < NANOS:
            raise E.message_ttl_invalid()
        return ns // NANOS
    try:
        secs = int(text, 10)
    except ValueError:
        raise E.message_ttl_invalid() from None
    if secs <= 0:
        raise E.message_ttl_invalid()
    return secs


def _replace_header_last(hdr, name, value):
    """``hdr`` without its ``name`` headers (exact case), with ``name: value``
    appended last: nats-server's removeHeaderIfPresent then genHeader
    (client.go), as stream.go does when it raises a message's TTL."""
    lines = hdr.split(b"\r\n")
    kept = [line for line in lines[1:] if line and not line.startswith(name + b":")]
    return b"\r\n".join([lines[0]] + kept + [name + b": " + value, b"", b""])


def _sourced_headers(h, cfg, sourced):
    """The headers a copied message is checked by: no expectations (they were
    the origin's), no de-duplication for a mirror (an exact copy), and a roll-up
    or TTL the destination does not allow is ignored rather than refused (a
    refused copy would stall the link for good)."""
    h = {k: v for k, v in h.items() if not k.startswith(b"Nats-Expected-")}
    if sourced == "mirror":
        h.pop(H_MSG_ID, None)
    if H_ROLLUP in h and not cfg.allow_rollup_hdrs:
        del h[H_ROLLUP]
    if H_TTL in h:
        try:
            if not cfg.allow_msg_ttl:
                raise E.message_ttl_disabled()
            parse_ttl(h[H_TTL])
        except E.ApiError:
            del h[H_TTL]
    return h


def is_marker(hdr):
    return bool(hdr) and H_MARKER_REASON.lower() in hdr.lower() and \
        H_MARKER_REASON in _marker_headers(hdr)


def _marker_headers(hdr):
    try:
        _, _, pairs = decode_headers(hdr)
    except HeaderError:
        return ()
    return {name for name, _ in pairs}


class Prepared:
    """A publish that passed its checks (``Stream.prepare``): what
    ``Stream.store_prepared`` stores.  ``dup`` is the sequence of the message
    it duplicates, if it does."""

    __slots__ = ("subject", "hdr", "data", "msg_id", "rollup", "ttl", "val", "sources",
                 "schedule", "dup")

    def __init__(self, subject, hdr, data):
        self.subject = subject
        self.hdr = hdr
        self.data = data
        self.msg_id = None
        self.rollup = None
        self.ttl = 0
        self.val = None
        self.sources = None
        self.schedule = False
        self.dup = None


class Accepted(tuple):
    """``(seq, False)`` of a stored counter increment, with its total
    (``val``) for the PubAck."""

    def __new__(cls, seq, val):
        self = tuple.__new__(cls, (seq, False))
        self.val = val
        return self


class Stream:
    """A stream's runtime: config, store, de-duplication window, timers.

    Expiry: one reactor timer for the earliest deadline among the oldest
    message's max_age and the per-message TTLs (a heap of ``(deadline, seq)``);
    nothing polls. ``now`` is the clock messages are stamped and expired by.
    """

    def __init__(self, config, store, created_ns, clock, now=None):
        self.store = store
        self.config = config
        self.created = created_ns
        self.clock = clock
        self.now = now or time.time_ns
        # Nats-Msg-Id -> (seq, ts) within duplicate_window, oldest first.
        self._dedupe = collections.OrderedDict()
        self._last_msg_id = None
        self._expiry_call = None
        self._expiry_at = None
        self._ttl_heap = []  # (deadline ns, seq) of messages with a TTL
        self._never = set()  # seqs whose Nats-TTL is "never": max_age spares them
        # Every stored message below this seq has a "never" TTL, so max_age
        # expiry starts here rather than rescanning them.
        self._age_cursor = 0
        self.consumers = {}
        # The started consumers by filter, and the turn's new messages they
        # count (natsbroker.jetstream.consumer_index).
        self.index = ConsumerIndex()
        # Message schedules (allow_msg_schedules): their index and timer.
        self.schedules = S.Schedules(self)
        # Called with each StoredMsg appended (consumers, feeds): after limits.
        self.on_stored = []
        # IStreamEvents observers (shared with the plugin): every mutation.
        self.observers = ()

    # Publishes republished copies (set by the plugin to IBroker.publish).
    publish = None
    # The replica's Raft group (natsbroker.jetstream.cluster.streamgroup) of a
    # stream with more than one replica; None for a stream of one.
    group = None
    # Set while a replica applies a committed message: interest retention is
    # then its leader's call (it removes what nobody wants and says so in
    # the log), not each replica's, whose consumers are not running.
    replicated_apply = False
    # ``guard(subject, hdr, data)``: raises the ApiError of a publish the
    # server's or the account's storage limits refuse (natsbroker.jetstream.limits);
    # None when nothing bounds this stream's storage type.
    guard = None

    @property
    def config(self):
        return self._config

    @config.setter
    def config(self, cfg):
        self._config = cfg
        # Compiled once per config: the subject transform applied on ingest and
        # the republish mapping.
        st = cfg.subject_transform
        self._transform = (SubjectTransform.compile(st.src or ">", st.dest)
                           if st is not None and st.dest else None)
        rp = cfg.republish
        self._republish = (SubjectTransform.compile(rp.src or ">", rp.dest)
                           if rp is not None and rp.dest else None)

    @property
    def name(self):
        return self._config.name

    # -- publish ------------------------------------------------------------

    def accept(self, subject, hdr, data, ts=None, sourced=None, scheduled=False):
        """Store one published message; returns ``(seq, duplicate)`` (an
        ``Accepted``, with the counter's ``val``, for an increment).

        ``sourced`` ("mirror" or "source", from natsbroker.jetstream.sourcing): a
        copy of another stream's message, which skips the input transform and
        the publisher's expectations (see ``_sourced_headers``).  ``scheduled``:
        a copy this stream's schedules made (its ``Nats-Schedule-Next`` is the
        server's own)."""
        if not hdr and sourced is None:
            # The common case, checked here without the general machinery
            # (the same checks ``prepare`` makes of a message with no headers).
            cfg = self._config
            if cfg.sealed:
                raise E.stream_sealed()
            if self._transform is not None:
                subject = self._transform.match(subject) or subject
            if cfg.max_msg_size > 0 and len(data) > cfg.max_msg_size:
                raise E.stream_message_exceeds_maximum()
            if cfg.allow_msg_counter:
                raise E.message_incr_missing()
            if self.guard is not None:
                self.guard(subject, hdr, data)
            if cfg.discard == "new":
                self._check_discard_new(Prepared(subject, hdr, data), None)
            return self._store(subject, hdr, data, ts, None, None, 0, False), False
        p = self.prepare(subject, hdr, data, sourced, scheduled)
        if p.dup is not None:
            return p.dup, True
        seq = self._store(p.subject, p.hdr, p.data, ts,
                          p.msg_id, p.rollup, p.ttl, p.schedule)
        if p.val is not None:
            return Accepted(seq, p.val)
        return seq, False

    def prepare(self, subject, hdr, data, sourced=None, scheduled=False, batch=None):
        """Every check of a publish, in nats-server's order, without storing:
        a ``Prepared`` (``dup`` set for a duplicate), or ApiError.  ``batch``
        (natsbroker.jetstream.batches): what an atomic batch has staged before
        this message, which it is checked against too."""
        cfg = self._config
        if cfg.sealed:
            raise E.stream_sealed()
        if b"\r\nNats-Request-Info:" in hdr:
            hdr = HB.remove_header(hdr, H_REQUEST_INFO)
        if self._transform is not None and sourced is None:
            subject = self._transform.match(subject) or subject
        if cfg.max_msg_size > 0 and len(hdr) + len(data) > cfg.max_msg_size:
            raise E.stream_message_exceeds_maximum()
        if sourced is not None and hdr and b"Nats-Batch-" in hdr:
            # A copy is a message of its own, not part of the origin's batch.
            hdr = HB.remove_prefixed(hdr, b"Nats-Batch-")
        h = _headers(hdr) if hdr else _NO_HEADERS
        if sourced is not None and h:
            h = _sourced_headers(h, cfg, sourced)
        p = Prepared(subject, hdr, data)
        if not h:
            if cfg.allow_msg_counter:
                raise E.message_incr_missing()
            if self.guard is not None:
                self.guard(subject, hdr, data)
            if cfg.discard == "new":
                self._check_discard_new(p, batch)
            return p
        store = self.store
        get = h.get
        incr = get(counters.H_INCR) or None  # an empty value is no increment
        if incr is not None:
            incr = counters.parse_incr(incr)
            if sourced is None:
                if not cfg.allow_msg_counter:
                    raise E.message_incr_disabled()
                counters.check_publish(incr, data, h, sourced)
        expected = get(H_EXPECTED_STREAM)
        if expected and expected.decode(errors="replace") != cfg.name:
            raise E.stream_not_match()
        ttl_text = get(H_TTL)
        if ttl_text and not cfg.allow_msg_ttl:
            raise E.message_ttl_disabled()
        v = get(H_EXPECTED_LAST_SUBJ_SEQ)
        override = get(H_EXPECTED_LAST_SUBJ_SEQ_SUBJ)
        if not v and override:
            raise E.stream_expected_last_seq_per_subject_invalid()
        w = get(H_EXPECTED_LAST_SEQ)
        if w:
            last_seq = store.state().last_seq
            if batch is None:
                if _int(w) != last_seq:
                    raise E.stream_wrong_last_sequence(last_seq)
            else:
                batch.check_last_seq(_int(w), last_seq)
        if v:
            on = override or subject
            if batch is not None:
                batch.check_last_subj_seq(on, _int(v), store)
            else:
                last = store.load_last(on)
                last_seq = last.seq if last is not None else 0
                if _int(v) != last_seq:
                    raise E.stream_wrong_last_sequence(last_seq)
        if sourced is None and not scheduled:
            pattern = get(S.H_SCHEDULE)
            if pattern:
                hdr = S.check_schedule(pattern, h, hdr, subject, cfg, self.now(), parse_ttl)
                p.hdr = hdr
                p.schedule = True
                if not get(H_ROLLUP):
                    h = dict(h)
                    h[H_ROLLUP] = b"sub"
                    get = h.get
            if S.H_NEXT in h or S.H_SCHEDULER in h:
                S.check_scheduler(h, subject, cfg, store)
        msg_id = get(H_MSG_ID)
        if msg_id:
            if batch is not None:
                batch.check_msg_id(msg_id, self)
            else:
                self._trim_dedupe()
                hit = self._dedupe.get(msg_id)
                if hit is not None:
                    p.dup = hit[0]
                    return p
            p.msg_id = msg_id
        if cfg.allow_msg_counter and incr is None:
            raise E.message_incr_missing()
        v = get(H_EXPECTED_LAST_MSG_ID)
        if v:
            if batch is not None:
                raise E.atomic_publish_unsupported_header_batch(
                    H_EXPECTED_LAST_MSG_ID.decode())
            if v != (self._last_msg_id or b""):
                raise E.stream_wrong_last_msg_id(
                    (self._last_msg_id or b"").decode(errors="replace"))
        rollup = get(H_ROLLUP)
        if rollup:
            if not cfg.allow_rollup_hdrs or cfg.deny_purge:
                raise E.rollup_not_permitted()
            rollup = rollup.lower()
            if rollup not in (b"sub", b"all"):
                raise E.rollup_value_invalid(rollup.decode(errors="replace"))
            if batch is not None:
                batch.check_rollup(rollup, subject)
            p.rollup = rollup
        if ttl_text:
            ttl = parse_ttl(ttl_text)
            floor = cfg.subject_delete_marker_ttl // NANOS
            if 0 < ttl < floor and cfg.max_msgs_per_subject != 1:
                # A message may not outlive its own delete marker's reason:
                # nats-server raises the TTL to the marker TTL and says so
                # (not with one message per subject: no marker is missed).
                ttl = floor
                p.hdr = _replace_header_last(p.hdr, H_TTL, b"%d" % ttl)
            p.ttl = ttl
        if incr is not None and cfg.allow_msg_counter:
            running = batch.counter(subject) if batch is not None else None
            last = store.load_last(subject) if running is None else None
            p.hdr, p.data, p.val, p.sources = counters.apply(last, subject, p.hdr, data, incr,
                                                             running)
            limit = cfg.max_msg_size if cfg.max_msg_size > 0 else MAX_PAYLOAD
            if len(p.hdr) + len(p.data) > limit:
                raise E.stream_message_exceeds_maximum()
        if self.guard is not None:
            # The storage limits come after every check of the message, as
            # in nats-server (a duplicate is acked even past them).
            self.guard(p.subject, p.hdr, p.data)
        if cfg.discard == "new":
            self._check_discard_new(p, batch)
        return p

    def _check_discard_new(self, p, batch):
        """discard: new -- refuse what would go over a limit (with what an
        atomic batch has staged before it)."""
        cfg = self._config
        store = self.store
        state = store.state()
        size = msg_size(p.subject, p.hdr, p.data)
        msgs, nbytes, subj = 1, size, 1
        if batch is not None:
            msgs += batch.count
            nbytes += batch.bytes
            subj += batch.subjects.get(p.subject, 0)
        if cfg.max_msgs > 0 and state.msgs + msgs > cfg.max_msgs:
            raise E.store_max_msgs_exceeded()
        if cfg.max_bytes > 0 and state.bytes + nbytes > cfg.max_bytes:
            raise E.store_max_bytes_exceeded()
        if (cfg.discard_new_per_subject and cfg.max_msgs_per_subject > 0
                and store.count_subject(p.subject) + subj > cfg.max_msgs_per_subject):
            raise E.store_max_msgs_per_subject_exceeded()

    def store_prepared(self, p, ts=None):
        """Store a ``prepare``d message (it cannot be refused any more):
        returns ``(seq, False)``, an ``Accepted`` for a counter."""
        seq = self._store(p.subject, p.hdr, p.data, ts, p.msg_id, p.rollup, p.ttl, p.schedule)
        if p.val is not None:
            return Accepted(seq, p.val)
        return seq, False

    def _store(self, subject, hdr, data, ts, msg_id, rollup, ttl, schedule):
        cfg = self._config
        store = self.store
        ts = self.now() if ts is None else ts
        if cfg.retention == "interest" and not self.replicated_apply \
                and not self.has_interest(subject):
            # No consumer would ever see it: nats-server numbers the publish
            # but stores nothing.
            seq = store.skip(ts)
            if msg_id is not None:
                self._dedupe[msg_id] = (seq, ts)
                self._last_msg_id = msg_id
            return seq
        republish = self._republish
        if republish is not None:
            dest = republish.match(subject)
            if dest is not None:
                last = store.load_last(subject)
                last_seq = last.seq if last is not None else 0
        seq = store.append(subject, hdr, data, ts)
        observers = self.observers
        if observers:
            # The store's own record of it (staged): no copy per observer
            # event. emit() inlined: on the hot path of every stored message
            # while the change feed runs, the method call was ~10% of it.
            msg = store.last_appended
            event = _tuple_new(StreamEvent, (self.name, self.created, "put", seq, ts, None,
                                             msg if msg is not None else store.load(seq),
                                             None, None))
            for observer in observers:
                observer(event)
        if republish is not None and dest is not None and self.publish is not None:
            self._republish_msg(dest, subject, hdr, data, seq, ts, last_seq)
        if msg_id is not None:
            self._dedupe[msg_id] = (seq, ts)
            self._last_msg_id = msg_id
        if rollup == b"sub":
            self.purge("rollup", subject=subject, seq=seq)
        elif rollup == b"all":
            self.purge("rollup", seq=seq)
        if cfg.allow_msg_schedules and hdr:
            self._schedules_stored(seq, subject, hdr, ts, schedule)
        self.enforce_limits(subject)
        if ttl > 0:
            deadline = ts + ttl * NANOS
            heapq.heappush(self._ttl_heap, (deadline, seq))
            self.schedule_expiry(deadline)
        else:
            if ttl < 0:
                self._never.add(seq)
            if cfg.max_age > 0 and self._expiry_call is None:
                self.schedule_expiry()
        if self.on_stored or self.consumers:
            self._stored(seq)
        return seq

    def store_copy(self, subject, hdr, data, ts):
        """Store a message another replica of this stream already accepted
        (a catch-up): no publish checks, the limits as always. Its
        Nats-Msg-Id goes into the de-duplication window and its Nats-TTL
        into the expiry index, as nats-server's processCatchupMsg does: a
        replica caught up so must refuse the same retried publish its peers
        refuse, or it would store a message they do not."""
        msg_id, ttl = None, 0
        if hdr:
            h = _headers(hdr)
            msg_id = h.get(H_MSG_ID)
            v = h.get(H_TTL)
            if v is not None and self._config.allow_msg_ttl:
                try:
                    ttl = parse_ttl(v)
                except E.ApiError:
                    ttl = 0
        return self._store(subject, hdr, data, ts, msg_id, None, ttl, False)

    def _schedules_stored(self, seq, subject, hdr, ts, is_schedule):
        h = HB.exact(hdr, (S.H_SCHEDULE, S.H_TZ, S.H_SCHEDULER, S.H_NEXT))
        deadline = None
        if is_schedule:
            tz = h.get(S.H_TZ)
            try:
                deadline, _, _ = S.next_fire(h[S.H_SCHEDULE].decode("utf-8", "surrogateescape"),
                                             None if tz is None else tz.decode(), ts, self.now())
            except (ValueError, KeyError):
                deadline = None
        self.schedules.stored(seq, subject, hdr, h, deadline)

    def _republish_msg(self, dest, subject, hdr, data, seq, ts, last_seq):
        """A copy to the republish destination, with the headers nats-server adds."""
        base = hdr[:-2] if hdr else b"NATS/1.0\r\n"
        extra = (b"Nats-Stream: %s\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\n"
                 b"Nats-Time-Stamp: %s\r\nNats-Last-Sequence: %d\r\n") % (
            self.name.encode(), subject, seq, rfc3339(ts).encode(), last_seq)
        if self._config.republish.headers_only:
            extra += b"Nats-Msg-Size: %d\r\n" % len(data)
            data = b""
        self.publish(dest, data, headers=base + extra + b"\r\n")

    # -- mutations seen by observers ------------------------------------------

    def emit(self, op, seq, ts, reason=None, msg=None, purge=None, config=None):
        # tuple.__new__: the named tuple's own __new__ is a Python function.
        event = _tuple_new(StreamEvent, (self.name, self.created, op, seq, ts, reason, msg,
                                         purge, config))
        for observer in self.observers:
            observer(event)

    def remove(self, seq, reason, erase=False):
        """Remove one message, telling observers why. True if it existed."""
        if not self.observers:
            return self.store.remove(seq, erase=erase)
        msg = self.store.load(seq)
        if msg is None or not self.store.remove(seq, erase=erase):
            return False
        self.emit("delete", seq, self.now(), reason=reason, msg=msg)
        return True

    def purge(self, reason, subject=None, seq=None, keep=None):
        """Purge (as StreamStore.purge), telling observers; returns the count."""
        n = self.store.purge(subject=subject, seq=seq, keep=keep)
        if self.observers:
            filt = subject.decode(errors="replace") if subject else None
            self.emit("purge", self.store.state().last_seq, self.now(), reason=reason,
                      purge=(filt, seq, keep))
        return n

    def has_interest(self, subject):
        """Whether any consumer's filter takes ``subject`` (interest retention)."""
        return self.index.has_interest(subject)

    def _stored(self, seq):
        msg = self.store.load(seq)
        if msg is None:
            return  # a limit took it at once
        # Wakes the consumers that take it; they count it when next asked.
        self.index.stored(msg.seq, msg.subject)
        for cb in self.on_stored:
            cb(msg)

    def forget(self, seqs):
        """Messages given up after a failed store write (``seqs``, never
        acknowledged): their ids leave the de-duplication window so a retry is
        stored, and consumers count pending messages again."""
        for key in [k for k, (seq, _) in self._dedupe.items() if seq in seqs]:
            del self._dedupe[key]
        if self._last_msg_id is not None and self._last_msg_id not in self._dedupe:
            self._last_msg_id = next(reversed(self._dedupe), None)
        for c in self.consumers.values():
            c.npc = c.compute_pending()
        self.index.forget()  # those counts include what is logged

    def _trim_dedupe(self):
        window = self.config.duplicate_window
        if not self._dedupe:
            return
        # Entries are in publish order, so the expired ones are at the front:
        # drop from there and stop at the first live one (no scan of the window).
        cutoff = self.now() - window
        dedupe = self._dedupe
        while dedupe:
            key, (_, ts) = next(iter(dedupe.items()))
            if ts >= cutoff:
                break
            dedupe.popitem(last=False)

    # -- restart ------------------------------------------------------------

    def seq_for_time(self, ts):
        """A sequence from which ``store.load_next`` finds the first message
        stamped at or after ``ts`` (binary search: stamps follow sequences)."""
        store = self.store
        st = store.state()
        lo, hi = st.first_seq, st.last_seq + 1
        while lo < hi:
            mid = (lo + hi) // 2
            m = store.load_next(mid)
            if m is None or m.ts >= ts:
                hi = mid
            else:
                lo = m.seq + 1
        return lo

    def recover(self):
        """Rebuild what lives only in memory after a restart: the de-duplication
        window (from the Nats-Msg-Id headers stamped within it) and the TTL
        index (from every Nats-TTL header)."""
        cfg = self.config
        store = self.store
        now = self.now()
        window_start = self.seq_for_time(now - cfg.duplicate_window)
        scan_all = cfg.allow_msg_ttl or cfg.allow_msg_schedules
        start = store.state().first_seq if scan_all else window_start
        msg = store.load_next(start)
        while msg is not None:
            if msg.hdr and cfg.allow_msg_schedules:
                self.schedules.recover(msg)
            if msg.hdr:
                h = _headers(msg.hdr)
                if msg.seq >= window_start and H_MSG_ID in h:
                    self._dedupe[h[H_MSG_ID]] = (msg.seq, msg.ts)
                    self._last_msg_id = h[H_MSG_ID]
                v = h.get(H_TTL)
                if v is not None and cfg.allow_msg_ttl:
                    try:
                        ttl = parse_ttl(v)
                    except E.ApiError:
                        ttl = 0
                    if ttl > 0:
                        self._ttl_heap.append((msg.ts + ttl * NANOS, msg.seq))
                    elif ttl < 0:
                        self._never.add(msg.seq)
            msg = store.load_next(msg.seq + 1)
        heapq.heapify(self._ttl_heap)
        self.schedule_expiry()
        self.schedules.arm()

    # -- limits -------------------------------------------------------------

    def enforce_limits(self, subject=None):
        """Discard-old limits after an append: per subject, count, bytes."""
        cfg = self.config
        store = self.store
        # Per-subject history evicts the subject's oldest whatever the discard
        # policy (discard_new_per_subject refused the publish earlier instead).
        if subject is not None and cfg.max_msgs_per_subject > 0:
            while store.count_subject(subject) > cfg.max_msgs_per_subject:
                self.remove(store.first_seq_of_subject(subject), "limit")
        if cfg.discard == "new" or (cfg.max_msgs <= 0 and cfg.max_bytes <= 0):
            return
        state = store.state()
        while cfg.max_msgs > 0 and state.msgs > cfg.max_msgs:
            self._remove_first(state)
            state = store.state()
        while cfg.max_bytes > 0 and state.bytes > cfg.max_bytes and state.msgs:
            self._remove_first(state)
            state = store.state()

    def _remove_first(self, state):
        msg = self.store.load_next(state.first_seq)
        if msg is not None:
            self.remove(msg.seq, "limit")

    # -- expiry (max_age, per-message TTL, subject delete markers) -------------

    def _first_aging(self):
        """The oldest message max_age applies to (skipping "never" TTLs)."""
        store = self.store
        st = store.state()
        if not st.msgs:
            return None
        seq = max(self._age_cursor, st.first_seq)
        never = self._never
        msg = store.load_next(seq)
        while msg is not None and msg.seq in never:
            self._age_cursor = msg.seq + 1
            msg = store.load_next(msg.seq + 1)
        return msg

    def _next_deadline(self):
        deadline = self._ttl_heap[0][0] if self._ttl_heap else None
        if self.config.max_age > 0:
            msg = self._first_aging()
            if msg is not None:
                at = msg.ts + self.config.max_age
                if deadline is None or at < deadline:
                    deadline = at
        return deadline

    def schedule_expiry(self, deadline=None):
        """Arm the one expiry timer for ``deadline`` (default: the earliest due)."""
        if deadline is None:
            deadline = self._next_deadline()
            if deadline is None:
                return
        if self._expiry_call is not None:
            if self._expiry_at <= deadline:
                return
            self._expiry_call.cancel()
        self._expiry_at = deadline
        delay = max((deadline - self.now()) / NANOS, 0)
        self._expiry_call = self.clock.callLater(delay, self._expire)

    def _expire(self):
        self._expiry_call = None
        self._expiry_at = None
        now = self.now()
        store = self.store
        removed = []
        heap = self._ttl_heap
        while heap and heap[0][0] <= now:
            _, seq = heapq.heappop(heap)
            msg = store.load(seq)
            if msg is not None:
                self.remove(seq, "ttl")
                removed.append(msg)
        max_age = self.config.max_age
        if max_age > 0:
            cutoff = now - max_age
            never = self._never
            seq = max(self._age_cursor, store.state().first_seq)
            msg = store.load_next(seq)
            while msg is not None and msg.ts <= cutoff:
                if msg.seq not in never:
                    self.remove(msg.seq, "max_age")
                    removed.append(msg)
                self._age_cursor = msg.seq + 1
                msg = store.load_next(msg.seq + 1)
        if removed and self.config.subject_delete_marker_ttl > 0:
            self._place_markers(removed, now)
        self.on_change()
        self.schedule_expiry()

    def _place_markers(self, removed, now):
        """A subject whose last message expired gets a delete marker (itself
        expiring), so watchers learn of the removal; markers get none."""
        ttl = self.config.subject_delete_marker_ttl
        secs = ttl // NANOS
        hdr = b"NATS/1.0\r\n%s: MaxAge\r\n%s: %s\r\nNats-Rollup: sub\r\n\r\n" % (
            H_MARKER_REASON, H_TTL, format_duration(ttl).encode())
        store = self.store
        done = set()
        for msg in sorted(removed, key=lambda m: m.seq):
            subj = msg.subject
            if subj in done or is_marker(msg.hdr) or store.count_subject(subj):
                continue
            done.add(subj)
            seq = store.append(subj, hdr, b"", now)
            if self.observers:
                self.emit("put", seq, now, msg=StoredMsg(seq, subj, hdr, b"", now))
            self.enforce_limits(subj)
            heapq.heappush(self._ttl_heap, (now + secs * NANOS, seq))
            if self.on_stored or self.consumers:
                self._stored(seq)

    def forget_removed(self):
        """Drop index entries of messages a purge took (they would only
        cost memory and spurious wake-ups)."""
        store = self.store
        if self._ttl_heap:
            self._ttl_heap = [(d, s) for d, s in self._ttl_heap if store.load(s) is not None]
            heapq.heapify(self._ttl_heap)
        if self._never:
            self._never = {s for s in self._never if store.load(s) is not None}

    def on_change(self):
        """Hook: the plugin commits the store after timer-driven removals."""

    def stop(self):
        self.schedules.stop()
        if self._expiry_call is not None and self._expiry_call.active():
            self._expiry_call.cancel()
        self._expiry_call = None
        self._expiry_at = None


def _int(v):
    try:
        return int(v)
    except ValueError:
        return -1
