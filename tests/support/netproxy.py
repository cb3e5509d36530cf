"""A TCP link between two servers that a test can cut and heal: a network
partition on one machine, without privileges.

:class:`Link` listens on a loopback port of its own and forwards every
connection made to it to ``target``. :meth:`Link.cut` stops the traffic as
a dropped network does (iptables DROP): nothing is lost or closed, no byte
moves either way, and a connection made meanwhile waits unanswered; what
was sent is delivered on :meth:`Link.heal`, as TCP retransmits it once the
network is back. A route dialed through a link is then as partitioned as the
machine behind it would be.
"""

import asyncio

from tests.support.servers import free_port


class Link:
    def __init__(self, target_port, host="127.0.0.1"):
        self.host = host
        self.target_port = target_port
        self.port = None
        self._open = asyncio.Event()
        self._open.set()
        self._server = None
        self._tasks = set()
        self._writers = set()

    async def start(self):
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def cut_off(self):
        return not self._open.is_set()

    def cut(self):
        self._open.clear()

    def heal(self):
        self._open.set()

    async def close(self):
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader, writer):
        self._writers.add(writer)
        await self._open.wait()  # (a dial across a cut waits, as a SYN would)
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.add(up_writer)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            t = asyncio.ensure_future(self._pump(src, dst))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)

    async def _pump(self, reader, writer):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await self._open.wait()
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def unused_port():
    """A port nothing listens on (a route advertised there leads nowhere)."""
    return free_port()
