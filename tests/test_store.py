"""One suite for both message stores (natsbroker.store.memory and .leveldb).

Expected values follow nats-server 2.15 (memory and file storage were probed
for the same scenarios): first_seq skips removed heads, an emptied stream has
first_seq = last_seq + 1, num_deleted counts gaps in [first_seq, last_seq],
purge(seq=S) past the end makes the next message S, keep keeps the newest
messages even across gaps, subject purges with seq=1 remove nothing.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import zlib

import plyvel
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from twisted.internet.task import Clock

from natsbroker.store.base import StoredMsg, StreamState, file_msg_size, msg_size
from natsbroker.store.common import SeqSet
from natsbroker.store.leveldb import LevelDBStore, store as leveldb_store, stream as leveldb_stream
from natsbroker.store.memory import MemoryStore
from natsbroker.subjects.sublist import subject_matches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Harness:
    """A store under test plus what a test needs to reopen it."""

    def __init__(self, kind, path):
        self.kind = kind
        self.path = path
        self.clock = Clock()
        self.store = self._open()

    def _open(self):
        if self.kind == "memory":
            return MemoryStore(reactor=self.clock)
        return LevelDBStore(self.path, reactor=self.clock)

    def reopen(self):
        """LevelDB: close and open again; memory: nothing to reopen."""
        if self.kind == "leveldb":
            self.store.close()
            self.store = self._open()
        return self.store

    def run_background(self):
        for _ in range(10000):
            if not self.clock.getDelayedCalls():
                return
            self.clock.advance(0)


@pytest.fixture(params=["memory", "leveldb"])
def h(request, tmp_path):
    harness = Harness(request.param, str(tmp_path / "store"))
    yield harness
    harness.store.close()


@pytest.fixture
def ldb(tmp_path):
    harness = Harness("leveldb", str(tmp_path / "store"))
    yield harness
    harness.store.close()


def fill(stream, subjects, data=b"x", ts0=1000):
    seqs = []
    for i, s in enumerate(subjects):
        seqs.append(stream.append(s, b"", data, ts0 + i))
    return seqs


def sz(stream, subject, data=b"x", hdr=b""):
    """Bytes a message counts for in this stream (file and memory streams
    count as nats-server's file and memory stores do)."""
    return stream.msg_size(subject, hdr, data)


def seqs_of(stream, filt=None, start=0):
    out = []
    m = stream.load_next(start, filt)
    while m is not None:
        out.append(m.seq)
        m = stream.load_next(m.seq + 1, filt)
    return out


# -- basics -----------------------------------------------------------------


def test_empty_stream(h):
    s = h.store.create_stream("S")
    assert s.state() == StreamState()
    assert s.load(0) is None and s.load(1) is None
    assert s.load_next(0) is None and s.load_next(1, b"a.*") is None
    assert s.load_last() is None and s.load_last(b"a") is None
    assert s.deleted() == []
    assert s.num_pending(0) == 0 and s.num_pending(1, b">") == 0
    assert s.subject_counts() == {}
    assert s.count_subject(b"a") == 0 and s.first_seq_of_subject(b"a") == 0
    assert s.remove(0) is False and s.remove(1) is False


def test_append_and_load(h):
    s = h.store.create_stream("S")
    assert s.append(b"a.b", b"NATS/1.0\r\nX: 1\r\n\r\n", b"hello", 111) == 1
    assert s.append(b"a.c", b"", b"", 222) == 2
    assert s.append(b"d", b"", b"\x00\xff" * 10, 333) == 3
    assert s.load(1) == StoredMsg(1, b"a.b", b"NATS/1.0\r\nX: 1\r\n\r\n", b"hello", 111)
    assert s.load(2) == StoredMsg(2, b"a.c", b"", b"", 222)
    assert s.load(3).data == b"\x00\xff" * 10
    assert s.load(0) is None and s.load(4) is None
    assert s.state() == StreamState(
        msgs=3, bytes=s.msg_size(b"a.b", b"NATS/1.0\r\nX: 1\r\n\r\n", b"hello") + s.msg_size(b"a.c", b"", b"")
        + s.msg_size(b"d", b"", b"\x00\xff" * 10),
        first_seq=1, first_ts=111, last_seq=3, last_ts=333, num_subjects=3, num_deleted=0)
    h.store.commit()
    assert not h.store.dirty
    assert s.load(1).hdr == b"NATS/1.0\r\nX: 1\r\n\r\n"


def test_subjects_with_odd_bytes(h):
    s = h.store.create_stream("S")
    fill(s, [b"a\x00b", b"a", b"a\x00", b"a\x00b", b"\xff.\x00"])
    h.store.commit()
    assert s.count_subject(b"a\x00b") == 2
    assert s.count_subject(b"a") == 1
    assert s.first_seq_of_subject(b"a\x00") == 3
    assert s.load_last(b"a\x00b").seq == 4
    assert seqs_of(s, b"a") == [2]
    s.remove(2)
    h.store.commit()
    h.reopen()
    s = h.store.stream("S")
    assert s.subject_counts() == {b"a\x00b": 2, b"a\x00": 1, b"\xff.\x00": 1}


# -- load_next / load_last with filters ---------------------------------------

SUBJ = [b"a.b", b"a.c", b"a.b.c", b"x", b"a.b", b"x.y.z", b"a.c", b"a.b"]


@pytest.mark.parametrize("commit", [False, True])
def test_load_next_filters(h, commit):
    s = h.store.create_stream("S")
    fill(s, SUBJ)
    if commit:
        h.store.commit()
    expect = {
        None: [1, 2, 3, 4, 5, 6, 7, 8],
        b">": [1, 2, 3, 4, 5, 6, 7, 8],
        b"a.b": [1, 5, 8],
        b"a.*": [1, 2, 5, 7, 8],
        b"a.>": [1, 2, 3, 5, 7, 8],
        b"*": [4],
        b"*.b.*": [3],
        b"*.*.z": [6],
        b"x.>": [6],
        b"nope": [],
        b"a": [],
        b"a.b.c.d": [],
    }
    for filt, seqs in expect.items():
        assert seqs_of(s, filt) == seqs, filt
        for start in range(0, 10):
            want = [q for q in seqs if q >= start]
            m = s.load_next(start, filt)
            assert (m.seq if m else None) == (want[0] if want else None), (filt, start)
            assert s.num_pending(start, filt) == len(want), (filt, start)
        last = s.load_last(filt)
        assert (last.seq if last else None) == (seqs[-1] if seqs else None), filt
    for q, subj in enumerate(SUBJ, 1):
        assert s.load_next(q, subj).subject == subj


def test_load_with_gaps(h):
    s = h.store.create_stream("S")
    fill(s, SUBJ)
    h.store.commit()
    for q in (1, 2, 5, 8):
        assert s.remove(q)
    assert seqs_of(s) == [3, 4, 6, 7]
    assert seqs_of(s, b"a.b") == []
    assert seqs_of(s, b"a.*") == [7]
    assert s.load_next(0).seq == 3
    assert s.load_next(5).seq == 6
    assert s.load_last().seq == 7
    assert s.load_last(b"a.b") is None
    assert s.load_last(b"a.>").seq == 7
    assert s.load(5) is None and s.load(6).subject == b"x.y.z"
    assert s.num_pending(0) == 4 and s.num_pending(5) == 2 and s.num_pending(8) == 0
    assert s.num_pending(0, b"a.>") == 2 and s.num_pending(4, b"a.>") == 1


def test_load_last(h):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"b", b"a", b"b.c"])
    assert s.load_last().seq == 4
    assert s.load_last(b"a").seq == 3
    assert s.load_last(b"b").seq == 2
    assert s.load_last(b"b.*").seq == 4
    assert s.load_last(b"*").seq == 3
    s.remove(4)
    s.remove(3)
    assert s.load_last().seq == 2
    assert s.load_last(b"a").seq == 1
    assert s.load_last(b"b.*") is None
    h.store.commit()
    assert s.load_last(b"a").seq == 1
    assert s.load_last().seq == 2


