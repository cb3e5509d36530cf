"""Registers the change feed (natsbroker.changefeed): stream mutations as JSON Lines."""

from natsbroker.discovery import PluginFactory


def _make(config):
    from natsbroker.changefeed.plugin import ChangeFeed
    return ChangeFeed(config)


changefeed = PluginFactory("changefeed", _make, order=30,
                            enabled=lambda config: config.changefeed.enabled and config.jetstream.enabled)
