"""Run a test module's scenarios against nats-server and natsbroker alike.

A module does ``server = both_servers("kv")`` to get a module-scoped
``server`` fixture (one process per kind, its own store directory) and
decorates each test with ``@both()``.
"""

import asyncio

import nats
import pytest

from tests.support.servers import ServerProcess


async def connect_js(url, api_timeout):
    """A nats-py connection that fails fast when its server dies (no
    reconnect), and its JetStream context."""
    nc = await nats.connect(url, allow_reconnect=False, connect_timeout=10)
    return nc, nc.jetstream(timeout=api_timeout)


def both(broker_xfail=None):
    """Run against both servers; ``broker_xfail`` marks natsbroker's run a strict xfail."""
    broker = "natsbroker"
    if broker_xfail:
        broker = pytest.param(broker, marks=pytest.mark.xfail(strict=True, reason=broker_xfail))
    return pytest.mark.parametrize("server", ["nats-server", broker], indirect=True)


def both_servers(prefix):
    """A module-scoped ``server`` fixture for ``@both()`` tests."""
    @pytest.fixture(scope="module")
    def server(request, tmp_path_factory):
        store = tmp_path_factory.mktemp("%s-%s" % (prefix, request.param))
        with ServerProcess(request.param, ["-js", "-sd", str(store)]) as s:
            s.kind_name = request.param
            asyncio.run(asyncio.wait_for(_anchor(s, "anchor." + prefix), 40))
            yield s
    return server


async def _anchor(server, subject):
    """A stream that lives as long as the server.

    When an account's last stream is deleted nats-server removes its stream
    directory, and a stream created right then can fail with 500/10049 "error
    creating store for stream" (mkdir .../$G/streams: no such file or
    directory). Keeping one stream around keeps the directory.
    """
    nc = await nats.connect(server.url)
    try:
        await nc.jetstream().add_stream(name="ANCHOR", subjects=[subject], storage="file")
    finally:
        await nc.close()
