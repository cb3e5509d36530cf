"""Registers JetStream (natsbroker.jetstream) when JetStream is enabled."""

from natsbroker.discovery import PluginFactory


def _make(config):
    from natsbroker.jetstream.plugin import JetStream
    return JetStream(config)


jetstream = PluginFactory("jetstream", _make, order=10,
                          enabled=lambda config: config.jetstream.enabled)
