"""Registers the system account's $SYS events and requests (natsbroker.system.plugin)."""

from natsbroker.discovery import PluginFactory


def _make(config):
    from natsbroker.system.plugin import SystemAccount
    return SystemAccount(config)


system = PluginFactory("system", _make, order=20)
