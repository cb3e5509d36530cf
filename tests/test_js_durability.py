"""Acked means synced: SIGKILL mid-stream loses no acknowledged message."""

import asyncio
import signal

import nats
import pytest

from tests.support.servers import ServerProcess


async def _publish_until_killed(server, n, window=50):
    nc = await nats.connect(server.url, max_reconnect_attempts=0, allow_reconnect=False)
    js = nc.jetstream()
    await js.add_stream(name="DUR", subjects=["dur.>"])
    acked = {}
    pending = set()
    i = 0

    async def one(k):
        ack = await js.publish("dur.%d" % (k % 7), b"payload-%d" % k, timeout=5)
        acked[ack.seq] = k

    try:
        while i < n:
            while len(pending) < window and i < n:
                pending.add(asyncio.ensure_future(one(i)))
                i += 1
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if i >= n // 2 and server.proc.poll() is None:
                server.proc.send_signal(signal.SIGKILL)
    except Exception:
        pass
    for t in pending:
        t.cancel()
    await asyncio.sleep(0.1)
    try:
        await nc.close()
    except Exception:
        pass
    return acked


async def _read_back(server, seqs):
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    info = await js.stream_info("DUR")
    got = {}
    for seq in seqs:
        m = await js.get_msg("DUR", seq)
        got[seq] = (m.subject, m.data)
    await nc.close()
    return info, got


@pytest.mark.parametrize("attempt", range(3))
def test_sigkill_keeps_every_acked_message(tmp_path, attempt):
    store = str(tmp_path / "store")
    server = ServerProcess("natsbroker", ["-js", "-sd", store]).start()
    try:
        acked = asyncio.run(_publish_until_killed(server, 4000))
        server.proc.wait(10)
    finally:
        server.stop()
    assert len(acked) > 0
    again = ServerProcess("natsbroker", ["-js", "-sd", store]).start()
    try:
        info, got = asyncio.run(_read_back(again, sorted(acked)))
    finally:
        again.stop()
    for seq, k in acked.items():
        assert got[seq] == ("dur.%d" % (k % 7), b"payload-%d" % k)
    # Sequences are dense (no gaps, no duplicates): every stored message was
    # assigned the next sequence, whether or not its ack got out.
    assert info.state.first_seq == 1
    assert info.state.messages == info.state.last_seq >= max(acked)
    assert not info.state.num_deleted
