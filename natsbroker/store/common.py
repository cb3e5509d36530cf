"""What both stores share: the bitmap of deleted sequences and the stream logic
(nats-server semantics of first/last sequence, deletes and purges) written
against a few storage hooks that :mod:`.memory` and :mod:`.leveldb` implement.

Semantics, as nats-server 2.15 (checked against it for both storage types):

* ``first_seq`` is the lowest stored sequence; removing it moves ``first_seq``
  to the next stored one. A stream emptied by removals or purges has
  ``first_seq = last_seq + 1``; ``last_seq`` and ``last_ts`` never go back.
* ``num_deleted`` counts the sequences in ``[first_seq, last_seq]`` that are not
  stored (removing the last message makes it one of them).
* ``purge()``: everything; ``purge(seq=S)``: the messages below ``S``, and for
  ``S > last_seq`` the stream is emptied with ``first_seq = S`` and
  ``last_seq = S - 1`` so the next message gets ``S``; ``purge(keep=N)``: all but
  the newest ``N`` messages; with ``subject`` (``">"`` means all): only matching
  messages, below ``seq`` if given, keeping the newest ``keep`` matching ones.
  (nats-server's API refuses ``seq`` together with ``keep``; here both apply.)
"""

import heapq
import re
from bisect import bisect_left
from itertools import islice

from natsbroker.store.base import StoredMsg, StreamState, StreamStore, msg_size
from natsbroker.subjects.sublist import is_literal, subject_matches

_NOT_FF = re.compile(rb"[^\xff]")
# tuple.__new__ for StoredMsg: the named tuple's own __new__ is a Python function.
_tuple_new = tuple.__new__
# the first byte with a bit set (of a presence bitmap)
NOT_00 = re.compile(rb"[^\x00]")
INVERT = bytes(255 - i for i in range(256))

_LITERAL = {}


def literal(subject):
    """Cached :func:`is_literal`."""
    r = _LITERAL.get(subject)
    if r is None:
        if len(_LITERAL) > 4096:
            _LITERAL.clear()
        r = _LITERAL[subject] = is_literal(subject)
    return r


def popcount(buf):
    return int.from_bytes(buf, "little").bit_count()


def low_clear_bit(b):
    """Index of the lowest 0 bit of the byte ``b`` (``b != 0xFF``)."""
    return ((~b) & (b + 1)).bit_length() - 1


