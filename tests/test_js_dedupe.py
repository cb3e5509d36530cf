"""The de-duplication window, driven by a fake clock (no sleeping)."""

from twisted.internet.task import Clock

from natsbroker.store.memory import MemoryStore
from plugins.jetstream import models as M
from plugins.jetstream import stream as stream_mod
from plugins.jetstream.stream import Stream


def test_msg_id_forgotten_after_duplicate_window(monkeypatch):
    now = [10_000_000_000]
    monkeypatch.setattr(stream_mod, "now_ns", lambda: now[0])
    cfg = M.fill_defaults(M.parse_stream_config(
        b'{"name":"S","subjects":["s"],"duplicate_window":1000000000}', "S"))
    s = Stream(cfg, MemoryStore().create_stream("S"), 0, Clock())
    hdr = lambda i: b"NATS/1.0\r\nNats-Msg-Id: %s\r\n\r\n" % i
    assert s.accept(b"s", hdr(b"a"), b"1") == (1, False)
    now[0] += 500_000_000
    assert s.accept(b"s", hdr(b"b"), b"2") == (2, False)
    assert s.accept(b"s", hdr(b"a"), b"1") == (1, True)
    now[0] += 600_000_000  # "a" is now 1.1 s old, "b" 0.6 s
    assert s.accept(b"s", hdr(b"b"), b"2") == (2, True)
    assert s.accept(b"s", hdr(b"a"), b"1") == (3, False)
    assert list(s._dedupe) == [b"b", b"a"]