# -- remove -------------------------------------------------------------------


@pytest.mark.parametrize("commit", [False, True])
def test_remove_semantics(h, commit):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"b", b"a", b"a", b"b"])
    if commit:
        h.store.commit()
    one = sz(s, b"a")
    assert s.remove(1) is True
    assert s.remove(1) is False
    assert s.state() == StreamState(4, 4 * one, 2, 1001, 5, 1004, 2, 0)
    assert s.remove(5) is True  # the last one: last_seq stays, it becomes a gap
    assert s.state() == StreamState(3, 3 * one, 2, 1001, 5, 1004, 2, 1)
    assert s.deleted() == [5]
    assert s.remove(3, erase=True) is True
    assert s.state() == StreamState(2, 2 * one, 2, 1001, 5, 1004, 2, 2)
    assert s.deleted() == [3, 5]
    assert s.load(3) is None
    assert s.remove(2) is True  # first goes: first_seq jumps over the gap at 3
    assert s.state() == StreamState(1, one, 4, 1003, 5, 1004, 1, 1)
    assert s.deleted() == [5]
    assert s.remove(0) is False and s.remove(6) is False and s.remove(5) is False
    if commit:
        h.store.commit()
    assert s.remove(4) is True  # empty now
    assert s.state() == StreamState(0, 0, 6, 0, 5, 1004, 0, 0)
    assert s.deleted() == []
    assert s.append(b"c", b"", b"x", 2000) == 6
    assert s.state() == StreamState(1, one, 6, 2000, 6, 2000, 1, 0)


def test_skip(h):
    """A skipped sequence is used up: empty stream moves first past it, a
    non-empty one gets an interior gap; both survive reopening."""
    s = h.store.create_stream("S")
    assert s.skip(50) == 1
    assert s.state() == StreamState(first_seq=2, last_seq=1, last_ts=50)
    assert s.append(b"a", b"", b"x", 60) == 2
    assert s.skip(70) == 3
    assert s.append(b"a", b"", b"y", 80) == 4
    h.store.commit()
    s = h.reopen().stream("S")
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.num_deleted) == (2, 2, 4, 1)
    assert s.deleted() == [3] and s.load(3) is None
    assert s.skip(90) == 5
    assert s.state().last_ts == 90


def test_remove_erase(h):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"a", b"a"], data=b"secret")
    h.store.commit()
    assert s.remove(2, erase=True)
    h.store.commit()
    h.run_background()
    assert s.load(2) is None
    assert [m.seq for m in (s.load(1), s.load(3))] == [1, 3]
    assert s.deleted() == [2]


def test_remove_all_then_reuse(h):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"b"])
    s.remove(2)
    s.remove(1)
    assert s.state() == StreamState(0, 0, 3, 0, 2, 1001, 0, 0)
    assert s.load_next(0) is None and s.load_last() is None


# -- purge --------------------------------------------------------------------


def test_purge_all(h):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"b", b"a"])
    s.remove(2)
    assert s.purge() == 2
    assert s.state() == StreamState(0, 0, 4, 0, 3, 1002, 0, 0)
    assert s.deleted() == [] and s.load(1) is None and s.load(3) is None
    assert s.load_next(0) is None and s.load_last(b"a") is None
    assert s.subject_counts() == {} and s.count_subject(b"a") == 0
    assert s.append(b"c", b"", b"x", 5) == 4
    assert s.state() == StreamState(1, sz(s, b"c"), 4, 5, 4, 5, 1, 0)


def test_purge_fresh(h):
    s = h.store.create_stream("S")
    assert s.purge() == 0
    assert s.state() == StreamState(first_seq=1, last_seq=0)
    s2 = h.store.create_stream("T")
    assert s2.purge(seq=5) == 0
    assert s2.state() == StreamState(first_seq=5, last_seq=4)
    assert s2.append(b"a", b"", b"x", 9) == 5


def test_purge_seq(h):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"b", b"a", b"b", b"a", b"b", b"a", b"b"])
    assert s.purge(seq=1) == 0
    assert s.purge(seq=3) == 2
    assert s.state().first_seq == 3 and s.state().msgs == 6
    assert s.purge(seq=3) == 0
    assert s.purge(seq=2) == 0
    s.remove(4)
    s.remove(5)
    assert s.purge(seq=5) == 1  # removes 3; 4 and 5 were gaps: first goes to 6
    assert s.state() == StreamState(3, 3 * sz(s, b"a"), 6, 1005, 8, 1007, 2, 0)


