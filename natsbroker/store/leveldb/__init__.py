"""``storage: file``: streams in LevelDB (plyvel), one database per stream.

Layout under the store's directory::

    <path>/streams/<name>/     the LevelDB database of stream <name>
    <path>/trash/<name>.<n>/   a deleted stream's database, being removed
    <path>/quarantine/<name>-<time>/  a stream's files set aside on damage (kept)

Keys of a stream database (``Q`` = 8-byte big-endian, ``I`` = 4-byte)::

    b"d" Q(seq)                        -> Q(ts) I(len subject | 1<<31) I(len hdr) I(crc)
                                          subject hdr data
    b"s" I(len subject) subject Q(seq) -> I(msg_size)        per-subject index
    b"m" key                           -> value              meta (config, consumers)
    b"S"                               -> Q(first_seq) Q(last_seq) Q(last_ts)
    b"F"                               -> b"\\x02": every record carries a checksum

``crc`` is zlib's CRC-32 of ``Q(seq) Q(ts) I(len subject) I(len hdr)`` followed
by subject, hdr and data, so damage LevelDB's own block checksums miss (bytes
in its log, a block it does not verify, a record under the wrong key) is still
caught on read (:func:`verify_record`). Records written before checksums
existed (``Q(ts) I(len subject) I(len hdr)``, top bit clear) are read as they
are in stores without ``b"F"``; in a store with it, such a record is damage.
A record that fails is never served: it leaves the in-memory bookkeeping as a
lost message (a gap for readers, counted in ``lost``), the log names stream,
sequence and the file holding it, and it stays on disk for
``natsbroker-admin verify``/``repair``.

The length-prefixed subject keeps one subject's index entries contiguous and in
sequence order whatever bytes subjects hold, so a literal subject's first/last
message or count from a sequence is a seek, never a stream scan.

In memory (exact at all times): the counters, ``first_seq``/``last_seq``, the
deleted interior sequences (a bitmap, :class:`~.common.SeqSet`) and per subject
``[count, first, last]`` (first/last recomputed by an index seek when the one
they name is removed). None of that is persisted except the ``b"S"`` record
(written in every commit batch, atomically with the data): on open one pass over
the index keys (not the payloads) rebuilds the per-subject counts, the byte
total (index values hold each message's size) and the deleted gaps (sequences in
``[first_seq, last_seq]`` without an index entry). ``b"S"`` carries what the
index cannot tell: ``last_seq``/``last_ts`` once the newest messages are gone and
``first_seq`` of an emptied stream. Bytes are counted as nats-server's file
store counts them (:func:`~.base.file_msg_size`).

Reads: staged messages and those of recent commits come from memory (see
below); a reader going forward through older committed records (a consumer
catching up, limits removing the oldest) is served by a parked iterator instead
of point gets (about 3x cheaper).

Group commit: writes are staged in Python, never written one by one. Appends
go to ``_staged`` (``seq -> StoredMsg``, plus the staged sequences of each
subject), deletes and meta writes to ``_ops`` (``key -> value | None``); reads
consult them before the database. :meth:`LevelDBStore.commit` turns each dirty
stream's staging into one ``WriteBatch`` (plus the ``b"S"`` record) written with
``sync=store.sync``: one fsync per dirty stream per turn, none per message.

Recent messages: consumers usually read what was just stored, so the messages
of recent commits stay in memory (each stream's ``_recent``), store-wide up to
:data:`RECENT_BYTES` (counted as limits count bytes) and for at most
:data:`RECENT_SECONDS`, oldest commit out first, checked at every commit (an
idle store keeps its last ones). They are served as they were written, so a
reader at the tail neither reads nor verifies them back; like nats-server's
block cache, which holds the blocks being written and read. Only small
messages (:data:`RECENT_MSG_MAX` on average per commit): for large ones the
per-message cost of a read is small beside their bytes, and memory is not
(an object store's chunks).

Purges never block on the size of the stream: a full purge only moves
``first_seq`` past ``last_seq`` in memory and drops the staged messages; every
key below the new ``first_seq`` is garbage that no read looks at (reads are
bounded by ``first_seq`` and check the bookkeeping), and once the new
``first_seq`` is committed a background collector deletes those keys in chunks
of :data:`GC_CHUNK` keys per reactor turn (``reactor.callLater``). A partial
purge below a sequence (``purge(seq=)``, ``purge(keep=)``) reads whichever side
is smaller: the messages it removes, or the messages it keeps (rebuilding the
bookkeeping from them and leaving the rest to the collector). A reopened store
finds leftover garbage during its index pass and collects it again.

``remove(seq, erase=True)`` deletes the record and, after the commit, asks
LevelDB to compact the key's range so the table files holding the old bytes are
rewritten (best effort: LevelDB has no in-place overwrite and the bytes may
linger in its write-ahead log until it rotates).

Damage (issue 12). Two small files next to LevelDB's own in each stream's
directory keep what a damaged database must not take along:
``NATSBROKER-HWM`` (:class:`HighWater`: first/last sequence, counts, consumers'
delivered and ack floors; one ``pwrite`` per commit, no extra fsync) and
``NATSBROKER-META`` (:class:`PinnedMeta`: the stream's and its consumers'
configs, rewritten only when they change). On open, a database behind its
high-water mark (a torn log) keeps ``last_seq`` at the mark: the lost range is
a gap of deleted sequences, reported as ``lost`` in the state and logged, and
no sequence is ever handed out twice; lost config records are put back. A
directory with LevelDB files but no ``CURRENT`` is never opened (a fresh
database over it would delete its tables as obsolete), and a stream that fails
to open is moved, never deleted, to ``quarantine/<name>-<time>/`` and logged
with how to repair it; the other streams open as usual.

Deleting a stream closes its database and renames its directory into
``trash/`` at once (so the name is free again); the directory is removed in a
thread and the Deferred fires when that is done. A reopened store empties
``trash/``.

The package, one module per concept:

* :mod:`.records`: keys and the record codec (hot: compiled);
* :mod:`.sidefiles`: :class:`~.sidefiles.HighWater` and :class:`~.sidefiles.PinnedMeta`;
* :mod:`.stream`: :class:`~.stream.LevelDBStream` (hot: compiled);
* :mod:`.store`: :class:`~.store.LevelDBStore`.
"""

from natsbroker.store.leveldb.store import LevelDBStore

__all__ = ["LevelDBStore"]
