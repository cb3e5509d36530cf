"""The broker's plugin drop-in package.

Like ``twisted/plugins``: every module here (and in any other ``plugins``
directory on ``sys.path``) is scanned for objects providing
``natsbroker.interfaces.IBrokerPluginFactory``. Built-in features live here and
use only ``natsbroker.interfaces`` and the broker's public API.
"""

from twisted.plugin import pluginPackagePaths

__path__.extend(pluginPackagePaths(__name__))
__all__ = []