def test_purge_seq_past_end(h):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"b", b"c"])
    assert s.purge(seq=20) == 3
    assert s.state() == StreamState(0, 0, 20, 0, 19, 1002, 0, 0)
    assert s.append(b"a", b"", b"y", 3000) == 20
    assert s.state() == StreamState(1, sz(s, b"a", b"y"), 20, 3000, 20, 3000, 1, 0)
    t = h.store.create_stream("T")
    fill(t, [b"a", b"b", b"c"])
    assert t.purge(seq=4) == 3
    assert t.state() == StreamState(0, 0, 4, 0, 3, 1002, 0, 0)


def test_purge_seq_all_gaps_above(h):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"b", b"c", b"a", b"b"])
    s.remove(4)
    s.remove(5)
    assert s.purge(seq=4) == 3
    assert s.state() == StreamState(0, 0, 6, 0, 5, 1004, 0, 0)


def test_purge_keep(h):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"b"] * 4)
    assert s.purge(keep=8) == 0
    assert s.purge(keep=20) == 0
    assert s.purge(keep=3) == 5
    assert s.state() == StreamState(3, 3 * sz(s, b"a"), 6, 1005, 8, 1007, 2, 0)
    assert s.subject_counts() == {b"a": 1, b"b": 2}


def test_purge_keep_with_gaps(h):
    s = h.store.create_stream("S")
    fill(s, [b"a"] * 10)
    s.remove(8)
    s.remove(9)
    assert s.purge(keep=2) == 6  # keeps 7 and 10, the newest two messages
    assert s.state() == StreamState(2, 2 * sz(s, b"a"), 7, 1006, 10, 1009, 1, 2)
    assert s.deleted() == [8, 9]


def test_purge_subject(h):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"a", b"b"])
    assert s.purge(subject=b"a") == 2
    assert s.state() == StreamState(1, sz(s, b"b"), 3, 1002, 3, 1002, 1, 0)
    assert s.purge(subject=b"zzz") == 0
    t = h.store.create_stream("T")
    fill(t, [b"a", b"b"] * 4)
    assert t.purge(subject=b"a") == 4
    assert t.state() == StreamState(4, 4 * sz(s, b"b"), 2, 1001, 8, 1007, 1, 3)
    assert t.deleted() == [3, 5, 7]


def test_purge_subject_keep(h):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"b"] * 4)
    assert s.purge(subject=b"a", keep=1) == 3
    assert s.state() == StreamState(5, 5 * sz(s, b"a"), 2, 1001, 8, 1007, 2, 2)
    assert s.deleted() == [3, 5]
    assert s.subject_counts() == {b"a": 1, b"b": 4}
    assert s.purge(subject=b"a", keep=1) == 0


def test_purge_wildcard_keep(h):
    s = h.store.create_stream("S")
    fill(s, [b"s.a", b"s.b"] * 4)
    assert s.purge(subject=b"s.*", keep=3) == 5
    assert s.state() == StreamState(3, 3 * sz(s, b"s.a"), 6, 1005, 8, 1007, 2, 0)


def test_purge_subject_seq(h):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"b"] * 4)
    assert s.purge(subject=b"a", seq=1) == 0
    assert s.purge(subject=b"a", seq=6) == 3  # a at 1, 3, 5
    assert s.state() == StreamState(5, 5 * sz(s, b"a"), 2, 1001, 8, 1007, 2, 2)
    assert s.subject_counts() == {b"a": 1, b"b": 4}
    t = h.store.create_stream("T")
    fill(t, [b"s.a", b"s.b"] * 4)
    assert t.purge(subject=b"s.>", seq=3) == 2  # the filter covers everything
    assert t.state().first_seq == 3 and t.state().msgs == 6


def test_purge_subject_seq_keep(h):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"b"] * 4)  # a at 1 3 5 7
    # below 7 and keeping the newest 2 a's: at most 2 removed, oldest first
    assert s.purge(subject=b"a", seq=7, keep=2) == 2
    assert seqs_of(s, b"a") == [5, 7]
    t = h.store.create_stream("T")
    fill(t, [b"a", b"b"] * 4)
    assert t.purge(seq=4, keep=2) == 3  # no subject: below 4, at most 8 - 2
    assert t.state().first_seq == 4


def test_purge_filter_covering_stream_with_keep(h):
    s = h.store.create_stream("S")
    fill(s, [b"s.a", b"s.b"] * 4)
    s.remove(7)
    assert s.purge(subject=b"s.>", keep=2) == 5
    assert seqs_of(s) == [6, 8]
    assert s.state() == StreamState(2, 2 * sz(s, b"s.a"), 6, 1005, 8, 1007, 1, 1)


# -- subject queries ------------------------------------------------------------


def test_subject_queries(h):
    s = h.store.create_stream("S")
    fill(s, [b"a.1", b"a.2", b"b.1", b"a.1", b"a.2", b"a.1"])
    assert s.subject_counts() == {b"a.1": 3, b"a.2": 2, b"b.1": 1}
    assert s.subject_counts(b">") == s.subject_counts()
    assert s.subject_counts(b"a.*") == {b"a.1": 3, b"a.2": 2}
    assert s.subject_counts(b"*.1") == {b"a.1": 3, b"b.1": 1}
    assert s.subject_counts(b"a.1") == {b"a.1": 3}
    assert s.subject_counts(b"c") == {}
    assert s.count_subject(b"a.1") == 3 and s.count_subject(b"a.*") == 0
    assert s.first_seq_of_subject(b"a.1") == 1
    assert s.first_seq_of_subject(b"b.1") == 3
    assert s.first_seq_of_subject(b"nope") == 0
    h.store.commit()
    s.remove(1)
    assert s.first_seq_of_subject(b"a.1") == 4
    s.remove(4)
    assert s.first_seq_of_subject(b"a.1") == 6
    assert s.count_subject(b"a.1") == 1
    s.remove(3)
    assert s.first_seq_of_subject(b"b.1") == 0
    assert s.subject_counts() == {b"a.1": 1, b"a.2": 2}
    assert s.state().num_subjects == 2
    assert s.num_pending(0, b"a.1") == 1 and s.num_pending(6, b"a.1") == 1
    assert s.num_pending(7, b"a.1") == 0


