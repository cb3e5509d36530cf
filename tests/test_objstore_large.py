"""A 100 MB object through nats-py's object store: the server streams it to
and from the store chunk by chunk, never holding the object in memory."""

import asyncio
import hashlib
import io

import nats

from tests.support.servers import ServerProcess

SIZE = 100 * 1024 * 1024


def peak_rss(pid):
    """The process's peak resident set (VmHWM) in bytes."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


class Pattern(io.RawIOBase):
    """SIZE bytes of a cheap, position-dependent pattern, read in pieces."""

    def __init__(self, size):
        self.left = size
        self.block = bytes(range(256)) * 4096  # 1 MiB

    def readable(self):
        return True

    def readinto(self, b):
        n = min(len(b), self.left, len(self.block))
        b[:n] = self.block[:n]
        self.left -= n
        return n


def test_hundred_megabytes_round_trip(tmp_path):
    with ServerProcess("natsbroker", ["-js", "-sd", str(tmp_path / "js")]) as server:
        base = peak_rss(server.proc.pid)

        async def main():
            nc = await nats.connect(server.url)
            try:
                obs = await nc.jetstream().create_object_store("BIG")
                info = await obs.put("blob", Pattern(SIZE))
                got = hashlib.sha256()
                res = await obs.get("blob")
                got.update(res.data)
                return info, len(res.data), got.hexdigest()
            finally:
                await nc.close()
        info, size, digest = asyncio.run(asyncio.wait_for(main(), 300))
        peak = peak_rss(server.proc.pid)
    want = hashlib.sha256()
    p = Pattern(SIZE)
    buf = bytearray(1 << 20)
    while True:
        n = p.readinto(buf)
        if not n:
            break
        want.update(buf[:n])
    assert (info.size, size, digest) == (SIZE, SIZE, want.hexdigest())
    # The server's peak memory grew by well under the object's size (what it
    # holds is the consumer's flow-control window and socket buffers toward
    # nats-py, which reassembles the object slowly).
    assert peak - base < SIZE * 0.8, (base, peak)
