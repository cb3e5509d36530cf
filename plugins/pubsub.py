"""Registers core NATS pub/sub (PUB, HPUB, SUB, UNSUB) (natsbroker.pubsub)."""

from natsbroker.discovery import PluginFactory


def _make(config):
    from natsbroker.pubsub import PubSub
    return PubSub(config)


pubsub = PluginFactory("pubsub", _make, order=0)
