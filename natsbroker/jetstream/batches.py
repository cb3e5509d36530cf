"""Atomic batch publish (``allow_atomic``): all of a batch's messages, or none.

A batch is messages with the same ``Nats-Batch-Id`` (at most 64 bytes) and
``Nats-Batch-Sequence`` 1, 2, 3...; the last carries ``Nats-Batch-Commit: 1``
(stored with the others) or ``Nats-Batch-Commit: eob`` (not stored; the
previous message is stored with ``Nats-Batch-Commit: 1``).  Until the commit
nothing is stored: a message with a reply subject gets an empty reply (flow
control), a refused one its error, and a gap, a timeout or any error ends the
batch.  At the commit every message is checked (``Stream.prepare``) against
the stream and against the batch before it -- one message id once, an
expected last sequence only on the first message, no per-subject expectation
or ``sub`` roll-up on a subject the batch already wrote, an ``all`` roll-up
only first -- then all are stored in the same turn, so in the stream's one
write batch of the group commit, and the PubAck (``"batch"``, ``"count"``)
goes out only once that is synced, like any other.

Limits are nats-server's defaults: 1000 messages per batch, 50 batches
in flight per stream and 1000 per server, 10 s without a message (each one
restarts the clock).  ``Nats-Required-Api-Level`` (natsbroker.jetstream.apilevel)
is read once the batch is known: above our level the batch is abandoned
(412/10185), else the header is dropped from the stored message.
"""

from natsbroker.jetstream import api, apilevel, errors as E, headers as HB
from natsbroker.store.base import msg_size

H_BATCH_ID = b"Nats-Batch-Id"
H_BATCH_SEQ = b"Nats-Batch-Sequence"
H_BATCH_COMMIT = b"Nats-Batch-Commit"
_NAMES = (H_BATCH_ID, H_BATCH_SEQ, H_BATCH_COMMIT)

MAX_ID_LEN = 64
MAX_MSGS = 1000
MAX_INFLIGHT_PER_STREAM = 50
MAX_INFLIGHT_TOTAL = 1000
TIMEOUT = 10.0  # seconds
ADVISORY_ABANDONED = "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED."
# The errors that end a batch in flight with an advisory, and its reason.
_ABANDON_REASONS = {10176: "incomplete", 10199: "large", 10185: "unsupported"}


def server_limit(js, name, default):
    """``jetstream { limits { batch { name } } }`` when set (> 0), else nats-server's default."""
    value = getattr(getattr(js.js, "limits", None), name, 0)
    return value if value > 0 else default


class Staged:
    """What a batch has prepared so far, that the next message is checked
    against (nats-server's batchStagedDiff)."""

    def __init__(self):
        self.count = 0
        self.bytes = 0
        self.subjects = {}    # subject -> messages of the batch on it
        self.msg_ids = set()
        self.counters = {}    # subject -> (total, sources) not yet stored
        self.expected = {}    # subject -> last sequence an expectation saw

    def check_last_seq(self, expected, last_seq):
        last = last_seq + self.count
        if expected != last:
            raise E.stream_wrong_last_sequence(last)
        if self.count:
            raise E.stream_wrong_last_sequence_constant()

    def check_last_subj_seq(self, subject, expected, store):
        if subject in self.subjects:
            raise E.stream_wrong_last_sequence_constant()
        seen = self.expected.get(subject)
        if seen is None:
            last = store.load_last(subject)
            seen = last.seq if last is not None else 0
        if expected != seen:
            raise E.stream_wrong_last_sequence(seen)
        self.expected[subject] = seen

    def check_msg_id(self, msg_id, stream):
        stream._trim_dedupe()
        if msg_id in self.msg_ids or msg_id in stream._dedupe:
            raise E.atomic_publish_contains_duplicate_message()

    def check_rollup(self, rollup, subject):
        if rollup == b"all" and self.count:
            raise E.stream_rollup_failed("batch rollup all invalid")
        if rollup == b"sub" and subject in self.subjects:
            raise E.stream_rollup_failed("batch rollup sub invalid")

    def counter(self, subject):
        return self.counters.get(subject)

    def note(self, p):
        self.count += 1
        self.bytes += msg_size(p.subject, p.hdr, p.data)
        self.subjects[p.subject] = self.subjects.get(p.subject, 0) + 1
        if p.msg_id is not None:
            self.msg_ids.add(p.msg_id)
        if p.val is not None:
            self.counters[p.subject] = (p.val, p.sources)


class Batch:
    """One batch in flight: its messages so far and its timeout."""

    __slots__ = ("stream", "id", "msgs", "timer")

    def __init__(self, stream, batch_id):
        self.stream = stream
        self.id = batch_id
        self.msgs = []  # (subject, hdr, data)
        self.timer = None


def prepare_all(stream, msgs):
    """``Stream.prepare`` of every ``(subject, hdr, data)`` of a batch, each
    against the stream and the batch before it; raises the first refusal."""
    staged = Staged()
    prepared = []
    for subject, hdr, data in msgs:
        p = stream.prepare(subject, hdr, data, batch=staged)
        staged.note(p)
        prepared.append(p)
    return prepared


def _seq(value):
    """A Nats-Batch-Sequence, or None when missing or not a number."""
    if not value or not value.isdigit():
        return None
    return int(value)


