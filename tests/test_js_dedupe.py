"""Stream timers driven by a fake clock (no sleeping): the de-duplication
window, max_age, per-message TTLs and subject delete markers, and what a
restart rebuilds. Expected behaviour is nats-server 2.15.1's, observed;
test_observed_live.py checks the timer scenarios again in real time on
nats-server and natsbroker."""

import pytest
from twisted.internet.task import Clock

from natsbroker.jetstream import errors as E, stream_config as SC
from natsbroker.jetstream.stream import Stream, parse_ttl
from natsbroker.store.leveldb import LevelDBStore
from natsbroker.store.memory import MemoryStore

SEC = 1_000_000_000
T0 = 1_000 * SEC


def make(body, store=None, clock=None):
    clock = clock or Clock()
    clock.advance(T0 / SEC)
    cfg = SC.fill_defaults(SC.parse_stream_config(body, "S"))
    store = store or MemoryStore()
    ss = store.stream("S") or store.create_stream("S")
    return Stream(cfg, ss, 0, clock, now=lambda: int(round(clock.seconds() * SEC))), clock


def hdr(*pairs):
    return b"NATS/1.0\r\n" + b"".join(b"%s: %s\r\n" % p for p in pairs) + b"\r\n"


def contents(s):
    out = []
    m = s.store.load_next(0)
    while m is not None:
        out.append((m.seq, m.subject, m.hdr, m.data))
        m = s.store.load_next(m.seq + 1)
    return out


def test_msg_id_forgotten_after_duplicate_window():
    s, clock = make(b'{"name":"S","subjects":["s"],"duplicate_window":1000000000}')
    h = lambda i: hdr((b"Nats-Msg-Id", i))
    assert s.accept(b"s", h(b"a"), b"1") == (1, False)
    clock.advance(0.5)
    assert s.accept(b"s", h(b"b"), b"2") == (2, False)
    assert s.accept(b"s", h(b"a"), b"1") == (1, True)
    clock.advance(0.6)  # "a" is now 1.1 s old, "b" 0.6 s
    assert s.accept(b"s", h(b"b"), b"2") == (2, True)
    assert s.accept(b"s", h(b"a"), b"1") == (3, False)
    assert list(s._dedupe) == [b"b", b"a"]


@pytest.mark.parametrize("text,secs", [
    (b"1s", 1), (b"2", 2), (b"never", -1), (b"NEVER", -1), (b"1h", 3600), (b"1.5s", 1),
    (b"1m30s", 90)])
def test_parse_ttl(text, secs):
    assert parse_ttl(text) == secs


@pytest.mark.parametrize("text", [b"0", b"-1", b"abc", b"500ms", b"0s", b"", b"1x"])
def test_parse_ttl_invalid(text):
    with pytest.raises(E.ApiError) as e:
        parse_ttl(text)
    assert e.value.err_code == 10165


def test_ttl_refused_unless_allowed():
    s, _ = make(b'{"name":"S","subjects":["s"]}')
    with pytest.raises(E.ApiError) as e:
        s.accept(b"s", hdr((b"Nats-TTL", b"1s")), b"x")
    assert e.value.err_code == 10166
    assert s.store.state().msgs == 0


def test_max_age_expiry_on_a_timer():
    s, clock = make(b'{"name":"S","subjects":["s.*"],"max_age":3000000000}')
    s.accept(b"s.a", b"", b"1")
    clock.advance(1)
    s.accept(b"s.b", b"", b"2")
    assert len(clock.getDelayedCalls()) == 1  # one timer, not one per message
    clock.advance(1.9)
    assert s.store.state().msgs == 2
    clock.advance(0.2)  # seq 1 is 3.1 s old
    assert [m[0] for m in contents(s)] == [2]
    clock.advance(1)
    st = s.store.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 3, 2)
    assert clock.getDelayedCalls() == []


def test_per_message_ttl_and_never():
    s, clock = make(b'{"name":"S","subjects":["s.*"],"allow_msg_ttl":true,"max_age":3000000000}')
    s.accept(b"s.a", hdr((b"Nats-TTL", b"1s")), b"1")
    s.accept(b"s.a", hdr((b"Nats-TTL", b"never")), b"2")
    s.accept(b"s.a", hdr((b"Nats-TTL", b"1h")), b"3")  # max_age still applies
    s.accept(b"s.a", hdr((b"Nats-TTL", b"2")), b"4")
    s.accept(b"s.a", b"", b"5")
    clock.advance(1.01)
    assert [m[0] for m in contents(s)] == [2, 3, 4, 5]
    clock.advance(1)
    assert [m[0] for m in contents(s)] == [2, 3, 5]
    clock.advance(1.5)
    assert [m[0] for m in contents(s)] == [2]
    st = s.store.state()
    assert (st.first_seq, st.last_seq, st.num_deleted) == (2, 5, 3)


