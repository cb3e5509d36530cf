"""Subject validation and the Sublist, checked against a brute-force matcher."""

import pytest
from hypothesis import given, settings, strategies as st

from natsbroker.subjects.sublist import (
    Sublist,
    Subscription,
    is_valid_literal_subject,
    is_valid_subject,
    subject_matches,
    subset_of,
)


@pytest.mark.parametrize("s", [b"foo", b"foo.bar", b"*", b">", b"foo.*", b"foo.>", b"*.bar.>",
                               b"foo*.bar", b"foo.b*r", b"a.>b", b"$JS.API.>"])
def test_valid(s):
    assert is_valid_subject(s)


@pytest.mark.parametrize("s", [b"", b".", b"foo.", b".foo", b"foo..bar", b"foo.>.bar", b">.a",
                               b"foo bar", b"foo\tbar", b"a. .b"])
def test_invalid(s):
    assert not is_valid_subject(s)


def test_literal():
    assert is_valid_literal_subject(b"foo.bar")
    assert not is_valid_literal_subject(b"foo.*")
    assert not is_valid_literal_subject(b"foo.>")
    assert is_valid_literal_subject(b"foo*.bar")


def test_subject_matches():
    assert subject_matches(b"foo.*", b"foo.bar")
    assert not subject_matches(b"foo.*", b"foo.bar.baz")
    assert subject_matches(b"foo.>", b"foo.bar.baz")
    assert not subject_matches(b"foo.>", b"foo")
    assert subject_matches(b">", b"a")
    assert subject_matches(b"*.b.*", b"a.b.c")


def test_subset_of():
    assert subset_of(b"foo.bar", b"foo.*")
    assert subset_of(b"foo.*", b"foo.>")
    assert subset_of(b"foo.>", b"foo.>")
    assert not subset_of(b"foo.>", b"foo.*")
    assert not subset_of(b"foo.*", b"foo.bar")


def _sub(subject, queue=None, n=[0]):
    n[0] += 1
    return Subscription(subject, b"%d" % n[0], object(), queue)


def test_queue_groups_merge_by_name():
    sl = Sublist()
    a, b, c, d = _sub(b"foo", b"q"), _sub(b"*", b"q"), _sub(b"foo", b"r"), _sub(b">")
    for s in (a, b, c, d):
        sl.insert(s)
    psubs, qgroups = sl.match(b"foo")
    assert psubs == (d,)
    assert sorted(map(set, qgroups), key=len) == [{c}, {a, b}]


def test_cache_invalidated_by_wildcard_insert_and_remove():
    sl = Sublist()
    a = _sub(b"foo.bar")
    sl.insert(a)
    assert sl.match(b"foo.bar") == ((a,), ())
    w = _sub(b"foo.*")
    sl.insert(w)
    assert set(sl.match(b"foo.bar")[0]) == {a, w}
    sl.remove(w)
    assert sl.match(b"foo.bar") == ((a,), ())
    sl.remove(a)
    assert sl.match(b"foo.bar") == ((), ())
    assert sl.count == 0
    assert sl._root.empty()


def test_remove_unknown_is_false():
    sl = Sublist()
    assert not sl.remove(_sub(b"a.b"))


tok = st.sampled_from([b"a", b"b", b"c"])
pattern_tok = st.sampled_from([b"a", b"b", b"c", b"*"])


@st.composite
def patterns(draw):
    toks = draw(st.lists(pattern_tok, min_size=1, max_size=4))
    if draw(st.booleans()):
        toks.append(b">")
    return b".".join(toks)


literals = st.lists(tok, min_size=1, max_size=5).map(b".".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "del", "match"]), patterns(), literals,
                          st.sampled_from([None, b"q1", b"q2"])), max_size=40))
def test_sublist_agrees_with_brute_force(steps):
    sl = Sublist(cache_max=8)
    live = []
    for action, pattern, literal, queue in steps:
        if action == "add":
            s = _sub(pattern, queue)
            sl.insert(s)
            live.append(s)
        elif action == "del" and live:
            s = live.pop(len(pattern) % len(live))
            assert sl.remove(s)
        psubs, qgroups = sl.match(literal)
        want = {s for s in live if subject_matches(s.subject, literal)}
        got = set(psubs) | {s for g in qgroups for s in g}
        assert got == want
        assert all(s.queue is None for s in psubs)
        for g in qgroups:
            assert len({s.queue for s in g}) == 1
    assert sl.count == len(live)


def test_watch_interest():
    from natsbroker.subjects.sublist import Sublist, Subscription
    sl = Sublist()
    seen = []
    h = sl.watch(b"deliver.x", seen.append)
    sl.insert(Subscription(b"other", b"1", None))
    sl.insert(Subscription(b"deliver.x", b"2", None))
    sl.insert(Subscription(b"deliver.*", b"3", None))
    sl.insert(Subscription(b">", b"4", None, queue=b"q"))
    assert seen == [b"deliver.x"] * 3
    sl.unwatch(h)
    sl.insert(Subscription(b"deliver.x", b"5", None))
    assert len(seen) == 3 and sl._watches == {}


# -- subjects_collide / subject_is_subset_match (nats-server's relations on str) --------

_REL_TOKENS = st.sampled_from(["a", "b", "*"])


@st.composite
def _rel_subject(draw):
    toks = draw(st.lists(_REL_TOKENS, min_size=1, max_size=3))
    if draw(st.booleans()):
        toks.append(">")
    return ".".join(toks)


def _literals(max_len=5):
    import itertools
    for n in range(1, max_len + 1):
        for toks in itertools.product(["a", "b", "c"], repeat=n):
            yield ".".join(toks).encode()


_ALL_LITERALS = list(_literals())


@given(_rel_subject(), _rel_subject())
def test_subjects_collide_is_some_literal_matching_both(x, y):
    from natsbroker.subjects.sublist import subjects_collide
    both = any(subject_matches(x.encode(), s) and subject_matches(y.encode(), s)
               for s in _ALL_LITERALS)
    assert subjects_collide(x, y) == subjects_collide(y, x) == both


@given(_rel_subject(), _rel_subject())
def test_subject_is_subset_match_is_inclusion(x, y):
    from natsbroker.subjects.sublist import subject_is_subset_match
    included = all(subject_matches(y.encode(), s) for s in _ALL_LITERALS
                   if subject_matches(x.encode(), s))
    assert subject_is_subset_match(x, y) == included


def test_ack_subjects_are_matched_but_not_cached():
    # Each JetStream ack subject names one delivery: caching it would only
    # push out the subjects that do come again.
    sl = Sublist()
    ack = Subscription(b"$JS.ACK.S.C.>", b"1", None, None)
    hot = Subscription(b"orders.*", b"2", None, None)
    sl.insert(ack)
    sl.insert(hot)
    assert sl.match(b"orders.new")[0] == (hot,)
    for i in range(3000):
        assert sl.match(b"$JS.ACK.S.C.1.%d.%d.0.0" % (i, i))[0] == (ack,)
    assert sl.cache_size == 1 and b"orders.new" in sl.cache
