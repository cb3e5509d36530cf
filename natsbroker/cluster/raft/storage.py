"""Where an NRG node keeps what must survive a restart.

A node's durable state, as nats-server's raft.go keeps it in a group's
directory:

* the term and the vote (``tav.idx``);
* the peer state (``peers.idx``);
* the WAL: one record per stored AppendEntry, whose index is its Raft index
  (NRG counts AppendEntries, not the entries inside them), holding the
  AppendEntry exactly as it was encoded, so that a catch-up can resend it;
* the last snapshot: its term and index, the peer state at that index and
  the upper layer's data.

Every method that changes state returns only once the change is durable: a
node persists its vote before granting it and an append before
acknowledging it. :class:`MemoryStorage` keeps all of it in memory and stands
for a disk in the state machine's tests (a "restart" builds a new node on
the same storage); :class:`natsbroker.cluster.raft.filestorage.FileStorage`
keeps it on disk.
"""

import attrs


@attrs.frozen
class Snapshot:
    """An installed snapshot: the upper layer's state as of ``last_index``."""

    last_term: int
    last_index: int
    peer_state: bytes  # an encoded wire.PeerState
    data: bytes


class StorageError(Exception):
    """Stored state that cannot be read back as written (damage): named,
    never served and never deleted."""


class MemoryStorage:
    """The storage interface, kept in memory.

    ``first_index``/``last_index`` follow a nats-server WAL's FirstSeq and
    LastSeq: empty means ``first_index == last_index + 1``; compacting
    through a snapshot moves ``first_index`` past it while ``last_index``
    stays.
    """

    def __init__(self):
        self._term = 0
        self._vote = ""
        self._peer_state = None
        self._log = {}  # index -> (term, encoded AppendEntry)
        self._first = 1
        self._last = 0
        self._snapshot = None

    # -- term and vote --------------------------------------------------

    def load_term_vote(self):
        """(term, voted-for id or "")."""
        return self._term, self._vote

    def save_term_vote(self, term, vote):
        self._term, self._vote = term, vote

    # -- peers ----------------------------------------------------------

    def load_peer_state(self):
        """The encoded PeerState last saved, or None."""
        return self._peer_state

    def save_peer_state(self, encoded):
        self._peer_state = bytes(encoded)

    # -- the WAL --------------------------------------------------------

    @property
    def first_index(self):
        return self._first

    @property
    def last_index(self):
        return self._last

    def wal_bytes(self):
        """The bytes the WAL's entries take (for /raftz)."""
        return sum(len(enc) for _, enc in self._log.values())

    def append(self, index, term, encoded):
        """Store the AppendEntry ``encoded`` (of ``term``) at ``index``,
        which must be ``last_index + 1``."""
        if index != self._last + 1:
            raise ValueError("append at %d, last is %d" % (index, self._last))
        self._log[index] = (term, bytes(encoded))
        self._last = index

    def append_many(self, records):
        """Store ``records`` ((index, term, encoded) each, indexes following
        ``last_index`` one by one) at once: all or none (FileStorage writes
        them in one synced batch, a group commit)."""
        records = list(records)
        for n, (index, _, _) in enumerate(records):
            if index != self._last + 1 + n:
                raise ValueError("append at %d, last is %d" % (index, self._last + n))
        for index, term, encoded in records:
            self.append(index, term, encoded)

    def entry(self, index):
        """(term, encoded AppendEntry) at ``index``, or None when the WAL
        does not hold it (compacted or beyond the end)."""
        return self._log.get(index)

    def term_at(self, index):
        got = self._log.get(index)
        return None if got is None else got[0]

    def truncate(self, index):
        """Drop every record after ``index``. Truncating to 0 empties the
        WAL and forgets the snapshot, as nats-server's resetWAL does."""
        for i in range(index + 1, self._last + 1):
            self._log.pop(i, None)
        if index == 0:
            self._log.clear()
            self._first, self._last = 1, 0
            self._snapshot = None
            return
        self._last = index
        if self._first > index + 1:
            self._first = index + 1
        if self._snapshot is not None and self._snapshot.last_index > index:
            self._snapshot = None

    def compact(self, through):
        """Drop every record up to and including ``through``."""
        for i in range(self._first, min(through, self._last) + 1):
            self._log.pop(i, None)
        self._first = max(self._first, through + 1)
        if self._last < through:
            self._last = through

    # -- snapshots ------------------------------------------------------

    def load_snapshot(self):
        return self._snapshot

    def save_snapshot(self, snapshot):
        """Keep ``snapshot`` (replacing the last one) and compact the WAL
        through its index."""
        self._snapshot = snapshot
        self.compact(snapshot.last_index)

    def close(self):
        pass