def test_num_pending(h):
    s = h.store.create_stream("S")
    fill(s, [b"a", b"b", b"c.d"] * 10)  # 30 messages
    h.store.commit()
    for q in (4, 5, 17, 30):
        s.remove(q)
    stored = [q for q in range(1, 31) if q not in (4, 5, 17, 30)]
    subj = {q: [b"a", b"b", b"c.d"][(q - 1) % 3] for q in stored}
    for filt in (None, b">", b"a", b"b", b"c.d", b"c.*", b"*", b"*.d", b"zz"):
        for start in range(0, 33):
            want = sum(1 for q in stored if q >= start and (filt is None or subject_matches(filt, subj[q])))
            assert s.num_pending(start, filt) == want, (filt, start)


# -- meta -------------------------------------------------------------------------


def test_meta(h):
    s = h.store.create_stream("S")
    assert s.get_meta(b"config") is None
    s.put_meta(b"config", b'{"name":"S"}')
    s.put_meta(b"c/dur1", b"1")
    s.put_meta(b"c/dur2", b"2")
    s.put_meta(b"c/dur1", b"11")
    assert s.get_meta(b"config") == b'{"name":"S"}'
    assert s.get_meta(b"c/dur1") == b"11"
    assert s.meta_keys() == [b"c/dur1", b"c/dur2", b"config"]
    assert s.meta_keys(b"c/") == [b"c/dur1", b"c/dur2"]
    h.store.commit()
    s.del_meta(b"c/dur1")
    s.del_meta(b"nope")
    assert s.get_meta(b"c/dur1") is None
    assert s.meta_keys(b"c/") == [b"c/dur2"]
    s.purge()  # a purge leaves meta alone
    h.store.commit()
    h.reopen()
    s = h.store.stream("S")
    assert s.meta_keys() == [b"c/dur2", b"config"]
    assert s.get_meta(b"c/dur2") == b"2"


# -- streams ----------------------------------------------------------------------


def test_streams(h):
    store = h.store
    assert store.stream_names() == []
    a = store.create_stream("ORDERS")
    b = store.create_stream("A_B-c")
    assert store.stream_names() == ["A_B-c", "ORDERS"]
    assert store.stream("ORDERS") is a and store.stream("A_B-c") is b
    assert store.stream("nope") is None
    with pytest.raises(ValueError):
        store.create_stream("ORDERS")
    fill(a, [b"o.1", b"o.2"])
    fill(b, [b"x"])
    a.put_meta(b"k", b"v")
    store.commit()
    d = store.delete_stream("ORDERS")
    assert store.stream("ORDERS") is None
    assert store.stream_names() == ["A_B-c"]
    results = []
    d.addCallback(results.append)
    h.run_background()
    assert results == [True]
    a2 = store.create_stream("ORDERS")
    assert a2.state() == StreamState() and a2.get_meta(b"k") is None
    assert b.load(1).subject == b"x"
    store.commit()
    h.reopen()
    assert h.store.stream_names() == ["A_B-c", "ORDERS"]
    assert h.store.stream("ORDERS").state() == StreamState()
    assert h.store.stream("A_B-c").state().msgs == 1


def test_delete_stream_uncommitted(h):
    s = h.store.create_stream("S")
    fill(s, [b"a"] * 5)
    assert h.store.dirty == (h.kind == "leveldb")
    h.store.delete_stream("S")
    assert not h.store.dirty
    h.store.commit()
    assert h.store.stream_names() == []


# -- LevelDB only -------------------------------------------------------------------


def test_leveldb_layout_and_names(ldb):
    store = ldb.store
    for bad in ("", "a/b", "..", ".", "a..b", "x\0", "/abs", "a\\b"):
        with pytest.raises(ValueError):
            store.create_stream(bad)
    store.create_stream("S")
    store.commit()
    assert os.path.isfile(os.path.join(ldb.path, "streams", "S", "CURRENT"))
    store.delete_stream("S")
    ldb.run_background()
    assert not os.path.exists(os.path.join(ldb.path, "streams", "S"))
    assert os.listdir(os.path.join(ldb.path, "trash")) == []


def test_leveldb_staged_writes_visible_and_not_durable(ldb):
    store = ldb.store
    s = store.create_stream("S")
    store.commit()
    fill(s, [b"a", b"b", b"a"])
    s.put_meta(b"k", b"v")
    assert store.dirty
    assert s.load(3).subject == b"a"
    assert s.load_last(b"a").seq == 3 and s.load_next(2, b"a").seq == 3
    assert s.count_subject(b"a") == 2 and s.num_pending(0, b"a") == 2
    assert s.get_meta(b"k") == b"v"
    db = s._db
    assert db.get(b"d" + (1).to_bytes(8, "big")) is None  # nothing written yet
    assert db.get(b"mk") is None
    s.remove(2)  # a staged message removed before it is ever written
    assert s.state() == StreamState(2, 2 * sz(s, b"a"), 1, 1000, 3, 1002, 1, 1)
    store.commit()
    assert not store.dirty
    assert db.get(b"d" + (1).to_bytes(8, "big")) is not None
    assert db.get(b"d" + (2).to_bytes(8, "big")) is None
    assert db.get(b"mk") == b"v"
    # staged deletes of committed messages are seen at once too
    s.remove(1)
    assert s.load(1) is None and s.load_next(0).seq == 3
    assert db.get(b"d" + (1).to_bytes(8, "big")) is not None
    store.commit()
    assert db.get(b"d" + (1).to_bytes(8, "big")) is None


def snapshot(stream, filters=(None, b"a", b"b.*", b">")):
    st = stream.state()
    return {
        "state": st,
        "deleted": stream.deleted(),
        "msgs": [stream.load(q) for q in range(0, st.last_seq + 2)],
        "counts": stream.subject_counts(),
        "next": {f: seqs_of(stream, f) for f in filters},
        "last": {f: stream.load_last(f) for f in filters},
        "pending": {f: [stream.num_pending(q, f) for q in range(0, st.last_seq + 2)] for f in filters},
        "meta": {k: stream.get_meta(k) for k in stream.meta_keys()},
    }