class Batches:
    """Every stream's batches in flight, for the JetStream plugin ``js``."""

    def __init__(self, js):
        self.js = js
        self.inflight = {}   # (stream name, batch id) -> Batch
        self.per_stream = {}  # stream name -> batches in flight

    def publish(self, stream, subject, reply, hdr, data):
        """Take one message with a ``Nats-Batch-Id``; False when the id is
        empty (an ordinary publish then)."""
        h = HB.exact(hdr, _NAMES)
        batch_id = h.get(H_BATCH_ID)
        if not batch_id:
            return False
        try:
            self._take(stream, batch_id, subject, reply, hdr, data, h)
        except E.ApiError as e:
            self._reply(reply, api.pub_ack_error(stream.name, e))
        return True

    def _take(self, stream, batch_id, subject, reply, hdr, data, h):
        cfg = stream.config
        key = (stream.name, batch_id)
        batch = self.inflight.get(key)
        if batch is not None and batch.stream is not stream:
            self._end(batch)  # the stream it was for is gone
            batch = None
        try:
            if cfg.sealed:
                raise E.stream_sealed()
            if cfg.max_msg_size > 0 and len(hdr) + len(data) > cfg.max_msg_size:
                raise E.stream_message_exceeds_maximum()
            if not cfg.allow_atomic:
                raise E.atomic_publish_disabled()
            if len(batch_id) > MAX_ID_LEN:
                raise E.atomic_publish_invalid_batch_id()
            seq = _seq(h.get(H_BATCH_SEQ))
            if seq is None:
                raise E.atomic_publish_missing_seq()
            commit = h.get(H_BATCH_COMMIT)
            if commit and commit not in (b"1", b"eob"):
                raise E.atomic_publish_invalid_batch_commit()
            max_msgs = server_limit(self.js, "batch_max_msgs", MAX_MSGS)
            if seq > max_msgs:
                raise E.atomic_publish_too_large_batch(max_msgs)
            if batch is None:
                if seq != 1:
                    raise E.atomic_publish_incomplete_batch()
                if (self.per_stream.get(stream.name, 0) >= server_limit(
                        self.js, "batch_max_inflight_per_stream", MAX_INFLIGHT_PER_STREAM)
                        or len(self.inflight) >= server_limit(
                            self.js, "batch_max_inflight_total", MAX_INFLIGHT_TOTAL)):
                    raise E.atomic_publish_too_many_inflight()
                batch = self._begin(stream, batch_id)
            if apilevel.required(hdr) is not None:
                # Read after the batch is known and before its sequence; an
                # accepted one is not stored.
                if apilevel.refused(hdr):
                    raise E.required_api_level()
                hdr = apilevel.strip(hdr)
            if seq != len(batch.msgs) + 1:
                raise E.atomic_publish_incomplete_batch()
        except E.ApiError as e:
            if batch is not None:
                self._end(batch)
                self._abandoned(batch, _ABANDON_REASONS.get(e.err_code))
            raise
        if commit == b"eob":
            self._end(batch)
            if not batch.msgs:
                self._abandoned(batch, "incomplete")
                raise E.atomic_publish_incomplete_batch()
            s, lhdr, ldata = batch.msgs[-1]
            batch.msgs[-1] = (s, HB.set_header(lhdr, H_BATCH_COMMIT, b"1"), ldata)
            self._commit(stream, batch, reply)
            return
        batch.msgs.append((subject, hdr, data))
        batch.timer.reset(server_limit(self.js, "batch_timeout", TIMEOUT))  # 10 s without a message, not from the first
        if commit:
            self._end(batch)
            self._commit(stream, batch, reply)
        elif reply:
            self._reply(reply, b"")  # flow control: staged, nothing stored yet

    def _begin(self, stream, batch_id):
        batch = Batch(stream, batch_id)
        self.inflight[(stream.name, batch_id)] = batch
        self.per_stream[stream.name] = self.per_stream.get(stream.name, 0) + 1
        batch.timer = self.js.broker.reactor.callLater(
            server_limit(self.js, "batch_timeout", TIMEOUT), self._timeout, batch)
        return batch

    def _end(self, batch):
        key = (batch.stream.name, batch.id)
        if self.inflight.get(key) is not batch:
            return
        del self.inflight[key]
        n = self.per_stream.get(batch.stream.name, 1) - 1
        if n > 0:
            self.per_stream[batch.stream.name] = n
        else:
            self.per_stream.pop(batch.stream.name, None)
        if batch.timer is not None and batch.timer.active():
            batch.timer.cancel()
        batch.timer = None

    def _timeout(self, batch):
        batch.timer = None
        self._end(batch)
        self._abandoned(batch, "timeout")

    def _abandoned(self, batch, reason):
        """nats-server's stream batch abandoned advisory (``reason``: timeout,
        incomplete, large or unsupported; None: it sends none)."""
        if reason is None:
            return
        event = {"type": "io.nats.jetstream.advisory.v1.stream_batch_abandoned",
                 "stream": batch.stream.name}
        if self.js.js.domain:
            event["domain"] = self.js.js.domain
        event.update(batch=batch.id.decode("utf-8", "replace"), reason=reason)
        self.js.advise(ADVISORY_ABANDONED + batch.stream.name, event)

    def _commit(self, stream, batch, reply):
        """Check every message, then store them all (or none). A replicated
        stream's leader proposes the batch instead; every replica checks
        and stores it when it commits (JetStream.apply_replicated_batch)."""
        group = getattr(stream, "group", None)
        if group is not None:
            group.propose_batch(batch.id, batch.msgs, reply)
            return
        prepared = prepare_all(stream, batch.msgs)
        seq = 0
        for p in prepared:
            seq = stream.store_prepared(p)[0]
        js = self.js
        js._stored = True
        if reply:
            js._acks.append((reply, api.pub_ack(stream.name, seq, False, js.js.domain,
                                                batch=batch.id.decode("utf-8", "replace"),
                                                count=len(prepared)),
                             (stream, seq)))
        js.schedule_commit()

    def _reply(self, reply, payload):
        if reply:
            self.js._acks.append((reply, payload, None))
            self.js.schedule_commit()
