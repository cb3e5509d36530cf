"""The message-store contract JetStream streams are built on.

Two implementations: :mod:`natsbroker.store.leveldb` (``storage: file``, plyvel)
and :mod:`natsbroker.store.memory` (``storage: memory``); one shared test suite
runs against both.

A :class:`Store` holds many streams (:class:`StreamStore`). Writes are staged and
become durable on :meth:`Store.commit`, which the server calls once per reactor
turn before it sends the acks that depend on them (group commit). Reads always
see staged writes (read-your-writes), committed or not.

Subjects, headers and payloads are ``bytes``; timestamps are integers in
nanoseconds since the epoch; sequences start at 1.
"""

from typing import NamedTuple

import attrs


class StoredMsg(NamedTuple):
    """One stored message. A named tuple rather than an attrs class: one is
    made for every message stored and every one read back, and a tuple is
    built several times faster."""
    seq: int
    subject: bytes
    hdr: bytes  # the NATS/1.0 header block, b"" when none
    data: bytes
    ts: int  # ns since epoch


class StreamEvent(NamedTuple):
    """One mutation of a stream, as IStreamEvents observers see it.

    ``op``: ``put`` (``msg`` stored), ``delete`` (``msg`` removed; ``reason``
    api, limit, max_age, ttl, ack, interest), ``purge`` (``purge`` is
    ``(filter, upto_seq, keep)``; ``reason`` api or rollup), ``stream_create``,
    ``stream_update`` (``config``: the config JSON dict), ``stream_delete``.
    ``seq``: the message's sequence, or the stream's last sequence for
    purges and stream-level events; ``ts`` ns: the message's stamp for a put,
    the time of the event otherwise.
    A named tuple, like StoredMsg: one is made for every stored message
    while an observer is registered.
    """
    stream: str
    stream_created: int
    op: str
    seq: int
    ts: int
    reason: str = None
    msg: StoredMsg = None
    purge: tuple = None
    config: dict = None


@attrs.define
class StreamState:
    msgs: int = 0
    bytes: int = 0
    first_seq: int = 0  # 0 when never written; last_seq + 1 when empty after removals
    first_ts: int = 0
    last_seq: int = 0
    last_ts: int = 0
    num_subjects: int = 0
    num_deleted: int = 0  # interior gaps between first_seq and last_seq
    lost: tuple = None  # (sequences, bytes) of acked messages lost to damage (file store)


def msg_size(subject, hdr, data):
    """Bytes a message counts for in a memory stream (nats-server's memStoreMsgSize)."""
    return len(subject) + len(hdr) + len(data) + 16


def file_msg_size(subject, hdr, data):
    """Bytes a message counts for in a file stream (nats-server's fileStoreMsgSize:
    record length, sequence, timestamp, subject length, [header length], hash)."""
    if hdr:
        return 22 + len(subject) + 4 + len(hdr) + len(data) + 8
    return 22 + len(subject) + len(data) + 8


class StreamStore:
    """The messages of one stream. All methods run in the reactor thread."""

    # The StoredMsg of the latest ``append`` (a store may leave it None): what
    # stream observers are given for it, without a ``load``.
    last_appended = None

    def state(self):
        """Current :class:`StreamState`."""
        raise NotImplementedError

    @property
    def stored_bytes(self):
        """``state().bytes`` (stores may answer it without building a state)."""
        return self.state().bytes

    def append(self, subject, hdr, data, ts):
        """Store a message with the next sequence; returns that sequence."""
        raise NotImplementedError

    def skip(self, ts):
        """Use up the next sequence without storing a message; returns it."""
        raise NotImplementedError

    def load(self, seq):
        """The message at ``seq``, or ``None`` if absent or deleted."""
        raise NotImplementedError

    def load_next(self, seq, filter_subject=None):
        """The first message with sequence >= ``seq`` whose subject matches the
        (possibly wildcard) ``filter_subject``; ``None`` if there is none."""
        raise NotImplementedError

    def load_last(self, filter_subject=None):
        """The last message matching ``filter_subject`` (uses the per-subject
        index for a literal subject: no scan)."""
        raise NotImplementedError

    def remove(self, seq, erase=False):
        """Delete one message; ``erase`` overwrites its bytes first. True if it existed."""
        raise NotImplementedError

    def purge(self, subject=None, seq=None, keep=None):
        """Remove messages: all, or those matching ``subject``; only below ``seq``
        if given; keeping the newest ``keep`` if given. Returns the count removed.
        A full purge moves first_seq to last_seq + 1."""
        raise NotImplementedError

    def subject_counts(self, filter_subject=None):
        """``{subject: count}`` of stored messages matching the filter."""
        raise NotImplementedError

    def count_subject(self, subject):
        """Number of stored messages with exactly this literal subject."""
        raise NotImplementedError

    def first_seq_of_subject(self, subject):
        """Sequence of the oldest message with this literal subject, or 0."""
        raise NotImplementedError

    def deleted(self):
        """Sorted list of interior deleted sequences (for ``deleted_details``)."""
        raise NotImplementedError

    def num_pending(self, start_seq, filter_subject=None):
        """Messages with sequence >= ``start_seq`` matching the filter."""
        raise NotImplementedError

    def put_meta(self, key, value):
        """Store small metadata (stream config, consumer state) under ``key`` (bytes)."""
        raise NotImplementedError

    def get_meta(self, key):
        raise NotImplementedError

    def del_meta(self, key):
        raise NotImplementedError

    def meta_keys(self, prefix=b""):
        raise NotImplementedError

    def set_floor(self, key, values):
        """Keep 4 ints under ``key`` (bytes) that must never go back, even if
        the store is damaged (a consumer's delivered and ack floors); written
        with the next commit. Stores without a high-water mark ignore it."""

    def del_floor(self, key):
        """Forget the floors under ``key``."""

    def floor(self, key):
        """The floors under ``key`` as found when the store was opened, or None."""
        return None


class Store:
    """All streams of a server."""

    def create_stream(self, name):
        """A new, empty StreamStore called ``name``."""
        raise NotImplementedError

    def stream(self, name):
        """The StreamStore called ``name``, or ``None``."""
        raise NotImplementedError

    def stream_names(self):
        """Names of all streams, sorted."""
        raise NotImplementedError

    def delete_stream(self, name):
        """Remove a stream and all its data. Returns a Deferred (file stores may
        finish in a thread) but the stream is gone from :meth:`stream` at once."""
        raise NotImplementedError

    def commit(self, sync=True):
        """Make every staged write durable (one sync for the whole turn);
        ``sync=False`` writes without waiting for the disk."""
        raise NotImplementedError

    @property
    def dirty(self):
        """True if there are staged writes waiting for :meth:`commit`."""
        raise NotImplementedError

    def close(self):
        raise NotImplementedError