def test_leveldb_reopen_keeps_everything(ldb):
    store = ldb.store
    s = store.create_stream("S")
    fill(s, [b"a", b"b.c", b"a", b"b.d", b"a", b"b.c"] * 5)
    s.remove(1)
    s.remove(7)
    s.remove(30)
    s.purge(subject=b"b.d", keep=2)
    s.put_meta(b"config", b"{}")
    e = store.create_stream("EMPTIED")
    fill(e, [b"a"] * 4)
    e.purge()
    f = store.create_stream("FRESH")
    g = store.create_stream("JUMPED")
    g.purge(seq=100)
    store.commit()
    before = {n: snapshot(store.stream(n)) for n in store.stream_names()}
    ldb.reopen()
    after = {n: snapshot(ldb.store.stream(n)) for n in ldb.store.stream_names()}
    assert after == before
    assert after["EMPTIED"]["state"] == StreamState(0, 0, 5, 0, 4, 1003, 0, 0)
    assert after["JUMPED"]["state"] == StreamState(first_seq=100, last_seq=99)
    assert after["FRESH"]["state"] == StreamState()
    assert ldb.store.stream("JUMPED").append(b"a", b"", b"x", 1) == 100
    assert ldb.store.stream("EMPTIED").append(b"a", b"", b"x", 1) == 5
    del f


def test_leveldb_reopen_without_commit_loses_nothing_committed(ldb):
    store = ldb.store
    s = store.create_stream("S")
    fill(s, [b"a"] * 3)
    store.commit()
    fill(s, [b"b"] * 3)
    # Simulate a crash: drop the staged writes, close without commit.
    s._staged.clear()
    s._ops.clear()
    store._dirty_streams.clear()
    ldb.reopen()
    s = ldb.store.stream("S")
    assert s.state() == StreamState(3, 3 * sz(s, b"a"), 1, 1000, 3, 1002, 1, 0)


def raw_keys(stream, prefix):
    return [k for k in stream._db.iterator(prefix=prefix, include_value=False)]


def test_leveldb_purge_is_cheap_and_collected(ldb):
    store = ldb.store
    s = store.create_stream("S")
    for i in range(5000):
        s.append(b"s.%d" % (i % 7), b"", b"p" * 50, i)
    store.commit()
    s.purge()
    assert s.state() == StreamState(0, 0, 5001, 0, 5000, 4999, 0, 0)
    assert s.append(b"s.1", b"", b"new", 1) == 5001
    store.commit()
    # Nothing deleted yet: the old keys are garbage below first_seq.
    assert len(raw_keys(s, b"d")) == 5001
    assert s.load(1) is None and s.load_next(0).seq == 5001
    assert s.subject_counts() == {b"s.1": 1}
    assert s.load_last(b"s.1").seq == 5001 and s.first_seq_of_subject(b"s.1") == 5001
    # A reopen in the middle still sees the right state.
    ldb.reopen()
    s = ldb.store.stream("S")
    assert s.state() == StreamState(1, sz(s, b"s.1", b"new"), 5001, 1, 5001, 1, 1, 0)
    assert s.collect(limit=1000) is False
    ldb.run_background()
    assert [int.from_bytes(k[1:], "big") for k in raw_keys(s, b"d")] == [5001]
    assert len(raw_keys(s, b"s")) == 1
    assert s.load(5001).data == b"new"


def test_leveldb_compact_rebuilds_from_kept(ldb, monkeypatch):
    monkeypatch.setattr(leveldb_stream, "BULK_MIN", 10)
    store = ldb.store
    s = store.create_stream("S")
    for i in range(1000):
        s.append(b"s.%d" % (i % 3), b"", b"p", i)
    store.commit()
    s.remove(995)
    assert s.purge(keep=3) == 996
    assert seqs_of(s) == [998, 999, 1000]
    assert s.state().msgs == 3
    want = snapshot(s)
    store.commit()
    ldb.run_background()
    assert len(raw_keys(s, b"d")) == 3 and len(raw_keys(s, b"s")) == 3
    assert snapshot(s) == want
    ldb.reopen()
    assert snapshot(ldb.store.stream("S")) == want


def test_leveldb_lazy_sync(tmp_path):
    store = LevelDBStore(str(tmp_path), sync=False, reactor=Clock())
    s = store.create_stream("S")
    fill(s, [b"a"] * 10)
    store.commit()
    store.close()
    store = LevelDBStore(str(tmp_path), sync=False, reactor=Clock())
    assert store.stream("S").state().msgs == 10
    store.close()


def test_leveldb_sync_interval(tmp_path):
    clock = Clock()
    store = LevelDBStore(str(tmp_path), sync=False, reactor=clock, sync_interval=120)
    s = store.create_stream("S")
    fill(s, [b"a"] * 3)
    clock.advance(119)
    assert store.dirty
    clock.advance(1)  # sync_all: commits and fsyncs
    assert not store.dirty
    fill(s, [b"a"] * 2)
    store.sync_all()
    assert not store.dirty
    assert len(clock.getDelayedCalls()) == 1
    store.close()
    assert not clock.getDelayedCalls()
    store = LevelDBStore(str(tmp_path), reactor=Clock())
    assert store.stream("S").state().msgs == 5
    store.close()


def test_memory_large_purge_frees_in_background():
    clock = Clock()
    store = MemoryStore(reactor=clock)
    s = store.create_stream("S")
    for i in range(120000):
        s.append(b"a.%d" % (i % 3), b"", b"", i)
    assert s.purge(keep=10) == 119990
    assert s.state().msgs == 10 and seqs_of(s)[0] == 119991
    assert s.purge() == 10
    assert store._graveyard  # freed later, the stream is already empty
    assert s.state() == StreamState(0, 0, 120001, 0, 120000, 119999, 0, 0)
    assert store.reap(1000) is True
    clock.advance(0)
    assert not store._graveyard
    t = store.create_stream("T")
    for i in range(60000):
        t.append(b"x", b"", b"", i)
    store.delete_stream("T")
    assert store.stream("T") is None and store._graveyard
    store.close()


