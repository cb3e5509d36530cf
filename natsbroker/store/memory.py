"""``storage: memory``: streams held in Python data structures.

A stream is a dict ``seq -> StoredMsg`` (insertion order is sequence order), a
per-subject ascending list of sequences (:class:`~.common.SubjSeqs`: O(1) removal
of a subject's oldest, bisect for seeks and counts), and the shared counters and
deleted bitmap of :class:`~.common.StreamBase`. Nothing is staged, so
:meth:`MemoryStore.commit` has nothing to do.

Freeing a million messages takes Python about half a second, so what a purge or
a stream deletion drops is handed to the store, which frees it in chunks of
:data:`REAP_CHUNK` messages per reactor turn (``reactor.callLater``); the
stream's bookkeeping is exact at once.
"""

from collections import deque

from twisted.internet import defer

from natsbroker.store.base import Store
from natsbroker.store.common import StreamBase, SubjSeqs

REAP_CHUNK = 20000  # dropped messages freed per reactor turn
REAP_MIN = 50000  # smaller drops are freed at once


class MemoryStream(StreamBase):
    SEEK_SUBJECTS = 256

    def __init__(self, name, owner=None):
        super().__init__(name)
        self._owner = owner
        self._store = {}
        self._subjects = {}  # subject -> SubjSeqs

    # -- storage hooks ----------------------------------------------------

    def _put(self, msg):
        self._store[msg.seq] = msg
        ss = self._subjects.get(msg.subject)
        if ss is None:
            ss = self._subjects[msg.subject] = SubjSeqs()
            self._subj_gen += 1
        ss.seqs.append(msg.seq)

    def _get(self, seq):
        return self._store[seq]

    def _drop(self, seq, erase):
        # Payloads are immutable bytes: erase has nothing to overwrite in place;
        # dropping the last reference is all Python offers.
        m = self._store.pop(seq)
        ss = self._subjects[m.subject]
        ss.remove(seq)
        if not len(ss):
            del self._subjects[m.subject]
            self._subj_gen += 1
        return self.msg_size(m.subject, m.hdr, m.data)

    def _bury(self, old):
        if self._owner is not None and len(old) >= REAP_MIN:
            self._owner._bury(old)

    def _drop_all(self):
        self._bury(self._store)
        self._store = {}
        self._subjects = {}
        self._subj_gen += 1

    def _drop_below(self, seq):
        kept = (self._last - seq + 1) - self._deleted.count_ge(seq)
        if kept * 2 >= self._msgs:
            return super()._drop_below(seq)
        # Most messages go: rebuild from the kept tail instead.
        old = self._store
        n, nbytes = len(old), self._bytes
        store = {}
        subjects = {}
        kbytes = 0
        s = self._next_existing(seq)
        while s:
            m = old[s]
            store[s] = m
            kbytes += self.msg_size(m.subject, m.hdr, m.data)
            ss = subjects.get(m.subject)
            if ss is None:
                subjects[m.subject] = SubjSeqs([s])
            else:
                ss.seqs.append(s)
            s = self._next_existing(s + 1)
        self._bury(old)
        self._store = store
        self._subjects = subjects
        self._subj_gen += 1
        return n - len(store), nbytes - kbytes

    def _subj_count(self, subject):
        ss = self._subjects.get(subject)
        return len(ss) if ss is not None else 0

    def _subj_first(self, subject, start):
        ss = self._subjects.get(subject)
        if ss is None:
            return 0
        return ss.first_from(start)

    def _subj_last(self, subject):
        ss = self._subjects.get(subject)
        return ss.last() if ss is not None else 0

    def _subj_count_from(self, subject, start):
        ss = self._subjects.get(subject)
        return ss.count_from(start) if ss is not None else 0

    def _subj_seqs(self, subject, start, stop):
        ss = self._subjects.get(subject)
        return iter(ss.between(start, stop)) if ss is not None else iter(())

    # -- meta ---------------------------------------------------------------

    def put_meta(self, key, value):
        self._meta[key] = value

    def del_meta(self, key):
        return self._meta.pop(key, None) is not None


class MemoryStore(Store):
    """``reactor`` (default: the global one) paces the freeing of large drops."""

    def __init__(self, reactor=None):
        self._streams = {}
        self._reactor = reactor
        self._graveyard = deque()
        self._reap_call = None

    def _bury(self, d):
        self._graveyard.append(d)
        if self._reap_call is None:
            if self._reactor is None:
                from twisted.internet import reactor
                self._reactor = reactor
            self._reap_call = self._reactor.callLater(0, self._reap)

    def _reap(self):
        self._reap_call = None
        if self.reap(REAP_CHUNK) and self._reactor is not None:
            self._reap_call = self._reactor.callLater(0, self._reap)

    def reap(self, limit=None):
        """Free up to ``limit`` (all if None) dropped messages; True if more are left."""
        g = self._graveyard
        while g:
            d = g[0]
            if limit is None or len(d) <= limit:
                if limit is not None:
                    limit -= len(d)
                g.popleft()
                d.clear()
                if limit == 0:
                    break
            else:
                pop = d.popitem
                for _ in range(limit):
                    pop()
                break
        return bool(g)

    def create_stream(self, name):
        if name in self._streams:
            raise ValueError("stream %r exists" % (name,))
        st = self._streams[name] = MemoryStream(name, self)
        return st

    def stream(self, name):
        return self._streams.get(name)

    def stream_names(self):
        return sorted(self._streams)

    def delete_stream(self, name):
        st = self._streams.pop(name, None)
        if st is None:
            return defer.succeed(False)
        st._bury(st._store)
        st._store = {}
        return defer.succeed(True)

    def commit(self, sync=True):
        pass

    @property
    def dirty(self):
        return False

    def close(self):
        if self._reap_call is not None and self._reap_call.active():
            self._reap_call.cancel()
        self._reap_call = None
        self._graveyard.clear()
