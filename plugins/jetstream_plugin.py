"""Registers the JetStream plugin (plugins/jetstream/) when JetStream is enabled.

Twisted's plugin discovery scans only the modules directly in ``plugins/``;
the implementation lives in the ``natsbroker.plugins.jetstream`` package.
"""

from natsbroker.plugin import PluginFactory


def _make(config):
    from natsbroker.plugins.jetstream.plugin import JetStream
    return JetStream(config)


jetstream = PluginFactory("jetstream", _make, order=10,
                          enabled=lambda config: config.jetstream.enabled)
