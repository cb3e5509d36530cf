"""pytest fixtures for tests that need a NATS server: natsbroker processes on
ephemeral ports (registered as the ``natsbroker`` pytest11 plugin; turn it
off with ``-p no:natsbroker``).

* ``natsbroker_server``: a broker with JetStream, its store in the test's
  temporary directory; ``.url`` for clients, ``.http_url`` for monitoring.
* ``natsbroker_factory``: ``natsbroker_factory(config_text=None, **options)``
  starts a broker with your config text, flags (``args=[...]``) or any
  :class:`natsbroker.embed.BrokerProcess` option; all stop at teardown.
* ``natsbroker_cluster``: three brokers meshed in one cluster
  (``.urls``, ``[i].url``).

Work directories (config, log, store) are under pytest's ``tmp_path``, so
a failed test's broker log stays there to read.
"""

import pytest

from natsbroker import embed


@pytest.fixture
def natsbroker_factory(tmp_path_factory):
    """Start brokers with custom configs; every one is stopped at teardown."""
    started = []

    def make(config_text=None, **options):
        options.setdefault("workdir", tmp_path_factory.mktemp("natsbroker"))
        broker = embed.BrokerProcess(config_text, **options)
        started.append(broker)
        return broker.start()

    yield make
    for broker in reversed(started):
        broker.stop()


@pytest.fixture
def natsbroker_server(natsbroker_factory):
    """A running broker with JetStream (store in a temporary directory)."""
    return natsbroker_factory(jetstream=True)


@pytest.fixture
def natsbroker_cluster(tmp_path_factory):
    """Three brokers routed to each other (JetStream off)."""
    with embed.Cluster(3, name="pytest", workdir=tmp_path_factory.mktemp("natsbroker-cluster")) as c:
        yield c