def test_leveldb_close_commits(ldb):
    s = ldb.store.create_stream("S")
    fill(s, [b"a"] * 3)
    ldb.reopen()
    assert ldb.store.stream("S").state().msgs == 3


def test_leveldb_trash_emptied_on_open(ldb):
    store = ldb.store
    store.create_stream("S")
    store.commit()
    os.makedirs(os.path.join(ldb.path, "trash", "OLD.1"))
    ldb.reopen()
    assert os.listdir(os.path.join(ldb.path, "trash")) == []


CRASH_CHILD = textwrap.dedent("""
    import sys
    from natsbroker.store.leveldb import LevelDBStore
    path, = sys.argv[1:]
    store = LevelDBStore(path, sync=True)
    s = store.create_stream("S")
    m = store.create_stream("M")
    n = 0
    while True:
        for _ in range(97):
            n += 1
            s.append(b"sub.%d" % (n % 5), b"", b"payload-%d" % n, n)
        if n % 7 == 0:
            s.remove(n - 50)
        m.put_meta(b"n", b"%d" % n)
        store.commit()
        print(n, flush=True)
        if n > 5000:
            # staged but never committed
            for _ in range(50):
                s.append(b"late", b"", b"x", 0)
            print("STAGED", flush=True)
            sys.stdin.read()
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("when", ["after-staged", "mid-commits"])
def test_leveldb_crash_sigkill(tmp_path, when):
    path = str(tmp_path / "store")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", CRASH_CHILD, path], stdout=subprocess.PIPE,
                            stdin=subprocess.PIPE, env=env)
    committed = 0
    try:
        for line in proc.stdout:
            line = line.strip()
            if line == b"STAGED":
                break
            committed = int(line)
            if when == "mid-commits" and committed > 2000:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert committed > 0
    store = LevelDBStore(path, reactor=Clock())
    try:
        s = store.stream("S")
        st = s.state()
        last = st.last_seq
        assert last >= committed  # everything acknowledged is there (maybe more)
        assert last % 97 == 0  # whole batches only
        if when == "after-staged":
            assert last == committed
        removed = {q - 50 for q in range(97, last + 1, 97) if q % 7 == 0}
        present = [q for q in range(1, last + 1) if q not in removed]
        assert st.msgs == len(present)
        assert st.first_seq == 1 and st.num_deleted == len(removed)
        assert s.deleted() == sorted(removed)
        for q in present:
            m = s.load(q)
            assert m is not None and m.data == b"payload-%d" % q and m.subject == b"sub.%d" % (q % 5)
        assert s.count_subject(b"late") == 0
        # Each stream is its own database, so a kill between the two writes of
        # one commit can leave them one batch apart; neither is behind what
        # was acknowledged.
        n_meta = int(store.stream("M").get_meta(b"n"))
        assert n_meta >= committed and abs(n_meta - last) <= 97
    finally:
        store.close()


# -- SeqSet -------------------------------------------------------------------------


@given(st.lists(st.tuples(st.sampled_from(["add", "discard", "clear_below"]),
                          st.integers(0, 200)), max_size=60),
       st.integers(0, 210))
@settings(max_examples=400, deadline=None)
def test_seqset_matches_set(ops, probe):
    ss = SeqSet()
    ref = set()
    for op, v in ops:
        if op == "add":
            ss.add(v)
            ref.add(v)
        elif op == "discard":
            ss.discard(v)
            ref.discard(v)
        else:
            ss.clear_below(v)
            ref = {x for x in ref if x >= v}
        assert len(ss) == len(ref)
    assert ss.to_list() == sorted(ref)
    for q in range(0, 215):
        assert (q in ss) == (q in ref)
    nc = probe
    while nc in ref:
        nc += 1
    assert ss.next_clear(probe) == nc
    pc = probe
    while pc in ref:
        pc -= 1
    assert ss.prev_clear(probe) == pc
    assert ss.count_ge(probe) == sum(1 for x in ref if x >= probe)


# -- differential: LevelDB vs memory vs a naive model --------------------------------


class Model:
    """The semantics, naively."""

    def __init__(self):
        self.msgs = {}
        self.first = 0
        self.last = 0
        self.last_ts = 0
        self.meta = {}

    def _fix_first(self):
        self.first = min(self.msgs) if self.msgs else self.last + 1

    def append(self, subject, hdr, data, ts):
        seq = self.last + 1
        self.msgs[seq] = StoredMsg(seq, subject, hdr, data, ts)
        if len(self.msgs) == 1:
            self.first = seq
        self.last = seq
        self.last_ts = ts
        return seq

    def remove(self, seq):
        if seq not in self.msgs:
            return False
        del self.msgs[seq]
        self._fix_first()
        return True

    def purge(self, subject=None, seq=None, keep=None):
        seq = seq or 0
        keep = keep or 0
        if subject in (None, b">") and not keep and seq > self.last:
            n = len(self.msgs)
            self.msgs.clear()
            self.first, self.last = seq, seq - 1
            return n
        if subject in (None, b">") and not keep and not seq:
            n = len(self.msgs)
            self.msgs.clear()
            self._fix_first()
            return n
        match = [q for q in sorted(self.msgs)
                 if subject in (None, b">") or subject_matches(subject, self.msgs[q].subject)]
        maxp = len(match) - keep if keep else len(match)
        if subject in (None, b">") and keep and not seq:
            cands = match[:max(maxp, 0)]
        else:
            cands = [q for q in match if not seq or q < seq][:max(maxp, 0)]
        for q in cands:
            del self.msgs[q]
        if cands:
            self._fix_first()
        return len(cands)

    def state(self, size=msg_size):
        m = self.msgs
        return StreamState(
            msgs=len(m), bytes=sum(size(x.subject, x.hdr, x.data) for x in m.values()),
            first_seq=self.first, first_ts=m[self.first].ts if m else 0,
            last_seq=self.last, last_ts=self.last_ts,
            num_subjects=len({x.subject for x in m.values()}),
            num_deleted=(self.last - self.first + 1 - len(m)) if m else 0)

    def deleted(self):
        if not self.msgs:
            return []
        return [q for q in range(self.first, self.last + 1) if q not in self.msgs]

    def matches(self, filt, m):
        return filt is None or subject_matches(filt, m.subject)

    def load(self, seq):
        return self.msgs.get(seq)

    def load_next(self, seq, filt=None):
        for q in sorted(self.msgs):
            if q >= seq and self.matches(filt, self.msgs[q]):
                return self.msgs[q]
        return None

    def load_last(self, filt=None):
        for q in sorted(self.msgs, reverse=True):
            if self.matches(filt, self.msgs[q]):
                return self.msgs[q]
        return None

    def num_pending(self, seq, filt=None):
        return sum(1 for q, m in self.msgs.items() if q >= seq and self.matches(filt, m))

    def subject_counts(self, filt=None):
        out = {}
        for m in self.msgs.values():
            if self.matches(filt, m):
                out[m.subject] = out.get(m.subject, 0) + 1
        return out

    def first_seq_of_subject(self, subject):
        qs = [q for q, m in self.msgs.items() if m.subject == subject]
        return min(qs) if qs else 0


SUBJECTS = [b"a", b"b", b"a.b", b"a.c", b"b.c", b"a.b.c"]
FILTERS = [None, b">", b"a", b"a.b", b"a.*", b"*.c", b"a.>", b"*", b"b.*", b"*.*.*", b"zz", b"zz.*"]


class StoreMachine(RuleBasedStateMachine):
    """The same operations on a LevelDBStore, a MemoryStore and the Model."""

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="nb-store-sm-")
        self.clock = Clock()
        self.ldb = LevelDBStore(self.dir, reactor=self.clock)
        self.mem = MemoryStore()
        self.model = Model()
        self.ts = 0
        self.ldb.create_stream("S")
        self.mem.create_stream("S")
        self.tuning = {}

    @initialize(seek=st.sampled_from([0, 1, 16, 256]), match_limit=st.sampled_from([0, 2, 1024]))
    def tune(self, seek, match_limit):
        # Exercise both the per-subject seek and the scan paths.
        self.tuning = dict(SEEK_SUBJECTS=seek, MATCH_LIMIT=match_limit)
        self._apply_tuning()

    def _apply_tuning(self):
        for k, v in self.tuning.items():
            setattr(self.ldb.stream("S"), k, v)
            setattr(self.mem.stream("S"), k, v)

    def teardown(self):
        self.ldb.close()
        shutil.rmtree(self.dir, True)

    @property
    def streams(self):
        return self.ldb.stream("S"), self.mem.stream("S"), self.model

    @rule(subject=st.sampled_from(SUBJECTS), n=st.integers(1, 30), hdr=st.booleans(),
          data=st.binary(max_size=8))
    def append(self, subject, n, hdr, data):
        for _ in range(n):
            self.ts += 1
            seqs = {s.append(subject, b"H" if hdr else b"", data, self.ts) for s in self.streams}
            assert len(seqs) == 1

    @rule(data=st.data(), erase=st.booleans())
    def remove(self, data, erase):
        seq = data.draw(st.integers(0, self.model.last + 2))
        a, b, c = self.streams
        assert a.remove(seq, erase) == b.remove(seq, erase) == c.remove(seq)

    @rule(data=st.data())
    def remove_some(self, data):
        # A run of removals (like acks on a work queue), oldest first or not.
        seqs = data.draw(st.lists(st.integers(0, self.model.last + 1), max_size=20))
        for q in seqs:
            a, b, c = self.streams
            assert a.remove(q) == b.remove(q) == c.remove(q)

    @rule(subject=st.sampled_from([None, b">", b"a", b"a.*", b"*.c", b"a.>", b"b", b"zz"]),
          data=st.data(), keep=st.one_of(st.none(), st.integers(0, 20)))
    def purge(self, subject, data, keep):
        seq = data.draw(st.one_of(st.none(), st.integers(0, self.model.last + 5)))
        a, b, c = self.streams
        assert a.purge(subject, seq, keep) == b.purge(subject, seq, keep) == c.purge(subject, seq, keep)

    @rule()
    def commit(self):
        self.ldb.commit()
        assert not self.ldb.dirty

    @rule()
    def background(self):
        for _ in range(3):
            self.clock.advance(0)

    @rule()
    def collect_all(self):
        self.ldb.stream("S").collect()

    @rule(commit=st.booleans())
    def reopen(self, commit):
        if commit:
            self.ldb.commit()
        self.ldb.close()  # close commits what is left
        self.ldb = LevelDBStore(self.dir, reactor=self.clock)
        self._apply_tuning()

    @rule(key=st.sampled_from([b"c", b"c/1", b"c/2", b"x"]), value=st.binary(max_size=4))
    def put_meta(self, key, value):
        self.ldb.stream("S").put_meta(key, value)
        self.mem.stream("S").put_meta(key, value)
        self.model.meta[key] = value

    @rule(key=st.sampled_from([b"c", b"c/1", b"c/2", b"x"]))
    def del_meta(self, key):
        self.ldb.stream("S").del_meta(key)
        self.mem.stream("S").del_meta(key)
        self.model.meta.pop(key, None)

    @invariant()
    def agree(self):
        a, b, c = self.streams
        want = c.state()
        assert a.state() == c.state(file_msg_size)
        assert b.state() == c.state(msg_size)
        assert a.deleted() == b.deleted() == c.deleted()
        last = want.last_seq
        seqs = range(0, last + 2) if last < 80 else sorted(
            set(range(0, 20)) | set(range(want.first_seq - 3, want.first_seq + 5))
            | set(range(last - 20, last + 2)))
        for q in seqs:
            assert a.load(q) == b.load(q) == c.load(q), q
        for f in FILTERS:
            assert a.load_last(f) == b.load_last(f) == c.load_last(f), f
            assert a.subject_counts(f) == b.subject_counts(f) == c.subject_counts(f), f
            for q in seqs[::3]:
                want_next = c.load_next(q, f)
                assert a.load_next(q, f) == want_next, (q, f)
                assert b.load_next(q, f) == want_next, (q, f)
                want_n = c.num_pending(q, f)
                assert a.num_pending(q, f) == b.num_pending(q, f) == want_n, (q, f)
        for subj in SUBJECTS:
            want_first = c.first_seq_of_subject(subj)
            assert a.first_seq_of_subject(subj) == b.first_seq_of_subject(subj) == want_first
            n = c.subject_counts(subj).get(subj, 0)
            assert a.count_subject(subj) == b.count_subject(subj) == n
        for s in (a, b):
            assert {k: s.get_meta(k) for k in s.meta_keys()} == c.meta
            assert s.meta_keys(b"c/") == sorted(k for k in c.meta if k.startswith(b"c/"))


def test_differential_state_machine(monkeypatch):
    # Small thresholds so the bulk and chunked paths run on small streams.
    monkeypatch.setattr(leveldb_stream, "BULK_MIN", 3)
    monkeypatch.setattr(leveldb_stream, "GC_CHUNK", 4)
    monkeypatch.setattr(leveldb_store, "RECENT_BYTES", 64)
    run_state_machine_as_test(StoreMachine, settings=settings(
        max_examples=int(os.environ.get("STORE_SM_EXAMPLES", "100")), stateful_step_count=30,
        deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


def test_leveldb_raw_layout_is_documented(ldb):
    """Pin the on-disk key layout the module docstring describes."""
    s = ldb.store.create_stream("S")
    s.append(b"ab", b"h", b"data", 7)
    s.put_meta(b"k", b"v")
    ldb.store.commit()
    ldb.store.close()
    db = plyvel.DB(os.path.join(ldb.path, "streams", "S"))
    one = (1).to_bytes(8, "big")
    seed = one + (7).to_bytes(8, "big") + (2).to_bytes(4, "big") + (1).to_bytes(4, "big")
    crc = zlib.crc32(b"abhdata", zlib.crc32(seed))
    assert db.get(b"d" + one) == ((7).to_bytes(8, "big") + (0x80000002).to_bytes(4, "big")
                                  + (1).to_bytes(4, "big") + crc.to_bytes(4, "big")
                                  + b"abhdata")
    assert db.get(b"F") == b"\x02"
    assert (db.get(b"s" + (2).to_bytes(4, "big") + b"ab" + one)
            == file_msg_size(b"ab", b"h", b"data").to_bytes(4, "big"))
    assert db.get(b"mk") == b"v"
    assert db.get(b"S") == one + one + (7).to_bytes(8, "big")
    db.close()


def test_bytes_as_nats_server(h):
    """nats-server 2.15 reported these byte counts for one 1-byte message on
    "SF1.a": 36 in a file stream, 21 (for "S1.a") in a memory stream."""
    s = h.store.create_stream("S")
    if h.kind == "leveldb":
        s.append(b"SF1.a", b"", b"x", 1)
        assert s.state().bytes == 36
    else:
        s.append(b"S1.a", b"", b"x", 1)
        assert s.state().bytes == 21
    h.store.commit()
    h.reopen()
    assert h.store.stream("S").state().bytes == (36 if h.kind == "leveldb" else 21)


def test_recent_commits_stay_in_memory_within_budget(tmp_path, monkeypatch):
    """Recent commits' messages are served from memory, store-wide within
    RECENT_BYTES (oldest commit out first) and RECENT_SECONDS; a closed stream
    leaves the budget. What is read is the same either way."""
    now = [1000.0]
    monkeypatch.setattr(leveldb_store.time, "monotonic", lambda: now[0])
    store = LevelDBStore(str(tmp_path / "store"), reactor=Clock())
    try:
        a, b = store.create_stream("A"), store.create_stream("B")
        sz_of = file_msg_size(b"s", b"", b"x" * 100)
        monkeypatch.setattr(leveldb_store, "RECENT_BYTES", 25 * sz_of)
        for i in range(10):
            a.append(b"s", b"", b"x" * 100, i)
        store.commit()
        for i in range(10):
            b.append(b"s", b"", b"x" * 100, i)
        store.commit()
        assert sorted(a._recent) == list(range(1, 11)) and sorted(b._recent) == list(range(1, 11))
        assert store._recent_bytes == 20 * sz_of
        for i in range(10, 20):  # 30 messages: A's first commit goes
            a.append(b"s", b"", b"x" * 100, i)
        store.commit()
        assert sorted(a._recent) == list(range(11, 21)) and len(b._recent) == 10
        assert store._recent_bytes == 20 * sz_of <= leveldb_store.RECENT_BYTES
        # Read from disk (seq 1-10) or memory (11-20), the messages are the same.
        assert [m.data for m in (a.load(s) for s in range(1, 21))] == [b"x" * 100] * 20
        assert [a.load(s).ts for s in range(1, 21)] == list(range(20))
        # Too old: out at the next commit, whatever the budget.
        now[0] += leveldb_store.RECENT_SECONDS + 1
        b.append(b"s", b"", b"y", 99)
        store.commit()
        assert not a._recent and sorted(b._recent) == [11]
        assert store._recent_bytes == file_msg_size(b"s", b"", b"y")
        store.delete_stream("B")
        assert store._recent_bytes == 0 and not store._recent
        # A commit larger than the whole budget is not kept.
        for i in range(30):
            a.append(b"s", b"", b"x" * 100, i)
        store.commit()
        assert not a._recent and store._recent_bytes == 0
        assert a.load(21).data == b"x" * 100
    finally:
        store.close()


def test_recent_commits_keep_small_messages_only(tmp_path):
    """Large messages (object store chunks) are read back, not held in memory."""
    store = LevelDBStore(str(tmp_path / "store"), reactor=Clock())
    try:
        s = store.create_stream("S")
        s.append(b"c", b"", b"x" * (leveldb_store.RECENT_MSG_MAX + 1), 1)
        store.commit()
        assert not s._recent and store._recent_bytes == 0
        s.append(b"c", b"", b"x" * 100, 2)
        store.commit()
        assert list(s._recent) == [2]
        assert s.load(1).data == b"x" * (leveldb_store.RECENT_MSG_MAX + 1)
    finally:
        store.close()