def test_subject_delete_markers_on_max_age():
    s, clock = make(b'{"name":"S","subjects":["s.*"],"allow_msg_ttl":true,'
                    b'"subject_delete_marker_ttl":1000000000,"max_age":1000000000}')
    s.accept(b"s.a", b"", b"x")
    s.accept(b"s.b", hdr((b"Nats-TTL", b"1s")), b"x")
    s.accept(b"s.c", hdr((b"Nats-TTL", b"5s")), b"x")
    s.accept(b"s.c", b"", b"y")
    clock.advance(1.01)
    marker = b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 1s\r\nNats-Rollup: sub\r\n\r\n"
    # A marker per emptied subject, in the order of the messages removed.
    assert contents(s) == [(5, b"s.a", marker, b""), (6, b"s.b", marker, b""),
                           (7, b"s.c", marker, b"")]
    clock.advance(1)  # the markers expire, leaving no markers of their own
    st = s.store.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 8, 7)


def test_marker_ttl_raises_shorter_message_ttls():
    s, clock = make(b'{"name":"S","subjects":["s.*"],"allow_msg_ttl":true,'
                    b'"subject_delete_marker_ttl":2000000000}')
    s.accept(b"s.b", hdr((b"X", b"1"), (b"Nats-TTL", b"1s"), (b"Y", b"2")), b"x")
    s.accept(b"s.c", hdr((b"Nats-TTL", b"1")), b"x")
    s.accept(b"s.c", b"", b"y")
    s.accept(b"s.d", hdr((b"Nats-TTL", b"2m")), b"x")
    # nats-server drops the header and appends the raised one last
    # (stream.go: removeHeaderIfPresent, genHeader; checked live in
    # test_observed_live).
    assert [m[2] for m in contents(s)] == [
        hdr((b"X", b"1"), (b"Y", b"2"), (b"Nats-TTL", b"2")), hdr((b"Nats-TTL", b"2")), b"",
        hdr((b"Nats-TTL", b"2m"))]
    clock.advance(1.5)
    assert s.store.state().msgs == 4
    clock.advance(0.6)
    # s.b emptied: a marker; s.c still has seq 3, so none.
    assert [(m[0], m[1]) for m in contents(s)] == [(3, b"s.c"), (4, b"s.d"), (5, b"s.b")]
    assert b"Nats-Marker-Reason: MaxAge" in contents(s)[-1][2]


def test_marker_ttl_does_not_raise_with_one_message_per_subject():
    """nats-server leaves a shorter TTL alone when max_msgs_per_subject is 1
    (stream.go: one message per subject, no marker can be missed)."""
    s, clock = make(b'{"name":"S","subjects":["s.*"],"allow_msg_ttl":true,'
                    b'"max_msgs_per_subject":1,"subject_delete_marker_ttl":2000000000}')
    s.accept(b"s.b", hdr((b"Nats-TTL", b"1s"), (b"Y", b"2")), b"x")
    assert [m[2] for m in contents(s)] == [hdr((b"Nats-TTL", b"1s"), (b"Y", b"2"))]
    clock.advance(1.01)
    assert [(m[0], m[1]) for m in contents(s)] == [(2, b"s.b")]  # its marker


def test_interest_stream_without_consumers_numbers_but_keeps_nothing():
    s, _ = make(b'{"name":"S","subjects":["s.*"],"retention":"interest"}')
    assert s.accept(b"s.a", b"", b"x") == (1, False)
    assert s.accept(b"s.b", hdr((b"Nats-Msg-Id", b"1")), b"x") == (2, False)
    assert s.accept(b"s.b", hdr((b"Nats-Msg-Id", b"1")), b"x") == (2, True)
    with pytest.raises(E.ApiError) as e:
        s.accept(b"s.c", hdr((b"Nats-Expected-Last-Sequence", b"3")), b"x")
    assert e.value.description == "wrong last sequence: 2"
    st = s.store.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 3, 2)


@pytest.mark.parametrize("kind", ["leveldb"])
def test_restart_rebuilds_dedupe_and_ttls(tmp_path, kind):
    path = str(tmp_path / "js")
    body = (b'{"name":"S","subjects":["s.*"],"allow_msg_ttl":true,"max_age":5000000000,'
            b'"duplicate_window":2000000000}')
    store = LevelDBStore(path)
    s, clock = make(body, store)
    s.accept(b"s.a", hdr((b"Nats-Msg-Id", b"old")), b"1")
    clock.advance(3)
    s.accept(b"s.a", hdr((b"Nats-Msg-Id", b"new"), (b"Nats-TTL", b"1s")), b"2")
    s.accept(b"s.a", hdr((b"Nats-TTL", b"never")), b"3")
    store.commit()
    s.stop()
    store.close()

    store = LevelDBStore(path)
    clock2 = Clock()
    clock2.advance(clock.seconds() - T0 / SEC)  # make() adds T0 again
    s, clock2 = make(body, store, clock2)
    s.recover()
    assert list(s._dedupe) == [b"new"]  # "old" is outside the 2 s window
    assert s.accept(b"s.a", hdr((b"Nats-Msg-Id", b"new")), b"2") == (2, True)
    assert s.accept(b"s.a", hdr((b"Nats-Expected-Last-Msg-Id", b"new")), b"4") == (4, False)
    clock2.advance(1.01)  # seq 2's TTL
    assert [m[0] for m in contents(s)] == [1, 3, 4]
    clock2.advance(1.5)  # seq 1 reaches max_age; the "never" message stays
    assert [m[0] for m in contents(s)] == [3, 4]
    clock2.advance(10)
    assert [m[0] for m in contents(s)] == [3]
    s.stop()
    store.close()