class SeqSet:
    """A set of sequences kept as a bitmap from ``base``: one bit per sequence in
    the range it spans, so it never costs more than (messages + deleted) / 8
    bytes however the deletes are spread, and finding the next non-member is a
    C-speed search."""

    __slots__ = ("base", "bits", "count")

    def __init__(self):
        self.base = 0
        self.bits = bytearray()
        self.count = 0

    @classmethod
    def from_bits(cls, base, bits, count):
        s = cls()
        s.base = base
        s.bits = bits
        s.count = count
        return s

    def __len__(self):
        return self.count

    def __bool__(self):
        return self.count > 0

    def __contains__(self, seq):
        i = seq - self.base
        if i < 0:
            return False
        j = i >> 3
        bits = self.bits
        return j < len(bits) and (bits[j] >> (i & 7)) & 1 == 1

    def __iter__(self):
        return iter(self.to_list())

    def to_list(self):
        out = []
        base = self.base
        bits = self.bits
        for m in NOT_00.finditer(bits):
            k = m.start()
            b = bits[k]
            at = base + (k << 3)
            while b:
                low = b & -b
                out.append(at + low.bit_length() - 1)
                b ^= low
        return out

    def add(self, seq):
        bits = self.bits
        if not self.count:
            bits.clear()
            self.base = seq
            i = 0
        else:
            i = seq - self.base
            if i < 0:
                grow = (7 - i) >> 3
                bits[0:0] = bytes(grow)
                self.base -= grow << 3
                i = seq - self.base
        j = i >> 3
        if j >= len(bits):
            bits.extend(bytes(j + 1 - len(bits)))
        m = 1 << (i & 7)
        if not bits[j] & m:
            bits[j] |= m
            self.count += 1

    def discard(self, seq):
        i = seq - self.base
        if i < 0:
            return
        j = i >> 3
        bits = self.bits
        if j < len(bits):
            m = 1 << (i & 7)
            if bits[j] & m:
                bits[j] &= ~m & 0xFF
                self.count -= 1

    def clear(self):
        self.base = 0
        self.bits = bytearray()
        self.count = 0

    def clear_below(self, seq):
        """Drop every member below ``seq``."""
        if not self.count:
            return
        i = seq - self.base
        if i <= 0:
            return
        bits = self.bits
        j = i >> 3
        if j >= len(bits):
            self.clear()
            return
        if j:
            self.count -= popcount(bits[:j])
            del bits[:j]  # O(1): a bytearray drops its head in place
            self.base += j << 3
        r = i & 7
        if r:
            low = bits[0] & ((1 << r) - 1)
            if low:
                self.count -= low.bit_count()
                bits[0] &= ~low & 0xFF

    def next_clear(self, seq):
        """The lowest sequence >= ``seq`` that is not a member."""
        i = seq - self.base
        if i < 0 or not self.count:
            return seq
        bits = self.bits
        j = i >> 3
        if j >= len(bits):
            return seq
        b = bits[j] | ((1 << (i & 7)) - 1)
        if b != 0xFF:
            return self.base + (j << 3) + low_clear_bit(b)
        m = _NOT_FF.search(bits, j + 1)
        if m is None:
            return self.base + (len(bits) << 3)
        k = m.start()
        return self.base + (k << 3) + low_clear_bit(bits[k])

    def prev_clear(self, seq):
        """The highest sequence <= ``seq`` that is not a member."""
        i = seq - self.base
        if i < 0 or not self.count:
            return seq
        bits = self.bits
        j = i >> 3
        if j >= len(bits):
            return seq
        b = bits[j] | ((0xFF << ((i & 7) + 1)) & 0xFF)
        if b != 0xFF:
            return self.base + (j << 3) + ((~b) & 0xFF).bit_length() - 1
        k = j
        while k > 0:
            lo = max(0, k - 4096)
            seg = bytes(bits[lo:k]).rstrip(b"\xff")
            if seg:
                k = lo + len(seg) - 1
                return self.base + (k << 3) + ((~bits[k]) & 0xFF).bit_length() - 1
            k = lo
        return self.base - 1

    def count_ge(self, seq):
        """Members >= ``seq``."""
        if not self.count:
            return 0
        i = seq - self.base
        if i <= 0:
            return self.count
        bits = self.bits
        j = i >> 3
        if j >= len(bits):
            return 0
        part = (bits[j] >> (i & 7)).bit_count()
        if j * 2 > len(bits):
            return popcount(bits[j + 1:]) + part
        below = popcount(bits[:j]) + (bits[j] & ((1 << (i & 7)) - 1)).bit_count()
        return self.count - below


