"""A nats-core client that follows a cluster's fail-over, for
tests/test_cluster_failover.py (run by Python >= 3.13, like scenarios.py)::

    python failover.py URL

Connects to URL with ``no_randomize`` and ``reconnect_time_wait=0`` and
prints one JSON line per event, flushed: ``connected`` (with the port of the
server it is on and the server pool the client knows), then ``reconnected``
each time it moves (after a round trip on the new server proved it works),
``disconnected``, or ``closed`` when it gives up. It runs until stdin closes.
"""

import asyncio
import json
import sys

import nats.client


def say(**event):
    print(json.dumps(event), flush=True)


async def main(url):
    loop = asyncio.get_running_loop()
    moved = asyncio.Queue()
    nc = await nats.client.connect(url, timeout=15, no_randomize=True, reconnect_time_wait=0)
    nc.add_reconnected_callback(lambda: moved.put_nowait("reconnected"))
    nc.add_disconnected_callback(lambda: say(event="disconnected"))
    say(event="connected", port=nc.server_info.port, pool=list(nc._server_pool))
    stdin_closed = loop.run_in_executor(None, sys.stdin.read)
    while not stdin_closed.done():
        getter = asyncio.ensure_future(moved.get())
        done, _ = await asyncio.wait({getter, stdin_closed}, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
        if getter not in done:
            getter.cancel()
            if nc.status.name == "CLOSED":
                say(event="closed", pool=list(nc._server_pool))
                return
            continue
        await nc.flush(timeout=15)  # the new server answers
        say(event="reconnected", port=nc.server_info.port, pool=list(nc._server_pool))
    await nc.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
