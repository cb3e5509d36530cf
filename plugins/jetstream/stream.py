"""One JetStream stream: its config, its store, and the publish path with limits.

``Stream.accept`` is what a captured PUB/HPUB runs: header expectations, de-duplication,
size and discard-new checks, the store append, then discard-old limits and
rollups. It returns the sequence stored (or the duplicate's), or raises ApiError;
acks are the caller's business, sent only after the store's group commit.
"""

import collections
import time

from natsbroker.protocol.wire import HeaderError, decode_headers
from natsbroker.store.base import msg_size

from plugins.jetstream import errors as E

NANOS = 1_000_000_000

# Headers the publish path reads.
H_MSG_ID = b"Nats-Msg-Id"
H_EXPECTED_STREAM = b"Nats-Expected-Stream"
H_EXPECTED_LAST_SEQ = b"Nats-Expected-Last-Sequence"
H_EXPECTED_LAST_SUBJ_SEQ = b"Nats-Expected-Last-Subject-Sequence"
H_EXPECTED_LAST_MSG_ID = b"Nats-Expected-Last-Msg-Id"
H_ROLLUP = b"Nats-Rollup"
H_TTL = b"Nats-TTL"

_WATCHED = {h.lower(): h for h in (H_MSG_ID, H_EXPECTED_STREAM, H_EXPECTED_LAST_SEQ,
                                   H_EXPECTED_LAST_SUBJ_SEQ, H_EXPECTED_LAST_MSG_ID,
                                   H_ROLLUP, H_TTL)}


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
        key = _WATCHED.get(name.lower())
        if key is not None and key not in out:
            out[key] = value
    return out


class Stream:
    """A stream's runtime: config, store, de-duplication window, timers."""

    def __init__(self, config, store, created_ns, clock):
        self.config = config
        self.store = store
        self.created = created_ns
        self.clock = clock
        # Nats-Msg-Id -> (seq, ts) within duplicate_window, oldest first.
        self._dedupe = collections.OrderedDict()
        self._last_msg_id = None
        self._expiry_call = None
        self.consumers = {}

    @property
    def name(self):
        return self.config.name

    # -- publish ------------------------------------------------------------

    def accept(self, subject, hdr, data, ts=None):
        """Store one published message; returns ``(seq, duplicate)``."""
        cfg = self.config
        if cfg.sealed:
            raise E.stream_sealed()
        h = _headers(hdr) if hdr else _NO_HEADERS
        store = self.store
        msg_id = h.get(H_MSG_ID)
        if msg_id is not None:
            self._trim_dedupe()
            hit = self._dedupe.get(msg_id)
            if hit is not None:
                return hit[0], True
        expected = h.get(H_EXPECTED_STREAM)
        if expected is not None and expected.decode(errors="replace") != cfg.name:
            raise E.stream_not_match()
        v = h.get(H_EXPECTED_LAST_SEQ)
        if v is not None:
            state = store.state()
            if _int(v) != state.last_seq:
                raise E.stream_wrong_last_sequence(state.last_seq)
        v = h.get(H_EXPECTED_LAST_SUBJ_SEQ)
        if v is not None:
            last = store.load_last(subject)
            last_seq = last.seq if last is not None else 0
            if _int(v) != last_seq:
                raise E.stream_wrong_last_sequence(last_seq)
        v = h.get(H_EXPECTED_LAST_MSG_ID)
        if v is not None and v != (self._last_msg_id or b""):
            raise E.stream_wrong_last_msg_id((self._last_msg_id or b"").decode(errors="replace"))
        rollup = h.get(H_ROLLUP)
        if rollup is not None:
            if not cfg.allow_rollup_hdrs:
                raise E.rollup_not_permitted()
            rollup = rollup.lower()
            if rollup not in (b"sub", b"all"):
                raise E.rollup_value_invalid(rollup.decode(errors="replace"))
        if h.get(H_TTL) is not None and not cfg.allow_msg_ttl:
            raise E.message_ttl_disabled()
        size = msg_size(subject, hdr, data)
        if cfg.max_msg_size > 0 and len(hdr) + len(data) > cfg.max_msg_size:
            raise E.stream_message_exceeds_maximum()
        if cfg.discard == "new":
            state = store.state()
            if cfg.max_msgs > 0 and state.msgs >= cfg.max_msgs:
                raise E.store_max_msgs_exceeded()
            if cfg.max_bytes > 0 and state.bytes + size > cfg.max_bytes:
                raise E.store_max_bytes_exceeded()
            if (cfg.discard_new_per_subject and cfg.max_msgs_per_subject > 0
                    and store.count_subject(subject) >= cfg.max_msgs_per_subject):
                raise E.store_max_msgs_per_subject_exceeded()
        ts = now_ns() if ts is None else ts
        seq = store.append(subject, hdr, data, ts)
        if msg_id is not None:
            self._dedupe[msg_id] = (seq, ts)
            self._last_msg_id = msg_id
        if rollup == b"sub":
            store.purge(subject=subject, seq=seq)
        elif rollup == b"all":
            store.purge(seq=seq)
        self.enforce_limits(subject)
        self.schedule_expiry()
        return seq, False

    def _trim_dedupe(self):
        window = self.config.duplicate_window
        if not self._dedupe:
            return
        # Entries are in publish order, so the expired ones are at the front:
        # drop from there and stop at the first live one (no scan of the window).
        cutoff = now_ns() - window
        dedupe = self._dedupe
        while dedupe:
            key, (_, ts) = next(iter(dedupe.items()))
            if ts >= cutoff:
                break
            dedupe.popitem(last=False)

    # -- limits -------------------------------------------------------------

    def enforce_limits(self, subject=None):
        """Discard-old limits after an append: per subject, count, bytes."""
        cfg = self.config
        store = self.store
        # Per-subject history evicts the subject's oldest whatever the discard
        # policy (discard_new_per_subject refused the publish earlier instead).
        if subject is not None and cfg.max_msgs_per_subject > 0:
            while store.count_subject(subject) > cfg.max_msgs_per_subject:
                store.remove(store.first_seq_of_subject(subject))
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
            self.store.remove(msg.seq)

    def schedule_expiry(self):
        """One reactor timer for the oldest message's max_age deadline."""
        max_age = self.config.max_age
        if max_age <= 0 or self._expiry_call is not None:
            return
        state = self.store.state()
        if not state.msgs:
            return
        delay = max((state.first_ts + max_age - now_ns()) / NANOS, 0)
        self._expiry_call = self.clock.callLater(delay, self._expire)

    def _expire(self):
        self._expiry_call = None
        cutoff = now_ns() - self.config.max_age
        store = self.store
        while True:
            state = store.state()
            if not state.msgs:
                break
            msg = store.load_next(state.first_seq)
            if msg is None or msg.ts > cutoff:
                break
            store.remove(msg.seq)
        self.on_change()
        self.schedule_expiry()

    def on_change(self):
        """Hook: the plugin commits the store after timer-driven removals."""

    def stop(self):
        if self._expiry_call is not None and self._expiry_call.active():
            self._expiry_call.cancel()
        self._expiry_call = None


def _int(v):
    try:
        return int(v)
    except ValueError:
        return -1