class StreamBase(StreamStore):
    """The contract's logic over storage hooks.

    A subclass stores messages and keeps a per-subject index; this class keeps
    the counters, ``first_seq``/``last_seq`` and the deleted set, and decides
    what a remove or purge takes away. Hooks:

    ``_put(msg)``, ``_get(seq)`` (seq known to exist), ``_drop(seq, erase)``
    (returns the message's size), ``_drop_all()``, ``_drop_below(seq)`` (returns
    ``(count, bytes)``), ``_subjects`` (dict keyed by subject), ``_subj_count``,
    ``_subj_first(subject, start)``, ``_subj_last``, ``_subj_count_from``,
    ``_subj_seqs(subject, start, stop)`` and optionally ``_scan``/``_scan_rev``.
    Subclasses bump ``_subj_gen`` whenever a subject appears or disappears.
    """

    # Bytes a message counts for in limits and state (memory streams' rule;
    # file streams override it). Only len() and truth of its arguments are used.
    msg_size = staticmethod(msg_size)

    # Wildcard filters are resolved to the list of matching subjects (cached until
    # the set of subjects changes) when a stream has at most MATCH_LIMIT
    # subjects; above it (KV buckets) wildcard reads scan messages instead.
    MATCH_LIMIT = 1024
    # Wildcard load_next/load_last look up each matching subject's index when at
    # most this many subjects match; otherwise they scan messages.
    SEEK_SUBJECTS = 64

    def __init__(self, name):
        self.name = name
        self._msgs = 0
        self._bytes = 0
        self._first = 0
        self._first_ts = 0  # None: not known yet, read on state()
        self._last = 0
        self._last_ts = 0
        self._deleted = SeqSet()
        self._meta = {}
        self._subj_gen = 0
        self._match_cache = {}

    # -- reading ----------------------------------------------------------

    @property
    def stored_bytes(self):
        """``state().bytes`` without building a state (account usage is summed
        over streams on every publish that storage limits bound)."""
        return self._bytes

    def state(self):
        ft = self._first_ts
        if ft is None:
            ft = self._first_ts = self._get(self._first).ts
        return StreamState(self._msgs, self._bytes, self._first, ft, self._last,
                           self._last_ts, len(self._subjects), self._deleted.count)

    def _exists(self, seq):
        return (self._msgs > 0 and self._first <= seq <= self._last
                and (not self._deleted.count or seq not in self._deleted))

    def _next_existing(self, seq):
        """Lowest stored sequence >= ``seq``, or 0."""
        if not self._msgs:
            return 0
        if seq < self._first:
            seq = self._first
        if self._deleted.count:
            seq = self._deleted.next_clear(seq)
        return seq if seq <= self._last else 0

    def _prev_existing(self, seq):
        """Highest stored sequence <= ``seq``, or 0."""
        if not self._msgs:
            return 0
        if seq > self._last:
            seq = self._last
        if self._deleted.count:
            seq = self._deleted.prev_clear(seq)
        return seq if seq >= self._first else 0

    def _scan(self, start):
        """Stored messages with sequence >= ``start``, ascending."""
        s = self._next_existing(start)
        while s:
            yield self._get(s)
            s = self._next_existing(s + 1)

    def _scan_rev(self, stop):
        """Stored messages with sequence <= ``stop``, descending."""
        s = self._prev_existing(stop)
        while s:
            yield self._get(s)
            s = self._prev_existing(s - 1)

    def _matching(self, filt):
        """Subjects matching the wildcard ``filt``, or None if there are too
        many subjects to list them cheaply."""
        c = self._match_cache.get(filt)
        if c is not None and c[0] == self._subj_gen:
            return c[1]
        subjects = self._subjects
        if len(subjects) > self.MATCH_LIMIT:
            return None
        subs = [s for s in subjects if subject_matches(filt, s)]
        if len(self._match_cache) > 256:
            self._match_cache.clear()
        self._match_cache[filt] = (self._subj_gen, subs)
        return subs

    def load(self, seq):
        if self._exists(seq):
            return self._get(seq)
        return None

    def load_next(self, seq, filter_subject=None):
        if filter_subject is None or filter_subject == b">":
            s = self._next_existing(seq)
            return self._get(s) if s else None
        if seq < self._first:
            seq = self._first
        if seq > self._last or not self._msgs:
            return None
        if literal(filter_subject):
            s = self._subj_first(filter_subject, seq)
            return self._get(s) if s else None
        subs = self._matching(filter_subject)
        if subs is not None and len(subs) <= self.SEEK_SUBJECTS:
            best = 0
            for sub in subs:
                s = self._subj_first(sub, seq)
                if s and (not best or s < best):
                    best = s
                    if s == seq:
                        break
            return self._get(best) if best else None
        for m in self._scan(seq):
            if subject_matches(filter_subject, m.subject):
                return m
        return None

    def load_last(self, filter_subject=None):
        if not self._msgs:
            return None
        if filter_subject is None or filter_subject == b">":
            s = self._prev_existing(self._last)
            return self._get(s) if s else None
        if literal(filter_subject):
            s = self._subj_last(filter_subject)
            return self._get(s) if s else None
        subs = self._matching(filter_subject)
        if subs is not None and len(subs) <= self.SEEK_SUBJECTS:
            best = 0
            for sub in subs:
                s = self._subj_last(sub)
                if s > best:
                    best = s
            return self._get(best) if best else None
        for m in self._scan_rev(self._last):
            if subject_matches(filter_subject, m.subject):
                return m
        return None

    def subject_counts(self, filter_subject=None):
        if filter_subject is None or filter_subject == b">":
            return {s: self._subj_count(s) for s in self._subjects}
        if literal(filter_subject):
            n = self._subj_count(filter_subject)
            return {filter_subject: n} if n else {}
        subs = self._matching(filter_subject)
        if subs is None:
            subs = [s for s in self._subjects if subject_matches(filter_subject, s)]
        return {s: self._subj_count(s) for s in subs}

    def count_subject(self, subject):
        return self._subj_count(subject)

    def first_seq_of_subject(self, subject):
        return self._subj_first(subject, 0) or 0

    def deleted(self):
        return self._deleted.to_list()

    def num_pending(self, start_seq, filter_subject=None):
        if not self._msgs:
            return 0
        start = max(start_seq, self._first)
        if start > self._last:
            return 0
        if filter_subject is None or filter_subject == b">":
            if start == self._first:
                return self._msgs
            return (self._last - start + 1) - self._deleted.count_ge(start)
        if literal(filter_subject):
            return self._subj_count_from(filter_subject, start)
        subs = self._matching(filter_subject)
        if subs is None:
            if start > self._first:
                n = 0
                for m in self._scan(start):
                    if subject_matches(filter_subject, m.subject):
                        n += 1
                return n
            subs = [s for s in self._subjects if subject_matches(filter_subject, s)]
        if start == self._first:
            return sum(self._subj_count(s) for s in subs)
        return sum(self._subj_count_from(s, start) for s in subs)

    # -- writing ----------------------------------------------------------

    def append(self, subject, hdr, data, ts):
        seq = self._last + 1
        if hdr is None:
            hdr = b""
        msg = self.last_appended = _tuple_new(StoredMsg, (seq, subject, hdr, data, ts))
        self._put(msg)
        self._last = seq
        self._last_ts = ts
        if not self._msgs:
            self._first = seq
            self._first_ts = ts
        self._msgs += 1
        self._bytes += self.msg_size(subject, hdr, data)
        return seq

    def skip(self, ts):
        """Use up the next sequence without storing a message (nats-server's
        SkipMsg: an interest stream with no interest still numbers the publish)."""
        seq = self._last + 1
        self._last = seq
        self._last_ts = ts
        if not self._msgs:
            self._first = seq + 1
            self._first_ts = 0
        else:
            self._deleted.add(seq)
        self._touch()
        return seq

    def _touch(self):
        """Hook: the counters changed without a message write."""

    def remove(self, seq, erase=False):
        if not self._exists(seq):
            return False
        self._remove_existing(seq, erase)
        return True

    def _remove_existing(self, seq, erase=False):
        self._bytes -= self._drop(seq, erase)
        self._msgs -= 1
        if seq == self._first:
            self._advance_first()
        else:
            self._deleted.add(seq)

    def _advance_first(self):
        """``first_seq`` was removed: move to the next stored sequence."""
        if not self._msgs:
            self._set_empty()
            return
        s = self._first + 1
        if self._deleted.count:
            s = self._deleted.next_clear(s)
            self._deleted.clear_below(s)
        self._first = s
        self._first_ts = None

    def _set_empty(self):
        self._first = self._last + 1
        self._first_ts = 0
        self._deleted.clear()

    def purge(self, subject=None, seq=None, keep=None):
        seq = seq or 0
        keep = keep or 0
        if subject is None or subject == b"" or subject == b">":
            if not keep:
                return self._compact(seq) if seq else self._purge_all()
            if not seq:
                if keep >= self._msgs:
                    return 0
                return self._compact(self._nth_newest(keep))
            subject = None
        return self._purge_filtered(subject, seq, keep)

    def _purge_all(self):
        n = self._msgs
        self._drop_all()
        self._msgs = 0
        self._bytes = 0
        self._set_empty()
        return n

    def _compact(self, seq):
        """Remove every message below ``seq``."""
        if seq > self._last:
            n = self._purge_all()
            self._last = seq - 1
            self._first = seq
            return n
        if not self._msgs or seq <= self._first:
            return 0
        n, nbytes = self._drop_below(seq)
        self._msgs -= n
        self._bytes -= nbytes
        if not self._msgs:
            self._set_empty()
        else:
            s = self._deleted.next_clear(seq) if self._deleted.count else seq
            self._deleted.clear_below(s)
            self._first = s
            self._first_ts = None
        return n

    def _drop_below(self, seq):
        """Default: remove the messages below ``seq`` one by one, oldest first
        (each is the first, so no deleted bookkeeping)."""
        n = nbytes = 0
        deleted = self._deleted
        s = self._first
        while s < seq:
            if not deleted.count or s not in deleted:
                nbytes += self._drop(s, False)
                n += 1
            s += 1
        return n, nbytes

    def _nth_newest(self, keep):
        """The sequence S with exactly ``keep`` (< msgs) messages at or above it."""
        last = self._last
        if not self._deleted.count:
            return last - keep + 1
        lo, hi = self._first, last  # largest S with existing_ge(S) >= keep
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if (last - mid + 1) - self._deleted.count_ge(mid) >= keep:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _purge_filtered(self, subject, seq, keep):
        if subject is None:
            subs = list(self._subjects)
        elif literal(subject):
            subs = [subject] if self._subj_count(subject) else []
        else:
            subs = [s for s in self._subjects if subject_matches(subject, s)]
        total = sum(self._subj_count(s) for s in subs)
        maxp = total - keep if keep else total
        if maxp <= 0:
            return 0
        if total == self._msgs and not (seq and keep):
            # The filter covers the whole stream: the cheap whole-stream paths.
            if not keep:
                if not seq or seq > self._last:
                    return self._purge_all()
                return self._compact(seq)
            return self._compact(self._nth_newest(keep))
        stop = seq if seq else self._last + 1
        start = self._first
        its = [self._subj_seqs(s, start, stop) for s in subs]
        merged = its[0] if len(its) == 1 else heapq.merge(*its)
        seqs = list(islice(merged, maxp))
        for s in seqs:
            self._remove_existing(s)
        return len(seqs)

    # -- meta ---------------------------------------------------------------

    def get_meta(self, key):
        return self._meta.get(key)

    def meta_keys(self, prefix=b""):
        return sorted(k for k in self._meta if k.startswith(prefix))


