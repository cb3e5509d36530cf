"""Registers the server-side Object Store API (natsbroker.objstore), with JetStream."""

from natsbroker.discovery import PluginFactory


def _make(config):
    from natsbroker.objstore.plugin import ObjectStoreAPI
    return ObjectStoreAPI(config)


objstore = PluginFactory("objstore", _make, order=20,
                          enabled=lambda config: config.jetstream.enabled)
