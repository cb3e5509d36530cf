"""The broker's plugin drop-in package, installed as ``natsbroker.plugins``.

Like ``twisted/plugins``: every module here, and in any ``natsbroker/plugins``
directory (without ``__init__.py``) on ``sys.path``, is scanned for objects
providing ``natsbroker.interfaces.IBrokerPluginFactory``. The built-in ones are
small factories; their implementations live in natsbroker's packages
(``natsbroker.jetstream``, ``natsbroker.system`` ...) and use only
``natsbroker.interfaces`` and the broker's public API.
"""

from twisted.plugin import pluginPackagePaths

# In a source tree the repository root is on sys.path (editable installs, tests),
# which makes this directory importable as a bare `plugins` as well: every module
# would then exist twice, under two names, with two sets of globals.
if __name__ != "natsbroker.plugins":
    raise ImportError("import natsbroker.plugins, not %s" % __name__)

__path__.extend(pluginPackagePaths(__name__))
__all__ = []
