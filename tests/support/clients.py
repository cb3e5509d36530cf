"""nats-py clients in tests: an ordered flush.

nats-py 2.16's ``flush()`` writes its PING straight to the socket, ahead of
commands still queued for its flusher task (a SUB just made, a PUB). The
PONG can then come back before the server has seen them: a publish from
another connection finds no subscriber (nats-server, whose connections run
on their own goroutines, loses that race under load: a no-responders status
instead of the request), or a count read from the monitoring port misses
the message. A test that relies on a flush for ordering uses ``flushed``.
"""

from tests.support.wait import eventually_async


async def flushed(nc, timeout=10):
    """Return once the server has processed everything ``nc`` sent before.

    The flusher task writes the queued commands first (``pending_data_size``
    drops to 0 once it has), so the PING follows them on the wire."""
    await eventually_async(lambda: nc.pending_data_size == 0, timeout=timeout, interval=0.001,
                           what="nats-py's flusher to write the queued commands")
    await nc.flush(timeout)