class SubjSeqs:
    """The sequences of one subject, ascending, with a lazily trimmed head so
    that removing the oldest is O(1)."""

    __slots__ = ("seqs", "head")

    def __init__(self, seqs=None):
        self.seqs = [] if seqs is None else seqs
        self.head = 0

    def __len__(self):
        return len(self.seqs) - self.head

    def first(self):
        return self.seqs[self.head]

    def last(self):
        return self.seqs[-1]

    def remove(self, seq):
        seqs = self.seqs
        h = self.head
        if seqs[h] == seq:
            h += 1
            if h == len(seqs):
                seqs.clear()
                h = 0
            elif h > 64 and h * 2 > len(seqs):
                del seqs[:h]
                h = 0
            self.head = h
        elif seqs[-1] == seq:
            seqs.pop()
        else:
            i = bisect_left(seqs, seq, h)
            del seqs[i]

    def first_from(self, start):
        seqs = self.seqs
        i = bisect_left(seqs, start, self.head)
        return seqs[i] if i < len(seqs) else 0

    def count_from(self, start):
        return len(self.seqs) - bisect_left(self.seqs, start, self.head)

    def between(self, start, stop):
        seqs = self.seqs
        h = self.head
        return seqs[bisect_left(seqs, start, h):bisect_left(seqs, stop, h)]
