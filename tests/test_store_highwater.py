"""The high-water mark file keeps a valid record through a torn write of the
newest one, however many consumers' floors it holds (a record may be larger
than the 4 KB slot)."""

import os
import tempfile

from hypothesis import given, settings, strategies as st

from natsbroker.store.leveldb.sidefiles import HWM_SLOT, HighWater


def _floors(n, v):
    return {b"consumer-%d" % i: (v, v + 1, v + 2, v + 3) for i in range(n)}


def _tear(path, hw):
    """Spoil the newest record as a torn write would (its tail never landed)."""
    off, size = hw._last
    with open(path, "r+b") as f:
        f.seek(off + size // 2)
        f.write(b"\0" * (size - size // 2))


def test_large_records_do_not_overlap_the_previous_one(tmp_path):
    path = str(tmp_path / "hwm")
    hw = HighWater(path)
    for v in range(1, 6):
        hw.write(v, v * 10, v, v, v, _floors(1000, v))  # ~40 KB each
    assert len(_floors(1000, 0)) * 40 > HWM_SLOT
    _tear(path, hw)
    got = HighWater(path).read()
    assert got[:5] == (4, 40, 4, 4, 4)
    assert got[5] == _floors(1000, 4)


def test_a_reader_continues_where_the_file_left_off(tmp_path):
    path = str(tmp_path / "hwm")
    hw = HighWater(path)
    for v in range(1, 4):
        hw.write(v, v, v, v, v, _floors(300, v))
    hw.close()
    hw2 = HighWater(path)
    assert hw2.read()[0] == 3
    hw2.write(4, 4, 4, 4, 4, _floors(300, 4))
    _tear(path, hw2)
    assert HighWater(path).read()[0] == 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 400), min_size=2, max_size=12))
def test_a_torn_newest_record_leaves_the_one_before(sizes):
    # Floors grow and shrink (consumers come and go): after every write,
    # tearing that write must leave the previous one readable and whole.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hwm")
        hw = HighWater(path)
        for i, n in enumerate(sizes, 1):
            hw.write(i, i, i, i, i, _floors(n, i))
            if i == 1:
                continue
            with open(path, "rb") as f:
                saved = f.read()
            _tear(path, hw)
            got = HighWater(path).read()
            assert got is not None and got[0] == i - 1 and got[5] == _floors(sizes[i - 2], i - 1)
            with open(path, "wb") as f:
                f.write(saved)  # undo the tear, go on writing
            assert HighWater(path).read()[0] == i
