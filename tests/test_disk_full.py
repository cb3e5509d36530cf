"""A full disk (issue 12, item 7): a store write that fails fails the publish
with nats-server's error (503/10077, the system's words), writes nothing
partial, is logged once, and the stream serves again when there is room.

The store lives on a small tmpfs mounted for the test (root is needed to
mount it: CI runs as root); a filler file takes the rest of the space."""

import asyncio
import errno
import json
import os
import subprocess
import time

import nats
import pytest

from tests.support.servers import ServerProcess

SIZE = 100_000


@pytest.fixture
def disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path = tmp_path / "disk"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(path)], check=True)
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill_up(path):
    """Take every free byte of the file system holding ``path``."""
    filler = os.path.join(path, "filler")
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                if len(chunk) == 1:
                    break
                chunk = chunk[:len(chunk) // 2]
    return filler


def _payload(k):
    return (b"%08d" % k) * (SIZE // 8)


def test_disk_full_fails_publishes_cleanly_and_recovers(disk):
    store = os.path.join(disk, "store")
    server = ServerProcess("natsbroker", ["-js", "-sd", store]).start()
    acked = {}
    try:
        async def run():
            nc = await nats.connect(server.url, connect_timeout=10)
            js = nc.jetstream()
            await js.add_stream(name="S", subjects=["s.>"])
            await js.add_stream(name="OTHER", subjects=["o.>"])
            for k in range(20):
                ack = await js.publish("s.x", _payload(k), timeout=10)
                acked[ack.seq] = k
            await js.publish("o.x", b"o", timeout=10)
            filler = _fill_up(disk)
            # Publish until the disk refuses; every ack before that is stored.
            errors = []
            k = 100
            while len(errors) < 3 and k < 2000:
                r = await nc.request("s.x", _payload(k), timeout=10)
                d = json.loads(r.data)
                if "error" in d:
                    errors.append(d["error"])
                else:
                    acked[d["seq"]] = k
                k += 1
            assert errors, "the disk never filled"
            for err in errors:
                assert (err["code"], err["err_code"]) == (503, 10077), err
                assert "No space left on device" in err["description"], err
            # Nothing else is disturbed: reads, core NATS, other replies.
            for seq in list(acked)[:3]:
                m = await js.get_msg("S", seq)
                assert m.data == _payload(acked[seq])
            sub = await nc.subscribe("core.x")
            await nc.publish("core.x", b"hi")
            assert (await sub.next_msg(timeout=5)).data == b"hi"
            # Room again: the stream takes publishes again, under new sequences.
            os.remove(filler)
            deadline = time.monotonic() + 20
            while True:
                r = await nc.request("s.x", b"after", timeout=10)
                d = json.loads(r.data)
                if "error" not in d:
                    break
                assert time.monotonic() < deadline, d
                await asyncio.sleep(0.2)
            assert d["seq"] > max(acked)
            acked[d["seq"]] = None
            await nc.close()

        asyncio.run(run())
        log = server.log()
        assert log.count("store write failed") == 1, log[-3000:]
        assert "store writes succeed again" in log
    finally:
        server.stop()
    assert "Traceback" not in server.log()

    # Every acknowledged message is there, whole; nothing half-written.
    again = ServerProcess("natsbroker", ["-js", "-sd", store]).start()
    try:
        async def check():
            nc = await nats.connect(again.url, connect_timeout=10)
            js = nc.jetstream()
            for seq, k in acked.items():
                m = await js.get_msg("S", seq)
                assert m.data == (b"after" if k is None else _payload(k)), seq
            info = await js.stream_info("S")
            assert info.state.last_seq >= max(acked)
            ack = await js.publish("s.x", b"later", timeout=10)
            assert ack.seq > max(acked)
            await nc.close()
        asyncio.run(check())
    finally:
        again.stop()
    assert "offline" not in again.log()
